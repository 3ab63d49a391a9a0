"""Job results, stored by a real worker in this process: the value of a sync or an async job,
a failure with and without a retry due, a retried job's last run, a cancelled job, a return
value JSON cannot carry; the handle that is still the jid; records that cannot be read; what
stores nothing (no ``result_ttl``, an expired job, a rate limiter's reschedule); a batch's
results; whether a retry is due, as the retry itself decides."""

from __future__ import annotations

import asyncio
import copy
import json
import pickle
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis

import wurk
import wurk.api
from tests.helpers.wait import wait_until
from wurk import payload as P
from wurk.errors import Poisoned
from wurk.morgue import Morgue
from wurk.results import store
from wurk.results.recorder import ResultDeathHandler
from wurk.retry import JobRetry, will_retry

TTL = 600
FLAKY: dict[str, int] = {}


@wurk.job(name="res.add", result_ttl=TTL)
def add(a: int, b: int) -> int:
    return a + b


@wurk.job(name="res.aadd", result_ttl=TTL)
async def aadd(a: int, b: int) -> int:
    await asyncio.sleep(0.01)
    return a + b


@wurk.job(name="res.plain")
def plain(a: int) -> int:
    return a


@wurk.job(name="res.fails", result_ttl=TTL, retry=3, retry_in=lambda count, exc: 3600)
def fails(message: str) -> None:
    raise ValueError(message)


@wurk.job(name="res.dies", result_ttl=TTL, retry=0, backtrace=True)
def dies(message: str) -> None:
    raise KeyError(message)


@wurk.job(name="res.adies", result_ttl=TTL, retry=False)
async def adies(message: str) -> None:
    raise ValueError(message)


@wurk.job(name="res.flaky", result_ttl=TTL, retry=3, retry_in=lambda count, exc: 3600)
def flaky(key: str) -> str:
    FLAKY[key] = FLAKY.get(key, 0) + 1
    if FLAKY[key] < 3:
        raise RuntimeError(f"attempt {FLAKY[key]}")
    return f"ran {FLAKY[key]} times"


@wurk.job(name="res.tuple", result_ttl=TTL, retry=0)
def returns_a_tuple() -> Any:
    return (1, 2)


@wurk.job(name="res.nested", result_ttl=TTL, retry=0)
async def returns_a_set() -> Any:
    return {"ok": [1, {"when": {3}}]}


@wurk.job(name="res.cancelled", result_ttl=TTL)
def cancelled_here() -> None:
    raise wurk.JobCancelled("stopped by a cancel")


@wurk.job(name="res.interrupted", result_ttl=TTL)
def interrupted_here() -> None:
    raise wurk.Interrupted("stopping between two items")


STARTED: set[str] = set()


@wurk.job(name="res.loops", result_ttl=TTL)
def loops() -> None:
    STARTED.add(wurk.current_jid() or "")
    while True:  # stopped only by the cancel's exception, raised in this frame
        time.sleep(0.01)


@wurk.job(name="res.aloops", result_ttl=TTL)
async def aloops() -> None:
    STARTED.add(wurk.current_jid() or "")
    while True:  # stopped only by the cancel of its task
        await asyncio.sleep(0.01)


class Walk(wurk.IterableJob, name="res.Walk", result_ttl=TTL):
    flush_interval = 0.05

    def build_enumerator(self, *, cursor: int | None) -> Any:
        return wurk.iteration.ids(0, 100_000, cursor=cursor)

    def each_iteration(self, item: int) -> None:
        STARTED.add(self.jid)
        time.sleep(0.01)


class Report(wurk.Job, name="res.Report", result_ttl=TTL):
    def perform(self, title: str) -> dict[str, Any]:
        return {"title": title, "jid": self.jid}


@pytest.fixture
def worker(redis_server: Any) -> Iterator[wurk.Config]:
    FLAKY.clear()
    STARTED.clear()
    config = wurk.configure(redis_url=redis_server.url, concurrency=3, fetch_timeout=0.2,
                            timeout=2, poll_interval_average=0.1, heartbeat_interval=0.2,
                            scheduler_initial_wait=0, control_interval=0.1)
    running = wurk.InProcessWorker(config).start()
    yield config
    running.stop()


