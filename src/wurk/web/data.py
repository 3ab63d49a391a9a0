"""What each page shows, read through ``wurk.api`` as JSON-ready dicts.

1. Every page and its JSON API twin are built from the same function here, so the API is
   exactly what the page shows.
2. ``SET_KINDS``: the three job sets as the dashboard names them (retries, scheduled,
   morgue), their order on screen and the actions each allows.
3. Pages of 25, read by rank (one ``ZRANGE``/``LRANGE``), so page 4 000 of a 100 000-entry
   set costs what page 1 costs; a substring filter scans the set and keeps at most
   ``FILTER_LIMIT`` matches.
4. Values come as ``wurk.api`` read them: checked, an unreadable one an ``Invalid``
   (``wurk.api.values``), which the templates and the API's JSON know how to show.
5. Entries are named by short keys, never by their text: ``<score>-<sha1>`` in a job set,
   ``<index>-<sha1>`` in a queue (``entry``, ``queue_key``).
6. An entry's own page shows the job's stored result (``wurk.results``) when it keeps one:
   its last run's value or failure, an unreadable record marked (``entry_page``).

Everything here blocks on Redis: the handlers run it through ``Dashboard.run``.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import partitions
from ..api import (
    DeadSet,
    JobSet,
    ProcessSet,
    Queue,
    RetrySet,
    ScheduledSet,
    SortedEntry,
    Stats,
    StatsHistory,
    WorkSet,
    values,
)
from ..api.iteration import IterableJobQuery
from ..api.pushbuffers import PushBuffers
from ..api.record import JobRecord
from ..api.results import ResultQuery
from ..config import Config
from ..stored import Invalid
from .i18n import N_

__all__ = [
    "PAGE_SIZE",
    "SET_KINDS",
    "SetKind",
    "busy",
    "entry",
    "entry_page",
    "history",
    "overview",
    "ping",
    "queue_key",
    "queue_page",
    "queues",
    "redis_info",
    "set_page",
    "stats_snapshot",
]

# Sidekiq's dashboard shows 25 rows a page: a screenful, and one cheap range read.
PAGE_SIZE = 25
# A substring filter scans the whole set; past this many matches the rest are not shown
# (the page says so), which bounds memory and rendering however broad the filter.
FILTER_LIMIT = 1000
# Running jobs shown on the busy page unless ``count`` says otherwise (Sidekiq's default).
BUSY_JOBS_DEFAULT = 100
HISTORY_DAYS_DEFAULT = 30
HISTORY_DAYS_MAX = 180
REDIS_FIELDS = ("redis_version", "valkey_version", "uptime_in_days", "connected_clients",
                "used_memory_human", "used_memory_peak_human", "maxmemory_policy")


@dataclass(frozen=True)
class SetKind:
    """One job set as the dashboard shows it."""

    name: str  # the URL segment
    title: str
    job_set: Callable[[Config], JobSet]
    descending: bool  # newest (highest score) first
    actions: tuple[str, ...]  # for one entry or the selected ones
    bulk: tuple[str, ...]  # for every entry at once
    time_label: str  # what the score means here


SET_KINDS: dict[str, SetKind] = {
    kind.name: kind for kind in (
        SetKind("retries", N_("Retries"), RetrySet, False, ("retry", "delete", "kill", "cancel"),
                ("retry", "delete", "kill"), N_("Next retry")),
        SetKind("scheduled", N_("Scheduled"), ScheduledSet, False, ("add_to_queue", "delete"),
                ("add_to_queue", "delete"), N_("When")),
        SetKind("morgue", N_("Dead"), DeadSet, True, ("retry", "delete"), ("retry", "delete"),
                N_("Died")),
    )
}


# -- the dashboard ----------------------------------------------------------------------------
def ping(config: Config) -> bool:
    """The health check: one round trip."""
    return bool(config.pool("api").run(lambda r: r.ping(), idempotent=True))


def stats_snapshot(config: Config) -> dict[str, Any]:
    """The live numbers, shaped as Sidekiq's ``/stats`` so its monitoring scripts read it."""
    stats = Stats(config)
    numbers = {
        "processed": stats.processed(), "failed": stats.failed(), "busy": stats.busy(),
        "processes": stats.processes_size(), "enqueued": stats.enqueued(),
        "scheduled": stats.scheduled_size(), "retries": stats.retry_size(),
        "dead": stats.dead_size(), "default_latency": rounded(stats.default_queue_latency()),
    }
    return {"sidekiq": numbers, "redis": redis_info(config),
            "server_utc_time": time.strftime("%H:%M:%S UTC", time.gmtime())}


