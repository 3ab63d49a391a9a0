"""The no-op job of benchmarks/throughput.py: one INCR, so the work is visible."""

from __future__ import annotations

import os

import redis

import wurk

_client: redis.Redis | None = None


@wurk.job(name="BenchIncr")
def bench_incr() -> None:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ["REDIS_URL"])
    _client.incr("bench:count")
