"""Counters and sizes at a glance, read from the keys Sidekiq's ``Stats`` reads.

1. ``Stats`` — processed and failed totals, the sizes of the job sets, the process count and
   the default queue's latency, read together in one pipeline on first use; the number of
   enqueued jobs and busy threads (one command per queue / process, pipelined in pages) on
   first use of either. ``refresh()`` forgets both. ``reset()`` sets the counters to 0.
2. ``queues()`` and ``queue_summaries()`` — sizes, latencies and paused flags of every queue.
3. ``StatsHistory`` — processed and failed per UTC day for the last N days.
4. ``ShardStats`` — the numbers of each shard of a configuration (``Config.shards``), side
   by side, and their sum: a shard that cannot be read is named with its error and left
   out of the sum, which then says it is partial.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from .. import payload as P
from .. import stored as values
from ..config import Config, default_config
from ..connections.locate import describe_url
from ..connections.pool import RedisPool
from ..errors import WurkError
from ..stored import Invalid
from .processes import busy_total
from .queues import Queue, entry_latency, queue_names

__all__ = ["SUMMED", "QueueSummary", "ShardNumbers", "ShardStats", "Stats", "StatsHistory"]

# Queues whose size and oldest entry are read per pipelined round trip.
QUEUE_PAGE = 100
# Daily counters live five years, so no longer history exists.
MAX_HISTORY_DAYS = 1825
COUNTERS = ("processed", "failed")


@dataclass(frozen=True)
class QueueSummary:
    name: str
    size: int | Invalid
    latency: float | Invalid
    paused: bool

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "latency": self.latency,
                "paused": self.paused}


class Stats:
    """A snapshot of the cluster's numbers; each group is read once, on first use."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config if config is not None else default_config()
        self._fast: dict[str, Any] | None = None
        self._summaries: list[QueueSummary] | None = None
        self._busy: int | None = None

    @property
    def _pool(self) -> RedisPool:
        return self.config.pool("api")

    def refresh(self) -> None:
        """Forget what was read; the next call reads Redis again."""
        self._fast, self._summaries, self._busy = None, None, None

    # -- fast: one pipeline -----------------------------------------------------------------
    def processed(self) -> int | Invalid:
        found: int | Invalid = self._fast_stats()["processed"]
        return found

    def failed(self) -> int | Invalid:
        found: int | Invalid = self._fast_stats()["failed"]
        return found

    def scheduled_size(self) -> int | Invalid:
        found: int | Invalid = self._fast_stats()["scheduled"]
        return found

    def retry_size(self) -> int | Invalid:
        found: int | Invalid = self._fast_stats()["retries"]
        return found

    def dead_size(self) -> int | Invalid:
        found: int | Invalid = self._fast_stats()["dead"]
        return found

    def processes_size(self) -> int | Invalid:
        found: int | Invalid = self._fast_stats()["processes"]
        return found

    def default_queue_latency(self) -> float | Invalid:
        found: float | Invalid = self._fast_stats()["default_queue_latency"]
        return found

    def _fast_stats(self) -> dict[str, Any]:
        if self._fast is None:
            self._fast = self._read_fast()
        return self._fast

    def _read_fast(self) -> dict[str, Any]:
        keys = self.config.keys

        def read(r: Any) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            pipe.get(keys.stat_processed)
            pipe.get(keys.stat_failed)
            pipe.zcard(keys.schedule)
            pipe.zcard(keys.retry)
            pipe.zcard(keys.dead)
            pipe.scard(keys.processes)
            pipe.lindex(keys.queue(P.DEFAULT_QUEUE), -1)
            return values.replies(pipe)

        processed, failed, scheduled, retries, dead, processes, oldest = self._pool.run(
            read, idempotent=True)
        return {"processed": values.count(processed), "failed": values.count(failed),
                "scheduled": values.count(scheduled), "retries": values.count(retries),
                "dead": values.count(dead), "processes": values.count(processes),
                "default_queue_latency": entry_latency(oldest)}

    # -- slow: a command per queue or process -----------------------------------------------
    def enqueued(self) -> int:
        """Jobs waiting in every known queue."""
        return values.valid_total(summary.size for summary in self.queue_summaries())

    def busy(self) -> int:
        """Threads running a job, summed over the processes' last heartbeats."""
        if self._busy is None:
            self._busy = busy_total(self.config)
        return self._busy

    def queues(self) -> dict[str, int]:
        """``{name: size}`` of every known queue, largest first."""
        ordered = sorted(self.queue_summaries(), key=lambda s: (-_size(s), s.name))
        return {summary.name: _size(summary) for summary in ordered}

    def queue_summaries(self) -> list[QueueSummary]:
        """Size, latency and paused flag of every known queue, sorted by name."""
        if self._summaries is None:
            names = sorted(set(queue_names(self.config)))
            summaries: list[QueueSummary] = []
            for start in range(0, len(names), QUEUE_PAGE):
                summaries.extend(self._summarise(names[start : start + QUEUE_PAGE]))
            self._summaries = summaries
        return self._summaries

    def _summarise(self, names: list[str]) -> list[QueueSummary]:
        keys = self.config.keys

        def read(r: Any) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for name in names:
                pipe.llen(keys.queue(name))
                pipe.lindex(keys.queue(name), -1)
                pipe.sismember(keys.paused, name)
            return values.replies(pipe)

        replies = self._pool.run(read, idempotent=True)
        # A partitioned queue's jobs wait in its partitions (wurk.partitions), beside any not
        # routed yet on its plain list.
        waiting = {name: Queue(name, self.config).partitioned_size()
                   for name in names if name in self.config.partitions}
        return [QueueSummary(name=name, size=_plus(values.count(replies[3 * i]),
                                                   waiting.get(name, 0)),
                             latency=entry_latency(replies[3 * i + 1]),
                             paused=replies[3 * i + 2] is True or replies[3 * i + 2] == 1)
                for i, name in enumerate(names)]

    # -- writing ----------------------------------------------------------------------------
    def reset(self, *counters: str) -> None:
        """Set ``processed`` and/or ``failed`` (both when none are named) to 0."""
        chosen = counters or COUNTERS
        unknown = [c for c in chosen if c not in COUNTERS]
        if unknown:
            raise ValueError(f"unknown counter {unknown[0]!r}; reset 'processed' and/or "
                             "'failed'")
        keys = self.config.keys
        names = {"processed": keys.stat_processed, "failed": keys.stat_failed}
        self._pool.run(lambda r: r.mset({names[c]: 0 for c in chosen}))
        self._fast = None

    # -- output -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Every number, JSON-ready (latencies in seconds)."""
        fast = dict(self._fast_stats())
        return {**fast, "enqueued": self.enqueued(), "busy": self.busy(),
                "queues": [summary.to_dict() for summary in self.queue_summaries()]}


