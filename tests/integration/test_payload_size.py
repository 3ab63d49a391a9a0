"""A job larger than the server takes in one value (its ``proto-max-bulk-len``): a clear
``wurk.PayloadTooLarge`` at the call, on every push path, never an outage; nothing kept that
could never go, and a kept one that cannot go holds up nothing behind it.

The server here is the test's own, its limit lowered to Redis's least (1 MB) to keep the
payloads small; the session's server is not touched."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.faults import config_for
from tests.helpers.server import Server, small_bulk_server
from wurk.client import idempotent
from wurk.client.buffer import Entry
from wurk.client.reliable import writer_for

LIMIT = 1024 * 1024
BIG = "x" * (LIMIT + 100)


@pytest.fixture(scope="module")
def small_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = small_bulk_server(tmp_path_factory.mktemp("small-bulk"))
    yield server
    server.stop()


@pytest.fixture
def small(small_server: Server) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(small_server.url, decode_responses=True)
    client.flushall()
    assert client.config_get("proto-max-bulk-len") == {"proto-max-bulk-len": str(LIMIT)}
    yield client
    client.close()


def configured(server: Server, **settings: object) -> wurk.Config:
    return wurk.configure(config_for(server.url, **settings))


def test_a_push_too_large_raises_payload_too_large_naming_the_job_and_size(
        small_server: Server, small: redis.Redis) -> None:
    """It used to raise redis-py's bare ``Protocol error: invalid bulk length``, or, larger,
    ``RedisUnavailable`` (the server cuts the connection), as if Redis were down."""
    configured(small_server)
    for size in (LIMIT + 100, 4 * LIMIT):
        with pytest.raises(wurk.PayloadTooLarge) as info:
            wurk.push({"class": "Big", "args": ["x" * size], "jid": "b" * 24})
        error = info.value
        assert isinstance(error, wurk.InvalidPayload)
        assert not isinstance(error, wurk.RedisUnavailable)
        assert (error.jid, error.job_class, error.limit) == ("b" * 24, "Big", LIMIT)
        assert error.size > size
        assert f"job Big (jid {'b' * 24}) is {error.size:,} bytes" in str(error)
        assert "proto-max-bulk-len" in str(error)
    assert small.dbsize() == 0
    assert wurk.push({"class": "Small", "args": [1]}) is not None  # the connection is fine
    assert small.llen("queue:default") == 1


def test_a_scheduled_or_unique_push_too_large_raises_too(small_server: Server,
                                                         small: redis.Redis) -> None:
    configured(small_server)
    with pytest.raises(wurk.PayloadTooLarge):
        wurk.push({"class": "Big", "args": [BIG], "at": time.time() + 60})
    with pytest.raises(wurk.PayloadTooLarge):
        wurk.push({"class": "Big", "args": [BIG], "unique_for": 60})
    assert small.dbsize() == 0


def test_a_unique_push_counts_its_digest_in_the_size(small_server: Server,
                                                     small: redis.Redis) -> None:
    """A unique job's digest was added to its payload after the size check: one that fit
    without it and not with it was sent, and Redis refused it (not ``PayloadTooLarge``)."""
    configured(small_server)
    assert wurk.push({"class": "Big", "args": ["x" * 1000], "unique_for": 60}) is not None
    [raw] = small.lrange("queue:default", 0, -1)
    assert len(json.loads(raw)["unique_digest"]) == 43  # base64url of a SHA-256, unpadded
    small.flushall()
    # Its stored JSON would be 20 bytes over the limit; without the digest's 61 bytes
    # (``,"unique_digest":"…"``) it is 41 under.
    arg = "x" * (1000 + LIMIT + 20 - len(raw.encode()))
    with pytest.raises(wurk.PayloadTooLarge, match="bytes of JSON"):
        wurk.push({"class": "Big", "args": [arg], "unique_for": 60})
    assert small.dbsize() == 0
    assert wurk.push({"class": "Big", "args": [arg[:-100]], "unique_for": 60}) is not None
    assert small.llen("queue:default") == 1


def test_an_async_push_too_large_raises_payload_too_large(small_server: Server,
                                                          small: redis.Redis) -> None:
    config = configured(small_server)

    async def push() -> None:
        try:
            with pytest.raises(wurk.PayloadTooLarge, match=r"is .* bytes of JSON"):
                await wurk.apush({"class": "Big", "args": [BIG]})
            with pytest.raises(wurk.PayloadTooLarge, match="job 1 of 2 in this bulk push"):
                await wurk.apush_bulk({"class": "Big", "args": [[1], [BIG]]})
        finally:
            await config.aclose()

    asyncio.run(push())
    assert small.dbsize() == 0


def test_an_async_push_asks_the_servers_limit_without_blocking_the_loop(
        small_server: Server, small: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first payload over 1 MB a process pushed asked the server's limit with a blocking
    round trip of the sync pool, on the event loop's thread."""
    from wurk.client import writers
    from wurk.connections.pool import RedisPool

    monkeypatch.setattr(writers, "_bulk_limits", {})

    def blocking(*args: object, **kwargs: object) -> None:
        raise AssertionError("a blocking round trip on the event loop")

    monkeypatch.setattr(RedisPool, "run", blocking)
    config = configured(small_server)

    async def push() -> None:
        try:
            with pytest.raises(wurk.PayloadTooLarge, match=f"over the {LIMIT:,} bytes"):
                await wurk.apush({"class": "Big", "args": [BIG]})
            assert await wurk.apush({"class": "Fits", "args": ["x" * (LIMIT - 200)]})
        finally:
            await config.aclose()

    asyncio.run(push())
    assert writers._bulk_limits == {small_server.url: LIMIT}
    assert small.llen("queue:default") == 1


