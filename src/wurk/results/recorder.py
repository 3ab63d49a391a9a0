"""``ResultRecorder``: the built-in server middleware that stores each run's outcome.

1. A job without ``result_ttl`` costs one dict lookup. One with it has its run's outcome
   stored (``wurk.results.store.record``, one round trip) before it is acknowledged:
   - returned: the value, once checked JSON-native — a tuple, a ``datetime``, an object
     fails the run with ``wurk.UnstorableResult`` naming its type, never a silent ``str()``,
     and a record larger than the server takes in one value (``proto-max-bulk-len``) with
     one naming its size, never sent to cut the connection;
   - raised, with a retry due (``wurk.retry.will_retry``, the retry's own rules): the
     failure, ``retries_remain`` true;
   - raised, with no retry left: stored by ``ResultDeathHandler`` once the death is booked
     (death handlers run for every death: retries used up, ``retry: false``, discarded,
     killed, a poison pill), so the record says what the retry decided, ``retry_in``'s
     ``"kill"`` included. A kill through ``wurk.api`` (the dashboard's too) stores the same
     outcome (``final_failure``) itself, a page of jobs a round trip (``record_deaths``),
     whatever its ``notify_failure`` and in any process;
   - ``wurk.JobCancelled``: "cancelled", and the error goes on (the cancel link, outside,
     ends the run) — an iterable job that found it was cancelled raises it too, after
     ``on_cancel`` and ``on_stop``;
   - no outcome, nothing stored: the shutdown's interrupt (the job runs again),
     ``Interrupted`` (pushed again), a rate limiter's refusal (rescheduled).
2. Its place (``wurk.launcher.BUILT_IN``): inside the limits link, so a job a limit
   rescheduled, dropped as expired or skipped never reaches it; inside the batch link, so a
   result is stored before the batch counts the success that may complete it (a callback
   reads every result); outside the opener and the profiler.
3. A record that cannot be written (Redis refusing, or gone) fails the run, which then runs
   again: a waiter is never left without the outcome of a run that was acknowledged.
4. ``keeping_outcome``: the same for a job ``wurk.testing`` runs (inline mode, a drain),
   kept in memory (``store.keep``): the value checked as above; a failure, which reaches
   the test and is never retried, kept as final (``retries_remain`` false).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from .. import payload as P
from ..config import Config
from ..errors import (
    Interrupted,
    InvalidArguments,
    JobCancelled,
    UnstorableResult,
    is_shutdown,
)
from ..job import registry
from ..limiter.reschedule import over_limit_classes
from ..middleware import AWAIT
from ..reporting import report_error
from ..retry import kept_backtrace, will_retry
from .store import (
    Outcome,
    arecord,
    astored_text,
    cancelled,
    failed,
    keep,
    record,
    record_gone,
    stored_text,
    succeeded,
    ttl_of,
)

__all__ = ["ResultDeathHandler", "ResultRecorder", "final_failure", "keeping_outcome",
           "record_deaths"]

log = logging.getLogger("wurk")

RESULT_TTL = P.RESULT_TTL  # bound once: looked up for every job


class ResultRecorder:
    """Server middleware: a job with ``result_ttl`` keeps its run's outcome."""

    wurk_keys = frozenset({RESULT_TTL})  # every other job's walk leaves it out

    def __init__(self, config: Config) -> None:
        self.config = config

    def __call__(self, job: Any, payload: P.Payload, queue: str,
                 call_next: Callable[[], Any]) -> Any:
        if RESULT_TTL not in payload:
            return call_next()
        ttl = ttl_of(payload)
        if ttl is None:
            return call_next()
        started = time.time()
        try:
            value = call_next()
            outcome = _succeeded(job, payload, value, started)
            text = stored_text(self.config, outcome)  # one the server takes, or a failure
        except JobCancelled:
            record(self.config, payload, cancelled(payload, started), ttl)
            raise
        except Exception as exc:
            found = self._failure(payload, exc, started)
            if found is not None:
                record(self.config, payload, found, ttl)
            raise
        record(self.config, payload, outcome, ttl, text)
        return value

    async def acall(self, job: Any, payload: P.Payload, queue: str,
                    call_next: Callable[[], Any]) -> Any:
        if RESULT_TTL not in payload:
            return await call_next()
        ttl = ttl_of(payload)
        if ttl is None:
            return await call_next()
        started = time.time()
        try:
            value = await call_next()
            outcome = _succeeded(job, payload, value, started)
            text = await astored_text(self.config, outcome)
        except JobCancelled:
            await arecord(self.config, payload, cancelled(payload, started), ttl)
            raise
        except Exception as exc:
            found = self._failure(payload, exc, started)
            if found is not None:
                await arecord(self.config, payload, found, ttl)
            raise
        await arecord(self.config, payload, outcome, ttl, text)
        return value

    def wurk_plan(self, job: Any, payload: P.Payload, queue: str) -> object | None:
        """A job keeping its result: ``acall``; any other: nothing (no frame on its await
        chain)."""
        if RESULT_TTL not in payload or ttl_of(payload) is None:
            return None
        return AWAIT

    def _failure(self, payload: P.Payload, exc: Exception, started: float) -> Outcome | None:
        """The failure to store now: only one a retry follows (the death handler stores a
        final one); None for an end that is no outcome."""
        if is_shutdown(exc) or isinstance(exc, (Interrupted, *over_limit_classes(self.config))):
            return None
        definition = registry.get(payload.get(P.CLASS))
        if not will_retry(self.config, payload, exc, definition):
            return None
        return failed(payload, exc, started, retries_remain=True,
                      backtrace=kept_backtrace(payload, exc))


