"""Enqueue rate: wurk's single and bulk push against the floor, bare redis-py pipelines
sending the same payloads (the same commands: SADD queues + LPUSH) in the same run.

    python -m benchmarks.enqueue [--jobs 20000] [--runs 3]

Uses REDIS_URL when set, else starts a private server. Prints medians and ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import statistics
import time
from collections.abc import Callable

import redis

import wurk
from benchmarks._server import redis_url


@wurk.job(name="BenchJob")
def bench_job(n: int, label: str) -> None: ...


def floor_payload(n: int) -> str:
    now = int(time.time() * 1000)
    return json.dumps({"retry": True, "queue": "default", "class": "BenchJob",
                       "args": [n, "label"], "jid": secrets.token_hex(12),
                       "created_at": now, "enqueued_at": now}, separators=(",", ":"))


def floor_single(r: redis.Redis, jobs: int) -> None:
    for n in range(jobs):
        pipe = r.pipeline(transaction=False)
        pipe.sadd("queues", "default")
        pipe.lpush("queue:default", floor_payload(n))
        pipe.execute()


def floor_bulk(r: redis.Redis, jobs: int) -> None:
    for start in range(0, jobs, 1000):
        pipe = r.pipeline(transaction=False)
        pipe.sadd("queues", "default")
        stop = min(jobs, start + 1000)
        pipe.lpush("queue:default", *(floor_payload(n) for n in range(start, stop)))
        pipe.execute()


def wurk_single(_: redis.Redis, jobs: int) -> None:
    for n in range(jobs):
        bench_job.perform_async(n, "label")


def wurk_bulk(_: redis.Redis, jobs: int) -> None:
    bench_job.perform_bulk([[n, "label"] for n in range(jobs)])


def measure(r: redis.Redis, fn: Callable[[redis.Redis, int], None], jobs: int) -> float:
    r.flushall()
    start = time.perf_counter()
    fn(r, jobs)
    elapsed = time.perf_counter() - start
    assert r.llen("queue:default") == jobs
    return jobs / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    servers = contextlib.ExitStack()
    url = servers.enter_context(redis_url())
    wurk.configure(redis_url=url)
    r = redis.Redis.from_url(url)
    cases = {"single": (wurk_single, floor_single), "bulk": (wurk_bulk, floor_bulk)}
    try:
        print(f"enqueue, {options.jobs} jobs, median of {options.runs} runs (jobs/s)")
        print(f"{'mode':<8}{'wurk':>12}{'floor':>12}{'ratio':>8}")
        for mode, (ours, floor) in cases.items():
            wurk_rates, floor_rates = [], []
            for _ in range(options.runs):  # interleaved so drift hits both alike
                wurk_rates.append(measure(r, ours, options.jobs))
                floor_rates.append(measure(r, floor, options.jobs))
            w, f = statistics.median(wurk_rates), statistics.median(floor_rates)
            print(f"{mode:<8}{w:>12,.0f}{f:>12,.0f}{w / f:>7.2f}x")
    finally:
        r.flushall()
        servers.close()


if __name__ == "__main__":
    main()
