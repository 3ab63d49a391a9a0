"""Time limits and ``wurk.cancel`` in a real worker (a launcher in this process, its
threads and event loop as in production): a job past its limit fails with ``JobTimeout``
and its thread runs the next job; a job stuck in C code is reported; cancel removes a
waiting job and stops a running one, sync, async or iterable, touching nothing else."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.faults import InProcessWorker
from tests.helpers.runner import Drain
from tests.helpers.sets import retry_entry
from tests.helpers.wait import wait_until
from wurk.api import RetrySet, WorkSet
from wurk.control.running import STUCK_AFTER
from wurk.metrics.prometheus import cluster_exposition

LEDGER = "limits:ledger"
_client: redis.Redis | None = None


def ledger() -> redis.Redis:
    assert _client is not None
    return _client


def note(*parts: object) -> None:
    ledger().rpush(LEDGER, ":".join(str(p) for p in parts))


def notes(r: redis.Redis) -> list[str]:
    return list(r.lrange(LEDGER, 0, -1))


@wurk.job(name="limits.spin", timeout=1, retry=1)
def spin(seconds: float) -> None:
    """Loops in Python (no I/O): only an exception raised in its thread stops it."""
    note("start", wurk.current_jid(), time.time())
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    note("done", wurk.current_jid())


@wurk.job(name="limits.nap", timeout=1, retry=1)
async def nap(seconds: float) -> None:
    note("start", wurk.current_jid(), time.time())
    await asyncio.sleep(seconds)
    note("done", wurk.current_jid())


@wurk.job(name="limits.stuck", timeout=0.5, retry=0)
def stuck(seconds: float) -> None:
    """Inside C code (time.sleep) the interrupt waits until it returns."""
    note("start", wurk.current_jid(), time.time())
    time.sleep(seconds)
    note("done", wurk.current_jid())


@wurk.job(name="limits.mark")
def mark(text: str) -> None:
    note("mark", text)


@wurk.job(name="limits.amark")
async def amark(text: str) -> None:
    note("mark", text)


SLOT_SYNC = wurk.limiter.concurrent("limits-slot-sync", 1, wait_timeout=0, lock_timeout=600)
SLOT_ASYNC = wurk.limiter.concurrent("limits-slot-async", 1, wait_timeout=0, lock_timeout=600)
# The slot holders' limit (2 s) comes after their start note even on a loaded machine.


@wurk.job(name="limits.slot_holder_sync", timeout=2, retry=0, rate_limit=SLOT_SYNC)
def slot_holder_sync() -> None:
    note("start", wurk.current_jid(), time.time())
    while True:
        time.sleep(0.01)


@wurk.job(name="limits.slot_holder_async", timeout=2, retry=0, rate_limit=SLOT_ASYNC)
async def slot_holder_async() -> None:
    note("start", wurk.current_jid(), time.time())
    await asyncio.sleep(30)


@wurk.job(name="limits.busy_loop", retry=3)
def busy_loop() -> None:
    note("start", wurk.current_jid(), time.time())
    while True:
        ledger().incr("limits:ticks")
        time.sleep(0.01)


@wurk.job(name="limits.async_loop", retry=3)
async def async_loop() -> None:
    note("start", wurk.current_jid(), time.time())
    while True:
        ledger().incr("limits:ticks")
        await asyncio.sleep(0.01)


class Walk(wurk.IterableJob, name="limits.walk"):
    flush_interval = 0.2

    def build_enumerator(self, *, cursor: int | None) -> Any:
        return wurk.iteration.ids(0, 100_000, cursor=cursor)

    def each_iteration(self, item: int) -> None:
        if item == 0:
            note("start", self.jid, time.time())
        ledger().incr("limits:ticks")
        time.sleep(0.01)

    def on_cancel(self) -> None:
        note("on_cancel", self.jid)

    def on_stop(self) -> None:
        note("on_stop", self.jid)


@pytest.fixture
def worker(redis_server: Any, r: redis.Redis) -> Iterator[InProcessWorker]:
    global _client
    _client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    running = InProcessWorker(redis_server.url, concurrency=2, control_interval=0.1,
                              heartbeat_interval=0.2).start()
    wurk.configure(redis_url=redis_server.url)
    yield running
    running.stop()
    _client.close()
    _client = None


def started(r: redis.Redis, jid: str) -> float:
    line = next(n for n in notes(r) if n.startswith(f"start:{jid}:"))
    return float(line.rsplit(":", 1)[1])


# -- time limits ---------------------------------------------------------------------------------
@pytest.mark.parametrize("job", [spin, nap], ids=["sync", "async"])
def test_a_job_past_its_limit_fails_with_job_timeout_and_its_thread_goes_on(
        worker: InProcessWorker, r: redis.Redis, job: Any) -> None:
    jid = job.perform_async(30)
    wait_until(lambda: retry_entry(r, jid) is not None, timeout=20, what="the retry")
    failed = retry_entry(r, jid)
    assert failed is not None and failed["error_class"] == "wurk.JobTimeout"
    assert "time limit of 1 s" in failed["error_message"]
    took = failed["failed_at"] / 1000 - started(r, jid)
    print(f"\n{job.name}: JobTimeout {took:.2f} s after the job started (limit 1 s)")
    # Before the hard stop (STUCK_AFTER = 2 s after the limit) with room for a loaded machine.
    assert took < 1 + STUCK_AFTER, took
    assert f"done:{jid}" not in notes(r)
    mark.perform_async("after")  # the worker's threads go on
    wait_until(lambda: "mark:after" in notes(r), what="the next job")
    worker.assert_healthy(2)


@pytest.mark.parametrize(("job", "limiter"), [(slot_holder_sync, SLOT_SYNC),
                                               (slot_holder_async, SLOT_ASYNC)],
                         ids=["sync", "async"])
def test_a_job_past_its_limit_gives_back_its_concurrency_slot(
        worker: InProcessWorker, r: redis.Redis, job: Any, limiter: Any) -> None:
    """A job whose own ``rate_limit`` (a concurrent limiter) holds a slot for its run, stopped
    by its time limit: the slot is given back (not held until ``lock_timeout``)."""
    from wurk.limiter.base import forget_registrations

    forget_registrations()
    jid = job.perform_async()
    wait_until(lambda: r.zcard("dead") == 1, what="the timed-out job in the dead set")
    assert json.loads(r.zrange("dead", 0, -1)[0])["error_class"] == "wurk.JobTimeout"
    assert any(n.startswith(f"start:{jid}:") for n in notes(r))
    with limiter.within_limit():  # the only slot is free again: not OverLimit
        pass


def passthrough(job: Any, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
    """An application's sync server link: around an async job it runs in a helper thread,
    the rest of the chain (the Stopper, the job) in a task of its own."""
    return call_next()


@pytest.mark.parametrize("stop", ["timeout", "cancel"])
def test_an_async_job_under_an_applications_sync_link_is_stopped_all_the_same(
        redis_server: Any, r: redis.Redis, stop: str) -> None:
    global _client
    _client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    running = InProcessWorker(redis_server.url, concurrency=2, control_interval=0.1,
                              heartbeat_interval=0.2)
    running.config.server_middleware.add(passthrough)
    running.start()
    wurk.configure(redis_url=redis_server.url)
    try:
        jid = (nap.perform_async(30) if stop == "timeout" else async_loop.perform_async())
        wait_until(lambda: any(n.startswith(f"start:{jid}:") for n in notes(r)),
                   what="a start")
        if stop == "timeout":
            wait_until(lambda: retry_entry(r, jid) is not None, what="the retry")
            failed = retry_entry(r, jid)
            assert failed is not None and failed["error_class"] == "wurk.JobTimeout"
        else:
            wait_until(lambda: any(w.job.jid == jid for w in WorkSet()), what="Busy")
            assert wurk.cancel(jid).running_on
            wait_until(lambda: r.get("wurk:stat:cancelled") == "1", what="the cancel")
            assert r.zcard("retry") == 0 and r.zcard("dead") == 0
        wait_until(lambda: not any(w.job.jid == jid for w in WorkSet()), what="its end")
        assert f"done:{jid}" not in notes(r)
    finally:
        running.stop()
        _client.close()
        _client = None


def test_the_workers_default_limit_applies_and_the_jobs_own_wins(redis_server: Any,
                                                                 r: redis.Redis) -> None:
    global _client
    _client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    running = InProcessWorker(redis_server.url, concurrency=1, job_timeout=0.5).start()
    try:
        wurk.configure(redis_url=redis_server.url)
        no_limit = wurk.push({"class": "limits.spin", "args": [0.8], "timeout": 5})
        limited = wurk.push({"class": "limits.busy_loop", "args": [], "retry": 0})
        wait_until(lambda: f"done:{no_limit}" in notes(r), what="the job with its own limit")
        wait_until(lambda: r.zcard("dead") == 1, what="the job under the default")
        dead = json.loads(r.zrange("dead", 0, -1)[0])
        assert dead["jid"] == limited and dead["error_class"] == "wurk.JobTimeout"
    finally:
        running.stop()
        _client.close()
        _client = None


def test_a_job_stuck_in_c_code_is_reported_then_times_out(
        worker: InProcessWorker, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    from tests.web.conftest import browse
    from wurk.web import create_app

    with caplog.at_level("WARNING", logger="wurk"):
        jid = stuck.perform_async(0.5 + STUCK_AFTER + 1.5)

        def shown_stuck() -> bool:
            return any(w.job.jid == jid and w.stuck_at is not None for w in WorkSet())

        wait_until(shown_stuck, timeout=20, what="the Busy page's stuck mark")
        wait_until(lambda: any(f"job {jid} did not stop" in rec.getMessage()
                               and "it is stuck" in rec.getMessage()
                               for rec in caplog.records), what="the warning")
    with browse(create_app(wurk.default_config())) as client:
        busy = client.get("/busy").text
    assert "stuck: told to stop" in busy and "and still running" in busy
    assert worker.launcher.stops.stuck() == 1 and worker.launcher.stops.stuck_total == 1
    assert worker.launcher.busy.marked() == 1  # the wurk_jobs_stuck gauge reads this
    wait_until(lambda: r.zcard("dead") == 1, timeout=20, what="the job to end")
    dead = json.loads(r.zrange("dead", 0, -1)[0])
    assert dead["error_class"] == "wurk.JobTimeout"  # raised once it came back to Python
    wait_until(lambda: not any(w.job.jid == jid for w in WorkSet()), what="the job to leave")


def test_a_timeout_option_that_is_not_a_time_is_refused_at_definition() -> None:
    with pytest.raises(wurk.ConfigError, match="time limit in seconds"):
        wurk.job(name="limits.bad", timeout=0)(lambda: None)
    with pytest.raises(wurk.ConfigError, match="time limit in seconds"):
        spin.set(timeout="soon")


@pytest.mark.parametrize("bad", [-1, 0.0, 7 * 86400 + 1, float("nan"), "30"])
def test_a_negative_or_over_seven_days_timeout_is_refused_at_definition_and_push(
        bad: object) -> None:
    """docs: "A bad `timeout` (0, negative, not a number, over 7 days) is refused when the
    job is defined or the push is made, naming the option" — and 7 days itself is taken."""
    with pytest.raises(wurk.ConfigError, match=r"option timeout=.* is invalid"):
        wurk.job(name="limits.bad", timeout=bad)(lambda: None)
    with pytest.raises(wurk.ConfigError, match=r"option timeout=.* is invalid"):
        spin.set(timeout=bad)
    assert spin.set(timeout=7 * 86400) is not None


