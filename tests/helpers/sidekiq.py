"""Seed Redis with entries exactly as Sidekiq writes them, and load
the entries real Sidekiq 6.4 wrote (tests/fixtures/sidekiq-6.4)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import redis

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sidekiq-6.4"
PUSHED: dict[str, Any] = json.loads((FIXTURES / "pushed.json").read_text())
WORKER: dict[str, Any] = json.loads((FIXTURES / "worker.json").read_text())
IDENTITY_64: str = WORKER["processes"][0]


def load_sidekiq64(r: redis.Redis) -> None:
    """Everything both fixture files hold, written with the commands Sidekiq used."""
    r.sadd("queues", *PUSHED["queues_set"])
    for queue in PUSHED["queues_set"]:
        entries = PUSHED[f"queue:{queue}"]  # stored head (newest) first
        r.rpush(f"queue:{queue}", *entries)
    for key, source in (("schedule", PUSHED), ("retry", WORKER), ("dead", WORKER)):
        for member, score in source[key]:
            r.zadd(key, {member: score})
    r.sadd("processes", *WORKER["processes"])
    r.hset(IDENTITY_64, mapping=WORKER[IDENTITY_64])
    r.mset(WORKER["stats"])


def heartbeat(r: redis.Redis, identity: str, *, info: dict[str, Any], busy: int = 0,
              quiet: bool = False, rss: int = 1024, concurrency: int | None = None,
              beat: float | None = None) -> None:
    """One beat as Sidekiq writes it; ``concurrency`` as a hash field only when given (8.1.2+)."""
    fields: dict[str, Any] = {"info": json.dumps(info), "busy": busy,
                              "beat": repr(beat if beat is not None else time.time()),
                              "quiet": "true" if quiet else "false", "rss": rss,
                              "rtt_us": 250}
    if concurrency is not None:
        fields["concurrency"] = concurrency
    r.sadd("processes", identity)
    r.hset(identity, mapping=fields)
    r.expire(identity, 60)


def work(r: redis.Redis, identity: str, tid: str, payload: dict[str, Any] | str, *,
         run_at: int, key: str = "work", as_object: bool = False) -> None:
    """A ``<identity>:work`` (or 6.4 ``:workers``) entry; the payload a JSON string inside
    JSON as 6.0.2+ writes it, or an object as 6.0.1 did."""
    text = payload if isinstance(payload, str) else json.dumps(payload)
    value = {"queue": "default", "payload": json.loads(text) if as_object else text,
             "run_at": run_at}
    r.hset(f"{identity}:{key}", tid, json.dumps(value))
