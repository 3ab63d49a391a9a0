"""Pushes read back raw from the real server: exactly the keys and fields Sidekiq writes."""

from __future__ import annotations

import asyncio
import enum
import json
import re
import threading
import time
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.wait import wait_until
from wurk.errors import InvalidArguments, InvalidPayload, RedisUnavailable


@wurk.job
def resize(image_id: int, size: str = "s") -> None: ...


@wurk.job(queue="critical", retry=3, name="Client::ImageResizer", tags=["img"])
def ruby_named(image_id: int) -> None: ...


SIDEKIQ8_KEYS = {"retry", "queue", "class", "args", "jid", "created_at", "enqueued_at"}


def _deep(levels: int) -> list[Any]:
    """A list ``levels`` deep (``[]`` is one): at 99, its payload nests past Ruby's 100."""
    outer: list[Any] = []
    for _ in range(levels - 1):
        outer = [outer]
    return outer


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


def test_an_aware_datetime_before_2001_is_a_time_not_an_interval(config: wurk.Config,
                                                                  r: redis.Redis) -> None:
    """Sidekiq's 10⁹ rule (a smaller number is seconds from now) is for numbers: an aware
    datetime is a time, however long ago, and "a time at or before now pushes immediately".
    One of 2000 (epoch 946,684,800) was read as that many seconds from now: the job waited
    30 years."""
    year_2000 = datetime(2000, 1, 1, tzinfo=timezone.utc)
    resize.perform_at(year_2000, 1)
    resize.set(wait_until=year_2000).perform_async(2)
    asyncio.run(resize.aperform_at(year_2000, 3))
    assert r.llen("queue:default") == 3 and not r.exists("schedule")
    resize.perform_at(datetime(1970, 1, 1, 0, 0, 30, tzinfo=timezone.utc), 4)
    assert r.llen("queue:default") == 4 and not r.exists("schedule")


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


