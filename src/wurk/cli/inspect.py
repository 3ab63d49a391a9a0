"""``wurk stats | queues | retries | scheduled | dead | processes`` and the admin actions.

1. Read commands print a table a person takes in at a glance, or with ``--json`` one JSON
   document for scripts (times in epoch seconds, latencies in seconds). ``stats`` says how
   fresh its processed and failed counts are: running workers add theirs at each heartbeat;
   and, where reliable push kept jobs, each process's buffer as it reported it and the disk
   buffers of this host's directory. ``stats --redis-url URL`` reads that Redis; given
   once per shard, it shows each shard's numbers in a row and their sum (``docs/scaling.md``).
   ``retries`` and ``scheduled`` list the soonest first, ``dead`` the latest death first,
   as Sidekiq's pages (and the dashboard) do.
2. ``wurk queues pause|unpause|clear NAME``, ``wurk retries|scheduled|dead clear``,
   ``wurk retry JID``, ``wurk kill JID`` act. Destructive ones (clear, kill) ask first
   unless ``--yes``; with no terminal to ask on, they refuse (exit 1) instead of waiting for
   an answer that cannot come.
3. None of them starts the embedded server: where none runs they say so and exit 1, rather
   than report the empty server they would have started (``wurk.connections.locate``).
4. Errors are one line and exit 1 (usage errors exit 2, click's rule), never a traceback.

Everything goes through ``wurk.api`` with the process-wide configuration.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click
import redis

from .. import default_config as _process_config
from ..api import (
    DeadSet,
    JobSet,
    Process,
    ProcessSet,
    Queue,
    RetrySet,
    ScheduledSet,
    ShardStats,
    SortedEntry,
    Stats,
    values,
)
from ..api.pushbuffers import PushBuffers
from ..api.stats import SUMMED
from ..client.buffer import survey
from ..client.reliable import buffer_directory
from ..config import Config, check_redis_url
from ..connections.home import find_home
from ..connections.locate import describe_url, where
from ..errors import ConfigError, WurkError
from ..stored import printable
from . import tables

__all__ = ["dead_command", "kill_command", "processes_command", "queues_command",
           "retries_command", "retry_command", "scheduled_command", "stats_command"]

F = TypeVar("F", bound=Callable[..., Any])

# Entries a listing shows unless --limit says otherwise: a screenful.
DEFAULT_LIMIT = 25

json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print one JSON document instead of a table.")
yes_option = click.option("--yes", "-y", is_flag=True, help="Do it without asking.")


def default_config() -> Config:
    """The process-wide configuration, told not to start the embedded server: these
    commands look at jobs that exist, and a new server has none."""
    config = _process_config()
    if config.start_embedded and not config.frozen:
        config.start_embedded = False
    return config


def server_name(config: Config) -> str:
    """Which server the command read, as a person names it."""
    url = config.pool().url
    return where(url, None if config.redis_url else find_home(config.home))


class BadConfiguration(click.ClickException):
    """A bad setting (``REDIS_URL``, ``WURK_CONCURRENCY``…): one ``Error:`` line, exit 2 —
    the configuration is wrong, as ``wurk.cli`` says of a ``ConfigError``."""

    exit_code = 2


def friendly(fn: F) -> F:
    """Turn wurk and Redis errors into one-line CLI errors (exit 1; a bad configuration 2)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ConfigError as exc:
            raise BadConfiguration(str(exc)) from exc
        except (WurkError, redis.RedisError) as exc:
            raise click.ClickException(str(exc) or type(exc).__name__) from exc

    return wrapper  # type: ignore[return-value]


class Cancelled(click.ClickException):
    """The person answered no: say so plainly (no "Error:"), exit 1."""

    def show(self, file: Any = None) -> None:
        click.echo(self.message, err=True)


