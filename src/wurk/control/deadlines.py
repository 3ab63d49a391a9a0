"""Time limits: one thread tells each job past its limit to stop, and reports one that does
not stop.

``Deadlines`` keeps a heap of due times. A job's limit comes due → its target is told to stop
(``JobTimeout``: a normal failure, so its retry policy applies); a target told to stop (by
its limit or by a cancel) and still running ``STUCK_AFTER`` seconds later is reported
stuck (``on_stuck``). The thread is owned by the worker's ``WorkerStops``; it waits on a
condition with a timeout (``Clock.wait_on``), so a test moves a ``ManualClock`` instead of
sleeping, and ``stop`` ends it within one wait. It starts with the first job that needs
it (a time limit, or a cancel to watch): an idle worker, or one whose jobs have no limits,
runs no extra thread.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable

from ..runtime.clock import SYSTEM, Clock
from .running import STUCK_AFTER, TIMEOUT, Target

__all__ = ["RETRY_STOP", "Deadlines"]

log = logging.getLogger("wurk")

# A target that could not be told (between its link and its body) is told again this soon.
RETRY_STOP = 0.05
# The longest wait: the loop looks at its heap at least this often.
LONGEST_WAIT = 5.0

_STOP, _CHECK = "stop", "check"


class Deadlines:
    """The time-limit thread of one worker."""

    def __init__(self, *, clock: Clock = SYSTEM,
                 on_stuck: Callable[[Target], None] | None = None) -> None:
        self.clock = clock
        self.on_stuck = on_stuck
        self._due: list[tuple[float, int, str, Target]] = []
        self._order = itertools.count()
        self._done: set[int] = set()  # ids of targets whose job ended
        self._changed = threading.Condition()
        self._stopping = False
        self._enabled = False
        self._thread: threading.Thread | None = None

    # -- what the jobs' link calls ----------------------------------------------------------
    def arm(self, target: Target) -> None:
        """Watch ``target``'s time limit (``target.limit`` seconds from now)."""
        if target.limit is None:
            return
        self._push(self.clock.monotonic() + target.limit, _STOP, target)

    def told(self, target: Target) -> None:
        """``target`` was told to stop (a cancel): check later that it did."""
        self._push(self.clock.monotonic() + STUCK_AFTER, _CHECK, target)

    def ended(self, target: Target) -> None:
        """``target``'s job left its body: nothing more to do for it."""
        if target.limit is None and target.told_at is None:
            return  # never armed nor told (most jobs): nothing here is its, no lock taken
        with self._changed:
            if any(entry[3] is target for entry in self._due):
                self._done.add(id(target))

    def _push(self, when: float, what: str, target: Target) -> None:
        with self._changed:
            self._done.discard(id(target))
            heapq.heappush(self._due, (when, next(self._order), what, target))
            if self._enabled and self._thread is None and not self._stopping:
                self._thread = threading.Thread(target=self._main, name="wurk-deadlines",
                                                daemon=True)
                self._thread.start()
            self._changed.notify()

    # -- the thread -------------------------------------------------------------------------
    def start(self) -> None:
        """From now on, the first limit or stop to watch starts the thread: a worker whose
        jobs have no time limit and are never cancelled runs none."""
        with self._changed:
            self._enabled = True

    def stop(self, timeout: float) -> None:
        with self._changed:
            self._stopping = True
            self._changed.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _main(self) -> None:
        while True:
            with self._changed:
                if self._stopping:
                    return
                due = self._take_due()
                if not due:
                    wait = (self._due[0][0] - self.clock.monotonic()) if self._due \
                        else LONGEST_WAIT
                    self.clock.wait_on(self._changed, min(max(wait, 0.0), LONGEST_WAIT))
                    continue
            for what, target in due:
                try:
                    self._handle(what, target)
                except Exception:  # one bad target must not end time limits for all
                    log.exception("time limit of job %s", target.jid)

    def _take_due(self) -> list[tuple[str, Target]]:
        now = self.clock.monotonic()
        due = []
        while self._due and self._due[0][0] <= now:
            _, _, what, target = heapq.heappop(self._due)
            if id(target) in self._done:
                if not any(entry[3] is target for entry in self._due):
                    self._done.discard(id(target))
                continue
            due.append((what, target))
        return due

    def _handle(self, what: str, target: Target) -> None:
        now = self.clock.monotonic()
        if what == _STOP:
            if target.stop(TIMEOUT, now):
                log.warning("job %s ran past its time limit of %g s: stopping it",
                            target.jid, target.limit or 0)
                self._push(now + STUCK_AFTER, _CHECK, target)
            elif target.reason is None:
                self._push(now + RETRY_STOP, _STOP, target)
            return
        if not target.stuck:
            target.stuck = True
            log.warning("job %s did not stop %g s after it was told to (%s): it is stuck, "
                        "most likely in C code that never returns to Python; it runs on "
                        "until it returns or its process exits", target.jid, STUCK_AFTER,
                        target.reason)
            if self.on_stuck is not None:
                self.on_stuck(target)
