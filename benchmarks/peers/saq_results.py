"""SAQ's side of ``benchmarks.results``: a job returning the moment it ends, and the waiter
that awaits ``job.refresh(until_complete=...)`` (SAQ's pub/sub wait) and reads
``job.result``.

    saq benchmarks.peers.saq_results.settings             # the worker
    python -m benchmarks.peers.saq_results SAMPLES        # the waiter: JSON latencies, ms
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

import redis.asyncio as aredis
from saq.queue.redis import RedisQueue as Queue

URL = os.environ["BENCH_REDIS_URL"]


def queue() -> Queue:
    return Queue(aredis.from_url(URL, max_connections=50))


async def stamp(_ctx: dict[str, Any]) -> float:
    return time.time()


settings = {"queue": queue(), "functions": [stamp], "concurrency": 10}


async def measure(samples: int) -> dict[str, Any]:
    """Latencies in ms, and how many waits timed out although the job had completed (SAQ
    reads the job, then subscribes: a completion between the two is not heard)."""
    target = queue()
    await target.connect()
    try:
        warm = await target.enqueue("stamp")
        assert warm is not None
        await warm.refresh(until_complete=30)  # the worker is up
        found, missed = [], 0
        for _ in range(samples):
            job = await target.enqueue("stamp")
            assert job is not None
            try:
                await job.refresh(until_complete=5)
            except asyncio.TimeoutError:
                missed += 1
                continue
            found.append((time.time() - float(job.result)) * 1000)
        return {"ms": found, "missed": missed}
    finally:
        await target.disconnect()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(measure(int(sys.argv[1])))))
