"""Where a push ends: the client's last step, selectable without touching the client.

1. A push runs normalisation, client middleware and the argument check, then hands its
   entries (payload, ``at`` or None) to a sink. With none selected the client writes to
   Redis itself (``Client._write_redis``).
2. A sink is selected process-wide, or for the current thread and the asyncio tasks it
   starts (a ``contextvars`` value), which wins. ``wurk.testing`` selects its fake and
   inline sinks this way; a ``None`` block value means "Redis here", whatever the process
   default is.
3. Selecting is explicit: nothing here changes at import.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .client import Client

__all__ = ["UNSET", "Entries", "Sink", "selected", "set_block", "set_process"]

Entries = Sequence[tuple[dict[str, Any], "float | None"]]


class Sink(Protocol):
    """Receives what a push would write: payloads already through middleware, each with
    its ``at`` (epoch seconds) or None for now."""

    def write(self, client: Client, entries: Entries) -> None: ...


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
_process: Sink | None = None
_block: contextvars.ContextVar[Sink | _Unset | None] = contextvars.ContextVar(
    "wurk_sink_block", default=UNSET)


def selected() -> Sink | None:
    """The sink for a push made here now; None means Redis."""
    block = _block.get()
    return _process if block is UNSET else block  # type: ignore[return-value]


def set_process(sink: Sink | None) -> Sink | None:
    """Select ``sink`` for every thread without a block of its own; returns the previous."""
    global _process
    previous, _process = _process, sink
    return previous


def set_block(sink: Sink | _Unset | None) -> contextvars.Token[Sink | _Unset | None]:
    """Select ``sink`` (None: Redis) for this thread and its tasks; reset with the token."""
    return _block.set(sink)


def reset_block(token: contextvars.Token[Sink | _Unset | None]) -> None:
    _block.reset(token)


def block_value() -> Sink | _Unset | None:
    return _block.get()
