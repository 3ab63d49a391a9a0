"""A Redis holding jobs in every state, for ``wurk top``'s tests: waiting in queues (one of
them paused), scheduled, failing in the retry set, dead, running in two processes (one job
an iterable one with its ``it-<jid>`` state), counted in the execution metrics, in a batch,
and pushed by a periodic loop.

``python -m tests.tui.world`` seeds the Redis at ``REDIS_URL`` (its data is flushed!), to
look at the UI by hand.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import redis

import wurk
from tests.helpers.metrics import tracked
from wurk.api import DeadSet, RetrySet, ScheduledSet

LEADER = "host-a:101:aaaaaaaaaaaa"
QUIET = "host-b:202:bbbbbbbbbbbb"
LID = "0123456789abcdef"
ITERATING = "f" * 24
BACKTRACE = ["app/jobs/import_row.rb:12:in `perform'", "lib/net/http.rb:99:in `read'"]


@wurk.job(name="Tui::BatchWork")
def batch_work(n: int) -> None:
    """A job the world's batch holds."""


@dataclass(frozen=True)
class World:
    bid: str
    batch_jids: list[str]


def job(klass: str, n: int, **extra: Any) -> dict[str, Any]:
    now = time.time()
    return {"class": klass, "args": [n, "two"], "queue": "default", "retry": True,
            "jid": f"{klass[:4].lower().replace(':', 'x')}{n:020x}",
            "created_at": now - 120, "enqueued_at": now - 60, **extra}


def failed(klass: str, n: int, error: str, message: str, **extra: Any) -> dict[str, Any]:
    return job(klass, n, error_class=error, error_message=message,
               error_backtrace=BACKTRACE, failed_at=time.time() - 30, retry_count=2, **extra)


def process(r: redis.Redis, identity: str, *, tag: str, quiet: bool,
            jobs: list[dict[str, Any]]) -> None:
    host, pid, _ = identity.split(":")
    now = time.time()
    info = {"hostname": host, "pid": int(pid), "tag": tag, "concurrency": 10,
            "queues": ["default", "critical"], "labels": [], "started_at": now - 3600,
            "version": "0.1.0", "identity": identity, "embedded": False}
    r.sadd("processes", identity)
    r.hset(identity, mapping={"info": json.dumps(info), "busy": len(jobs), "beat": now,
                              "quiet": "true" if quiet else "false", "rss": 51200,
                              "rtt_us": 250, "concurrency": 10})
    for n, payload in enumerate(jobs):
        work = {"queue": payload["queue"], "run_at": now - 95 - n,
                "payload": json.dumps(payload)}
        r.hset(f"{identity}:work", f"tid-{n}", json.dumps(work))


def seed(config: wurk.Config, r: redis.Redis) -> World:
    """Everything above, on the configuration's Redis (flushed first)."""
    r.flushdb()
    now = time.time()
    r.set("stat:processed", 1234)
    r.set("stat:failed", 56)
    for n in range(3):
        r.lpush("queue:default", json.dumps(job("Mail::Deliver", n)))
    for n in range(2):
        r.lpush("queue:critical", json.dumps(job("Billing::Charge", n, queue="critical")))
    r.sadd("queues", "default", "critical")
    r.sadd("paused", "critical")
    for n in range(3):
        RetrySet(config).schedule(now + 60 + n, failed(
            "Import::Row", n, "Net::ReadTimeout", f"read timed out {n}"))
    for n in range(2):
        ScheduledSet(config).schedule(now + 300 + n, job("Report::Nightly", n))
    for n in range(2):
        DeadSet(config).schedule(now - 600 + n, failed(
            "Legacy::Sync", n, "NoMethodError", f"undefined method `sync' {n}"))
    process(r, LEADER, tag="web", quiet=False, jobs=[
        job("Export::Csv", 1, jid=ITERATING), job("Mail::Deliver", 9)])
    process(r, QUIET, tag="batch", quiet=True, jobs=[job("Video::Encode", 2)])
    r.set("dear-leader", LEADER)
    r.hset(f"it-{ITERATING}", mapping={"ex": 2, "c": json.dumps({"offset": 500}),
                                       "rt": 12.5})
    tracker = tracked(**{"Mail::Deliver": ([5.0, 25.0, 40.0, 2000.0], 1),
                         "Import::Row": ([120.0] * 19 + [9000.0], 3)})
    tracker.flush(config.pool(), config.keys, now=dt.datetime.now(dt.timezone.utc))
    batch = wurk.Batch(description="nightly import", tags=["import"], config=config)
    with batch.jobs():
        jids = [str(batch_work.perform_async(n)) for n in range(3)]
    r.sadd("periodic", LID)
    r.hset(f"loops:{LID}", mapping={
        "schedule": "30 2 * * *", "klass": "Per::Cleanup", "tz": "Europe/Berlin",
        "paused": "0", "options": json.dumps({"args": [1], "queue": "low"}),
        "lf": int(now) - 3600, "nf": int(now) + 3600})
    r.lpush(f"loop-history:{LID}", json.dumps([int(now) - 3600, "c" * 24]))
    return World(batch.bid, jids)


if __name__ == "__main__":
    url = os.environ["REDIS_URL"]
    seed(wurk.configure(redis_url=url), redis.Redis.from_url(url))
    print(f"seeded {url}")
