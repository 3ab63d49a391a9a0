"""Pushes read back raw from the real server: exactly the keys and fields Sidekiq writes."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis

import wurk
from wurk.errors import InvalidArguments, InvalidPayload, RedisUnavailable


@wurk.job
def resize(image_id: int, size: str = "s") -> None: ...


@wurk.job(queue="critical", retry=3, name="Client::ImageResizer", tags=["img"])
def ruby_named(image_id: int) -> None: ...


SIDEKIQ8_KEYS = {"retry", "queue", "class", "args", "jid", "created_at", "enqueued_at"}


def only(r: redis.Redis, key: str) -> dict[str, Any]:
    entries = r.lrange(key, 0, -1)
    assert len(entries) == 1, entries
    return json.loads(entries[0])  # type: ignore[no-any-return]


def test_push_writes_sidekiq8_payload_exactly(config: wurk.Config, r: redis.Redis) -> None:
    before = time.time()
    jid = resize.perform_async(42)
    after = time.time()
    assert r.smembers("queues") == {"default"}
    raw = r.lrange("queue:default", 0, -1)[0]
    job = json.loads(raw)
    assert set(job) == SIDEKIQ8_KEYS
    assert job["class"] == "tests.integration.test_client.resize"
    assert job["args"] == [42] and job["queue"] == "default" and job["retry"] is True
    assert job["jid"] == jid and re.fullmatch(r"[0-9a-f]{24}", jid or "")
    for field in ("created_at", "enqueued_at"):
        assert type(job[field]) is int
        assert before * 1000 - 1 <= job[field] <= after * 1000 + 1
    assert raw.startswith('{"retry":true,"queue":"default","class":')
    assert " " not in raw  # compact, as Ruby writes it


def test_float_format_for_sidekiq_6_and_7(redis_server: Any, r: redis.Redis) -> None:
    wurk.configure(redis_url=redis_server.url, timestamp_format="float")
    resize.perform_async(1)
    raw = r.lrange("queue:default", 0, -1)[0]
    job = json.loads(raw)
    assert type(job["created_at"]) is float and type(job["enqueued_at"]) is float
    assert re.search(r'"created_at":\d{10}\.\d+', raw)


def test_options_merge_under_the_push(config: wurk.Config, r: redis.Redis) -> None:
    ruby_named.perform_async(7)
    job = only(r, "queue:critical")
    assert job["class"] == "Client::ImageResizer" and job["retry"] == 3 and job["tags"] == ["img"]
    ruby_named.set(queue="low", retry=False, custom={"k": 1}).perform_async(8)
    job = only(r, "queue:low")
    assert job["retry"] is False and job["custom"] == {"k": 1} and job["args"] == [8]
    assert r.smembers("queues") == {"critical", "low"}


def test_class_job_push(config: wurk.Config, r: redis.Redis) -> None:
    class Report(wurk.Job, queue="reports", retry=0, name="Admin::ReportJob"):
        def perform(self, a: int) -> None: ...

    Report.perform_async(a=5)
    job = only(r, "queue:reports")
    assert job["class"] == "Admin::ReportJob" and job["retry"] == 0 and job["args"] == [5]


def test_raw_push_with_any_name_and_own_jid(config: wurk.Config, r: redis.Redis) -> None:
    jid = wurk.push({"class": "RubyJob", "args": [1], "queue": "default", "jid": "abc"})
    assert jid == "abc"
    job = only(r, "queue:default")
    assert job["class"] == "RubyJob" and job["jid"] == "abc"


def test_scheduled_push_zadds_without_enqueued_at(config: wurk.Config, r: redis.Redis) -> None:
    before = time.time()
    jid = resize.perform_in(30, 1)
    entries = r.zrange("schedule", 0, -1, withscores=True)
    assert len(entries) == 1
    member, score = entries[0]
    job = json.loads(member)
    assert job["jid"] == jid and "enqueued_at" not in job and "at" not in job
    assert before + 30 <= score <= time.time() + 30
    assert not r.exists("queues")  # a scheduled push does not touch `queues`
    resize.perform_in(timedelta(minutes=5), 2)
    resize.perform_at(datetime.now(timezone.utc) + timedelta(hours=1), 3)
    resize.perform_at(time.time() + 100, 4)
    assert r.zcard("schedule") == 4


def test_schedule_in_the_past_pushes_now(config: wurk.Config, r: redis.Redis) -> None:
    resize.perform_in(0, 1)
    resize.perform_at(time.time() - 10, 2)
    resize.perform_in(-5, 3)
    assert r.llen("queue:default") == 3 and not r.exists("schedule")


def test_naive_datetime_is_refused(config: wurk.Config) -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        resize.perform_at(datetime.now(), 1)


def test_set_wait_and_wait_until(config: wurk.Config, r: redis.Redis) -> None:
    resize.set(wait=60).perform_async(1)
    resize.set(wait_until=time.time() + 120).perform_async(2)
    assert r.zcard("schedule") == 2


def test_bulk_push_keeps_fifo_and_batches(config: wurk.Config, r: redis.Redis) -> None:
    calls = count_round_trips(r, lambda: resize.perform_bulk([[i] for i in range(2500)]))
    jobs = [json.loads(x) for x in r.lrange("queue:default", 0, -1)]
    assert [j["args"][0] for j in reversed(jobs)] == list(range(2500))  # oldest at the tail
    assert len({j["jid"] for j in jobs}) == 2500
    assert calls["lpush"] == 3 and calls["sadd"] == 3  # slices of 1000: one pipeline each
    assert len({j["enqueued_at"] for j in jobs[:1000]}) <= 3


def test_bulk_push_with_per_job_times_and_spread(config: wurk.Config, r: redis.Redis) -> None:
    now = time.time()
    jids = resize.perform_bulk([[1], [2]], at=[now + 100, now + 200])
    scores = sorted(s for _, s in r.zrange("schedule", 0, -1, withscores=True))
    assert len(jids) == 2 and scores == pytest.approx([now + 100, now + 200], abs=0.01)
    r.delete("schedule")
    resize.perform_bulk([[i] for i in range(50)], spread_interval=1)
    scores = [s for _, s in r.zrange("schedule", 0, -1, withscores=True)]
    assert len(scores) == 50 and all(now <= s <= time.time() + 5.1 for s in scores)
    with pytest.raises(InvalidPayload, match="'at' has 1 times for 2 jobs"):
        resize.perform_bulk([[1], [2]], at=[now])


def test_bulk_push_refuses_a_jid_for_many(config: wurk.Config) -> None:
    with pytest.raises(InvalidPayload, match="jid cannot be given"):
        wurk.push_bulk({"class": "X", "args": [[1], [2]], "jid": "same"})


def test_client_middleware_changes_and_stops_pushes(config: wurk.Config, r: redis.Redis) -> None:
    class Stamp:
        def __call__(self, job: str, payload: dict[str, Any], queue: str,
                     call_next: Callable[[], Any]) -> Any:
            payload["tenant"] = "acme"
            if payload["args"] == [13]:
                return None  # stop the push
            return call_next()

    config.client_middleware.add(Stamp)
    assert resize.perform_async(13) is None
    jids = resize.perform_bulk([[1], [13], [2]])
    assert jids[1] is None and jids[0] and jids[2]
    jobs = [json.loads(x) for x in r.lrange("queue:default", 0, -1)]
    assert sorted(j["args"][0] for j in jobs) == [1, 2]
    assert all(j["tenant"] == "acme" for j in jobs)


def test_middleware_may_convert_arguments_before_the_check(
    config: wurk.Config, r: redis.Redis
) -> None:
    def convert(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        payload["args"] = [a.isoformat() if isinstance(a, datetime) else a
                           for a in payload["args"]]
        return call_next()

    config.client_middleware.add(convert)
    wurk.push({"class": "X", "args": [datetime(2024, 1, 2, tzinfo=timezone.utc)]})
    assert only(r, "queue:default")["args"] == ["2024-01-02T00:00:00+00:00"]


@pytest.mark.parametrize(
    ("push", "error", "message"),
    [
        (lambda: resize.perform_async((1, 2)), InvalidArguments, "argument 0 is tuple"),
        (lambda: resize.perform_async(datetime.now()), InvalidArguments, "datetime"),
        (lambda: resize.perform_async({1: 2}), InvalidArguments, "key 1 of type int"),
        (lambda: resize.perform_bulk([[1], [b"x"]]), InvalidArguments, "bytes"),
        (lambda: wurk.push({"class": "", "args": []}), InvalidPayload, "'class'"),
        (lambda: wurk.push({"class": "X", "args": {}}), InvalidPayload, "'args' must be a list"),
        (lambda: wurk.push({"class": "X", "args": [], "queue": ""}), InvalidPayload, "'queue'"),
        (lambda: wurk.push({"class": "X", "args": [], "queue": "a|b"}), InvalidPayload, "'|'"),
        (lambda: wurk.push({"class": "X", "args": [], "retry": "yes"}), InvalidPayload, "retry"),
        (lambda: wurk.push({"class": "X", "args": [], "at": "soon"}), InvalidPayload, "'at'"),
        (lambda: wurk.push({"class": "X", "args": [], "tags": "t"}), InvalidPayload, "'tags'"),
        (lambda: wurk.push({"class": "X", "args": [], "retry_for": 2e9}), InvalidPayload,
         "retry_for"),
        (lambda: wurk.push(["X", []]), InvalidPayload, "must be a dict"),  # type: ignore[arg-type]
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(
    config: wurk.Config, r: redis.Redis, push: Callable[[], Any], error: type[Exception],
    message: str,
) -> None:
    with pytest.raises(error) as info:
        push()
    assert message in str(info.value)
    assert r.dbsize() == 0


def test_push_while_redis_is_down_raises_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL")
    wurk.configure(redis_url="redis://127.0.0.1:1/0", socket_timeout=0.5)
    with pytest.raises(RedisUnavailable, match=r"127\.0\.0\.1:1"):
        resize.perform_async(1)


def test_key_prefix_applies_to_every_key(redis_server: Any, r: redis.Redis) -> None:
    wurk.configure(redis_url=redis_server.url, key_prefix="myapp")
    resize.perform_async(1)
    resize.perform_in(60, 2)
    assert set(r.keys("*")) == {"myapp:queues", "myapp:queue:default", "myapp:schedule"}


def test_connections_are_named(config: wurk.Config, r: redis.Redis) -> None:
    resize.perform_async(1)
    names = {c.get("name") for c in r.client_list()}
    assert "wurk-client" in names
    lib = {c.get("lib-name") for c in r.client_list()}
    assert any("wurk" in (name or "") for name in lib)


def count_round_trips(r: redis.Redis, action: Callable[[], Any]) -> dict[str, int]:
    def stats() -> dict[str, int]:
        info = r.info("commandstats")
        return {k.removeprefix("cmdstat_"): v["calls"] for k, v in info.items()}

    before = stats()
    action()
    after = stats()
    return {k: after[k] - before.get(k, 0) for k in after}
