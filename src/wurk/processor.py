"""Running jobs: one processor thread loops fetch → run → acknowledge until told to stop.

1. ``JobRunner.run(unit)`` executes one fetched job: parse → validate → look up the registered
   job → server middleware → perform → acknowledge (Sidekiq's order: middleware sees the same).
2. Bad input never stops a thread: unparseable JSON goes raw to the dead set, an invalid
   payload to the dead set with ``wurk.InvalidPayload`` (no retry can fix it), an unknown
   job name through retry like any error (a deploy may bring it; never silently dropped).
   Nothing a payload names is imported or called. When Redis refuses even that, the job
   stays unacknowledged and goes back to its queue.
3. A job is acknowledged when it returned or its failure was booked; not when the shutdown
   interrupted it (it is already back on its queue) or when booking the failure failed.
4. ``Busy`` publishes each running job for the heartbeat's work map for exactly the time it
   runs (added and removed in one ``try/finally``, so no dashboard shows a job that ended).
5. ``Processor`` owns its thread and its fetcher; its owner (the manager) replaces it when it
   dies and interrupts it at the shutdown deadline. A failing fetch (Redis down, refusing,
   or cut) is retried with a capped backoff (``wurk.runtime.outage``); the outage is reported once
   per capsule when it starts and logged with its length when it ends. It fetches only while
   the heartbeat vouches for the process (``Heartbeat.wait_visible``).
6. ``async def`` jobs go from the processor that fetched them to its capsule's lane
   (``wurk.asyncjobs``) and run as tasks on the runner's event loop; parsing, middleware,
   logging, the busy map, retries and the ACK decision are the same code for both kinds.
7. The shutdown interrupt lands only inside a job's own frame: ``JobGuard`` sends it only
   while the job body runs, and a job leaving its body cancels one sent but not yet
   raised, so fetch, ACK and ``finally`` code never see it. An interrupted job is never
   acknowledged (the manager gave it back before interrupting).
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from types import CoroutineType
from typing import Any

import redis

from . import log as wurk_log
from . import payload as P
from .asyncjobs import AsyncLane, EventLoop, bookkeeping
from .config import Config
from .connections.lending import lend_from
from .connections.pool import RedisPool
from .control.stops import Guard, JobGuard, set_guard
from .errors import (
    InvalidPayload,
    RedisUnavailable,
    Shutdown,
    UnparseablePayload,
)
from .errors import is_shutdown as _is_shutdown
from .fetch.basic import Fetcher, UnitOfWork
from .job import (
    RUNNING,
    JobDefinition,
    Registry,
    registry,
    set_running,
    set_stop_signal,
)
from .log import JOB_FIELDS, JOB_LEVEL, job_context, job_level, short_id, tid
from .metrics.counters import Counters
from .middleware import BRIDGE_WAIT, Chain, bridge, within
from .morgue import Morgue
from .reporting import report_error
from .retry import JobRetry
from .runtime.affinity import Pinning
from .runtime.busy import Busy
from .runtime.loopwatch import LoopWatch
from .runtime.outage import Backoff, Outage

__all__ = ["JobGuard", "JobRunner", "Processor"]

log = logging.getLogger("wurk")



def _never() -> bool:
    return False


_NO_GUARD = JobGuard()
# At most this much of a payload's class or jid goes into a warning about its job.
NAME_SHOWN = 200


class JobRunner:
    """Executes fetched jobs through ``server_middleware``: the launcher's, and a copy per
    capsule (``for_capsule``) holding that capsule's chain, sharing all else."""

    def __init__(self, config: Config, *, counters: Counters, busy: Busy,
                 jobs: Registry = registry, morgue: Morgue | None = None,
                 retry: JobRetry | None = None, loop: EventLoop | None = None) -> None:
        self.config = config
        self.jobs = jobs
        self.counters = counters
        self.busy = busy
        self.morgue = morgue or Morgue(config)
        self.retry = retry or JobRetry(config, self.morgue)
        # The chain around each job: the configuration's (the same object, edited in place
        # until it is frozen); a capsule's runner is given its own at the worker's start.
        self.server_middleware: Chain = config.server_middleware
        self.loop = loop if loop is not None else \
            EventLoop(watch=LoopWatch(config.loop_lag_warning), kind=config.event_loop)
        self.loop.watch.describe = self.describe_task

    def for_capsule(self) -> JobRunner:
        """A runner of one capsule's jobs: this one's counters, busy map, retry and loop, and
        a chain of its own to set (``server_middleware``), read once a job as this one's."""
        return copy.copy(self)

    # -- one job ----------------------------------------------------------------------------
    # Every job passes here: the steps are written out in few calls (a call costs more than
    # the work of most of them, the more so between threads handing the GIL around a job's
    # own round trips), and the context variables are set and reset as variables.
    def run(self, unit: UnitOfWork, guard: JobGuard = _NO_GUARD, *,
            lane: AsyncLane | None = None, stopping: Callable[[], bool] = _never) -> None:
        """Run one job and acknowledge it, unless the shutdown interrupted it. An async job
        goes to ``lane`` (when given) and is acknowledged there when it ends."""
        try:
            job = P.validate(P.loads(unit.raw))
        except InvalidPayload as exc:
            self._reject(unit, exc)
            return
        jid = job.get(P.JID)
        unit.jid = jid if isinstance(jid, str) else None
        definition = self.jobs.get(job[P.CLASS])  # None: the sync path books that failure
        if lane is not None and definition is not None and definition.is_async:
            self._hand_to(lane, unit, job, definition, stopping)
            return
        if self._execute(unit, job, guard, definition):
            unit.fetcher.acknowledge(unit)

    def _execute(self, unit: UnitOfWork, job: P.Payload, guard: JobGuard,
                 definition: JobDefinition | None) -> bool:
        thread_id = guard.thread_id or tid()
        busy = self.busy
        busy.add(thread_id, unit.queue, unit.raw)
        running = RUNNING.set(job)
        fields = JOB_FIELDS.set(self._log_fields(job, unit.queue))
        level = job_level(job.get(P.LOG_LEVEL))
        try:
            return self._perform_logged(job, unit.queue, guard, unit.raw, definition)
        finally:
            JOB_LEVEL.reset(level)
            JOB_FIELDS.reset(fields)
            RUNNING.reset(running)
            busy.remove(thread_id)

    def _perform_logged(self, job: P.Payload, queue: str, guard: JobGuard,
                        raw: bytes, definition: JobDefinition | None) -> bool:
        started = self._started()
        instance: Any = None
        try:
            if definition is None:
                definition = self.jobs.lookup(job[P.CLASS])  # raises JobNotRegistered
            call = definition.call
            instance = definition.instantiate(job)

            def perform() -> Any:
                # The arguments as they are now: a server link may hand the job others (the
                # encrypted argument opened, ``wurk.crypto``).
                result = call(instance, job[P.ARGS])
                if isinstance(result, CoroutineType):  # a sync def returning one, or no lane
                    return self._await(result)
                return result

            guard.enter()
            try:
                # An empty chain calls ``perform`` at once (``invoke`` looks).
                self.server_middleware.invoke(instance, job, queue, perform,
                                              run_async=self._bridge)
            finally:
                if guard.leave():
                    raise Shutdown("interrupted at the shutdown deadline")
        except Exception as exc:
            if _is_shutdown(exc):
                raise
            return self._book_failure(job, exc, definition, instance, raw, started, queue)
        return self._succeeded(started)

    # -- the steps both kinds share ---------------------------------------------------------
    def _started(self) -> float:
        if not self.config.skip_default_job_logging \
                and wurk_log.logger.isEnabledFor(logging.DEBUG):
            wurk_log.line(logging.DEBUG, "start")
        return time.monotonic()

    def _succeeded(self, started: float) -> bool:
        self.counters.record(failed=False)
        if not self.config.skip_default_job_logging:
            _ended(started)
            wurk_log.line(logging.INFO, "done")
        return True

    @staticmethod
    def _is_failure(exc: BaseException) -> bool:
        """A job failure to book, not the shutdown (nor KeyboardInterrupt, SystemExit or a
        cancelled task): those end the job unacknowledged."""
        return isinstance(exc, Exception) and not _is_shutdown(exc)

    def _book_failure(self, job: P.Payload, exc: Exception, definition: JobDefinition | None,
                      instance: Any, raw: bytes, started: float, queue: str) -> bool:
        """Retry or bury; False (do not acknowledge) when Redis refused that: the job goes
        back to its queue and its failure is booked next time. The failure is booked on the
        payload as it was fetched (``raw``), as Sidekiq's retry re-reads the job's string:
        what a server middleware changed in ``job`` for its run stays out of the retry."""
        self.counters.record(failed=True)
        if not self.config.skip_default_job_logging:
            _ended(started)
            wurk_log.info("fail")
        job = _as_fetched(raw, job)
        try:
            self.retry.handle(job, exc, definition=definition, instance=instance, queue=queue)
        except (RedisUnavailable, redis.RedisError) as booking_error:
            report_error(self.config, booking_error,
                         {"context": "booking a job failure", "job": job})
            return False
        except Exception as booking_error:
            return self._unbookable(job, booking_error, raw)
        report_error(self.config, exc, {"context": "Job raised exception", "job": job})
        return True

    def _unbookable(self, job: P.Payload, error: Exception, raw: bytes) -> bool:
        """The payload itself defeats the retry bookkeeping (a value no float holds…): it is
        buried as it came, rather than coming back to fail the same way forever."""
        report_error(self.config, error, {
            "context": "the failure could not be booked; the payload goes to the dead set "
                       "as it came", "job": job})
        try:
            self.morgue.bury(raw)
        except Exception as failure:
            report_error(self.config, failure, {"context": "burying an unbookable job"})
            return False
        return True

    def _reject(self, unit: UnitOfWork, exc: InvalidPayload) -> None:
        """A payload no retry can fix goes to the dead set, then is acknowledged. If Redis
        refuses that too, it stays unacknowledged: it goes back to its queue and comes by
        again, rather than being dropped or killing the thread."""
        self.counters.record(failed=True)
        try:
            if isinstance(exc, UnparseablePayload):
                self._bury(unit, exc)
            else:
                self._kill_invalid(unit, exc)
        except Exception as failure:
            report_error(self.config, failure, {
                "context": "moving a bad payload to the dead set failed; it will be retried",
                "queue": unit.queue})
            return
        unit.acknowledge()

    def _bury(self, unit: UnitOfWork, exc: UnparseablePayload) -> None:
        self.morgue.bury(unit.raw)  # as it came, bytes and all, as Sidekiq stores it
        report_error(self.config, exc, {"context": "Invalid JSON for job", "queue": unit.queue})

    def _kill_invalid(self, unit: UnitOfWork, exc: InvalidPayload) -> None:
        job = P.loads(unit.raw)
        self.retry.kill_invalid(job, exc)
        report_error(self.config, exc, {"context": "Invalid payload", "job": job})

    def _log_fields(self, job: P.Payload, queue: str) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "class": job.get(P.WRAPPED) or job[P.CLASS], "jid": job.get(P.JID), "queue": queue,
        }
        for name in self.config.logged_job_attributes:
            if name in job:
                fields[name] = job[name]
        return fields

    # -- async jobs -------------------------------------------------------------------------
    def _hand_to(self, lane: AsyncLane, unit: UnitOfWork, job: P.Payload,
                 definition: JobDefinition, stopping: Callable[[], bool]) -> None:
        unit.fetcher.hand_off(unit)
        if not lane.take_slot(stopping):
            # Quiet came while every slot was taken: it never started, so it goes back as
            # a job fetched after quiet does, first in line, ahead of those fetched with it
            # (pushed back alone now, it landed behind them at the flush).
            unit.fetcher.give_back(unit)
            return
        lane.start(unit, lambda: self._execute_async(unit, job, definition, lane.stopping))

    async def _execute_async(self, unit: UnitOfWork, job: P.Payload,
                             definition: JobDefinition, stopping: threading.Event) -> bool:
        task_id = short_id(id(asyncio.current_task()))
        set_stop_signal(stopping)  # the task's own context: interrupted() reads the lane's
        self.busy.add(task_id, unit.queue, unit.raw)
        set_running(job)  # the task's own context: nothing to reset
        job_level(job.get(P.LOG_LEVEL))  # likewise
        queue, raw = unit.queue, unit.raw
        # One coroutine for the whole run, not one calling another as on the sync path:
        # every resume of the job passes through each frame around it.
        try:
            with job_context(self._log_fields(job, queue)):
                started = self._started()
                instance: Any = None
                try:
                    instance = definition.instantiate(job)

                    def perform() -> Any:  # the arguments as they are now, as above; the
                        # job's own coroutine, not one around it: a frame less on every step
                        return definition.call(instance, job[P.ARGS])

                    chain = self.server_middleware
                    if chain:
                        await chain.ainvoke(instance, job, queue, perform)
                    else:
                        await perform()
                except Exception as exc:
                    if _is_shutdown(exc):
                        raise
                    # Booking talks to Redis: off the loop, so it runs on meanwhile.
                    return await bookkeeping(self._book_failure, job, exc, definition,
                                             instance, raw, started, queue)
                return self._succeeded(started)
        finally:
            self.busy.remove(task_id)

    def describe_task(self, task: asyncio.Task[Any]) -> str | None:
        """``Name (jid …)`` of the async job ``task`` runs, as the loop's watch names it (from
        its thread: the busy map only); None for a task running no job."""
        raw = self.busy.payload_of(short_id(id(task)))
        if raw is None:
            return None
        try:
            job = P.loads(raw)
        except InvalidPayload:  # it ran, so it parsed once: never, but a warning must not fail
            return "(a job whose payload no longer parses)"
        name = job.get(P.CLASS)
        definition = self.jobs.get(name) if isinstance(name, str) else None
        # What a payload says is cut short: it came from Redis, and a warning is one line.
        shown = definition.name if definition is not None else str(name)[:NAME_SHOWN]
        return f"{shown} (jid {str(job.get(P.JID))[:NAME_SHOWN]})"

    def _await(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """A coroutine met on a processor thread (no lane: ``perform_inline``-like use, or a
        sync def that returned one): run on the loop, waited for in slices so a shutdown
        interrupt can land here."""
        future = self.loop.submit(within(coro, _context()))
        try:
            while True:
                try:
                    return future.result(timeout=BRIDGE_WAIT)
                except TimeoutError:
                    continue
        finally:
            future.cancel()

    def _bridge(self, link: Callable[..., Coroutine[Any, Any, Any]], job: Any,
                payload: dict[str, Any], queue_name: str, rest: Callable[[], Any]) -> Any:
        """An async middleware link around a sync job: the link runs on the worker's loop,
        and its ``await call_next()`` runs the rest of the chain (the job) back in this
        thread, so the job keeps its thread's lent connection and its shutdown interrupt."""
        return bridge(self.loop.submit, link, job, payload, queue_name, rest)

    def close(self) -> None:
        """Cancel async work still running and stop the event loop thread."""
        self.loop.close()


def _as_fetched(raw: bytes, job: P.Payload) -> P.Payload:
    """The payload as it was fetched, parsed again from its bytes (it parsed before the job
    ran, so it parses now); ``job`` itself should it not."""
    try:
        return P.validate(P.loads(raw))
    except InvalidPayload:
        return job


def _context() -> contextvars.Context:
    return contextvars.copy_context()


def _ended(started: float) -> None:
    """Add ``elapsed`` (seconds, to the millisecond) to the job's log context, as Sidekiq's job
    logger does, for its ``done`` / ``fail`` line and what is logged after it. A new mapping
    (a kept line reads the one it was given when it is written); the job's end resets the
    variable to what it was before the job (``_execute``, ``job_context``)."""
    fields = JOB_FIELDS.get()
    elapsed = round(time.monotonic() - started, 3)
    JOB_FIELDS.set({**fields, "elapsed": elapsed} if fields else {"elapsed": elapsed})


def _always(timeout: float) -> bool:
    return True


class Processor:
    """One named thread: fetch, run, acknowledge, until stopped."""

    def __init__(self, *, name: str, fetcher: Fetcher, runner: JobRunner, fetch_timeout: float,
                 on_exit: Callable[[Processor, BaseException | None], None],
                 outage: Outage | None = None,
                 visible: Callable[[float], bool] | None = None,
                 pinning: Pinning | None = None,
                 lend: RedisPool | None = None,
                 lane: AsyncLane | None = None) -> None:
        self.name = name
        self.fetcher = fetcher
        self.runner = runner
        self.fetch_timeout = fetch_timeout
        self._on_exit = on_exit
        self._stop = threading.Event()
        self._stopped = False  # set with ``_stop``: what the loop reads before each job
        self._guard = Guard()
        self.current: UnitOfWork | None = None
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.outage = outage if outage is not None else Outage(runner.config, f"fetch ({name})")
        self.backoff = Backoff()
        self._visible = visible if visible is not None else _always
        self._pinning = pinning
        self._lend = lend  # the pool whose connection this thread lends its jobs
        self._lane = lane  # where its async jobs run
        self.jobs_run = 0

    def start(self) -> None:
        self.thread.start()

    def stop_fetching(self) -> None:
        """Finish the current job, then exit (quiet and stop both begin with this)."""
        self._stopped = True
        self._stop.set()

    def interrupt(self) -> bool:
        """Raise ``Shutdown`` in the thread if it is inside a job body; True if sent. Sent
        once: a second exception could land in the first one's handling."""
        return self._guard.interrupt()

    def _main(self) -> None:
        self._guard.ident = threading.get_ident()
        error: BaseException | None = None
        set_stop_signal(self._stop)  # what Job.interrupted() reads in this thread's jobs
        set_guard(self._guard)  # what the innermost link opens around a job's body
        try:
            if self._pinning is not None:
                self._pinning.enter(scout=True)
            if self._lend is None:
                self._loop()
            else:
                with lend_from(self._lend):
                    self._loop()
        except Shutdown:
            pass  # the manager requeued our job before interrupting us
        except BaseException as exc:
            error = exc
        finally:
            if self._pinning is not None:
                self._pinning.leave()
            self._flush()
            self._on_exit(self, error)

    def _loop(self) -> None:
        stopping = self._stop.is_set  # for the lane, which waits on a slot with it
        visible, fetch, run = self._visible, self.fetcher.fetch, self.runner.run
        timeout, guard, lane = self.fetch_timeout, self._guard, self._lane
        guard.thread_id = tid()
        while not self._stopped:
            if not visible(timeout):
                continue  # no heartbeat record vouches for us: a reaper would take the job back
            try:
                unit = fetch(timeout)
            except Exception as exc:
                self._fetch_failed(exc)
                continue
            if self.backoff.failures:
                self.backoff.reset()
                self.outage.ended()
            if unit is None:
                continue
            if self._stopped:
                # Fetched after quiet: back untouched, first in line, with those fetched
                # ahead (at the flush), uncounted if Redis refuses: it never ran.
                unit.fetcher.give_back(unit)
                return
            self.current = unit
            try:
                run(unit, guard, lane=lane, stopping=stopping)
            finally:
                self.current = None
            self.jobs_run += 1

    def _fetch_failed(self, exc: Exception) -> None:
        """Report the outage once, then wait longer after each failure, up to the cap."""
        self.outage.failed(exc)
        self._stop.wait(self.backoff.next_wait())

    def _flush(self) -> None:
        try:
            self.fetcher.flush()
        except Exception as exc:
            report_error(self.runner.config, exc, {"context": "flushing fetcher"})
