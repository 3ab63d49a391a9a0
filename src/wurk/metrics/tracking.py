"""Execution metrics: counted in memory per job, written once per heartbeat in Sidekiq 8's keys.

1. ``ExecutionMetrics`` is a server middleware (the one hook: no change to the processor):
   it times each execution and tells the ``ExecutionTracker`` (and any observers, such as
   the Prometheus histogram or StatsD) how it ended.
2. ``ExecutionTracker`` keeps per job name, since the last flush: executions, failures, the
   milliseconds of successful executions and a 26-bucket latency histogram. A success costs
   an append to a deque (atomic: no lock on the job's path), folded into the counts several
   hundred at a time and before every flush. No round trip.
3. ``flush`` writes one pipeline: ``HINCRBY`` into the minute key (8 h) and the ten-minute
   key (3 days), ``BITFIELD … OVERFLOW SAT INCRBY u16`` per histogram (8 h), and the
   Sidekiq 7 keys too when ``metrics_compat_v7`` is on, so a 7.x dashboard sees them. When
   Redis refuses, the counts are kept for the next flush (they land in that minute).
4. What counts (as Sidekiq counts it): every execution; a failure is one that raised (its
   time is not counted: failures take unpredictable times, and the average is of successes);
   the job name is ``wrapped`` when present (ActiveJob), else ``class``. An execution cut by
   the shutdown is not counted, even when the job wrapped the ``Shutdown`` in an error of
   its own (``wurk.errors.is_shutdown``): it goes back to its queue and is counted when it
   runs.
"""

from __future__ import annotations

import bisect
import collections
import datetime as dt
import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from .. import payload as P
from ..connections.pool import RedisPool
from ..errors import is_shutdown
from ..keys import Keys
from ..middleware import Leave

__all__ = [
    "BUCKET_BOUNDS",
    "BUCKET_LABELS",
    "HISTOGRAM_TTL",
    "MINUTE_TTL",
    "TEN_MINUTE_TTL",
    "ExecutionMetrics",
    "ExecutionTracker",
    "Observer",
    "bucket_of",
    "job_name",
]

log = logging.getLogger("wurk")

# Upper bounds (ms) of the histogram's first 25 buckets; the 26th takes everything slower.
BUCKET_BOUNDS: tuple[int, ...] = (
    20, 30, 45, 65, 100, 150, 225, 335, 500, 750, 1100, 1700, 2500, 3800, 5750, 8500,
    13000, 20000, 30000, 45000, 65000, 100000, 150000, 225000, 335000,
)
BUCKET_LABELS: tuple[str, ...] = (
    "20ms", "30ms", "45ms", "65ms", "100ms", "150ms", "225ms", "335ms", "500ms", "750ms",
    "1.1s", "1.7s", "2.5s", "3.8s", "5.75s", "8.5s", "13s", "20s", "30s", "45s", "65s",
    "100s", "150s", "225s", "335s", "Slow",
)
BUCKETS = len(BUCKET_LABELS)
# Sidekiq's lifetimes: minute data 8 h, ten-minute rollups 3 days, histograms 8 h.
MINUTE_TTL = 8 * 60 * 60
TEN_MINUTE_TTL = 3 * 24 * 60 * 60
HISTOGRAM_TTL = 8 * 60 * 60

# (job name, queue, payload, milliseconds or None for a failure, the error or None)
Observer = Callable[[str, str, P.Payload, "float | None", "BaseException | None"], None]


def bucket_of(ms: float) -> int:
    """The histogram bucket of an execution: the first whose bound exceeds ``ms``."""
    return bisect.bisect_right(BUCKET_BOUNDS, ms)


# A job name as metrics keep it, at most this long: a payload's ``wrapped`` or ``class`` goes
# into Redis keys and fields, Prometheus labels and StatsD tags, where a 1 MB name would
# make every scrape megabytes and be kept for the life of the process.
NAME_LIMIT = 200


def job_name(payload: P.Payload) -> str:
    """The name metrics are kept under: ``wrapped`` (ActiveJob's real class) or ``class``,
    cut to ``NAME_LIMIT`` characters, a lone surrogate as ``?``."""
    wrapped = payload.get(P.WRAPPED)
    return stored_name(wrapped if isinstance(wrapped, str) and wrapped
                       else payload.get(P.CLASS))


def stored_name(name: Any) -> str:
    """A job or queue name read from Redis (a payload, a poison pill) as a label or a tag
    carries it: text, at most ``NAME_LIMIT`` characters, a lone surrogate as ``?``."""
    text = name if isinstance(name, str) else str(name)
    if not text.isascii():
        # A stored JSON's "\ud800" reads as a lone surrogate, which UTF-8 cannot carry: kept,
        # it failed every flush of every job's counts and every Prometheus scrape.
        text = text.encode("utf-8", "replace").decode("utf-8")
    return cut_name(text)


