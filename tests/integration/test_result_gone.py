"""Waits that used to end only at their timeout, on a real server.

1. A result larger than the server's pub/sub output-buffer limit: published whole, it made
   Redis drop the waiter's subscription, and the waiter heard nothing. It is now announced
   by a short notice, and the waiters (sync and async) read the stored record at once.
2. A job deleted through ``wurk.api`` before it ran (from its queue, the scheduled set or
   the retry set; one job, a page's delete, a delete by class, a ``clear()``): its result
   now says so, and its waiters raise ``wurk.JobDeleted`` at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import wurk
import wurk.api
from tests.helpers.result_waits import LONG, subscribed, sync_wait
from tests.helpers.wait import wait_until
from wurk import payload as P
from wurk.results import store, waiting

TTL = 600
PROMPT = 10.0  # ...and within this, on a loaded machine


@wurk.job(name="gone.add", result_ttl=TTL)
def add(a: int, b: int) -> int:
    return a + b


@wurk.job(name="gone.plain")
def plain(a: int) -> int:
    return a


@pytest.fixture
def no_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wait reads the record again every RECHECK seconds: pushed past the waits' time, so
    only the announcement can end them."""
    monkeypatch.setattr(waiting, "RECHECK", 3600.0)


@pytest.fixture
def small_pubsub_buffer(r: redis.Redis) -> Iterator[None]:
    """A pub/sub output-buffer limit of 1 KB (restored after)."""
    before = r.config_get("client-output-buffer-limit")["client-output-buffer-limit"]
    r.config_set("client-output-buffer-limit", "pubsub 1024 512 60")
    yield
    r.config_set("client-output-buffer-limit", before)


# -- a result over the pub/sub output-buffer limit -------------------------------------------
def test_a_large_result_reaches_a_sync_waiter_at_once(
        config: wurk.Config, r: redis.Redis, no_recheck: None,
        small_pubsub_buffer: None) -> None:
    value = "x" * 200_000
    jid = "L" * 24
    handle: wurk.ResultHandle[Any] = wurk.ResultHandle(jid, config)
    thread, found = sync_wait(handle)
    wait_until(subscribed(r), what="the sync wait subscribed")
    payload = {P.JID: jid, P.CLASS: "gone.big"}
    store.record(config, payload, store.succeeded(payload, value, time.time()), TTL)
    thread.join(LONG + 5)
    assert found[0] == value, repr(found[0])[:200]
    assert found[1] < PROMPT


def test_a_large_result_reaches_async_waiters_at_once(
        config: wurk.Config, r: redis.Redis, no_recheck: None,
        small_pubsub_buffer: None) -> None:
    value = ["y" * 1000] * 200
    jids = ["A" * 23 + str(n) for n in range(3)]

    async def main() -> tuple[list[Any], float]:
        tasks = [asyncio.ensure_future(wurk.ResultHandle(jid, config).aresult(timeout=LONG))
                 for jid in jids]
        listener = waiting.listener(config)
        while listener.session is None or len(listener.session.subscribed) < len(jids) \
                or listener.unlooked:
            await asyncio.sleep(0.01)
        started = time.monotonic()
        for jid in jids:
            payload = {P.JID: jid, P.CLASS: "gone.big"}
            await store.arecord(config, payload, store.succeeded(payload, value, time.time()),
                                TTL)
        values = await asyncio.gather(*tasks, return_exceptions=True)
        return list(values), time.monotonic() - started

    values, took = asyncio.run(main())
    assert values == [value] * len(jids), [repr(v)[:200] for v in values]
    assert took < PROMPT


def test_a_small_result_is_still_announced_whole(config: wurk.Config, r: redis.Redis) -> None:
    pubsub = r.pubsub()
    pubsub.subscribe("wurk:result-ready:" + "s" * 24)
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"  # type: ignore[index]
    payload = {P.JID: "s" * 24, P.CLASS: "gone.small"}
    store.record(config, payload, store.succeeded(payload, 3, time.time()), TTL)
    message = pubsub.get_message(timeout=5)
    assert message is not None and '"value":3' in message["data"]
    payload = {P.JID: "s" * 24, P.CLASS: "gone.big"}
    store.record(config, payload,
                 store.succeeded(payload, "z" * (store.ANNOUNCE_INLINE + 1), time.time()), TTL)
    message = pubsub.get_message(timeout=5)
    assert message is not None and message["data"] == store.NOTICE
    pubsub.close()


# -- a job deleted before it ran -----------------------------------------------------------
def _in_retry_set(config: wurk.Config) -> tuple[wurk.ResultHandle[Any], Callable[[], Any]]:
    jid = P.new_jid()
    payload = {P.JID: jid, P.CLASS: "gone.add", P.QUEUE: "default", P.ARGS: [1, 2],
               P.RESULT_TTL: TTL, P.RETRY_COUNT: 0}
    wurk.api.RetrySet(config).schedule(time.time() + 3600, payload)
    return wurk.ResultHandle(jid, config), lambda: wurk.api.RetrySet(config).clear()


def _queued(config: wurk.Config) -> wurk.ResultHandle[Any]:
    handle = add.perform_async(1, 2)
    assert handle is not None
    return handle


def _listed_delete(config: wurk.Config, handle: str) -> Any:
    queue = wurk.api.Queue("default", config)
    [listed] = [item for item in queue.listing(0, 10) if item.record.jid == handle]
    return queue.delete_listed(listed.index, listed.record.digest)


