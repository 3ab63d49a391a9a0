"""The innermost link of a worker's chain: opens a job's body to a time limit and a cancel.

``Stopper`` is added after every other link (``WorkerStops.install``), so what it stops is
the job's own code, never a middleware's bookkeeping. For each job it:

1. refuses to start a job whose cancel arrived before it started (``JobCancelled``) — looked
   at once the job can be found by a cancel, so one arriving as it starts is never missed;
   an iterable job is left to find the mark in its state, and to run its ``on_cancel``;
2. makes the job findable by a cancel (``Running``): sync, by opening its body on the
   processor thread's target, registered once with the thread's first job, which raises in
   the body when told; async, by registering a target of its own for its task, which is
   cancelled when told, and turning that ``CancelledError`` into the error (``JobTimeout``,
   ``JobCancelled``) — a cancellation it did not ask for (the worker's own shutdown) goes
   on as it came;
3. arms the job's time limit (``Deadlines``) when it has one: its ``timeout`` option, else
   the worker's ``job_timeout`` (off by default). A job with neither, the usual case, costs
   the time limits nothing.

A job run inline from a sync job's body (``perform_inline``) runs inside that body: the
outer job's time limit and cancel reach it, its own ``timeout`` does not apply.

A job that swallows the error and returns anyway is let be (it finished), with a warning;
one that raises an error of its own from it (``raise ExportFailed(...) from exc``, or any
error raised while handling it) ends as the stop does — a cancelled job as cancelled, never
retried, a job past its limit with ``JobTimeout``. One that swallows it and runs on is told
again (``deadlines.py``): a sync body gets ``TimeoutForced``/``CancelForced``, which its
``except Exception`` lets through, and an async job's task is cancelled again; either ends
it as the first stop would have.

A ``JobCancelled`` naming another job (a result handle's, for a cancelled job the body
waited for) leaves the body as a failure (``JobFailed``, retried as any): this job was not
cancelled, and ended as cancelled it would be neither retried nor buried — lost.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

from .. import payload as P
from ..config import Config
from ..errors import JobCancelled, JobFailed
from ..iteration.job import IterableJob
from ..log import short_id
from ..middleware import Leave
from ..options import MAX_TIMEOUT
from ..stored import shown
from .deadlines import Deadlines
from .running import AsyncTarget, Running, SyncTarget
from .stops import CancelForced, CancelRaised, TimeoutForced, TimeoutRaised, current_guard

__all__ = ["Stopper", "limit_of"]

log = logging.getLogger("wurk")



def limit_of(payload: P.Payload, default: float | None) -> float | None:
    """The job's time limit in seconds: its ``timeout`` when it is one a push accepts (above
    0, at most ``MAX_TIMEOUT``); one a payload from elsewhere got wrong is ignored, with a
    warning, and the worker's default takes its place. Compared without a conversion to
    float: an integer of hundreds of digits (JSON reads it) has none, and NaN compares
    false."""
    value = payload.get(P.TIMEOUT)
    if value is None:
        return default
    if isinstance(value, (int, float)) and not isinstance(value, bool) and \
            0 < value <= MAX_TIMEOUT:
        return float(value)
    log.warning("job %s: its timeout %s is no time limit (seconds above 0, at most %d): the "
                "worker's default (%s) applies", shown(payload.get(P.JID), 60),
                shown(repr(value), 40), MAX_TIMEOUT,
                "none" if default is None else f"{default:g} s")
    return default


def _only_its_own(exc: JobCancelled, jid: object) -> None:
    """Raise the failure a ``JobCancelled`` that names another job is, leaving the body of
    job ``jid``; return for one naming this job or none (``wurk.cancel``'s, the job's own)."""
    if exc.jid is not None and exc.jid != jid:
        raise JobFailed(exc.jid, "wurk.JobCancelled", str(exc), retries_remain=False) from exc


# How far along an error's causes the stop that caused it is looked for.
_CHAIN_LIMIT = 100


def _caused_by(exc: BaseException,
               kind: type[BaseException] | tuple[type[BaseException], ...]) -> bool:
    """Whether ``exc`` was raised from, or while handling, a ``kind`` (its ``__cause__`` /
    ``__context__`` chain: bounded, and safe from a cycle)."""
    seen: BaseException | None = exc
    for _ in range(_CHAIN_LIMIT):
        if seen is None:
            return False
        if isinstance(seen, kind):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _others_cancel(task: asyncio.Task[Any], target: AsyncTarget) -> bool:
    """The stop's own cancellations of ``task`` landed (``AsyncTarget.delivered``: one, or
    more for a job that swallowed the first): take them back (3.11+), and say whether
    another was asked for as well — the worker's shutdown cancelling the same task, which
    goes on as a cancellation rather than turning into the stop's error (the job was given
    back: booked as a failure too, it would run twice). A cancellation the stop did not
    deliver is never its own, even with a stop told."""
    uncancel = getattr(task, "uncancel", None)
    if uncancel is None:
        return False
    left = 0
    for _ in range(target.delivered):
        left = int(uncancel())
    return left > 0


class Stopper:
    """Server middleware, innermost: time limits and cancels for the job's body."""

    def __init__(self, config: Config, running: Running, deadlines: Deadlines) -> None:
        self.config = config
        self.running = running
        self.deadlines = deadlines

    def _refuse_cancelled(self, jid: Any, iterable: bool) -> None:
        """``JobCancelled`` for a job whose cancel arrived before it started. Not for an
        iterable job: its cancel is the mark in its state, which it reads as it starts and
        answers as the docs say (``on_cancel``, ``on_stop``, no item, done), as Sidekiq's
        does; refused here, it ended without either hook."""
        if not iterable and self.running.was_cancelled(jid):
            raise JobCancelled(f"job {jid} was cancelled before it started")

    def __call__(self, job: Any, payload: P.Payload, queue: str,
                 call_next: Callable[[], Any]) -> Any:
        jid = payload.get(P.JID)
        guard = current_guard()
        if guard is None or not isinstance(jid, str) or guard.run:
            # Not on a processor thread (nothing can stop it from outside), or a job its
            # body runs inline (``perform_inline``): part of that body, which stays open on
            # the guard — a body of its own closed the outer one's (its time limit and a
            # cancel of it no longer reached it). The outer job's limit covers it, as
            # nothing limits an inline run outside a worker.
            self._refuse_cancelled(jid, isinstance(job, IterableJob))
            try:
                return call_next()
            except JobCancelled as exc:
                _only_its_own(exc, jid)
                raise
        target = guard.target
        if target is None:  # the thread's first job
            made = SyncTarget(guard)
            self.running.keep(made)
            target = guard.target = made
        limit = limit_of(payload, self.config.job_timeout)
        try:
            try:
                run = target.begin(jid, limit, isinstance(job, IterableJob))
                # once findable (see ``_watch``)
                self._refuse_cancelled(jid, isinstance(job, IterableJob))
                if limit is not None and isinstance(target, SyncTarget):  # it is one
                    self.deadlines.arm(target, run)
                result = call_next()
            finally:
                guard.close_body()
        except (TimeoutRaised, CancelRaised, TimeoutForced, CancelForced):
            raise target.error() from None
        except JobCancelled as exc:
            _only_its_own(exc, jid)
            raise
        except Exception as exc:  # an error of the job's own, raised from the stop?
            stop = guard.stopped_with
            if stop is not None and _caused_by(exc, (stop, TimeoutForced, CancelForced)):
                raise target.error() from exc
            raise
        if guard.stopped_with is not None:
            self._swallowed(jid, target.reason)
        return result

    async def acall(self, job: Any, payload: P.Payload, queue: str,
                    call_next: Callable[[], Any]) -> Any:
        jid = payload.get(P.JID)
        task = asyncio.current_task()
        if task is None or not isinstance(jid, str):
            self._refuse_cancelled(jid, isinstance(job, IterableJob))
            return await call_next()
        target = AsyncTarget(jid, short_id(id(task)), task, asyncio.get_running_loop(),
                             limit=limit_of(payload, self.config.job_timeout),
                             cooperative=isinstance(job, IterableJob))
        self._watch(target)
        try:
            result = await call_next()
        except asyncio.CancelledError:
            if not target.delivered or _others_cancel(task, target):
                raise  # the worker's own (its shutdown): not ours to turn into an error
            raise target.error() from None
        except JobCancelled as exc:
            _only_its_own(exc, jid)
            raise
        except Exception as exc:
            if target.delivered and _caused_by(exc, asyncio.CancelledError) and \
                    not _others_cancel(task, target):
                raise target.error() from exc
            raise
        finally:
            self._unwatch(target)
        if target.delivered:  # the cancellation reached the job, which returned all the same
            self._swallowed(jid, target.reason)
        return result

    def wurk_plan(self, job: Any, payload: P.Payload, queue: str) -> Leave | None:
        """``acall`` without its frame on the job's await chain (``wurk.middleware``)."""
        jid = payload.get(P.JID)
        task = asyncio.current_task()
        if task is None or not isinstance(jid, str):
            self._refuse_cancelled(jid, isinstance(job, IterableJob))
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
            elif isinstance(error, asyncio.CancelledError) and target.delivered \
                    and not _others_cancel(task, target):
                raise target.error() from None
            elif isinstance(error, JobCancelled):
                _only_its_own(error, target.jid)
                raise error
            elif isinstance(error, Exception) and target.delivered and \
                    _caused_by(error, asyncio.CancelledError) and not _others_cancel(task, target):
                raise target.error() from error  # an error of its own, from the stop
            else:
                raise error  # the worker's own cancel (its shutdown) goes on as it came
        finally:
            self._unwatch(target)
        if target.delivered:
            self._swallowed(target.jid, target.reason)
        return result

    def _watch(self, target: AsyncTarget) -> None:
        self.running.add(target)
        # Refused only now that a cancel can find it: a cancel is remembered before it
        # looks for the jobs running, so it is either seen here or finds this one.
        try:
            self._refuse_cancelled(target.jid, target.cooperative)
        except JobCancelled:
            self._unwatch(target)
            raise
        if target.limit is not None:
            self.deadlines.arm(target, target.run)

    def _unwatch(self, target: AsyncTarget) -> None:
        target.end()
        self.running.remove(target)

    @staticmethod
    def _swallowed(jid: str, reason: str | None) -> None:
        log.warning("job %s was told to stop (%s) but caught the error and returned; it "
                    "counts as finished", jid, reason)
