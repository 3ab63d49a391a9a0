"""Per-slot respawn schedule for the swarm: crash backoff as due times, never sleeps.

1. ``fail(slot, lifetime)`` books a crash and returns the delay before the slot may be
   respawned: ``base · 2^(n−1)`` for the n-th failure in a row, capped at ``cap``.
2. A child that lived at least ``reset_after`` seconds was healthy: its death counts as a
   fresh first failure, so only a genuine crash loop escalates toward the cap.
3. ``due()`` lists the slots whose delay has passed; the supervisor respawns them and calls
   ``consume``. Nothing here sleeps, so the supervise loop stays responsive to TERM.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["RespawnSchedule"]

# Doublings of the base counted at most (2.0 ** 1024 is no float).
MAX_DOUBLINGS = 1000


class RespawnSchedule:
    """Consecutive failures and respawn due times, per slot; owned by one thread."""

    def __init__(self, *, base: float, cap: float, reset_after: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.base = base
        self.cap = cap
        self.reset_after = reset_after
        self._clock = clock
        self._failures: dict[int, int] = {}
        self._due: dict[int, float] = {}

    def fail(self, slot: int, lifetime: float | None = None) -> float:
        """Book a failure of ``slot``; returns the delay armed before its respawn."""
        if lifetime is not None and lifetime >= self.reset_after:
            self._failures[slot] = 0
        count = self._failures.get(slot, 0) + 1
        self._failures[slot] = count
        # The exponent is bounded: 2.0 ** 1024 raises OverflowError, and a slot may crash
        # that often at the cap (1024 crashes: 8.5 h at 30 s); past 2 ** 1000 any base is.
        delay = min(self.cap, self.base * 2.0 ** min(count - 1, MAX_DOUBLINGS))
        self._due[slot] = self._clock() + delay
        return delay

    def failures(self, slot: int) -> int:
        return self._failures.get(slot, 0)

    def pending(self, slot: int) -> bool:
        return slot in self._due

    def due(self) -> list[int]:
        """Slots armed by ``fail`` whose delay has passed, in slot order."""
        now = self._clock()
        return sorted(slot for slot, at in self._due.items() if at <= now)

    def consume(self, slot: int) -> None:
        """The slot was respawned: no longer pending (its failure count stays)."""
        self._due.pop(slot, None)

    def reset(self, slot: int) -> None:
        """Forget the slot's failures (its child proved healthy)."""
        self._failures.pop(slot, None)
        self._due.pop(slot, None)

    def clear(self) -> None:
        self._failures.clear()
        self._due.clear()
