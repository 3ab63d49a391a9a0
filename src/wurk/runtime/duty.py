"""A periodic duty that talks to Redis: its tick every interval, and what happens when Redis
fails — in one place, for the scheduler, reaper, leader election, periodic poller, history
sampler and heartbeat.

1. ``Duty`` runs ``tick`` on a ``TimerLoop`` (``wurk.runtime.timer``): on a shared thread
   when given ``host=`` (a ``Timers``), else on a thread of its own.
2. A tick that raises starts (or continues) an outage: the first failure is reported, the
   rest only counted, its end logged with its length (``Outage``); the wait before the next
   try is drawn by a ``Backoff`` and reset by the next success.
3. The wait after a tick: ``interval()`` while healthy. While failing, a duty that must
   notice Redis's return soon (``retry_early``: leader election, the periodic poller,
   history, the heartbeat) waits its backoff instead; the others (the scheduler, the
   reaper) never come round sooner than their interval, and later while the backoff is
   longer. ``wake_by()``, when given, caps the wait either way (the leader wakes when its
   term lapses, to say so).
4. ``run()`` is one tick with that accounting, from any thread: what the loop calls, and
   what a test calls instead of waiting for the loop. ``next_wait()`` says what the loop
   would wait now.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from .clock import SYSTEM, Clock
from .outage import Backoff, Outage
from .timer import Interval, TimerLoop, Timers

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["Duty"]

log = logging.getLogger("wurk")


class Duty:
    """``tick`` every ``interval`` seconds (a number, or a function asked before each wait);
    ``component`` names it in outage reports."""

    def __init__(self, config: Config, name: str, tick: Callable[[], object],
                 interval: Interval, *, component: str, first_wait: Interval | None = None,
                 retry_early: bool = True, host: Timers | None = None,
                 on_failure: Callable[[Exception], None] | None = None,
                 wake_by: Callable[[], float | None] | None = None,
                 clock: Clock = SYSTEM) -> None:
        self.name = name
        self.outage = Outage(config, component)
        self.backoff = Backoff()
        self._tick = tick
        self._interval = interval
        self._retry_early = retry_early
        self._on_failure = on_failure
        self._wake_by = wake_by
        self._timer = TimerLoop(name, self.run, self.next_wait, first_wait=first_wait,
                                on_error=self._loop_error, host=host, clock=clock)

    # -- the loop ---------------------------------------------------------------------------
    def start(self) -> None:
        self._timer.start()

    def stop(self, timeout: float) -> bool:
        """Stop ticking; a tick in progress finishes first. True once none runs."""
        stopped = self._timer.stop(timeout)
        if not stopped:
            log.warning("%s did not stop within %.1f s", self.name, timeout)
        return stopped

    def is_alive(self) -> bool:
        return self._timer.is_alive()

    @property
    def stopping(self) -> bool:
        return self._timer.stopping

    # -- one tick ---------------------------------------------------------------------------
    def run(self) -> bool:
        """One tick: True when it worked (an outage in progress ends), False when it raised
        (reported or counted as part of the outage)."""
        try:
            self._tick()
        except Exception as exc:
            self.outage.failed(exc)
            self.backoff.next_wait()
            if self._on_failure is not None:
                self._on_failure(exc)
            return False
        self.backoff.reset()
        self.outage.ended()
        return True

    @property
    def failing(self) -> bool:
        return self.backoff.failures > 0

    def next_wait(self) -> float:
        """Seconds until the next tick, as the rules above say."""
        if self.failing and self._retry_early:
            wait = self.backoff.wait
        else:
            wait = float(self._interval() if callable(self._interval) else self._interval)
            if self.failing:
                wait = max(wait, self.backoff.wait)
        cap = self._wake_by() if self._wake_by is not None else None
        return wait if cap is None else min(wait, cap)

    def _loop_error(self, exc: Exception) -> None:  # only an interval function gets here
        log.error("%s: %s", self.name, exc)
