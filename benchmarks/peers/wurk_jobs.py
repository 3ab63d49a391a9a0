"""wurk's side of the comparison: the two benchmark jobs and their pushers.

The worker runs ``wurk worker -r benchmarks.peers.wurk_jobs``; the server comes from
``REDIS_URL`` (read when wurk builds its configuration, not at import).
"""

from __future__ import annotations

import wurk
from benchmarks.peers import shared


@wurk.job(name="BenchIncr")
def bench_incr() -> None:
    shared.incr()


@wurk.job(name="BenchLatency")
def bench_latency(pushed_at: float) -> None:
    shared.record_latency(pushed_at)


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
