"""Batches against a real server and a real (embedded) worker: every callback rule.

Callbacks record what they saw in the Redis list ``fired`` as ``event:bid:options``, so a
test reads the exact order and count of callback runs.
"""

from __future__ import annotations

import contextvars
import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.server import Server
from wurk.api.sets import DeadSet, RetrySet
from wurk.api.values import Invalid
from wurk.batch import BatchSet, DeadBatches, accounting, scan_tags
from wurk.job import reset_running, set_running

FIRED = "fired"


def _ledger() -> redis.Redis:
    return redis.Redis.from_url(wurk.default_config().redis_url, decode_responses=True)


def note(event: str, status: wurk.BatchStatus, options: dict[str, Any]) -> None:
    with wurk.redis() as conn:
        conn.call("RPUSH", FIRED, f"{event}:{status.bid}:{json.dumps(options, sort_keys=True)}")


class Notes(wurk.Job, name="BatchTest::Notes"):
    batch_callbacks = ("custom",)  # a callback method not named on_<event>

    def on_complete(self, status: wurk.BatchStatus, options: dict[str, Any]) -> None:
        note("complete", status, options)

    def on_success(self, status: wurk.BatchStatus, options: dict[str, Any]) -> None:
        note("success", status, options)

    def on_death(self, status: wurk.BatchStatus, options: dict[str, Any]) -> None:
        note("death", status, options)

    def custom(self, status: wurk.BatchStatus, options: dict[str, Any]) -> None:
        note("custom", status, options)


@wurk.job(name="BatchTest::fn_callback")
def fn_callback(status: wurk.BatchStatus, options: dict[str, Any]) -> None:
    note("fn", status, options)


@wurk.job(name="BatchTest::work")
def work(name: str) -> None:
    """Fails while the key ``fail:<name>`` exists; records each run in ``ran``."""
    with wurk.redis() as conn:
        conn.call("RPUSH", "ran", name)
        if conn.call("EXISTS", f"fail:{name}"):
            raise RuntimeError(f"{name} was told to fail")


@wurk.job(name="BatchTest::work_once", retry=0)
def work_once(name: str) -> None:
    work(name)


@wurk.job(name="BatchTest::never_retry", retry=False)
def never_retry(name: str) -> None:
    work(name)


@wurk.job(name="BatchTest::fan_out")
def fan_out(count: int) -> None:
    """Reopens its own batch and adds ``count`` jobs to it."""
    batch = wurk.Batch(wurk.current_job()["bid"])  # type: ignore[index]
    with batch.jobs():
        for i in range(count):
            work.perform_async(f"added-{i}")


@wurk.job(name="BatchTest::nest")
def nest(depth: int) -> None:
    """Creates a child batch of its own batch, ``depth`` levels further down."""
    parent = wurk.Batch(wurk.current_job()["bid"])  # type: ignore[index]
    with parent.jobs():
        child = wurk.Batch(description=f"level {depth}")
        child.on("success", Notes, {"level": depth})
        with child.jobs():
            if depth > 1:
                nest.perform_async(depth - 1)
            else:
                work.perform_async("leaf")


@pytest.fixture
def fast(redis_server: Server) -> Iterator[wurk.Config]:
    config = wurk.configure(redis_url=redis_server.url, heartbeat_interval=0.2,
                            fetch_timeout=0.2, timeout=1, shutdown_grace=0.5,
                            scheduler_initial_wait=0, average_scheduled_poll_interval=0.2,
                            concurrency=4, tag="batches")
    yield config


@pytest.fixture
def worker(fast: wurk.Config) -> Iterator[wurk.InProcessWorker]:
    running = wurk.embed(fast)
    yield running
    running.stop()


def wait_until(predicate: Callable[[], bool], timeout: float = 20, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what or predicate}"
        time.sleep(0.02)


def fired(r: redis.Redis) -> list[str]:
    return list(r.lrange(FIRED, 0, -1))


def events(r: redis.Redis, bid: str) -> list[str]:
    """The callbacks that ran for ``bid``, sorted: complete and success are pushed together
    and may run side by side."""
    return sorted(line.split(":", 2)[0] for line in fired(r) if line.split(":", 2)[1] == bid)


def queued_callbacks(r: redis.Redis) -> list[str]:
    """The events of the callback jobs waiting in the default queue."""
    jobs = [json.loads(raw) for raw in r.lrange("queue:default", 0, -1)]
    return [job["args"][0] for job in jobs if job["class"] == "wurk.batch.Callback"]


def idle(r: redis.Redis) -> bool:
    """Nothing waits in ``queue:default`` and no job is in flight (an in-flight list is
    deleted by Redis once its last entry is acknowledged)."""
    return r.llen("queue:default") == 0 and not any(
        r.llen(key) for key in r.scan_iter(match="queue:default|*", _type="list"))


def settle(r: redis.Redis, count: int) -> None:
    """Wait for ``count`` callback runs, then until no job waits or runs: a duplicate
    callback (or the next one) is pushed before the ACK of the job that fires it, so once
    the queue and its in-flight lists are empty, every callback that will run has."""
    wait_until(lambda: r.llen(FIRED) >= count, what=f"{count} callbacks")
    wait_until(lambda: idle(r), what="the queue and its in-flight lists to empty")


def all_callbacks(batch: wurk.Batch, options: dict[str, Any] | None = None) -> wurk.Batch:
    for event in ("complete", "success", "death"):
        batch.on(event, Notes, options or {})
    return batch


# -- the rules --------------------------------------------------------------------------------
def test_complete_and_success_fire_once_each_with_status_and_options(
        worker: wurk.InProcessWorker, r: redis.Redis) -> None:
    batch = all_callbacks(wurk.Batch(description="ten"), {"ids": [], "big": 2**62})
    with batch.jobs():
        for i in range(10):
            work.perform_async(f"job-{i}")
    settle(r, 2)
    assert events(r, batch.bid) == ["complete", "success"]
    exact = json.dumps({"big": 2**62, "ids": []})  # [] stays a list, 2**62 stays whole
    assert all(line.endswith(exact) for line in fired(r))
    status = wurk.BatchStatus(batch.bid)
    assert (status.total, status.pending, status.failures) == (10, 0, 0)
    assert status.complete and status.succeeded and not status.dead
    assert status.created_at <= status.complete_at <= status.success_at  # type: ignore[operator]
    assert r.llen("ran") == 10