# -- values --------------------------------------------------------------------------------------
def test_a_sync_and_an_async_job_give_their_values(worker: wurk.Config) -> None:
    assert add.perform_async(1, 2).result(timeout=10) == 3  # type: ignore[union-attr]
    assert aadd.perform_async(20, 22).result(timeout=10) == 42  # type: ignore[union-attr]
    handle = Report.perform_async("q3")
    assert handle is not None
    assert handle.result(timeout=10) == {"title": "q3", "jid": handle}


def test_async_code_awaits_the_handle(worker: wurk.Config) -> None:
    async def main() -> list[Any]:
        first = await aadd.aperform_async(1, 1)
        second = add.perform_async(2, 2)
        assert first is not None and second is not None
        return [await first, await second.aresult(timeout=10),
                await asyncio.gather(*add.perform_bulk([[i, i] for i in range(20)]))]

    assert asyncio.run(main()) == [2, 4, [2 * i for i in range(20)]]


def test_the_record_is_wurks_own_key_with_the_jobs_ttl(worker: wurk.Config,
                                                        r: redis.Redis) -> None:
    handle = add.set(result_ttl=timedelta(minutes=2)).perform_async(2, 3)
    assert handle is not None and handle.result(timeout=10) == 5
    key = f"wurk:result:{handle}"
    assert 100 < r.ttl(key) <= 120
    record = json.loads(r.get(key))
    assert record["status"] == "succeeded" and record["value"] == 5
    assert record["class"] == "res.add"
    assert record["started_at"] <= record["finished_at"] <= time.time()
    outcome = handle.outcome()
    assert outcome is not None and outcome.value == 5 and outcome.succeeded


def test_a_job_without_result_ttl_stores_nothing(worker: wurk.Config, r: redis.Redis) -> None:
    handle = plain.perform_async(7)
    assert handle is not None
    wait_until(lambda: r.llen("queue:default") == 0 and not r.keys("*:work*"),
               what="the job to run")
    wait_until(lambda: int(r.get("stat:processed") or 0) >= 1, what="its count")
    assert r.keys("wurk:result*") == []
    assert handle.outcome() is None
    with pytest.raises(TimeoutError, match=f"job {handle} stored no result within 0.3 s"):
        handle.result(timeout=0.3)
    # and .set(result_ttl=False) turns a job's result off for one push
    other = add.set(result_ttl=False).perform_async(1, 1)
    assert other is not None
    wait_until(lambda: int(r.get("stat:processed") or 0) >= 2, what="the second job's count")
    assert other.outcome() is None
    assert r.keys("wurk:result*") == []


# -- failures ------------------------------------------------------------------------------------
def test_a_failure_with_a_retry_due_says_so(worker: wurk.Config, r: redis.Redis) -> None:
    handle = fails.perform_async("card declined")
    assert handle is not None
    with pytest.raises(wurk.JobFailed) as failed:
        handle.result(timeout=10)
    error = failed.value
    assert (error.jid, error.error_class, error.message, error.retries_remain) == (
        handle, "ValueError", "card declined", True)
    assert error.backtrace is None  # the job keeps no backtrace
    assert "a retry is due" in str(error)
    assert r.zcard("retry") == 1  # and the retry is booked, as the record says


def test_a_job_out_of_retries_stores_its_final_failure(worker: wurk.Config,
                                                       r: redis.Redis) -> None:
    handle = dies.perform_async("gone")
    assert handle is not None
    with pytest.raises(wurk.JobFailed) as failed:
        handle.result(timeout=10)
    assert (failed.value.error_class, failed.value.retries_remain) == ("KeyError", False)
    assert failed.value.message == "'gone'"
    assert failed.value.backtrace and "in 'dies'" in failed.value.backtrace[0]
    wait_until(lambda: r.zcard("dead") == 1, what="the dead entry")
    other = adies.perform_async("no retry")  # retry: false, async
    assert other is not None
    with pytest.raises(wurk.JobFailed, match="ValueError: no retry") as failed:
        other.result(timeout=10)
    assert not failed.value.retries_remain


