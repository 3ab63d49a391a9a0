"""``wurk.api.ProfileSet`` over what Redis holds: wurk's own profiles and Ruby Sidekiq 8's,
newest first, pruned as Sidekiq prunes; records that cannot be read listed with their
problem; a delete that never reaches a key the profile does not own."""

from __future__ import annotations

import gzip
import json
import time
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.profiles import VERNIER, ruby_profile
from tests.helpers.runner import Drain
from wurk.api import Invalid, ProfileSet
from wurk.api.profiles import DATA_LIMIT
from wurk.profiling.flame import Unreadable


@pytest.fixture
def raw(redis_server: Any) -> redis.Redis:
    return redis.Redis.from_url(redis_server.url)


@wurk.job(name="api.profiled")
def profiled_job(n: int) -> int:
    return sum(range(n))


def test_a_ruby_sidekiq_8_profile_lists_downloads_and_draws(config: wurk.Config,
                                                             raw: redis.Redis) -> None:
    key = ruby_profile(raw, "mike", "1234abcd")
    profiles = ProfileSet(config)
    assert profiles.size() == 1
    [record] = profiles
    assert (record.key, record.token, record.jid, record.type) == ("mike-1234abcd", "mike",
                                                                    "1234abcd", "HardJob")
    assert record.elapsed == 0.012345 and record.problem is None
    assert record.started_at == pytest.approx(time.time(), abs=5)
    assert record.size == len(raw.hget(key, "data") or b"")
    assert record.filename.startswith("/tmp/mike-HardJob-1234abcd-")
    data = profiles.data(key)
    assert data is not None and json.loads(gzip.decompress(data)) == json.loads(
        VERNIER.read_text())
    flame = record.flame()
    assert flame.kind == "firefox" and flame.root.value == 10


def test_wurks_profiles_read_back_newest_first_and_expired_ones_are_pruned(
        config: wurk.Config, raw: redis.Redis) -> None:
    ruby_profile(raw, "old", "a" * 24, now=time.time() - 90_000)  # its day is over
    ruby_profile(raw, "ruby", "b" * 24, now=time.time() - 60)
    jid = profiled_job.set(profile="py").perform_async(1000)
    Drain(config)()
    profiles = ProfileSet(config)
    assert profiles.size() == 3
    assert profiles.prune() == 1 and profiles.size() == 2
    assert [r.key for r in profiles] == [f"py-{jid}", f"ruby-{'b' * 24}"]
    assert [r.key for r in profiles.iterate(page_size=1)] == [f"py-{jid}", f"ruby-{'b' * 24}"]
    assert [r.key for r in profiles.page(1, 5)] == [f"ruby-{'b' * 24}"]
    mine = profiles.find(f"py-{jid}")
    assert mine is not None and mine.type == "api.profiled" and mine.token == "py"
    assert mine.flame().kind == "speedscope"
    assert isinstance(mine.elapsed, float) and mine.expires_at > time.time() + 86_000
    assert profiles.find("nope") is None and profiles.data("nope") is None
    assert mine.to_dict()["key"] == f"py-{jid}"


def test_records_that_cannot_be_read_are_listed_with_their_problem(
        config: wurk.Config, raw: redis.Redis) -> None:
    now = time.time()
    raw.zadd("profiles", {"gone-1": now + 10, "typed-2": now + 20, "bad-3": now + 30,
                          b"\xff\xfe-4": now + 40})
    raw.set("typed-2", "a string")
    raw.hset("bad-3", mapping={"started_at": "soon", "size": "-5", "elapsed": "nan",
                               "token": "bad", "jid": "3", "data": "not gzip"})
    records = {r.key: r for r in ProfileSet(config)}
    assert records["gone-1"].problem == "its hash is gone (expired or deleted)"
    assert records["typed-2"].problem == "its key holds another type than a hash"
    assert records["\ufffd\ufffd-4"].problem == "its member is not UTF-8 text"
    bad = records["bad-3"]
    assert bad.problem is None
    assert all(isinstance(v, Invalid) for v in (bad.started_at, bad.size, bad.elapsed))
    with pytest.raises(Unreadable, match="not gzip"):
        bad.flame()
    with pytest.raises(Unreadable, match="no profile data"):
        records["typed-2"].flame()


def test_data_past_the_read_limit_is_not_read(config: wurk.Config, raw: redis.Redis) -> None:
    key = ruby_profile(raw, "big", "1")
    raw.hset(key, "data", b"\x1f\x8b" + b"\0" * (DATA_LIMIT + 1))
    assert ProfileSet(config).data(key) is None


def test_delete_removes_the_profile_and_nothing_it_does_not_own(
        config: wurk.Config, raw: redis.Redis) -> None:
    key = ruby_profile(raw, "mike", "1")
    raw.sadd("queues", "default")
    raw.hset("stolen", mapping={"token": "other", "jid": "x"})
    raw.zadd("profiles", {"queues": time.time() + 99, "stolen": time.time() + 99})
    profiles = ProfileSet(config)
    assert profiles.delete(key) is True
    assert not raw.exists(key) and raw.zscore("profiles", key) is None
    assert profiles.delete("queues") is True and profiles.delete("stolen") is True
    assert raw.smembers("queues") == {b"default"} and raw.exists("stolen")
    assert profiles.delete(key) is False and profiles.delete("") is False
    assert profiles.size() == 0


def test_a_profiles_key_of_another_type_reads_as_empty(config: wurk.Config,
                                                       raw: redis.Redis) -> None:
    raw.set("profiles", "not a sorted set")
    profiles = ProfileSet(config)
    assert profiles.prune() == 0 and profiles.size() == 0 and list(profiles) == []
    assert profiles.page(0, 25) == [] and profiles.find("x-1") is None


def test_keys_follow_the_prefix(redis_server: Any, raw: redis.Redis) -> None:
    config = wurk.configure(redis_url=redis_server.url, key_prefix="ns")
    jid = profiled_job.set(profile="pre").perform_async(10)
    Drain(config, "default")()
    assert raw.zrange("ns:profiles", 0, -1) == [f"pre-{jid}".encode()]
    assert raw.hget(f"ns:pre-{jid}", "jid") == jid.encode()
    [record] = ProfileSet(config)
    assert record.jid == jid and record.data() is not None
