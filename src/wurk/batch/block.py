"""The jobs block open in this thread or task: which batch its pushes join.

1. ``Block``: one ``with batch.jobs():`` in progress — its bid and how many jobs it pushed.
2. ``current()`` / ``enter()`` / ``leave()``: a context variable, so the block covers every
   push made by the code it runs on its thread or asyncio task, and nothing else.
3. ``worker_config()``: the configuration of the worker running the current job (set by
   the batch server middleware), for code a job runs that needs its Redis.
4. ``split(block, entries)``: which of the jobs a push is about to write belong to the
   block (the client middleware gave them its bid); the block's writer
   (``wurk.batch.accounting.BlockWriter``) pushes those with the batch's script, which
   registers them in the same round trip.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from typing import Any

from .. import payload as P

__all__ = ["WORKER_CONFIG", "Block", "ReadsWorkerConfig", "current", "enter", "leave", "split",
           "worker_config"]

Entry = tuple[dict[str, Any], "float | None"]


class Block:
    """One open jobs block."""

    __slots__ = ("bid", "pushed")

    def __init__(self, bid: str) -> None:
        self.bid = bid
        self.pushed = 0  # jobs written through this block (an empty block gets one)


_current: contextvars.ContextVar[Block | None] = contextvars.ContextVar(
    "wurk_batch_block", default=None)


def current() -> Block | None:
    return _current.get()


def enter(block: Block) -> contextvars.Token[Block | None]:
    return _current.set(block)


def leave(token: contextvars.Token[Block | None]) -> None:
    _current.reset(token)


# The ``Config`` of the worker running the current job: set and reset by the batch server
# middleware around every job (as the variable itself: that runs for every job).
WORKER_CONFIG: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "wurk_batch_worker_config", default=None)


def worker_config() -> Any:
    """The ``Config`` of the worker running the current job, or None outside one. Set for a
    job of a batch and for a job class marked ``ReadsWorkerConfig``; other jobs' walks leave
    the batch link out, so for them it is None."""
    return WORKER_CONFIG.get()


class ReadsWorkerConfig:
    """Marks a job class whose runs read ``worker_config()`` without being a batch's jobs
    (a batch callback): the batch link runs around them too."""


def split(block: Block, entries: Sequence[Entry]) -> tuple[list[Entry], list[Entry]]:
    """(other entries, entries of ``block``: the client middleware gave them its bid)."""
    plain: list[Entry] = []
    registered: list[Entry] = []
    for entry in entries:
        (registered if entry[0].get(P.BID) == block.bid else plain).append(entry)
    return plain, registered
