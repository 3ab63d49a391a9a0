"""Periodic duties: "call this every N seconds until told to stop", and one thread for many.

1. ``TimerLoop`` is one duty: its tick, its interval, its first wait, its error callback and
   its own stop. Alone it runs on a named daemon thread of its own; given ``host=`` (a
   ``Timers``) it runs on that shared thread instead, with the same behaviour.
2. ``Timers`` is one thread running many loops, each on its own schedule: the loop due
   first runs next, so a loop held up by another's long tick runs as soon as that tick
   ends and a short interval cannot crowd out a long one — none is starved. A worker's cheap
   duties (scheduler, reaper, leader election, periodic poller, history, slow-job and
   affinity samplers, log flush) share one, so its thread count does not grow with each
   feature. What must not wait behind another duty's slow tick keeps a thread of its own
   (the heartbeat; a processor's blocking fetch).
3. The first call comes one interval after ``start`` (or after ``first_wait``): periodic
   components must not all hit Redis the instant a process boots.
4. The interval may be a function, asked before every wait, so a loop whose period varies
   (the scheduler's randomised poll, a backoff while Redis is down) uses the same primitive.
5. A tick that raises is handed to ``on_error`` and the loop goes on: one bad cycle must
   not stop a periodic component for the life of the process.
6. Time comes from a ``Clock`` (``wurk.runtime.clock``): the real one, or a test's
   ``ManualClock``, which runs a loop's ticks when the test advances it.
7. ``stop`` takes the loop off its schedule at once (a wait never delays it) and waits up
   to its timeout for a tick of its own in progress — never for another loop's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .. import payload as P
from .clock import SYSTEM, Clock

__all__ = ["Interval", "TimerLoop", "Timers"]

log = logging.getLogger("wurk")

Interval = float | Callable[[], float]

# When an interval function raises, wait this long before trying again: long enough not to
# spin on a persistent error, short enough that the loop recovers quickly.
INTERVAL_ERROR_WAIT = 1.0
# How long the shared thread sleeps with no loop scheduled before it looks again.
IDLE_WAIT = 1.0


class TimerLoop:
    """Calls ``tick`` every ``interval`` seconds, on a thread named ``name`` or on ``host``."""

    def __init__(self, name: str, tick: Callable[[], object], interval: Interval, *,
                 first_wait: Interval | None = None,
                 on_error: Callable[[Exception], None] | None = None,
                 host: Timers | None = None, clock: Clock = SYSTEM) -> None:
        self.name = name
        self._clock = host.clock if host is not None else clock
        self._tick = tick
        self._interval = interval
        self._first_wait = interval if first_wait is None else first_wait
        self._on_error = on_error if on_error is not None else self._log_error
        self._host = host
        self._stopping = threading.Event()
        self._started = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._started:
            raise RuntimeError(f"timer loop {self.name!r} was already started")
        self._started = True
        if self._host is not None:
            self._host.add(self)
            return
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> bool:
        """Ask the loop to end and wait up to ``timeout`` s; True once no tick of it runs and
        none will. A tick in progress finishes first: the wait is interrupted, the tick is not.
        """
        self._stopping.set()
        if self._host is not None:
            return self._host.remove(self, timeout)
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def stopped_by_host(self) -> None:
        self._stopping.set()

    def is_alive(self) -> bool:
        if self._host is not None:
            return self._host.runs(self)
        return self._thread is not None and self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` unless stopped first; True when a stop was asked. (On a
        shared thread this holds up the other loops: a hosted tick should not wait.)"""
        return self._clock.wait(self._stopping, seconds)

    # -- one turn, whichever thread runs it -------------------------------------------------
    def first_delay(self) -> float:
        return self._next_wait(self._first_wait)

    def run_once(self) -> float:
        """One tick; the seconds until the next."""
        self._safe_tick()
        return self._next_wait(self._interval)

    # -- its own thread ---------------------------------------------------------------------
    def _run(self) -> None:
        if self.wait(self.first_delay()):
            return
        while True:
            if self.wait(self.run_once()):
                return

    def _next_wait(self, interval: Interval) -> float:
        if not callable(interval):
            return float(interval)
        try:
            return float(interval())
        except Exception as exc:
            self._report(exc)
            return INTERVAL_ERROR_WAIT

    def _safe_tick(self) -> None:
        try:
            self._tick()
        except Exception as exc:
            self._report(exc)

    def _report(self, exc: Exception) -> None:
        try:
            self._on_error(exc)
        except Exception:  # the error callback itself must not end the loop
            log.exception("%s: the error callback raised", self.name)

    def _log_error(self, exc: Exception) -> None:
        log.error("%s: %s: %s", self.name, P.error_class_name(exc), P.error_message(exc),
                  exc_info=log.isEnabledFor(logging.DEBUG))


