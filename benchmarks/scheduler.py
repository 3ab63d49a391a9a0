"""Scheduler drain rate: how fast one ``enqueue_due`` pass moves a backlog of due jobs from
``schedule`` to their queue, atomic (Lua, 100 per call) against client (one per pop, pushed
through the client as Sidekiq OSS does).

    python -m benchmarks.scheduler [--jobs 20000] [--runs 3]

Uses REDIS_URL when set, else starts a private server. Prints medians.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import redis

from wurk.config import Config
from wurk.scheduled import Scheduler


def backlog(r: redis.Redis, jobs: int) -> None:
    r.flushall()
    past = time.time() - 60
    pipe = r.pipeline(transaction=False)
    for n in range(jobs):
        member = json.dumps({"retry": True, "queue": "default", "class": "BenchJob",
                             "args": [n, "label"], "jid": secrets.token_hex(12),
                             "created_at": int(past * 1000)}, separators=(",", ":"))
        pipe.zadd("schedule", {member: past + n / 1e6})
    pipe.execute()


def measure(r: redis.Redis, mode: str, jobs: int) -> float:
    backlog(r, jobs)
    config = Config(scheduler=mode)  # type: ignore[arg-type]
    scheduler = Scheduler(config)
    start = time.perf_counter()
    moved = scheduler.enqueue_due()
    elapsed = time.perf_counter() - start
    config.close()
    assert moved == jobs and r.llen("queue:default") == jobs
    return jobs / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    server = None
    if not os.environ.get("REDIS_URL"):
        from tests.helpers.server import start_server

        server = start_server(Path(tempfile.mkdtemp(prefix="wurk-bench-")))
        os.environ["REDIS_URL"] = server.url
    r = redis.Redis.from_url(os.environ["REDIS_URL"])
    try:
        print(f"scheduler drain, {options.jobs} due jobs, median of {options.runs} runs")
        for mode in ("atomic", "client"):
            rates = [measure(r, mode, options.jobs) for _ in range(options.runs)]
            print(f"{mode:<8}{statistics.median(rates):>12,.0f} jobs/s")
    finally:
        r.flushall()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