def test_an_empty_block_still_fires_its_callbacks(worker: wurk.InProcessWorker,
                                                  r: redis.Redis) -> None:
    batch = all_callbacks(wurk.Batch())
    with batch.jobs():
        pass
    settle(r, 2)
    assert events(r, batch.bid) == ["complete", "success"]
    assert wurk.BatchStatus(batch.bid).total == 1  # the no-op job


def test_nothing_fires_before_the_first_block_ends(worker: wurk.InProcessWorker,
                                                   r: redis.Redis) -> None:
    batch = all_callbacks(wurk.Batch())
    with batch.jobs():
        work.perform_async("early")
        wait_until(lambda: r.llen("ran") == 1, what="the first job to run")
        time.sleep(0.3)
        assert wurk.BatchStatus(batch.bid).pending == 1  # the block still holds it open
        work.perform_async("late")
    settle(r, 2)
    assert events(r, batch.bid) == ["complete", "success"]
    assert wurk.BatchStatus(batch.bid).total == 2


def test_complete_fires_after_a_failure_and_success_only_after_the_retry(
        worker: wurk.InProcessWorker, r: redis.Redis) -> None:
    r.set("fail:flaky", 1)
    batch = all_callbacks(wurk.Batch())
    with batch.jobs():
        work.perform_async("fine")
        flaky = work.perform_async("flaky")
    settle(r, 1)
    assert events(r, batch.bid) == ["complete"]
    status = wurk.BatchStatus(batch.bid)
    assert (status.pending, status.failures, status.failed_jids) == (1, 1, [flaky])
    r.delete("fail:flaky")
    wait_until(lambda: RetrySet().retry_all() == 1, what="the retry entry")
    settle(r, 2)
    assert events(r, batch.bid) == ["complete", "success"]
    status.refresh()
    assert (status.pending, status.failures, status.failed_jids) == (0, 0, [])


def test_a_dying_job_fires_death_once_and_success_after_its_retry_from_the_dead_set(
        worker: wurk.InProcessWorker, r: redis.Redis) -> None:
    r.set("fail:doomed", 1)
    batch = all_callbacks(wurk.Batch())
    with batch.jobs():
        doomed = work_once.perform_async("doomed")
        work.perform_async("fine")
    settle(r, 2)
    assert events(r, batch.bid) == ["complete", "death"]
    status = wurk.BatchStatus(batch.bid)
    assert status.dead and status.dead_jids == [doomed] and not status.succeeded
    assert batch.bid in DeadBatches().bids()
    assert r.ttl(f"b-{batch.bid}") > 31 * 24 * 3600  # a death keeps it as long as the dead set
    r.delete("fail:doomed")
    assert DeadBatches().retry(batch.bid) == 1
    settle(r, 3)
    assert events(r, batch.bid) == ["complete", "death", "success"]
    assert batch.bid not in DeadBatches().bids()
    assert wurk.BatchStatus(batch.bid).dead_jids == []
    assert DeadSet().size() == 0


@wurk.job(name="BatchTest::careful")
def careful(name: str) -> None:
    """Returns early once its batch was invalidated, as docs/batches.md tells jobs to."""
    if not wurk.batch.valid_within_batch():
        return
    work(name)


def hold_then_release(r: redis.Redis, change: Callable[[dict[str, Any]], None] | None = None
                      ) -> None:
    """Move the jobs pushed to ``queue:held`` (which the worker does not serve) to
    ``queue:default``, each changed by ``change`` first."""
    while (raw := r.rpop("queue:held")) is not None:
        job = json.loads(raw)
        job["queue"] = "default"
        if change is not None:
            change(job)
        r.lpush("queue:default", json.dumps(job))


def test_a_job_killed_from_the_api_fires_death_once(worker: wurk.InProcessWorker,
                                                    r: redis.Redis) -> None:
    r.set("fail:killed", 1)
    batch = all_callbacks(wurk.Batch())
    with batch.jobs():
        jid = work.perform_async("killed")  # retried (25 times) until the kill
    settle(r, 1)
    assert events(r, batch.bid) == ["complete"]  # it ran once, and failed
    wait_until(lambda: RetrySet().size() == 1, what="the retry entry")
    [entry] = list(RetrySet())
    assert entry.jid == jid and entry.kill()
    settle(r, 2)
    assert events(r, batch.bid) == ["complete", "death"]
    status = wurk.BatchStatus(batch.bid)
    assert status.dead and status.dead_jids == [jid] and not status.succeeded


def test_a_job_whose_payload_cannot_be_read_fires_death(worker: wurk.InProcessWorker,
                                                        r: redis.Redis) -> None:
    batch = all_callbacks(wurk.Batch())
    with batch.jobs():
        jid = work.set(queue="held").perform_async("unreadable")
    hold_then_release(r, lambda job: job.update(args={"not": "a list"}))
    settle(r, 2)
    assert events(r, batch.bid) == ["complete", "death"]
    [dead] = [json.loads(raw) for raw in r.zrange("dead", 0, -1)]
    assert dead["jid"] == jid and dead["error_class"] == "wurk.InvalidPayload"
    assert r.lrange("ran", 0, -1) == []


def test_jobs_of_an_invalidated_batch_return_early_and_count_as_succeeded(
        worker: wurk.InProcessWorker, r: redis.Redis) -> None:
    batch = all_callbacks(wurk.Batch())
    with batch.jobs():
        careful.set(queue="held").perform_async("a")
        careful.set(queue="held").perform_async("b")
    assert batch.invalidate_all() == 1
    hold_then_release(r)
    settle(r, 2)
    assert events(r, batch.bid) == ["complete", "success"]
    assert r.lrange("ran", 0, -1) == []  # neither did its work
    assert wurk.BatchStatus(batch.bid).succeeded


