"""arq's side of ``benchmarks.results``: a job returning the moment it ends, and the waiter
that awaits ``job.result()`` (arq's default ``poll_delay``: 0.5 s, as its users get it).

    arq benchmarks.peers.arq_results.WorkerSettings       # the worker
    python -m benchmarks.peers.arq_results SAMPLES        # the waiter: JSON latencies, ms
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any, ClassVar

from arq import create_pool
from arq.connections import RedisSettings

SETTINGS = RedisSettings.from_dsn(os.environ["BENCH_REDIS_URL"])


async def stamp(_ctx: dict[str, Any]) -> float:
    return time.time()


class WorkerSettings:
    functions: ClassVar[list[Any]] = [stamp]
    redis_settings = SETTINGS
    max_jobs = 10


async def measure(samples: int) -> dict[str, Any]:
    pool = await create_pool(SETTINGS)
    try:
        warm = await pool.enqueue_job("stamp")
        assert warm is not None
        await warm.result(timeout=30)  # the worker is up
        found = []
        for _ in range(samples):
            job = await pool.enqueue_job("stamp")
            assert job is not None
            ended = await job.result(timeout=10)
            found.append((time.time() - ended) * 1000)
        return {"ms": found, "missed": 0}
    finally:
        await pool.aclose()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(measure(int(sys.argv[1])))))