def test_a_bulk_push_stops_at_the_round_trip_of_the_job_too_large_and_says_so(
        small_server: Server, small: redis.Redis) -> None:
    """Earlier round trips were written; the one holding the large job, and the later ones,
    were not — the error says which, so no job goes missing unsaid."""
    configured(small_server)
    args = [[0], [1], [2], [BIG], [4], [5]]
    with pytest.raises(wurk.PayloadTooLarge) as info:
        wurk.push_bulk({"class": "Many", "args": args, "batch_size": 2})
    assert "job 3 of 6 in this bulk push" in str(info.value)
    assert "2 jobs before its round trip were pushed" in str(info.value)
    assert "jobs 2 to 3" in str(info.value)
    assert [wurk_args(raw) for raw in reversed(small.lrange("queue:default", 0, -1))] == \
        [[0], [1]]


def wurk_args(raw: str) -> list[object]:
    return list(json.loads(raw)["args"])


def test_a_reliable_push_too_large_raises_and_keeps_nothing(small_server: Server,
                                                            small: redis.Redis) -> None:
    """The reliable writer kept a large job as if Redis were down (the server cut the
    connection), and retried it for ever."""
    config = configured(small_server, reliable_push="memory")
    writer = writer_for(config)
    assert writer is not None
    with pytest.raises(wurk.PayloadTooLarge):
        wurk.push({"class": "Big", "args": ["x" * (4 * LIMIT)]})
    with pytest.raises(wurk.PayloadTooLarge):
        wurk.push_bulk({"class": "Big", "args": [[1], [BIG]]})
    assert len(writer.buffer) == 0
    assert small.dbsize() == 0


def test_a_kept_job_too_large_is_dropped_and_holds_up_none_behind_it(
        small_server: Server, small: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """One kept before the server's limit was lowered (or by an older version): sent again
    it would be refused at every flush, and the jobs behind it never sent."""
    config = configured(small_server, reliable_push="memory")
    writer = writer_for(config)
    assert writer is not None
    keys, now = config.keys, time.time()
    big = idempotent.sendable(keys, {"class": "Big", "args": [BIG], "queue": "default",
                                     "jid": "b" * 24}, None)
    fine = idempotent.sendable(keys, {"class": "Fine", "args": [1], "queue": "default",
                                      "jid": "f" * 24}, None)
    writer.buffer.keep([Entry(big, now), Entry(fine, now)])
    with caplog.at_level(logging.ERROR, logger="wurk"):
        assert writer.drain() == 1
    assert len(writer.buffer) == 0
    assert [wurk_args(raw) for raw in small.lrange("queue:default", 0, -1)] == [[1]]
    assert f"buffered job {'b' * 24} is" in caplog.text
    assert "it is dropped" in caplog.text
    assert BIG not in caplog.text  # the start of its JSON, not all of it


@wurk.job(name="SizeTest::big_result", result_ttl=60, retry=1)
def big_result(size: int) -> str:
    return "x" * size


@wurk.job(name="SizeTest::abig_result", result_ttl=60, retry=1)
async def abig_result(size: int) -> str:
    return "x" * size


@pytest.mark.parametrize("job", [big_result, abig_result])
def test_a_result_too_large_fails_the_run_with_unstorable_result_not_an_outage(
        small_server: Server, small: redis.Redis, job: Any) -> None:
    """A return value whose record is over the server's limit was sent all the same: the
    server cut the connection and the run failed with ``RedisUnavailable`` ("connection
    reset"), as if Redis were down, its waiter told nothing. It fails with
    ``wurk.UnstorableResult`` naming the size and the limit, as a value JSON cannot carry
    does (the retry policy applies), and that failure is what a waiter hears."""
    from tests.helpers.runner import AsyncDrain

    config = configured(small_server)
    handle = job.perform_async(LIMIT + 100)
    fits = job.perform_async(LIMIT - 500)
    drain = AsyncDrain(config)
    try:
        assert drain() == 2
    finally:
        drain.close()
    (entry,) = [json.loads(raw) for raw in small.zrange("retry", 0, -1)]
    assert entry["jid"] == handle.jid
    assert entry["error_class"] == "wurk.UnstorableResult"
    assert f"over the {LIMIT:,} bytes" in entry["error_message"]
    assert "proto-max-bulk-len" in entry["error_message"]
    with pytest.raises(wurk.JobFailed) as failed:
        handle.result(timeout=0)
    assert failed.value.error_class == "wurk.UnstorableResult" and failed.value.retries_remain
    assert len(fits.result(timeout=0)) == LIMIT - 500
