"""The no-op job of benchmarks/throughput.py: one INCR through ``wurk.redis()``, so the
work is visible and costs what a job's own Redis command costs. With
``BENCH_JOB_CLIENT=redis-py`` in the worker's environment (``throughput --redis-py``) the
INCR goes through the peer comparison's shared redis-py client instead (made from
``BENCH_REDIS_URL``), as most Python jobs reach Redis."""

from __future__ import annotations

import os

import wurk
from benchmarks.peers import shared

# Read at import in the worker process only: it picks the job body below.
_REDIS_PY = os.environ.get("BENCH_JOB_CLIENT") == "redis-py"


@wurk.job(name="BenchIncr")
def bench_incr() -> None:
    if _REDIS_PY:
        shared.job_redis().incr("bench:count")
        return
    with wurk.redis() as conn:
        conn.call("INCR", "bench:count")
