"""Batch jobs the system and chaos tests run in real ``wurk worker`` subprocesses.

Each callback run is recorded as ``event:bid:jid`` in ``batch:fired``: the same callback job
run twice (its worker killed mid-run) shows one jid twice; a callback fired twice shows two
jids for one ``event:bid``."""

from __future__ import annotations

import os
import time
from typing import Any

import redis

import wurk

_client: redis.Redis | None = None
FIRED = "batch:fired"


def r() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ["REDIS_URL"])
    return _client


@wurk.job(name="SysBatch::record")
def record(status: wurk.BatchStatus, options: dict[str, Any]) -> None:
    r().rpush(FIRED, f"{options['event']}:{status.bid}:{wurk.current_jid()}")


@wurk.job(name="SysBatch::mark")
def mark(key: str, pause: float) -> None:
    """Records its jid after a short pause that keeps jobs in flight for the kills."""
    time.sleep(pause)
    r().rpush(key, wurk.current_jid() or "?")


def watched(**options: Any) -> wurk.Batch:
    """A batch whose three callbacks are all recorded."""
    batch = wurk.Batch(**options)
    for event in ("complete", "success", "death"):
        batch.on(event, record, {"event": event})
    return batch


@wurk.job(name="SysBatch::crash")
def crash(key: str) -> None:
    """Takes its whole process down, every time: a poison pill."""
    r().incr(key)
    os._exit(17)