# What ``json.dumps`` leaves raw in a string and a terminal acts on (it escapes the C0
# controls itself, and the document's own newlines are layout).
_UNPRINTABLE_IN_JSON = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def emit_json(value: Any) -> None:
    """One JSON document; a stored value that cannot be read is ``null``, and its raw text
    goes to ``"invalid"`` (under a document's top level, or on stderr beside a list)."""
    clean, found = values.split_invalid(value)
    if found and isinstance(clean, dict):
        clean["invalid"] = found
    elif found:
        for pointer, raw in found.items():
            click.echo(f"invalid value at {pointer}: {raw}", err=True)
    # DEL, C1, line separators and bidi overrides written as \\u escapes: still valid JSON.
    click.echo(_UNPRINTABLE_IN_JSON.sub(
        lambda found: f"\\u{ord(found.group()):04x}",
        json.dumps(clean, indent=2, ensure_ascii=False)))


def confirm(question: str, *, yes: bool, action: str) -> None:
    """Ask ``question`` unless ``yes``; refuse when there is no terminal to ask on."""
    if yes:
        return
    if sys.stdin is None or not sys.stdin.isatty():
        raise click.ClickException(
            f"not {action} without confirmation: stdin is not a terminal, so there is no one "
            "to ask; pass --yes to do it anyway"
        )
    if not click.confirm(question, default=False):
        raise Cancelled("Cancelled; nothing changed.")


# -- stats ------------------------------------------------------------------------------------
@click.command("stats")
@json_option
@click.option("--redis-url", "redis_urls", multiple=True, metavar="URL",
              help="Read this Redis instead of REDIS_URL's; once per shard to see each "
                   "shard's numbers and their sum.")
@friendly
def stats_command(as_json: bool, redis_urls: tuple[str, ...]) -> None:
    """Processed, failed, busy, enqueued, scheduled, retries, dead, processes, latency."""
    if len(redis_urls) > 1:
        _shards_stats(ShardStats(configs=_shard_configs(redis_urls)), as_json)
        return
    if not redis_urls and default_config().is_cluster:  # a row per queue's keyspace
        _shards_stats(ShardStats(default_config()), as_json)
        return
    config = _shard_configs(redis_urls)[0][1] if redis_urls else default_config()
    numbers = Stats(config).to_dict()
    now = time.time()
    # Running workers: a record whose last beat is older than its life (a crashed process's,
    # not yet pruned) has nothing more to add.
    beats = [p.beat for p in ProcessSet(config).iterate() if isinstance(p.beat, (int, float))
             and now - p.beat <= config.heartbeat_ttl]
    buffers = _push_buffers(config)
    if as_json:
        # Running workers add their counts at each heartbeat: the counts are as of the
        # oldest of their last beats (null with no worker running: nothing is pending).
        emit_json({**numbers, "counted_as_of": min(beats) if beats else None,
                   "push_buffers": buffers})
        return
    counted = _counted(beats, now)
    rows = [("Redis", server_name(config)),
            ("Processed", tables.count(numbers["processed"]) + counted),
            ("Failed", tables.count(numbers["failed"]) + (" (likewise)" if counted else "")),
            ("Busy", tables.count(numbers["busy"])),
            ("Enqueued", tables.count(numbers["enqueued"])),
            ("Scheduled", tables.count(numbers["scheduled"])),
            ("Retries", tables.count(numbers["retries"])),
            ("Dead", tables.count(numbers["dead"])),
            ("Processes", tables.count(numbers["processes"])),
            ("Latency", tables.duration(numbers["default_queue_latency"]) + " (default queue)")]
    rows += _push_buffer_rows(buffers, now)
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        click.echo(f"{label.ljust(width)}  {value}")


def _shard_configs(urls: tuple[str, ...]) -> list[tuple[str, Config]]:
    """A configuration for each URL, named by it (without its password): shards of the
    process-wide one, so every setting but where Redis is stays the same."""
    for url in urls:
        try:
            check_redis_url(url)
        except ConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="'--redis-url'") from None
    base = default_config()
    holder = Config(**{**{name: getattr(base, name) for name in ("key_prefix",
                                                                "socket_timeout")},
                       "shards": {f"url{index}": url for index, url in enumerate(urls)},
                       "start_embedded": False})
    return [(describe_url(url), holder.shard(f"url{index}")) for index, url in enumerate(urls)]


