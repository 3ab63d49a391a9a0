"""Waiting for what a test expects, never for a fixed time.

1. ``wait_until(predicate, timeout)`` looks every few milliseconds until the predicate holds;
   the timeout is generous (a loaded machine never reaches it), so a test passes as soon as
   the thing happened and fails only when it did not happen at all.
2. ``step(clock, seconds)`` moves a ``ManualClock`` once the loops it drives wait on it
   again, so each of their deadlines counts from the moment they meant.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from wurk.runtime.clock import ManualClock

__all__ = ["step", "wait_until"]

PATIENCE = 10.0
LOOK_EVERY = 0.005


def wait_until(predicate: Callable[[], object], timeout: float = PATIENCE,
               what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        pause.wait(LOOK_EVERY)


def step(clock: ManualClock, seconds: float, *, waiters: int = 1) -> None:
    """Advance ``clock`` once at least ``waiters`` waits are in progress on it."""
    wait_until(lambda: clock.waiting() >= waiters, what=f"{waiters} wait(s) on the clock")
    clock.advance(seconds)
