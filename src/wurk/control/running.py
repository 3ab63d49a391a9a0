"""The jobs a worker runs now, as things that can be stopped: by a time limit or a cancel.

1. A ``Target`` is what runs a job and can stop it: a sync job stops through its
   processor's guard (an exception raised in its body), an async one through its task
   (cancelled on its loop, the link turning the ``CancelledError`` into the error). An
   iterable job is stopped cooperatively instead: a cancel reaches it through its state's
   ``cancelled`` field, which it reads at its next flush.
2. A target watches one **run** of a job at a time (``run``; 0 when none): a stop names the
   run it is for and does nothing to any other. A processor thread has one ``SyncTarget``
   for all its jobs, registered at its first, so a sync job's start registers nothing (its
   run is the guard's); an async job has a target of its own.
3. ``Running`` holds the targets (a jid may run twice at once: a duplicate after a crash),
   and remembers the jids cancelled lately, so a job this process fetches after the cancel
   arrived is stopped before its body runs.
4. A target that does not stop within ``STUCK_AFTER`` seconds of being told — a sync job
   that caught the error and runs on, or inside C code that never returns to Python; an
   async job that swallowed its cancellation — is marked stuck: the Busy page shows it, a
   warning is logged and the ``on_stuck`` observers hear of it (metrics). It is then told
   again (``force``): a sync job gets a ``BaseException`` its ``except Exception`` lets
   through, an async job's task is cancelled again — and again at each later check while it
   runs on (``Deadlines``). It is never abandoned silently, and never killed (CPython cannot
   kill a thread): one that swallows every stop ends only when it returns or its process
   exits (a shutdown gives its job back to its queue).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from ..errors import JobCancelled, JobTimeout
from .stops import CancelForced, CancelRaised, JobGuard, TimeoutForced, TimeoutRaised

__all__ = ["REMEMBER_CANCELS", "STUCK_AFTER", "AsyncTarget", "Running", "SyncTarget",
           "Target"]

log = logging.getLogger("wurk")

# Seconds a job may take to stop once told, before it is reported as stuck.
STUCK_AFTER = 2.0
# Seconds a cancel is remembered for jobs this process has not started yet.
REMEMBER_CANCELS = 300.0

TIMEOUT, CANCEL = "timeout", "cancel"

_RAISED = {TIMEOUT: TimeoutRaised, CANCEL: CancelRaised}
_FORCED = {TIMEOUT: TimeoutForced, CANCEL: CancelForced}
_REASONS: dict[type[BaseException] | None, str] = {TimeoutRaised: TIMEOUT, CancelRaised: CANCEL}


class Target:
    """What runs a job and can tell it to stop."""

    jid: str
    limit: float | None  # the run's time limit, seconds (None: none)
    cooperative: bool  # an iterable job: cancelled through its state
    stuck_run = 0  # the run reported stuck
    forced = 0  # how many times that run was told again (the time-limit thread's count)

    @property
    def run(self) -> int:
        """The run watched now; 0 when none."""
        raise NotImplementedError

    @property
    def reason(self) -> str | None:
        """Why the run was told to stop (``"timeout"``, ``"cancel"``); None if it was not."""
        raise NotImplementedError

    @property
    def busy_id(self) -> str:
        """Its key in the process's work map."""
        raise NotImplementedError

    @property
    def stuck(self) -> bool:
        """Its run was told to stop and did not."""
        run = self.run
        return run != 0 and self.stuck_run == run

    def while_running(self, run: int, action: Callable[[], object]) -> bool:
        """Call ``action`` if run ``run`` is still the one watched, that run kept from ending
        until it returns; True if called. A stuck mark made through it lands on that run's
        entry in the work map, which its end clears — never on the next job's entry (a thread
        id, reused), nor left behind for a task id that is gone."""
        if self.run != run or run == 0:
            return False
        action()
        return True

    def stop(self, reason: str, run: int) -> bool:
        """Tell run ``run`` to stop; False when it cannot be told (already told, outside its
        body, an iterable job's cancel, or that run is over)."""
        if reason == CANCEL and self.cooperative:
            return False
        return self._tell(reason, run)

    def _tell(self, reason: str, run: int) -> bool:
        raise NotImplementedError

    def force(self, run: int) -> bool:
        """Tell run ``run`` again, for the reason it was first told: it was told and runs on
        (it caught the error, or swallowed its cancellation). False when that run is over,
        was never told, or cannot be told now (a shutdown's interrupt is pending)."""
        raise NotImplementedError

    def error(self) -> Exception:
        """The error the job ends with, once stopped."""
        if self.reason == TIMEOUT:
            return JobTimeout(f"job {self.jid} ran past its time limit of {self.limit or 0:g} s",
                              seconds=self.limit)
        return JobCancelled(f"job {self.jid} was cancelled while it ran", jid=self.jid)


