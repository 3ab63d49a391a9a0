"""A host process that starts wurk and then simply returns from main: the drain registered
at exit must stop what it started. ``python -m tests.system.exit_hook_app MODE`` with MODE
``threads`` (``wurk.embed``), ``swarm`` (``boot_swarm``), or ``async`` (``wurk.embed`` with a
sync server link, as Flask's and Django's are, around an async job still running at exit)."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from typing import Any

import redis

import wurk
from wurk.inprocess import boot_swarm
from wurk.swarm import SwarmSettings


def _sync_link(job: Any, payload: dict[str, Any], queue: str,
               call_next: Callable[[], Any]) -> Any:
    return call_next()


@wurk.job(name="ExitHook::AsyncLong")
async def async_long(seconds: float) -> None:
    async with wurk.redis() as conn:
        await conn.call("RPUSH", "exit-hook:started", "1")
    await asyncio.sleep(seconds)


def main(mode: str) -> None:
    config = wurk.configure(heartbeat_interval=0.5, fetch_timeout=0.5, timeout=1,
                            shutdown_grace=1, concurrency=1, scheduler_initial_wait=0)
    import tests.system.worker_jobs  # noqa: F401  (the jobs, for completeness)

    expected = 1
    if mode == "async":
        config.server_middleware.add(_sync_link)  # a link around the async job: a helper thread
    if mode == "swarm":
        boot_swarm(config, SwarmSettings(count=2, tick=0.1, shutdown_grace=3))
        expected = 2
    else:
        wurk.embed(config)
    client = redis.Redis.from_url(config.redis_url or "")
    deadline = time.monotonic() + 20
    while client.scard("processes") < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    if mode == "async":
        async_long.perform_async(60)
        while not client.llen("exit-hook:started") and time.monotonic() < deadline:
            time.sleep(0.05)
    print("ready", flush=True)
    # Returning without stop(): interpreter exit runs the drain.


if __name__ == "__main__":
    main(sys.argv[1])
