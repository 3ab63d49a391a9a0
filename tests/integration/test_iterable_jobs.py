"""Iterable jobs through the worker's own runner and built-in links: state in ``it-<jid>``
as Sidekiq 8 writes it, stopping between items, pushed again with the same jid, resuming at
the cursor, cancellation, hooks, errors, batches and encryption — time from a ManualClock."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.runner import AsyncDrain, Drain
from wurk import api, crypto
from wurk.job import set_stop_signal
from wurk.runtime.clock import ManualClock

EVENTS: list[Any] = []
CLOCK = ManualClock()
STOP = threading.Event()
# What a test wants done inside the job at an item: item -> callable.
AT_ITEM: dict[int, Any] = {}


def seen() -> list[Any]:
    return [e[1] for e in EVENTS if e[0] == "item"]


def hooks() -> list[str]:
    return [e[0] for e in EVENTS if e[0] != "item"]


class Recorded(wurk.IterableJob):
    """Items are seconds on the test's clock: each takes one."""

    clock = CLOCK

    def on_start(self) -> None:
        EVENTS.append(("on_start", self.executions))

    def on_resume(self) -> None:
        EVENTS.append(("on_resume", self.executions))

    def on_stop(self) -> None:
        EVENTS.append(("on_stop", self.cursor))

    def on_cancel(self) -> None:
        EVENTS.append(("on_cancel", self.cursor))

    def on_complete(self) -> None:
        EVENTS.append(("on_complete", self.executions))


class Count(Recorded, name="test_iterable.count"):
    def build_enumerator(self, n: int, *, cursor: int | None) -> Iterator[tuple[int, int]]:
        return wurk.iteration.ids(0, n, cursor=cursor)

    def each_iteration(self, item: int, n: int) -> None:
        EVENTS.append(("item", item))
        action = AT_ITEM.pop(item, None)
        if action is not None:
            action(self)
        CLOCK.advance(1)


class Limited(Count, name="test_iterable.limited"):
    max_iteration_runtime = 5


class Unlimited(Count, name="test_iterable.unlimited"):
    max_iteration_runtime = None  # said by the class: no limit, whatever the process's


class Aborting(Recorded, name="test_iterable.aborting", retry=3):
    def build_enumerator(self, n: int, *, cursor: int | None) -> Iterator[tuple[int, int]]:
        return wurk.iteration.ids(0, n, cursor=cursor)

    def each_iteration(self, item: int, n: int) -> None:
        EVENTS.append(("item", item))
        if item == 4 and not AT_ITEM.get(-1):
            AT_ITEM[-1] = True
            raise RuntimeError("item 4 failed")


class Nothing(Recorded, name="test_iterable.nothing"):
    def build_enumerator(self, *, cursor: Any) -> None:
        return None

    def each_iteration(self, item: Any) -> None:
        EVENTS.append(("item", item))


class Letters(Recorded, name="test_iterable.letters"):
    async def build_enumerator(self, text: str, *, cursor: int | None
                               ) -> Any:
        for item, index in wurk.iteration.items(text, cursor=cursor):
            yield item, index

    async def each_iteration(self, item: str, text: str) -> None:
        EVENTS.append(("item", item))
        if item == "d":
            STOP.set()
        CLOCK.advance(1)


class Secret(Recorded, name="test_iterable.secret", encrypt=True):
    def build_enumerator(self, n: int, card: dict[str, str], *, cursor: int | None
                         ) -> Iterator[tuple[int, int]]:
        return wurk.iteration.ids(0, n, cursor=cursor)

    def each_iteration(self, item: int, n: int, card: dict[str, str]) -> None:
        EVENTS.append(("item", (item, card["number"])))
        if item == 2 and not AT_ITEM.get(-2):
            AT_ITEM[-2] = True
            STOP.set()


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    EVENTS.clear()
    AT_ITEM.clear()
    STOP.clear()
    set_stop_signal(STOP)  # interrupted() in this thread (the Drain's) reads STOP
    yield
    STOP.clear()


@pytest.fixture
def drain(config: wurk.Config) -> Iterator[Drain]:
    runner = Drain(config)
    yield runner
    runner.close()


def state(r: redis.Redis, jid: str) -> dict[str, str]:
    return r.hgetall(f"it-{jid}")


def queued(r: redis.Redis, queue: str = "default") -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.lrange(f"queue:{queue}", 0, -1)]


def stop_at(item: int) -> None:
    AT_ITEM[item] = lambda job: STOP.set()


def test_a_job_walks_every_item_once_and_leaves_no_state(drain: Drain, r: redis.Redis
                                                         ) -> None:
    jid = Count.perform_async(12)
    assert drain() == 1
    assert seen() == list(range(12))
    assert hooks() == ["on_start", "on_stop", "on_complete"]
    assert not r.exists(f"it-{jid}")
    assert queued(r) == [] and r.zcard("retry") == 0


def test_a_stop_saves_the_next_items_cursor_and_pushes_the_same_job_again(
        drain: Drain, r: redis.Redis) -> None:
    jid = Count.perform_async(20)
    stop_at(6)
    original = queued(r)[0]
    drain.runner.run(drain.fetcher.fetch(0.1))  # type: ignore[arg-type]
    assert seen() == list(range(7))  # items 0-6 ran; the stop came before item 7
    stored = state(r, jid)
    assert stored["ex"] == "1" and json.loads(stored["c"]) == 7
    assert float(stored["rt"]) == 7.0  # seven items of a second each, on the test's clock
    assert 0 < r.ttl(f"it-{jid}") <= wurk.iteration.STATE_TTL
    again = queued(r)
    assert len(again) == 1 and again[0]["jid"] == jid and again[0]["args"] == [20]
    assert {k: v for k, v in again[0].items() if k != "enqueued_at"} == \
        {k: v for k, v in original.items() if k != "enqueued_at"}
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0
    assert hooks() == ["on_start", "on_stop"]
    # Started again: from item 7, as a resume.
    STOP.clear()
    EVENTS.clear()
    assert drain() == 1
    assert seen() == list(range(7, 20))
    assert hooks() == ["on_resume", "on_stop", "on_complete"]
    assert not r.exists(f"it-{jid}")
    assert drain.counters.failed == 0