def test_a_failure_without_retries_fires_death(worker: wurk.InProcessWorker,
                                               r: redis.Redis) -> None:
    r.set("fail:once", 1)
    batch = all_callbacks(wurk.Batch())
    with batch.jobs():
        never_retry.perform_async("once")
    settle(r, 2)
    assert events(r, batch.bid) == ["complete", "death"]
    assert not wurk.BatchStatus(batch.bid).succeeded


def test_callback_targets_by_class_method_and_function(worker: wurk.InProcessWorker,
                                                        r: redis.Redis) -> None:
    batch = wurk.Batch()
    batch.on("success", "BatchTest::Notes#custom", {"a": 1})
    batch.on("success", fn_callback, {"b": 2})
    with batch.jobs():
        work.perform_async("x")
    settle(r, 2)
    assert events(r, batch.bid) == ["custom", "fn"]


def test_a_job_reopens_its_own_batch(worker: wurk.InProcessWorker, r: redis.Redis) -> None:
    batch = all_callbacks(wurk.Batch())
    with batch.jobs():
        fan_out.perform_async(5)
    settle(r, 2)
    assert events(r, batch.bid) == ["complete", "success"]
    assert wurk.BatchStatus(batch.bid).total == 6
    assert r.llen("ran") == 5  # every added job ran before success


def test_nested_three_deep_children_succeed_before_their_parents(
        worker: wurk.InProcessWorker, r: redis.Redis) -> None:
    top = wurk.Batch(description="top")
    top.on("success", Notes, {"level": 0})
    with top.jobs():
        nest.perform_async(3)
    settle(r, 4)
    levels = [json.loads(line.split(":", 2)[2])["level"] for line in fired(r)]
    assert levels == [1, 2, 3, 0]  # the deepest first, the top last
    status = wurk.BatchStatus(top.bid)
    assert status.child_count == 1 and status.succeeded
    child = wurk.BatchStatus(status.child_bids[0])
    grandchild = wurk.BatchStatus(child.child_bids[0])
    assert child.parent_bid == top.bid and grandchild.parent_bid == child.bid
    assert len(wurk.BatchStatus(grandchild.child_bids[0]).child_bids) == 0


def test_a_childs_death_reaches_every_ancestor(worker: wurk.InProcessWorker,
                                              r: redis.Redis) -> None:
    r.set("fail:deep", 1)
    outer = all_callbacks(wurk.Batch())
    with outer.jobs():
        middle = all_callbacks(wurk.Batch())
        with middle.jobs():
            inner = all_callbacks(wurk.Batch())
            with inner.jobs():
                work_once.perform_async("deep")
    wait_until(lambda: len([f for f in fired(r) if f.startswith("death")]) == 3)
    time.sleep(0.5)
    for batch in (outer, middle, inner):
        assert events(r, batch.bid).count("death") == 1
        assert not wurk.BatchStatus(batch.bid).succeeded
    assert DeadBatches().bids() == [inner.bid]


def test_a_parent_completes_only_after_its_children_complete(
        fast: wurk.Config, r: redis.Redis) -> None:
    parent = all_callbacks(wurk.Batch())
    with parent.jobs():
        work.perform_async("own")
        child = wurk.Batch()
        with child.jobs():
            work.perform_async("childs")
    ran = r.lpop("queue:default")  # the child's job, pushed last: run by hand below
    assert ran is not None
    worker = wurk.embed(fast)
    try:
        wait_until(lambda: r.llen("ran") == 1)
        time.sleep(0.5)
        assert not wurk.BatchStatus(parent.bid).complete  # the child is not complete yet
        r.lpush("queue:default", ran)
        settle(r, 2)
    finally:
        worker.stop()
    assert events(r, parent.bid) == ["complete", "success"]


# -- accounting, straight through the scripts ------------------------------------------------
def test_each_jid_counts_once_whatever_is_replayed(fast: wurk.Config,
                                                   r: redis.Redis) -> None:
    batch = all_callbacks(wurk.Batch())
    with batch.jobs():
        jids = [work.perform_async(f"j{i}") for i in range(3)]
    with wurk.redis() as conn:
        record = lambda jid, outcome: accounting.record(conn, fast, batch.bid, jid, outcome)  # noqa: E731
        assert record(jids[0], "success") and not record(jids[0], "success")  # ACK twice
        assert not record(jids[0], "failure") and not record(jids[0], "death")  # too late
        assert record(jids[1], "failure") and not record(jids[1], "failure")
        assert record(jids[1], "death") and not record(jids[1], "death")
        assert not record("not-in-batch", "success")
        assert record(jids[2], "success")
    status = wurk.BatchStatus(batch.bid)
    assert (status.pending, status.failures, status.dead_jids) == (1, 1, [jids[1]])
    callbacks = queued_callbacks(r)
    assert sorted(callbacks) == ["complete", "death"]  # pushed once each
    with wurk.redis() as conn:
        assert record(jids[1], "success")  # retried from the dead set
        assert not record(jids[1], "success")
    status.refresh()
    assert (status.pending, status.failures, status.dead_jids) == (0, 0, [])
    callbacks = queued_callbacks(r)
    assert sorted(callbacks) == ["complete", "death", "success"]


def test_a_push_to_a_batch_that_succeeded_or_vanished_is_refused(
        fast: wurk.Config, r: redis.Redis) -> None:
    batch = wurk.Batch()
    with batch.jobs():
        jid = work.perform_async("only")
    with wurk.redis() as conn:
        accounting.record(conn, fast, batch.bid, str(jid), "success")
    with pytest.raises(wurk.BatchError, match="already succeeded"), \
            wurk.Batch(batch.bid).jobs():
        pass
    with pytest.raises(wurk.BatchError, match="does not exist"), wurk.Batch("nope").jobs():
        pass
    with pytest.raises(wurk.BatchError, match="before its first jobs block"):
        batch.on("success", Notes)
    with pytest.raises(wurk.BatchError, match="unknown batch event"):
        wurk.Batch().on("finished", Notes)
    with pytest.raises(wurk.BatchError, match="JSON"):
        wurk.Batch().on("success", Notes, {"when": object()})
    with pytest.raises(wurk.BatchError, match="not a registered job"):
        wurk.Batch().on("success", print)
    with pytest.raises(wurk.BatchError, match="linger"):
        wurk.Batch(linger=5)