def test_a_push_is_one_pipelined_round_trip(
    config: wurk.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/jobs-and-pushing.md: "A push is one pipelined round trip: `SADD queues <q>` +
    `LPUSH queue:<q> <json>`, or `ZADD schedule <at> <json>` for a scheduled job (no
    `enqueued_at`, no `SADD`)." — one write of the pool, holding those commands only."""
    from wurk.connections.pool import RedisPool

    sent: list[list[str]] = []
    real_send_all = RedisPool.send_all

    def send_all(self: RedisPool, commands: Any) -> list[Any]:
        sent.append([str(command[0]) for command in commands])
        return real_send_all(self, commands)

    resize.perform_async(0)  # the pool's connection made (its handshake is not the push's)
    monkeypatch.setattr(RedisPool, "send_all", send_all)
    calls = count_round_trips(r, lambda: resize.perform_async(1))
    assert sent == [["SADD", "LPUSH"]]
    assert {k: n for k, n in calls.items() if n and k != "info"} == {"sadd": 1, "lpush": 1}
    sent.clear()
    calls = count_round_trips(r, lambda: resize.perform_in(60, 2))
    assert sent == [["ZADD"]]
    assert {k: n for k, n in calls.items() if n and k != "info"} == {"zadd": 1}
    (member,) = r.zrange("schedule", 0, -1)
    assert "enqueued_at" not in json.loads(member)


def test_a_scheduled_bulk_push_goes_a_hundred_jobs_per_round_trip(
    config: wurk.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/jobs-and-pushing.md: "A bulk push sends one pipeline per slice of 1,000 jobs (100
    when scheduled), every job with its own jid and one shared `created_at`." Counted at the
    client's one write per round trip, and by the ZADDs Redis saw."""
    from wurk.client.core import Client

    written: list[int] = []
    real_write = Client._write

    def write(self: Client, entries: Any) -> set[str]:
        written.append(len(entries))
        return real_write(self, entries)

    monkeypatch.setattr(Client, "_write", write)
    at = time.time() + 3600
    calls = count_round_trips(r, lambda: resize.perform_bulk([[i] for i in range(250)], at=at))
    assert len(written) == 3, f"{len(written)} round trips for 250 scheduled jobs"
    assert calls["zadd"] == 3 and calls.get("lpush", 0) == 0  # one ZADD per slice
    jobs = [json.loads(raw) for raw in r.zrange("schedule", 0, -1)]
    assert sorted(j["args"][0] for j in jobs) == list(range(250))
    assert len({j["jid"] for j in jobs}) == 250
    assert len({j["created_at"] for j in jobs}) == 1
    written.clear()
    r.delete("queue:default")
    resize.perform_bulk([[i] for i in range(1500)])
    assert len(written) == 2  # unscheduled: slices of 1,000
    assert len({json.loads(raw)["created_at"] for raw in r.lrange("queue:default", 0, -1)}) == 1


def test_an_interval_of_a_billion_seconds_or_more_is_an_epoch_time(
    config: wurk.Config, r: redis.Redis
) -> None:
    """docs/jobs-and-pushing.md: "Intervals of 10⁹ and more are taken as absolute epoch
    seconds, as Sidekiq does." — and below 10⁹ an interval is counted from now."""
    absolute = 2_000_000_000.5  # 2033
    resize.perform_in(absolute, 1)
    resize.perform_in(timedelta(seconds=absolute), 2)
    resize.set(wait=absolute).perform_async(3)
    before = time.time()
    resize.perform_in(999_999_999, 4)
    after = time.time()
    scores = {json.loads(raw)["args"][0]: score
              for raw, score in r.zrange("schedule", 0, -1, withscores=True)}
    assert scores[1] == scores[2] == scores[3] == absolute
    assert before + 999_999_999 - 1 <= scores[4] <= after + 999_999_999 + 1


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


def test_a_bulk_push_of_a_setter_with_wait_is_scheduled(config: wurk.Config,
                                                        r: redis.Redis) -> None:
    """``set(wait=...)`` / ``set(wait_until=...)`` schedule a bulk push as they schedule
    ``perform_async`` (Sidekiq's setter does): it used to push the jobs at once."""
    before = time.time()
    assert len(resize.set(wait=100).perform_bulk([[1], [2]])) == 2
    until = datetime.now(timezone.utc) + timedelta(seconds=300)
    assert len(asyncio.run(resize.set(wait_until=until).aperform_bulk([[3]]))) == 1
    assert r.llen("queue:default") == 0
    scores = {json.loads(raw)["args"][0]: score
              for raw, score in r.zrange("schedule", 0, -1, withscores=True)}
    assert scores[1] == scores[2] == pytest.approx(before + 100, abs=5)
    assert scores[3] == pytest.approx(until.timestamp(), abs=0.01)
    at = time.time() + 50  # a bulk push's own times win
    resize.set(wait=100).perform_bulk([[4]], at=at)
    assert r.zscore("schedule", r.zrange("schedule", 0, 0)[0]) == pytest.approx(at, abs=0.01)
    with pytest.raises(InvalidPayload, match="spread_interval"):
        resize.set(wait=100).perform_bulk([[5]], spread_interval=10)
    resize.set(wait_until=time.time() - 10).perform_bulk([[6]])  # past: pushed now
    assert r.llen("queue:default") == 1


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
        (lambda: wurk.push({"class": "X", "args": [_deep(99)]}), InvalidArguments,
         "nested deeper than 100 levels"),
        (lambda: wurk.push({"class": "", "args": []}), InvalidPayload, "'class'"),
        (lambda: wurk.push({"class": "X", "args": {}}), InvalidPayload, "'args' must be a list"),
        (lambda: wurk.push({"class": "X", "args": [], "queue": ""}), InvalidPayload, "'queue'"),
        (lambda: wurk.push({"class": "X", "args": [], "queue": "a|b"}), InvalidPayload, "'|'"),
        (lambda: wurk.push({"class": "X", "args": [], "queue": "a,3"}), InvalidPayload, "','"),
        (lambda: wurk.push({"class": "X", "args": [], "queue": "a b"}), InvalidPayload,
         "has a space in it"),
        (lambda: wurk.push({"class": "X", "args": [], "queue": " a"}), InvalidPayload,
         "spaces around it"),
        (lambda: wurk.push({"class": "X", "args": [], "queue": 7}), InvalidPayload,
         "expected a queue name"),
        (lambda: wurk.push({"class": "X", "args": [], "retry_queue": "a b"}), InvalidPayload,
         "retry_queue"),
        (lambda: wurk.push_bulk({"class": "X", "args": [[1]], "queue": "a b"}), InvalidPayload,
         "has a space in it"),
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


def test_options_given_as_none_are_kept_as_null_as_sidekiqs_client_keeps_them(
    config: wurk.Config, r: redis.Redis
) -> None:
    # A Ruby app's `set(tags: nil, retry_for: nil)`: its scheduled job comes back through
    # this client when scheduler="client" moves it, and must not be refused then.
    wurk.push({"class": "X", "args": [], "tags": None, "retry_for": None, "retry": None})
    job = only(r, "queue:default")
    assert (job["tags"], job["retry_for"], job["retry"]) == (None, None, None)


def test_a_fraction_of_a_second_of_retry_for_is_kept_as_one_not_zero(
    config: wurk.Config, r: redis.Redis
) -> None:
    """A raw push's retry_for of 0.5 was stored as 0: a window of nothing, where the job
    asked for one."""
    wurk.push({"class": "X", "args": [], "retry_for": 0.5})
    assert only(r, "queue:default")["retry_for"] == 1


def test_a_null_created_at_is_stamped_as_sidekiqs_client_stamps_it(
    config: wurk.Config, r: redis.Redis
) -> None:
    """Sidekiq's client sets created_at with ``||=``: a null one is replaced. wurk kept the
    null, and the job had no creation time anywhere (latency, the dashboard's ages)."""
    wurk.push({"class": "X", "args": [], "created_at": None})
    stamped = only(r, "queue:default")["created_at"]
    assert isinstance(stamped, int) and stamped > 1_600_000_000_000


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


# -- async client links around a sync push --------------------------------------------------
def edits(name: str) -> Callable[..., Any]:
    """A sync client link that marks the payload with ``name``."""
    def link(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        payload[name] = True
        return call_next()

    return link


def aedits(name: str) -> Callable[..., Any]:
    """An async client link that marks the payload with ``name``."""
    async def link(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        await asyncio.sleep(0)
        payload[name] = True
        return await call_next()

    return link


def link_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "wurk-client-link"]


@pytest.mark.parametrize("kinds", ["aa", "asa", "saa"])
def test_a_sync_push_runs_every_async_link_of_its_chain(config: wurk.Config, r: redis.Redis,
                                                        kinds: str) -> None:
    names = [f"{kind}{position}" for position, kind in enumerate(kinds)]
    for name in names:
        config.client_middleware.add(aedits(name) if name[0] == "a" else edits(name))
    jid = resize.perform_async(1)
    job = only(r, "queue:default")
    assert job["jid"] == jid and all(job[name] is True for name in names)
    assert link_threads() == []  # each link's thread was joined before the push returned


def test_an_error_inside_reaches_the_outer_async_link_and_nothing_is_written(
        config: wurk.Config, r: redis.Redis) -> None:
    seen: list[BaseException] = []

    async def outer(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        try:
            return await call_next()
        except ValueError as exc:
            seen.append(exc)
            raise

    async def refuses(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        raise ValueError("refused inside")

    config.client_middleware.add(outer)
    config.client_middleware.add(edits("between"))
    config.client_middleware.add(refuses)
    with pytest.raises(ValueError, match="refused inside"):
        resize.perform_async(1)
    assert [str(exc) for exc in seen] == ["refused inside"]
    assert r.dbsize() == 0 and link_threads() == []


def test_an_interrupt_while_the_rest_runs_cancels_the_async_link(config: wurk.Config,
                                                                 r: redis.Redis) -> None:
    seen: list[str] = []

    async def outer(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        try:
            return await call_next()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    def interrupted(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        raise KeyboardInterrupt

    config.client_middleware.add(outer)
    config.client_middleware.add(interrupted)
    with pytest.raises(KeyboardInterrupt):
        resize.perform_async(1)
    # the link's loop, in a thread of its own, takes the cancel at its next turn
    wait_until(lambda: seen == ["cancelled"] and link_threads() == [], what="the link cancelled")
    assert r.dbsize() == 0


def test_a_sync_push_inside_a_running_loop_refuses_an_async_link(config: wurk.Config,
                                                                 r: redis.Redis) -> None:
    config.client_middleware.add(aedits("a"))

    async def inside() -> str | None:
        return resize.perform_async(1)

    with pytest.raises(TypeError, match="aperform_async"):
        asyncio.run(inside())
    assert r.dbsize() == 0


# -- a push in either form ------------------------------------------------------------------
MODES = ["sync", "async"]


def in_mode(mode: str, sync: Callable[[], Any],
            asynchronous: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    return sync() if mode == "sync" else asyncio.run(asynchronous())


def never_calls_next_returns_true(job: str, payload: dict[str, Any], queue: str,
                                  call_next: Any) -> Any:
    return True


def never_calls_next_returns_the_payload(job: str, payload: dict[str, Any], queue: str,
                                         call_next: Any) -> Any:
    return payload


async def never_awaits_next_returns_true(job: str, payload: dict[str, Any], queue: str,
                                         call_next: Any) -> Any:
    return True


async def never_awaits_next_returns_the_payload(job: str, payload: dict[str, Any],
                                                queue: str, call_next: Any) -> Any:
    return payload


@pytest.mark.parametrize("link", [never_calls_next_returns_true,
                                  never_calls_next_returns_the_payload,
                                  never_awaits_next_returns_true,
                                  never_awaits_next_returns_the_payload])
@pytest.mark.parametrize("mode", MODES)
def test_a_link_that_never_calls_call_next_stops_the_push(
        config: wurk.Config, r: redis.Redis, link: Callable[..., Any], mode: str) -> None:
    config.client_middleware.add(link)

    async def apushes() -> list[Any]:
        return [await resize.aperform_async(1), await resize.aperform_bulk([[2], [3]]),
                await wurk.apush({"class": "X", "args": []})]

    pushed = in_mode(mode, lambda: [resize.perform_async(1), resize.perform_bulk([[2], [3]]),
                                    wurk.push({"class": "X", "args": []})], apushes)
    assert pushed == [None, [None, None], None]
    assert r.dbsize() == 0


INLINE_RAN: list[tuple[int, threading.Thread]] = []


@wurk.job(name="Client::Inline")
def runs_inline(n: int) -> None:
    INLINE_RAN.append((n, threading.current_thread()))


def test_set_sync_true_runs_the_job_inline_from_both_forms(config: wurk.Config,
                                                           r: redis.Redis) -> None:
    INLINE_RAN.clear()
    assert runs_inline.set(sync=True).perform_async(1) is None

    async def apush() -> tuple[str | None, threading.Thread]:
        return await runs_inline.set(sync=True).aperform_async(2), threading.current_thread()

    pushed, loop_thread = asyncio.run(apush())
    assert pushed is None and [n for n, _ in INLINE_RAN] == [1, 2]
    assert INLINE_RAN[1][1] is not loop_thread  # off the loop: the caller's loop kept going
    assert r.dbsize() == 0


class Number(enum.IntEnum):
    ONE = 1


class Colour(str, enum.Enum):
    RED = "red"


@pytest.mark.parametrize(("args", "named"), [
    ([Number.ONE], "argument 0 is Number"),
    ([Colour.RED], "argument 0 is Colour"),
    (["a\ud800b"], "argument 0 has a lone surrogate"),
    ([{"k": ["\udcff"]}], "argument 0['k'][0] has a lone surrogate"),
    ([{"\ud800": 1}], "argument 0 has the key '\\ud800'"),
    ([10**5000], "argument 0 is an int of about 5001 digits"),
])
@pytest.mark.parametrize("mode", MODES)
def test_arguments_json_cannot_carry_are_refused_by_name(
        config: wurk.Config, r: redis.Redis, args: list[Any], named: str, mode: str) -> None:
    with pytest.raises(InvalidArguments) as info:
        in_mode(mode, lambda: resize.perform_async(*args),
                lambda: resize.aperform_async(*args))
    assert named in str(info.value)
    assert r.dbsize() == 0


@pytest.mark.parametrize("size", [-1, 0, 2.5, True, "3"])
@pytest.mark.parametrize("mode", MODES)
def test_batch_size_must_be_a_positive_int(config: wurk.Config, r: redis.Redis, size: Any,
                                           mode: str) -> None:
    item = {"class": "X", "args": [[1], [2], [3]], "batch_size": size}
    with pytest.raises(InvalidPayload, match="batch_size") as info:
        in_mode(mode, lambda: wurk.push_bulk(item), lambda: wurk.apush_bulk(item))
    assert info.value.field == "batch_size" and r.dbsize() == 0
    with pytest.raises(InvalidPayload, match="batch_size"):
        in_mode(mode, lambda: resize.perform_bulk([[1]], batch_size=size),
                lambda: resize.aperform_bulk([[1]], batch_size=size))
    assert r.dbsize() == 0


NAN, INF = float("nan"), float("inf")
SOON = time.time() + 3600
BAD_TIMES: list[tuple[str, Callable[[], Any], Callable[[], Coroutine[Any, Any, Any]], str]] = [
    ("push at nan", lambda: wurk.push({"class": "X", "args": [], "at": NAN}),
     lambda: wurk.apush({"class": "X", "args": [], "at": NAN}), "'at'"),
    ("push at inf", lambda: wurk.push({"class": "X", "args": [], "at": INF}),
     lambda: wurk.apush({"class": "X", "args": [], "at": INF}), "'at'"),
    ("push at 10**400", lambda: wurk.push({"class": "X", "args": [], "at": 10**400}),
     lambda: wurk.apush({"class": "X", "args": [], "at": 10**400}), "'at'"),
    ("push at 10**5000", lambda: wurk.push({"class": "X", "args": [], "at": 10**5000}),
     lambda: wurk.apush({"class": "X", "args": [], "at": 10**5000}), "an int of 16610 bits"),
    ("bulk at True", lambda: wurk.push_bulk({"class": "X", "args": [[1]], "at": True}),
     lambda: wurk.apush_bulk({"class": "X", "args": [[1]], "at": True}), "'at'"),
    ("bulk at [None]", lambda: wurk.push_bulk({"class": "X", "args": [[1]], "at": [None]}),
     lambda: wurk.apush_bulk({"class": "X", "args": [[1]], "at": [None]}), "'at'[0]"),
    ("bulk at nan", lambda: resize.perform_bulk([[1], [2]], at=NAN),
     lambda: resize.aperform_bulk([[1], [2]], at=NAN), "'at'"),
    ("bulk at [soon, nan]", lambda: resize.perform_bulk([[1], [2]], at=[SOON, NAN]),
     lambda: resize.aperform_bulk([[1], [2]], at=[SOON, NAN]), "'at'[1]"),
    ("bulk at True by job", lambda: resize.perform_bulk([[1]], at=True),
     lambda: resize.aperform_bulk([[1]], at=True), "'at'"),
    ("spread nan", lambda: resize.perform_bulk([[1], [2]], spread_interval=NAN),
     lambda: resize.aperform_bulk([[1], [2]], spread_interval=NAN), "spread_interval"),
    ("perform_in nan", lambda: resize.perform_in(NAN, 1),
     lambda: resize.aperform_in(NAN, 1), "perform_in"),
    ("perform_in inf", lambda: resize.perform_in(INF, 1),
     lambda: resize.aperform_in(INF, 1), "perform_in"),
    ("perform_in True", lambda: resize.perform_in(True, 1),
     lambda: resize.aperform_in(True, 1), "perform_in"),
    ("perform_at nan", lambda: resize.perform_at(NAN, 1),
     lambda: resize.aperform_at(NAN, 1), "perform_at"),
    ("wait nan", lambda: resize.set(wait=NAN).perform_async(1),
     lambda: resize.set(wait=NAN).aperform_async(1), "wait"),
]


@pytest.mark.parametrize(("push", "apush", "named"), [case[1:] for case in BAD_TIMES],
                         ids=[case[0] for case in BAD_TIMES])
@pytest.mark.parametrize("mode", MODES)
def test_every_time_must_be_a_finite_number(
        config: wurk.Config, r: redis.Redis, push: Callable[[], Any],
        apush: Callable[[], Coroutine[Any, Any, Any]], named: str, mode: str) -> None:
    with pytest.raises(InvalidPayload) as info:
        in_mode(mode, push, apush)
    assert named in str(info.value)
    assert r.dbsize() == 0


@pytest.mark.parametrize("mode", MODES)
def test_a_bulk_push_refused_midway_names_the_job_and_what_was_pushed(
        config: wurk.Config, r: redis.Redis, mode: str) -> None:
    args: list[list[Any]] = [[n] for n in range(10)]
    args[7] = ["\ud800"]
    with pytest.raises(InvalidArguments) as info:
        in_mode(mode, lambda: resize.perform_bulk(args, batch_size=3),
                lambda: resize.aperform_bulk(args, batch_size=3))
    message = str(info.value)
    assert "job 7 of 10" in message and "argument 0 has a lone surrogate" in message
    assert "6 jobs before it were pushed" in message
    assert r.llen("queue:default") == 6
