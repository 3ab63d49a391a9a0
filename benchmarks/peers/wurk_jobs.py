"""wurk's side of the comparison: the two benchmark jobs and their pushers.

The worker runs ``wurk worker -r benchmarks.peers.wurk_jobs``; the server comes from
``REDIS_URL`` (read when wurk builds its configuration, not at import). The jobs write
through ``wurk.redis()``, as the Sidekiq jobs write through ``Sidekiq.redis`` and arq's
through its ``ctx["redis"]``: each system's own way for a job to reach Redis.
BENCH_WURK_JOB_CLIENT=redis-py makes them use the shared redis-py client instead, as the
peers without such an accessor do, to show what the accessor is worth.
"""

from __future__ import annotations

import asyncio
import os
import time

import wurk
from benchmarks.peers import shared

# Read at import in the worker process only: it picks the job bodies below.
_REDIS_PY = os.environ.get("BENCH_WURK_JOB_CLIENT") == "redis-py"


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
    await asyncio.sleep(shared.WAIT_SECONDS)
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
