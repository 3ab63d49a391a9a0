"""The innermost link of a worker's chain: opens a job's body to a time limit and a cancel.

``Stopper`` is added after every other link (``WorkerStops.install``), so what it stops is
the job's own code, never a middleware's bookkeeping. For each job it:

1. refuses to start a job whose cancel arrived before it started (``JobCancelled``);
2. registers the running job (``Running``) so a cancel can find it, and arms its time limit
   (``Deadlines``) when it has one: the job's ``timeout`` option, else the worker's
   ``job_timeout`` (off by default);
3. sync: opens the body on its processor's guard, which raises there when told; async:
   watches its task, which is cancelled when told, and turns that ``CancelledError`` into the
   error (``JobTimeout``, ``JobCancelled``) — a cancellation it did not ask for (the
   worker's own shutdown) goes on as it came.

A job that swallows the error and returns anyway is let be (it finished), with a warning.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from collections.abc import Callable
from typing import Any

from .. import payload as P
from ..config import Config
from ..errors import JobCancelled
from ..iteration.job import IterableJob
from ..log import short_id
from ..middleware import Leave
from .deadlines import Deadlines
from .running import AsyncTarget, Running, SyncTarget, Target
from .stops import CancelRaised, TimeoutRaised, current_guard

__all__ = ["Stopper", "limit_of"]

log = logging.getLogger("wurk")



def limit_of(payload: P.Payload, default: float | None) -> float | None:
    """The job's time limit in seconds: its ``timeout`` when it is a positive number (one a
    payload from elsewhere got wrong is ignored, with the worker's default in its place)."""
    value = payload.get(P.TIMEOUT)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and \
            math.isfinite(value) and value > 0:
        return float(value)
    return default


class Stopper:
    """Server middleware, innermost: time limits and cancels for the job's body."""

    def __init__(self, config: Config, running: Running, deadlines: Deadlines) -> None:
        self.config = config
        self.running = running
        self.deadlines = deadlines

    def _refuse_cancelled(self, jid: Any) -> None:
        if self.running.was_cancelled(jid):
            raise JobCancelled(f"job {jid} was cancelled before it started")

    def __call__(self, job: Any, payload: P.Payload, queue: str,
                 call_next: Callable[[], Any]) -> Any:
        jid = payload.get(P.JID)
        self._refuse_cancelled(jid)
        guard = current_guard()
        if guard is None or not isinstance(jid, str):
            return call_next()  # not on a processor thread: nothing can stop it from outside
        target = SyncTarget(jid, guard.thread_id or "", guard,
                            limit=limit_of(payload, self.config.job_timeout),
                            cooperative=isinstance(job, IterableJob))
        self._watch(target)
        try:
            try:
                guard.open_body()
                result = call_next()
            finally:
                guard.close_body()
        except (TimeoutRaised, CancelRaised):
            raise target.error() from None
        finally:
            self._unwatch(target)
        self._swallowed(target)
        return result

    async def acall(self, job: Any, payload: P.Payload, queue: str,
                    call_next: Callable[[], Any]) -> Any:
        jid = payload.get(P.JID)
        self._refuse_cancelled(jid)
        task = asyncio.current_task()
        if task is None or not isinstance(jid, str):
            return await call_next()
        target = AsyncTarget(jid, short_id(id(task)), task, asyncio.get_running_loop(),
                             limit=limit_of(payload, self.config.job_timeout),
                             cooperative=isinstance(job, IterableJob))
        self._watch(target)
        try:
            result = await call_next()
        except asyncio.CancelledError:
            if target.reason is None:
                raise  # the worker's own (its shutdown): not ours to turn into an error
            uncancel = getattr(task, "uncancel", None)  # 3.11+: the request is handled here
            if uncancel is not None:
                uncancel()
            raise target.error() from None
        finally:
            self._unwatch(target)
        self._swallowed(target)
        return result

    def wurk_plan(self, job: Any, payload: P.Payload, queue: str) -> Leave | None:
        """``acall`` without its frame on the job's await chain (``wurk.middleware``)."""
        jid = payload.get(P.JID)
        self._refuse_cancelled(jid)
        task = asyncio.current_task()
        if task is None or not isinstance(jid, str):
            return None
        target = AsyncTarget(jid, short_id(id(task)), task, asyncio.get_running_loop(),
                             limit=limit_of(payload, self.config.job_timeout),
                             cooperative=isinstance(job, IterableJob))
        self._watch(target)
        return functools.partial(self._after, task, target)

    def _after(self, task: asyncio.Task[Any], target: AsyncTarget, result: Any,
               error: BaseException | None) -> Any:
        try:
            if error is None:
                pass
            elif isinstance(error, asyncio.CancelledError) and target.reason is not None:
                uncancel = getattr(task, "uncancel", None)
                if uncancel is not None:
                    uncancel()
                raise target.error() from None
            else:
                raise error  # the worker's own cancel (its shutdown) goes on as it came
        finally:
            self._unwatch(target)
        self._swallowed(target)
        return result

    def _watch(self, target: Target) -> None:
        self.running.add(target)
        self.deadlines.arm(target)

    def _unwatch(self, target: Target) -> None:
        self.deadlines.ended(target)
        self.running.remove(target)

    @staticmethod
    def _swallowed(target: Target) -> None:
        if target.reason is not None:
            log.warning("job %s was told to stop (%s) but caught the error and returned; it "
                        "counts as finished", target.jid, target.reason)