def test_a_flush_sets_the_30_day_expiry_only_when_the_state_has_none(
        drain: Drain, r: redis.Redis) -> None:
    """docs: a flush is `EXPIRE it-<jid> 2592000 NX` — set only when the key has none, as
    Sidekiq 8 does; a later flush does not reset it. An interrupted execution is counted
    as processed, not failed."""
    jid = Count.perform_async(20)
    stop_at(3)
    drain.runner.run(drain.fetcher.fetch(0.1))  # type: ignore[arg-type]
    assert 30 * 86400 - 60 < r.ttl(f"it-{jid}") <= 30 * 86400
    assert drain.counters.processed == 1 and drain.counters.failed == 0
    r.expire(f"it-{jid}", 1000)  # as if written days ago
    STOP.clear()
    stop_at(8)
    drain.runner.run(drain.fetcher.fetch(0.1))  # type: ignore[arg-type]
    assert json.loads(state(r, jid)["c"]) == 9 and state(r, jid)["ex"] == "2"
    assert 0 < r.ttl(f"it-{jid}") <= 1000  # the second flush left the expiry alone


def test_the_state_is_flushed_every_five_seconds_of_the_clock(drain: Drain, r: redis.Redis
                                                              ) -> None:
    jid = Count.perform_async(12)
    seen_state: dict[int, dict[str, str]] = {}
    for item in (3, 5, 9, 11):
        AT_ITEM[item] = lambda job, item=item: seen_state.__setitem__(item, state(r, job.jid))
    drain()
    assert seen_state[3] == {}  # nothing written before the first five seconds
    assert json.loads(seen_state[5]["c"]) == 5  # flushed before item 5, at 5 s
    assert json.loads(seen_state[9]["c"]) == 5
    assert json.loads(seen_state[11]["c"]) == 10  # and again at 10 s
    assert float(seen_state[11]["rt"]) == 10.0
    assert not r.exists(f"it-{jid}")


def test_max_iteration_runtime_stops_the_execution_and_pushes_it_again(
        drain: Drain, r: redis.Redis) -> None:
    jid = Limited.perform_async(12)
    drain.runner.run(drain.fetcher.fetch(0.1))  # type: ignore[arg-type]
    assert seen() == [0, 1, 2, 3, 4]  # five seconds' worth
    assert json.loads(state(r, jid)["c"]) == 5
    assert [job["jid"] for job in queued(r)] == [jid]
    drain()  # 5-9, then 10-11
    assert seen() == list(range(12))
    assert [e for e in hooks() if e != "on_stop"] == ["on_start", "on_resume", "on_resume",
                                                      "on_complete"]
    assert not r.exists(f"it-{jid}")


def test_the_process_wide_max_iteration_runtime_applies_unless_the_class_sets_its_own(
        redis_server: Any, r: redis.Redis) -> None:
    """``max_iteration_runtime`` as a setting limits every iterable job whose class sets no
    limit of its own; a class's own value (None too) wins."""
    config = wurk.configure(redis_url=redis_server.url, max_iteration_runtime=3)
    drain = Drain(config)
    try:
        jid = Count.perform_async(8)
        drain.runner.run(drain.fetcher.fetch(0.1))  # type: ignore[arg-type]
        assert seen() == [0, 1, 2]  # three seconds' worth: the setting's
        assert json.loads(state(r, jid)["c"]) == 3
        assert [job["jid"] for job in queued(r)] == [jid]
        drain()
        assert seen() == list(range(8))
        EVENTS.clear()
        Limited.perform_async(8)  # its class says 5
        drain.runner.run(drain.fetcher.fetch(0.1))  # type: ignore[arg-type]
        assert seen() == [0, 1, 2, 3, 4]
        drain()
        EVENTS.clear()
        Unlimited.perform_async(8)  # its class says none
        assert drain() == 1
        assert seen() == list(range(8))
    finally:
        drain.close()


def test_an_error_flushes_the_failed_items_cursor_so_the_retry_resumes_there(
        drain: Drain, r: redis.Redis) -> None:
    jid = Aborting.perform_async(8)
    drain()
    assert seen() == [0, 1, 2, 3, 4]
    assert json.loads(state(r, jid)["c"]) == 4
    assert r.zcard("retry") == 1
    api.RetrySet().retry_all()
    EVENTS.clear()
    drain()
    assert seen() == [4, 5, 6, 7]
    assert hooks() == ["on_resume", "on_stop", "on_complete"]
    assert not r.exists(f"it-{jid}")


def test_a_job_cancelled_before_it_starts_runs_none_of_its_items(drain: Drain, r: redis.Redis
                                                                 ) -> None:
    jid = Count.perform_in(60, 5)
    done = wurk.cancel(jid)
    assert done.removed_from == ["schedule"] and r.zcard("schedule") == 0
    when = done.cancelled_at
    assert abs(when - float(r.time()[0])) <= 2
    assert wurk.cancel(jid).cancelled_at == when  # the first request's time stands
    Count.perform_async(5)  # another job runs as usual
    wurk.push({"class": "test_iterable.count", "args": [5], "jid": jid})  # it comes due
    drain()
    assert seen() == list(range(5))  # the other job's items only
    assert hooks().count("on_cancel") == 1
    stored = state(r, jid)
    assert stored["cancelled"] == str(int(when)) and r.ttl(f"it-{jid}") > 0
    found = api.IterableJobQuery().find(jid)
    assert found is not None and found.cancelled and found.cancelled_at == when
    assert r.zcard("retry") == 0 and queued(r) == []


def test_a_running_job_stops_at_the_flush_after_its_cancel(drain: Drain, r: redis.Redis
                                                           ) -> None:
    jid = Count.perform_async(50)
    AT_ITEM[2] = lambda job: wurk.cancel(job.jid)  # as another process would
    drain()
    # Cancelled during item 2 (at 2 s); the flush at 5 s sees it: items 3 and 4 ran, at most
    # five seconds and one item after the request.
    assert seen() == [0, 1, 2, 3, 4]
    assert hooks() == ["on_start", "on_cancel", "on_stop"]
    assert json.loads(state(r, jid)["c"]) == 5 and "cancelled" in state(r, jid)
    assert queued(r) == [] and r.zcard("retry") == 0 and drain.counters.failed == 0


