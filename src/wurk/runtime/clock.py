"""Time as the periodic duties see it: the real clock, or one a test moves by hand.

1. ``Clock`` is real time: ``monotonic()`` and ``wait(event, seconds)`` / ``wait_on(condition,
   seconds)`` with Python's own primitives. ``SYSTEM`` is the one every duty uses unless
   given another.
2. ``ManualClock`` stands still until ``advance(seconds)``; every wait whose deadline that
   passes returns then (an event set, or a condition notified, wakes it as usual). A test
   of a timer, the scheduler or a leader advances time and asserts what happened — never
   sleeps and counts. Its waits still end after ``REAL_WAIT_CAP`` seconds of real time, so
   a test that forgets to advance fails instead of hanging. ``waiting()`` counts the waits
   in progress: a test advances once the loop it drives waits again, so each deadline
   counts from the moment the loop meant, not from after the advance.
"""

from __future__ import annotations

import threading
import time

__all__ = ["SYSTEM", "Clock", "ManualClock"]

# A ManualClock's wait gives up after this much real time: far longer than any step of a
# test on a loaded machine, short enough that a stuck test fails in its own timeout.
REAL_WAIT_CAP = 30.0


class Clock:
    """Real time."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait up to ``seconds`` for ``event``; whether it is set."""
        return event.wait(max(0.0, seconds))

    def wait_on(self, condition: threading.Condition, seconds: float | None) -> None:
        """Wait on ``condition`` (held by the caller) up to ``seconds`` or until notified."""
        condition.wait(seconds)


SYSTEM = Clock()


class ManualClock(Clock):
    """A clock that moves only when told: for tests."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._moved = threading.Condition()
        self._conditions: set[threading.Condition] = set()
        self._waits = 0

    def monotonic(self) -> float:
        return self._now

    def waiting(self) -> int:
        """How many waits on this clock are in progress now."""
        with self._moved:
            return self._waits

    def _enter(self, condition: threading.Condition) -> None:
        with self._moved:
            self._conditions.add(condition)
            self._waits += 1

    def _leave(self, condition: threading.Condition) -> None:
        with self._moved:
            self._conditions.discard(condition)
            self._waits -= 1

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every wait, which looks at its deadline again."""
        with self._moved:
            self._now += seconds
            conditions = list(self._conditions)
            self._moved.notify_all()
        for condition in conditions:
            with condition:
                condition.notify_all()

    def wait(self, event: threading.Event, seconds: float) -> bool:
        give_up = time.monotonic() + REAL_WAIT_CAP
        with self._moved:
            deadline = self._now + max(0.0, seconds)
            self._waits += 1
            try:
                while not event.is_set() and self._now < deadline:
                    left = give_up - time.monotonic()
                    if left <= 0:
                        break
                    # Setting an event notifies nobody here: look again every few milliseconds.
                    self._moved.wait(min(left, 0.005))
            finally:
                self._waits -= 1
        return event.is_set()

    def wait_on(self, condition: threading.Condition, seconds: float | None) -> None:
        self._enter(condition)
        try:
            condition.wait(REAL_WAIT_CAP if seconds is None else min(REAL_WAIT_CAP, 1.0))
        finally:
            self._leave(condition)