def _shards_stats(found: ShardStats, as_json: bool) -> None:
    """Each shard's numbers in a row, and their sum; a shard not read says why."""
    if as_json:
        emit_json(found.to_dict())
        return
    rows = [[shard.redis, *([tables.count(shard.numbers[name]) for name in SUMMED]
                            if shard.numbers is not None else
                            [f"not read: {shard.error}", *[""] * (len(SUMMED) - 1)])]
            for shard in found.shards]
    total = found.total()
    rows.append(["all" if found.complete else "all read",
                 *[tables.count(total[name]) for name in SUMMED]])
    click.echo(tables.table(("REDIS", *(name.upper() for name in SUMMED)), rows,
                            right=tuple(range(1, len(SUMMED) + 1))))


def _push_buffers(config: Config) -> dict[str, Any]:
    """Reliable push: what processes reported (``wurk.api.pushbuffers``), and the disk
    buffers in this host's directory, read without Redis."""
    found = PushBuffers(config)
    place = buffer_directory(config)
    return {"sent": found.sent(),
            "reports": [report.to_dict() for report in found.reports()],
            "directory": str(place),
            "files": [report.to_dict() for report in survey(place)]}


def _push_buffer_rows(buffers: dict[str, Any], now: float) -> list[tuple[str, str]]:
    """One line per process that reported a buffer, and one per file here: nothing at all
    where reliable push never kept a job."""
    rows: list[tuple[str, str]] = []
    for report in buffers["reports"]:
        rows.append(("Push buffer", f"{report['hostname']}:{report['pid']} ({report['kind']}): "
                     f"{tables.count(report['buffered'])} waiting, the oldest "
                     f"{tables.age(report['oldest'], now)}; "
                     f"{tables.count(report['sent'])} sent; reported "
                     f"{tables.age(report['at'], now)}"))
    for file in buffers["files"]:
        if file.get("foreign"):
            rows.append(("Push buffer", f"{file['path']}: {file['foreign']}, not read by this "
                         "wurk: left as it is for the wurk that wrote it"))
            continue
        if not file["pending"]:
            continue
        owner = "its process runs" if file["held"] else \
            "its process is gone: `wurk push-buffer flush` sends them"
        rows.append(("Push buffer", f"{file['path']}: {tables.count(file['pending'])} waiting, "
                     f"the oldest {tables.age(file['oldest'], now)}; {owner}"))
    if rows or buffers["sent"]:
        rows.insert(0, ("Recovered pushes", f"{tables.count(buffers['sent'])} sent from reliable "
                        "push buffers after Redis came back"))
    return rows


def _counted(beats: list[float], now: float) -> str:
    """How fresh the processed and failed counts are: running workers add theirs at each
    heartbeat, so a job done since a worker's last beat is not counted yet."""
    if not beats:
        return ""
    return (f" (as of each running worker's last heartbeat, the oldest "
            f"{tables.age(min(beats), now)})")


# -- queues -----------------------------------------------------------------------------------
@click.group("queues", invoke_without_command=True)
@json_option
@click.pass_context
@friendly
def queues_command(ctx: click.Context, as_json: bool) -> None:
    """List queues (size, latency, paused); or pause, unpause or clear one."""
    if ctx.invoked_subcommand is not None:
        return
    summaries = Stats(default_config()).queue_summaries()
    if as_json:
        emit_json([summary.to_dict() for summary in summaries])
        return
    if not summaries:
        click.echo("No queues.")
        return
    rows = [(s.name, tables.count(s.size), tables.duration(s.latency),
             "paused" if s.paused else "") for s in summaries]
    click.echo(tables.table(("QUEUE", "SIZE", "LATENCY", "STATE"), rows, right=(1, 2)))


def _queue(name: str) -> Queue:
    try:
        return Queue(name, default_config())
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None


@queues_command.command("pause")
@click.argument("name")
@friendly
def pause_command(name: str) -> None:
    """Stop workers fetching from queue NAME (running jobs finish)."""
    _queue(name).pause()
    click.echo(f"Paused queue {name!r}: workers stop fetching from it within seconds.")