def _size(summary: QueueSummary) -> int:
    return summary.size if isinstance(summary.size, int) else 0


# The numbers that add up across shards (a latency does not).
SUMMED = ("processed", "failed", "busy", "enqueued", "scheduled", "retries", "dead",
          "processes")


@dataclass(frozen=True)
class ShardNumbers:
    """One shard's numbers (``Stats.to_dict``), or why it could not be read."""

    name: str
    redis: str  # where it is, without its password
    numbers: dict[str, Any] | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "redis": self.redis, "error": self.error,
                **(self.numbers or {})}


@dataclass
class ShardStats:
    """The numbers of every shard of ``config`` (``"default"`` first), or of the given
    configurations, read one shard after another; ``total`` adds up ``SUMMED``."""

    config: Config | None = None
    configs: Sequence[tuple[str, Config]] = ()
    shards: list[ShardNumbers] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        chosen = list(self.configs)
        if not chosen:
            cfg = self.config if self.config is not None else default_config()
            chosen = [(name, cfg.shard(name)) for name in cfg.shard_names()]
        self.shards = [_read_shard(name, cfg) for name, cfg in chosen]

    @property
    def complete(self) -> bool:
        """Whether every shard could be read (the total counts them all)."""
        return all(shard.error is None for shard in self.shards)

    def total(self) -> dict[str, int]:
        total = dict.fromkeys(SUMMED, 0)
        for shard in self.shards:
            for name in SUMMED:
                value = (shard.numbers or {}).get(name)
                if isinstance(value, int) and not isinstance(value, bool):
                    total[name] += value
        return total

    def to_dict(self) -> dict[str, Any]:
        return {"shards": [shard.to_dict() for shard in self.shards], "total": self.total(),
                "complete": self.complete}


def _read_shard(name: str, config: Config) -> ShardNumbers:
    try:
        where = describe_url(config.pool("api").url)
        return ShardNumbers(name, where, Stats(config).to_dict())
    except (WurkError, redis.RedisError) as exc:
        where = describe_url(config.redis_url or "") if config.redis_url else "(embedded)"
        return ShardNumbers(name, where, error=f"{type(exc).__name__}: {exc}")


class StatsHistory:
    """Processed and failed counts per UTC day, newest day first."""

    def __init__(self, days: int = 30, start: dt.date | None = None,
                 config: Config | None = None) -> None:
        if isinstance(days, bool) or not isinstance(days, int) or not (
            1 <= days <= MAX_HISTORY_DAYS
        ):
            raise ValueError(f"days must be a whole number from 1 to {MAX_HISTORY_DAYS} "
                             f"(daily counters live five years), not {days!r}")
        self.days = days
        self.start = _utc_day(start) if start is not None else dt.datetime.now(
            dt.timezone.utc).date()
        self.config = config if config is not None else default_config()

    def dates(self) -> list[dt.date]:
        return [self.start - dt.timedelta(days=n) for n in range(self.days)]

    def processed(self) -> dict[dt.date, int | Invalid]:
        return self._counts(self.config.keys.stat_processed_day)

    def failed(self) -> dict[dt.date, int | Invalid]:
        return self._counts(self.config.keys.stat_failed_day)

    def _counts(self, key_of: Callable[[dt.date], str]) -> dict[dt.date, int | Invalid]:
        dates = self.dates()
        names = [key_of(day) for day in dates]
        found = self.config.pool("api").run(lambda r: r.mget(names), idempotent=True)
        # MGET answers nil for a key of the wrong type: it reads as absent (0), never fails
        return {day: values.count(value) for day, value in zip(dates, found, strict=True)}


def _utc_day(start: Any) -> dt.date:
    """The UTC day of ``start``: a date as given; a datetime's own day (naive) or its UTC day
    (aware), as Sidekiq reads a ``Time`` — its ``isoformat`` would name no day's key."""
    if isinstance(start, dt.datetime):
        return (start.astimezone(dt.timezone.utc) if start.tzinfo is not None else start).date()
    if isinstance(start, dt.date):
        return start
    raise TypeError(f"start must be a datetime.date (or datetime), not {start!r}")


def _plus(size: int | Invalid, more: int) -> int | Invalid:
    """A queue's size with its partitions' jobs; an unreadable size stays unreadable."""
    return size if isinstance(size, Invalid) else size + more