def test_scheduled_and_bulk_pushes_join_the_block(fast: wurk.Config, r: redis.Redis) -> None:
    batch = wurk.Batch()
    with batch.jobs():
        work.perform_in(60, "later")
        work.perform_bulk([["a"], ["b"], ["c"]])
    assert wurk.BatchStatus(batch.bid).total == 4
    assert r.zcard("schedule") == 1 and r.llen("queue:default") == 3
    assert all(json.loads(raw)["bid"] == batch.bid for raw in r.lrange("queue:default", 0, -1))
    outside = work.perform_async("outside")
    assert r.scard(f"b-{batch.bid}-jids") == 4 and outside is not None


def test_jobs_takes_a_function_too(fast: wurk.Config) -> None:
    batch = wurk.Batch()
    assert batch.jobs(lambda: work.perform_async("via fn")) is batch
    assert wurk.BatchStatus(batch.bid).total == 1


def test_a_block_that_raises_before_pushing_leaves_no_batch(fast: wurk.Config,
                                                           r: redis.Redis) -> None:
    batch = wurk.Batch()
    with pytest.raises(KeyError), batch.jobs():
        raise KeyError("boom")
    assert not r.exists(f"b-{batch.bid}") and r.zcard("batches") == 0


def test_invalidate_all_reaches_descendants(fast: wurk.Config, r: redis.Redis) -> None:
    outer = wurk.Batch()
    with outer.jobs():
        work.perform_async("a")
        inner = wurk.Batch()
        with inner.jobs():
            work.perform_async("b")
    assert outer.invalidate_all() == 2
    assert wurk.BatchStatus(inner.bid).invalidated
    seen: list[bool] = []

    class Checks(wurk.Job, name="BatchTest::Checks"):
        def perform(self) -> None:
            seen.append(self.valid_within_batch())

    payload = {"class": "BatchTest::Checks", "args": [], "bid": inner.bid, "jid": "x" * 24}
    token = set_running(payload)
    try:
        Checks.definition.instantiate(payload).perform()
    finally:
        reset_running(token)
    assert seen == [False]
    wurk.registry.unregister("BatchTest::Checks")


def test_sets_tags_expiry_and_delete(fast: wurk.Config, r: redis.Redis) -> None:
    first = wurk.Batch(tags=["import", "user-7"], linger=60)
    with first.jobs():
        jid = work.perform_async("a")
    second = wurk.Batch(tags=["export"])
    with second.jobs():
        work.perform_async("b")
    assert {s.bid for s in BatchSet()} == {first.bid, second.bid}  # same second: any order
    assert scan_tags("user") == [first.bid] and sorted(scan_tags("port")) == sorted(
        [first.bid, second.bid])
    assert r.ttl(f"b-{first.bid}") > 29 * 24 * 3600  # pending: 30 days
    with wurk.redis() as conn:
        accounting.record(conn, fast, first.bid, str(jid), "success")
    assert 50 < r.ttl(f"b-{first.bid}") <= 60  # success: its linger
    assert all(r.ttl(key) <= 60 for key in r.keys(f"b-{first.bid}*"))
    wurk.BatchStatus(second.bid).delete()
    assert not r.keys(f"b-{second.bid}*") and scan_tags("export") == []
    r.delete(f"b-{first.bid}")  # expired
    assert list(BatchSet()) == [] and r.zcard("batches") == 0


def test_stored_garbage_is_reported_not_raised(fast: wurk.Config, r: redis.Redis) -> None:
    batch = all_callbacks(wurk.Batch())
    with batch.jobs():
        jid = work.perform_async("a")
    r.hset(f"b-{batch.bid}", mapping={"total": "many", "created_at": "soon", "tags": "{",
                                      "callbacks": '[["success", "x", {]]'})
    status = wurk.BatchStatus(batch.bid)
    assert isinstance(status.total, Invalid) and isinstance(status.created_at, Invalid)
    assert status.tags == [] and status.data()["total"] is None
    assert status.data()["invalid"]["/total"] == "many"
    assert len(status.problems) == 3
    with wurk.redis() as conn:
        assert accounting.record(conn, fast, batch.bid, str(jid), "success")
    assert wurk.BatchStatus(batch.bid).succeeded  # fired; the broken callback was not pushed
    assert all(json.loads(raw)["class"] != "wurk.batch.Callback"
               for raw in r.lrange("queue:default", 0, -1))


