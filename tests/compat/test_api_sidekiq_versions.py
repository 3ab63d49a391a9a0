"""Entries written by real Sidekiq 6.4 (tests/fixtures/sidekiq-6.4) and the Sidekiq 7 and 8
payload and heartbeat forms, read — and acted on — through wurk.api."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest
import redis

import wurk
from tests.compat.test_golden import SIDEKIQ7, SIDEKIQ8
from tests.helpers.sidekiq import IDENTITY_64, PUSHED, WORKER, heartbeat, load_sidekiq64, work
from wurk.api import (
    DeadSet,
    ProcessSet,
    Queue,
    RetrySet,
    ScheduledSet,
    Stats,
    StatsHistory,
    WorkSet,
)
from wurk.errors import InspectionError


@pytest.fixture
def sidekiq64(config: wurk.Config, r: redis.Redis) -> wurk.Config:
    load_sidekiq64(r)
    return config


def test_64_queues_read_in_order(sidekiq64: wurk.Config) -> None:
    assert [q.name for q in Queue.all(sidekiq64)] == ["critical", "default"]
    default = Queue("default", sidekiq64)
    records = list(default.iterate())
    assert [rec.text for rec in records] == PUSHED["queue:default"]
    assert records[0].display_class == "Some::RubyOnly" and records[0].tags == ["alpha", "beta"]
    assert records[-1].args == [1, "two", {"three": 3}, [4.5], None, True]
    assert records[-1].enqueued_at == pytest.approx(1795971212.4342282)  # float seconds
    oldest = 1795971212.4342282
    assert default.latency() == pytest.approx(time.time() - oldest, abs=5)
    critical = Queue("critical", sidekiq64).find_job("3e5df836429c2c5fa3568857")
    assert critical is not None and critical.item["retry"] is False


def test_64_scheduled_entry(sidekiq64: wurk.Config) -> None:
    (entry,) = ScheduledSet(sidekiq64).iterate()
    member, score = PUSHED["schedule"][0]
    assert entry.text == member and entry.score == score
    assert entry.args == ["scheduled"] and entry.enqueued_at is None
    assert entry.created_at == pytest.approx(1795971212.4351692)


def test_64_retries_with_errors_and_mime_backtrace(sidekiq64: wurk.Config) -> None:
    entries = {e.jid: e for e in RetrySet(sidekiq64).iterate()}
    name_error = entries["19f610970e4822ae8e503f92"]
    assert name_error.error_class == "NameError" and name_error.retry_count == 0
    assert name_error.error_message is not None
    assert name_error.error_message.startswith("uninitialized constant Some")
    assert name_error.failed_at == pytest.approx(1795971224.9607325)
    failed = entries["4d9cc90efa55d20cecc65e46"]
    backtrace = failed.error_backtrace
    assert backtrace is not None and backtrace[0] == "/tmp/fx/jobs.rb:9:in `perform'"
    assert [e.jid for e in RetrySet(sidekiq64).scan("ArgumentError")] == [failed.jid]


def test_64_retry_now_pushes_what_a_64_worker_reads(sidekiq64: wurk.Config, r: redis.Redis,
                                                   redis_server: object) -> None:
    config = wurk.configure(redis_url=sidekiq64.redis_url, timestamp_format="float")
    entry = RetrySet(config).find_job("4d9cc90efa55d20cecc65e46")
    assert entry is not None and entry.retry()
    pushed = json.loads(r.lindex("queue:default", 0) or "")
    original = json.loads(entry.text)
    assert pushed["retry_count"] == -1  # 0 - 1: the manual run costs no attempt
    assert type(pushed["enqueued_at"]) is float
    assert {k: v for k, v in pushed.items() if k not in ("retry_count", "enqueued_at")} == {
        k: v for k, v in original.items() if k not in ("retry_count", "enqueued_at")}


def test_64_dead_set_with_its_unparseable_entry(sidekiq64: wurk.Config, r: redis.Redis) -> None:
    entries = list(DeadSet(sidekiq64).iterate())
    assert [e.text for e in entries] == [m for m, _ in reversed(WORKER["dead"])]
    broken = entries[0]
    assert broken.parse_error is not None and broken.text == "{not json"
    with pytest.raises(InspectionError):
        broken.retry()
    assert DeadSet(sidekiq64).retry_all() == 2
    assert r.zrange("dead", 0, -1) == ["{not json"] and r.llen("queue:default") == 7
    assert broken.delete() and r.zcard("dead") == 0


def test_64_process_and_stats(sidekiq64: wurk.Config, r: redis.Redis) -> None:
    r.expire(IDENTITY_64, 60)
    (process,) = ProcessSet(sidekiq64).iterate(clean=False)
    assert (process.identity, process.concurrency, process.busy) == (IDENTITY_64, 3, 0)
    assert (process.queues, process.tag, process.rss_kb, process.rtt_us) == (
        ["default", "slow"], "fixtures", 30496, 3850)
    assert process.beat == 1795971224.962878 and not process.stopping
    assert process.version is None and not process.embedded
    stats = Stats(sidekiq64)
    assert (stats.processed(), stats.failed(), stats.enqueued()) == (0, 0, 6)
    assert (stats.scheduled_size(), stats.retry_size(), stats.dead_size()) == (1, 2, 3)
    history = StatsHistory(1, start=dt.date(2026, 11, 29), config=sidekiq64)
    assert history.processed() == {dt.date(2026, 11, 29): 0}


def test_64_busy_jobs_in_the_workers_hash(sidekiq64: wurk.Config, r: redis.Redis) -> None:
    job = '{"retry":true,"queue":"slow","class":"SlowJob","args":[6],' \
          '"jid":"5a0c6c1fa1c1f1d0e9e7c3d1","created_at":1795971224.75,"enqueued_at":1795971224.75}'
    work(r, IDENTITY_64, "owx6qsd6s", job, run_at=1795971225, key="workers")
    (running,) = WorkSet(sidekiq64)
    assert running.process == IDENTITY_64 and running.job.raw == job.encode()
    assert running.run_at == 1795971225 and running.job.display_class == "SlowJob"


@pytest.mark.parametrize("raw", SIDEKIQ7 + SIDEKIQ8)
def test_7_and_8_payloads_in_every_structure(config: wurk.Config, r: redis.Redis,
                                             raw: str) -> None:
    r.lpush("queue:default", raw)
    r.zadd("retry", {raw: 1700000300.5})
    r.zadd("dead", {raw: 1700000400.25})
    expected = json.loads(raw)
    record = next(Queue("default", config).iterate())
    entries = [next(RetrySet(config).iterate()), next(DeadSet(config).iterate())]
    for found in (record, *entries):
        assert found.raw == raw.encode() and found.item == expected
        created = found.created_at
        assert created is not None and 1.6e9 < created < 1.8e9  # ms and s both read as s
    assert RetrySet(config).find_job(expected["jid"]) is not None
    assert entries[0].retry() and entries[1].delete()
    retried = json.loads(r.lindex(f"queue:{expected['queue']}", 0) or "")
    assert retried["jid"] == expected["jid"] and retried["args"] == expected["args"]
    assert r.zcard("retry") == r.zcard("dead") == 0


def test_8_active_job_mailer_reads_as_sidekiq_shows_it(config: wurk.Config,
                                                       r: redis.Redis) -> None:
    r.lpush("queue:default", SIDEKIQ8[2])
    record = next(Queue("default", config).iterate())
    assert record.klass == "Sidekiq::ActiveJob::Wrapper"
    assert record.display_class == "UserMailer"
    assert record.display_args == ["gid://app/User/1"]
    assert record.bid == "b-77ttk4VvK6xDUg" and record.discarded_at == 1700000200.0


def test_8_1_2_process_with_capsules_and_hash_concurrency(config: wurk.Config,
                                                         r: redis.Redis) -> None:
    identity = "app-7d9:1:0123456789ab"
    info = {"hostname": "app-7d9", "started_at": 1700000000.1, "pid": 1, "tag": "app",
            "queues": ["default"], "weights": [{"default": 0}], "labels": [],
            "identity": identity, "version": "8.1.7", "embedded": False,
            "capsules": {"default": {"concurrency": 5, "mode": "strict",
                                     "weights": {"default": 0}}}}
    heartbeat(r, identity, info=info, busy=2, concurrency=5)
    (process,) = ProcessSet(config)
    assert (process.concurrency, process.queues, process.version) == (5, ["default"], "8.1.7")
