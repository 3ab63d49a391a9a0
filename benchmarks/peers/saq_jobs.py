"""SAQ's side of the async row: ``saq benchmarks.peers.saq_jobs.settings`` with
``concurrency`` from ``BENCH_CONCURRENCY`` (default 10). The job awaits, then INCRs through
its own asyncio client (redis-py's, as SAQ users write it); both clients get a pool large
enough for the concurrency. SAQ runs only async jobs, so it appears in the async row alone.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import redis.asyncio as aredis
from saq.queue.redis import RedisQueue as Queue

from benchmarks.peers import shared

URL = os.environ["BENCH_REDIS_URL"]
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "10"))
# Each of SAQ's concurrency slots blocks on a connection of its own: redis-py's default
# cap (100) makes SAQ fail with "Too many connections" from concurrency 100 up.
CONNECTIONS = 2 * CONCURRENCY + 20
_client: aredis.Redis | None = None


def queue() -> Queue:
    return Queue(aredis.from_url(URL, max_connections=CONNECTIONS))


async def wait(ctx: dict[str, Any]) -> None:
    global _client
    await asyncio.sleep(shared.WAIT_SECONDS)
    if _client is None:
        _client = aredis.from_url(URL, max_connections=CONNECTIONS)
    await _client.incr(shared.COUNTER)


settings = {
    "queue": queue(),
    "functions": [wait],
    "concurrency": CONCURRENCY,
}


async def _push(jobs: int) -> None:
    """``shared.BULK_SLICE`` pushes in flight at a time (on a pool that large): one at a time
    would spend longer filling the async row's queue than draining it."""
    target = Queue(aredis.from_url(URL, max_connections=shared.BULK_SLICE + 20))
    await target.connect()
    for start in range(0, jobs, shared.BULK_SLICE):
        count = min(shared.BULK_SLICE, jobs - start)
        await asyncio.gather(*(target.enqueue("wait") for _ in range(count)))
    await target.disconnect()


def push_waits(jobs: int) -> None:
    asyncio.run(_push(jobs))