# What a hand (or another version) may have written in place of what a batch stored, and the
# job's outcome it is met with: (outcome, key suffix, field or None for the whole key given
# another type, the value, the callbacks that then run, what the warning names).
_SKIPPED = "is not counted, and the batch fires none of its callbacks"
HOSTILE: dict[str, tuple[str, str, str | None, str, list[str], str]] = {
    "pending": ("success", "", "pending", "many", ["complete", "success"],
                ':b field pending held no count: "many"'),
    "pending lua reads": ("death", "", "pending", "0x0", ["complete", "death"],
                          ':b field pending held no count: "0x0"'),
    "failures": ("death", "", "failures", "x", ["complete", "death"],
                 ':b field failures held no count: "x"'),
    "record type": ("success", "", None, "", [], f":b holds a list, not a hash (written by "
                    f"something else); this success of job :j {_SKIPPED}"),
    "jids type": ("success", "-jids", None, "", [], ":b-jids holds a list, not a set"),
    "failed type": ("death", "-failed", None, "", [], ":b-failed holds a list, not a set"),
    "died type": ("death", "-died", None, "", [], ":b-died holds a list, not a set"),
    "notify type": ("success", "-notify", None, "", [], ":b-notify holds a list, not a set"),
    "batch-died type": ("death", "batch-died", None, "", ["complete", "death"],
                        "batch-died held a list, not a set (written by something else); "
                        "deleted, it starts again"),
    "cbsucc type": ("success", "-cbsucc", None, "", ["complete", "success"],
                    ":b-cbsucc holds a list, not a set"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_stored_batch_state_is_named_and_no_job_fails_or_runs_twice(
        worker: wurk.InProcessWorker, r: redis.Redis, case: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """The batch scripts failed half-way on what they read back: a count HINCRBY refuses
    (pending 'many'), a key of another Redis type (the record, -jids, -failed, -died,
    -notify, batch-died). Redis does not roll back: the jid had left -jids, then the script
    raised a Redis error naming no key, so the job failed and ran again — and the rerun
    counted nothing (its jid was gone), so the batch never fired and nothing said why. A
    callback job met -cbsucc of another type after its callback ran: it failed, and ran
    the callback again. A count Lua believed and HINCRBY does not ('0x0') fired complete
    early. Now a count that is none is rebuilt from the sets and the batch fires as it
    should; a key of another type stops the count before any write (batch-died, an index
    of wurk's own, starts again); nothing fails, and a warning names the key."""
    outcome, suffix, field, value, expected, named = HOSTILE[case]
    if outcome == "death":
        r.set("fail:hostile", 1)
    batch = all_callbacks(wurk.Batch())
    with batch.jobs():
        job = (work_once if outcome == "death" else work).set(queue="held")
        jid = job.perform_async("hostile")
        work.perform_async("other")  # done before the hostile value is written
    wait_until(lambda: r.llen("ran") == 1, what="the other job")
    key = "batch-died" if suffix == "batch-died" else f"b-{batch.bid}{suffix}"
    if field is not None:
        r.hset(key, field, value)
    elif suffix != "-cbsucc":
        r.delete(key)
        r.rpush(key, "written by something else")
    else:  # only a callback job reads it
        r.rpush(key, "written by something else")
    with caplog.at_level(logging.WARNING, logger="wurk"):
        hold_then_release(r)
        wait_until(lambda: r.llen("ran") == 2, what="the hostile job")
        if expected:
            settle(r, len(expected))
        wait_until(lambda: any(named.replace(":b", f"b-{batch.bid}").replace(":j", str(jid))
                               in rec.getMessage() for rec in caplog.records),
                   timeout=5, what="the warning")
        # A duplicate callback or a retry is pushed before the job's ACK: once nothing
        # waits in the queue or in flight, what the hostile job led to has all run.
        wait_until(lambda: idle(r), what="the queue and the in-flight lists to empty")
    assert r.lrange("ran", 0, -1) == ["other", "hostile"]  # ran once...
    assert RetrySet().size() == 0  # ...and nothing (a job, a callback) fails to run again
    assert DeadSet().size() == (1 if outcome == "death" else 0)
    assert events(r, batch.bid) == expected  # each callback once, or none, and a warning
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert all(f"batch {batch.bid}: " in line for line in warned), warned


def test_hostile_stored_batch_state_stops_push_close_remove_and_invalidate_by_name(
        fast: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """The push, block-end, remove and invalidate scripts HINCRBYed and SADDed as blindly:
    a push into a batch whose pending or total held text pushed its jobs and then raised
    (the caller, told the push failed, could push them again), a key of another type did
    the same part-way through. Now a count that is none is rebuilt (total, which no set
    holds, is left as it is), and a key of another type refuses the push before anything
    is written and stops the others, each with the key named."""
    batch = wurk.Batch()
    with batch.jobs():
        jid = work.perform_async("a")
    bid = batch.bid
    r.hset(f"b-{bid}", mapping={"pending": "many", "total": "lots"})
    with caplog.at_level(logging.WARNING, logger="wurk"), wurk.Batch(bid).jobs():
        work.perform_async("b")
    assert r.hmget(f"b-{bid}", "pending", "total") == ["2", "lots"]  # rebuilt; left
    warned = " | ".join(rec.getMessage() for rec in caplog.records)
    assert f'b-{bid} field pending held no count: "many"' in warned
    assert f'b-{bid} field total holds no count: "lots"' in warned
    r.delete(f"b-{bid}-jids")
    r.set(f"b-{bid}-jids", "written by something else")
    refused = pytest.raises(wurk.BatchError, match=f"b-{bid}-jids holds a string, not a set")
    with refused, wurk.Batch(bid).jobs():
        work.perform_async("c")
    assert r.llen("queue:default") == 2  # a and b: nothing more pushed
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="wurk"):
        assert batch.remove_jobs(str(jid)) == 0
        assert batch.invalidate_all() == 0
    warned = " | ".join(rec.getMessage() for rec in caplog.records)
    assert "no job is removed from it" in warned and "it is not invalidated" in warned
    assert r.hget(f"b-{bid}", "invalidated") is None

    fresh = all_callbacks(wurk.Batch())
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="wurk"), fresh.jobs():
        work.perform_async("d")
        r.delete(f"b-{fresh.bid}-notify")
        r.hset(f"b-{fresh.bid}-notify", "x", "y")
    assert r.hget(f"b-{fresh.bid}", "pending") == "2"  # the block's end was not counted
    assert any(f"b-{fresh.bid}-notify holds a hash, not a set" in rec.getMessage() and
               "first jobs block is not counted" in rec.getMessage()
               for rec in caplog.records)


@pytest.mark.parametrize("bad", ["batches", "tags:import", "b-{bid}-tags"])
def test_a_created_batch_meeting_a_key_of_another_type_writes_nothing(
        fast: wurk.Config, r: redis.Redis, bad: str) -> None:
    """The create wrote the batch's hash, then ZADDed `batches` and SADDed each tag's index:
    one of them of another type (written by hand) failed it there (Redis does not roll back),
    leaving a half-made batch, pending, that no block ever closed, for 30 days. Now the
    create refuses first, naming the key, with nothing written."""
    batch = wurk.Batch(tags=["import"])
    key = bad.format(bid=batch.bid)
    r.set(key, "written by something else")
    with pytest.raises(wurk.BatchError, match=f"{key} holds a string, not a"), batch.jobs():
        work.perform_async("a")
    assert r.keys(f"b-{batch.bid}*") == ([key] if key.startswith("b-") else [])
    assert r.llen("queue:default") == 0 and r.get(key) == "written by something else"


@pytest.mark.parametrize("linger", ["nan", "inf", "1e300", "1e15"])
def test_a_stored_linger_that_expire_refuses_still_pushes_the_success_callbacks(
        fast: wurk.Config, r: redis.Redis, linger: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """The success's expiry read the stored linger with tonumber, which takes 'nan' and
    'inf', and EXPIRE refused the result after success was marked fired: the script failed
    half-way, the success callbacks were never pushed, and the batch could not fire again.
    Now such a linger is warned about, the default is kept, and every callback is pushed."""
    batch = all_callbacks(wurk.Batch())
    with batch.jobs():
        jid = work.perform_async("a")
    r.hset(f"b-{batch.bid}", "linger", linger)
    with caplog.at_level(logging.WARNING, logger="wurk"), wurk.redis() as conn:
        assert accounting.record(conn, fast, batch.bid, str(jid), "success")
    assert sorted(queued_callbacks(r)) == ["complete", "success"]
    assert 24 * 3600 - 60 < r.ttl(f"b-{batch.bid}") <= 24 * 3600
    assert any(f"b-{batch.bid} field linger holds no number of seconds" in rec.getMessage()
               for rec in caplog.records)


@pytest.mark.parametrize("linger", [float("nan"), float("inf"), 11 * 365 * 24 * 3600])
def test_a_linger_expire_cannot_take_is_refused_when_the_batch_is_described(
        linger: float) -> None:
    with pytest.raises(wurk.BatchError, match="linger must be a number of seconds"):
        wurk.Batch(linger=linger)


# -- the server middleware's verdicts ---------------------------------------------------------
def test_the_worker_link_counts_success_failure_and_nothing_else(
        fast: wurk.Config, r: redis.Redis) -> None:
    from wurk.batch.middleware import BatchServerMiddleware
    from wurk.errors import Shutdown

    batch = wurk.Batch()
    with batch.jobs():
        jids = [str(work.perform_async(f"m{i}")) for i in range(4)]
    link = BatchServerMiddleware(fast)
    payloads = [{"class": "BatchTest::work", "args": [], "jid": jid, "bid": batch.bid}
                for jid in jids]

    def raising(exc: BaseException) -> Callable[[], None]:
        def call() -> None:
            raise exc
        return call

    def rescheduled() -> None:  # what a rate limiter does: bump, store, return
        payloads[3]["overrated"] = 1

    link(None, payloads[0], "default", lambda: None)
    with pytest.raises(RuntimeError):
        link(None, payloads[1], "default", raising(RuntimeError("no")))
    with pytest.raises(Shutdown):
        link(None, payloads[2], "default", raising(Shutdown()))
    link(None, payloads[3], "default", rescheduled)
    status = wurk.BatchStatus(batch.bid)
    assert (status.pending, status.failures, status.failed_jids) == (3, 1, [jids[1]])
    assert not r.sismember(f"b-{batch.bid}-jids", jids[0])
    assert r.sismember(f"b-{batch.bid}-jids", jids[2])  # interrupted: it runs again
    assert r.sismember(f"b-{batch.bid}-jids", jids[3])  # rescheduled: it has not run


def test_callback_options_reach_the_callback_byte_for_byte(fast: wurk.Config,
                                                          r: redis.Redis) -> None:
    tricky = {"quote": 'a "quoted" ] } , [ {', "nested": [[], {}, [1, [2]]], "n": None,
              "unicode": "é ✓", "slash": "a\\\\b", "big": 12345678901234567890, "f": 0.1}
    batch = wurk.Batch()
    batch.on("success", Notes, tricky)
    with batch.jobs():
        jid = work.perform_async("only")
    with wurk.redis() as conn:
        accounting.record(conn, fast, batch.bid, str(jid), "success")
    (raw,) = [raw for raw in r.lrange("queue:default", 0, -1) if "wurk.batch.Callback" in raw]
    event, bid, target, options = json.loads(raw)["args"]
    assert (event, bid, target) == ("success", batch.bid, "BatchTest::Notes")
    assert options == tricky


def test_async_pushes_inside_a_block_join_the_batch(fast: wurk.Config, r: redis.Redis) -> None:
    import asyncio

    async def push(batch: wurk.Batch) -> list[str | None]:
        with batch.jobs():
            one = await work.aperform_async("async one")
            many = await work.aperform_bulk([["async two"], ["async three"]])
        return [one, *many]

    batch = wurk.Batch()
    jids = asyncio.run(push(batch))
    assert all(jids) and wurk.BatchStatus(batch.bid).total == 3
    assert {json.loads(raw)["bid"] for raw in r.lrange("queue:default", 0, -1)} == {batch.bid}


def test_a_count_is_sent_again_through_a_short_outage(redis_server: Server,
                                                      r: redis.Redis) -> None:
    """Redis unreachable for half a second while a job's success is counted: the count
    goes through once it is back, exactly once."""
    import threading

    from tests.helpers.faults import config_for
    from tests.helpers.proxy import FaultProxy
    from wurk.batch.middleware import count

    with FaultProxy(redis_server.port) as proxy:
        config = config_for(proxy.url, socket_timeout=1)
        try:
            batch = wurk.Batch(config=config)
            with batch.jobs():
                jids = [str(work.set(config=config).perform_async(f"o{i}")) for i in range(2)]
            proxy.cut()
            proxy.drop()
            threading.Timer(0.5, proxy.restore).start()
            assert count(config, batch.bid, jids[0], "success")
            assert not count(config, batch.bid, jids[0], "success")  # the replay: nothing
        finally:
            config.close()
    assert r.hget(f"b-{batch.bid}", "pending") == "1"


# -- with the limits: unique, expiring and rate-limited jobs ----------------------------------
@wurk.job(name="BatchTest::unique", unique_for=60)
def unique_job(n: int) -> None:
    work(f"unique-{n}")


@wurk.job(name="BatchTest::limited")
def limited(name: str) -> None:
    """Over its (pretend) rate limit on the first run: rescheduled, then it runs."""
    from wurk.limiter import OverLimit

    with wurk.redis() as conn:
        if conn.call("SETNX", f"limited:{name}", 1):
            raise OverLimit(None, retry_after=0.1)
    work(name)


@pytest.fixture
def limited_worker(redis_server: Server) -> Iterator[wurk.InProcessWorker]:
    config = wurk.configure(redis_url=redis_server.url, heartbeat_interval=0.2,
                            fetch_timeout=0.2, timeout=1, shutdown_grace=0.5,
                            scheduler_initial_wait=0, average_scheduled_poll_interval=0.2,
                            concurrency=4, tag="batches",
                            limiter_backoff=lambda limiter, job, exc: 1.0)
    running = wurk.embed(config)
    yield running
    running.stop()


def test_a_duplicate_unique_job_is_not_added_to_the_batch(fast: wurk.Config,
                                                          r: redis.Redis) -> None:
    batch = wurk.Batch()
    with batch.jobs():
        first = unique_job.perform_async(1)
        second = unique_job.perform_async(1)  # its lock is held: not pushed, not registered
        other = unique_job.perform_async(2)
    assert first is not None and second is None and other is not None
    assert wurk.BatchStatus(batch.bid).total == 2 and r.llen("queue:default") == 2
    assert r.get(f"unique:{json.loads(r.lindex('queue:default', -1))['unique_digest']}")


def test_a_batch_push_meeting_a_queue_of_another_type_takes_no_lock(
        fast: wurk.Config, r: redis.Redis) -> None:
    """The script took each job's unique lock, then raised at the queue key holding another
    type: the locks stayed, and every later push of those jobs was refused as a duplicate
    of a job nobody had. It now refuses before writing anything, naming the key."""
    r.set("queue:blocked", "not a list")
    batch = wurk.Batch()
    with pytest.raises(redis.ResponseError, match="queue:blocked holds a string"), \
            batch.jobs():
        unique_job.set(queue="blocked").perform_bulk([[1], [2]])
    assert r.keys("unique:*") == [] and not r.sismember("queues", "blocked")


@pytest.mark.parametrize("lock", ["hash", "no expiry"])
def test_a_batch_push_replaces_a_lock_no_push_writes_and_names_it(
        fast: wurk.Config, r: redis.Redis, lock: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """A unique lock of another type raised half-way through a bulk push (the jobs before it
    pushed, the batch counting none); one holding a jid without an expiry refused its job
    for good. Each is replaced by the job's lock, with a warning naming it."""
    unique_job.perform_async(2)  # once outside a batch, to learn its lock
    key = f"unique:{json.loads(r.lindex('queue:default', 0))['unique_digest']}"
    r.delete("queue:default", key)
    if lock == "hash":
        r.hset(key, "x", "1")
    else:
        r.set(key, "someone-else")
    batch = wurk.Batch()
    with caplog.at_level(logging.WARNING, logger="wurk"), batch.jobs():
        jids = unique_job.perform_bulk([[1], [2]])
    assert all(jids) and r.get(key) == str(jids[1]) and r.pttl(key) > 0
    assert wurk.BatchStatus(batch.bid).total == 2 and r.llen("queue:default") == 2
    assert key in caplog.text and "replaced by the lock of job" in caplog.text


def test_an_expired_job_counts_as_a_success(fast: wurk.Config, r: redis.Redis) -> None:
    batch = all_callbacks(wurk.Batch())
    with batch.jobs():
        work.set(expires_in=0.05).perform_async("too late")
    time.sleep(0.2)  # past its deadline before any worker sees it
    worker = wurk.embed(fast)
    try:
        settle(r, 2)
    finally:
        worker.stop()
    assert events(r, batch.bid) == ["complete", "success"]
    assert r.llen("ran") == 0  # dropped unrun


def test_a_rate_limited_job_is_not_counted_until_it_runs(limited_worker: wurk.InProcessWorker,
                                                         r: redis.Redis) -> None:
    batch = all_callbacks(wurk.Batch())
    with batch.jobs():
        limited.perform_async("once")
    wait_until(lambda: r.zcard("schedule") == 1, what="the reschedule")  # due in 1 s
    status = wurk.BatchStatus(batch.bid)
    assert (status.pending, status.failures, status.complete) == (1, 0, False)
    settle(r, 2)
    assert events(r, batch.bid) == ["complete", "success"]
    assert r.lrange("ran", 0, -1) == ["once"]
    assert wurk.BatchStatus(batch.bid).failures == 0


@wurk.job(name="BatchTest::async_work")
async def async_work(name: str) -> None:
    async with wurk.redis() as conn:
        await conn.call("RPUSH", "ran", name)


def test_async_jobs_of_a_batch_are_counted(worker: wurk.InProcessWorker, r: redis.Redis) -> None:
    batch = all_callbacks(wurk.Batch())
    with batch.jobs():
        for n in range(5):
            async_work.perform_async(f"a{n}")
    settle(r, 2)
    assert events(r, batch.bid) == ["complete", "success"]
    assert r.llen("ran") == 5


@wurk.job(name="BatchTest::async_fail", retry=1)
async def async_fail(name: str) -> None:
    raise RuntimeError(f"{name} fails")


def test_an_async_jobs_failure_is_counted(worker: wurk.InProcessWorker, r: redis.Redis) -> None:
    batch = all_callbacks(wurk.Batch())
    with batch.jobs():
        jid = async_fail.perform_async("async")
    settle(r, 1)
    assert events(r, batch.bid) == ["complete"]
    status = wurk.BatchStatus(batch.bid)
    assert (status.pending, status.failures, status.failed_jids) == (1, 1, [jid])


# -- failure modes -----------------------------------------------------------------------------
class Vanishing(wurk.Job, name="BatchTest::Vanishing"):
    """A callback class the worker loses (unregistered) after the batch named it."""

    def on_success(self, status: wurk.BatchStatus, options: dict[str, Any]) -> None:
        note("success", status, options)


def test_a_callback_target_missing_in_the_worker_fails_then_retries_once_it_is_there(
        worker: wurk.InProcessWorker, r: redis.Redis) -> None:
    """batches.md: "A callback target missing in the worker fails the callback job
    (wurk.BatchError naming the target); it retries like any job once a worker has it"."""
    batch = wurk.Batch()
    batch.on("success", Vanishing, {})
    definition = wurk.registry.lookup("BatchTest::Vanishing")
    wurk.registry.unregister("BatchTest::Vanishing")
    try:
        with batch.jobs():
            work.perform_async("only")
        wait_until(lambda: RetrySet().size() == 1, what="the failed callback job")
        [entry] = list(RetrySet())
        assert entry.item["class"] == "wurk.batch.Callback"
        assert entry.item["error_class"] == "wurk.BatchError"
        assert "'BatchTest::Vanishing' is not a job registered" in entry.item["error_message"]
        assert fired(r) == []
    finally:
        wurk.registry.register(definition)
    assert RetrySet().retry_all() == 1
    settle(r, 1)
    assert events(r, batch.bid) == ["success"]


def test_dead_batches_drops_the_entries_of_batches_that_expired(
        worker: wurk.InProcessWorker, r: redis.Redis) -> None:
    """batches.md: "The batches index and batch-died have no expiry of their own: entries
    whose batch expired are removed when they are listed"."""
    r.set("fail:gone", 1)
    batch = all_callbacks(wurk.Batch())
    with batch.jobs():
        work_once.perform_async("gone")
    settle(r, 2)
    assert DeadBatches().bids() == [batch.bid] and r.smembers("batch-died") == {batch.bid}
    r.delete(f"b-{batch.bid}")  # expired
    assert DeadBatches().bids() == [] and len(DeadBatches()) == 0
    assert not r.exists("batch-died")  # removed, not only hidden


def test_dead_batches_retry_passes_over_a_dead_entry_that_cannot_be_pushed(
        config: wurk.Config, r: redis.Redis) -> None:
    """A dead job of the batch naming a queue no one can push to stays in the dead set; the
    batch's other dead jobs go back all the same (the retry used to stop at the first)."""
    batch = wurk.Batch()
    with batch.jobs():
        work.perform_async("kept")
    rows = []
    for n, queue in enumerate(["bad|queue", "dead-batch-2", "dead-batch-2"]):
        jid = f"{n + 1:024x}"
        rows.append(jid)
        job = {"class": "BatchTest::work", "args": [n], "queue": queue, "jid": jid,
               "bid": batch.bid, "created_at": 1.0, "retry": True, "failed_at": 1.0 + n,
               "error_class": "RuntimeError", "error_message": "down"}
        r.zadd("dead", {json.dumps(job): 1.0 + n})
    r.sadd(f"b-{batch.bid}-died", *rows)
    assert DeadBatches().retry(batch.bid) == 2
    assert r.llen("queue:dead-batch-2") == 2 and r.zcard("dead") == 1


def test_dead_batches_retry_sends_back_every_dead_job_past_ten_thousand(
        config: wurk.Config, r: redis.Redis) -> None:
    """batches.md: `retry(bid)` sends a batch's dead jobs back to their queues — all of
    them, not the first 10,000 of its `-died` set that `BatchStatus.dead_jids` lists."""
    batch = wurk.Batch()
    with batch.jobs():
        work.perform_async("kept")  # the batch's record; nothing runs it
    many = 10_050
    jids = [f"{n:024x}" for n in range(many)]
    pipe = r.pipeline(transaction=False)
    for n, jid in enumerate(jids):
        job = {"class": "BatchTest::work", "args": [f"dead-{n}"], "queue": "dead-batch",
               "jid": jid, "bid": batch.bid, "created_at": 1.0, "enqueued_at": 1.0,
               "retry": True, "failed_at": 1.0, "error_class": "RuntimeError",
               "error_message": "down"}
        pipe.zadd("dead", {json.dumps(job): time.time()})
    pipe.sadd(f"b-{batch.bid}-died", *jids)
    pipe.execute()
    assert DeadBatches().retry(batch.bid) == many
    assert r.llen("queue:dead-batch") == many and r.zcard("dead") == 0


batch_tenant: contextvars.ContextVar[str] = contextvars.ContextVar("batch_tenant")


@wurk.job(name="BatchTest::tenant_callback")
def tenant_callback(status: wurk.BatchStatus, options: dict[str, Any]) -> None:
    note("tenant", status, {"tenant": batch_tenant.get("<unset>")})


def test_callbacks_run_in_the_context_the_batch_was_created_in(fast: wurk.Config,
                                                               r: redis.Redis) -> None:
    """Batch callbacks capture context, as Sidekiq Pro 7.3.3's CurrentAttributes: the
    persisted variables set where the batch was created are set around its callbacks, though
    the job that fires them ran in another context."""
    wurk.context.persist(batch_tenant, config=fast)
    token = batch_tenant.set("acme")
    try:
        batch = wurk.Batch()
        batch.on("success", tenant_callback)
        with batch.jobs():
            pass  # the no-op job fires the callback
    finally:
        batch_tenant.reset(token)
    (raw,) = [raw for raw in r.lrange("queue:default", 0, -1) if "wurk.batch.Callback" in raw
              ] or [""]  # not fired yet: the no-op job has to run first
    assert raw == ""
    running = wurk.embed(fast)
    try:
        settle(r, 1)
    finally:
        running.stop()
    assert fired(r) == [f'tenant:{batch.bid}:{{"tenant": "acme"}}']


def test_a_stored_callback_context_that_is_no_object_is_named_and_left_out(
        fast: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    batch = wurk.Batch()
    batch.on("success", Notes)
    with batch.jobs():
        jid = work.perform_async("only")
    r.hset(f"b-{batch.bid}", "context", "[1, 2]")  # written by something else
    with caplog.at_level(logging.WARNING, logger="wurk"), wurk.redis() as conn:
        accounting.record(conn, fast, batch.bid, str(jid), "success")
    (raw,) = [raw for raw in r.lrange("queue:default", 0, -1) if "wurk.batch.Callback" in raw]
    assert "wurk_ctx" not in json.loads(raw)
    assert f"b-{batch.bid} field context" in caplog.text
