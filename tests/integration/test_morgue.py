"""The dead set: one writer, Sidekiq's two trims (its off-by-one included)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from wurk.config import Config
from wurk.morgue import Morgue


@pytest.fixture
def small() -> Iterator[Config]:
    config = Config(dead_max_jobs=5, dead_timeout=100)
    yield config
    config.close()


def test_bury_stores_the_raw_bytes_scored_now(small: Config, r: redis.Redis) -> None:
    raw = '{"class":"A","args":[1152921504606846977,"ünï 😀"],"z":1,"a":2}'
    before = time.time()
    Morgue(small).bury(raw)
    [(member, score)] = r.zrange("dead", 0, -1, withscores=True)
    assert member == raw and before <= score <= time.time()


def test_bury_accepts_what_is_not_json(small: Config, r: redis.Redis) -> None:
    Morgue(small).bury(b"\xffnot json{")
    raw = redis.Redis.from_url(small.redis_url or "")
    assert raw.zrange("dead", 0, -1) == [b"\xffnot json{"]
    raw.close()


def test_count_trim_keeps_max_minus_one_like_sidekiq(small: Config, r: redis.Redis) -> None:
    morgue = Morgue(small)
    now = time.time()
    for i in range(10):
        morgue.bury(f'{{"n":{i}}}', now=now + i * 0.001)
    survivors = [json.loads(m)["n"] for m in r.zrange("dead", 0, -1)]
    assert survivors == [6, 7, 8, 9]  # dead_max_jobs=5 → 4 kept, the newest


def test_age_trim_drops_entries_older_than_dead_timeout(small: Config, r: redis.Redis) -> None:
    morgue = Morgue(small)
    now = time.time()
    morgue.bury('{"n":"old"}', now=now - 140)
    morgue.bury('{"n":"young"}', now=now - 50)
    assert r.zcard("dead") == 2
    morgue.bury('{"n":"new"}', now=now)
    assert [json.loads(m)["n"] for m in r.zrange("dead", 0, -1)] == ["young", "new"]


def test_default_limits_are_sidekiqs() -> None:
    config = Config()
    assert config.dead_max_jobs == 10_000 and config.dead_timeout == 180 * 24 * 3600


def test_kill_stores_the_job_and_notifies(small: Config, r: redis.Redis) -> None:
    seen: list[tuple[Any, ...]] = []
    small.death_handlers.append(lambda job, exc: seen.append((job, exc)))
    job = {"class": "A", "args": [], "jid": "j"}
    exc = RuntimeError("killed")
    Morgue(small).kill(job, exc)
    assert r.zrange("dead", 0, -1) == ['{"class":"A","args":[],"jid":"j"}']
    assert seen == [(job, exc)]


def test_kill_with_raw_and_without_notifying(small: Config, r: redis.Redis) -> None:
    seen: list[Any] = []
    small.death_handlers.append(lambda job, exc: seen.append(job))
    raw = '{"jid":"j", "class":"A" ,"args":[]}'  # odd spacing kept byte for byte
    Morgue(small).kill({"jid": "j"}, RuntimeError("x"), raw=raw, notify=False)
    assert r.zrange("dead", 0, -1) == [raw] and seen == []


def test_bury_is_one_transaction(small: Config, r: redis.Redis) -> None:
    r.set("dead", "not a sorted set")
    with pytest.raises(redis.ResponseError):
        Morgue(small).bury('{"a":1}')
    assert r.get("dead") == "not a sorted set"
