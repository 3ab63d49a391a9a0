"""Stats and StatsHistory over counters and sets seeded as Sidekiq writes them."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest
import redis

import wurk
from tests.helpers.sidekiq import heartbeat
from wurk.api import Stats, StatsHistory


def seed(r: redis.Redis) -> None:
    now = time.time()
    r.mset({"stat:processed": 1234, "stat:failed": 56})
    r.zadd("schedule", {"a": 1.0})
    r.zadd("retry", {"b": 1.0, "c": 2.0})
    r.zadd("dead", {"d": 1.0, "e": 2.0, "f": 3.0})
    r.sadd("queues", "default", "low", "empty")
    r.lpush("queue:default", json.dumps({"class": "X", "args": [], "enqueued_at": now - 12.0}))
    r.lpush("queue:default", json.dumps({"class": "X", "args": [],
                                         "enqueued_at": int(now * 1000)}))
    r.lpush("queue:low", *["{}"] * 5)
    r.sadd("paused", "low")
    for n, busy in ((1, 3), (2, 2)):
        identity = f"h:{n}:{n:012d}"
        heartbeat(r, identity, info={"hostname": "h", "pid": n, "identity": identity},
                  busy=busy)
    r.sadd("processes", "stale:1:000000000009")


def test_fast_and_slow_numbers(config: wurk.Config, r: redis.Redis) -> None:
    seed(r)
    stats = Stats(config)
    assert (stats.processed(), stats.failed()) == (1234, 56)
    assert (stats.scheduled_size(), stats.retry_size(), stats.dead_size()) == (1, 2, 3)
    assert stats.processes_size() == 3  # stale members count until pruned, as in Sidekiq
    assert stats.default_queue_latency() == pytest.approx(12, abs=1)
    assert (stats.enqueued(), stats.busy()) == (7, 5)
    assert stats.queues() == {"low": 5, "default": 2, "empty": 0}
    summaries = {s.name: s for s in stats.queue_summaries()}
    assert summaries["low"].paused and not summaries["default"].paused
    assert summaries["default"].latency == pytest.approx(12, abs=1)
    assert summaries["empty"].latency == 0.0
    numbers = stats.to_dict()
    assert numbers["queues"][0] == {"name": "default", "size": 2,
                                    "latency": pytest.approx(12, abs=1), "paused": False}
    assert {k: numbers[k] for k in ("processed", "enqueued", "busy", "dead")} == {
        "processed": 1234, "enqueued": 7, "busy": 5, "dead": 3}


def test_a_snapshot_until_refreshed(config: wurk.Config, r: redis.Redis) -> None:
    seed(r)
    stats = Stats(config)
    assert stats.processed() == 1234 and stats.enqueued() == 7
    r.incrby("stat:processed", 10)
    r.lpush("queue:low", "{}")
    assert stats.processed() == 1234 and stats.enqueued() == 7
    stats.refresh()
    assert stats.processed() == 1244 and stats.enqueued() == 8


def test_empty_redis(config: wurk.Config) -> None:
    stats = Stats(config)
    assert stats.to_dict() == {"processed": 0, "failed": 0, "scheduled": 0, "retries": 0,
                               "dead": 0, "processes": 0, "default_queue_latency": 0.0,
                               "enqueued": 0, "busy": 0, "queues": []}


def test_reset(config: wurk.Config, r: redis.Redis) -> None:
    seed(r)
    stats = Stats(config)
    assert stats.processed() == 1234
    stats.reset("failed")
    assert r.mget("stat:processed", "stat:failed") == ["1234", "0"]
    stats.reset()
    assert stats.processed() == 0 and r.get("stat:processed") == "0"
    with pytest.raises(ValueError, match="unknown counter 'busy'"):
        stats.reset("busy")


def test_history_per_utc_day(config: wurk.Config, r: redis.Redis) -> None:
    start = dt.date(2026, 3, 2)
    r.mset({"stat:processed:2026-03-02": 10, "stat:processed:2026-02-28": 7,
            "stat:failed:2026-03-01": 2})
    history = StatsHistory(3, start=start, config=config)
    assert history.processed() == {dt.date(2026, 3, 2): 10, dt.date(2026, 3, 1): 0,
                                   dt.date(2026, 2, 28): 7}
    assert list(history.failed().values()) == [0, 2, 0]
    today = dt.datetime.now(dt.timezone.utc).date()
    assert list(StatsHistory(1, config=config).processed()) == [today]
    assert len(StatsHistory(1825, config=config).processed()) == 1825


def test_history_from_a_datetime_reads_its_utc_days(config: wurk.Config,
                                                    r: redis.Redis) -> None:
    """A ``datetime`` start (a ``date`` too, so accepted) named keys by its ``isoformat``
    (``stat:processed:2026-03-02T23:30:00``), which no counter has: every day read 0."""
    r.mset({"stat:processed:2026-03-02": 10, "stat:processed:2026-03-01": 4})
    naive = StatsHistory(2, start=dt.datetime(2026, 3, 2, 23, 30), config=config)
    assert naive.processed() == {dt.date(2026, 3, 2): 10, dt.date(2026, 3, 1): 4}
    eastern = dt.timezone(dt.timedelta(hours=-5))
    aware = StatsHistory(1, start=dt.datetime(2026, 3, 1, 22, 0, tzinfo=eastern),
                         config=config)  # 03:00 UTC on the 2nd
    assert aware.processed() == {dt.date(2026, 3, 2): 10}
    with pytest.raises(TypeError, match=r"start must be a datetime\.date"):
        StatsHistory(2, start="2026-03-02", config=config)  # type: ignore[arg-type]


@pytest.mark.parametrize("days", [0, 1826, True, 2.5])
def test_history_range_is_checked(config: wurk.Config, days: object) -> None:
    with pytest.raises(ValueError, match="days must be a whole number from 1 to 1825"):
        StatsHistory(days, config=config)  # type: ignore[arg-type]
