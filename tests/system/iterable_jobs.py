"""Iterable jobs the system tests run in real ``wurk worker`` subprocesses.

Each item adds one to its count in ``iterable:ledger`` (a hash item → runs), written from
inside the job; each execution records ``<execution>:<cursor it started at>`` in
``iterable:runs``."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import redis

import wurk

LEDGER = "iterable:ledger"
RUNS = "iterable:runs"
EVENTS = "iterable:events"
_client: redis.Redis | None = None


def r() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ["REDIS_URL"])
    return _client


class Walk(wurk.IterableJob, name="SysIterable::walk"):
    def build_enumerator(self, count: int, pause: float, *, cursor: int | None) -> Any:
        return wurk.iteration.ids(0, count, cursor=cursor)

    def on_start(self) -> None:
        r().rpush(RUNS, f"{self.executions}:{self.cursor}")

    def on_resume(self) -> None:
        r().rpush(RUNS, f"{self.executions}:{self.cursor}")

    def each_iteration(self, item: int, count: int, pause: float) -> None:
        with wurk.redis() as conn:
            conn.call("HINCRBY", LEDGER, item, 1)
        time.sleep(pause)

    def on_cancel(self) -> None:
        r().rpush(EVENTS, f"cancel:{self.cursor}:{time.time()}")

    def on_complete(self) -> None:
        r().rpush(EVENTS, "complete")


class AsyncWalk(wurk.IterableJob, name="SysIterable::async_walk"):
    def build_enumerator(self, count: int, pause: float, *, cursor: int | None) -> Any:
        return wurk.iteration.ids(0, count, cursor=cursor)

    async def on_resume(self) -> None:
        r().rpush(RUNS, f"{self.executions}:{self.cursor}")

    async def each_iteration(self, item: int, count: int, pause: float) -> None:
        async with wurk.redis() as conn:
            await conn.call("HINCRBY", LEDGER, item, 1)
        await asyncio.sleep(pause)

    def on_cancel(self) -> None:
        r().rpush(EVENTS, f"cancel:{self.cursor}:{time.time()}")

    def on_complete(self) -> None:
        r().rpush(EVENTS, "complete")
