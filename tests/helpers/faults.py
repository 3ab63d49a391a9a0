"""What the fault tests share: a Redis that can be restarted in place, an in-process worker
pointed at it through the fault proxy, and the figures of a run.

1. ``Restartable``: a private server with its append-only file on a fixed port, so it can be
   stopped (cleanly: the AOF is flushed) and started again where clients expect it.
2. ``InProcessWorker``: a ``Launcher`` in the test process, so a test can look at its
   threads and its log while faults hit it; settings fast enough for tests.
3. ``Figures``: pushed, completed, duplicated and lost jids, from the ledger the jobs write
   (``tests.chaos.jobs``), never from the Redis under test.
4. ``outage_lines``: the start and end lines each component logged for its outages.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

import wurk
from tests.chaos import jobs
from tests.helpers.server import Server, free_port, start_server
from wurk.launcher import Launcher

FAST = {
    "heartbeat_interval": 0.2,
    "poll_interval_average": 0.2,
    "scheduler_initial_wait": 0,
    "fetch_timeout": 0.5,
    "reaper_interval": 0.5,
    "paused_cache_ttl": 0.5,
    "socket_timeout": 1.0,
    "timeout": 5,
    "shutdown_grace": 1,
    "skip_default_job_logging": True,
}


class Restartable:
    """A server with AOF on a fixed port, stopped and started in place."""

    def __init__(self, directory: Path, *, extra: Sequence[str] = ()) -> None:
        self.directory = directory
        self.port = free_port()
        self.extra = list(extra)
        self.server: Server | None = start_server(directory, port=self.port, appendonly=True,
                                                  extra=self.extra)
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **options: Any) -> redis.Redis:
        return redis.Redis(port=self.port, **options)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()  # SIGTERM: the server flushes its AOF and exits
            self.server = None

    def start(self, extra: Sequence[str] = ()) -> None:
        self.server = start_server(self.directory, port=self.port, appendonly=True,
                                   extra=[*self.extra, *extra])

    def restart(self, down_for: float = 0.0, extra: Sequence[str] = ()) -> None:
        self.stop()
        time.sleep(down_for)
        self.start(extra)
        self.restarts += 1


def config_for(url: str, **settings: Any) -> wurk.Config:
    """A configuration for ``url``: ``REDIS_URL`` wins over settings, so it is set meanwhile."""
    previous = os.environ.get("REDIS_URL")
    os.environ["REDIS_URL"] = url
    try:
        return wurk.Config(**{**FAST, **settings})
    finally:
        if previous is None:
            os.environ.pop("REDIS_URL", None)
        else:
            os.environ["REDIS_URL"] = previous


class InProcessWorker:
    """A worker (launcher) in this process, for tests that watch its threads."""

    def __init__(self, url: str, **settings: Any) -> None:
        self.config = config_for(url, **settings)
        self.launcher = Launcher(self.config)

    def start(self) -> InProcessWorker:
        self.launcher.start()
        return self

    def stop(self) -> None:
        self.launcher.stop()
        self.config.close()

    def processor_names(self) -> list[str]:
        return sorted(p.name for m in self.launcher.managers for p in m.processors)

    def threads_alive(self) -> dict[str, bool]:
        """Every long-lived thread this worker owns, and whether it is running."""
        launcher = self.launcher
        alive = {p.name: p.thread.is_alive() for m in launcher.managers for p in m.processors}
        alive["heartbeat"] = launcher.heartbeat.is_alive()
        alive["poller"] = launcher.timers.is_alive()
        alive["scheduler"] = launcher.scheduler.is_alive()
        if launcher.reaper is not None:
            alive["reaper"] = launcher.reaper.is_alive()
        return alive

    def held(self) -> str:
        """What its processors hold (jids by private list) and which threads live: for a
        failure message."""
        claims = self.launcher.claims
        with claims._lock:
            units = list(claims._units.values())
        by_list: dict[str, list[str]] = {}
        for key, unit in units:
            by_list.setdefault(key, []).append(unit.jid or "?")
        return f"{by_list or 'nothing'}, threads {self.threads_alive()}"

    def assert_healthy(self, concurrency: int) -> None:
        """No thread died and none was replaced (a replacement has a new serial)."""
        expected = sorted(f"wurk-default-{i}" for i in range(1, concurrency + 1))
        assert self.processor_names() == expected
        assert all(self.threads_alive().values()), self.threads_alive()


@dataclass
class Figures:
    pushed: int
    completed: int
    duplicated: int
    lost: int
    missing: list[str] = field(default_factory=list)

    def line(self, label: str = "chaos") -> str:
        return (f"{label}: pushed={self.pushed} completed={self.completed} "
                f"duplicated={self.duplicated} lost={self.lost}")


def ledger_runs(ledger: redis.Redis) -> Counter[str]:
    return Counter(jid.decode() if isinstance(jid, bytes) else jid
                   for jid in ledger.lrange(jobs.RAN, 0, -1))


def figures(pushed: Iterable[str], ledger: redis.Redis) -> Figures:
    wanted = set(pushed)
    runs = ledger_runs(ledger)
    done = wanted & set(runs)
    duplicated = sum(runs[jid] - 1 for jid in done)
    missing = sorted(wanted - done)
    return Figures(len(wanted), len(done), duplicated, len(missing), missing)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    done = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        done.wait(0.05)


def replicated(primary: redis.Redis, timeout: float = 30.0, replicas: int = 1) -> None:
    """Until ``replicas`` replicas of ``primary`` acknowledged every write it has taken so far
    (by the offsets each replica reports, once a second). Not ``WAIT`` on a connection of
    the test's own: that waits for that connection's writes — none — and answers at once
    while a loaded replica lags seconds behind."""
    written = int(primary.info("replication")["master_repl_offset"])

    def caught_up() -> bool:
        info = primary.info("replication")
        acked = [int(entry["offset"]) for name, entry in info.items()
                 if name.startswith("slave") and isinstance(entry, dict)]
        return sum(offset >= written for offset in acked) >= replicas

    wait_until(caught_up, timeout, f"{replicas} replica(s) to have every write so far")


def all_ran(pushed: Iterable[str], ledger: redis.Redis) -> Callable[[], bool]:
    wanted = set(pushed)
    return lambda: wanted <= set(ledger_runs(ledger))


def whereabouts(jids: Iterable[str], server: redis.Redis, limit: int = 10) -> str:
    """Where each of ``jids`` (the first ``limit``) is on ``server``: the keys holding it, for
    a failure message that says where the jobs that never ran went."""
    wanted = list(jids)[:limit]
    found: dict[str, list[str]] = {jid: [] for jid in wanted}
    for key in server.scan_iter(count=1000):
        name = key.decode() if isinstance(key, bytes) else str(key)
        kind = server.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        if kind == "list":
            members = server.lrange(key, 0, -1)
        elif kind == "zset":
            members = server.zrange(key, 0, -1)
        elif kind == "hash":
            members = server.hvals(key)
        else:
            continue
        for member in members:
            text = member.decode(errors="replace") if isinstance(member, bytes) else str(member)
            for jid in wanted:
                if jid in text:
                    found[jid].append(name)
    return "; ".join(f"{jid}: {', '.join(keys) or 'nowhere'}" for jid, keys in found.items())


def outage_lines(records: Iterable[logging.LogRecord]) -> dict[str, tuple[int, int]]:
    """component → (outages reported, outages ended), from the wurk log."""
    starts: Counter[str] = Counter()
    ends: Counter[str] = Counter()
    for record in records:
        if record.name != "wurk":
            continue
        text = record.getMessage()
        if record.levelno >= logging.ERROR and ": wurk.RedisUnavailable: " in text:
            starts[text.split(": wurk.RedisUnavailable: ", 1)[0]] += 1
        elif " Redis is back after " in text:
            ends[text.split(": Redis is back after ", 1)[0]] += 1
    return {name: (starts[name], ends[name]) for name in set(starts) | set(ends)}


def use_ledger(monkeypatch: pytest.MonkeyPatch, url: str) -> redis.Redis:
    """Jobs run in this process record to ``url``."""
    monkeypatch.setenv(jobs.LEDGER_ENV, url)
    monkeypatch.setattr(jobs, "_ledger", None)
    return redis.Redis.from_url(url)


def spawn_worker(log: Path, settings: Path, env: dict[str, str],
                 concurrency: int | None = None) -> subprocess.Popen[bytes]:
    """A ``wurk worker`` of the chaos runs' jobs (``tests.chaos.jobs``), its output in
    ``log``; ``concurrency`` when the settings file does not say it."""
    threads = [] if concurrency is None else ["-c", str(concurrency)]
    return subprocess.Popen(
        [sys.executable, "-m", "wurk", "worker", "-r", "tests.chaos.jobs", *threads,
         "-C", str(settings)], cwd=Path(__file__).resolve().parents[2], env=env,
        stdout=log.open("wb"), stderr=subprocess.STDOUT)


# The chaos runs' worker settings: quick heartbeats, reaps and polls, short timeouts, so
# faults show and heal within a run; no line per job.
WORKER_SETTINGS = """\
heartbeat_interval: 0.5
reaper_interval: 1
poll_interval_average: 0.2
scheduler_initial_wait: 0
fetch_timeout: 0.5
socket_timeout: 1
timeout: 5
skip_default_job_logging: true
"""
