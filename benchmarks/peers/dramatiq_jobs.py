"""Dramatiq's side of the comparison: ``dramatiq benchmarks.peers.dramatiq_jobs
--processes 1 --threads 10``.

Dramatiq's CLI finds the broker as a module global set at import, so this module reads
``BENCH_REDIS_URL`` when imported — the peer's design, kept as its users write it.
Dramatiq has no bulk push (a group enqueues one message at a time), so no ``push_bulk``.
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from benchmarks.peers import shared

QUEUE = "default"

dramatiq.set_broker(RedisBroker(url=os.environ["BENCH_REDIS_URL"]))


@dramatiq.actor(queue_name=QUEUE)
def incr() -> None:
    shared.incr()


@dramatiq.actor(queue_name=QUEUE)
def record(pushed_at: float) -> None:
    shared.record_latency(pushed_at)


def push_single(jobs: int) -> None:
    for _ in range(jobs):
        incr.send()


def push_warmup() -> None:
    incr.send()


def push_paced(pushed_at: float) -> None:
    record.send(pushed_at)
