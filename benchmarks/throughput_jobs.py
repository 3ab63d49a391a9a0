"""The no-op job of benchmarks/throughput.py: one INCR through ``wurk.redis()``, so the
work is visible and costs what a job's own Redis command costs. With
``BENCH_JOB_CLIENT=redis-py`` in the worker's environment (``throughput --redis-py``) the
INCR goes through a redis-py client shared by the threads instead, as most Python jobs
reach Redis."""

from __future__ import annotations

import os
import threading

import redis

import wurk

# Read at import in the worker process only: it picks the job body below.
_REDIS_PY = os.environ.get("BENCH_JOB_CLIENT") == "redis-py"
_client: redis.Redis | None = None
_client_lock = threading.Lock()


def _redis_py() -> redis.Redis:
    global _client
    with _client_lock:
        if _client is None:
            _client = redis.Redis.from_url(os.environ["REDIS_URL"], socket_timeout=10)
        return _client


@wurk.job(name="BenchIncr")
def bench_incr() -> None:
    if _REDIS_PY:
        _redis_py().incr("bench:count")
        return
    with wurk.redis() as conn:
        conn.call("INCR", "bench:count")