class Timers:
    """One named daemon thread running many ``TimerLoop`` s; owned by whoever made it, which
    calls ``stop`` (the thread starts with the first loop)."""

    def __init__(self, name: str, *, clock: Clock = SYSTEM) -> None:
        self.name = name
        self.clock = clock
        self._changed = threading.Condition()
        self._due: dict[TimerLoop, float] = {}  # loop → monotonic time of its next tick
        self._running: TimerLoop | None = None
        self._closing = False
        self._thread: threading.Thread | None = None

    # -- what the loops call ----------------------------------------------------------------
    def add(self, loop: TimerLoop) -> None:
        """Schedule ``loop``'s first tick (its first wait from now); starts the thread."""
        due = self.clock.monotonic() + max(0.0, loop.first_delay())
        with self._changed:
            if self._closing:
                raise RuntimeError(f"{self.name} is stopped: cannot run {loop.name!r}")
            # Looked at under the lock ``remove`` takes after a stop sets it: a loop stopped
            # before it started (a swarm child booting quiet), or while it was starting on
            # another thread, never goes on the schedule, where nothing would take it off.
            if loop.stopping:
                return
            self._due[loop] = due
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def remove(self, loop: TimerLoop, timeout: float) -> bool:
        """Take ``loop`` off the schedule; wait up to ``timeout`` for its tick in progress."""
        with self._changed:
            self._due.pop(loop, None)
            self._changed.notify_all()
            if threading.current_thread() is self._thread:
                return True  # a tick stopping a loop (maybe its own): nothing else runs now
            return self._changed.wait_for(lambda: self._running is not loop, timeout)

    def runs(self, loop: TimerLoop) -> bool:
        """Whether ``loop`` is on the schedule (or ticking) on a live thread."""
        with self._changed:
            scheduled = loop in self._due or self._running is loop
        thread = self._thread
        return scheduled and thread is not None and thread.is_alive()

    # -- the owner --------------------------------------------------------------------------
    def stop(self, timeout: float) -> bool:
        """Stop every loop left and the thread; True when the thread is gone in time."""
        with self._changed:
            self._closing = True
            loops = list(self._due)
            self._due.clear()
            self._changed.notify_all()
        for loop in loops:
            loop.stopped_by_host()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- the thread -------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            loop = self._next()
            if loop is None:
                return
            wait: float | None = None
            try:
                wait = loop.run_once()
            finally:  # a tick's BaseException ends the thread, never leaves a stop waiting
                with self._changed:
                    self._running = None
                    if wait is not None and loop in self._due and not loop.stopping:
                        self._due[loop] = self.clock.monotonic() + max(0.0, wait)
                    elif loop.stopping:  # left due, it would tick again before ``remove``
                        self._due.pop(loop, None)
                    self._changed.notify_all()

    def _next(self) -> TimerLoop | None:
        """Wait for the loop due first and mark it running; None once stopped."""
        with self._changed:
            while not self._closing:
                if not self._due:
                    self.clock.wait_on(self._changed, IDLE_WAIT)  # woken by add
                    continue
                loop = min(self._due, key=self._due.__getitem__)
                wait = self._due[loop] - self.clock.monotonic()
                if wait <= 0:
                    self._running = loop
                    return loop
                self.clock.wait_on(self._changed, wait)
            return None
