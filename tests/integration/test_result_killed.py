"""Waits on jobs that left through ``wurk.api`` without running, on a real server.

1. A job killed through the API (an entry's ``kill()``, ``RetrySet.kill_all()``,
   ``DeadSet.kill()``): its final failure is stored whatever ``notify_failure`` says and
   whichever process kills it (no worker's death handler installed here), so its waiters
   raise ``wurk.JobFailed`` at once, naming the kill and the job's last error. The
   application's death handlers still run only with ``notify_failure``.
2. A partitioned queue's ``clear()``: the jobs taken from its partitions say they were
   deleted from the queue (``wurk.JobDeleted``), as those of its plain list did.
3. Malformed entries in either are skipped, never a crash.
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
from wurk.results import waiting
from wurk.results.recorder import ResultDeathHandler

TTL = 600
PROMPT = 10.0  # ...and within this, on a loaded machine
PQ = "killres-parts"


@wurk.job(name="killed.add", result_ttl=TTL)
def add(a: int, b: int) -> int:
    return a + b


@wurk.job(name="killed.part", queue=PQ, result_ttl=TTL)
def part(n: int) -> int:
    return n


@wurk.job(name="killed.plain", queue=PQ)
def plain(n: int) -> int:
    return n


@pytest.fixture
def no_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    """Waits read the record again every RECHECK seconds: pushed past their timeout, so only
    the announcement can end them."""
    monkeypatch.setattr(waiting, "RECHECK", 3600.0)


@pytest.fixture
def pconfig(redis_server: Any) -> Iterator[wurk.Config]:
    yield wurk.configure(redis_url=redis_server.url, partitions={PQ: 2})


def retrying(config: wurk.Config, n: int = 1, **extra: Any) -> wurk.ResultHandle[Any]:
    """A job in the retry set after one failure, as a worker leaves it."""
    jid = P.new_jid()
    payload = {P.JID: jid, P.CLASS: "killed.add", P.QUEUE: "default", P.ARGS: [n, 2],
               P.RESULT_TTL: TTL, P.RETRY_COUNT: 0, P.ERROR_CLASS: "RuntimeError",
               P.ERROR_MESSAGE: f"boom {n}", P.FAILED_AT: time.time() - 5, **extra}
    wurk.api.RetrySet(config).schedule(time.time() + 3600 + n, payload)
    return wurk.ResultHandle(jid, config)


def scheduled(config: wurk.Config) -> wurk.ResultHandle[Any]:
    handle = add.perform_in(3600, 1, 2)
    assert handle is not None
    return handle


def _entry(job_set: wurk.api.JobSet, jid: str) -> wurk.api.SortedEntry:
    found = job_set.find_job(jid)
    assert found is not None
    return found


KILLS: dict[str, tuple[Callable[[wurk.Config], wurk.ResultHandle[Any]],
                       Callable[[wurk.Config, str], Any], bool]] = {
    # how the job is placed, how it is killed, whether its entry carries a last error
    "retry entry kill()": (retrying, lambda c, jid: _entry(wurk.api.RetrySet(c), jid).kill(),
                           True),
    "retry entry kill(notify_failure=False)": (
        retrying, lambda c, jid: _entry(wurk.api.RetrySet(c), jid).kill(notify_failure=False),
        True),
    "retry kill_all()": (retrying, lambda c, jid: wurk.api.RetrySet(c).kill_all(), True),
    "scheduled entry kill()": (
        scheduled, lambda c, jid: _entry(wurk.api.ScheduledSet(c), jid).kill(), False),
    "dead set kill(payload, notify_failure=False)": (
        scheduled, lambda c, jid: wurk.api.DeadSet(c).kill(
            _entry(wurk.api.ScheduledSet(c), jid).raw, notify_failure=False), False),
}


@pytest.mark.parametrize("how", list(KILLS))
def test_a_sync_wait_on_a_killed_job_ends_at_once_with_its_failure(
        config: wurk.Config, r: redis.Redis, no_recheck: None, how: str) -> None:
    place, kill, carries_error = KILLS[how]
    handle = place(config)
    assert not any(isinstance(h, ResultDeathHandler) for h in config.death_handlers)
    thread, found = sync_wait(handle)
    wait_until(subscribed(r), what="the sync wait subscribed")
    assert kill(config, handle) is not False
    thread.join(LONG + 5)
    error, took = found
    assert isinstance(error, wurk.JobFailed), error
    assert took < PROMPT
    assert error.jid == handle and not error.retries_remain
    assert error.error_class == "wurk.JobKilled"
    assert "killed" in str(error) and "dashboard" in error.message
    assert ("its last error: RuntimeError: boom 1" in error.message) == carries_error
    assert r.ttl("wurk:result:" + handle) > TTL - 60
    assert wurk.api.DeadSet(config).find_job(handle) is not None


def test_async_waits_on_jobs_killed_by_kill_all_end_at_once(
        config: wurk.Config, r: redis.Redis, no_recheck: None) -> None:
    handles = [retrying(config, n) for n in range(3)]
    r.zadd("retry", {'{"class":"killed.plain","args":[],"jid":"x"}': 1.0})  # keeps none

    async def main() -> tuple[list[Any], float]:
        tasks = [asyncio.ensure_future(h.aresult(timeout=LONG)) for h in handles]
        listener = waiting.listener(config)
        while listener.session is None or len(listener.session.subscribed) < len(handles) \
                or listener.unlooked:
            await asyncio.sleep(0.01)
        started = time.monotonic()
        assert await asyncio.to_thread(wurk.api.RetrySet(config).kill_all) == 4
        found = await asyncio.gather(*tasks, return_exceptions=True)
        return list(found), time.monotonic() - started

    found, took = asyncio.run(main())
    assert all(isinstance(e, wurk.JobFailed) for e in found), found
    assert [e.message.rsplit(": ", 1)[-1] for e in found] == ["boom 0", "boom 1", "boom 2"]
    assert took < PROMPT
    assert len(r.keys("wurk:result:*")) == 3  # the job keeping no result stored none
    outcome = handles[0].outcome()
    assert outcome is not None and outcome.status == "failed"
    assert outcome.started_at is None and not outcome.retries_remain


def test_death_handlers_run_only_with_notify_failure_and_the_result_is_stored_once(
        config: wurk.Config, r: redis.Redis) -> None:
    """A worker's configuration holds ``ResultDeathHandler``: the kill stores the result
    itself, so that handler is not run again for it; the application's handlers run only
    when ``notify_failure`` says so."""
    calls: list[str] = []
    stored_by_handler: list[str] = []

    class Spy(ResultDeathHandler):
        def __call__(self, job: dict[str, Any], exc: BaseException) -> None:
            stored_by_handler.append(job["jid"])
            super().__call__(job, exc)

    config.death_handlers.extend([Spy(config), lambda job, exc: calls.append(job["jid"])])
    quiet = [retrying(config, n) for n in range(2)]
    assert wurk.api.RetrySet(config).kill_all() == 2
    assert calls == []
    told = retrying(config, 5)
    assert _entry(wurk.api.RetrySet(config), told).kill() is True
    assert calls == [told]
    assert stored_by_handler == []
    for handle in [*quiet, told]:
        with pytest.raises(wurk.JobFailed, match="last error: RuntimeError"):
            handle.result(timeout=0)
    own = retrying(config, 6)
    boom = ValueError("the release was rolled back")
    assert wurk.api.RetrySet(config).kill_all(notify_failure=True, exc=boom) == 1
    assert calls == [told, own]
    with pytest.raises(wurk.JobFailed, match="ValueError: the release was rolled back"):
        own.result(timeout=0)


HOSTILE = [
    "{broken",
    '["result_ttl", 600]',
    '{"result_ttl": 600}',  # no jid
    '{"result_ttl": "600", "jid": "s%s"}',  # a ttl wurk never writes
    '{"result_ttl": 600, "jid": 7}',
    '{"result_ttl": 600, "jid": "b%s", "class": "killed.add", "backtrace": "abc"}',
    '{"result_ttl": 600, "jid": "e%s", "error_class": ["x"], "error_message": 3}',
]


def test_malformed_entries_never_stop_a_kill(config: wurk.Config, r: redis.Redis) -> None:
    good = retrying(config)
    r.zadd("retry", {text.replace("%s", "1" * 23): float(n)
                     for n, text in enumerate(HOSTILE)})
    assert wurk.api.RetrySet(config).kill_all(notify_failure=True) == len(HOSTILE) + 1
    assert r.zcard("dead") == len(HOSTILE) + 1
    with pytest.raises(wurk.JobFailed, match="boom 1"):
        good.result(timeout=0)
    with pytest.raises(wurk.JobFailed, match=r"JobKilled: Job killed by API \(wurk.api or "
                                             r"the dashboard\)$"):
        wurk.ResultHandle("e" + "1" * 23, config).result(timeout=0)  # no usable last error
    assert not r.exists("wurk:result:" + "b" + "1" * 23)  # its outcome could not be built
    r.zadd("retry", {"{broken": 1.0})
    (entry,) = wurk.api.RetrySet(config).iterate()
    assert entry.kill() is True


# -- a partitioned queue's clear ---------------------------------------------------------------
def test_a_sync_wait_on_a_job_cleared_from_a_partition_ends_at_once(
        pconfig: wurk.Config, r: redis.Redis, no_recheck: None) -> None:
    handle = part.set(partition="a").perform_async(1)
    assert handle is not None
    plain.set(partition="a").perform_async(2)  # keeps no result: nothing stored
    assert r.llen(pconfig.keys.partition(PQ, "a")) == 2
    thread, found = sync_wait(handle)
    wait_until(subscribed(r), what="the sync wait subscribed")
    assert wurk.api.Queue(PQ, pconfig).clear() == 2
    thread.join(LONG + 5)
    error, took = found
    assert isinstance(error, wurk.JobDeleted), error
    assert error.deleted_from == f"queue {PQ}" and took < PROMPT
    assert len(r.keys("wurk:result:*")) == 1


def test_async_waits_on_jobs_cleared_from_partitions_end_at_once(
        pconfig: wurk.Config, r: redis.Redis, no_recheck: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from wurk.api import queues as api_queues

    monkeypatch.setattr(api_queues, "PARTITION_CLEAR_PAGE", 2)  # pages: each is recorded
    handles = [part.set(partition=name).perform_async(n)
               for n, name in enumerate(["a", "a", "a", "b", "b"])]
    assert all(h is not None for h in handles)
    keys = pconfig.keys
    r.lpush(keys.partition(PQ, "a"), "{broken", '{"result_ttl": 600}', '["result_ttl"]')
    unrouted = part.perform_async(9)  # on the plain list, not routed yet

    async def main() -> tuple[list[Any], float]:
        waits = [*handles, unrouted]
        tasks = [asyncio.ensure_future(h.aresult(timeout=LONG))  # type: ignore[union-attr]
                 for h in waits]
        listener = waiting.listener(pconfig)
        while listener.session is None or len(listener.session.subscribed) < len(waits) \
                or listener.unlooked:
            await asyncio.sleep(0.01)
        started = time.monotonic()
        assert await asyncio.to_thread(wurk.api.Queue(PQ, pconfig).clear) == 9
        found = await asyncio.gather(*tasks, return_exceptions=True)
        return list(found), time.monotonic() - started

    found, took = asyncio.run(main())
    assert all(isinstance(e, wurk.JobDeleted) for e in found), found
    assert {e.deleted_from for e in found} == {f"queue {PQ}"}
    assert took < PROMPT
