"""Reading execution metrics back: top jobs over a period, one job's series and histogram.

1. ``Query.top_jobs``: every job's executions, failures and time over the last N minutes
   (minute keys, N ≤ 480, else 60) or H hours (ten-minute keys, H ≤ 72), optionally only
   names containing a text; ``Query.for_job`` the same for one job, with its latency
   histogram summed over the period (minute periods only: histograms live 8 h).
2. Everything is read in one pipeline per kind of key, and everything read is untrusted: it
   is read through ``wurk.api.values``; a count that is not one is kept in
   ``Result.invalid`` (the page says so) and adds 0, a field that is not ``<name>|p|f|ms``
   and a key of the wrong type are skipped, so a hand-edited or hostile key never breaks a
   page.
3. Deploy marks of the days the period covers, kept when inside it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from .. import stored as values
from ..config import Config, default_config
from ..stored import Invalid
from .tracking import BUCKETS

__all__ = ["JobResult", "Mark", "Query", "Result"]

MAX_MINUTES = 480  # minute keys live 8 h
DEFAULT_MINUTES = 60
MAX_HOURS = 72  # ten-minute keys live 3 days
MINUTE = dt.timedelta(minutes=1)
TEN_MINUTES = dt.timedelta(minutes=10)
# A deploy label longer than this is cut on display: marks are written by anyone.
MARK_LABEL_LIMIT = 200
# Unreadable values a result keeps to show (their number is counted whole).
INVALID_KEPT = 5
_HISTOGRAM_READ = [part for index in range(BUCKETS) for part in ("GET", "u16", f"#{index}")]

Granularity = Literal["minutely", "ten_minutes"]

# Fields of the period's metric keys read for one page at most, and jobs kept: a deployment
# has hundreds of jobs; a page over a million fields must still answer in a second.
FIELDS_READ = 100_000
JOB_CAP = 1_000

@dataclass(frozen=True)
class Mark:
    at: dt.datetime
    label: str


@dataclass
class JobResult:
    """One job over the period, per bucket (oldest first) and in total."""

    name: str
    processed: list[int]
    failed: list[int]
    ms: list[int]
    histogram: list[int] | None = None  # 26 buckets summed; for_job over minutes only

    @classmethod
    def empty(cls, name: str, size: int) -> JobResult:
        return cls(name, [0] * size, [0] * size, [0] * size)

    @property
    def total_processed(self) -> int:
        return sum(self.processed)

    @property
    def total_failed(self) -> int:
        return sum(self.failed)

    @property
    def total_ms(self) -> int:
        return sum(self.ms)

    @property
    def succeeded(self) -> int:
        return max(self.total_processed - self.total_failed, 0)

    @property
    def average_ms(self) -> float:
        """Mean time of a successful execution (failures count no time)."""
        done = self.succeeded
        return self.total_ms / done if done else 0.0

    def average_series(self) -> list[float]:
        return [ms / (p - f) if p > f else 0.0
                for p, f, ms in zip(self.processed, self.failed, self.ms, strict=False)]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "processed": self.total_processed,
                "failed": self.total_failed, "total_ms": self.total_ms,
                "average_ms": round(self.average_ms, 3),
                "series": {"p": self.processed, "f": self.failed, "ms": self.ms},
                "histogram": self.histogram}


@dataclass
class Result:
    granularity: Granularity
    buckets: list[dt.datetime]  # each bucket's start, oldest first
    jobs: dict[str, JobResult] = field(default_factory=dict)
    marks: list[Mark] = field(default_factory=list)
    invalid: list[Invalid] = field(default_factory=list)  # the first few unreadable values
    invalid_count: int = 0
    capped: bool = False  # some stored fields (or jobs) were left unread: too many

    def count(self, value: Any) -> int:
        """A stored count, or 0 for one that cannot be read (which is kept and counted)."""
        found = values.count(value)
        if not isinstance(found, Invalid):
            return found
        self.note(found)
        return 0

    def note(self, found: Invalid) -> None:
        self.invalid_count += 1
        if len(self.invalid) < INVALID_KEPT:
            self.invalid.append(found)

    @property
    def starts_at(self) -> dt.datetime:
        return self.buckets[0]

    @property
    def ends_at(self) -> dt.datetime:
        return self.buckets[-1] + (MINUTE if self.granularity == "minutely" else TEN_MINUTES)

    def labels(self) -> list[str]:
        if self.granularity == "minutely":
            return [f"{b:%H:%M}" for b in self.buckets]
        return [f"{b:%d %H:%M}" for b in self.buckets]


def period(minutes: int | None, hours: int | None) -> tuple[Granularity, int]:
    """(granularity, bucket count) as Sidekiq clamps them."""
    if hours is not None:
        return "ten_minutes", min(max(int(hours), 1), MAX_HOURS) * 6
    count = DEFAULT_MINUTES if minutes is None else int(minutes)
    return "minutely", count if 1 <= count <= MAX_MINUTES else DEFAULT_MINUTES


class Query:
    """Execution metrics as stored in Redis (UTC only, as Sidekiq keeps them)."""

    def __init__(self, config: Config | None = None, *, now: dt.datetime | None = None) -> None:
        self.config = config if config is not None else default_config()
        self.now = (now or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)

    def top_jobs(self, *, minutes: int | None = None, hours: int | None = None,
                 class_filter: str | None = None) -> Result:
        result = self._result(minutes, hours)
        keys = self._keys(result)
        needle = (class_filter or "").lower()
        for index, found in enumerate(self._hashes(keys, result)):
            for raw_field, raw_value in found.items():
                parsed = _field(raw_field)
                if parsed is None or (needle and needle not in parsed[0].lower()):
                    continue
                name, metric = parsed
                job = result.jobs.get(name)
                if job is None:
                    if len(result.jobs) >= JOB_CAP:
                        result.capped = True
                        continue
                    job = result.jobs[name] = JobResult.empty(name, len(keys))
                getattr(job, _METRICS[metric])[index] += result.count(raw_value)
        result.marks = self.marks(result.starts_at, result.ends_at, result)
        return result

    def for_job(self, name: str, *, minutes: int | None = None,
                hours: int | None = None) -> Result:
        result = self._result(minutes, hours)
        keys = self._keys(result)
        fields = [f"{name}|p", f"{name}|f", f"{name}|ms"]
        rows = self._read(lambda pipe, key: pipe.hmget(key, fields), keys)
        job = result.jobs[name] = JobResult.empty(name, len(keys))
        for index, row in enumerate(rows):
            stored = row if isinstance(row, list) and len(row) == 3 else [None] * 3
            job.processed[index], job.failed[index], job.ms[index] = map(result.count, stored)
        if result.granularity == "minutely":
            job.histogram = self._histogram(name, result)
        result.marks = self.marks(result.starts_at, result.ends_at, result)
        return result

    def marks(self, start: dt.datetime, end: dt.datetime,
              result: Result | None = None) -> list[Mark]:
        """Deploy marks from ``start`` (inclusive) to ``end`` (exclusive), oldest first; an
        unreadable stamp is skipped (and kept in ``result``)."""
        keys = self.config.keys
        days = [(start + dt.timedelta(days=n)).date()
                for n in range((end.date() - start.date()).days + 1)]
        found: list[Mark] = []
        for stored in self._hashes([keys.deploy_marks(day) for day in days], result):
            for stamp, label in stored.items():
                at = _stamp(stamp)
                if isinstance(at, Invalid):
                    if result is not None:
                        result.note(at)
                    continue
                if at is not None and start <= at < end:
                    found.append(Mark(at, values.text(label)[:MARK_LABEL_LIMIT]))
        return sorted(found, key=lambda mark: (mark.at, mark.label))

    # -- reading ----------------------------------------------------------------------------
    def _result(self, minutes: int | None, hours: int | None) -> Result:
        granularity, count = period(minutes, hours)
        if granularity == "minutely":
            last, step = self.now.replace(second=0, microsecond=0), MINUTE
        else:
            now = self.now
            last, step = now.replace(minute=now.minute - now.minute % 10, second=0,
                                     microsecond=0), TEN_MINUTES
        return Result(granularity, [last - step * n for n in range(count - 1, -1, -1)])

    def _keys(self, result: Result) -> list[str]:
        keys = self.config.keys
        key_of = keys.metrics_minute if result.granularity == "minutely" \
            else keys.metrics_ten_minutes
        return [key_of(bucket) for bucket in result.buckets]

    def _histogram(self, name: str, result: Result) -> list[int]:
        keys = self.config.keys
        rows = self._read(lambda pipe, when: pipe.execute_command(
            "BITFIELD_RO", keys.histogram(name, when), *_HISTOGRAM_READ), result.buckets)
        total = [0] * BUCKETS
        for row in rows:
            if isinstance(row, list) and len(row) == BUCKETS:
                total = [t + result.count(v) for t, v in zip(total, row, strict=False)]
        return total

    def _hashes(self, keys: list[str], result: Result | None) -> list[dict[Any, Any]]:
        """Each hash, read whole when it is small and up to ``values.FIELD_CAP`` fields when it
        is not, and ``FIELDS_READ`` fields in all: a minute key holding a million fields
        (a bug, an attacker) costs a page about what ten thousand do. A hash of another type
        reads as empty."""
        sizes = self._read(lambda pipe, key: pipe.hlen(key), keys)
        small = [key for key, size in zip(keys, sizes, strict=True)
                 if isinstance(size, int) and 0 < size <= values.FIELD_CAP]
        found = dict(zip(small, self._read(lambda pipe, key: pipe.hgetall(key), small),
                         strict=True))
        budget = FIELDS_READ - sum(size for key, size in zip(keys, sizes, strict=True)
                                   if key in found)
        pool = self.config.pool("api")
        for key, size in zip(keys, sizes, strict=True):
            if isinstance(size, int) and size > values.FIELD_CAP:
                cap = max(0, min(values.FIELD_CAP, budget))
                read = pool.run(partial(_capped, key, cap), idempotent=True)
                found[key] = {} if isinstance(read, Invalid) else read.items
                budget -= cap
                if result is not None:
                    result.capped = True
        return [found.get(key) or {} for key in keys]

    def _read(self, command: Any, items: list[Any]) -> list[Any]:
        """One pipelined command per item; a failed one (a key of another type) is None."""
        def send(r: Any) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for item in items:
                command(pipe, item)
            return list(pipe.execute(raise_on_error=False))

        replies = self.config.pool("api").run(send, idempotent=True)
        return [None if isinstance(reply, Exception) else reply for reply in replies]


_METRICS = {"p": "processed", "f": "failed", "ms": "ms"}


def _field(raw: Any) -> tuple[str, str] | None:
    """``("HardJob", "p")`` of a field ``HardJob|p``; None for anything else."""
    name, bar, metric = values.text(raw).rpartition("|")
    return (name, metric) if bar and name and metric in _METRICS else None


def _stamp(value: Any) -> dt.datetime | Invalid | None:
    """A mark's ISO-8601 UTC minute (``2025-02-14T08:43:00Z``), or ``Invalid``."""
    seconds = values.epoch(values.text(value))
    if seconds is None or isinstance(seconds, Invalid):
        return seconds
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc)


def _capped(key: str, cap: int, r: Any) -> values.Capped | Invalid:
    return values.hash_fields(r, key, cap=cap)
