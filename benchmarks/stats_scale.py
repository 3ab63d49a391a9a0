"""``wurk stats --json`` on a big Redis: 1,000,000 jobs in one queue and 100,000 in the dead
set. Measures each command as a real subprocess: wall time and peak RSS (``wait4``).

    python -m benchmarks.stats_scale [--jobs 1000000] [--dead 100000] [--runs 5]

Uses REDIS_URL when set (its data is flushed!), else starts a private server. The target:
under 1 s and under 100 MB RSS for ``wurk stats --json``. ``wurk queues --json``
and ``wurk dead`` (the first page of the dead set) are measured alongside for reference, and
``wurk --version`` as the floor (starting Python and importing wurk, click and redis-py).

Each command runs once unmeasured first, with bytecode caching allowed even when
PYTHONDONTWRITEBYTECODE is set here, so the runs see what an installed wurk sees (pip
compiles an installed package's bytecode; an editable checkout compiles on first run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from benchmarks._server import redis_url

# Jobs per LPUSH / members per ZADD, and commands per pipeline: large enough that seeding a
# million jobs takes seconds, small enough to keep each reply quick.
PUSH_BATCH = 1000
PIPELINE_COMMANDS = 20
LIMITS = {"seconds": 1.0, "rss_mb": 100.0}
TIME = "/usr/bin/time"  # GNU time, for the child's own peak RSS


def payload(n: int, now_ms: int, **extra: object) -> str:
    """A Sidekiq 8 payload of ordinary size (~180 bytes)."""
    return json.dumps({"retry": True, "queue": "default", "class": "Billing::InvoiceJob",
                       "args": [n, "customer-4711", {"notify": True}],
                       "jid": secrets.token_hex(12), "created_at": now_ms,
                       "enqueued_at": now_ms, **extra}, separators=(",", ":"))


def seed(r: redis.Redis, jobs: int, dead: int) -> None:
    now_ms = int(time.time() * 1000)
    r.flushall()
    r.sadd("queues", "default")
    pipe = r.pipeline(transaction=False)
    for start in range(0, jobs, PUSH_BATCH):
        pipe.lpush("queue:default", *(payload(n, now_ms)
                                      for n in range(start, min(jobs, start + PUSH_BATCH))))
        if len(pipe) >= PIPELINE_COMMANDS:
            pipe.execute()
    now = time.time()
    for start in range(0, dead, PUSH_BATCH):
        members = {payload(n, now_ms, error_class="RuntimeError", error_message="boom",
                           failed_at=now_ms, retry_count=25): now - n
                   for n in range(start, min(dead, start + PUSH_BATCH))}
        pipe.zadd("dead", members)
        if len(pipe) >= PIPELINE_COMMANDS:
            pipe.execute()
    pipe.execute()
    assert r.llen("queue:default") == jobs and r.zcard("dead") == dead


def wurk_command() -> list[str]:
    script = Path(sys.executable).parent / "wurk"
    if script.exists():
        return [str(script)]
    found = shutil.which("wurk")
    return [found] if found else [sys.executable, "-c", "from wurk.cli import entry; entry()"]


def measure(argv: list[str], env: dict[str, str]) -> tuple[float, float, bytes]:
    """Wall seconds, peak RSS in MB and stdout of one run of the CLI."""
    with tempfile.TemporaryDirectory() as scratch:
        rss_file, out_file = Path(scratch) / "rss", Path(scratch) / "out"
        command = [*wurk_command(), *argv]
        if Path(TIME).exists():
            command = [TIME, "-f", "%M", "-o", str(rss_file), *command]
        with out_file.open("wb") as out:
            start = time.perf_counter()
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.PIPE, env=env)
            _, status, usage = os.wait4(process.pid, 0)
            elapsed = time.perf_counter() - start
        error = process.stderr.read() if process.stderr else b""
        if process.stderr:
            process.stderr.close()
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            raise SystemExit(f"wurk {' '.join(argv)} failed: {error.decode()}")
        # ru_maxrss of a child forked from this (large) process also counts the memory it
        # shared before exec; GNU time is a small parent, so its figure is the CLI's own.
        kb = int(rss_file.read_text().split()[-1]) if rss_file.exists() else usage.ru_maxrss
        return elapsed, kb / 1024, out_file.read_bytes()


def in_process(url: str, runs: int) -> float:
    """Median seconds of the reads ``wurk stats --json`` does, without starting Python."""
    from wurk import Config
    from wurk.api import Stats

    config = Config(redis_url=url)
    try:
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            Stats(config).to_dict()
            times.append(time.perf_counter() - start)
        return statistics.median(times)
    finally:
        config.close()


def report(name: str, runs: list[tuple[float, float, bytes]], limits: bool) -> bool:
    times = [t for t, _, _ in runs]
    peak = max(rss for _, rss, _ in runs)
    ok = max(times) < LIMITS["seconds"] and peak < LIMITS["rss_mb"]
    verdict = ("PASS" if ok else "FAIL") if limits else ""
    print(f"{name:<22}{statistics.median(times):>10.3f}{max(times):>10.3f}{peak:>10.1f}  "
          f"{verdict}")
    return ok or not limits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--dead", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    servers = contextlib.ExitStack()
    url = servers.enter_context(redis_url())
    r = redis.Redis.from_url(url)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["REDIS_URL"] = url
    try:
        started = time.perf_counter()
        seed(r, options.jobs, options.dead)
        print(f"seeded {options.jobs:,} jobs in queue:default and {options.dead:,} dead "
              f"entries in {time.perf_counter() - started:.1f}s "
              f"(server memory {r.info('memory')['used_memory_human']})")
        print(f"Stats().to_dict() in this process: median {in_process(url, options.runs):.4f} s "
              "(the Redis work alone, no interpreter start)")
        for argv in (["stats", "--json"], ["queues", "--json"], ["dead"], ["--version"]):
            measure(argv, env)  # warm-up: bytecode written, page cache filled
        stats = [measure(["stats", "--json"], env) for _ in range(options.runs)]
        numbers = json.loads(stats[-1][2])
        assert numbers["enqueued"] == options.jobs and numbers["dead"] == options.dead, numbers
        others = {"queues --json": [measure(["queues", "--json"], env)
                                    for _ in range(options.runs)],
                  "dead (first page)": [measure(["dead"], env) for _ in range(options.runs)],
                  "--version (floor)": [measure(["--version"], env)
                                        for _ in range(options.runs)]}
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"{options.runs} runs each     median s     max s  peak MB")
        ok = report("stats --json", stats, limits=True)
        for name, runs in others.items():
            report(name, runs, limits=False)
        print(f"target: stats --json under {LIMITS['seconds']:.0f} s and "
              f"{LIMITS['rss_mb']:.0f} MB: {'met' if ok else 'NOT met'}")
        if not ok:
            raise SystemExit(1)
    finally:
        r.flushall()
        r.close()
        servers.close()


if __name__ == "__main__":
    main()
