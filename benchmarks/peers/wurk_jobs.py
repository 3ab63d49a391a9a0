"""wurk's side of the comparison: the two benchmark jobs and their pushers.

The worker runs ``wurk worker -r benchmarks.peers.wurk_jobs``; the server comes from
``REDIS_URL`` (read when wurk builds its configuration, not at import). The jobs write
through ``wurk.redis()``, as the Sidekiq jobs write through ``Sidekiq.redis`` and arq's
through its ``ctx["redis"]``: each system's own way for a job to reach Redis.
BENCH_WURK_JOB_CLIENT=redis-py makes them use the shared redis-py client instead, as the
peers without such an accessor do, to show what the accessor is worth; for the async job,
redis-py's asyncio client (as arq's ``ctx["redis"]`` and the SAQ job are), with a pool as
large as SAQ's for the same concurrency (``BENCH_CONCURRENCY``).
"""

from __future__ import annotations

import asyncio
import os
import time

import redis.asyncio as aredis

import wurk
from benchmarks.peers import shared

# Read at import in the worker process only: it picks the job bodies below.
_REDIS_PY = os.environ.get("BENCH_WURK_JOB_CLIENT") == "redis-py"
# The async job's redis-py client: made on first use, on the worker's one event loop.
_CONNECTIONS = 2 * int(os.environ.get("BENCH_CONCURRENCY", "10")) + 20
_async_client: aredis.Redis | None = None


@wurk.job(name="BenchIncr")
def bench_incr() -> None:
    if _REDIS_PY:
        shared.incr()
        return
    with wurk.redis() as conn:
        conn.call("INCR", shared.COUNTER)


@wurk.job(name="BenchLatency")
def bench_latency(pushed_at: float) -> None:
    if _REDIS_PY:
        shared.record_latency(pushed_at)
        return
    with wurk.redis() as conn:
        conn.call("RPUSH", shared.LATENCY, time.time() - pushed_at)


@wurk.job(name="BenchWait")
async def bench_wait() -> None:
    """The async row: an I/O-bound job awaiting 50 ms, then one INCR without blocking."""
    global _async_client
    await asyncio.sleep(shared.WAIT_SECONDS)
    if _REDIS_PY:
        if _async_client is None:
            _async_client = aredis.from_url(os.environ["BENCH_REDIS_URL"],
                                            max_connections=_CONNECTIONS)
        await _async_client.incr(shared.COUNTER)
        return
    async with wurk.redis() as conn:
        await conn.call("INCR", shared.COUNTER)


def push_waits(jobs: int) -> None:
    for start in range(0, jobs, shared.BULK_SLICE):
        bench_wait.perform_bulk([[]] * min(shared.BULK_SLICE, jobs - start))


def push_single(jobs: int) -> None:
    for _ in range(jobs):
        bench_incr.perform_async()


def push_bulk(jobs: int) -> None:
    for start in range(0, jobs, shared.BULK_SLICE):
        bench_incr.perform_bulk([[]] * min(shared.BULK_SLICE, jobs - start))


def push_warmup() -> None:
    bench_incr.perform_async()


def push_paced(pushed_at: float) -> None:
    bench_latency.perform_async(pushed_at)
