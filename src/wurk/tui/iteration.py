"""A running iterable job's progress, for the Busy tab: one line made of its ``it-<jid>``
state.

1. ``iterations(config, jids)``: the state of each jid that has one, read by
   ``wurk.api.iteration.IterableJobQuery.find_many`` (one round trip of ``HMGET``s of four
   fields: a hostile hash of a million fields costs what a real one does); a state that
   cannot be read is an ``Invalid`` in its place. A jid that cannot be one (longer than 64
   characters, spaces or control characters) is not looked up.
2. ``summary(state)``: ``run 2 · cursor {"offset": 500} · 12.5s iterating · cancelled``,
   the cursor written as bounded JSON (``wurk.tui.text.brief``).
This module is the one place the terminal UI reads iteration state.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..api.iteration import IterableJobQuery
from ..config import Config
from ..iteration.state import IterationState
from ..stored import Invalid
from . import text as T

__all__ = ["iterations", "summary"]

CURSOR_LIMIT = 80
# A jid as Sidekiq and wurk write them is 24 hex digits; other writers use other forms,
# none of them long or with characters a key should not hold.
_JID = re.compile(r"[\x21-\x7e]{1,64}")


def iterations(config: Config, jids: Sequence[object]) -> dict[str, IterationState | Invalid]:
    """The iteration state of each jid that has one (one round trip for all)."""
    wanted = [jid for jid in jids if isinstance(jid, str) and _JID.fullmatch(jid)]
    if not wanted:
        return {}
    return IterableJobQuery(config).find_many(wanted)


def summary(state: IterationState | Invalid) -> str:
    """One line a person reads at a glance."""
    if isinstance(state, Invalid):
        return str(state)
    parts = [f"run {state.executions:,}"]
    if state.cursor is not None:
        parts.append(f"cursor {T.brief(state.cursor, CURSOR_LIMIT)}")
    parts.append(f"{state.runtime:,.1f}s iterating")
    if state.cancelled:
        parts.append("cancelled")
    return " · ".join(parts)
