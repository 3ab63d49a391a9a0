"""arq's side of the comparison: ``arq benchmarks.peers.arq_jobs.WorkerSettings`` with
``max_jobs`` from ``BENCH_CONCURRENCY`` (default 10) and arq's default 0.5 s poll. arq's CLI
reads its settings as a class at import, so the URL is read then. The jobs are coroutines
and write through arq's own async client (``ctx["redis"]``), as arq users do; the command
sent is the same INCR / RPUSH. arq has no bulk push, so no ``push_bulk``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any, ClassVar

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings

from benchmarks.peers import shared

SETTINGS = RedisSettings.from_dsn(os.environ["BENCH_REDIS_URL"])


async def incr(ctx: dict[str, Any]) -> None:
    await ctx["redis"].incr(shared.COUNTER)


async def record(ctx: dict[str, Any], pushed_at: float) -> None:
    await ctx["redis"].rpush(shared.LATENCY, time.time() - pushed_at)


async def wait(ctx: dict[str, Any]) -> None:
    await asyncio.sleep(shared.WAIT_SECONDS)
    await ctx["redis"].incr(shared.COUNTER)


async def on_startup_quiet(_ctx: dict[str, Any]) -> None:
    """arq has no switch for its per-job log lines; with BENCH_QUIET=true (run.py's default)
    its worker logger drops to WARNING once the CLI has set logging up."""
    if os.environ.get("BENCH_QUIET") == "true":
        logging.getLogger("arq.worker").setLevel(logging.WARNING)


class WorkerSettings:
    functions: ClassVar[list[Any]] = [incr, record, wait]
    redis_settings = SETTINGS
    max_jobs = int(os.environ.get("BENCH_CONCURRENCY", "10"))
    on_startup = on_startup_quiet


async def _push(jobs: int, name: str = "incr") -> None:
    pool = await create_pool(SETTINGS)
    for _ in range(jobs):
        await pool.enqueue_job(name)
    await pool.aclose()


async def _push_many(jobs: int, name: str) -> None:
    """``jobs`` pushes, ``shared.BULK_SLICE`` in flight at a time: arq has no bulk push, and
    one at a time would spend longer filling the async row's queue than draining it."""
    pool = await create_pool(SETTINGS)
    for start in range(0, jobs, shared.BULK_SLICE):
        count = min(shared.BULK_SLICE, jobs - start)
        await asyncio.gather(*(pool.enqueue_job(name) for _ in range(count)))
    await pool.aclose()


def push_waits(jobs: int) -> None:
    asyncio.run(_push_many(jobs, "wait"))


def push_single(jobs: int) -> None:
    asyncio.run(_push(jobs))


def push_warmup() -> None:
    asyncio.run(_push(1))


_loop: asyncio.AbstractEventLoop | None = None
_pool: ArqRedis | None = None


def push_paced(pushed_at: float) -> None:
    global _loop, _pool
    if _loop is None:
        _loop = asyncio.new_event_loop()
        _pool = _loop.run_until_complete(create_pool(SETTINGS))
    assert _pool is not None
    _loop.run_until_complete(_pool.enqueue_job("record", pushed_at))