def test_a_retried_job_keeps_its_last_runs_result(worker: wurk.Config, r: redis.Redis) -> None:
    handle = flaky.perform_async("k")
    assert handle is not None
    for attempt in (1, 2):  # each failed run stores its failure, a retry due
        # a wait returns the outcome stored now: the first run's until the second run's lands
        wait_until(lambda n=attempt: f"attempt {n}" in str(
            getattr(handle.outcome(), "error_message", "")), what=f"run {attempt}'s failure")
        with pytest.raises(wurk.JobFailed, match=f"attempt {attempt}") as failed:
            handle.result(timeout=10)
        assert failed.value.retries_remain
        wait_until(lambda: r.zcard("retry") == 1, what="the retry")
        assert wurk.api.RetrySet(worker).retry_all() == 1  # due now, not after the jitter
        wait_until(lambda n=attempt: FLAKY["k"] > n, what="the next run")
    # a wait returns the outcome stored now: the second failure until the third run's lands
    wait_until(lambda: handle.outcome().succeeded, what="the third run's result")  # type: ignore[union-attr]
    assert handle.result(timeout=10) == "ran 3 times"
    assert FLAKY["k"] == 3


@pytest.mark.parametrize("job", [returns_a_tuple, returns_a_set])
def test_a_value_json_cannot_carry_fails_the_job_naming_its_type(
        worker: wurk.Config, r: redis.Redis, job: Any) -> None:
    handle = job.perform_async()
    with pytest.raises(wurk.JobFailed) as failed:
        handle.result(timeout=10)
    assert failed.value.error_class == "wurk.UnstorableResult"
    kind = "tuple ((1, 2))" if job is returns_a_tuple else "set ({3})"
    assert kind in failed.value.message, failed.value.message
    assert "not JSON-native" in failed.value.message
    wait_until(lambda: r.zcard("dead") == 1, what="the dead entry")
    [entry] = r.zrange("dead", 0, -1)
    assert json.loads(entry)["error_class"] == "wurk.UnstorableResult"


def test_a_cancelled_job_stores_cancelled_and_the_cancel_goes_on(worker: wurk.Config) -> None:
    handle = cancelled_here.perform_async()
    assert handle is not None
    with pytest.raises(wurk.JobCancelled, match=f"job {handle} was cancelled"):
        handle.result(timeout=10)
    outcome = handle.outcome()
    assert outcome is not None and outcome.status == "cancelled"


def test_a_job_removed_unrun_is_recorded_cancelled(config: wurk.Config, r: redis.Redis) -> None:
    payload = {"class": "res.add", "jid": "c" * 24, "args": [1, 2], "result_ttl": 60}
    store.record_cancelled(config, payload)
    with pytest.raises(wurk.JobCancelled):
        wurk.ResultHandle("c" * 24, config).result(timeout=1)
    assert 0 < r.ttl("wurk:result:" + "c" * 24) <= 60
    found = store.find(config, "c" * 24)
    assert isinstance(found, store.Outcome) and found.started_at is None
    store.record_cancelled(config, {"class": "res.plain", "jid": "d" * 24, "args": [1]})
    assert store.find(config, "d" * 24) is None  # keeps no result: nothing written


def test_a_job_cancelled_while_it_waits_says_cancelled(config: wurk.Config,
                                                      r: redis.Redis) -> None:
    """``wurk.cancel`` removing a job from its queue, the schedule or the retry set: a job
    that keeps its result has it say so; one that keeps none gets no record."""
    queued = add.perform_async(1, 2)
    scheduled = add.perform_in(60, 3, 4)
    wurk.api.RetrySet(config).schedule(time.time() + 60, {
        "class": "res.add", "args": [5, 6], "queue": "default", "jid": "a" * 24,
        "result_ttl": 60, "retry_count": 0, "error_class": "E", "error_message": "m",
        "failed_at": 1})
    retrying = wurk.ResultHandle("a" * 24, config)
    unkept = plain.perform_async(1)
    assert queued is not None and scheduled is not None and unkept is not None
    for handle, where in ((queued, "queue:default"), (scheduled, "schedule"),
                          (retrying, "retry"), (unkept, "queue:default")):
        assert wurk.cancel(handle).removed_from == [where]
    for handle in (queued, scheduled, retrying):
        with pytest.raises(wurk.JobCancelled, match=f"job {handle} was cancelled"):
            handle.result(timeout=5)
        outcome = handle.outcome()
        assert outcome is not None and outcome.status == "cancelled"
        assert outcome.started_at is None  # it never ran
    assert unkept.outcome() is None and len(r.keys("wurk:result:*")) == 3