def keeping_outcome(job: Any, payload: P.Payload, run: Callable[[], Any]) -> Any:
    """``run()`` (a job ``wurk.testing`` runs, its middleware included), its outcome kept in
    memory when the job keeps its result; returns what it returned, or raises what it
    raised (``wurk.UnstorableResult`` for a value JSON cannot store, as in a worker)."""
    if RESULT_TTL not in payload or ttl_of(payload) is None:
        return run()
    started = time.time()
    try:
        value = run()
        outcome = _succeeded(job, payload, value, started)
    except JobCancelled:
        keep(cancelled(payload, started))
        raise
    except Exception as exc:
        if not isinstance(exc, Interrupted):  # an interrupted iterable job has no outcome
            keep(failed(payload, exc, started, retries_remain=False,
                        backtrace=kept_backtrace(payload, exc)))
        raise
    keep(outcome)
    return value


def _succeeded(job: Any, payload: P.Payload, value: Any, started: float) -> Outcome:
    try:
        return succeeded(payload, value, started)
    except InvalidArguments as exc:
        raise UnstorableResult(f"{exc}; the job keeps its result (result_ttl), which must "
                               "be JSON") from None


def final_failure(job: dict[str, Any], exc: BaseException) -> Outcome:
    """The outcome of a job that died of ``exc`` and will not run again: a failure,
    ``retries_remain`` false, with the backtrace its ``backtrace`` option keeps."""
    return failed(job, exc, None, retries_remain=False, backtrace=kept_backtrace(job, exc))


def _kept_for(job: Any) -> int | None:
    """The seconds a dead job's result is kept (``ttl_of``); None for one that keeps none, or
    for an entry that is no payload at all."""
    return ttl_of(job) if isinstance(job, dict) else None


class ResultDeathHandler:
    """Death handler: a job that keeps its result and will not run again stores its final
    failure (``retries_remain`` false)."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def __call__(self, job: dict[str, Any], exc: BaseException) -> None:
        ttl = _kept_for(job)
        if ttl is None:
            return
        try:
            record(self.config, job, final_failure(job, exc), ttl)
        except Exception as error:  # the death is booked: its record is reported, not raised
            report_error(self.config, error, {"context": "storing a dead job's result",
                                              "job": job})


def record_deaths(config: Config, deaths: Iterable[tuple[P.Payload, BaseException]]) -> int:
    """Jobs killed outside a run (``wurk.api``, the dashboard), each with what it died of:
    each that keeps its result stores its final failure as ``ResultDeathHandler`` would,
    its waiters told, in one round trip for all; returns how many. The deaths are booked
    already: a job whose outcome cannot be built (a hostile ``backtrace`` option) is
    skipped and a failed write logged, never raised."""
    found: list[tuple[P.Payload, Outcome, int]] = []
    for job, exc in deaths:
        ttl = _kept_for(job)
        if ttl is None:
            continue
        try:
            found.append((job, final_failure(job, exc), ttl))
        except Exception as error:
            log.warning("job %s: its final failure could not be recorded: %s",
                        job.get(P.JID), error)
    return record_gone(config, found, "killed jobs")
