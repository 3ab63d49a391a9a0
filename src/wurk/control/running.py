"""The jobs a worker runs now, as things that can be stopped: by a time limit or a cancel.

1. A ``Target`` is one running job: a sync job stops through its processor's guard (an
   exception raised in its body), an async one through its task (cancelled on its loop,
   the link turning the ``CancelledError`` into the error). An iterable job is stopped
   cooperatively instead: a cancel reaches it through its state's ``cancelled`` field,
   which it reads at its next flush.
2. ``Running`` maps jids to targets (a jid may run twice at once: a duplicate after a
   crash), and remembers the jids cancelled lately, so a job this process fetches after the
   cancel arrived is stopped before its body runs.
3. A target that does not stop within ``STUCK_AFTER`` seconds of being told — a sync job
   inside C code that never returns to Python, an async job that swallows its cancellation —
   is marked stuck: the Busy page shows it, a warning is logged and the ``on_stuck``
   observers hear of it (metrics). It is never abandoned silently, and never killed: only
   its process's exit ends it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import JobCancelled, JobTimeout
from .stops import CancelRaised, JobGuard, TimeoutRaised

__all__ = ["REMEMBER_CANCELS", "STUCK_AFTER", "AsyncTarget", "Running", "SyncTarget",
           "Target"]

log = logging.getLogger("wurk")

# Seconds a job may take to stop once told, before it is reported as stuck.
STUCK_AFTER = 2.0
# Seconds a cancel is remembered for jobs this process has not started yet.
REMEMBER_CANCELS = 300.0

TIMEOUT, CANCEL = "timeout", "cancel"


class Target:
    """One running job that can be told to stop."""

    def __init__(self, jid: str, busy_id: str, *, limit: float | None,
                 cooperative: bool = False) -> None:
        self.jid = jid
        self.busy_id = busy_id  # its key in the process's work map
        self.limit = limit  # its time limit, seconds (None: none)
        self.cooperative = cooperative  # an iterable job: cancelled through its state
        self.reason: str | None = None
        self.told_at: float | None = None
        self.stuck = False

    def stop(self, reason: str, now: float) -> bool:
        """Tell the job to stop; False when it cannot be told (already told, or outside
        its body)."""
        if self.reason is not None or (reason == CANCEL and self.cooperative):
            return False
        self.reason = reason
        self.told_at = now
        if not self._send(reason):
            self.reason = self.told_at = None
            return False
        return True

    def _send(self, reason: str) -> bool:
        raise NotImplementedError

    def error(self) -> Exception:
        """The error the job ends with, once stopped."""
        if self.reason == TIMEOUT:
            return JobTimeout(f"job {self.jid} ran past its time limit of {self.limit:g} s",
                              seconds=self.limit)
        return JobCancelled(f"job {self.jid} was cancelled while it ran")


class SyncTarget(Target):
    def __init__(self, jid: str, busy_id: str, guard: JobGuard, *, limit: float | None,
                 cooperative: bool = False) -> None:
        super().__init__(jid, busy_id, limit=limit, cooperative=cooperative)
        self.guard = guard

    def _send(self, reason: str) -> bool:
        return self.guard.stop_body(TimeoutRaised if reason == TIMEOUT else CancelRaised)


class AsyncTarget(Target):
    def __init__(self, jid: str, busy_id: str, task: asyncio.Task[Any],
                 loop: asyncio.AbstractEventLoop, *, limit: float | None,
                 cooperative: bool = False) -> None:
        super().__init__(jid, busy_id, limit=limit, cooperative=cooperative)
        self.task = task
        self.loop = loop

    def _send(self, reason: str) -> bool:
        try:
            self.loop.call_soon_threadsafe(self.task.cancel)
        except RuntimeError:  # the loop is closed: the task is gone with it
            return False
        return True


class Running:
    """The targets running in this process; the cancels remembered.

    A job's start and end add and remove its target with one dict operation each, keyed by
    the target itself (atomic in CPython; the free-threaded build locks each dict): they are
    on every job's path and take no lock. A cancel, rare, looks through a copy for its jid."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()  # the cancels remembered
        self._targets: dict[int, Target] = {}
        self._cancelled: dict[str, float] = {}  # jid → when the cancel is forgotten
        self._clock = clock

    def add(self, target: Target) -> None:
        self._targets[id(target)] = target

    def remove(self, target: Target) -> None:
        self._targets.pop(id(target), None)

    def targets(self) -> list[Target]:
        return list(self._targets.copy().values())

    def cancel(self, jid: str) -> list[Target]:
        """Stop the jobs running ``jid`` here, and remember the cancel; the targets told."""
        now = self._clock()
        with self._lock:
            self._cancelled[jid] = now + REMEMBER_CANCELS
            self._forget(now)
        found = [target for target in self.targets() if target.jid == jid]
        told = [target for target in found if target.stop(CANCEL, now)]
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
