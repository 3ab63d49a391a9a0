"""``TimerLoop``: "call this every N seconds until told to stop", written once.

1. One named daemon thread per loop, owned by whoever calls ``start``; ``stop`` wakes it at
   once (it waits on an ``Event``, never sleeps) and joins it with a timeout.
2. The first call comes one interval after ``start`` (or after ``first_wait``): periodic
   components must not all hit Redis the instant a process boots.
3. The interval may be a function, asked before every wait, so a loop whose period varies
   (the scheduler's randomised poll) uses the same primitive.
4. A tick that raises is handed to ``on_error`` and the loop goes on: one bad cycle must
   not stop a periodic component for the life of the process.

The seed's Ruby ``TimerLoop`` leaves thread creation to its host; here the loop owns its
thread, so every periodic component gets the same naming, error containment and shutdown.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from . import payload as P

__all__ = ["Interval", "TimerLoop"]

log = logging.getLogger("wurk")

Interval = float | Callable[[], float]

# When an interval function raises, wait this long before trying again: long enough not to
# spin on a persistent error, short enough that the loop recovers quickly.
INTERVAL_ERROR_WAIT = 1.0


class TimerLoop:
    """Calls ``tick`` every ``interval`` seconds on a thread named ``name``."""

    def __init__(self, name: str, tick: Callable[[], object], interval: Interval, *,
                 first_wait: Interval | None = None,
                 on_error: Callable[[Exception], None] | None = None) -> None:
        self.name = name
        self._tick = tick
        self._interval = interval
        self._first_wait = interval if first_wait is None else first_wait
        self._on_error = on_error if on_error is not None else self._log_error
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"timer loop {self.name!r} was already started")
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> bool:
        """Ask the loop to end and wait up to ``timeout`` s; True when its thread is gone.

        A tick in progress finishes first: the wait is interrupted, the tick is not.
        """
        self._stopping.set()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` unless stopped first; True when a stop was asked."""
        return self._stopping.wait(max(0.0, seconds))

    # -- the thread -------------------------------------------------------------------------
    def _run(self) -> None:
        if self.wait(self._next_wait(self._first_wait)):
            return
        while True:
            self._safe_tick()
            if self.wait(self._next_wait(self._interval)):
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

