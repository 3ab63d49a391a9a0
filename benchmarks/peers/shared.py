"""What every Python job module of the comparison shares, inside each system's own runtime.

1. The two Redis keys the benchmark jobs write (the Ruby jobs spell the same two names).
2. The jobs' own Redis client, made on first use from ``BENCH_REDIS_URL``.
3. ``enqueue_main``: the command line of ``push.py`` — push N jobs singly (within a time
   budget) or in bulk, push latency jobs at a steady rate, or push the async row's waiting
   jobs — timed inside the process
   (interpreter boot and imports excluded) and reported as one JSON line.

Only the standard library and redis-py are used here: this module runs under the peers'
virtual environment and under the project's alike.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

import redis

if TYPE_CHECKING:
    # Imported by the pusher only (``parse``): the worker processes load this module too,
    # and their memory is measured.
    import argparse

# The drain job INCRs this; the orchestrator polls it with GET until it reaches N.
COUNTER = "bench:counter"
# The latency job RPUSHes (start time - push time) here, in seconds.
LATENCY = "bench:latency"
# The async row's job awaits this long, then INCRs the counter.
WAIT_SECONDS = 0.05
# Bulk pushes go out in slices of this many jobs: Sidekiq's own push_bulk default.
BULK_SLICE = 1000
# How long a paced producer waits for its warm-up job before giving up.
WARMUP_TIMEOUT = 120.0
# Single pushes go out in chunks of this many between looks at the clock, so a slow pusher
# stops near its time budget (and arq opens one pool per chunk, not per job).
SINGLE_CHUNK = 1000

_client: redis.Redis | None = None
_client_lock = threading.Lock()


def job_redis() -> redis.Redis:
    """The client the benchmark jobs INCR / RPUSH through (thread-safe, its own pool)."""
    global _client
    with _client_lock:
        if _client is None:
            _client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"], socket_timeout=10)
        return _client


def incr() -> None:
    job_redis().incr(COUNTER)


def record_latency(pushed_at: float) -> None:
    job_redis().rpush(LATENCY, time.time() - pushed_at)


def pace(push: Callable[[float], None], jobs: int, rate: float) -> None:
    """Push ``jobs`` latency jobs at a steady ``rate`` per second, each carrying its push
    time; a slow push is caught up on, not skipped, so the mean rate holds."""
    start = time.perf_counter()
    for n in range(jobs):
        due = start + n / rate
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)  # pacing to a deadline, not polling
        push(time.time())


def wait_for_warmup(url: str) -> None:
    """Block until the warm-up INCR job has run, so latency excludes the worker's boot."""
    client = redis.Redis.from_url(url, socket_timeout=10)
    deadline = time.monotonic() + WARMUP_TIMEOUT
    while int(client.get(COUNTER) or 0) < 1:
        if time.monotonic() > deadline:
            raise SystemExit("warm-up job never ran: is the worker up?")
        time.sleep(0.01)
    client.close()


def parse(argv: list[str]) -> argparse.Namespace:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers.push SYSTEM")
    parser.add_argument("mode", choices=("single", "bulk", "paced", "waits"))
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--max-seconds", type=float, default=float("inf"),
                        help="single mode: stop pushing after this long")
    return parser.parse_args(argv)


def push_singly(jobs: ModuleType, count: int, budget: float) -> int:
    """Push up to ``count`` jobs one call each, stopping after ``budget`` seconds; returns
    how many were pushed."""
    start, pushed = time.perf_counter(), 0
    while pushed < count and time.perf_counter() - start < budget:
        chunk = min(SINGLE_CHUNK, count - pushed)
        jobs.push_single(chunk)
        pushed += chunk
    return pushed


def enqueue_main(jobs: ModuleType, argv: list[str]) -> None:
    """Run one enqueue mode with a job module's ``push_single(n)``, ``push_bulk(n)`` (absent
    when the system has no bulk push), ``push_warmup()``, ``push_paced(pushed_at)`` and, for
    the systems with async jobs, ``push_waits(n)`` (jobs awaiting ``WAIT_SECONDS``);
    print ``{"seconds": ..., "jobs": ...}``."""
    options = parse(argv)
    start, pushed = time.perf_counter(), options.jobs
    if options.mode == "single":
        pushed = push_singly(jobs, options.jobs, options.max_seconds)
    elif options.mode == "waits":
        jobs.push_waits(options.jobs)
    elif options.mode == "bulk":
        if not hasattr(jobs, "push_bulk"):
            raise SystemExit(f"{jobs.__name__} has no bulk push")
        jobs.push_bulk(options.jobs)
    else:
        jobs.push_warmup()
        wait_for_warmup(os.environ["BENCH_REDIS_URL"])
        start = time.perf_counter()
        pace(jobs.push_paced, options.jobs, options.rate)
    print(json.dumps({"seconds": time.perf_counter() - start, "jobs": pushed}), flush=True)