class SyncTarget(Target):
    """A processor thread's jobs, one after another: its run is its guard's open body, and
    a stop is raised in that body by the guard (under its lock, so a stop meant for one job
    never reaches the next)."""

    def __init__(self, guard: JobGuard) -> None:
        self.guard = guard
        self.jid = ""
        self.limit = None
        self.cooperative = False

    @property
    def run(self) -> int:
        return self.guard.run

    @property
    def reason(self) -> str | None:
        return _REASONS.get(self.guard.stopped_with)

    @property
    def busy_id(self) -> str:
        return self.guard.thread_id or ""

    def begin(self, jid: str, limit: float | None, cooperative: bool) -> int:
        """The thread's next job enters its body: its run number. Called by the thread
        itself, between two runs (nothing reads these while ``run`` is 0)."""
        self.jid = jid
        self.limit = limit
        self.cooperative = cooperative
        return self.guard.open_body()

    def _tell(self, reason: str, run: int) -> bool:
        return self.guard.stop_body(_RAISED[reason], run)

    def force(self, run: int) -> bool:
        reason = self.reason
        return reason is not None and self.guard.force_body(_FORCED[reason], run)

    def while_running(self, run: int, action: Callable[[], object]) -> bool:
        return self.guard.while_open(run, action)


# Tells to async targets come from two threads (the time limits', the cancels').
_TELLING = threading.Lock()


class AsyncTarget(Target):
    """One async job: its task, cancelled on its loop when told."""

    def __init__(self, jid: str, busy_id: str, task: asyncio.Task[Any],
                 loop: asyncio.AbstractEventLoop, *, limit: float | None,
                 cooperative: bool = False) -> None:
        self.jid = jid
        self._busy_id = busy_id
        self.limit = limit
        self.cooperative = cooperative
        self.task = task
        self.loop = loop
        self._run = 1
        self._reason: str | None = None
        # How many times its task was cancelled (on the loop) for the stop: each one is
        # taken back (``Task.uncancel``) when the cancellation ends the job.
        self.delivered = 0

    @property
    def run(self) -> int:
        return self._run

    @property
    def reason(self) -> str | None:
        return self._reason

    @property
    def busy_id(self) -> str:
        return self._busy_id

    def end(self) -> None:
        """Its job left its body: no stop reaches it any more (under the lock: a stuck mark
        being made for it is finished first, so the end of its task clears it)."""
        with _TELLING:
            self._run = 0

    def while_running(self, run: int, action: Callable[[], object]) -> bool:
        with _TELLING:
            if run == 0 or self._run != run:
                return False
            action()
            return True

    def _cancel(self, run: int) -> None:
        """On the loop: cancel the task if run ``run`` is still in its body. Its end runs on
        the loop too, so a stop that lands after it cannot cut what the task does next (the
        job's acknowledgement)."""
        if self._run == run:
            self.delivered += 1
            self.task.cancel()

    def _tell(self, reason: str, run: int) -> bool:
        with _TELLING:
            if self._run != run or self._reason is not None:
                return False
            self._reason = reason  # read on the loop when the cancellation lands: set first
            try:
                self.loop.call_soon_threadsafe(self._cancel, run)
            except RuntimeError:  # the loop is closed: the task is gone with it
                self._reason = None
                return False
            return True

    def force(self, run: int) -> bool:
        """Cancel the task again: one that swallowed its ``CancelledError`` (3.11 cancels a
        task as often as asked; each is counted, and taken back as it ends the job)."""
        with _TELLING:
            if self._run != run or run == 0 or self._reason is None:
                return False
            try:
                self.loop.call_soon_threadsafe(self._cancel, run)
            except RuntimeError:
                return False
            return True


class Running:
    """The targets in this process; the cancels remembered.

    A processor thread's target is registered once (``keep``), held weakly: it goes with its
    thread. An async job's start and end add and remove its own with one dict operation
    each, keyed by the target itself (atomic in CPython; the free-threaded build locks each
    dict): they are on every async job's path and take no lock. A cancel, rare, looks
    through a copy for its jid."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()  # the cancels remembered, the threads' targets
        self._threads: weakref.WeakSet[SyncTarget] = weakref.WeakSet()
        self._targets: dict[int, Target] = {}
        self._cancelled: dict[str, float] = {}  # jid → when the cancel is forgotten
        self._clock = clock

    def keep(self, target: SyncTarget) -> None:
        """Watch a processor thread's target from now on (once, at its first job)."""
        with self._lock:
            self._threads.add(target)

    def add(self, target: Target) -> None:
        self._targets[id(target)] = target

    def remove(self, target: Target) -> None:
        self._targets.pop(id(target), None)

    def targets(self) -> list[Target]:
        """The targets running a job now."""
        with self._lock:
            threads: list[Target] = list(self._threads)
        return [target for target in threads + list(self._targets.copy().values())
                if target.run]

    def cancel(self, jid: str) -> list[tuple[Target, int]]:
        """Stop the jobs running ``jid`` here, and remember the cancel; the targets told,
        each with the run it was told in."""
        now = self._clock()
        with self._lock:
            self._cancelled[jid] = now + REMEMBER_CANCELS
            self._forget(now)
        told = []
        for target in self.targets():
            run = target.run  # read before the jid: a stop names its run, checked again
            if run and target.jid == jid and target.stop(CANCEL, run):
                told.append((target, run))
        if told:
            log.info("cancelling job %s: told %d running execution(s) to stop", jid, len(told))
        return told

    def was_cancelled(self, jid: object) -> bool:
        """Whether a cancel of ``jid`` arrived lately (read as a job starts)."""
        if not self._cancelled or not isinstance(jid, str):
            return False
        with self._lock:
            until = self._cancelled.get(jid)
            return until is not None and until > self._clock()

    def _forget(self, now: float) -> None:
        for jid in [j for j, until in self._cancelled.items() if until <= now]:
            del self._cancelled[jid]
