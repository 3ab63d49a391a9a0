"""What each tab of ``wurk top`` reads: the dashboard's own reads, called off the UI thread.

1. Every reader blocks on Redis and returns plain data; the app runs it in a worker thread
   and shows the result, so the screen never waits on Redis. Each goes through what the
   dashboard reads through — ``wurk.web.data`` (overview, busy, the job sets' pages, a
   queue's page, an entry), ``wurk.web.metrics``, ``wurk.web.batches``,
   ``wurk.web.periodic`` — or ``wurk.api`` itself, so both show the same numbers, checked
   the same way (an unreadable value arrives as an ``Invalid``).
2. ``totals``: the numbers every tab's top line shows, read once per refresh with one
   ``Stats`` snapshot — its queue summaries serve the Home and Queues tabs too.
3. Paged lists read one page by rank (one ``ZRANGE``/``LRANGE``): a 100,000-entry set is
   never loaded whole.
4. Metrics: the dashboard's table of jobs over a period, plus p50 and p95 of the busiest
   ``PERCENTILE_JOBS`` jobs from their latency histograms (``percentile``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..api import Stats
from ..api.stats import QueueSummary
from ..config import Config
from ..iteration.state import IterationState
from ..metrics import BUCKET_LABELS, Query
from ..stored import Invalid
from ..web import batches as web_batches
from ..web import data
from ..web import metrics as web_metrics
from ..web import periodic as web_periodic
from .iteration import iterations

__all__ = ["BUSY_JOBS", "PERCENTILE_JOBS", "Busy", "Metrics", "Totals", "batch", "batches",
           "busy", "entry", "home", "loop", "loops", "metrics", "percentile", "queue_page",
           "set_page", "totals"]

# Running jobs the Busy tab lists (the dashboard's default count).
BUSY_JOBS = data.BUSY_JOBS_DEFAULT
# Jobs whose latency histograms are read for p50/p95 (one round trip each): the busiest.
PERCENTILE_JOBS = 30
# A job name longer than this (only a hostile field is) gets no histogram read: its keys
# would carry the whole name.
NAME_READ_LIMIT = 200


@dataclass(frozen=True)
class Totals:
    """The cluster's numbers, as the dashboard's live stream sends them."""

    processed: int | Invalid
    failed: int | Invalid
    busy: int
    enqueued: int
    scheduled: int | Invalid
    retries: int | Invalid
    dead: int | Invalid
    processes: int | Invalid
    latency: float | Invalid
    queues: list[QueueSummary]
    read_at: float = field(default_factory=time.monotonic)


def totals(config: Config) -> Totals:
    stats = Stats(config)
    return Totals(processed=stats.processed(), failed=stats.failed(), busy=stats.busy(),
                  enqueued=stats.enqueued(), scheduled=stats.scheduled_size(),
                  retries=stats.retry_size(), dead=stats.dead_size(),
                  processes=stats.processes_size(), latency=stats.default_queue_latency(),
                  queues=stats.queue_summaries())


def home(config: Config) -> dict[str, Any]:
    """What the Home tab adds to the totals: the server's version, uptime, memory."""
    return data.redis_info(config)


@dataclass(frozen=True)
class Busy:
    found: dict[str, Any]  # wurk.web.data.busy: processes, totals, jobs, jobs_total
    iterations: dict[str, IterationState | Invalid]  # by jid, for the jobs that have one


def busy(config: Config) -> Busy:
    found = data.busy(config, count=BUSY_JOBS)
    jids = [work["job"]["jid"] for work in found["jobs"]]
    return Busy(found, iterations(config, jids))


def set_page(config: Config, kind: str, page: int, substr: str) -> dict[str, Any]:
    """A page of the retry, scheduled or dead set (``kind`` as the dashboard names it)."""
    return data.set_page(config, data.SET_KINDS[kind], page, substr)


def entry(config: Config, kind: str, key: str) -> dict[str, Any] | None:
    """One entry with its backtrace and stored text, or None once it is gone."""
    found = data.entry(config, data.SET_KINDS[kind], key)
    return None if found is None else data.entry_detail(found)


def queue_page(config: Config, name: str, page: int) -> dict[str, Any] | None:
    return data.queue_page(config, name, page, oldest_first=False)


@dataclass(frozen=True)
class Metrics:
    found: dict[str, Any]  # wurk.web.metrics.overview_data
    # p50 and p95 by job name, for the busiest jobs of a minute period (None: no data).
    percentiles: dict[str, tuple[str | None, str | None]]
    histograms: bool  # whether the period keeps histograms (8 h and less)


def metrics(config: Config, period: str, substr: str) -> Metrics:
    found = web_metrics.overview_data(config, period, substr)
    minutes = web_metrics.PERIODS[period][0]
    shown: dict[str, tuple[str | None, str | None]] = {}
    if minutes is not None:
        query = Query(config)
        for row in found["jobs"][:PERCENTILE_JOBS]:
            name = row["name"]
            if not isinstance(name, str) or len(name) > NAME_READ_LIMIT:
                continue
            histogram = query.for_job(name, minutes=minutes).jobs[name].histogram or []
            shown[name] = (percentile(histogram, 0.50), percentile(histogram, 0.95))
    return Metrics(found, shown, minutes is not None)


def percentile(histogram: list[int], q: float) -> str | None:
    """The histogram bucket holding the ``q`` quantile, as its bound (``<100ms``;
    ``>335s`` for the last, open bucket); None for an empty histogram."""
    total = sum(histogram)
    if total <= 0:
        return None
    wanted = q * total
    running = 0
    for index, number in enumerate(histogram):
        running += number
        if running >= wanted:
            if index >= len(BUCKET_LABELS) - 1:
                return f">{BUCKET_LABELS[-2]}"
            return f"<{BUCKET_LABELS[index]}"
    return f">{BUCKET_LABELS[-2]}"


def batches(config: Config, page: int, tag: str) -> dict[str, Any]:
    return web_batches.listing(config, page, tag)


def batch(config: Config, bid: str) -> dict[str, Any] | None:
    return web_batches.detail(config, bid)


def loops(config: Config) -> list[dict[str, Any]]:
    return web_periodic.loops(config)


def loop(config: Config, lid: str) -> dict[str, Any] | None:
    return web_periodic.loop(config, lid)
