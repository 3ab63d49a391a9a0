"""Huey's side of the comparison: ``huey_consumer benchmarks.peers.huey_jobs.huey -w 10
-k thread``. The consumer finds the Huey instance as a module global, so the URL is read
at import. Huey has no bulk push, so no ``push_bulk``.
"""

from __future__ import annotations

import os

from huey import RedisHuey

from benchmarks.peers import shared

huey = RedisHuey("bench", url=os.environ["BENCH_REDIS_URL"])


@huey.task(name="bench.incr")
def incr() -> None:
    shared.incr()


@huey.task(name="bench.record")
def record(pushed_at: float) -> None:
    shared.record_latency(pushed_at)


def push_single(jobs: int) -> None:
    for _ in range(jobs):
        incr()


def push_warmup() -> None:
    incr()


def push_paced(pushed_at: float) -> None:
    record(pushed_at)