DELETIONS: dict[str, Callable[[wurk.Config], tuple[wurk.ResultHandle[Any], Callable[[], Any]]]] = {
    "queue delete_job": lambda c: (h := _queued(c),
                                   lambda: wurk.api.Queue("default", c).delete_job(h)),
    "queue delete_by_class": lambda c: (_queued(c),
                                        lambda: wurk.api.Queue("default", c)
                                        .delete_by_class("gone.add")),
    "queue delete (its bytes)": lambda c: (h := _queued(c),
                                           lambda: wurk.api.Queue("default", c).delete(
                                               wurk.api.Queue("default", c).find_job(h)
                                               or "")),
    "queue delete_listed (the dashboard)": lambda c: (h := _queued(c),
                                                      lambda: _listed_delete(c, h)),
    "queue clear": lambda c: (_queued(c), lambda: wurk.api.Queue("default", c).clear()),
    "scheduled delete": lambda c: (h := add.perform_in(3600, 1, 2),  # type: ignore[arg-type]
                                   lambda: wurk.api.ScheduledSet(c).find_job(h).delete()),  # type: ignore[union-attr]
    "scheduled clear": lambda c: (add.perform_in(3600, 1, 2),  # type: ignore[arg-type]
                                  lambda: wurk.api.ScheduledSet(c).clear()),
    "retry clear": _in_retry_set,
}


@pytest.mark.parametrize("how", list(DELETIONS))
def test_a_sync_wait_on_a_deleted_job_ends_at_once(
        config: wurk.Config, r: redis.Redis, no_recheck: None, how: str) -> None:
    plain.perform_async(1)  # a job keeping no result, deleted alongside: nothing recorded
    handle, delete = DELETIONS[how](config)
    thread, found = sync_wait(handle)
    wait_until(subscribed(r), what="the sync wait subscribed")
    assert delete()
    thread.join(LONG + 5)
    error, took = found
    assert isinstance(error, wurk.JobDeleted), error
    assert isinstance(error, wurk.JobCancelled) and error.jid == handle
    assert error.deleted_from in ("queue default", "scheduled set", "retry set")
    assert "deleted" in str(error) and took < PROMPT
    outcome = r.get("wurk:result:" + handle)
    assert outcome is not None and r.ttl("wurk:result:" + handle) > TTL - 60
    assert len(r.keys("wurk:result:*")) == 1  # the plain job's deletion stored nothing


def test_an_async_wait_on_a_deleted_job_ends_at_once(
        config: wurk.Config, no_recheck: None) -> None:
    queued = [_queued(config) for _ in range(3)]
    scheduled = add.perform_in(3600, 1, 2)
    assert scheduled is not None

    async def main() -> tuple[list[Any], float]:
        tasks = [asyncio.ensure_future(h.aresult(timeout=LONG)) for h in [*queued, scheduled]]
        listener = waiting.listener(config)
        while listener.session is None or len(listener.session.subscribed) < 4 \
                or listener.unlooked:
            await asyncio.sleep(0.01)
        started = time.monotonic()
        await asyncio.to_thread(wurk.api.Queue("default", config).clear)
        await asyncio.to_thread(lambda: wurk.api.ScheduledSet(config).clear())
        found = await asyncio.gather(*tasks, return_exceptions=True)
        return list(found), time.monotonic() - started

    found, took = asyncio.run(main())
    assert all(isinstance(e, wurk.JobDeleted) for e in found), found
    assert [e.deleted_from for e in found] == ["queue default"] * 3 + ["scheduled set"]
    assert took < PROMPT
    # a wait that comes later finds it at once too, and so does a look
    with pytest.raises(wurk.JobDeleted):
        queued[0].result(timeout=0)
    outcome = queued[0].outcome()
    assert outcome is not None and outcome.status == "cancelled"
    assert outcome.deleted_from == "queue default" and outcome.started_at is None


def test_deleting_a_dead_job_keeps_its_final_failure(config: wurk.Config,
                                                     r: redis.Redis) -> None:
    jid = "d" * 24
    payload = {P.JID: jid, P.CLASS: "gone.add", P.QUEUE: "default", P.ARGS: [1, 2],
               P.RESULT_TTL: TTL}
    failure = store.failed(payload, ValueError("boom"), None, retries_remain=False,
                           backtrace=None)
    store.record(config, payload, failure, TTL)
    wurk.api.DeadSet(config).kill(payload, notify_failure=False)
    assert wurk.api.DeadSet(config).clear() == 1
    with pytest.raises(wurk.JobFailed):
        wurk.ResultHandle(jid, config).result(timeout=0)


@pytest.mark.parametrize("where", [1, "", ["queue"]])
def test_a_malformed_deletion_record_is_unreadable(config: wurk.Config, r: redis.Redis,
                                                   where: Any) -> None:
    jid = "m" * 24
    r.set("wurk:result:" + jid, P.dumps({"status": "cancelled", "deleted_from": where}))
    with pytest.raises(wurk.UnreadableResult, match="deleted_from"):
        wurk.ResultHandle(jid, config).result(timeout=0)
    r.set("wurk:result:" + jid, P.dumps({"status": "succeeded", "value": 1,
                                         "deleted_from": "queue default"}))
    with pytest.raises(wurk.UnreadableResult, match="deleted_from"):
        wurk.ResultHandle(jid, config).result(timeout=0)
