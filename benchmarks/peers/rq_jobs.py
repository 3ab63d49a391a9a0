"""RQ's side of the comparison: ``rq worker default`` (a fork per job) or with
``--worker-class rq.worker.SimpleWorker`` (jobs in the worker process). One RQ worker
runs one job at a time: concurrency does not apply. Bulk is ``Queue.enqueue_many``.
"""

from __future__ import annotations

import os

from redis import Redis
from rq import Queue

from benchmarks.peers import shared

QUEUE = "default"
# Referenced by import path: the pusher may run as another module name than the worker.
INCR = "benchmarks.peers.rq_jobs.incr"
RECORD = "benchmarks.peers.rq_jobs.record"


def incr() -> None:
    shared.incr()


def record(pushed_at: float) -> None:
    shared.record_latency(pushed_at)


def queue() -> Queue:
    return Queue(QUEUE, connection=Redis.from_url(os.environ["BENCH_REDIS_URL"]))


def push_single(jobs: int) -> None:
    target = queue()
    for _ in range(jobs):
        target.enqueue(INCR)


def push_bulk(jobs: int) -> None:
    target = queue()
    for start in range(0, jobs, shared.BULK_SLICE):
        count = min(shared.BULK_SLICE, jobs - start)
        target.enqueue_many([Queue.prepare_data(INCR) for _ in range(count)])


def push_warmup() -> None:
    queue().enqueue(INCR)


_paced: Queue | None = None


def push_paced(pushed_at: float) -> None:
    global _paced
    _paced = _paced or queue()
    _paced.enqueue(RECORD, pushed_at)