def test_self_cancel_stops_before_the_next_item(drain: Drain, r: redis.Redis) -> None:
    jid = Count.perform_async(10)
    AT_ITEM[1] = lambda job: job.cancel()
    drain()
    assert seen() == [0, 1]
    assert hooks() == ["on_start", "on_cancel", "on_stop"]
    assert "cancelled" in state(r, jid)


def test_a_ruby_cancel_written_by_hand_stops_the_job(drain: Drain, r: redis.Redis) -> None:
    """Sidekiq's ``cancel!``: HSETNX cancelled <epoch>, nothing else."""
    Count.perform_async(50)
    AT_ITEM[1] = lambda job: r.hsetnx(f"it-{job.jid}", "cancelled", "1764930000")
    drain()
    assert seen() == [0, 1, 2, 3, 4]
    assert "on_cancel" in hooks()


def test_build_enumerator_returning_none_skips_the_job(drain: Drain, r: redis.Redis) -> None:
    jid = Nothing.perform_async()
    assert drain() == 1
    assert seen() == [] and hooks() == []
    assert not r.exists(f"it-{jid}") and drain.counters.failed == 0


def test_an_async_job_stops_resumes_and_completes(drain: Drain, r: redis.Redis) -> None:
    jid = Letters.perform_async("abcdefg")
    drain.runner.run(drain.fetcher.fetch(0.1))  # type: ignore[arg-type]
    assert seen() == ["a", "b", "c", "d"]
    assert json.loads(state(r, jid)["c"]) == 4
    assert [job["jid"] for job in queued(r)] == [jid]
    STOP.clear()
    drain()
    assert seen() == list("abcdefg")
    assert hooks() == ["on_start", "on_stop", "on_resume", "on_stop", "on_complete"]
    assert not r.exists(f"it-{jid}")


@pytest.fixture
def adrain(config: wurk.Config) -> Iterator[AsyncDrain]:
    runner = AsyncDrain(config)
    runner.stopping = STOP  # interrupted() in its jobs reads STOP
    yield runner
    runner.close()


def test_an_async_job_stops_resumes_and_completes_on_the_async_walk(
        adrain: AsyncDrain, r: redis.Redis) -> None:
    """The test above on the lane's path (the async walk's InterruptHandler leave pushes it
    again), in a batch that completes only once it has."""
    batch = wurk.Batch()
    with batch.jobs():
        jid = Letters.perform_async("abcdefg")
    assert adrain.run_one() == 1
    assert seen() == ["a", "b", "c", "d"]
    assert json.loads(state(r, jid)["c"]) == 4
    assert [job["jid"] for job in queued(r)] == [jid]
    status = wurk.BatchStatus(batch.bid)
    assert status.pending == 1 and not status.complete and status.failures == 0
    assert adrain.counters.failed == 0
    STOP.clear()
    adrain()
    assert seen() == list("abcdefg")
    assert hooks() == ["on_start", "on_stop", "on_resume", "on_stop", "on_complete"]
    assert not r.exists(f"it-{jid}")
    status = wurk.BatchStatus(batch.bid)
    assert status.pending == 0 and status.complete and status.failures == 0


def test_an_async_job_cancelled_before_it_starts_runs_none_of_its_items_on_the_async_walk(
        adrain: AsyncDrain, r: redis.Redis) -> None:
    jid = Letters.perform_in(60, "abc")
    assert wurk.cancel(jid).removed_from == ["schedule"]
    wurk.push({"class": "test_iterable.letters", "args": ["abc"], "jid": jid})
    adrain()
    assert seen() == [] and hooks().count("on_cancel") == 1
    assert r.zcard("retry") == 0 and queued(r) == []


def test_an_interrupted_encrypted_job_keeps_one_envelope(redis_server: Any, r: redis.Redis
                                                         ) -> None:
    config = wurk.configure(redis_url=redis_server.url)
    crypto.enable(active_version=1, key_for={1: os.urandom(32)}.get, config=config)
    drain = Drain(config)
    try:
        # letters in it: a bare "4111" turns up in a millisecond timestamp one time in a few
        # hundred
        jid = Secret.perform_async(5, {"number": "card-4111"})
        drain.runner.run(drain.fetcher.fetch(0.1))  # type: ignore[arg-type]
        again = queued(r)
        assert [job["jid"] for job in again] == [jid]
        assert again[0]["args"][-1]["__wurk_enc__"] is True
        assert "card-4111" not in r.lrange("queue:default", 0, -1)[0]
        STOP.clear()
        drain()
        assert seen() == [(i, "card-4111") for i in range(5)]
    finally:
        drain.close()


def test_an_interrupted_batch_job_does_not_complete_its_batch(drain: Drain, r: redis.Redis
                                                              ) -> None:
    batch = wurk.Batch()
    with batch.jobs():
        jid = Count.perform_async(10)
    stop_at(3)
    drain.runner.run(drain.fetcher.fetch(0.1))  # type: ignore[arg-type]
    status = wurk.BatchStatus(batch.bid)
    assert status.pending == 1 and not status.complete and status.failures == 0
    STOP.clear()
    drain()
    status = wurk.BatchStatus(batch.bid)
    assert status.pending == 0 and status.complete and status.failures == 0
    assert seen() == list(range(10)) and not r.exists(f"it-{jid}")


@pytest.mark.parametrize(("field", "value", "says"), [
    ("c", "{not json", "field c"),
    ("ex", "many", "field ex"),
    ("rt", "-3", "field rt"),
])
def test_a_state_that_cannot_be_read_sends_the_job_to_the_dead_set(
        drain: Drain, r: redis.Redis, field: str, value: str, says: str) -> None:
    jid = Count.perform_async(5)
    r.hset(f"it-{jid}", field, value)
    drain()
    assert seen() == []
    dead = [json.loads(raw) for raw in r.zrange("dead", 0, -1)]
    assert [d["jid"] for d in dead] == [jid]
    assert dead[0]["error_class"] == "wurk.IterationStateError"
    assert says in dead[0]["error_message"]
    assert r.hget(f"it-{jid}", field) == value  # left for a person to look at
    found = api.IterableJobQuery().find_many([jid])
    assert isinstance(found[jid], api.Invalid)