def cut_name(text: str) -> str:
    """A job or queue name as metrics keep it: at most ``NAME_LIMIT`` characters."""
    return text if len(text) <= NAME_LIMIT else text[:NAME_LIMIT - 1] + "…"


@dataclass
class JobCounts:
    """One job's counts since the last flush."""

    processed: int = 0
    failed: int = 0
    ms: float = 0.0
    histogram: list[int] = field(default_factory=lambda: [0] * BUCKETS)

    def merge(self, other: JobCounts) -> None:
        self.processed += other.processed
        self.failed += other.failed
        self.ms += other.ms
        self.histogram = [a + b for a, b in zip(self.histogram, other.histogram, strict=False)]


# Successes waiting to be folded into the counts: the thread whose success makes this many
# folds them. Folding several hundred in one loop costs a busy worker less than counting
# each under the lock between two jobs' steps (measured: docs/metrics.md).
FOLD_AT = 500


class ExecutionTracker:
    """Counts executions per job name between flushes; thread-safe."""

    def __init__(self, *, compat_v7: bool = False) -> None:
        self.compat_v7 = compat_v7
        self._lock = threading.Lock()
        self._jobs: dict[str, JobCounts] = {}
        # (job name, ms) of successes not yet in ``_jobs``; threads append without the lock,
        # and only the lock's holder pops (``_fold``).
        self._done: collections.deque[tuple[str, float]] = collections.deque()

    def succeeded(self, name: str, ms: float) -> None:
        done = self._done
        done.append((name, ms))
        if len(done) >= FOLD_AT:
            with self._lock:
                self._fold()

    def _fold(self) -> None:
        """Count the waiting successes (the lock held: the only one to pop)."""
        done, jobs, bounds = self._done, self._jobs, BUCKET_BOUNDS
        while done:
            name, ms = done.popleft()
            counts = jobs.get(name)
            if counts is None:
                counts = jobs[name] = JobCounts()
            counts.processed += 1
            counts.ms += ms
            counts.histogram[bisect.bisect_right(bounds, ms)] += 1

    def failed(self, name: str) -> None:
        with self._lock:
            counts = self._jobs.get(name)
            if counts is None:
                counts = self._jobs[name] = JobCounts()
            counts.processed += 1
            counts.failed += 1

    def take(self) -> dict[str, JobCounts]:
        with self._lock:
            self._fold()
            jobs, self._jobs = self._jobs, {}
            return jobs

    def put_back(self, jobs: dict[str, JobCounts]) -> None:
        with self._lock:
            for name, counts in jobs.items():
                mine = self._jobs.get(name)
                if mine is None:
                    self._jobs[name] = counts
                else:
                    mine.merge(counts)

    def pending(self) -> dict[str, JobCounts]:
        """A copy of what the next flush would write (for tests and the exit log)."""
        with self._lock:
            self._fold()
            return {name: JobCounts(c.processed, c.failed, c.ms, list(c.histogram))
                    for name, c in self._jobs.items()}

    def flush(self, pool: RedisPool, keys: Keys, now: dt.datetime | None = None) -> int:
        """Write what was counted; returns the number of job names written. On any error
        the counts stay for the next flush."""
        jobs = self.take()
        if not jobs:
            return 0
        when = now or dt.datetime.now(dt.timezone.utc)
        try:
            refused = pool.run(lambda r: self._send(r, keys, jobs, when))
        except BaseException:
            self.put_back(jobs)
            raise
        if refused:  # the other keys took their counts: kept, they would count there twice
            key, reply = refused[0]
            raise redis.ResponseError(f"{reply} (metrics key {key}; its counts are lost)")
        return len(jobs)

    def _send(self, r: Any, keys: Keys, jobs: dict[str, JobCounts],
              when: dt.datetime) -> list[tuple[str, redis.ResponseError]]:
        """The pipeline; the (key, error) of each count a key refused (another type). When
        every count was refused (a failover's ``READONLY``…) the first refusal is raised:
        nothing counted, so all is kept for the next flush."""
        pipe = r.pipeline(transaction=False)
        counted: list[tuple[int, str]] = []  # (place in the pipeline, key) of each count
        hashes = [(keys.metrics_minute(when), MINUTE_TTL),
                  (keys.metrics_ten_minutes(when), TEN_MINUTE_TTL)]
        if self.compat_v7:
            hashes.append((keys.metrics_minute_v7(when), MINUTE_TTL))
        for name, counts in jobs.items():
            fields = _fields(name, counts)
            for key, _ in hashes:
                for field_name, value in fields:
                    counted.append((len(pipe), key))
                    pipe.hincrby(key, field_name, value)
            histograms = [keys.histogram(name, when)]
            if self.compat_v7:
                histograms.append(keys.histogram_v7(name, when))
            for key in histograms:
                at = len(pipe)
                if _histogram(pipe, key, counts.histogram):
                    counted.append((at, key))
        for key, ttl in hashes:
            pipe.expire(key, ttl)
        replies = pipe.execute(raise_on_error=False)
        refused = [(key, replies[at]) for at, key in counted
                   if isinstance(replies[at], redis.ResponseError)]
        if refused and len(refused) == len(counted):
            raise refused[0][1]
        return refused