@queues_command.command("unpause")
@click.argument("name")
@friendly
def unpause_command(name: str) -> None:
    """Let workers fetch from queue NAME again."""
    _queue(name).unpause()
    click.echo(f"Unpaused queue {name!r}.")


@queues_command.command("clear")
@click.argument("name")
@yes_option
@friendly
def clear_command(name: str, yes: bool) -> None:
    """Delete every job waiting in queue NAME, and forget the queue."""
    queue = _queue(name)
    size = queue.size()
    if size == 0 and name not in {q.name for q in Queue.all(queue.config)}:
        raise click.ClickException(f"there is no queue named {name!r} (see `wurk queues`)")
    confirm(f"Delete all {tables.count(size)} jobs in queue {name!r}?", yes=yes,
            action=f"clearing queue {name!r}")
    removed = queue.clear()
    click.echo(f"Cleared queue {name!r}: {tables.count(removed)} jobs deleted.")


# -- retries and dead -------------------------------------------------------------------------
def _entries(job_set: JobSet, limit: int, grep: str | None) -> list[SortedEntry]:
    """The first ``limit`` entries in the set's order — soonest first for the retry and
    scheduled sets, latest death first for the dead set, as Sidekiq's pages list them — or
    up to ``limit`` containing ``grep``, in that order."""
    latest_first = isinstance(job_set, DeadSet)
    if not grep:
        return job_set.page(0, limit, descending=latest_first)
    chosen = list(itertools.islice(job_set.scan(grep), limit))
    return sorted(chosen, key=lambda e: e.score, reverse=latest_first)


def _args(entry: SortedEntry) -> str:
    if entry.parse_error is not None:
        return ""
    return json.dumps(entry.display_args, ensure_ascii=False, separators=(",", ":"))[1:-1]


def _error(entry: SortedEntry) -> str:
    if entry.parse_error is not None:
        return entry.text
    if entry.error_class is None:
        return ""
    return f"{entry.error_class}: {entry.error_message or ''}"


def _list_set(job_set: JobSet, *, limit: int, grep: str | None, as_json: bool,
              when: str) -> None:
    total = job_set.size()
    entries = _entries(job_set, limit, grep)
    if as_json:
        emit_json({"total": total, "shown": len(entries),
                   "entries": [entry.to_dict() for entry in entries]})
        return
    click.echo(f"{tables.count(total)} in the {job_set.label}"
               + (f"; {len(entries)} shown" if len(entries) < total else ""))
    if not entries:
        return
    now = time.time()
    rows = [(tables.age(e.at, now), e.jid, e.display_class, _args(e), e.queue,
             "" if e.retry_count is None else str(e.retry_count), _error(e)) for e in entries]
    headers = (when, "JID", "JOB", "ARGS", "QUEUE", "RETRIES", "ERROR")
    click.echo(tables.table(headers, rows, right=(5,)))


def _set_group(name: str, kind: type[JobSet], when: str, doc: str) -> click.Group:
    """``wurk NAME`` lists the set; ``wurk NAME clear`` empties it."""
    @click.group(name, help=doc, invoke_without_command=True)
    @click.option("--limit", "-n", type=click.IntRange(min=1), default=DEFAULT_LIMIT,
                  show_default=True, help="Show at most this many entries.")
    @click.option("--grep", metavar="TEXT", help="Only entries whose JSON contains TEXT.")
    @json_option
    @click.pass_context
    @friendly
    def listing(ctx: click.Context, limit: int, grep: str | None, as_json: bool) -> None:
        if ctx.invoked_subcommand is None:
            _list_set(kind(default_config()), limit=limit, grep=grep, as_json=as_json,
                      when=when)

    @listing.command("clear", help=f"Delete every job in the {kind.label} (asks first).")
    @yes_option
    @friendly
    def clear(yes: bool) -> None:
        _clear_set(kind(default_config()), yes=yes)

    return listing


def _clear_set(job_set: JobSet, *, yes: bool) -> None:
    size = job_set.size()
    if size == 0:
        click.echo(f"The {job_set.label} is empty; nothing to clear.")
        return
    confirm(f"Delete {'the' if size == 1 else 'all'} {tables.plural(size, 'job')} in the "
            f"{job_set.label}?", yes=yes, action=f"clearing the {job_set.label}")
    removed = job_set.clear()
    click.echo(f"Cleared the {job_set.label}: {tables.plural(removed, 'job')} deleted.")


