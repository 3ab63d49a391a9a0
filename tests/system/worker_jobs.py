"""Jobs the system tests run in a real ``wurk worker`` subprocess (loaded with ``-r``).

Every job records what it did in Redis, so the test process can see it."""

from __future__ import annotations

import os
import time
from typing import Any

import wurk
from tests.helpers.job_redis import r
from wurk import payload as P


@wurk.job(name="Sys::Incr")
def incr(key: str) -> None:
    r().incr(key)


@wurk.job(name="Sys::Record")
def record(key: str, value: Any) -> None:
    r().rpush(key, P.dumps([value, time.time()]))


@wurk.job(name="Sys::Sleep")
def sleep_job(seconds: float, key: str) -> None:
    r().rpush(f"{key}:started", "1")
    time.sleep(seconds)
    r().rpush(f"{key}:done", "1")


@wurk.job(name="Sys::Gated")
def gated(key: str) -> None:
    """Runs until the test pushes to ``<key>:gate`` (at most a minute): its length is the
    test's to decide. It looks every 0.1 s, so a stop's interrupt lands between looks."""
    r().rpush(f"{key}:started", "1")
    deadline = time.monotonic() + 60
    while r().lpop(f"{key}:gate") is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{key}:gate was never opened")
        time.sleep(0.1)
    r().rpush(f"{key}:done", "1")


class Failing(wurk.Job, name="Sys::Fail", retry=2, backtrace=True):
    def perform(self, key: str) -> None:
        r().incr(key)
        raise ValueError(f"boom {key}")

    def retry_in(self, count: int, exc: BaseException) -> float:
        return 0.5


@wurk.job(name="Sys::Async")
async def async_job(key: str) -> None:
    import asyncio

    await asyncio.sleep(0.01)
    r().incr(key)


def _death(job: dict[str, Any], exc: BaseException) -> None:
    r().rpush("sys:deaths", P.dumps([job.get("jid"), type(exc).__name__, str(exc)]))


wurk.default_config().death_handlers.append(_death)


@wurk.job(name="Sys::Mark")
def mark(key: str, pause: float) -> None:
    """Records its jid (for the kill tests), after a short pause that keeps jobs in flight."""
    time.sleep(pause)
    current = wurk.current_jid()
    r().rpush(key, current or "?")


@wurk.job(name="Sys::Crash")
def crash(key: str) -> None:
    """Takes its whole process down, every time: a poison pill."""
    r().incr(key)
    os._exit(17)


@wurk.job(name="Sys::LoopKind")
async def loop_kind(key: str) -> None:
    """Records which event loop it ran on (module and class)."""
    import asyncio

    loop = type(asyncio.get_running_loop())
    async with wurk.redis() as conn:
        await conn.call("RPUSH", key, f"{loop.__module__}.{loop.__name__}")


@wurk.job(name="Sys::AsyncWait")
async def async_wait(key: str, seconds: float) -> None:
    """An I/O-bound async job: waits, then records its jid through ``wurk.redis()``."""
    import asyncio

    await asyncio.sleep(seconds)
    async with wurk.redis() as conn:
        await conn.call("RPUSH", key, wurk.current_jid() or "")


@wurk.job(name="Sys::AsyncBlocker")
async def async_blocker(key: str, seconds: float) -> None:
    """An async job that wrongly blocks the event loop with a sync sleep."""
    time.sleep(seconds)
    async with wurk.redis() as conn:
        await conn.call("RPUSH", key, "1")


@wurk.job(name="Sys::Modules")
def modules(key: str) -> None:
    """What the worker process has imported, for the test of what a worker keeps."""
    import sys

    r().rpush(key, *sorted(sys.modules))


@wurk.job(name="Sys::MallocStats")
def malloc_stats() -> None:
    """glibc prints one ``Arena N:`` block per malloc arena on the worker's stderr."""
    import ctypes

    ctypes.CDLL(None).malloc_stats()


@wurk.job(name="Sys::AsyncEndsBadly")
async def async_ends_badly(key: str, how: str) -> None:
    """The first run ends without an ACK — cancelled by its own code, ``sys.exit``, or the
    job raising ``wurk.Shutdown`` itself — and no failure to book; a run after that records
    its jid. ``key`` counts the runs of each jid."""
    import asyncio
    import sys

    jid = wurk.current_jid() or ""
    if r().hincrby(key, jid, 1) == 1:
        await asyncio.sleep(0)
        if how == "cancel":
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            await asyncio.sleep(5)
        elif how == "exit":
            sys.exit(3)
        elif how == "shutdown":
            raise wurk.Shutdown("raised by the job")
    r().rpush(f"{key}:done", jid)


_LEFT_BEHIND: set[object] = set()


@wurk.job(name="Sys::AsyncLeavesATask")
async def async_leaves_a_task(key: str, how: str) -> None:
    """Starts a task that outlives it and ends with ``KeyboardInterrupt`` or ``SystemExit``
    (which asyncio lets out of the loop's ``run_forever``), or stops the loop itself."""
    import asyncio

    loop = asyncio.get_running_loop()

    async def later() -> None:
        await asyncio.sleep(0.05)
        if how == "interrupt":
            raise KeyboardInterrupt
        if how == "exit":
            raise SystemExit(1)
        loop.stop()

    _LEFT_BEHIND.add(loop.create_task(later()))  # kept: the job does not await it
    r().rpush(key, wurk.current_jid() or "")


@wurk.job(name="Sys::AsyncFails", retry=1)
async def async_fails(key: str, seconds: float) -> None:
    """Waits, counts itself, and fails: a thousand of them end at about the same time."""
    import asyncio

    await asyncio.sleep(seconds)
    r().incr(key)
    raise ValueError("this job always fails")
