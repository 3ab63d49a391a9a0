"""Historical metrics: the cluster's numbers sampled by one process, kept for the dashboard.

1. Every ``history_interval`` seconds (30; the first one full interval after the worker
   starts) each worker asks ``scripts/history_claim.lua`` whether it is the one to sample
   this interval: the script decides by Redis's clock under its own lock
   (``wurk:history:lock``), so exactly one process samples per interval however many run
   and however their clocks drift. Sidekiq Enterprise has its leader send them; this lock
   is that one sender, and not leader election on purpose: ``dear-leader`` is shared with
   Sidekiq Enterprise processes (a Ruby leader would leave ``wurk:history`` empty), a fleet
   may run with ``leader`` off, and a leader's handover leaves up to a term without one.
2. A sample is one JSON member of the sorted set ``wurk:history`` scored by the Redis time:
   processed and failed totals, enqueued, scheduled, retries, dead, busy, processes, the
   size of the largest ``QUEUE_LIMIT`` queues and the ``default`` queue's latency (latency
   costs a read per queue, so only ``default`` is sampled, as Sidekiq Enterprise does).
   Samples older than ``retain_history`` seconds are trimmed by the sampler.
3. The same numbers go to StatsD as gauges when it is configured, with every queue read
   (``queue_names``' cap, ``QUEUE_CAP`` = 1,000, in pages of ``QUEUE_PAGE``), not only the
   largest ``QUEUE_LIMIT``: a stored sample is kept thousands of times, a StatsD send once.
4. ``read_history`` reads them back; every stored value is checked (a member that is not a
   JSON object, or a number that is not finite and ≥ 0, counts as absent or 0).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import payload as P
from ..api import Stats
from ..config import Config
from ..errors import UnparseablePayload
from ..runtime.duty import Duty
from ..runtime.timer import Timers
from ..scripts import Script
from ..stored import Invalid
from ..stored import epoch as stored_epoch
from .tracking import cut_name

__all__ = ["GAUGES", "HistorySampler", "Sample", "read_history", "stored_sample", "take_sample"]

_CLAIM = Script("history_claim.lua")
# Queues kept per stored sample, largest first: bounds a sample's size on installs with many
# queues (StatsD is sent every queue read).
QUEUE_LIMIT = 50
LATENCY_QUEUES = ("default",)
GAUGES = ("processed", "failed", "enqueued", "scheduled", "retries", "dead", "busy",
          "processes")
# A page reads at most this many samples, spread over its period, then thins them to draw.
READ_LIMIT = 10_000


@dataclass
class Sample:
    at: float
    values: dict[str, float]
    queues: dict[str, float] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)

    def get(self, name: str) -> float:
        return self.values.get(name, 0.0)


def take_sample(config: Config, at: float) -> dict[str, Any]:
    """The cluster's numbers now, as sent to StatsD: every queue read, largest first
    (``stored_sample`` keeps the largest ``QUEUE_LIMIT`` of them); an unreadable number is
    stored as null, read back as 0."""
    stats = Stats(config)
    summaries = sorted(stats.queue_summaries(), key=lambda q: (-_number(q.size), q.name))
    return {
        "t": at,
        "processed": _valid(stats.processed()), "failed": _valid(stats.failed()),
        "enqueued": stats.enqueued(), "scheduled": _valid(stats.scheduled_size()),
        "retries": _valid(stats.retry_size()), "dead": _valid(stats.dead_size()),
        "busy": stats.busy(), "processes": _valid(stats.processes_size()),
        # A queue name is anyone's to write: cut, or a sample of long ones weighs megabytes.
        "queues": {cut_name(q.name): _valid(q.size) for q in summaries},
        "latency": {cut_name(q.name): round(q.latency, 3) for q in summaries
                    if q.name in LATENCY_QUEUES and not isinstance(q.latency, Invalid)},
    }


def stored_sample(sample: dict[str, Any]) -> dict[str, Any]:
    """What is kept of ``sample`` in ``wurk:history``: its largest ``QUEUE_LIMIT`` queues."""
    queues = sample.get("queues") or {}
    return {**sample, "queues": dict(list(queues.items())[:QUEUE_LIMIT])}


def _valid(value: Any) -> Any:
    return None if isinstance(value, Invalid) else value


class HistorySampler:
    """Owned by the launcher: claims, samples and trims every ``history_interval``."""

    def __init__(self, config: Config, *,
                 on_sample: Callable[[dict[str, Any]], None] | None = None,
                 timers: Timers | None = None) -> None:
        self.config = config
        self.pool = config.pool("internal")
        self._on_sample = on_sample
        # After a failure the backoff, so the outage ends soon after Redis's.
        self._duty = Duty(config, "wurk-history", self.tick, lambda: config.history_interval,
                          component="history sampler", host=timers)

    def start(self) -> None:
        self._duty.start()

    def stop(self, timeout: float) -> None:
        self._duty.stop(timeout)

    def tick(self) -> dict[str, Any] | None:
        """Sample if this process won the interval; the sample, or None."""
        at = self.claim()
        if at is None:
            return None
        sample = take_sample(self.config, at)
        self._store(sample)
        if self._on_sample is not None:
            self._on_sample(sample)
        return sample

    def claim(self) -> float | None:
        keys = self.config.keys

        def send(r: Any) -> Any:
            script = r.register_script(_CLAIM.text)  # EVALSHA, loading it on NOSCRIPT
            return script(keys=[keys.history_lock], args=[self.config.history_interval])

        won = self.pool.run(send)
        return float(won) if won else None

    def _store(self, sample: dict[str, Any]) -> None:
        key, at = self.config.keys.history, float(sample["t"])
        oldest = at - self.config.retain_history

        def send(r: Any) -> None:
            pipe = r.pipeline(transaction=True)
            pipe.zadd(key, {P.dumps(stored_sample(sample)): at})
            pipe.zremrangebyscore(key, "-inf", f"({oldest}")
            pipe.execute()

        self.pool.run(send)


def read_history(config: Config, seconds: float, *, now: float | None = None) -> list[Sample]:
    """Samples of the last ``seconds``, oldest first: every one, or when there are more than
    ``READ_LIMIT`` (a short ``history_interval``), that many spread evenly over the period,
    its first and last among them."""
    since = (time.time() if now is None else now) - seconds
    key = config.keys.history

    def read(r: Any) -> list[tuple[bytes, float]]:
        total = r.zcount(key, since, "+inf")
        if total <= READ_LIMIT:
            return list(r.zrangebyscore(key, since, "+inf", start=0, num=READ_LIMIT,
                                        withscores=True))
        # The oldest READ_LIMIT would end the chart hours before now: one sample every
        # ``total / READ_LIMIT`` ranks instead (a sample trimmed meanwhile shifts a rank).
        first = r.zcount(key, "-inf", f"({since}")
        ranks = sorted({first + total * i // READ_LIMIT for i in range(READ_LIMIT)}
                       | {first + total - 1})
        pipe = r.pipeline(transaction=False)
        for rank in ranks:
            pipe.zrange(key, rank, rank, withscores=True)
        found = [row[0] for row in pipe.execute() if row]
        return [pair for pair in dict(found).items() if pair[1] >= since]

    raw = config.pool("api").run(read, idempotent=True)
    samples = [_sample(member, score) for member, score in raw]
    return [sample for sample in samples if sample is not None]


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    try:
        number = float(value)
    except OverflowError:  # an int of hundreds of digits: JSON reads it, no float holds it
        return 0.0
    return number if math.isfinite(number) and number >= 0 else 0.0


def _numbers(value: Any, limit: int = QUEUE_LIMIT) -> dict[str, float]:
    if not isinstance(value, dict):
        return {}
    return {str(name): _number(n) for name, n in list(value.items())[:limit]}


def _sample(member: Any, score: Any) -> Sample | None:
    try:
        stored = P.loads(member)
    except UnparseablePayload:
        return None
    at = stored_epoch(score)
    if not isinstance(at, float) or not at:  # no time a person can be shown: skipped
        return None
    return Sample(at, {name: _number(stored.get(name)) for name in GAUGES},
                  _numbers(stored.get("queues")), _numbers(stored.get("latency")))
