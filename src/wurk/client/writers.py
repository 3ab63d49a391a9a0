"""Where a push ends: the client's last step, selectable without touching the client.

1. A push runs normalisation, client middleware and the argument check, then hands its
   entries (payload, ``at`` or None) to a sink. With none selected the client writes to
   Redis itself (``Client._write_redis``).
2. A sink is selected process-wide, or for the current thread and the asyncio tasks it
   starts (a ``contextvars`` value), which wins. ``wurk.testing`` selects its fake and
   inline sinks this way; a ``None`` block value means "Redis here", whatever the process
   default is.
3. Selecting is explicit: nothing here changes at import.
4. The fake mode's store of kept pushes is registered here when that mode is first chosen,
   so ``resize.jobs`` / ``resize.drain()`` reach it without the job module importing
   ``wurk.testing`` (which builds on the job module).
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from typing import Any, Protocol

from ..config import Config

__all__ = ["UNSET", "Entries", "KeptJobs", "Sink", "keep_in", "kept", "selected", "set_block",
           "set_process"]

Entries = Sequence[tuple[dict[str, Any], "float | None"]]


class Sink(Protocol):
    """Receives what a push would write: payloads already through middleware, each with
    its ``at`` (epoch seconds) or None for now."""

    def write(self, config: Config, entries: Entries) -> None: ...


class KeptJobs(Protocol):
    """What the fake mode keeps, as the job methods (``jobs``, ``drain``…) reach it."""

    def jobs(self, *, queue: str | None = None,
             name: str | None = None) -> list[dict[str, Any]]: ...

    def drain(self, name: str | None = None) -> int: ...

    def perform_one(self, name: str | None = None) -> Any: ...

    def clear(self, name: str | None = None, *, queue: str | None = None) -> None: ...


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
_process: Sink | None = None
_block: contextvars.ContextVar[Sink | _Unset | None] = contextvars.ContextVar(
    "wurk_sink_block", default=UNSET)


_kept: KeptJobs | None = None


def keep_in(store: KeptJobs) -> None:
    """Register the fake mode's store (done when that mode is chosen)."""
    global _kept
    _kept = store


def kept() -> KeptJobs:
    """The fake mode's store; an error saying how to switch it on when it never was."""
    if _kept is None:
        raise RuntimeError(
            "no pushes are kept: wurk.testing's fake mode was never switched on in this "
            "process; use `with wurk.testing.fake():` or wurk.testing.set_mode('fake')")
    return _kept


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