retries_command = _set_group(
    "retries", RetrySet, "NEXT TRY",
    "Failed jobs waiting for their next attempt, the soonest first.")
scheduled_command = _set_group(
    "scheduled", ScheduledSet, "RUNS",
    "Jobs pushed to run later (perform_in, perform_at), the soonest first.")
dead_command = _set_group(
    "dead", DeadSet, "DIED",
    "Jobs whose retries ran out, most recent death first.")


# -- processes --------------------------------------------------------------------------------
@click.command("processes")
@json_option
@friendly
def processes_command(as_json: bool) -> None:
    """Worker processes: busy threads, memory, last heartbeat, queues."""
    processes = list(ProcessSet(default_config()).iterate())
    if as_json:
        emit_json([process.to_dict() for process in processes])
        return
    if not processes:
        click.echo("No processes.")
        return
    now = time.time()
    rows = [(f"{p.hostname}:{p.pid}", p.tag, tables.age(p.started_at, now),
             f"{p.busy}/{p.concurrency}", tables.kilobytes(p.rss_kb), tables.age(p.beat, now),
             ",".join(p.queues), _state(p)) for p in processes]
    headers = ("PROCESS", "TAG", "STARTED", "BUSY", "RSS", "BEAT", "QUEUES", "STATE")
    click.echo(tables.table(headers, rows, right=(3, 4)))
    busy = values.valid_total(p.busy for p in processes)
    threads = values.valid_total(p.concurrency for p in processes)
    click.echo(f"{tables.plural(len(processes), 'process', 'processes')}; {busy} of "
               f"{tables.plural(threads, 'thread')} busy; "
               f"{tables.kilobytes(values.valid_total(p.rss_kb for p in processes))} RSS")


def _state(process: Process) -> str:
    flags = [("quiet", process.stopping), ("leader", process.leader),
             ("embedded", process.embedded)]
    return ",".join(name for name, on in flags if on)


# -- actions on one job -----------------------------------------------------------------------
def _find(jid: str, sets: Iterable[JobSet]) -> SortedEntry | None:
    for job_set in sets:
        entry = job_set.find_job(jid)
        if entry is not None:
            return entry
    return None


@click.command("retry")
@click.argument("jid")
@friendly
def retry_command(jid: str) -> None:
    """Push job JID from the retry, dead or scheduled set to its queue now."""
    config = default_config()
    entry = _find(jid, (RetrySet(config), DeadSet(config), ScheduledSet(config)))
    if entry is None:
        raise click.ClickException(f"no job with jid {jid!r} in the retry, dead or scheduled "
                                   "set")
    label = entry.parent.label
    moved = entry.add_to_queue() if isinstance(entry.parent, ScheduledSet) else entry.retry()
    if not moved:
        raise click.ClickException(f"job {jid} left the {label} before it could be retried")
    click.echo(printable(f"Pushed {entry.display_class} {jid} from the {label} to queue "
                         f"{entry.queue!r}."))


@click.command("kill")
@click.argument("jid")
@yes_option
@friendly
def kill_command(jid: str, yes: bool) -> None:
    """Move job JID from the retry or scheduled set to the dead set."""
    config = default_config()
    entry = _find(jid, (RetrySet(config), ScheduledSet(config)))
    if entry is None:
        where = " (it is already in the dead set)" if DeadSet(config).find_job(jid) else ""
        raise click.ClickException(f"no job with jid {jid!r} in the retry or scheduled "
                                   f"set{where}")
    label = entry.parent.label
    confirm(printable(f"Kill {entry.display_class} {jid} (move it from the {label} to the "
                      "dead set)?"), yes=yes, action=f"killing job {jid}")
    if not entry.kill():
        raise click.ClickException(f"job {jid} left the {label} before it could be killed")
    click.echo(printable(f"Killed {entry.display_class} {jid}: moved from the {label} to the "
                         "dead set."))