@pytest.mark.parametrize("job", [loops, aloops, Walk], ids=["sync", "async", "iterable"])
def test_a_running_job_stopped_by_cancel_says_cancelled(worker: wurk.Config,
                                                        r: redis.Redis, job: Any) -> None:
    handle = job.perform_async()
    assert handle is not None
    wait_until(lambda: handle in STARTED, what="the job to start")
    wait_until(lambda: any(w.job.jid == handle for w in wurk.api.WorkSet(worker)),
               what="the Busy page")
    assert wurk.cancel(handle).running_on
    with pytest.raises(wurk.JobCancelled, match=f"job {handle} was cancelled"):
        handle.result(timeout=10)
    outcome = handle.outcome()
    assert outcome is not None and outcome.status == "cancelled"
    assert outcome.started_at is not None  # it ran, and was stopped
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0


def test_what_is_no_outcome_stores_nothing(worker: wurk.Config, r: redis.Redis) -> None:
    expired = add.set(expires_in=0.001).perform_in(0.2, 1, 1)
    interrupted = interrupted_here.perform_async()
    assert expired is not None and interrupted is not None
    wait_until(lambda: int(r.get("stat:expired") or 0) == 1, what="the expired job's drop")
    wait_until(lambda: int(r.get("stat:processed") or 0) >= 2, what="the interrupted run")
    assert expired.outcome() is None and interrupted.outcome() is None


def test_a_dead_job_that_never_returned_stores_its_death(config: wurk.Config) -> None:
    """A poison pill (the reaper's death) or an API kill: the death handler says so."""
    payload = {"class": "res.add", "jid": "e" * 24, "args": [1, 2], "result_ttl": 60}
    ResultDeathHandler(config)(payload, Poisoned("killed its worker 3 times"))
    with pytest.raises(wurk.JobFailed, match=r"wurk\.Poisoned: killed its worker") as failed:
        wurk.ResultHandle("e" * 24, config).result(timeout=1)
    assert not failed.value.retries_remain


# -- whether a retry is due, as the retry decides -----------------------------------------------
RETRY_CASES = [
    ({}, ValueError("x"), True),
    ({"retry": 0}, ValueError("x"), False),
    ({"retry": False}, ValueError("x"), False),
    ({"retry": 2, "retry_count": 0}, ValueError("x"), True),
    ({"retry": 2, "retry_count": 1}, ValueError("x"), False),
    ({"retry": True, "retry_count": 23}, ValueError("x"), True),
    ({"retry": True, "retry_count": 24}, ValueError("x"), False),
    # failed_at as seconds before the test runs (filled in there: collection may be long before)
    ({"retry_for": 60, "failed_at": -30, "retry_count": 0}, ValueError("x"), True),
    ({"retry_for": 60, "failed_at": -90, "retry_count": 0}, ValueError("x"), False),
    ({}, wurk.DecryptionError("no key"), False),
    ({"args": "not a list"}, ValueError("x"), False),
]


@pytest.mark.parametrize(("fields", "exc", "expected"), RETRY_CASES)
def test_will_retry_says_what_the_retry_then_does(config: wurk.Config, r: redis.Redis,
                                                  fields: dict[str, Any], exc: Exception,
                                                  expected: bool) -> None:
    job = {"class": "res.nobody", "args": [], "jid": "f" * 24, "queue": "default",
           "retry": True, **fields}
    if "failed_at" in fields:
        job["failed_at"] = time.time() + fields["failed_at"]
    predicted = will_retry(config, dict(job), exc, None)
    JobRetry(config, Morgue(config)).handle(job, exc, definition=None, instance=None)
    assert predicted is expected
    assert r.zcard("retry") == (1 if expected else 0)