def test_the_worker_wide_time_limit_is_off_by_default() -> None:
    assert wurk.Config().job_timeout is None


# -- cancel ------------------------------------------------------------------------------------
def test_cancel_removes_a_queued_job_and_touches_nothing_else(config: wurk.Config,
                                                             r: redis.Redis) -> None:
    jids = [mark.perform_async(str(n)) for n in range(5)]
    before = r.lrange("queue:default", 0, -1)
    done = wurk.cancel(jids[2])
    assert done.removed_from == ["queue:default"] and done.found
    after = r.lrange("queue:default", 0, -1)
    assert after == [raw for raw in before if jids[2] not in raw]
    assert r.get("wurk:stat:cancelled") == "1"
    body, _ = cluster_exposition(config)
    assert b"wurk_jobs_cancelled_total 1.0" in body


@wurk.job(name="limits.unique_mark", unique_for=600)
def unique_mark(text: str) -> None:
    note("mark", text)


@pytest.mark.parametrize("where", ["queue:default", "schedule"])
def test_cancel_of_a_waiting_unique_job_releases_its_lock(config: wurk.Config,
                                                          r: redis.Redis, where: str) -> None:
    """time-limits-and-cancel.md: a job in a queue is "removed (its unique lock
    released)": the same job can be pushed again at once."""
    push = unique_mark.perform_async if where == "queue:default" else \
        (lambda text: unique_mark.perform_in(60, text))
    jid = push("once")
    assert jid is not None and push("once") is None  # the lock is held
    assert wurk.cancel(jid).removed_from == [where]
    assert not r.keys("unique:*")
    assert push("once") is not None