def redis_info(config: Config) -> dict[str, Any]:
    """Version, uptime, clients and memory of the server (one ``INFO``)."""
    info = config.pool("api").run(lambda r: r.info(), idempotent=True)
    return {name: info[name] for name in REDIS_FIELDS if name in info}


def rounded(seconds: float | Invalid) -> float | Invalid:
    """A latency to the millisecond (an ``Invalid`` as it is)."""
    return seconds if isinstance(seconds, Invalid) else round(seconds, 3)


def history(config: Config, days: int) -> dict[str, Any]:
    """Processed and failed per UTC day, oldest first (the order a graph is drawn in)."""
    past = StatsHistory(days, config=config)
    processed, failed = past.processed(), past.failed()
    dates = sorted(processed)
    return {"days": [day.isoformat() for day in dates],
            "processed": [processed[day] for day in dates],
            "failed": [failed[day] for day in dates]}


def overview(config: Config, days: int) -> dict[str, Any]:
    """Everything the dashboard page shows."""
    return {**stats_snapshot(config), "history": history(config, days),
            "queues": queues(config)}


def history_days(value: str | None) -> int:
    """``?days=`` clamped to 1..180; anything else means the default."""
    try:
        days = int(value) if value else HISTORY_DAYS_DEFAULT
    except ValueError:
        return HISTORY_DAYS_DEFAULT
    return min(max(days, 1), HISTORY_DAYS_MAX)


# -- processes --------------------------------------------------------------------------------
def busy(config: Config, *, only: str | None = None,
         count: int = BUSY_JOBS_DEFAULT) -> dict[str, Any]:
    """Processes and the jobs they run; ``only`` = "processes" or "jobs" skips the other."""
    result: dict[str, Any] = {}
    if only != "jobs":
        processes = [process.to_dict() for process in ProcessSet(config)]
        result["processes"] = processes
        result["totals"] = {
            "processes": len(processes),
            "threads": values.valid_total(p["concurrency"] for p in processes),
            "busy": values.valid_total(p["busy"] for p in processes),
            "rss_kb": values.valid_total(p["rss_kb"] for p in processes),
        }
        # Reliable push: the processes that kept pushes while Redis was out of reach.
        buffers = PushBuffers(config)
        result["push_buffers"] = [report.to_dict() for report in buffers.reports()]
        result["push_sent"] = buffers.sent()
    if only != "processes":
        works = list(WorkSet(config))
        result["jobs"] = [work.to_dict() for work in works[:count]]
        result["jobs_total"] = len(works)
        with_iteration(config, result["jobs"], lambda work: work["job"].get("jid"))
    return result


def with_iteration(config: Config, rows: list[dict[str, Any]],
                   jid_of: Callable[[dict[str, Any]], Any]) -> None:
    """Each row gets ``iteration``: its job's iterable state (executions, cursor, runtime,
    cancelled), ``Invalid`` when the state cannot be read, None when there is none — one
    round trip for the page (Sidekiq's Busy and Retries pages read ``it-<jid>`` so)."""
    states = IterableJobQuery(config).find_many(jid_of(row) for row in rows)
    for row in rows:
        jid = jid_of(row)
        state = states.get(jid) if isinstance(jid, str) else None
        row["iteration"] = state if state is None or isinstance(state, Invalid) else {
            "executions": state.executions, "cursor": state.cursor,
            "runtime": state.runtime, "cancelled": state.cancelled,
            "cancelled_at": state.cancelled_at}


# -- queues -----------------------------------------------------------------------------------
def queues(config: Config) -> list[dict[str, Any]]:
    return [summary.to_dict() for summary in Stats(config).queue_summaries()]


def queue_page(config: Config, name: str, page: int, *,
               oldest_first: bool) -> dict[str, Any] | None:
    """One page of a queue's jobs, newest first unless ``oldest_first``; None when ``name``
    cannot be a queue's."""
    try:
        queue = Queue(name, config)
    except ValueError:
        return None
    size = queue.size()
    page = clamp_page(page, size)
    start = (page - 1) * PAGE_SIZE
    # Each with where it is (its list, its place from the head end), to delete it by that.
    listed = queue.listing(start, PAGE_SIZE, oldest_first=oldest_first)
    return {"name": name, "size": size, "latency": rounded(queue.latency()),
            "partitions": partitions_page(config, name),
            "unrouted": queue.unrouted() if queue.partitioned else 0,
            "paused": queue.paused(), "page": page, "pages": page_count(size),
            "direction": "asc" if oldest_first else "desc",
            "jobs": [job_dict(found.record, found.index, found.partition)
                     for found in listed]}


