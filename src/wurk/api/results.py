"""Jobs' stored results as ``wurk.api`` reads them: ``ResultQuery``.

``find(jid)`` gives the ``wurk.results.Outcome`` a job with ``result_ttl`` stored for its last
run (its value, or its failure: class, message, whether a retry is due; or "cancelled"), None
when there is none; ``find_many(jids)`` the same for a page of jobs in one round trip;
``batch(bid)`` a batch's, in the order they finished. A record that cannot be read is an
``Invalid`` in its place (the dashboard shows it so), never an exception; ``delete(jid)``
forgets one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..config import Config, default_config
from ..results.store import BATCH_READ_CAP, Outcome, batch_outcomes, find, find_many
from ..stored import Invalid

__all__ = ["ResultQuery"]


class ResultQuery:
    """Read stored results: ``ResultQuery().find(jid)``."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or default_config()

    def find(self, jid: str) -> Outcome | Invalid | None:
        """The outcome stored for ``jid``, None when there is none."""
        return find(self.config, jid)

    def find_many(self, jids: Iterable[Any]) -> dict[str, Outcome | Invalid]:
        """The outcomes of those of ``jids`` that have one."""
        return find_many(self.config, jids)

    def batch(self, bid: str, *, limit: int = BATCH_READ_CAP) -> dict[str, Outcome | Invalid]:
        """The outcomes stored by batch ``bid``'s jobs, in the order they finished."""
        return batch_outcomes(self.config, bid, limit=limit)

    def delete(self, jid: str) -> bool:
        """Forget the outcome of ``jid``; True when there was one."""
        if not isinstance(jid, str) or not jid:  # as ``find``: never another key
            raise ValueError(f"a jid is a non-empty string, not {jid!r}")
        key = self.config.keys.result(jid)
        return bool(self.config.pool("api").run(lambda r: r.delete(key)))
