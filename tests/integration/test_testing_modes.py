"""wurk.testing: fake, inline and disable, as blocks and process-wide, against the real
server (to show what reaches Redis and what does not)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import wurk
import wurk.testing
from wurk.errors import InvalidArguments

ran: list[Any] = []


@wurk.job
def resize(image_id: Any, size: str = "s") -> str:
    ran.append((image_id, size, wurk.current_jid()))
    return f"resized {image_id}"


@wurk.job(queue="low")
def fan_out(count: int) -> None:
    ran.append(("fan_out", count))
    if count > 0:
        fan_out.perform_async(count - 1)


@wurk.job(unique_for=600)
def once(account: int) -> None:
    ran.append(("once", account))


@wurk.job
def explode() -> None:
    raise ValueError("boom")


@wurk.job(result_ttl=600)
def add(a: int, b: int) -> int:
    return a + b


@wurk.job(result_ttl=600, retry=False)
def add_badly(a: int) -> Any:
    if a < 0:
        raise ValueError(f"negative {a}")
    return (a, a)  # a tuple: JSON cannot store it unchanged


@wurk.job
async def async_job(value: int) -> int:
    await asyncio.sleep(0)
    ran.append(("async", value))
    return value * 2


class HardJob(wurk.Job, queue="critical"):
    def perform(self, a: int, b: str) -> None:
        ran.append(("hard", a, b, self.jid))


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    ran.clear()
    wurk.testing.clear_all()
    yield
    wurk.testing.set_mode("disable")
    wurk.testing.clear_all()


def in_redis(r: redis.Redis) -> int:
    return sum(int(r.llen(k)) for k in r.keys("queue:*")) + int(r.zcard("schedule"))


# -- fake -------------------------------------------------------------------------------------
def test_fake_keeps_pushes_in_memory_per_job_and_queue(config: wurk.Config,
                                                       r: redis.Redis) -> None:
    with wurk.testing.fake():
        jid = resize.perform_async(1)
        fan_out.perform_async(0)
        HardJob.perform_async(2, "x")
        assert len(resize.jobs) == 1
        assert resize.jobs[0]["jid"] == jid
        assert "enqueued_at" in resize.jobs[0]
        assert [j["class"] for j in HardJob.jobs] == [HardJob.definition.name]
        assert [j["class"] for j in wurk.testing.jobs("low")] == [fan_out.name]
        assert len(wurk.testing.jobs()) == 3
        assert set(wurk.testing.store.queues()) == {"default", "low", "critical"}
    assert in_redis(r) == 0
    assert ran == []


def test_fake_and_inline_take_no_unique_lock(config: wurk.Config, r: redis.Redis) -> None:
    """unique-jobs.md: "wurk.testing's fake and inline modes take no lock: nothing is written
    to Redis" — so a second push of the same unique job is not refused either."""
    with wurk.testing.fake():
        assert once.perform_async(1) is not None and once.perform_async(1) is not None
        assert len(once.jobs) == 2
    with wurk.testing.inline():
        assert once.perform_async(2) is not None and once.perform_async(2) is not None
    assert ran == [("once", 2), ("once", 2)]
    assert r.keys("*") == []


def test_fake_stores_a_json_round_trip_and_refuses_what_production_refuses(
        config: wurk.Config) -> None:
    data = {"ids": [1, 2]}
    with wurk.testing.fake():
        resize.perform_async(data)
        data["ids"].append(3)  # the stored copy is the JSON that was pushed, not the object
        assert resize.jobs[0]["args"] == [{"ids": [1, 2]}]
        with pytest.raises(InvalidArguments, match="argument 0 is tuple"):
            resize.perform_async((1, 2))
        assert len(resize.jobs) == 1


def test_fake_scheduled_jobs_keep_their_at(config: wurk.Config) -> None:
    with wurk.testing.fake():
        resize.perform_in(600, 5)
        (job,) = resize.jobs
        assert job["at"] > 0
        assert "enqueued_at" not in job


