"""Celery's side of the comparison: ``celery -A benchmarks.peers.celery_jobs worker
--pool threads --concurrency 10``; Redis broker, no result backend, default acks and
prefetch. Celery finds its app as a module global, so the broker URL is read at import.
Celery has no bulk push of independent tasks, so no ``push_bulk``.
"""

from __future__ import annotations

import os

from celery import Celery

from benchmarks.peers import shared

app = Celery("bench", broker=os.environ["BENCH_REDIS_URL"])


@app.task(name="bench.incr")
def incr() -> None:
    shared.incr()


@app.task(name="bench.record")
def record(pushed_at: float) -> None:
    shared.record_latency(pushed_at)


def push_single(jobs: int) -> None:
    for _ in range(jobs):
        incr.delay()


def push_warmup() -> None:
    incr.delay()


def push_paced(pushed_at: float) -> None:
    record.delay(pushed_at)
