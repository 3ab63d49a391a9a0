"""Time limits: one thread tells each job past its limit to stop, reports one that does
not stop, and tells it again.

``Deadlines`` keeps a heap of due times, each for one run of a target (``running.py``). A
job's limit comes due → its run is told to stop (``JobTimeout``: a normal failure, so its
retry policy applies); a run told to stop (by its limit or by a cancel) and still going
``STUCK_AFTER`` seconds later is reported stuck (``on_stuck``) and told again
(``Target.force``: an error ``except Exception`` does not catch, or its task cancelled
again) — the hard limit after the soft one, as Celery's. Still going at the next check, it
is told again and said so, the wait doubling from ``STUCK_AFTER`` up to ``LONGEST_FORCE``,
until its run ends. An entry whose run ended is
dropped when it comes due, and all such are swept out once they outnumber the rest: a fast
worker with a long limit on every job keeps about as many entries as it runs jobs at once,
not every job it ran within the limit.

The thread is owned by the worker's ``WorkerStops``; it waits on a condition with a
timeout (``Clock.wait_on``), so a test moves a ``ManualClock`` instead of sleeping, and
``stop`` ends it within one wait. It starts with the first job that needs it (a time
limit, or a cancel to watch): an idle worker, or one whose jobs have no limits, runs no
extra thread.
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
# The longest wait between two tellings of a run that runs on after being told to stop.
LONGEST_FORCE = 60.0
# The longest wait: the loop looks at its heap at least this often.
LONGEST_WAIT = 5.0
# The heap is swept of ended runs' entries when it grows past this, or past twice what the
# last sweep kept.
SWEEP_AT = 1024

_STOP, _CHECK = "stop", "check"


class Deadlines:
    """The time-limit thread of one worker."""

    def __init__(self, *, clock: Clock = SYSTEM,
                 on_stuck: Callable[[Target], None] | None = None) -> None:
        self.clock = clock
        self.on_stuck = on_stuck
        self._due: list[tuple[float, int, str, Target, int]] = []
        self._order = itertools.count()
        self._sweep_at = SWEEP_AT
        self._changed = threading.Condition()
        self._stopping = False
        self._enabled = False
        self._thread: threading.Thread | None = None
        self.forced_total = 0  # runs told again since the start (they ran on after a stop)

    # -- what the jobs' link calls ----------------------------------------------------------
    def arm(self, target: Target, run: int) -> None:
        """Watch the time limit of ``target``'s run ``run`` (``target.limit`` seconds from
        now)."""
        if target.limit is None:
            return
        self._push(self.clock.monotonic() + target.limit, _STOP, target, run)

    def told(self, target: Target, run: int) -> None:
        """``target``'s run ``run`` was told to stop (a cancel): check later that it did."""
        self._push(self.clock.monotonic() + STUCK_AFTER, _CHECK, target, run)

    def pending(self) -> int:
        """Entries in the heap, ended runs' included (for tests)."""
        with self._changed:
            return len(self._due)

    def _push(self, when: float, what: str, target: Target, run: int) -> None:
        with self._changed:
            if len(self._due) >= self._sweep_at:
                self._sweep()
            # The thread waits until the earliest entry: woken only for an earlier one (a
            # limit on every job would otherwise wake it at every job's start).
            earliest = not self._due or when < self._due[0][0]
            heapq.heappush(self._due, (when, next(self._order), what, target, run))
            if self._enabled and self._thread is None and not self._stopping:
                self._thread = threading.Thread(target=self._main, name="wurk-deadlines",
                                                daemon=True)
                self._thread.start()
            elif earliest:
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
            self._handle_all(due)

    def tick(self) -> int:
        """Handle what is due now, as the thread's loop does: how many entries (a test drives
        a ``Deadlines`` it never started with this and a ``ManualClock``)."""
        with self._changed:
            due = self._take_due()
        self._handle_all(due)
        return len(due)

    def _handle_all(self, due: list[tuple[str, Target, int]]) -> None:
        for what, target, run in due:
            try:
                self._handle(what, target, run)
            except Exception:  # one bad target must not end time limits for all
                log.exception("time limit of job %s", target.jid)

    def _sweep(self) -> None:
        """Drop the entries of runs that ended (the lock held)."""
        self._due = [entry for entry in self._due if entry[3].run == entry[4]]
        heapq.heapify(self._due)
        self._sweep_at = max(SWEEP_AT, 2 * len(self._due))

    def _take_due(self) -> list[tuple[str, Target, int]]:
        now = self.clock.monotonic()
        due = []
        while self._due and self._due[0][0] <= now:
            _, _, what, target, run = heapq.heappop(self._due)
            if target.run == run:  # else that run ended: nothing to do for it
                due.append((what, target, run))
        return due

    def _handle(self, what: str, target: Target, run: int) -> None:
        now = self.clock.monotonic()
        if what == _STOP:
            if target.stop(TIMEOUT, run):
                log.warning("job %s ran past its time limit of %g s: stopping it",
                            target.jid, target.limit or 0)
                self._push(now + STUCK_AFTER, _CHECK, target, run)
            elif target.reason is None and target.run == run:
                self._push(now + RETRY_STOP, _STOP, target, run)
            return
        if target.reason is None or target.run != run:
            return  # never told, or it ended meanwhile
        first = target.stuck_run != run
        if first:
            target.stuck_run = run
            target.forced = 0
        forced = target.force(run)
        if forced:
            target.forced += 1
            self.forced_total += 1
        again = min(LONGEST_FORCE, STUCK_AFTER * 2.0 ** target.forced)
        if first:
            log.warning("job %s did not stop %g s after it was told to (%s): it is stuck — "
                        "it caught the error and runs on, or it is in C code that never "
                        "returns to Python; %s", target.jid, STUCK_AFTER, target.reason,
                        "told again (where `except Exception` does not catch it)"
                        if forced else "it runs on until it returns or its process exits")
            if self.on_stuck is not None:
                self.on_stuck(target)
        elif forced:
            log.warning("job %s still runs after being told to stop (%s) %d times: it "
                        "catches every stop, or is in C code; told again, and again in %g s "
                        "until it ends (a thread cannot be killed: its process's exit ends it)",
                        target.jid, target.reason, target.forced, again)
        if target.run == run:
            self._push(now + again, _CHECK, target, run)
