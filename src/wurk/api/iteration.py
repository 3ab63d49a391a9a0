"""Iterable jobs' state as ``wurk.api`` reads it: ``IterableJobQuery``.

``find(jid)`` gives the ``IterationState`` in ``it-<jid>`` (executions, cursor, runtime,
cancelled) or None when there is none; ``find_many(jids)`` the same for a page of jobs in one
round trip, a state that cannot be read as ``Invalid`` in its place (the dashboard's Busy and
Retries pages show it so, never fail on it); ``cancel(jid)`` writes Sidekiq's ``cancelled``
mark only, as Ruby's ``cancel!`` does (``wurk.cancel`` also removes a waiting job and stops
any running one). The state is Sidekiq 8's, so a job a Ruby process runs shows the same.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import stored as values
from ..config import Config, default_config
from ..errors import IterationStateError
from ..iteration import state as S
from ..iteration.control import cancel
from ..stored import Invalid

__all__ = ["IterableJobQuery"]

# Jobs whose state one round trip reads (a page of the Busy or Retries tab).
PAGE = 500


class IterableJobQuery:
    """Read and cancel iterable jobs' state: ``IterableJobQuery().find(jid)``."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or default_config()

    def find(self, jid: str) -> S.IterationState | None:
        """The state of ``jid``, None when it has none; ``wurk.StateError`` when the stored
        fields cannot be read."""
        key = self.config.keys.iteration(jid)

        def read(r: Any) -> Any:
            pipe = r.pipeline(transaction=False)
            pipe.execute_command(*S.read_command(key))
            return pipe.execute(raise_on_error=False)[0]

        reply = self.config.pool("api").run(read, idempotent=True)
        found = S.parse(jid, key, reply, url=self.config.pool("api").url)
        return found if found.exists else None

    def find_many(self, jids: Iterable[Any]) -> dict[str, S.IterationState | Invalid]:
        """The states of those of ``jids`` that have one: an unreadable one as ``Invalid``."""
        wanted = list(dict.fromkeys(j for j in jids if isinstance(j, str) and j))
        found: dict[str, S.IterationState | Invalid] = {}
        for start in range(0, len(wanted), PAGE):
            page = wanted[start : start + PAGE]

            def read(r: Any, page: list[str] = page) -> list[Any]:
                pipe = r.pipeline(transaction=False)
                for jid in page:
                    pipe.execute_command(*S.read_command(self.config.keys.iteration(jid)))
                return list(pipe.execute(raise_on_error=False))

            for jid, reply in zip(page, self.config.pool("api").run(read, idempotent=True),
                                  strict=True):
                try:
                    state = S.parse(jid, self.config.keys.iteration(jid), reply,
                                    url=self.config.pool("api").url)
                except IterationStateError as exc:
                    found[jid] = values.invalid(reply, str(exc))
                    continue
                if state.exists:
                    found[jid] = state
        return found

    def cancel(self, jid: str) -> float:
        """Sidekiq's ``cancel!``: the ``cancelled`` mark only; the epoch seconds it stands
        from."""
        return cancel(jid, config=self.config)
