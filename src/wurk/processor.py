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
   or cut) is retried with a capped backoff (``wurk.outage``); the outage is reported once
   per capsule when it starts and logged with its length when it ends. It fetches only while
   the heartbeat vouches for the process (``Heartbeat.wait_visible``).
6. ``async def`` jobs run on an event loop thread owned by the runner; the processing path is
   the same for both kinds (``_await``).
"""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import inspect
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import redis

from . import log as wurk_log
from . import payload as P
from .affinity import Pinning
from .config import Config
from .errors import InvalidPayload, RedisUnavailable, Shutdown, UnparseablePayload
from .errors import is_shutdown as _is_shutdown
from .fetch import Fetcher, UnitOfWork
from .job import (
    JobDefinition,
    Registry,
    registry,
    reset_running,
    set_running,
    set_stop_signal,
)
from .lending import lend_from
from .log import job_context, tid
from .morgue import Morgue
from .outage import Backoff, Outage
from .pool import RedisPool
from .reporting import report_error
from .retry import JobRetry
from .stats import Counters

__all__ = ["Busy", "JobRunner", "Processor"]

log = logging.getLogger("wurk")


class Busy:
    """What is running now, by thread id: the heartbeat's ``<identity>:work`` map."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._work: dict[str, tuple[str, str, int]] = {}

    def add(self, thread_id: str, queue: str, raw: str) -> None:
        with self._lock:
            self._work[thread_id] = (queue, raw, int(time.time()))

    def remove(self, thread_id: str) -> None:
        with self._lock:
            self._work.pop(thread_id, None)

    def snapshot(self) -> dict[str, str]:
        """tid → the JSON value Sidekiq's Busy page reads (``wire-format.md`` §7.3)."""
        with self._lock:
            items = list(self._work.items())
        return {t: P.dumps({"queue": q, "payload": raw, "run_at": run_at})
                for t, (q, raw, run_at) in items}

    def __len__(self) -> int:
        return len(self._work)


async def _in_context(coro: Coroutine[Any, Any, Any], context: contextvars.Context) -> Any:
    """Run ``coro`` in a task that sees the submitting thread's context variables (the
    running job, the log context): a task otherwise copies the loop thread's context."""
    for variable, value in context.items():
        variable.set(value)
    return await coro


class JobRunner:
    """Executes fetched jobs; shared by every processor of a process."""

    def __init__(self, config: Config, *, counters: Counters, busy: Busy,
                 jobs: Registry = registry, morgue: Morgue | None = None,
                 retry: JobRetry | None = None) -> None:
        self.config = config
        self.jobs = jobs
        self.counters = counters
        self.busy = busy
        self.morgue = morgue or Morgue(config)
        self.retry = retry or JobRetry(config, self.morgue)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._loop_lock = threading.Lock()

    # -- one job ----------------------------------------------------------------------------
    def run(self, unit: UnitOfWork, interruptible: Callable[[bool], None]) -> None:
        """Run one job and acknowledge it, unless it was interrupted by the shutdown."""
        try:
            job = P.validate(P.loads(unit.raw))
        except InvalidPayload as exc:
            self._reject(unit, exc)
            return
        jid = job.get(P.JID)
        unit.jid = jid if isinstance(jid, str) else None
        if self._execute(unit, job, interruptible):
            unit.acknowledge()

    def _execute(self, unit: UnitOfWork, job: P.Payload,
                 interruptible: Callable[[bool], None]) -> bool:
        thread_id = tid()
        raw_text = unit.raw.decode("utf-8", "replace")
        self.busy.add(thread_id, unit.queue, raw_text)
        running = set_running(job)
        try:
            with job_context(self._log_fields(job, unit.queue)):
                return self._perform_logged(job, unit.queue, interruptible, unit.raw)
        finally:
            reset_running(running)
            self.busy.remove(thread_id)

    def _perform_logged(self, job: P.Payload, queue: str,
                        interruptible: Callable[[bool], None], raw: bytes) -> bool:
        quiet = self.config.skip_default_job_logging
        if not quiet:
            wurk_log.line(logging.DEBUG, "start")
        started = time.monotonic()
        definition: JobDefinition | None = None
        instance: Any = None
        try:
            definition = self.jobs.lookup(job[P.CLASS])
            instance = definition.instantiate(job)
            interruptible(True)
            try:
                self._invoke(definition, instance, job, queue)
            finally:
                interruptible(False)
        except BaseException as exc:
            if _is_shutdown(exc):
                raise
            if not isinstance(exc, Exception):
                raise  # KeyboardInterrupt, SystemExit: not a job failure
            self.counters.record(failed=True)
            if not quiet:
                wurk_log.info("fail: %.3f sec", time.monotonic() - started)
            return self._book_failure(job, exc, definition, instance, raw)
        self.counters.record(failed=False)
        if not quiet:
            wurk_log.info("done: %.3f sec", time.monotonic() - started)
        return True

    def _invoke(self, definition: JobDefinition, instance: Any, job: P.Payload,
                queue: str) -> None:
        args = job[P.ARGS]

        def perform() -> Any:
            result = definition.call(instance, args)
            if inspect.iscoroutine(result):
                return self._await(result)
            return result

        chain = self.config.server_middleware
        if chain:
            chain.invoke(instance, job, queue, perform)
        else:
            perform()

    def _book_failure(self, job: P.Payload, exc: Exception, definition: JobDefinition | None,
                      instance: Any, raw: bytes) -> bool:
        """Retry or bury; False (do not acknowledge) when Redis refused that: the job goes
        back to its queue and its failure is booked next time."""
        try:
            self.retry.handle(job, exc, definition=definition, instance=instance)
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
    def _await(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run a coroutine on the runner's event loop and wait for it in this thread."""
        future = asyncio.run_coroutine_threadsafe(_in_context(coro, contextvars.copy_context()),
                                                  self._event_loop())
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._loop_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="wurk-asyncio",
                                          daemon=True)
                thread.start()
                self._loop, self._loop_thread = loop, thread
            return self._loop

    def close(self) -> None:
        """Cancel async jobs still running and stop the event loop thread."""
        with self._loop_lock:
            loop, thread = self._loop, self._loop_thread
            self._loop = self._loop_thread = None
        if loop is None or thread is None:
            return

        def cancel_all() -> None:
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.call_soon(loop.stop)

        loop.call_soon_threadsafe(cancel_all)
        thread.join(timeout=5)