def test_cancel_removes_a_scheduled_job(config: wurk.Config, r: redis.Redis) -> None:
    keep, gone = mark.perform_in(60, "keep"), mark.perform_in(60, "gone")
    assert wurk.cancel(gone).removed_from == ["schedule"]
    assert [json.loads(raw)["jid"] for raw in r.zrange("schedule", 0, -1)] == [keep]


def test_cancel_removes_a_retrying_job(config: wurk.Config, r: redis.Redis) -> None:
    for n in (1, 2):
        RetrySet(config).schedule(time.time() + 60, {
            "class": "limits.mark", "args": [str(n)], "queue": "default", "jid": f"{n:024x}",
            "retry_count": 1, "error_class": "E", "error_message": "m", "failed_at": 1})
    assert wurk.cancel(f"{1:024x}").removed_from == ["retry"]
    assert [json.loads(raw)["jid"] for raw in r.zrange("retry", 0, -1)] == [f"{2:024x}"]


@pytest.mark.parametrize("job", [busy_loop, async_loop], ids=["sync", "async"])
def test_cancel_stops_a_running_job_which_is_not_retried(worker: InProcessWorker,
                                                         r: redis.Redis, job: Any) -> None:
    other = job.perform_async()
    jid = job.perform_async()
    wait_until(lambda: any(n.startswith(f"start:{jid}:") for n in notes(r)), what="a start")
    wait_until(lambda: any(w.job.jid == jid for w in WorkSet()), what="the Busy page")
    done = wurk.cancel(jid)
    assert done.running_on and not done.removed_from
    wait_until(lambda: not any(w.job.jid == jid for w in WorkSet()), timeout=10,
               what="the job to stop")
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0  # not a failure
    assert r.get("wurk:stat:cancelled") == "1"
    assert any(w.job.jid == other for w in WorkSet())  # the other one runs on
    wurk.cancel(other)
    wait_until(lambda: not any(True for _ in WorkSet()), what="the other job to stop")
    worker.assert_healthy(2)
    mark.perform_async("after")
    wait_until(lambda: "mark:after" in notes(r), what="the next job")


@wurk.job(name="limits.unique_loop", unique_for=600, retry=3)
def unique_loop(n: int) -> None:
    note("start", wurk.current_jid(), time.time())
    while True:
        ledger().incr("limits:ticks")
        time.sleep(0.01)


