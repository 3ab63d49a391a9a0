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
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.wait import wait_until
from wurk.profiling import middleware
from wurk.profiling.flame import parse

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