def _fields(name: str, counts: JobCounts) -> list[tuple[str, int]]:
    fields = [(f"{name}|p", counts.processed)]
    if counts.failed:
        fields.append((f"{name}|f", counts.failed))
    if counts.processed > counts.failed:
        fields.append((f"{name}|ms", round(counts.ms)))
    return fields


def _histogram(pipe: Any, key: str, histogram: Sequence[int]) -> bool:
    """The ``BITFIELD`` (then ``EXPIRE``) of a histogram's counts; whether any was sent."""
    increments = [(index, n) for index, n in enumerate(histogram) if n]
    if not increments:
        return False
    command: list[Any] = ["BITFIELD", key, "OVERFLOW", "SAT"]
    for index, n in increments:
        command += ["INCRBY", "u16", f"#{index}", n]
    pipe.execute_command(*command)
    pipe.expire(key, HISTOGRAM_TTL)
    return True


class ExecutionMetrics:
    """Server middleware timing every execution for the tracker and the observers."""

    __slots__ = ("observers", "tracker")

    def __init__(self, tracker: ExecutionTracker | None,
                 observers: Sequence[Observer] = ()) -> None:
        self.tracker = tracker
        self.observers = tuple(observers)

    def add_observer(self, observer: Observer) -> None:
        self.observers = (*self.observers, observer)

    def remove_observer(self, observer: Observer) -> None:
        self.observers = tuple(o for o in self.observers if o is not observer)

    def __call__(self, job: Any, payload: P.Payload, queue: str,
                 call_next: Callable[[], Any]) -> Any:
        name = job_name(payload)
        started = time.perf_counter()
        try:
            result = call_next()
        except Exception as exc:
            self._failed(name, queue, payload, exc)
            raise
        # ``_succeeded``, written out: this runs for every job.
        ms = (time.perf_counter() - started) * 1000.0
        if self.tracker is not None:
            self.tracker.succeeded(name, ms)
        for observer in self.observers:
            _tell(observer, name, queue, payload, ms, None)
        return result

    async def acall(self, job: Any, payload: P.Payload, queue: str,
                    call_next: Callable[[], Any]) -> Any:
        """The same around an async job, on its event loop: a sync link there would hold a
        helper thread for the job's whole run."""
        name = job_name(payload)
        started = time.perf_counter()
        try:
            result = await call_next()
        except Exception as exc:
            self._failed(name, queue, payload, exc)
            raise
        self._succeeded(name, queue, payload, started)
        return result

    def wurk_plan(self, job: Any, payload: P.Payload, queue: str) -> Leave:
        """``acall`` without its frame on the job's await chain (``wurk.middleware``)."""
        return functools.partial(self._after, job_name(payload), queue, payload,
                                 time.perf_counter())

    def _after(self, name: str, queue: str, payload: P.Payload, started: float, result: Any,
               error: BaseException | None) -> Any:
        if error is None:
            self._succeeded(name, queue, payload, started)
            return result
        if isinstance(error, Exception):
            self._failed(name, queue, payload, error)
        raise error

    def _failed(self, name: str, queue: str, payload: P.Payload, exc: Exception) -> None:
        if is_shutdown(exc):
            # Cut by the shutdown (its ``Shutdown`` wrapped in an error of the job's own, as
            # a cleanup that raised leaves it): back on its queue, counted when it runs, as
            # the processor, the batch and result links see it.
            return
        if self.tracker is not None:
            self.tracker.failed(name)
        for observer in self.observers:
            _tell(observer, name, queue, payload, None, exc)

    def _succeeded(self, name: str, queue: str, payload: P.Payload, started: float) -> None:
        ms = (time.perf_counter() - started) * 1000.0
        if self.tracker is not None:
            self.tracker.succeeded(name, ms)
        for observer in self.observers:
            _tell(observer, name, queue, payload, ms, None)


def _tell(observer: Observer, name: str, queue: str, payload: P.Payload, ms: float | None,
          error: BaseException | None) -> None:
    """An observer's failure (a StatsD socket error…) never fails the job."""
    try:
        observer(name, queue, payload, ms, error)
    except Exception:
        log.debug("a metrics observer raised; the job is unaffected", exc_info=True)