@wurk.job(name="limits.unique_async_loop", unique_for=600, retry=3)
async def unique_async_loop(n: int) -> None:
    note("start", wurk.current_jid(), time.time())
    while True:
        ledger().incr("limits:ticks")
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("job", [unique_loop, unique_async_loop], ids=["sync", "async"])
def test_cancel_of_a_running_unique_job_releases_its_lock(worker: InProcessWorker,
                                                          r: redis.Redis, job: Any) -> None:
    """A cancelled job never runs again, waiting or running: its lock goes with it, or the
    same job pushed again was refused as a duplicate for the rest of ``unique_for``."""
    jid = job.perform_async(1)
    assert jid is not None and job.perform_async(1) is None  # the lock is held
    wait_until(lambda: any(n.startswith(f"start:{jid}:") for n in notes(r)), what="a start")
    wait_until(lambda: any(w.job.jid == jid for w in WorkSet()), what="the Busy page")
    assert wurk.cancel(jid).running_on
    wait_until(lambda: r.get("wurk:stat:cancelled") == "1", timeout=10, what="the cancel")
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0
    wait_until(lambda: not r.keys("unique:*"), timeout=5, what="the lock's release")
    again = job.perform_async(1)
    assert again is not None
    wurk.cancel(again)
    wait_until(lambda: not any(True for _ in WorkSet()), what="the second run to stop")


def test_cancel_stops_a_running_iterable_job_at_its_flush(worker: InProcessWorker,
                                                          r: redis.Redis) -> None:
    jid = Walk.perform_async()
    wait_until(lambda: any(n.startswith(f"start:{jid}:") for n in notes(r)), what="a start")
    wurk.cancel(jid)
    wait_until(lambda: f"on_cancel:{jid}" in notes(r), what="on_cancel")
    assert r.hexists(f"it-{jid}", "cancelled")
    assert r.zcard("retry") == 0 and r.llen("queue:default") == 0


def test_a_job_fetched_after_its_cancel_arrived_never_runs(worker: InProcessWorker,
                                                           r: redis.Redis) -> None:
    jid = "f" * 24
    wait_until(lambda: worker.launcher.heartbeat.beat_age() is not None, what="a heartbeat")
    assert not wurk.cancel(jid).found  # nowhere yet: every live process remembers it
    wait_until(lambda: r.llen(f"wurk:cancel:{worker.launcher.identity}") == 0,
               what="the worker to take the cancel")
    wurk.push({"class": "limits.mark", "args": ["late"], "jid": jid})
    mark.perform_async("after")
    wait_until(lambda: "mark:after" in notes(r), what="the next job")
    assert "mark:late" not in notes(r) and r.zcard("retry") == 0


def test_an_iterable_job_fetched_after_its_cancel_arrived_runs_on_cancel_and_no_item(
        worker: InProcessWorker, r: redis.Redis) -> None:
    """iterable-jobs.md: a copy of a cancelled iterable job that starts later "finds the
    mark, runs on_cancel then on_stop, and runs none of its items" and ends as done. The
    worker that heard the cancel refused it before its body (``JobCancelled``), so neither
    hook ran."""
    jid = "c" * 24
    wait_until(lambda: worker.launcher.heartbeat.beat_age() is not None, what="a heartbeat")
    assert not wurk.cancel(jid).found
    wait_until(lambda: r.llen(f"wurk:cancel:{worker.launcher.identity}") == 0,
               what="the worker to take the cancel")
    wurk.push({"class": "limits.walk", "args": [], "jid": jid})
    mark.perform_async("after")
    wait_until(lambda: "mark:after" in notes(r), what="the next job")
    wait_until(lambda: f"on_stop:{jid}" in notes(r), what="on_stop")
    assert [n for n in notes(r) if n.endswith(jid)] == [f"on_cancel:{jid}", f"on_stop:{jid}"]
    assert r.get("limits:ticks") is None  # none of its items ran
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0 and r.hexists(f"it-{jid}", "cancelled")


@pytest.mark.parametrize("job", [mark, amark], ids=["sync", "async"])
def test_a_batch_job_fetched_after_its_cancel_arrived_never_runs_and_counts_dead(
        worker: InProcessWorker, r: redis.Redis, job: Any) -> None:
    """As above, in a batch: the job refused at its start counts dead there, so the batch
    completes (an async job is refused as its walk begins, ``Stopper.wurk_plan``)."""
    jid = "e" * 24
    wait_until(lambda: worker.launcher.heartbeat.beat_age() is not None, what="a heartbeat")
    assert not wurk.cancel(jid).found
    wait_until(lambda: r.llen(f"wurk:cancel:{worker.launcher.identity}") == 0,
               what="the worker to take the cancel")
    batch = wurk.Batch()
    with batch.jobs():
        wurk.push({"class": job.name, "args": ["late"], "jid": jid})
    wait_until(lambda: wurk.BatchStatus(batch.bid).complete, what="the batch to complete")
    assert wurk.BatchStatus(batch.bid).dead_jids == [jid]
    assert "mark:late" not in notes(r) and r.zcard("retry") == 0 and r.zcard("dead") == 0
    # Counted by the cancel link, outside the batch link: after the batch completes.
    wait_until(lambda: r.get("wurk:stat:cancelled") == "1", what="the cancelled count")