def test_fake_runs_client_middleware(config: wurk.Config) -> None:
    def stamp(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        payload["tenant"] = "acme"
        return call_next()

    def refuse_hard(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        return None if job == HardJob.definition.name else call_next()

    config.client_middleware.add(stamp)
    config.client_middleware.add(refuse_hard)
    with wurk.testing.fake():
        resize.perform_async(1)
        assert HardJob.perform_async(1, "a") is None
    assert resize.jobs[0]["tenant"] == "acme"
    assert HardJob.jobs == []


def test_drain_runs_jobs_pushed_while_draining(config: wurk.Config) -> None:
    with wurk.testing.fake():
        fan_out.perform_async(3)
        assert fan_out.drain() == 4
        assert fan_out.jobs == []
    assert ran == [("fan_out", 3), ("fan_out", 2), ("fan_out", 1), ("fan_out", 0)]


def test_perform_one_runs_the_oldest_and_refuses_an_empty_queue(config: wurk.Config) -> None:
    with wurk.testing.fake():
        first = HardJob.perform_async(1, "a")
        HardJob.perform_async(2, "b")
        HardJob.perform_one()
        assert ran == [("hard", 1, "a", first)]
        assert len(HardJob.jobs) == 1
        HardJob.clear()
        with pytest.raises(wurk.testing.EmptyQueue, match=r"no .*HardJob jobs to perform"):
            HardJob.perform_one()


def test_perform_one_returns_the_result_and_sets_current_jid(config: wurk.Config) -> None:
    with wurk.testing.fake():
        jid = resize.perform_async(7)
        assert resize.perform_one() == "resized 7"
    assert ran == [(7, "s", jid)]


def test_drain_all_and_clear_all(config: wurk.Config) -> None:
    with wurk.testing.fake():
        resize.perform_async(1)
        fan_out.perform_async(1)
        assert wurk.testing.drain_all() == 3
        resize.perform_async(2)
        wurk.testing.clear_all()
        assert wurk.testing.jobs() == []


def test_a_failing_job_stops_the_drain_and_reaches_the_test(config: wurk.Config) -> None:
    with wurk.testing.fake():
        explode.perform_async()
        resize.perform_async(1)
        with pytest.raises(ValueError, match="boom"):
            wurk.testing.drain_all()
        assert len(resize.jobs) == 1


def test_raw_push_and_bulk_in_fake_mode(config: wurk.Config) -> None:
    with wurk.testing.fake():
        wurk.push({"class": "Ruby::Job", "args": [1], "queue": "ruby"})
        resize.perform_bulk([[1], [2], [3]])
        assert [j["class"] for j in wurk.testing.jobs("ruby")] == ["Ruby::Job"]
        assert [j["args"] for j in resize.jobs] == [[1], [2], [3]]


def test_drain_with_a_chain_of_its_own_and_an_unknown_name(config: wurk.Config) -> None:
    config.server_middleware.add(lambda *a: pytest.fail("the configuration's chain ran"))
    with wurk.testing.fake(server_middleware=wurk.middleware.Chain()):
        resize.perform_async(1)
        wurk.push({"class": "Nobody::Here", "args": []})
        with pytest.raises(wurk.JobNotRegistered, match="Nobody::Here"):
            wurk.testing.drain_all()
    assert len(ran) == 1


def test_drain_runs_the_server_middleware(config: wurk.Config) -> None:
    seen: list[str] = []

    def around(job: Any, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        seen.append(queue)
        return call_next()

    config.server_middleware.add(around)
    with wurk.testing.fake():
        fan_out.perform_async(0)
        fan_out.drain()
    assert seen == ["low"]


def test_an_async_server_link_runs_around_drained_inline_and_perform_inline_jobs(
        config: wurk.Config) -> None:
    """async-jobs.md: an async server link runs around a sync job in the worker (and around
    an async one); the testing modes and perform_inline raised TypeError at it instead."""
    seen: list[Any] = []

    async def around(job: Any, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        seen.append(("before", payload["args"]))
        result = await call_next()
        seen.append(("after", result))
        return result

    config.server_middleware.add(around)
    with wurk.testing.fake():
        resize.perform_async(1)
        async_job.perform_async(2)
        assert wurk.testing.drain_all() == 2
    with wurk.testing.inline():
        resize.perform_async(3)

        async def endpoint() -> None:  # a push from inside a running loop
            resize.perform_async(4)

        asyncio.run(endpoint())
    assert resize.perform_inline(5) == "resized 5"
    assert seen == [("before", [1]), ("after", "resized 1"), ("before", [2]), ("after", 4),
                    ("before", [3]), ("after", "resized 3"), ("before", [4]),
                    ("after", "resized 4"), ("before", [5]), ("after", "resized 5")]
    assert [entry[0] for entry in ran] == [1, "async", 3, 4, 5]


# -- inline -----------------------------------------------------------------------------------
def test_inline_runs_at_push_with_a_round_tripped_payload(config: wurk.Config,
                                                          r: redis.Redis) -> None:
    seen: list[Any] = []

    def around(job: Any, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        seen.append(payload["args"])
        return call_next()

    config.server_middleware.add(around)
    data = [1, 2]
    with wurk.testing.inline():
        jid = resize.perform_async(data)
        HardJob.perform_in(3600, 3, "c")
    assert ran[0] == ([1, 2], "s", jid)
    assert ran[0][0] is not data  # the job got the JSON copy a worker would fetch
    assert ran[1][:3] == ("hard", 3, "c")
    assert seen[0] == [[1, 2]]
    assert in_redis(r) == 0


def test_inline_raises_the_jobs_error_at_the_push(config: wurk.Config) -> None:
    with wurk.testing.inline(), pytest.raises(ValueError, match="boom"):
        explode.perform_async()


def test_inline_replaces_the_chain_when_given_one(config: wurk.Config) -> None:
    config.server_middleware.add(lambda *a: pytest.fail("the configuration's chain ran"))
    with wurk.testing.inline(server_middleware=wurk.middleware.Chain()):
        resize.perform_async(1)
    assert len(ran) == 1


def test_inline_async_job_inside_a_running_loop(config: wurk.Config) -> None:
    async def endpoint() -> None:
        async_job.perform_async(21)

    with wurk.testing.inline():
        asyncio.run(endpoint())
        async_job.perform_async(1)
    assert ran == [("async", 21), ("async", 1)]


# -- results ----------------------------------------------------------------------------------
def test_a_kept_result_is_read_back_after_inline_and_drained_runs(config: wurk.Config,
                                                                 r: redis.Redis) -> None:
    """results.md: a worker stores a result_ttl job's outcome; the testing modes stored
    none, so handle.result() waited for Redis and timed out (Celery's eager mode answers)."""
    with wurk.testing.inline():
        handle = add.perform_async(1, 2)
        assert handle.result(timeout=0) == 3
        assert handle.outcome() is not None and handle.outcome().status == "succeeded"
        with pytest.raises(ValueError, match="negative -1"):
            add_badly.perform_async(-1)
    with wurk.testing.fake():
        later = add.perform_async(2, 3)
        with pytest.raises(TimeoutError):
            later.result(timeout=0)  # not run yet
        assert later.outcome() is None
        add.drain()
        assert later.result(timeout=0) == 5

        async def waiter() -> int:
            return await later.aresult(timeout=0)

        assert asyncio.run(waiter()) == 5
        failing = add_badly.perform_async(-2)
        with pytest.raises(ValueError):
            add_badly.drain()
        with pytest.raises(wurk.JobFailed, match="negative -2"):
            failing.result(timeout=0)
    assert r.keys("*") == []  # kept in memory, as the modes keep everything


def test_a_result_json_cannot_store_fails_the_run_as_in_a_worker(config: wurk.Config) -> None:
    with wurk.testing.inline(), pytest.raises(wurk.UnstorableResult, match="tuple"):
        add_badly.perform_async(1)


# -- switching --------------------------------------------------------------------------------
def test_blocks_do_not_nest(config: wurk.Config) -> None:
    with wurk.testing.fake():
        with pytest.raises(RuntimeError, match=r"inline\(\) inside a fake\(\) block"), \
                wurk.testing.inline():
            pass
        with pytest.raises(RuntimeError, match="do not nest"), wurk.testing.fake():
            pass
        assert wurk.testing.mode() == "fake"
    assert wurk.testing.mode() == "disable"


def test_a_block_is_this_threads_only(config: wurk.Config, r: redis.Redis) -> None:
    def push_elsewhere() -> None:
        resize.perform_async(99)

    with wurk.testing.fake():
        thread = threading.Thread(target=push_elsewhere)
        thread.start()
        thread.join(10)
        resize.perform_async(1)
        assert [j["args"] for j in resize.jobs] == [[1]]
    assert r.llen("queue:default") == 1  # the other thread's push went to Redis


def test_process_wide_mode_reaches_other_threads_and_disable_overrides(
        config: wurk.Config, r: redis.Redis) -> None:
    assert wurk.testing.set_mode("fake") == "disable"
    thread = threading.Thread(target=lambda: resize.perform_async(5))
    thread.start()
    thread.join(10)
    assert [j["args"] for j in resize.jobs] == [[5]]
    with wurk.testing.disable():
        assert wurk.testing.mode() == "disable"
        resize.perform_async(6)
    assert r.llen("queue:default") == 1
    assert wurk.testing.set_mode("inline") == "fake"
    resize.perform_async(7)
    assert ran[-1][0] == 7


def test_a_block_works_as_a_decorator(config: wurk.Config) -> None:
    @wurk.testing.fake()
    def body() -> int:
        resize.perform_async(1)
        return len(resize.jobs)

    assert body() == 1
    assert body() == 2  # the store is shared; a fresh block each call, no nesting error
    assert wurk.testing.mode() == "disable"


def test_a_block_decorates_an_async_function_for_the_whole_of_its_body(
        config: wurk.Config, r: redis.Redis) -> None:
    # contextlib's ContextDecorator ends the block as the coroutine is made, before its body
    # runs: the pushes of a decorated async test went to Redis.
    @wurk.testing.fake()
    async def body() -> tuple[str, int]:
        await asyncio.sleep(0)
        await resize.aperform_async(1)
        return wurk.testing.mode(), len(resize.jobs)

    @wurk.testing.inline()
    async def inline_body() -> str:
        await asyncio.sleep(0)
        resize.perform_async(2)
        return wurk.testing.mode()

    assert asyncio.run(body()) == ("fake", 1)
    assert asyncio.run(inline_body()) == "inline"
    assert [entry[0] for entry in ran] == [2]
    assert in_redis(r) == 0
    assert wurk.testing.mode() == "disable"


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown testing mode 'fakes'"):
        wurk.testing.set_mode("fakes")  # type: ignore[arg-type]


def test_importing_wurk_testing_changes_nothing() -> None:
    code = ("import wurk.testing, wurk.testing.plugin, wurk.client.writers; "
            "assert wurk.client.writers.selected() is None; "
            "assert wurk.testing.mode() == 'disable'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