def test_a_state_key_of_another_type_is_refused_the_same_way(drain: Drain, r: redis.Redis
                                                            ) -> None:
    jid = Count.perform_async(5)
    r.set(f"it-{jid}", "a string")
    drain()
    dead = [json.loads(raw) for raw in r.zrange("dead", 0, -1)]
    assert dead[0]["error_class"] == "wurk.IterationStateError" and seen() == []


def test_an_unreadable_state_is_named_by_its_key_under_the_key_prefix(redis_server: Any,
                                                                       r: redis.Redis) -> None:
    """The error names the key a person has to look at: ``app:it-<jid>`` under
    ``key_prefix="app"``, not the bare ``it-<jid>`` (which is no key of this app)."""
    config = wurk.Config(redis_url=redis_server.url, key_prefix="app")
    jid = "0123456789abcdef01234567"
    r.hset(f"app:it-{jid}", "ex", "many")
    with pytest.raises(wurk.IterationStateError, match=rf"^app:it-{jid}: field ex "):
        api.IterableJobQuery(config).find(jid)
    found = api.IterableJobQuery(config).find_many([jid])[jid]
    assert isinstance(found, api.Invalid) and f"app:it-{jid}: field ex" in found.expected
    r.delete(f"app:it-{jid}")
    r.set(f"app:it-{jid}", "a string")
    with pytest.raises(wurk.IterationStateError, match=rf"^app:it-{jid} is a string"):
        api.IterableJobQuery(config).cancel(jid)


def test_a_class_defining_perform_is_refused() -> None:
    with pytest.raises(wurk.RegistrationError, match="must not define perform"):
        class Both(wurk.IterableJob, name="test_iterable.both"):
            def perform(self) -> None: ...

            def each_iteration(self, item: Any) -> None: ...


@pytest.mark.parametrize(("attribute", "value"), [
    ("max_iteration_runtime", 0), ("max_iteration_runtime", -1),
    ("max_iteration_runtime", float("nan")), ("max_iteration_runtime", "10"),
    ("flush_interval", float("nan")), ("flush_interval", -1), ("flush_interval", None),
])
def test_a_bad_class_attribute_is_refused_when_the_class_is_defined(
        attribute: str, value: Any) -> None:
    """``max_iteration_runtime = 0`` stopped every execution before its first item, so the
    job was pushed again for ever; nan or a string failed each execution, or never flushed."""
    with pytest.raises(wurk.RegistrationError, match=f"{attribute}.*{value!r}"):
        type("Bad", (wurk.IterableJob,), {attribute: value, "__module__": __name__},
             name="test_iterable.bad")


def test_a_push_is_checked_against_each_iteration_less_the_item(config: wurk.Config) -> None:
    with pytest.raises(wurk.InvalidArguments, match="too many positional arguments"):
        Count.perform_async(3, 4)


def test_an_enumerator_yielding_plain_items_is_a_clear_error(drain: Drain, r: redis.Redis
                                                             ) -> None:
    class Plain(wurk.IterableJob, name="test_iterable.plain", retry=0):
        def build_enumerator(self, *, cursor: Any) -> list[int]:
            return [1, 2, 3]

        def each_iteration(self, item: Any) -> None: ...

    Plain.perform_async()
    drain()
    wurk.registry.unregister("test_iterable.plain")
    assert drain.counters.failed == 1
    assert r.zcard("dead") == 1 and "(item, cursor) pairs" in r.zrange("dead", 0, -1)[0]


def test_cancel_refuses_what_is_not_a_jid(config: wurk.Config) -> None:
    for bad in ("", "a b", "x\x1b[2J", "j" * 201):
        with pytest.raises(ValueError, match="jid"):
            wurk.cancel(bad)


@pytest.mark.parametrize(("write", "says"), [
    (lambda r, key: r.set(key, "a string"), "a string"),
    (lambda r, key: r.hset(key, "cancelled", "garbage"), "field cancelled"),
], ids=["another-type", "unreadable-time"])
def test_a_hostile_state_does_not_stop_a_cancel_of_a_waiting_job(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture,
        write: Any, says: str) -> None:
    jid = Count.perform_async(5)
    write(r, f"it-{jid}")
    with caplog.at_level("WARNING", logger="wurk"):
        done = wurk.cancel(jid)
    assert done.removed_from == ["queue:default"] and queued(r) == []
    assert done.cancelled_at == 0.0
    assert any(f"it-{jid}" in rec.getMessage() and says in rec.getMessage()
               for rec in caplog.records)
    with pytest.raises(wurk.IterationStateError, match=f"it-{jid}.*{says}"):
        wurk.iteration.cancel(jid)


class Slow(Recorded, name="test_iterable.slow"):
    def build_enumerator(self, *, cursor: int | None) -> Iterator[tuple[int, int]]:
        return wurk.iteration.ids(0, 2, cursor=cursor)

    def each_iteration(self, item: int) -> None:
        EVENTS.append(("item", item))
        CLOCK.advance(60)  # longer than the worker's 25 s shutdown timeout


def test_an_item_longer_than_the_shutdown_timeout_is_warned_about(
        drain: Drain, caplog: pytest.LogCaptureFixture) -> None:
    Slow.perform_async()
    with caplog.at_level("WARNING", logger="wurk"):
        drain()
    warned = [r.getMessage() for r in caplog.records if "longer than the shutdown" in
              r.getMessage()]
    assert len(warned) == 2 and "60.00 s" in warned[0]


class Dated(Recorded, name="test_iterable.dated", retry=0):
    def build_enumerator(self, *, cursor: Any) -> Iterator[tuple[int, Any]]:
        import datetime as dt
        yield 1, dt.datetime.now()

    def each_iteration(self, item: int) -> None:
        EVENTS.append(("item", item))


def test_a_cursor_json_cannot_hold_fails_before_anything_is_written(
        drain: Drain, r: redis.Redis) -> None:
    jid = Dated.set(retry=0).perform_async()
    STOP.set()  # a stop before the first item makes the job write its state
    drain()
    dead = [json.loads(raw) for raw in r.zrange("dead", 0, -1)]
    assert dead[0]["error_class"] == "TypeError" and "cannot be stored as JSON" in \
        dead[0]["error_message"]
    assert not r.exists(f"it-{jid}") and seen() == []