# -- the handle ---------------------------------------------------------------------------------
def test_the_handle_is_still_the_jid(config: wurk.Config) -> None:
    handle = add.perform_async(1, 2)
    assert handle is not None
    jid = handle.jid
    assert type(jid) is str and len(jid) == 24
    assert handle == jid and hash(handle) == hash(jid) and {handle: 1}[jid] == 1
    assert json.dumps({"jid": handle}) == json.dumps({"jid": jid})
    assert f"{handle}" == jid and str(handle) == jid and repr(handle) == repr(jid)
    assert pickle.loads(pickle.dumps(handle)) == jid
    assert copy.copy(handle) is handle
    # a jid a push returned is a job argument as it was before
    passed = plain.perform_async(1)
    assert passed is not None
    second = add.perform_async(1, 2)
    assert second is not None
    pushed = wurk.push({"class": "res.record", "args": [handle, [second]]})
    assert pushed is not None


def test_a_handle_made_from_a_jid_waits_too(worker: wurk.Config) -> None:
    handle = add.perform_async(3, 4)
    assert handle is not None
    again: wurk.ResultHandle[int] = wurk.ResultHandle(str(handle))
    assert again.result(timeout=10) == 7
    with pytest.raises(ValueError, match="a result handle needs a jid"):
        wurk.ResultHandle("")


def test_a_result_not_stored_in_time_is_a_timeout(config: wurk.Config) -> None:
    handle = wurk.ResultHandle("a" * 24, config)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"stored no result within 0\.2 s"):
        handle.result(timeout=0.2)
    assert time.monotonic() - started >= 0.2

    async def main() -> None:
        with pytest.raises(TimeoutError, match=r"stored no result within 0\.2 s"):
            await handle.aresult(timeout=0.2)

    asyncio.run(main())


def test_a_result_stored_before_a_wait_of_no_time_is_its_outcome(config: wurk.Config,
                                                                  r: redis.Redis) -> None:
    """A wait whose time ran out before its subscription was confirmed (a timeout of 0, or
    shorter than a round trip) raised "stored no result within 0 s" for a result stored
    before it was asked for."""
    r.set("wurk:result:" + "d" * 24, json.dumps({"status": "succeeded", "value": 3}))
    stored_already = wurk.ResultHandle("d" * 24, config)
    missing = wurk.ResultHandle("e" * 24, config)
    for timeout in (0, 0.00001):
        assert stored_already.result(timeout=timeout) == 3
        with pytest.raises(TimeoutError, match="stored no result"):
            missing.result(timeout=timeout)

    async def main() -> None:
        for timeout in (0, 0.00001):
            assert await stored_already.aresult(timeout=timeout) == 3
            with pytest.raises(TimeoutError, match="stored no result"):
                await missing.aresult(timeout=timeout)

    asyncio.run(main())


def test_a_timeout_that_is_no_number_of_seconds_is_refused_at_once(config: wurk.Config) -> None:
    """NaN never ran out in async code (the wait hung for good) and timed out at once in
    sync code; a text raised a bare TypeError from the deadline's arithmetic."""
    handle = wurk.ResultHandle("f" * 24, config)

    async def awaited(timeout: Any) -> Any:
        return await asyncio.wait_for(handle.aresult(timeout=timeout), 2)

    for bad, error in ((float("nan"), ValueError), ("5", TypeError), (True, TypeError)):
        for look in (lambda b=bad: handle.result(timeout=b),
                     lambda b=bad: asyncio.run(awaited(b))):
            with pytest.raises(error, match="timeout is a number of seconds or None"):
                look()
    # A negative one is no time at all; infinity is no limit.
    with pytest.raises(TimeoutError):
        handle.result(timeout=-1)
    with pytest.raises(TimeoutError, match="stored no result"):
        asyncio.run(awaited(-1))

    async def forever() -> None:
        waited = asyncio.ensure_future(handle.aresult(timeout=float("inf")))
        await asyncio.sleep(0.2)
        assert not waited.done()
        waited.cancel()

    asyncio.run(forever())


