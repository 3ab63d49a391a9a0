"""Profiled jobs run by a real worker in this process: a successful run leaves exactly
Sidekiq 8's record (the ``profiles`` member scored a day ahead, the hash with its eight
fields and a day's TTL, gzip speedscope data naming the job's function), sync and async;
a failed run, and a job without ``profile``, leave nothing; without pyinstrument the job
runs unprofiled and the process says so once."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.runner import Drain
from tests.helpers.wait import wait_until
from wurk.api import RetrySet
from wurk.limiter import OverLimit
from wurk.profiling import middleware
from wurk.profiling.flame import DRAW_LIMIT, Unreadable, parse
from wurk.profiling.middleware import JobProfiler
from wurk.profiling.record import STORED_MAX_BYTES

FIELDS = {"started_at", "token", "type", "jid", "filename", "elapsed", "data", "size"}
DONE: list[str] = []


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


@wurk.job(name="prof.crunch")
def crunch_the_numbers(rounds: int) -> None:
    for _ in range(rounds):
        fib(16)
    DONE.append("crunch")


@wurk.job(name="prof.acrunch")
async def acrunch_the_numbers(rounds: int) -> None:
    for _ in range(rounds):
        fib(16)
        await asyncio.sleep(0)
    DONE.append("acrunch")


@wurk.job(name="prof.fails", retry=1)
def fail_after_work(rounds: int) -> None:
    for _ in range(rounds):
        fib(14)
    DONE.append("fails")
    raise RuntimeError("failed on purpose")


@pytest.fixture
def worker(redis_server: Any) -> Iterator[wurk.Config]:
    DONE.clear()
    config = wurk.configure(redis_url=redis_server.url, concurrency=2, fetch_timeout=0.2,
                            timeout=2)
    running = wurk.InProcessWorker(config).start()
    yield config
    running.stop()


def profiles(r: redis.Redis) -> list[tuple[str, float]]:
    return [(m, s) for m, s in r.zrange("profiles", 0, -1, withscores=True)]


def check_record(r: redis.Redis, token: str, jid: str, job: str, function: str,
                 pushed_at: float) -> None:
    key = f"{token}-{jid}"
    [(member, score)] = profiles(r)
    assert member == key
    assert pushed_at + 86_400 <= score <= time.time() + 86_400
    assert set(r.hkeys(key)) == FIELDS
    text = sorted(FIELDS - {"data"})
    fields = dict(zip(text, r.hmget(key, text), strict=True))
    assert fields["token"] == token and fields["jid"] == jid and fields["type"] == job
    assert pushed_at - 1 <= int(fields["started_at"]) <= time.time()
    assert 0 < float(fields["elapsed"]) < 60
    assert fields["filename"].startswith(f"{token}-{job}-{jid}-")
    assert fields["filename"].endswith(".speedscope.json.gz")
    assert 86_000 < r.ttl(key) <= 86_400
    data = redis.Redis.from_url(os.environ["REDIS_URL"]).hget(key, "data")
    assert int(fields["size"]) == len(data)
    document = json.loads(gzip.decompress(data))
    assert document["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    names = {frame["name"] for frame in document["shared"]["frames"]}
    assert function in names
    tree = parse(data)
    assert tree.kind == "speedscope" and tree.root.value > 0


def test_a_profiled_sync_job_stores_sidekiqs_record(worker: wurk.Config,
                                                    r: redis.Redis) -> None:
    pushed_at = time.time()
    jid = crunch_the_numbers.set(profile="slow-export").perform_async(60)
    wait_until(lambda: profiles(r), what="the profile")
    assert DONE == ["crunch"]
    check_record(r, "slow-export", jid, "prof.crunch", "crunch_the_numbers", pushed_at)


def test_a_profiled_async_job_is_profiled_in_its_own_task(worker: wurk.Config,
                                                          r: redis.Redis) -> None:
    pushed_at = time.time()
    jid = acrunch_the_numbers.set(profile="async-tok").perform_async(60)
    wait_until(lambda: profiles(r), what="the profile")
    check_record(r, "async-tok", jid, "prof.acrunch", "acrunch_the_numbers", pushed_at)


def test_a_failed_run_and_an_unprofiled_job_store_nothing(worker: wurk.Config,
                                                          r: redis.Redis) -> None:
    fail_after_work.set(profile="tok").perform_async(20)
    crunch_the_numbers.perform_async(5)
    wait_until(lambda: r.zcard("retry") == 1 and "crunch" in DONE, what="both jobs ran")
    assert sorted(DONE) == ["crunch", "fails"]
    assert r.keys("tok-*") == [] and not r.exists("profiles")


def test_a_wrapped_job_is_filed_under_the_class_it_wraps(worker: wurk.Config,
                                                         r: redis.Redis) -> None:
    wurk.push({"class": "prof.crunch", "args": [3], "profile": "aj",
               "wrapped": "Reports::ExportJob"})
    wait_until(lambda: profiles(r), what="the profile")
    [(member, _)] = profiles(r)
    assert r.hget(member, "type") == "Reports::ExportJob"


def test_a_bad_token_or_options_from_elsewhere_never_fail_the_job(
        worker: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="wurk")
    wurk.push({"class": "prof.crunch", "args": [1], "profile": 42})
    wurk.push({"class": "prof.crunch", "args": [1], "profile": "ruby",
               "profiler_options": {"interval": 500, "allocation_interval": 10}})
    wait_until(lambda: DONE == ["crunch", "crunch"] and profiles(r), what="both jobs")
    assert next(m for m, _ in profiles(r)).startswith("ruby-")  # profiled, default interval
    text = caplog.text
    assert "profile=42 is not a token" in text
    assert "'allocation_interval' is not one wurk's profiler has" in text


def test_without_pyinstrument_the_job_runs_unprofiled_and_one_warning_says_so(
        worker: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.WARNING, logger="wurk")
    monkeypatch.setitem(sys.modules, "pyinstrument", None)  # an import of it now fails
    middleware._pyinstrument.cache_clear()
    try:
        for _ in range(3):
            crunch_the_numbers.set(profile="tok").perform_async(1)
        wait_until(lambda: len(DONE) == 3, what="the jobs ran")
    finally:
        monkeypatch.undo()
        middleware._pyinstrument.cache_clear()
    assert not r.exists("profiles")
    warnings = [rec.getMessage() for rec in caplog.records if "pyinstrument" in rec.getMessage()]
    assert len(warnings) == 1
    assert "pip install 'wurk[profile]'" in warnings[0]


def test_the_profile_option_is_checked_where_the_job_is_defined_or_set() -> None:
    with pytest.raises(wurk.ConfigError, match="profile=5 is invalid"):
        crunch_the_numbers.set(profile=5)
    with pytest.raises(wurk.ConfigError, match="non-empty string"):
        wurk.job(name="prof.empty", profile="")(lambda: None)
    with pytest.raises(wurk.ConfigError, match="mode='retained' is invalid"):
        crunch_the_numbers.set(profile="t", profiler_options={"mode": "retained"})
    with pytest.raises(wurk.ConfigError, match="interval=10 is invalid"):
        crunch_the_numbers.set(profile="t", profiler_options={"interval": 10})
    with pytest.raises(wurk.ConfigError, match="'hooks' is not one"):
        crunch_the_numbers.set(profile="t", profiler_options={"hooks": []})
    assert crunch_the_numbers.set(profile="t", profiler_options={"interval": 250})


# -- what is in a profile, and what is not (profiling.md, "What it does") ----
NEIGHBOUR_STARTED = threading.Event()
PROFILED_DONE = threading.Event()


def neighbours_own_work() -> None:
    sum(range(2_000))


@wurk.job(name="prof.neighbour")
def neighbour() -> None:
    NEIGHBOUR_STARTED.set()
    while not PROFILED_DONE.is_set():
        neighbours_own_work()
    DONE.append("neighbour")


@wurk.job(name="prof.alongside")
def crunch_alongside_a_neighbour() -> None:
    NEIGHBOUR_STARTED.wait(5)
    started = time.perf_counter()
    while time.perf_counter() - started < 0.3:
        fib(12)
    PROFILED_DONE.set()
    DONE.append("alongside")


@wurk.job(name="prof.aneighbour")
async def busy_job_on_the_same_loop() -> None:
    NEIGHBOUR_STARTED.set()
    while not PROFILED_DONE.is_set():
        neighbours_own_work()
        await asyncio.sleep(0)
    DONE.append("aneighbour")


@wurk.job(name="prof.await")
async def await_alongside_a_busy_job() -> None:
    while not NEIGHBOUR_STARTED.is_set():
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)
    PROFILED_DONE.set()
    DONE.append("await")


@wurk.job(name="prof.spawns")
async def starts_a_task_of_its_own() -> None:
    async def the_jobs_own_task() -> None:
        started = time.perf_counter()
        while time.perf_counter() - started < 0.2:
            neighbours_own_work()
            await asyncio.sleep(0)

    await asyncio.get_running_loop().create_task(the_jobs_own_task())
    DONE.append("spawns")


def frame_names(r: redis.Redis) -> set[str]:
    [(member, _)] = profiles(r)
    data = redis.Redis.from_url(os.environ["REDIS_URL"]).hget(member, "data")
    return {frame["name"] for frame in json.loads(gzip.decompress(data))["shared"]["frames"]}


def test_a_sync_jobs_profile_leaves_out_the_job_on_the_workers_other_thread(
        worker: wurk.Config, r: redis.Redis) -> None:
    NEIGHBOUR_STARTED.clear()
    PROFILED_DONE.clear()
    neighbour.perform_async()
    crunch_alongside_a_neighbour.set(profile="alone").perform_async()
    wait_until(lambda: sorted(DONE) == ["alongside", "neighbour"] and profiles(r),
               what="both jobs and the profile")
    names = frame_names(r)
    assert "crunch_alongside_a_neighbour" in names and "fib" in names
    assert not names & {"neighbour", "neighbours_own_work"}


def test_an_async_jobs_await_is_one_await_frame_and_other_jobs_tasks_are_left_out(
        worker: wurk.Config, r: redis.Redis) -> None:
    NEIGHBOUR_STARTED.clear()
    PROFILED_DONE.clear()
    busy_job_on_the_same_loop.perform_async()
    await_alongside_a_busy_job.set(profile="awaits").perform_async()
    wait_until(lambda: sorted(DONE) == ["aneighbour", "await"] and profiles(r),
               what="both jobs and the profile")
    names = frame_names(r)
    assert "await_alongside_a_busy_job" in names and "[await]" in names
    assert not names & {"busy_job_on_the_same_loop", "neighbours_own_work"}


def test_a_task_the_async_job_starts_itself_is_in_its_profile(worker: wurk.Config,
                                                             r: redis.Redis) -> None:
    starts_a_task_of_its_own.set(profile="spawns").perform_async()
    wait_until(lambda: DONE == ["spawns"] and profiles(r), what="the job and its profile")
    assert "the_jobs_own_task" in frame_names(r)


# -- what is stored, and when nothing is (profiling.md, "How it fails") ----
@wurk.job(name="prof.limited", retry=1)
def over_its_rate_limit() -> None:
    fib(12)
    DONE.append("limited")
    raise OverLimit(None, retry_after=60.0)


@wurk.job(name="prof.flaky", retry=1)
def fails_once_then_succeeds() -> None:
    fib(12)
    DONE.append("flaky")
    if DONE.count("flaky") == 1:
        raise RuntimeError("the first run fails")


def test_a_rate_limiters_reschedule_and_the_shutdown_store_nothing(
        config: wurk.Config, r: redis.Redis) -> None:
    DONE.clear()
    over_its_rate_limit.set(profile="limited").perform_async()
    drain = Drain(config, "default")
    try:
        assert drain() == 1
    finally:
        drain.close()
    assert DONE == ["limited"] and r.zcard("schedule") == 1 and r.zcard("retry") == 0
    assert not r.exists("profiles") and r.keys("limited-*") == []

    def interrupted() -> None:
        fib(12)
        raise wurk.Shutdown()

    payload = {"class": "prof.crunch", "args": [], "jid": "c" * 24, "profile": "stopped"}
    with pytest.raises(wurk.Shutdown):
        JobProfiler(config)(None, payload, "default", interrupted)
    assert not r.exists("profiles") and r.keys("stopped-*") == []


def test_the_retry_that_succeeds_is_profiled(config: wurk.Config, r: redis.Redis) -> None:
    DONE.clear()
    jid = fails_once_then_succeeds.set(profile="flaky").perform_async()
    drain = Drain(config, "default")
    try:
        drain()
        assert r.zcard("retry") == 1 and not r.exists("profiles")
        assert RetrySet(config).retry_all() == 1
        drain()
    finally:
        drain.close()
    assert DONE == ["flaky", "flaky"]
    assert [m for m, _ in profiles(r)] == [f"flaky-{jid}"]


def test_when_storing_fails_the_error_handlers_hear_and_the_job_still_succeeds(
        config: wurk.Config, r: redis.Redis) -> None:
    reported: list[tuple[BaseException, dict[str, Any]]] = []
    config.error_handlers.append(lambda exc, context: reported.append((exc, context)))
    r.set("profiles", "a string: the store's ZADD is refused")
    jid = crunch_the_numbers.set(profile="unstored").perform_async(2)
    drain = Drain(config, "default")
    try:
        assert drain() == 1
    finally:
        drain.close()
    [(exc, context)] = reported
    assert "WRONGTYPE" in str(exc)
    assert context == {"context": "storing a job's profile", "jid": jid}
    assert drain.counters.processed == 1 and drain.counters.failed == 0
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0 and r.llen("queue:default") == 0


@pytest.mark.parametrize("token", ["", "t" * 101], ids=["empty", "over 100 characters"])
def test_a_token_from_elsewhere_that_is_empty_or_too_long_runs_unprofiled_and_says_so(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture,
        token: str) -> None:
    caplog.set_level(logging.WARNING, logger="wurk")
    DONE.clear()
    wurk.push({"class": "prof.crunch", "args": [1], "profile": token})
    drain = Drain(config, "default")
    try:
        assert drain() == 1
    finally:
        drain.close()
    assert DONE == ["crunch"] and not r.exists("profiles")
    assert "is not a token wurk can store (a non-empty string of at most 100 characters)" \
        in caplog.text
    wurk.push({"class": "prof.crunch", "args": [1], "profile": "t" * 100})
    drain = Drain(config, "default")
    try:
        drain()
    finally:
        drain.close()
    assert next(m for m, _ in profiles(r)).startswith("t" * 100 + "-")  # 100 is a token


def test_the_sampling_interval_defaults_to_1000_us_and_tops_out_at_a_second(
        config: wurk.Config, monkeypatch: pytest.MonkeyPatch) -> None:
    intervals: list[float] = []
    real = middleware._pyinstrument()
    assert real is not None
    profiler_class, renderer = real

    def recording_profiler(*args: Any, interval: float, **kwargs: Any) -> Any:
        intervals.append(interval)
        return profiler_class(*args, interval=interval, **kwargs)

    monkeypatch.setattr(middleware, "_profiler_tools", lambda: (recording_profiler, renderer))
    link = JobProfiler(config)
    for options in [None, {"mode": "wall"}, {"interval": 1_000_000}]:
        payload = {"class": "prof.crunch", "args": [], "jid": "d" * 24, "profile": "iv"}
        if options is not None:
            payload["profiler_options"] = options
        link(None, payload, "default", lambda: None)
    assert intervals == [0.001, 0.001, 1.0]
    with pytest.raises(wurk.ConfigError, match="interval=1000001 is invalid"):
        crunch_the_numbers.set(profile="t", profiler_options={"interval": 1_000_001})
    assert crunch_the_numbers.set(profile="t", profiler_options={"interval": 1_000_000})


def test_stored_data_is_capped_at_5_mb_and_drawing_at_8_mb_of_json() -> None:
    assert STORED_MAX_BYTES == 5 * 1024 * 1024
    assert DRAW_LIMIT == 8 * 1024 * 1024
    with pytest.raises(Unreadable, match="over 8 MB of JSON"):
        parse(gzip.compress(b" " * (DRAW_LIMIT + 1)))
    with pytest.raises(Unreadable, match="not JSON"):  # 8 MB itself is read, then judged
        parse(gzip.compress(b" " * DRAW_LIMIT))


def test_a_forged_token_and_jid_never_write_into_a_key_that_is_no_profile_of_theirs(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """``<token>-<jid>`` comes from the payload: a token and jid that spell a key of
    something else (a list, a string, another hash) leave it as it was — no field written,
    no expiry set, no member listed — and a warning says why; the job's own earlier
    profile is still replaced."""
    from wurk.profiling.record import Run, encode, note, store

    r.rpush("app-orders", "kept")
    r.set("app-flag", "on")
    r.hset("b-1234", mapping={"pending": "3", "jid": "other"})
    for token, jid in (("app", "orders"), ("app", "flag"), ("b", "1234")):
        run = Run(token=token, jid=jid, type="Forged", started_at=time.time(), elapsed=0.1)
        store(config, run, encode(note(run, "forged")))
    assert r.lrange("app-orders", 0, -1) == ["kept"] and r.get("app-flag") == "on"
    assert sorted(r.hkeys("b-1234")) == ["jid", "pending"] and r.hget("b-1234", "jid") == "other"
    assert [r.ttl(key) for key in ("app-orders", "app-flag", "b-1234")] == [-1, -1, -1]
    assert profiles(r) == []
    assert "app-orders" in caplog.text and "not stored" in caplog.text
    run = Run(token="own", jid="j1", type="Mine", started_at=time.time(), elapsed=0.1)
    store(config, run, encode(note(run, "first")))
    store(config, Run(token="own", jid="j1", type="Again", started_at=time.time(),
                      elapsed=0.2), encode(note(run, "second")))
    assert r.hget("own-j1", "type") == "Again" and [m for m, _ in profiles(r)] == ["own-j1"]