def test_in_a_testing_mode_the_job_runs_to_its_end(config: wurk.Config, r: redis.Redis
                                                   ) -> None:
    with wurk.testing.inline():
        jid = Count.perform_async(6)
    assert seen() == list(range(6)) and not r.exists(f"it-{jid}")


class Wrapped(Recorded, name="test_iterable.wrapped"):
    """around_iteration wraps each item; item 2 it skips (never calls call_next)."""

    def build_enumerator(self, n: int, label: str, *, cursor: int | None
                         ) -> Iterator[tuple[int, int]]:
        return wurk.iteration.ids(0, n, cursor=cursor)

    def around_iteration(self, item: int, call_next: Any) -> Any:
        EVENTS.append(("before", item, self.cursor, list(self.arguments)))
        if item == 2:
            return None
        result = call_next()
        EVENTS.append(("after", item))
        return result

    def each_iteration(self, item: int, n: int, label: str) -> None:
        EVENTS.append(("item", item))


class AsyncWrapped(Recorded, name="test_iterable.async_wrapped"):
    def build_enumerator(self, n: int, *, cursor: int | None) -> Iterator[tuple[int, int]]:
        return wurk.iteration.ids(0, n, cursor=cursor)

    async def around_iteration(self, item: int, call_next: Any) -> Any:
        EVENTS.append(("before", item))
        await call_next()
        EVENTS.append(("after", item))

    async def each_iteration(self, item: int, n: int) -> None:
        EVENTS.append(("item", item))


def test_around_iteration_wraps_each_item_and_arguments_are_the_jobs(
        drain: Drain, r: redis.Redis) -> None:
    """iterable-jobs.md: "around_iteration(item, call_next) — around each item: return
    call_next() (await it in an async job)"; self.cursor is the item's cursor and
    self.arguments the job's arguments."""
    Wrapped.perform_async(4, "x")
    assert drain() == 1
    walked = [e for e in EVENTS if e[0] in ("before", "item", "after")]
    assert walked == [("before", 0, 0, [4, "x"]), ("item", 0), ("after", 0),
                      ("before", 1, 1, [4, "x"]), ("item", 1), ("after", 1),
                      ("before", 2, 2, [4, "x"]),  # not called on: item 2 never ran
                      ("before", 3, 3, [4, "x"]), ("item", 3), ("after", 3)]
    EVENTS.clear()
    AsyncWrapped.perform_async(2)
    assert drain() == 1
    assert [e for e in EVENTS if e[0] in ("before", "item", "after")] == [
        ("before", 0), ("item", 0), ("after", 0), ("before", 1), ("item", 1), ("after", 1)]
    assert drain.counters.failed == 0


class SelfInterrupting(Recorded, name="test_iterable.self_interrupting"):
    """Raises wurk.Interrupted itself at item 2 of its first execution."""

    def build_enumerator(self, n: int, *, cursor: int | None) -> Iterator[tuple[int, int]]:
        return wurk.iteration.ids(0, n, cursor=cursor)

    def each_iteration(self, item: int, n: int) -> None:
        if item == 2 and self.executions == 1:
            raise wurk.Interrupted()
        EVENTS.append(("item", item))


@wurk.job(name="test_iterable.plain_interrupted")
def plain_interrupted(n: int) -> None:
    EVENTS.append(("item", n))
    raise wurk.Interrupted()


def test_an_iterable_job_raising_interrupted_goes_back_and_a_plain_one_fails(
        drain: Drain, r: redis.Redis) -> None:
    """iterable-jobs.md: "An iterable job may also raise wurk.Interrupted() itself: it is
    pushed again the same way" (same payload, same jid, to the back of its queue; not a
    failure, not a retry) — "in any other job it is an ordinary failure"."""
    jid = SelfInterrupting.perform_async(4)
    ahead = Count.perform_async(0)
    original = queued(r)[-1]
    drain.runner.run(drain.fetcher.fetch(0.1))  # type: ignore[arg-type]
    assert seen() == [0, 1]
    again = queued(r)
    assert [job["jid"] for job in again] == [jid, ahead]  # pushed behind the one waiting
    assert {k: v for k, v in again[0].items() if k != "enqueued_at"} == \
        {k: v for k, v in original.items() if k != "enqueued_at"}
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0 and drain.counters.failed == 0
    assert drain() == 2
    assert seen() == [0, 1, 2, 3] and not r.exists(f"it-{jid}")

    plain = plain_interrupted.perform_async(1)
    assert drain() == 1
    [failed] = [json.loads(raw) for raw in r.zrange("retry", 0, -1)]
    assert (failed["jid"], failed["error_class"]) == (plain, "wurk.Interrupted")
    assert queued(r) == [] and drain.counters.failed == 1


class SlowStart(Recorded, name="test_iterable.slow_start"):
    """Its enumerator takes longer to build than its whole max_iteration_runtime."""

    max_iteration_runtime = 5

    def build_enumerator(self, n: int, *, cursor: int | None) -> Iterator[tuple[int, int]]:
        CLOCK.advance(6)  # a slow first query
        return wurk.iteration.ids(0, n, cursor=cursor)

    def each_iteration(self, item: int, n: int) -> None:
        EVENTS.append(("item", item))


class AsyncSlowStart(SlowStart, name="test_iterable.async_slow_start"):
    async def each_iteration(self, item: int, n: int) -> None:  # type: ignore[override]
        EVENTS.append(("item", item))


@pytest.mark.parametrize("job", [SlowStart, AsyncSlowStart], ids=["sync", "async"])
def test_max_iteration_runtime_spent_before_the_first_item_still_makes_progress(
        drain: Drain, r: redis.Redis, job: type[SlowStart]) -> None:
    """An execution whose time limit had passed before its first item stopped there: pushed
    again, it did the same, for ever, and never ran an item. Each execution now runs at
    least one item before the limit can stop it."""
    jid = job.perform_async(3)
    for _ in range(3):
        drain.runner.run(drain.fetcher.fetch(0.1))  # type: ignore[arg-type]
    assert seen() == [0, 1, 2]
    assert not r.exists(f"it-{jid}") and queued(r) == []


ODD_CURSOR: list[Any] = []