def _always(timeout: float) -> bool:
    return True


class Processor:
    """One named thread: fetch, run, acknowledge, until stopped."""

    def __init__(self, *, name: str, fetcher: Fetcher, runner: JobRunner, fetch_timeout: float,
                 on_exit: Callable[[Processor, BaseException | None], None],
                 outage: Outage | None = None,
                 visible: Callable[[float], bool] | None = None,
                 pinning: Pinning | None = None,
                 lend: RedisPool | None = None) -> None:
        self.name = name
        self.fetcher = fetcher
        self.runner = runner
        self.fetch_timeout = fetch_timeout
        self._on_exit = on_exit
        self._stop = threading.Event()
        self._interrupt_lock = threading.Lock()
        self._in_job = False
        self._interrupted = False
        self.current: UnitOfWork | None = None
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.outage = outage if outage is not None else Outage(runner.config, f"fetch ({name})")
        self.backoff = Backoff()
        self._visible = visible if visible is not None else _always
        self._pinning = pinning
        self._lend = lend  # the pool whose connection this thread lends its jobs

    def start(self) -> None:
        self.thread.start()

    def stop_fetching(self) -> None:
        """Finish the current job, then exit (quiet and stop both begin with this)."""
        self._stop.set()

    def interrupt(self) -> bool:
        """Raise ``Shutdown`` in the thread if it is inside a job body; True if sent."""
        with self._interrupt_lock:
            if not self._in_job or self.thread.ident is None:
                return False
            self._interrupted = True
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(self.thread.ident), ctypes.py_object(Shutdown)
            )
            return True

    def _set_in_job(self, value: bool) -> None:
        with self._interrupt_lock:
            self._in_job = value

    def _main(self) -> None:
        error: BaseException | None = None
        set_stop_signal(self._stop)  # what Job.interrupted() reads in this thread's jobs
        try:
            if self._pinning is not None:
                self._pinning.enter()
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
        while not self._stop.is_set():
            if not self._visible(self.fetch_timeout):
                continue  # no heartbeat record vouches for us: a reaper would take the job back
            unit = self._fetch()
            if unit is None:
                continue
            if self._stop.is_set():
                unit.requeue()  # fetched after quiet: back untouched, first in line
                return
            self.current = unit
            try:
                self.runner.run(unit, self._set_in_job)
            finally:
                self.current = None

    def _fetch(self) -> UnitOfWork | None:
        try:
            unit = self.fetcher.fetch(self.fetch_timeout)
        except Exception as exc:
            self._fetch_failed(exc)
            return None
        if self.backoff.failures:
            self.backoff.reset()
            self.outage.ended()
        return unit

    def _fetch_failed(self, exc: Exception) -> None:
        """Report the outage once, then wait longer after each failure, up to the cap."""
        self.outage.failed(exc)
        self._stop.wait(self.backoff.next_wait())

    def _flush(self) -> None:
        try:
            self.fetcher.flush()
        except Exception as exc:
            report_error(self.runner.config, exc, {"context": "flushing fetcher"})