def test_cancelling_an_unknown_jid_says_so(config: wurk.Config) -> None:
    done = wurk.cancel("0" * 24)
    assert not done.found and "was not found waiting or running" in str(done)


@wurk.job(name="limits.astubborn", timeout=0.5, retry=0)
async def astubborn() -> None:
    """The async twin: its timeout arrives as its task's ``CancelledError``."""
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        note("caught", wurk.current_jid())


@wurk.job(name="limits.stubborn", timeout=0.5, retry=0)
def stubborn() -> None:
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            pass
    except wurk.JobTimeout:
        note("caught", wurk.current_jid())


@pytest.mark.parametrize("job", [stubborn, astubborn], ids=["sync", "async"])
def test_a_job_that_catches_its_timeout_and_returns_counts_as_finished(
        worker: InProcessWorker, r: redis.Redis, caplog: pytest.LogCaptureFixture,
        job: Any) -> None:
    with caplog.at_level("WARNING", logger="wurk"):
        jid = job.perform_async()
        wait_until(lambda: f"caught:{jid}" in notes(r), what="the job to catch it")
        wait_until(lambda: not any(w.job.jid == jid for w in WorkSet()), what="its end")
        wait_until(lambda: any("caught the error and returned" in rec.getMessage()
                               for rec in caplog.records), what="the warning")
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0


@wurk.job(name="limits.swallower", timeout=1, retry=1)
def swallower() -> None:
    """Catches every error of its work and carries on, as ``except Exception:`` around a
    job's work does: its time limit's ``JobTimeout`` too."""
    note("start", wurk.current_jid(), time.time())
    while True:
        try:
            while True:
                ledger().incr("limits:ticks")
                time.sleep(0.01)
        except Exception as exc:
            note("caught", wurk.current_jid(), type(exc).__name__)


@wurk.job(name="limits.aswallower", timeout=1, retry=1)
async def aswallower() -> None:
    """Swallows its first cancellation and waits on."""
    note("start", wurk.current_jid(), time.time())
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        note("caught", wurk.current_jid(), "CancelledError")
    await asyncio.sleep(30)
    note("done", wurk.current_jid())


@pytest.mark.parametrize("job", [swallower, aswallower], ids=["sync", "async"])
def test_a_job_that_catches_its_timeout_and_runs_on_is_stopped_again_and_retried(
        worker: InProcessWorker, r: redis.Redis, caplog: pytest.LogCaptureFixture,
        job: Any) -> None:
    """time-limits-and-cancel.md: caught and run on, the stop is raised again
    ``STUCK_AFTER`` seconds later (sync: an error ``except Exception`` does not catch;
    async: its task cancelled again); the job fails with ``JobTimeout`` into its retries,
    and its thread takes the next job."""
    with caplog.at_level("WARNING", logger="wurk"):
        jid = job.perform_async()
        wait_until(lambda: retry_entry(r, jid) is not None, timeout=20, what="the retry")
        # The warning follows the second stop, which the job's failure may overtake: read
        # while the level still lets it in.
        wait_until(lambda: any(f"job {jid} did not stop" in rec.getMessage()
                               for rec in caplog.records), timeout=10, what="the warning")
    failed = retry_entry(r, jid)
    assert failed is not None and failed["error_class"] == "wurk.JobTimeout"
    assert "time limit of 1 s" in failed["error_message"] and failed["retry_count"] == 0
    caught = [n for n in notes(r) if n.startswith(f"caught:{jid}:")]
    assert len(caught) == 1  # the first stop, caught; the second went through
    took = failed["failed_at"] / 1000 - started(r, jid)
    print(f"\n{job.name}: JobTimeout {took:.2f} s after the start (limit 1 s, caught once)")
    assert 1 + STUCK_AFTER - 0.5 <= took <= 1 + STUCK_AFTER + 3
    assert f"done:{jid}" not in notes(r)
    assert any(f"job {jid} did not stop" in rec.getMessage() and "told again" in
               rec.getMessage() for rec in caplog.records)
    assert worker.launcher.stops.deadlines.forced_total == 1
    wait_until(lambda: not any(w.job.jid == jid for w in WorkSet()), what="its end")
    ticks = r.get("limits:ticks")
    mark.perform_async("after")  # the worker's threads go on
    wait_until(lambda: "mark:after" in notes(r), what="the next job")
    worker.assert_healthy(2)
    assert r.get("limits:ticks") == ticks  # the job's loop is over, not running beside


def test_a_bad_timeout_in_a_payload_from_elsewhere_falls_back_to_the_default() -> None:
    from wurk.control.stopper import limit_of

    for bad in (0, -1, "30", True, float("nan"), float("inf"), None, 7 * 86400 + 1, 1e300,
                int("9" * 400)):
        assert limit_of({"timeout": bad}, 7.0) == 7.0
    assert limit_of({"timeout": 7 * 86400}, 7.0) == 7 * 86400.0  # a week: what a push takes
    assert limit_of({"timeout": 2}, 7.0) == 2.0
    assert limit_of({}, None) is None