class OddCursor(Recorded, name="test_iterable.odd_cursor", retry=0):
    def build_enumerator(self, *, cursor: Any) -> Iterator[tuple[int, Any]]:
        yield 1, ODD_CURSOR[0]

    def each_iteration(self, item: int) -> None:
        EVENTS.append(("item", item))


@pytest.mark.parametrize("cursor", [{1: "a"}, {"page": {None: 2}}, [{(1, 2): 3}], "\ud800"],
                         ids=["int-key", "nested-none-key", "tuple-key", "lone-surrogate"])
def test_a_cursor_that_would_not_come_back_as_it_was_is_refused_before_it_is_written(
        drain: Drain, r: redis.Redis, cursor: Any) -> None:
    """A dict cursor with keys other than strings was stored with its keys turned to text
    (``{1: "a"}`` came back ``{"1": "a"}``), so the resumed job met a cursor it never
    yielded; a string no UTF-8 holds failed in the Redis client. Both are now the
    ``TypeError`` the docs promise for a cursor JSON cannot hold, before anything is
    written."""
    ODD_CURSOR[:] = [cursor]
    jid = OddCursor.perform_async()
    STOP.set()  # a stop before the first item makes the job write its state
    drain.runner.run(drain.fetcher.fetch(0.1))  # type: ignore[arg-type]
    dead = [json.loads(raw) for raw in r.zrange("dead", 0, -1)]
    assert [d["error_class"] for d in dead] == ["TypeError"]
    assert "cannot be stored as JSON" in dead[0]["error_message"]
    assert not r.exists(f"it-{jid}") and seen() == []


def test_in_a_testing_mode_a_passed_max_iteration_runtime_raises_interrupted(
        config: wurk.Config, r: redis.Redis) -> None:
    """iterable-jobs.md: "In wurk.testing modes … a max_iteration_runtime that passes raises
    wurk.Interrupted to the test. The state is written to the configured Redis as in a
    worker." """
    with wurk.testing.inline(), pytest.raises(wurk.Interrupted, match="cursor 5"):
        Limited.perform_async(12)
    assert seen() == [0, 1, 2, 3, 4]
    [key] = r.keys("it-*")
    assert json.loads(r.hget(key, "c")) == 5 and r.hget(key, "ex") == "1"
    with wurk.testing.fake():
        Limited.perform_async(12)
        with pytest.raises(wurk.Interrupted):
            wurk.testing.drain_all()


class EveryItem(Count, name="test_iterable.every_item"):
    flush_interval = 0


def test_a_flush_interval_of_0_flushes_before_every_item(drain: Drain, r: redis.Redis
                                                         ) -> None:
    """iterable-jobs.md: "flush_interval (5 s; 0 flushes before every item)"."""
    jid = EveryItem.perform_async(4)
    cursors: list[Any] = []
    for item in range(4):
        AT_ITEM[item] = lambda job: cursors.append(json.loads(state(r, job.jid)["c"]))
    drain()
    assert cursors == [0, 1, 2, 3] and not r.exists(f"it-{jid}")


def test_iteration_cancel_writes_the_mark_only_and_the_job_then_runs_none_of_its_items(
        drain: Drain, r: redis.Redis) -> None:
    """iterable-jobs.md: "wurk.iteration.cancel(jid) writes the mark only, as Ruby's cancel!
    does"; a copy that starts later "finds the mark, runs on_cancel, and runs none of its
    items", and the hooks table: on_stop "after every execution that did not fail:
    interrupted, cancelled or complete"."""
    jid = Count.perform_async(5)
    when = wurk.iteration.cancel(jid)
    assert abs(when - float(r.time()[0])) <= 2
    assert wurk.iteration.cancel(jid) == when  # the first request's time stands
    assert [job["jid"] for job in queued(r)] == [jid]  # still waiting: the mark only
    assert state(r, jid) == {"cancelled": str(int(when))}
    assert 0 < r.ttl(f"it-{jid}") <= wurk.iteration.STATE_TTL
    assert drain() == 1
    assert seen() == [] and hooks() == ["on_cancel", "on_stop"]
    assert r.zcard("retry") == 0 and drain.counters.failed == 0 and r.exists(f"it-{jid}")
    EVENTS.clear()
    wurk.iteration.cancel(AsyncWrapped.perform_async(3))  # the async job alike
    assert drain() == 1
    assert seen() == [] and hooks() == ["on_cancel", "on_stop"]


@pytest.mark.parametrize("hook", ["around_iteration", "on_start", "on_resume", "on_stop",
                                  "on_cancel", "on_complete"])
def test_an_async_hook_on_a_sync_job_is_refused_when_the_class_is_defined(hook: str) -> None:
    """An ``async def around_iteration`` on a job whose each_iteration is sync was called and
    its coroutine dropped: no item ran, and the job completed and deleted its state. An
    async ``on_stop`` or ``on_complete`` failed the job only after all its items, so each
    retry ran them again. Refused at once, as a class defining perform is."""
    async def hook_body(self: Any, *args: Any) -> None: ...

    with pytest.raises(wurk.RegistrationError, match=f"{hook}.*async def"):
        type("Mixed", (Count,), {hook: hook_body, "__module__": __name__},
             name="test_iterable.mixed")
    # on an async job they are welcome
    type("AllAsync", (AsyncWrapped,), {hook: hook_body, "__module__": __name__},
         name="test_iterable.all_async")
    wurk.registry.unregister("test_iterable.all_async")


ENUM_FAILS: list[bool] = []


class FlakySource(Recorded, name="test_iterable.flaky_source", retry=3):
    """Its enumerator fails (a lost database, say) when asked for item 7, the first time."""

    def build_enumerator(self, n: int, *, cursor: int | None) -> Iterator[tuple[int, int]]:
        for item, at in wurk.iteration.ids(0, n, cursor=cursor):
            if item == 7 and not ENUM_FAILS:
                ENUM_FAILS.append(True)
                raise ConnectionError("the next page could not be read")
            yield item, at

    def each_iteration(self, item: int, n: int) -> None:
        EVENTS.append(("item", item))
        CLOCK.advance(1)


