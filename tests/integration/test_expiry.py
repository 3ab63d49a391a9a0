"""Expiring jobs: never run after their deadline; a job that started in time runs to its end."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.proxy import FaultProxy
from tests.helpers.runner import Drain
from wurk import payload as P
from wurk.errors import ConfigError, InvalidPayload
from wurk.scheduled import Scheduler

ran: list[tuple[str, float]] = []


@wurk.job(name="Expiry::Quick", expires_in=timedelta(hours=1))
def quick(n: int) -> None:
    ran.append(("quick", time.time()))


@wurk.job(name="Expiry::Slow", expires_in=0.3)
def slow(seconds: float) -> None:
    ran.append(("slow started", time.time()))
    time.sleep(seconds)
    ran.append(("slow finished", time.time()))


@wurk.job(name="Expiry::Unique", expires_in=0.2, unique_for=600)
def unique_expiring(n: int) -> None:
    ran.append(("unique", time.time()))


@pytest.fixture
def drain(config: wurk.Config) -> Iterator[Drain]:
    ran.clear()
    runner = Drain(config)
    yield runner
    runner.close()


def queued(r: redis.Redis, queue: str = "default") -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.lrange(f"queue:{queue}", 0, -1)]


def test_the_deadline_is_written_at_push(config: wurk.Config, r: redis.Redis) -> None:
    before = time.time()
    quick.perform_async(1)
    quick.set(expires_in=60).perform_async(2)
    later, first = queued(r)
    assert first["expires_in"] == 3600 and later["expires_in"] == 60
    assert before + 3600 - 0.001 <= first["expires_at"] / 1000 <= time.time() + 3600
    assert later["expires_at"] / 1000 - later["created_at"] / 1000 == pytest.approx(60, abs=1)


def test_a_scheduled_jobs_deadline_counts_from_its_scheduled_time(config: wurk.Config,
                                                                 r: redis.Redis) -> None:
    before = time.time()
    quick.perform_in(7200, 1)  # due in 2 h, expires 1 h after that
    [(raw, at)] = r.zrange("schedule", 0, -1, withscores=True)
    job = json.loads(raw)
    assert job["expires_at"] / 1000 == pytest.approx(at + 3600, abs=0.01)
    assert before + 3 * 3600 - 0.001 <= job["expires_at"] / 1000 <= time.time() + 3 * 3600


def test_an_expired_job_is_acknowledged_unrun_counted_and_announced(
        config: wurk.Config, r: redis.Redis, drain: Drain,
        caplog: pytest.LogCaptureFixture) -> None:
    seen: list[dict[str, Any]] = []
    registration = wurk.expiry.on_expired(seen.append)
    try:
        jid = slow.perform_async(0)
        time.sleep(0.4)
        with caplog.at_level(logging.INFO, logger="wurk"):
            assert drain() == 1
    finally:
        registration.remove()
    assert ran == []
    # expiring-jobs.md: "is logged at INFO ("expired: not started by its deadline…")"
    said = [(rec.levelno, rec.getMessage()) for rec in caplog.records
            if rec.getMessage().startswith("expired: not started by its deadline")]
    assert [level for level, _ in said] == [logging.INFO], caplog.text
    assert [job["jid"] for job in seen] == [jid]
    assert r.get("stat:expired") == "1" and wurk.expiry.expired_count(config) == 1
    assert drain.counters.failed == 0 and r.zcard("retry") == 0 and r.zcard("dead") == 0
    assert r.llen("queue:default") == 0


def test_a_job_started_before_its_deadline_runs_to_its_end(config: wurk.Config,
                                                          r: redis.Redis,
                                                          drain: Drain) -> None:
    slow.perform_async(0.6)  # runs twice as long as it may wait
    drain()
    assert [what for what, _ in ran] == ["slow started", "slow finished"]
    assert ran[1][1] - ran[0][1] >= 0.55
    assert r.get("stat:expired") is None


def test_a_retry_due_after_the_deadline_is_dropped(config: wurk.Config, r: redis.Redis,
                                                   drain: Drain) -> None:
    job = {"class": "Expiry::Quick", "args": [1], "queue": "default", "jid": P.new_jid(),
           "retry": True, "retry_count": 0, "created_at": int(time.time() * 1000) - 10_000,
           "expires_in": 5, "expires_at": int(time.time() * 1000) - 5_000}
    r.zadd("retry", {P.dumps(job): time.time() - 1})
    Scheduler(config).enqueue_due()
    drain()
    assert ran == [] and r.get("stat:expired") == "1"


@pytest.mark.parametrize("fields", [
    {"expires_in": 5, "created_at": "past"},  # Sidekiq Pro's: no expires_at
    {"expires_in": 5, "expires_at": "float"},  # Sidekiq 6/7's float seconds
])
def test_deadlines_written_by_others_are_honoured(config: wurk.Config, r: redis.Redis,
                                                  drain: Drain, fields: dict[str, Any]) -> None:
    old = time.time() - 60
    job: dict[str, Any] = {"class": "Expiry::Quick", "args": [1], "queue": "default",
                           "jid": P.new_jid(), "created_at": old}
    job["expires_in"] = fields["expires_in"]
    if fields.get("expires_at") == "float":
        job["expires_at"] = old + 5
    r.lpush("queue:default", P.dumps(job))
    drain()
    assert ran == [] and r.get("stat:expired") == "1"


@pytest.mark.parametrize(("fields", "named"), [
    ({"expires_at": "garbage"}, "expires_at='garbage'"),
    ({"expires_in": "60"}, "expires_in='60'"),
    ({"expires_in": True}, "expires_in=True"),
    ({"expires_in": 5, "created_at": "yesterday"}, "created_at='yesterday'"),
])
def test_a_deadline_that_cannot_be_read_is_named_and_the_job_runs(
        config: wurk.Config, r: redis.Redis, drain: Drain, caplog: pytest.LogCaptureFixture,
        fields: dict[str, Any], named: str) -> None:
    """An unreadable deadline field read as "no deadline" without a word."""
    job: dict[str, Any] = {"class": "Expiry::Quick", "args": [1], "queue": "default",
                           "jid": P.new_jid(), "created_at": time.time() - 60, **fields}
    r.lpush("queue:default", P.dumps(job))
    with caplog.at_level(logging.WARNING, logger="wurk"):
        drain()
    assert [name for name, _ in ran] == ["quick"] and r.get("stat:expired") is None
    [warning] = [m for m in caplog.messages if "cannot be read as a time" in m]
    assert named in warning and job["jid"] in warning and "no deadline" in warning


def test_an_expired_unique_job_releases_its_lock(config: wurk.Config, r: redis.Redis,
                                                drain: Drain) -> None:
    unique_expiring.perform_async(1)
    time.sleep(0.3)
    drain()
    assert ran == [] and list(r.scan_iter("unique:*")) == []
    assert unique_expiring.perform_async(1) is not None


@pytest.mark.parametrize("value, message", [
    (datetime.now(timezone.utc), "absolute time"),
    (1_800_000_000, "looks like a timestamp"),
    (0, "greater than 0"),
    (-3, "greater than 0"),
    ("60", "greater than 0"),
])
def test_absolute_and_bad_expiries_are_refused(value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        quick.set(expires_in=value)
    if not isinstance(value, datetime):
        with pytest.raises(InvalidPayload, match=message):
            wurk.push({"class": "X", "args": [], "expires_in": value})


def test_a_callback_that_raises_is_reported_and_the_job_still_dropped(
        config: wurk.Config, r: redis.Redis, drain: Drain) -> None:
    reported: list[BaseException] = []
    config.error_handlers.append(lambda exc, context: reported.append(exc))

    def broken(job: dict[str, Any]) -> None:
        raise RuntimeError("callback bug")

    registration = wurk.expiry.on_expired(broken)
    try:
        slow.perform_async(0)
        time.sleep(0.4)
        drain()
    finally:
        registration.remove()
    assert ran == [] and [str(e) for e in reported] == ["callback bug"]
    assert drain.counters.failed == 0


def test_the_deadline_is_checked_when_the_job_starts(config: wurk.Config,
                                                     r: redis.Redis) -> None:
    """Two jobs queued behind a slow one: the one whose deadline passes while it waits is
    dropped, the other runs."""
    gate = threading.Event()
    slow.perform_async(0)
    quick.perform_async(1)
    ran.clear()
    runner = Drain(config)
    try:
        gate.wait(0.4)  # the slow job's 0.3 s pass while it waits in the queue
        runner()
    finally:
        runner.close()
    assert [what for what, _ in ran] == ["quick"]


def test_a_count_redis_cannot_take_is_reported_and_the_job_still_dropped_unrun(
        redis_server: Any, r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    ran.clear()
    with FaultProxy(redis_server.port) as proxy:
        monkeypatch.setenv("REDIS_URL", proxy.url)  # REDIS_URL wins over configure's
        config = wurk.configure()
        reported: list[tuple[BaseException, dict[str, Any]]] = []
        config.error_handlers.append(lambda exc, context: reported.append((exc, context)))
        seen: list[dict[str, Any]] = []
        registration = wurk.expiry.on_expired(seen.append)
        # written by Sidekiq Pro long ago: its deadline is created_at + expires_in
        r.lpush("queue:default", json.dumps({
            "class": "Expiry::Quick", "args": [1], "jid": "e" * 24, "queue": "default",
            "retry": True, "created_at": 1_700_000_000.0, "expires_in": 60}))
        drain = Drain(config)
        try:
            unit = drain.fetcher.fetch(1)
            assert unit is not None
            proxy.drop()  # Redis unreachable from here on: the count cannot be written
            proxy.cut()
            drain.runner.run(unit)
        finally:
            registration.remove()
            proxy.restore()
            drain.close()
            config.close()
    assert ran == []  # never run
    assert [job["jid"] for job in seen] == ["e" * 24]  # dropped as expired all the same
    [(exc, context)] = reported
    assert isinstance(exc, wurk.RedisUnavailable)
    assert context["context"] == "counting an expired job" and context["job"]["jid"] == "e" * 24
    assert drain.counters.failed == 0 and r.get("stat:expired") is None  # the count is lost
    assert r.llen("queue:default") == 0 and r.zcard("retry") == 0 and r.zcard("dead") == 0