def test_a_job_whose_stored_timeout_no_float_holds_runs_and_is_said(
        worker: InProcessWorker, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    # JSON reads an integer of hundreds of digits; it once failed every run of the job with
    # an OverflowError (int too large to convert to float) instead of running it.
    raw = ('{"class":"limits.mark","queue":"default","args":["huge"],"jid":"b1g71me0u7",'
           '"retry":1,"created_at":1.0,"enqueued_at":1.0,"timeout":' + "9" * 400 + "}")
    with caplog.at_level("WARNING", logger="wurk"):
        r.lpush("queue:default", raw)
        r.sadd("queues", "default")
        wait_until(lambda: "mark:huge" in notes(r), what="the job to run")
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0
    assert any("b1g71me0u7" in rec.getMessage() and "is no time limit" in rec.getMessage()
               for rec in caplog.records)


def test_a_cancelled_batch_job_counts_as_dead_so_the_batch_completes(
        config: wurk.Config, r: redis.Redis) -> None:
    batch = wurk.Batch()
    with batch.jobs():
        jids = [mark.perform_async(str(n)) for n in range(2)]
    assert jids[0] is not None and wurk.cancel(jids[0]).found
    status = wurk.BatchStatus(batch.bid)
    assert status.failures == 1 and status.dead_jids == [jids[0]] and not status.complete
    drain = Drain(config)
    try:
        assert drain() == 1  # the other one
    finally:
        drain.close()
    assert wurk.BatchStatus(batch.bid).complete


def test_a_cancelled_batch_job_counts_dead_even_when_the_death_handler_raises(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """The job was removed, then the handler's error ended the cancel: the batch was never
    told (it never completed) and a second cancel found the job nowhere. The handler's
    error is reported, as the morgue reports a death handler's, and the cancel goes on."""
    from wurk.control.withdraw import withdraw

    def broken(job: dict[str, Any], exc: BaseException) -> None:
        raise RuntimeError("handler broke")

    batch = wurk.Batch()
    with batch.jobs():
        jid = mark.perform_async("only")
    assert jid is not None
    with caplog.at_level("ERROR", logger="wurk"):
        done = withdraw(jid, config=config, removed=broken)
    assert done.removed_from == ["queue:default"]
    status = wurk.BatchStatus(batch.bid)
    assert status.dead_jids == [jid] and status.complete
    assert r.get("wurk:stat:cancelled") == "1"
    assert any("Error calling death handler" in rec.getMessage() and "handler broke" in
               rec.getMessage() for rec in caplog.records)


@pytest.mark.parametrize("job", [busy_loop, async_loop], ids=["sync", "async"])
def test_a_running_batch_job_cancelled_counts_as_dead_so_the_batch_completes(
        worker: InProcessWorker, r: redis.Redis, job: Any) -> None:
    """batches.md / time-limits-and-cancel.md: a job cancelled as it runs counts as dead in
    its batch (it never runs again), so the batch completes; not retried, not in the dead
    set."""
    batch = wurk.Batch()
    with batch.jobs():
        jid = job.perform_async()
    wait_until(lambda: any(n.startswith(f"start:{jid}:") for n in notes(r)), what="a start")
    wait_until(lambda: any(w.job.jid == jid for w in WorkSet()), what="the Busy page")
    assert wurk.cancel(jid).running_on
    wait_until(lambda: wurk.BatchStatus(batch.bid).complete, timeout=10,
               what="the batch to complete")
    assert wurk.BatchStatus(batch.bid).dead_jids == [jid]
    # Counted by the cancel link, outside the batch link: after the batch completes.
    wait_until(lambda: r.get("wurk:stat:cancelled") == "1", what="the cancelled count")
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0


@pytest.mark.parametrize("job", [busy_loop, async_loop], ids=["sync", "async"])
def test_a_running_workflow_step_cancelled_is_dead_and_stops_its_dependants(
        worker: InProcessWorker, r: redis.Redis, job: Any) -> None:
    """workflows.md: a step "dies" when `wurk.cancel` is called on its jid, running too."""
    from wurk.workflow import Workflow, WorkflowStatus

    wf = Workflow("cancelled while running")
    first = wf.step(job)
    wf.step(mark, first).named("after")
    wid = wf.start()
    jid = WorkflowStatus(wid).steps[job.name.split(".")[-1]].jid
    wait_until(lambda: any(n.startswith(f"start:{jid}:") for n in notes(r)), what="a start")
    wait_until(lambda: any(w.job.jid == jid for w in WorkSet()), what="the Busy page")
    assert jid is not None and wurk.cancel(jid).running_on
    wait_until(lambda: WorkflowStatus(wid).state == "failed", timeout=10,
               what="the workflow to fail")
    status = WorkflowStatus(wid)
    assert status.steps["after"].state == "stopped"
    assert wurk.BatchStatus(wid).dead_jids == [jid]
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0
    assert not any(n.startswith("mark:") for n in notes(r))


def test_wurk_cancel_on_the_command_line(config: wurk.Config, r: redis.Redis) -> None:
    from click.testing import CliRunner

    from wurk.cli import main

    jid = mark.perform_async("x")
    runner = CliRunner()
    found = runner.invoke(main, ["cancel", jid or ""])
    assert found.exit_code == 0 and "removed from queue:default" in found.output
    gone = runner.invoke(main, ["cancel", jid or ""])
    assert gone.exit_code == 1 and "was not found waiting or running" in gone.output
    bad = runner.invoke(main, ["cancel", "a b"])
    assert bad.exit_code == 2 and "is not a jid" in bad.output


def test_a_cancel_list_lives_60_s_and_the_iterable_mark_30_days(config: wurk.Config,
                                                                 r: redis.Redis) -> None:
    """docs: `wurk:cancel:<identity>` has a 60 s TTL (a worker down when the cancel is sent
    never sees it), and the `it-<jid>` mark every cancel writes lives 30 days."""
    r.sadd("processes", "host-a:1:0123456789ab")
    jid = "c" * 24
    done = wurk.cancel(jid)
    assert done.told == 1 and not done.found
    assert r.lrange("wurk:cancel:host-a:1:0123456789ab", 0, -1) == [jid]
    assert 0 < r.ttl("wurk:cancel:host-a:1:0123456789ab") <= 60
    assert 29 * 86400 < r.ttl(f"it-{jid}") <= 30 * 86400


def test_cancel_with_redis_unreachable_raises_redis_unavailable(tmp_path: Any) -> None:
    from tests.helpers.faults import config_for
    from tests.helpers.server import start_server

    server = start_server(tmp_path / "private")
    config = config_for(server.url)
    server.stop()
    try:
        with pytest.raises(wurk.RedisUnavailable):
            wurk.cancel("d" * 24, config=config)
    finally:
        config.close()


def test_a_cancel_list_entry_that_is_no_jid_is_dropped_and_said(
        worker: InProcessWorker, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """Written by hand or by an attacker: an empty or a 10,000-character "jid" is not kept
    for five minutes in every worker's memory; it is named in a warning, cut short, and the
    cancels beside it still arrive."""
    key = f"wurk:cancel:{worker.launcher.identity}"
    running = worker.launcher.stops.running
    with caplog.at_level("WARNING", logger="wurk"):
        r.rpush(key, "", "x" * 10_000, "e" * 24)
        wait_until(lambda: running.was_cancelled("e" * 24), what="the cancel beside them")
    dropped = [rec.getMessage() for rec in caplog.records if "dropped a cancel" in rec.getMessage()]
    assert len(dropped) == 2, dropped
    rule = "not a jid (non-empty, at most 200 characters, no spaces or control characters)"
    assert rule in dropped[0] and "0 bytes" in dropped[0]
    assert rule in dropped[1] and "10000 bytes: " + "x" * 40 in dropped[1]
    assert len(dropped[1]) < 250
    assert not running.was_cancelled("x" * 10_000) and not running.was_cancelled("")


def test_the_cancel_poll_never_reads_a_huge_entry_whole(r: redis.Redis) -> None:
    """A hand-written 4 MB entry of the cancels list: the poll's script sends a jid's
    longest plus one byte of it and its length, so a worker never holds it."""
    from wurk.control.handler import _POP

    r.rpush("wurk:cancel:h:1:x", "y" * 4_000_000, "e" * 24)
    reply = _POP.call_many(r, [(["wurk:cancel:h:1:x"], [100, 801])])[0]
    assert reply[0] == "" and reply[3:] == ["e" * 24, 24]
    assert reply[1] == "y" * 801 and reply[2] == 4_000_000
    assert r.llen("wurk:cancel:h:1:x") == 0


def test_a_cancel_list_of_another_type_is_replaced_and_cancels_arrive(
        worker: InProcessWorker, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """A string where the cancels list should be made every poll fail (WRONGTYPE) for the
    key's life: it is deleted with a warning, and the next cancel arrives."""
    key = f"wurk:cancel:{worker.launcher.identity}"
    running = worker.launcher.stops.running
    with caplog.at_level("WARNING", logger="wurk"):
        r.set(key, "not a list")
        wait_until(lambda: not r.exists(key), what="the poll replacing the string")
        r.rpush(key, "f" * 24)
        wait_until(lambda: running.was_cancelled("f" * 24), what="the cancel after it")
    assert any(f"{key} held a Redis string" in rec.getMessage() for rec in caplog.records)


@wurk.job(name="limits.inline_then_loop", retry=0)
def inline_then_loop() -> None:
    """Runs another job with ``perform_inline`` first (its body opened and closed on this
    thread's guard), then loops in Python until stopped."""
    mark.perform_inline(f"inline:{wurk.current_jid()}")
    note("start", wurk.current_jid(), time.time())
    end = time.monotonic() + 30
    while time.monotonic() < end:
        time.sleep(0.01)
    note("done", wurk.current_jid())


@pytest.mark.parametrize("stop", ["timeout", "cancel"])
def test_a_sync_job_that_ran_another_inline_is_still_stopped(
        worker: InProcessWorker, r: redis.Redis, stop: str) -> None:
    """The inline run once closed the outer job's body on the thread's guard: its time limit
    and a cancel of it then no longer reached it, and it ran to its end. The worker's
    configuration is the process's, as ``wurk worker`` makes it: the inline run goes through
    the worker's chain, its innermost link included."""
    wurk.configure(worker.config)
    # The limit must come after the inline run and the start note: on a loaded machine
    # 0.5 s passed before them (and before the Busy page and a cancel), so the timeout's run
    # gets 3 s and the cancel's a limit it never reaches.
    job = inline_then_loop.set(timeout=3 if stop == "timeout" else 60)
    jid = job.perform_async()
    wait_until(lambda: any(n.startswith(f"start:{jid}:") for n in notes(r)), what="a start")
    assert f"mark:inline:{jid}" in notes(r)
    if stop == "timeout":
        wait_until(lambda: r.zcard("dead") == 1, timeout=10, what="the JobTimeout")
        dead = json.loads(r.zrange("dead", 0, -1)[0])
        assert dead["jid"] == jid and dead["error_class"] == "wurk.JobTimeout"
        assert "time limit of 3 s" in dead["error_message"]
    else:
        wait_until(lambda: any(w.job.jid == jid for w in WorkSet()), what="the Busy page")
        assert wurk.cancel(jid).running_on
        wait_until(lambda: r.get("wurk:stat:cancelled") == "1", timeout=10, what="the cancel")
        assert r.zcard("retry") == 0 and r.zcard("dead") == 0
    wait_until(lambda: not any(w.job.jid == jid for w in WorkSet()), timeout=10,
               what="its end")
    assert f"done:{jid}" not in notes(r)
    worker.assert_healthy(2)


@wurk.job(name="limits.kept", result_ttl=600)
def kept(text: str) -> str:
    return text


@wurk.job(name="limits.waiter", retry=1)
def waiter(jid: str) -> None:
    note("waited", wurk.ResultHandle(jid).result(timeout=0))


@wurk.job(name="limits.awaiter", retry=1)
async def awaiter(jid: str) -> None:
    note("waited", await wurk.ResultHandle(jid).aresult(timeout=0))


@pytest.mark.parametrize("job", [waiter, awaiter], ids=["sync", "async"])
def test_a_job_whose_awaited_job_was_cancelled_fails_and_is_not_cancelled_itself(
        worker: InProcessWorker, r: redis.Redis, job: Any) -> None:
    """The ``JobCancelled`` a result handle raises for another job says that job was
    cancelled, not this one: escaping the body, it once ended this job as cancelled —
    counted, never retried, nowhere to be found (a job lost). It is a failure, retried."""
    other = kept.perform_in(3600, "never")
    assert wurk.cancel(other).removed_from == ["schedule"]
    jid = job.perform_async(str(other))
    wait_until(lambda: retry_entry(r, jid) is not None, what="the waiter's retry")
    entry = retry_entry(r, jid)
    assert entry is not None and other in entry["error_message"]
    assert "cancelled" in entry["error_message"]
    assert r.get("wurk:stat:cancelled") == "1"  # the awaited job's cancel, not the waiter's


class ExportFailed(Exception):
    pass


@wurk.job(name="limits.wrapping_loop", retry=3)
def wrapping_loop() -> None:
    """Wraps whatever stops it in an error of its own, as much code does."""
    note("start", wurk.current_jid(), time.time())
    try:
        while True:
            ledger().incr("limits:ticks")
            time.sleep(0.01)
    except Exception as exc:
        raise ExportFailed("the export failed") from exc


@wurk.job(name="limits.wrapping_async_loop", retry=3)
async def wrapping_async_loop() -> None:
    note("start", wurk.current_jid(), time.time())
    try:
        while True:
            ledger().incr("limits:ticks")
            await asyncio.sleep(0.01)
    except BaseException as exc:
        raise ExportFailed("the export failed") from exc


@wurk.job(name="limits.wrapping_spin", timeout=0.5, retry=1)
def wrapping_spin() -> None:
    note("start", wurk.current_jid(), time.time())
    try:
        while True:
            pass
    except Exception as exc:
        raise ExportFailed("the export failed") from exc


@pytest.mark.parametrize("job", [wrapping_loop, wrapping_async_loop], ids=["sync", "async"])
def test_a_cancelled_job_that_wraps_the_error_in_its_own_still_ends_cancelled(
        worker: InProcessWorker, r: redis.Redis, job: Any) -> None:
    """A job that turns what stopped it into an error of its own (``raise X from exc``) once
    failed with that error when cancelled: retried, so a cancelled job ran again."""
    jid = job.perform_async()
    wait_until(lambda: any(w.job.jid == jid for w in WorkSet()), what="the Busy page")
    assert wurk.cancel(jid).running_on
    wait_until(lambda: r.get("wurk:stat:cancelled") == "1", timeout=10, what="the cancel")
    wait_until(lambda: not any(w.job.jid == jid for w in WorkSet()), what="its end")
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0


def test_a_job_past_its_limit_that_wraps_the_error_fails_with_job_timeout(
        worker: InProcessWorker, r: redis.Redis) -> None:
    jid = wrapping_spin.perform_async()
    wait_until(lambda: retry_entry(r, jid) is not None, what="the retry")
    entry = retry_entry(r, jid)
    assert entry is not None and entry["error_class"] == "wurk.JobTimeout"