class AsyncFlakySource(FlakySource, name="test_iterable.async_flaky_source"):
    async def each_iteration(self, item: int, n: int) -> None:  # type: ignore[override]
        EVENTS.append(("item", item))
        CLOCK.advance(1)


@pytest.mark.parametrize("job", [FlakySource, AsyncFlakySource], ids=["sync", "async"])
def test_an_enumerator_error_saves_the_last_items_cursor(
        drain: Drain, r: redis.Redis, job: type[FlakySource]) -> None:
    """An error raised by the enumerator itself (not by an item) saved nothing: the retry
    went back to the last periodic flush (item 5) and ran items 5 and 6 again. It now saves
    the cursor of the last item begun, so the retry repeats that one item only."""
    ENUM_FAILS.clear()
    jid = job.perform_async(10)
    drain()
    assert seen() == list(range(7)) and r.zcard("retry") == 1
    assert json.loads(state(r, jid)["c"]) == 6
    api.RetrySet().retry_all()
    EVENTS.clear()
    drain()
    assert seen() == [6, 7, 8, 9] and not r.exists(f"it-{jid}")


class Unreturned(Recorded, name="test_iterable.unreturned", retry=0):
    """An async job whose sync around_iteration calls call_next() but drops what it gives."""

    def build_enumerator(self, n: int, *, cursor: int | None) -> Iterator[tuple[int, int]]:
        return wurk.iteration.ids(0, n, cursor=cursor)

    def around_iteration(self, item: int, call_next: Any) -> Any:
        call_next()  # neither returned nor awaited

    async def each_iteration(self, item: int, n: int) -> None:
        EVENTS.append(("item", item))


def test_an_async_items_call_next_left_unawaited_is_an_error_not_a_skipped_item(
        drain: Drain, r: redis.Redis) -> None:
    """In an async job call_next() makes a coroutine; an around_iteration that called it but
    neither returned nor awaited it dropped every item without a word, and the job
    completed and deleted its state. It is now a TypeError naming the fix, with the
    item's cursor saved for the retry."""
    jid = Unreturned.perform_async(3)
    drain()
    assert seen() == []
    dead = [json.loads(raw) for raw in r.zrange("dead", 0, -1)]
    assert [d["error_class"] for d in dead] == ["TypeError"]
    assert "call_next" in dead[0]["error_message"]
    assert json.loads(state(r, jid)["c"]) == 0


@wurk.job(name="test_iterable.after_step")
def after_step() -> None:
    EVENTS.append(("after_step", None))


@pytest.mark.parametrize("when", ["running", "before_start"])
def test_a_cancelled_iterable_job_ends_as_cancelled_dead_in_its_batch(
        drain: Drain, r: redis.Redis, when: str) -> None:
    """time-limits-and-cancel.md: a cancelled job "ends as cancelled: not a failure, not
    retried, not in the dead set; ... counted in wurk:stat:cancelled; a job in a batch
    counts as dead there". An iterable job that found its cancel returned as a success:
    its batch counted it succeeded and nothing counted it cancelled."""
    batch = wurk.Batch()
    with batch.jobs():
        jid = Count.perform_async(50)
    if when == "running":
        AT_ITEM[2] = lambda job: wurk.cancel(job.jid)
    else:
        wurk.iteration.cancel(jid)  # Ruby's cancel!: the mark only, the job still queued
    drain()
    assert hooks()[-2:] == ["on_cancel", "on_stop"]
    status = wurk.BatchStatus(batch.bid)
    assert status.complete and status.dead_jids == [jid] and status.failures == 1
    assert r.get("wurk:stat:cancelled") == "1"
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0 and queued(r) == []
    assert "cancelled" in state(r, jid)


def test_a_cancelled_iterable_workflow_step_is_dead_and_stops_what_follows(
        drain: Drain, r: redis.Redis) -> None:
    """workflows.md: a step that dies — "wurk.cancel on its jid" among the ways — "is dead
    and the workflow will end failed", and on_death="stop" stops the steps after it. A
    cancelled iterable step counted as a success and its dependants ran."""
    from wurk.workflow import Workflow, WorkflowStatus

    wf = Workflow("iterable-cancel", on_death="stop")
    walk = wf.step(Count, 50)
    wf.step(after_step).after(walk)
    AT_ITEM[2] = lambda job: wurk.cancel(job.jid)
    wid = wf.start()
    drain()
    status = WorkflowStatus(wid)
    assert status.state == "failed"
    assert ("after_step", None) not in EVENTS


class AsyncSelfInterrupting(Recorded, name="test_iterable.async_self_interrupting"):
    """SelfInterrupting, async."""

    async def build_enumerator(self, n: int, *, cursor: int | None) -> Any:
        for pair in wurk.iteration.ids(0, n, cursor=cursor):
            yield pair

    async def each_iteration(self, item: int, n: int) -> None:
        if item == 2 and self.executions == 1:
            raise wurk.Interrupted()
        EVENTS.append(("item", item))


@pytest.mark.parametrize("job", [SelfInterrupting, AsyncSelfInterrupting],
                         ids=["sync", "async"])
def test_an_iterable_job_raising_interrupted_itself_runs_on_stop(
        adrain: AsyncDrain, r: redis.Redis, job: type[wurk.IterableJob]) -> None:
    """iterable-jobs.md: on_stop runs "after every execution that did not fail:
    interrupted, cancelled or complete", and a job raising wurk.Interrupted itself is
    "pushed again the same way" — not a failure. Its execution ended without on_stop."""
    jid = job.perform_async(4)
    assert adrain.run_one() == 1
    assert seen() == [0, 1] and hooks() == ["on_start", "on_stop"]
    assert json.loads(state(r, jid)["c"]) == 2  # the item it stopped in runs again
    assert [j["jid"] for j in queued(r)] == [jid] and adrain.counters.failed == 0
    adrain()
    assert seen() == [0, 1, 2, 3]
    assert hooks() == ["on_start", "on_stop", "on_resume", "on_stop", "on_complete"]


class Held(Recorded, name="test_iterable.held", retry=3):
    """A generator enumerator holding something (a file, a database cursor) until closed."""

    def build_enumerator(self, n: int, *, cursor: int | None) -> Iterator[tuple[int, int]]:
        try:
            yield from wurk.iteration.ids(0, n, cursor=cursor)
        finally:
            EVENTS.append(("closed", None))

    def each_iteration(self, item: int, n: int) -> None:
        EVENTS.append(("item", item))
        action = AT_ITEM.pop(item, None)
        if action is not None:
            action(self)