def partitions_page(config: Config, name: str) -> dict[str, Any] | None:
    """A partitioned queue's partitions (``wurk.partitions``), the largest first: jobs
    waiting and in flight of each; None for a queue this configuration does not partition."""
    if name not in config.partitions:
        return None
    found = config.pool("api").run(
        lambda r: partitions.partitions_of(r, config.keys, name), idempotent=True)
    return {"limit": config.partitions[name], "rate": config.partition_rates.get(name),
            "total": found.total, "waiting": found.waiting, "running": found.running,
            "rows": [{"name": p.name, "size": p.size, "running": p.running}
                     for p in found.shown]}


def job_dict(job: JobRecord, index: int, partition: str | None = None) -> dict[str, Any]:
    """A queue job for display, with its stored text and the key deleting it names."""
    return {**job.to_dict(), "raw": job.text, "key": queue_key(index, job.digest, partition),
            "partition": partition}


def queue_key(index: int, digest: str, partition: str | None = None) -> str:
    """``<index>-<sha1>``: where a queued job was listed, and which job it was; a partitioned
    queue's job listed in a partition adds ``-<partition>``."""
    return f"{index}-{digest}" if partition is None else f"{index}-{digest}-{partition}"


def parse_queue_key(key: str) -> tuple[int, str, str | None] | None:
    """``(index, sha1, partition or None)`` of a ``queue_key``; None when it is not one."""
    index_text, dash, rest = key.partition("-")
    if not dash or not index_text.isascii() or not index_text.isdigit() or len(index_text) > 18:
        return None
    digest, tail = rest[:40], rest[40:]
    if not tail:
        return int(index_text), digest, None
    if tail[0] != "-" or len(tail) < 2:
        return None
    return int(index_text), digest, tail[1:]


# -- job sets ---------------------------------------------------------------------------------
def set_page(config: Config, kind: SetKind, page: int, substr: str = "") -> dict[str, Any]:
    """One page of a job set, or of the entries containing ``substr``."""
    job_set = kind.job_set(config)
    if substr:
        matches = sorted(_matches(job_set, substr), key=lambda e: (e.score, e.raw),
                         reverse=kind.descending)
        size, truncated = len(matches), len(matches) >= FILTER_LIMIT
        page = clamp_page(page, size)
        entries = matches[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
    else:
        size, truncated = job_set.size(), False
        page = clamp_page(page, size)
        entries = job_set.page((page - 1) * PAGE_SIZE, PAGE_SIZE, descending=kind.descending)
    rows = [entry_dict(e) for e in entries]
    with_iteration(config, rows, lambda row: row.get("jid"))
    return {"kind": kind.name, "title": kind.title, "size": size, "page": page,
            "pages": page_count(size), "substr": substr, "truncated": truncated,
            "entries": rows}


def _matches(job_set: JobSet, text: str) -> list[SortedEntry]:
    found: list[SortedEntry] = []
    for entry in job_set.scan(text):
        found.append(entry)
        if len(found) >= FILTER_LIMIT:
            break
    return found


def entry(config: Config, kind: SetKind, key: str) -> SortedEntry | None:
    """The entry whose key (``<score>-<sha1>``, ``SortedEntry.address``) this is, or None
    when it is gone or the key is not one."""
    return kind.job_set(config).at_address(key)


def entry_page(config: Config, kind: SetKind, key: str) -> dict[str, Any] | None:
    """What an entry's own page shows (``entry_detail``) and its job's stored ``result``
    (None: it keeps none; ``Invalid``: one that cannot be read); None when the entry is
    gone or the key is not one."""
    found = entry(config, kind, key)
    if found is None:
        return None
    detail = entry_detail(found)
    jid = detail.get("jid")
    outcome = ResultQuery(config).find(jid) if isinstance(jid, str) and jid else None
    detail["result"] = outcome.to_dict() if outcome is not None and not isinstance(
        outcome, Invalid) else outcome
    return detail


def entry_dict(entry: SortedEntry) -> dict[str, Any]:
    at = entry.at
    when = at if isinstance(at, Invalid) else \
        dt.datetime.fromtimestamp(at, dt.timezone.utc).isoformat()
    return {**entry.to_dict(), "key": entry.address, "at": when, "at_epoch": at}


def entry_detail(entry: SortedEntry) -> dict[str, Any]:
    """An entry with everything its own page shows: the backtrace, the raw payload."""
    return {**entry_dict(entry), "error_backtrace": entry.error_backtrace,
            "raw": entry.text}


# -- paging -----------------------------------------------------------------------------------
def page_count(size: int) -> int:
    return max(1, math.ceil(size / PAGE_SIZE))


def clamp_page(page: int, size: int) -> int:
    return min(max(page, 1), page_count(size))


def page_number(value: str | None) -> int:
    """``?page=`` as a number ≥ 1; anything else means page 1."""
    try:
        return max(int(value or 1), 1)
    except ValueError:
        return 1