def test_a_result_is_forgotten_by_its_jid_only(config: wurk.Config, r: redis.Redis) -> None:
    """docs/results.md: ``ResultQuery.delete(jid)`` (nothing asserted it). A jid that is no
    text (``7``) deleted ``wurk:result:7`` and said nothing."""
    query = wurk.api.ResultQuery(config)
    handle = wurk.ResultHandle("g" * 24, config)
    r.set("wurk:result:" + "g" * 24, json.dumps({"status": "succeeded", "value": 1}))
    r.set("wurk:result:7", "kept")
    assert handle.outcome() is not None
    assert query.delete(handle) is True
    assert handle.outcome() is None and query.find(handle) is None
    assert query.delete(handle) is False
    for bad in ("", None, 7):
        with pytest.raises(ValueError, match="a jid is a non-empty string"):
            query.delete(bad)  # type: ignore[arg-type]
    assert r.get("wurk:result:7") == "kept"


# -- records that cannot be read ----------------------------------------------------------------
UNREADABLE = [
    (b"not json", "a stored result (a JSON object)"),
    (b"[1, 2]", "a stored result (a JSON object)"),
    (b'{"status": "exploded"}', "status 'exploded' is none of succeeded, failed, cancelled"),
    (b'{"status": "failed", "error_class": 7}', "error_class is not text"),
    (b'{"status": "failed", "error_class": "E", "error_message": "m"}',
     "retries_remain is not true or false"),
    (b'{"status": "succeeded"}', "a success without a value"),
    (b'{"status": "succeeded", "value": 1, "finished_at": "soon"}', "finished_at is not a time"),
    (b"[" * 5000 + b"]" * 5000, "a stored result (a JSON object)"),
    # Whole numbers past a float's range: math.isfinite raised OverflowError out of every
    # read (the handle's, the API's, the dashboard's).
    (b'{"status": "succeeded", "value": 1, "started_at": 1' + b"0" * 400 + b"}",
     "started_at is not a time"),
    (b'{"status": "cancelled", "finished_at": -1' + b"0" * 400 + b"}",
     "finished_at is not a time"),
]


@pytest.mark.parametrize(("raw", "problem"), UNREADABLE)
def test_a_record_that_cannot_be_read_says_why(config: wurk.Config, r: redis.Redis,
                                               raw: bytes, problem: str) -> None:
    jid = "b" * 24
    handle = wurk.ResultHandle(jid, config)
    r.set(f"wurk:result:{jid}", raw)
    for look in (lambda: handle.result(timeout=2), handle.outcome,
                 lambda: asyncio.run(handle.aresult(timeout=2)),
                 lambda: asyncio.run(handle.aoutcome())):
        with pytest.raises(wurk.UnreadableResult, match="cannot be read") as unreadable:
            look()
        assert problem in str(unreadable.value)
    found = wurk.api.ResultQuery(config).find(jid)
    assert isinstance(found, wurk.api.Invalid) and problem in found.expected


def test_a_key_of_another_type_is_unreadable_not_a_crash(config: wurk.Config,
                                                         r: redis.Redis) -> None:
    jid = "b" * 24
    r.hset(f"wurk:result:{jid}", "status", "succeeded")
    handle = wurk.ResultHandle(jid, config)
    # Every way a handle reads it, its waits too (which waited for their timeout, or for
    # good without one, reading the key as "no result yet").
    for look in (handle.outcome, lambda: handle.result(timeout=2),
                 lambda: asyncio.run(handle.aresult(timeout=2)),
                 lambda: asyncio.run(handle.aoutcome())):
        with pytest.raises(wurk.UnreadableResult, match="a key of the wrong type"):
            look()

    async def beside_others() -> None:  # one read of many records: the others still found
        r.set("wurk:result:" + "c" * 24, json.dumps({
            "status": "succeeded", "value": 5, "finished_at": time.time()}))
        other = wurk.ResultHandle("c" * 24, config)
        outcomes = await asyncio.gather(handle.aresult(timeout=2), other.aresult(timeout=2),
                                        return_exceptions=True)
        assert isinstance(outcomes[0], wurk.UnreadableResult) and outcomes[1] == 5

    asyncio.run(beside_others())
    found = wurk.api.ResultQuery(config).find_many([jid, "x" * 24])
    assert list(found) == [jid] and isinstance(found[jid], wurk.api.Invalid)