class AsyncHeld(Recorded, name="test_iterable.async_held", retry=3):
    async def build_enumerator(self, n: int, *, cursor: int | None) -> Any:
        try:
            for pair in wurk.iteration.ids(0, n, cursor=cursor):
                yield pair
        finally:
            EVENTS.append(("closed", None))

    async def each_iteration(self, item: int, n: int) -> None:
        EVENTS.append(("item", item))
        action = AT_ITEM.pop(item, None)
        if action is not None:
            action(self)


def fail(job: Any) -> None:
    raise RuntimeError("the item failed")


@pytest.mark.parametrize("how", ["stop", "cancel", "error"])
def test_a_generator_enumerator_left_part_way_is_closed_before_on_stop(
        drain: Drain, adrain: AsyncDrain, r: redis.Redis, how: str) -> None:
    """A walk that ends before its enumerator does (stopped, cancelled, failed) closes a
    generator enumerator then and there, so its ``finally`` and ``with`` blocks run before
    ``on_stop`` (as leaving Ruby's ``each`` does): the async one's never ran at all, the sync
    one's only once the job's frames were collected, after ``on_stop`` and the push again."""
    action = {"stop": lambda job: STOP.set(), "cancel": lambda job: job.cancel(),
              "error": fail}[how]
    for job_class, runner in ((Held, drain.runner.run), (AsyncHeld, None)):
        EVENTS.clear()
        STOP.clear()
        AT_ITEM[1] = action
        job_class.perform_async(5)
        if runner is None:
            assert adrain.run_one() == 1
        else:
            runner(drain.fetcher.fetch(0.1))  # type: ignore[arg-type]
        names = [e[0] for e in EVENTS]
        assert names[:4] == ["on_start", "item", "item", "closed"], (job_class, names)
        if how != "error":
            assert names[-1] == "on_stop"
        r.flushall()


# -- Redis refusing a command for now is an outage, not an unreadable state --------------------
ADMIN: list[redis.Redis] = []  # the private server's own client, for the jobs below


class Filling(Recorded, name="test_iterable.filling", retry=3):
    """Fills its Redis at item 1 (``maxmemory`` 1: writes are refused with ``OOM``); the
    flush before item 2 meets that. Its ``retry_in`` frees Redis, and notes the error."""

    flush_interval = 0

    def build_enumerator(self, n: int, *, cursor: int | None) -> Iterator[tuple[int, int]]:
        return wurk.iteration.ids(0, n, cursor=cursor)

    def each_iteration(self, item: int, n: int) -> None:
        EVENTS.append(("item", item))
        if item == 1 and not AT_ITEM.get(-3):
            AT_ITEM[-3] = True
            ADMIN[0].config_set("maxmemory", 1)

    def retry_in(self, count: int, exc: BaseException) -> float | str | None:
        EVENTS.append(("retry_in", type(exc).__name__))
        ADMIN[0].config_set("maxmemory", 0)
        return None


@pytest.fixture
def private_server(tmp_path: Any) -> Iterator[Any]:
    from tests.helpers.server import start_server
    server = start_server(tmp_path / "private")
    ADMIN.append(redis.Redis(port=server.port, decode_responses=True))
    yield server
    ADMIN.pop().close()
    server.stop()


def test_a_flush_redis_refuses_for_now_is_retried_not_sent_to_the_dead_set(
        private_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``OOM`` (at ``maxmemory``), ``BUSY``, ``LOADING``, ``READONLY`` refuse a command for
    now (docs/guarantees.md: "as an outage"): a flush or state read meeting one is
    ``wurk.RedisUnavailable`` and the job is retried from its last flush. It was
    ``IterationStateError`` ("cannot be written"), a failure no retry fixes: the dead set."""
    monkeypatch.setenv("REDIS_URL", private_server.url)  # which wins over redis_url
    config = wurk.configure(redis_url=private_server.url)
    admin = ADMIN[0]
    runner = Drain(config)
    try:
        jid = Filling.perform_async(4)
        runner()
        assert ("retry_in", "RedisUnavailable") in EVENTS
        assert admin.zcard("dead") == 0
        retried = [json.loads(raw) for raw in admin.zrange("retry", 0, -1)]
        assert [job["jid"] for job in retried] == [jid]
        assert retried[0]["error_class"] == "wurk.RedisUnavailable"
        assert "OOM" in retried[0]["error_message"]
        assert json.loads(admin.hget(f"it-{jid}", "c") or "") == 1  # the last flush's
    finally:
        admin.config_set("maxmemory", 0)
        runner.close()
        config.close()


def test_only_a_key_of_another_type_is_an_unreadable_state(
        private_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The replies themselves: a flush refused with ``OOM`` is ``RedisUnavailable``, one
    meeting a key of another type ``IterationStateError``, as before."""
    from wurk.connections.lending import redis as lent_redis
    from wurk.iteration import state as S
    monkeypatch.setenv("REDIS_URL", private_server.url)  # which wins over redis_url
    config = wurk.configure(redis_url=private_server.url)
    admin = ADMIN[0]
    url = config.pool("client").url
    try:
        admin.config_set("maxmemory", 1)
        with lent_redis(config) as conn:
            replies = conn.pipeline(S.flush_commands("it-a", 1, "3", 0.5))
        with pytest.raises(wurk.RedisUnavailable, match="OOM"):
            S.cancelled_in("it-a", replies, url=url)
        admin.config_set("maxmemory", 0)
        admin.set("it-b", "a string")
        with lent_redis(config) as conn:
            replies = conn.pipeline(S.flush_commands("it-b", 1, "3", 0.5))
            read = conn.pipeline([S.read_command("it-b")])[0]
        with pytest.raises(wurk.IterationStateError, match="it-b cannot be written"):
            S.cancelled_in("it-b", replies, url=url)
        with pytest.raises(wurk.IterationStateError, match="it-b cannot be read"):
            S.parse("b", "it-b", read, url=url)
    finally:
        admin.config_set("maxmemory", 0)
        config.close()
