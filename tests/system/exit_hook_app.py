"""A host process that starts wurk and then simply returns from main: the drain registered
with ``atexit`` must stop what it started. ``python -m tests.system.exit_hook_app MODE``
with MODE ``threads`` (``wurk.embed``) or ``swarm`` (``boot_swarm``)."""

from __future__ import annotations

import sys
import time

import redis

import wurk
from wurk.inprocess import boot_swarm
from wurk.swarm import SwarmSettings


def main(mode: str) -> None:
    config = wurk.configure(heartbeat_interval=0.5, fetch_timeout=0.5, timeout=1,
                            shutdown_grace=1, concurrency=1, scheduler_initial_wait=0)
    import tests.system.worker_jobs  # noqa: F401  (the jobs, for completeness)

    expected = 1
    if mode == "swarm":
        boot_swarm(config, SwarmSettings(count=2, tick=0.1, shutdown_grace=3))
        expected = 2
    else:
        wurk.embed(config)
    client = redis.Redis.from_url(config.redis_url or "")
    deadline = time.monotonic() + 20
    while client.scard("processes") < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    print("ready", flush=True)
    # Returning without stop(): interpreter exit runs the drain.


if __name__ == "__main__":
    main(sys.argv[1])