def test_a_result_ttl_that_is_not_seconds_is_refused(config: wurk.Config) -> None:
    for bad in (0, -5, "an hour", True, float("nan"), 10**12):
        with pytest.raises(wurk.ConfigError, match=r"result_ttl=.* is invalid; expected the"):
            add.set(result_ttl=bad)
        with pytest.raises(wurk.InvalidPayload, match="result_ttl"):
            wurk.push({"class": "res.add", "args": [1, 2], "result_ttl": bad})
    with pytest.raises(wurk.ConfigError, match=r"job 'res.bad': result_ttl='1h' is invalid"):
        wurk.job(name="res.bad", result_ttl="1h")(plain.func)
    with pytest.raises(wurk.ConfigError, match="result_ttl"):
        type("Bad", (wurk.Job,), {}, name="res.BadClass", result_ttl=-1)
    assert add.set(result_ttl=1.5).options["result_ttl"] == 2  # whole seconds, rounded up


def test_a_payload_from_elsewhere_with_a_bad_result_ttl_runs_and_keeps_none(
        worker: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    r.lpush("queue:default", json.dumps({"class": "res.add", "args": [1, 2], "jid": "9" * 24,
                                         "queue": "default", "result_ttl": "forever"}))
    wait_until(lambda: int(r.get("stat:processed") or 0) >= 1, what="the job to run")
    assert r.keys("wurk:result*") == []
    assert any("result_ttl='forever' is not a whole number" in m for m in caplog.messages)


# -- batches ------------------------------------------------------------------------------------
def test_a_batchs_results_are_read_from_the_batch(worker: wurk.Config, r: redis.Redis) -> None:
    batch = wurk.Batch(description="sums")
    with batch.jobs():
        handles = [add.perform_async(i, i) for i in range(5)]
        plain.perform_async(1)  # keeps no result
        fails.perform_async("one bad")
    batch.status.join(timeout=20)  # complete: every job ran once (the failure pending)
    wait_until(lambda: len(batch.status.results()) == 6, what="six results")
    found = batch.status.results()
    assert {jid: o.value for jid, o in found.items()
            if isinstance(o, store.Outcome) and o.succeeded} == {
        h: 2 * i for i, h in enumerate(handles)}
    [failure] = [o for o in found.values()
                 if isinstance(o, store.Outcome) and o.status == "failed"]
    assert failure.error_message == "one bad" and failure.retries_remain
    assert wurk.api.ResultQuery(worker).batch(batch.bid) == found
    assert 0 < r.ttl(f"wurk:batch-results:{batch.bid}") <= TTL


def test_a_batch_callback_reads_every_result(worker: wurk.Config, r: redis.Redis) -> None:
    """The result is stored inside the batch link: stored before the count that completes
    the batch pushes its callback."""
    batch = wurk.Batch().on("success", sum_results, {"key": "sums"})
    with batch.jobs():
        for i in range(10):
            add.perform_async(i, 1)
    wait_until(lambda: r.get("sums") is not None, timeout=20, what="the callback")
    assert int(r.get("sums")) == sum(i + 1 for i in range(10))


@wurk.job(name="res.sum_results")
def sum_results(status: wurk.BatchStatus, options: dict[str, Any]) -> None:
    values = [o.value for o in status.results().values() if isinstance(o, store.Outcome)]
    with wurk.redis() as conn:
        conn.call("SET", options["key"], sum(values) if len(values) == 10 else -len(values))


@wurk.job(name="res.record")
def record_args(*args: Any) -> None:
    pass


_ = P  # the payload module: its Jid is what lets a handle travel as an argument


# -- a record Redis cannot take ------------------------------------------------------------------
OUTAGES: list[Any] = []
in_outage_runs: list[str] = []


@wurk.job(name="res.in_outage", result_ttl=TTL)
def in_outage(a: int) -> int:
    in_outage_runs.append(wurk.current_jid() or "")
    if len(in_outage_runs) == 1:  # the first run's record cannot be written: Redis is gone
        proxy = OUTAGES[0]
        proxy.drop()
        proxy.cut()
        threading.Timer(0.5, proxy.restore).start()
    return a * 10


def test_a_record_redis_cannot_take_fails_the_run_and_the_job_runs_again(
        redis_server: Any, r: redis.Redis) -> None:
    """The record is written before the job is acknowledged: a run whose record was lost is
    not acknowledged, and runs again until its outcome is stored."""
    from tests.helpers.faults import config_for
    from tests.helpers.proxy import FaultProxy

    in_outage_runs.clear()
    with FaultProxy(redis_server.port) as proxy:
        OUTAGES[:] = [proxy]
        config = config_for(proxy.url, concurrency=1)
        running = wurk.InProcessWorker(config).start()
        try:
            # pushed and awaited past the proxy: the outage is the worker's alone
            handle = in_outage.set(config=wurk.configure(redis_url=redis_server.url)
                                   ).perform_async(4)
            wait_until(lambda: r.get(f"wurk:result:{handle}") is not None, timeout=30,
                       what="the second run's record")
            assert handle.result(timeout=5) == 40
        finally:
            running.stop()
            config.close()
    assert in_outage_runs == [handle, handle]  # ran again: the first run was never acknowledged
    assert r.llen("queue:default") == 0
    assert r.keys("queue:*") == []  # no private list holds it any more


def test_a_batchs_results_come_in_the_order_they_finished_at_most_limit(
        config: wurk.Config) -> None:
    import inspect

    from tests.helpers.runner import Drain

    batch = wurk.Batch()
    with batch.jobs():
        pushed = [add.perform_async(i, 0) for i in range(5)]
    raw = redis.Redis.from_url(config.redis_url)
    queued = raw.lrange("queue:default", 0, -1)
    raw.delete("queue:default")
    raw.rpush("queue:default", *reversed(queued))  # the newest at the tail: it runs first
    raw.close()
    drain = Drain(config)  # one at a time, in queue order
    try:
        assert drain() == 5
    finally:
        drain.close()
    finished = pushed[::-1]
    assert list(batch.status.results()) == finished
    assert list(batch.status.results(limit=2)) == finished[:2]
    assert list(wurk.api.ResultQuery(config).batch(batch.bid, limit=3)) == finished[:3]
    for read in (wurk.BatchStatus.results, wurk.api.ResultQuery.batch):
        assert inspect.signature(read).parameters["limit"].default == 10_000


def test_a_batchs_result_index_lives_as_long_as_its_longest_kept_result(
        config: wurk.Config, r: redis.Redis) -> None:
    """results.md: wurk:batch-results:<bid> "lives as long as its longest-kept result" —
    a shorter one stored after a longer one does not cut it."""
    from tests.helpers.runner import Drain

    batch = wurk.Batch()
    with batch.jobs():
        add.set(result_ttl=600).perform_async(1, 1)
        add.set(result_ttl=60).perform_async(2, 2)
    drain = Drain(config)
    try:
        assert drain() == 2
    finally:
        drain.close()
    assert len(batch.status.results()) == 2
    assert 540 < r.ttl(f"wurk:batch-results:{batch.bid}") <= 600


def test_a_dead_jobs_record_redis_refuses_is_reported_and_the_death_stays_booked(
        tmp_path: Any) -> None:
    """results.md: "A failed write of a dead job's record is reported to the error handlers
    (the death stays booked)" — the death handler raises nothing."""
    from tests.helpers.faults import config_for
    from tests.helpers.server import start_server

    server = start_server(tmp_path / "gone")
    config = config_for(server.url)
    reported: list[tuple[BaseException, dict[str, Any]]] = []
    config.error_handlers.append(lambda exc, context: reported.append((exc, context)))
    server.stop()
    try:
        payload = {"class": "res.add", "jid": "d" * 24, "args": [1, 2], "result_ttl": 60}
        ResultDeathHandler(config)(payload, Poisoned("killed its worker 3 times"))
    finally:
        config.close()
    [(exc, context)] = reported
    assert isinstance(exc, wurk.RedisUnavailable)
    assert context["context"] == "storing a dead job's result" and context["job"] == payload
