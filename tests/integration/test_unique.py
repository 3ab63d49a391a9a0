"""Unique jobs: the lock is taken with the push and released by every way a job can end."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.proxy import FaultProxy
from tests.helpers.runner import Drain
from wurk import api
from wurk import payload as P
from wurk.client.default import default_client
from wurk.client.reliable import ReliableWriter
from wurk.errors import ConfigError, InvalidPayload
from wurk.fetch.poison import kill_poisoned
from wurk.iteration.handler import InterruptHandler
from wurk.launcher import install_built_ins
from wurk.morgue import Morgue
from wurk.scheduled import Scheduler

ran: list[list[Any]] = []
gate = threading.Event()


@wurk.job(name="Unique::Sync", unique_for=600)
def sync(account: int) -> None:
    ran.append([account])


@wurk.job(name="Unique::Flaky", unique_for=600, retry=1)
def flaky(account: int) -> None:
    ran.append([account])
    if len(ran) == 1:
        raise RuntimeError("the first run fails")


@wurk.job(name="Unique::Doomed", unique_for=600, retry=0)
def doomed(account: int) -> None:
    raise RuntimeError("always")


@wurk.job(name="Unique::Start", unique_for=600, unique_until="start")
def at_start(account: int) -> None:
    again = at_start.perform_async(account) if not ran else "(the second run pushes none)"
    ran.append([account, again is not None])


class Report(wurk.Job, name="Unique::Report", unique_for=timedelta(minutes=5)):
    """Unique per account, whatever the date it is asked for."""

    def perform(self, account: int, day: str) -> None:
        ran.append([account, day])

    @classmethod
    def unique_context(cls, payload: P.Payload) -> list[Any] | None:
        return [payload["class"], payload["args"][0]]


@wurk.job(name="Unique::Hooked", unique_for=60,
          unique_context=lambda payload: ["hooked", payload["args"][0] % 10])
def hooked(n: int) -> None: ...


@pytest.fixture
def drain(config: wurk.Config) -> Iterator[Drain]:
    ran.clear()
    runner = Drain(config)
    yield runner
    runner.close()


def lock_keys(r: redis.Redis) -> list[str]:
    return sorted(r.scan_iter("unique:*"))


def test_a_duplicate_push_returns_none_and_logs_the_holder(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    first = sync.perform_async(1)
    with caplog.at_level(logging.INFO, logger="wurk"):
        assert sync.perform_async(1) is None
    # unique-jobs.md: "A refused push logs, at INFO, which jid holds the lock."
    assert [rec.levelno for rec in caplog.records
            if f"jid {first} holds its lock" in rec.getMessage()] == [logging.INFO]
    assert sync.perform_async(2) is not None  # other args: another lock
    assert sync.set(queue="low").perform_async(1) is not None  # another queue: another lock
    assert r.llen("queue:default") == 2 and r.llen("queue:low") == 1


def test_the_lock_is_the_documented_key_holding_the_jid(config: wurk.Config,
                                                         r: redis.Redis) -> None:
    jid = sync.perform_async(7)
    text = json.dumps(["Unique::Sync", "default", [7]], separators=(",", ":"),
                      ensure_ascii=False)
    digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
    key = f"unique:{digest.decode()}"
    assert r.get(key) == jid and 595 < r.ttl(key) <= 600
    [raw] = r.lrange("queue:default", 0, -1)
    job = json.loads(raw)
    assert job["unique_digest"] == digest.decode() and job["unique_for"] == 600
    assert wurk.unique.locked("default", "Unique::Sync", [7]) == jid
    assert wurk.unique.locked("default", "Unique::Sync", [8]) is None


def test_success_releases_the_lock(config: wurk.Config, r: redis.Redis, drain: Drain) -> None:
    sync.perform_async(1)
    drain()
    assert ran == [[1]] and lock_keys(r) == []
    assert sync.perform_async(1) is not None


def test_a_failure_keeps_the_lock_for_the_retry(config: wurk.Config, r: redis.Redis,
                                                drain: Drain) -> None:
    jid = flaky.perform_async(1)
    drain()
    assert r.zcard("retry") == 1 and wurk.unique.locked("default", "Unique::Flaky", [1]) == jid
    assert flaky.perform_async(1) is None
    api.RetrySet(config).retry_all()
    drain()
    assert ran == [[1], [1]] and lock_keys(r) == []


def test_unique_until_start_releases_before_the_job_runs(config: wurk.Config,
                                                         r: redis.Redis, drain: Drain) -> None:
    at_start.perform_async(3)
    assert at_start.perform_async(3) is None
    assert drain() == 2
    assert ran == [[3, True], [3, True]]  # a push made while it ran was let in
    assert lock_keys(r) == []


@wurk.job(name="Unique::StartLimited", unique_for=600, unique_until="start",
          rate_limit=wurk.limiter.window("unique-start", 1, 60, wait_timeout=0))
def start_limited(account: int) -> None:
    ran.append([account])


def test_unique_until_start_keeps_the_lock_of_a_run_its_rate_limit_reschedules(
        config: wurk.Config, r: redis.Redis, drain: Drain) -> None:
    start_limited.perform_async(1)
    drain()  # in the limit: started, its lock released
    assert ran == [[1]] and lock_keys(r) == []
    jid = start_limited.perform_async(1)
    drain()  # over the limit: rescheduled unrun, still pending, so it is not started
    assert ran == [[1]] and r.zcard("schedule") == 1
    assert wurk.unique.locked("default", "Unique::StartLimited", [1]) == jid
    assert start_limited.perform_async(1) is None  # a duplicate of the one waiting
    [raw] = r.zrange("schedule", 0, -1)
    r.delete(*r.scan_iter("*unique-start*"))  # the limit has room again
    r.zadd("schedule", {raw: time.time() - 1})
    Scheduler(config).enqueue_due()
    drain()
    assert ran == [[1], [1]] and lock_keys(r) == []  # let in: released at its start


def test_death_releases_the_lock(config: wurk.Config, r: redis.Redis, drain: Drain) -> None:
    doomed.perform_async(1)
    drain()
    assert r.zcard("dead") == 1 and lock_keys(r) == []


def test_a_lock_of_another_type_is_replaced_with_a_warning_not_a_failed_push(
        config: wurk.Config, r: redis.Redis, drain: Drain,
        caplog: pytest.LogCaptureFixture) -> None:
    """A ``unique:<digest>`` key of another Redis type holds no jid: the push script's GET
    raised WRONGTYPE, so every push of that job and those args failed (for good: such a
    key has no TTL) with an error naming no key. It is replaced by the push's lock, with a
    warning naming it; the job runs and releases its lock."""
    jid = sync.perform_async(1)
    key = lock_keys(r)[0]
    r.delete(key)
    r.hset(key, "jid", jid)  # written by someone else
    with caplog.at_level(logging.WARNING, logger="wurk"):
        second = sync.perform_async(1)
        r.delete(key)
        r.sadd(key, "x")
        third = sync.perform_in(60, 1)
    assert second is not None and third is not None
    assert r.llen("queue:default") == 2 and r.zcard("schedule") == 1
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert warned == [f"unique job Unique::Sync (jid {pushed}): its lock {key} was a {kind}, "
                      "not a jid (written by something else); replaced by this push's lock"
                      for pushed, kind in ((second, "hash"), (third, "set"))]
    assert r.get(key) == third and 655 < r.ttl(key) <= 660
    r.delete(key)
    r.hset(key, "a", "b")  # a release meeting one leaves it alone: not this job's lock
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="wurk"):
        drain()
    assert ran == [[1], [1]] and r.hgetall(key) == {"a": "b"}
    assert "could not release" not in caplog.text


def test_a_lock_without_an_expiry_is_replaced_with_a_warning_not_held_for_good(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """unique-jobs.md: "No lock outlives its job by more than unique_for". A lock written
    without a TTL (by hand, or a PERSIST) — which no push of wurk or Sidekiq writes —
    refused every push of the job, for good, each logged as a mere duplicate. It is
    replaced by the push's lock, with a warning naming it."""
    sync.perform_async(1)
    key = lock_keys(r)[0]
    r.set(key, "a-jid-from-nowhere")  # a plain SET: no expiry
    with caplog.at_level(logging.WARNING, logger="wurk"):
        jid = sync.perform_async(1)
    assert jid is not None and r.get(key) == jid and 595 < r.ttl(key) <= 600
    assert [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING] == [
        f"unique job Unique::Sync (jid {jid}): its lock {key} was a string without an "
        "expiry, not a jid (written by something else); replaced by this push's lock"]
    assert sync.perform_async(1) is None  # the new lock refuses duplicates as ever


@pytest.mark.parametrize(("key", "scheduled"), [("queue:default", False),
                                                 ("queues", False), ("schedule", True)])
def test_a_push_meeting_a_key_of_another_type_takes_no_lock_without_its_job(
        config: wurk.Config, r: redis.Redis, key: str, scheduled: bool) -> None:
    """unique-jobs.md: a job is never pushed without its lock "nor its lock taken without the
    job". A queue, the ``queues`` set or the schedule of another Redis type made the script
    fail after it had taken the lock (a script is not rolled back): the push raised, and
    the caller's next push of the same job, once the key was repaired, was refused as a
    duplicate of a job that was never pushed — lost. The push now fails before writing
    anything, naming the key."""
    r.set(key, "written by someone else")
    with pytest.raises(redis.ResponseError, match=f"WRONGTYPE {key} holds"):
        sync.perform_in(60, 1) if scheduled else sync.perform_async(1)
    assert lock_keys(r) == []
    r.delete(key)
    jid = sync.perform_in(60, 1) if scheduled else sync.perform_async(1)
    assert jid is not None and r.get(lock_keys(r)[0]) == jid


def test_a_worker_installs_the_limits_once(config: wurk.Config) -> None:
    from wurk.launcher import Launcher
    from wurk.limiter.middleware import LimitsMiddleware
    from wurk.unique import LockRelease

    for _ in range(2):
        Launcher(config)
    chain = list(config.server_middleware)
    assert sum(isinstance(link, LimitsMiddleware) for link in chain) == 1
    assert sum(isinstance(h, LockRelease) for h in config.death_handlers) == 1


def test_a_poison_kill_releases_the_lock(config: wurk.Config, r: redis.Redis) -> None:
    install_built_ins(config)  # the reaper runs in a worker, which installs its links
    sync.perform_async(5)
    raw = r.lmove("queue:default", "inflight", "RIGHT", "LEFT")  # where the reaper finds it
    assert kill_poisoned(config, Morgue(config), raw, "default", 3, source="inflight")
    assert r.zcard("dead") == 1 and lock_keys(r) == [] and r.llen("inflight") == 0


@pytest.mark.parametrize("where", ["queue", "schedule", "retry", "dead"])
def test_deleting_a_job_through_the_api_releases_its_lock(
        config: wurk.Config, r: redis.Redis, where: str) -> None:
    if where == "queue":
        sync.perform_async(1)
        record = next(iter(api.Queue("default", config)))
        assert api.Queue("default", config).delete(record)
    else:
        sync.perform_in(3600, 1)
        raw, score = r.zrange("schedule", 0, -1, withscores=True)[0]
        if where != "schedule":
            r.delete("schedule")
            r.zadd(where, {raw: score})
        entries = {"schedule": api.ScheduledSet, "retry": api.RetrySet, "dead": api.DeadSet}
        entry = next(iter(entries[where](config)))
        assert entry.delete()
    assert lock_keys(r) == [] and sync.perform_async(1) is not None


def test_clearing_a_queue_or_a_set_releases_every_lock(config: wurk.Config,
                                                      r: redis.Redis) -> None:
    for n in range(30):
        sync.perform_async(n)
        sync.perform_in(3600, 100 + n)
    wurk.push({"class": "Plain", "args": []})
    assert len(lock_keys(r)) == 60
    assert api.Queue("default", config).clear() == 31
    assert len(lock_keys(r)) == 30
    assert api.ScheduledSet(config).clear() == 30
    assert lock_keys(r) == []


def test_a_unique_job_pushed_while_a_queue_is_cleared_keeps_its_lock_only_with_its_job(
        config: wurk.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """clear() read the unique jobs first and deleted the list after: a unique job pushed in
    between was deleted with the rest, its lock left held (every later push of it refused
    as a duplicate until the lock expired)."""
    from wurk.api import paging, queues

    for n in range(3):
        sync.perform_async(n)
    reading = paging.list_entries

    def pushed_meanwhile(*args: Any, **kwargs: Any) -> Any:
        yield from reading(*args, **kwargs)
        sync.perform_async(99)  # another process's push, while the clear runs

    monkeypatch.setattr(queues, "list_entries", pushed_meanwhile)
    monkeypatch.setattr(paging, "list_entries", pushed_meanwhile)
    api.Queue("default", config).clear()
    held = {r.get(key) for key in lock_keys(r)}
    stored = {json.loads(raw)["jid"] for raw in r.lrange("queue:default", 0, -1)}
    assert held == stored  # no lock without its job
    assert not r.keys("wurk:clearing:*")  # the clear's own key is gone


def test_a_clear_cut_short_leaves_its_entries_to_expire_within_the_hour(
        config: wurk.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """inspection.md: the entries a clear moved out live an hour at most when the clear is cut
    short before it deletes them (the process killed while it releases the locks)."""
    from wurk.api import paging

    sync.perform_async(1)

    def cut(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt  # the clear cut short after its one step
        yield  # a generator, as list_entries is

    monkeypatch.setattr(paging, "list_entries", cut)
    with pytest.raises(KeyboardInterrupt):
        api.Queue("default", config).clear()
    [moved] = r.keys("wurk:clearing:*")
    assert r.llen("queue:default") == 0 and r.llen(moved) == 1
    assert 0 < r.ttl(moved) <= paging.CLEARING_TTL == 3600


def test_killing_from_the_api_releases_the_lock(config: wurk.Config, r: redis.Redis) -> None:
    sync.perform_in(60, 1)
    sync.perform_in(60, 2)
    raw, score = r.zrange("schedule", 0, 0, withscores=True)[0]
    r.zadd("retry", {raw: score})
    r.zrem("schedule", raw)
    assert api.RetrySet(config).kill_all() == 1
    next(iter(api.ScheduledSet(config))).kill(notify_failure=False)
    assert r.zcard("dead") == 2 and lock_keys(r) == []


def test_a_lock_taken_over_after_expiry_is_not_released_by_the_old_job(
        config: wurk.Config, r: redis.Redis, drain: Drain) -> None:
    sync.perform_async(1)
    [key] = lock_keys(r)
    r.set(key, "a-later-jid")  # the first lock expired and a later push took it
    drain()
    assert r.get(key) == "a-later-jid"


def test_set_unique_for_false_pushes_without_a_lock(config: wurk.Config,
                                                    r: redis.Redis) -> None:
    sync.perform_async(1)
    bypass = sync.set(unique_for=False)
    assert bypass.perform_async(1) is not None and bypass.perform_async(1) is not None
    assert len(lock_keys(r)) == 1
    entries = [json.loads(raw) for raw in r.lrange("queue:default", 0, 1)]
    assert all("unique_for" not in job and "unique_digest" not in job for job in entries)


def test_a_scheduled_lock_lives_unique_for_plus_the_delay(config: wurk.Config,
                                                         r: redis.Redis) -> None:
    sync.perform_in(1000, 1)
    assert sync.perform_in(10, 1) is None
    [key] = lock_keys(r)
    assert 1595 < r.ttl(key) <= 1600


@pytest.mark.parametrize("mode", ["atomic", "client"])
def test_the_scheduler_is_not_blocked_by_the_jobs_own_lock(
        r: redis.Redis, mode: str) -> None:
    config = wurk.configure(scheduler=mode)
    jid = sync.perform_in(3600, 1)
    raw = r.zrange("schedule", 0, -1)[0]
    r.zadd("schedule", {raw: time.time() - 1})  # due now
    scheduler = Scheduler(config)
    assert scheduler.enqueue_due() == 1
    [queued] = r.lrange("queue:default", 0, -1)
    assert json.loads(queued)["jid"] == jid
    assert wurk.unique.locked("default", "Unique::Sync", [1]) == jid  # still held
    scheduler.stop(1)


def test_a_bulk_push_refuses_the_duplicates_inside_it(config: wurk.Config,
                                                      r: redis.Redis) -> None:
    jids = sync.perform_bulk([[1], [2], [1], [3], [2]])
    assert [jid is None for jid in jids] == [False, False, True, False, True]
    assert r.llen("queue:default") == 3


def test_custom_contexts_decide_what_is_a_duplicate(config: wurk.Config) -> None:
    assert Report.perform_async(9, "2025-01-01") is not None
    assert Report.perform_async(9, "2025-01-02") is None  # same account: a duplicate
    assert wurk.unique.locked("default", "Unique::Report", [9, "any day"]) is not None
    assert hooked.perform_async(3) is not None
    assert hooked.perform_async(13) is None


def test_a_flushed_script_cache_is_reloaded(config: wurk.Config, r: redis.Redis) -> None:
    sync.perform_async(1)
    r.script_flush()
    assert sync.perform_async(1) is None and sync.perform_async(2) is not None


@pytest.mark.parametrize("value", [0, -5, "600", True, 2_000_000_000])
def test_bad_unique_for_is_refused_with_its_name(value: Any) -> None:
    with pytest.raises(ConfigError, match="unique_for"):
        sync.set(unique_for=value)
    with pytest.raises(InvalidPayload, match="unique_for"):
        wurk.push({"class": "X", "args": [], "unique_for": value})


def test_bad_unique_until_is_refused() -> None:
    with pytest.raises(ConfigError, match="unique_until"):
        wurk.job(name="Unique::Bad", unique_for=5, unique_until="finish")(lambda: None)


# -- Redis unreachable when the job ends ----------------------------------------------------------
@wurk.job(name="Unique::Outage", unique_for=600)
def in_outage(account: int) -> None:
    ran.append([account])
    assert OUTAGE, "the test sets the proxy"
    OUTAGE[0].drop()  # Redis unreachable from now on, for the release too
    OUTAGE[0].cut()


OUTAGE: list[FaultProxy] = []


class Waits:
    """Stands in for ``time`` in ``wurk.unique``: records each wait between the release's
    attempts (without waiting) and ends the outage once ``until`` seconds have passed."""

    def __init__(self, proxy: FaultProxy, until: float) -> None:
        self.proxy, self.until = proxy, until
        self.waits: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        if sum(self.waits) >= self.until:
            self.proxy.restore()


def test_a_release_redis_refuses_is_sent_again_for_about_three_and_a_half_seconds(
        redis_server: Any, r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    with FaultProxy(redis_server.port) as proxy:
        OUTAGE[:] = [proxy]
        ran.clear()
        monkeypatch.setenv("REDIS_URL", proxy.url)  # REDIS_URL wins over configure's
        config = wurk.configure()
        waits = Waits(proxy, until=1.0)  # an outage of a second: a restart
        monkeypatch.setattr(wurk.unique, "time", waits)
        in_outage.perform_async(1)
        drain = Drain(config)  # its parts, as its loop's read of the queue is cut too
        try:
            unit = drain.fetcher.fetch(1)
            assert unit is not None
            drain.runner.run(unit)
        finally:
            drain.close()
        assert ran == [[1]] and lock_keys(r) == []  # released once Redis answered again
        assert waits.waits == [0.0, 0.1, 0.25, 0.5, 1.0]
        config.close()
    assert 3.0 <= sum(wurk.unique.RELEASE_RETRIES) <= 4.0  # "about 3.5 s" in all


def test_a_release_given_up_is_logged_and_the_lock_expires_on_its_own(
        redis_server: Any, r: redis.Redis, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    with FaultProxy(redis_server.port) as proxy:
        monkeypatch.setenv("REDIS_URL", proxy.url)  # REDIS_URL wins over configure's
        config = wurk.configure()
        jid = sync.perform_async(5)
        job = json.loads(r.lindex("queue:default", 0))
        waits = Waits(proxy, until=float("inf"))  # Redis never answers in time
        monkeypatch.setattr(wurk.unique, "time", waits)
        proxy.drop()
        proxy.cut()
        with caplog.at_level(logging.WARNING, logger="wurk"):
            assert wurk.unique.release(config, job) is False  # not raised
        assert waits.waits == [0.0, *wurk.unique.RELEASE_RETRIES]
        assert f"could not release the unique lock of Unique::Sync (jid {jid})" in caplog.text
        assert "it expires on its own" in caplog.text
        proxy.restore()
        [key] = lock_keys(r)
        assert r.get(key) == jid and 0 < r.ttl(key) <= 600  # no longer than unique_for
        config.close()


@wurk.job(name="Unique::StartFlaky", unique_for=600, unique_until="start", retry=1)
def start_flaky(account: int) -> None:
    ran.append([account])
    if len(ran) == 1:
        raise RuntimeError("the first run fails")


@pytest.mark.parametrize("mode", ["atomic", "client"])
def test_a_due_retry_is_not_dropped_for_a_later_pushs_lock(
        r: redis.Redis, drain: Drain, mode: str) -> None:
    config = wurk.configure(scheduler=mode)
    first = start_flaky.perform_async(1)
    drain()  # released at its start, then failed: its retry waits in `retry`
    [raw] = r.zrange("retry", 0, -1)
    later = start_flaky.perform_async(1)  # let in: nothing held the lock
    assert later is not None and later != first
    r.zadd("retry", {raw: time.time() - 1})  # the retry is due
    scheduler = Scheduler(config)
    assert scheduler.enqueue_due() == 1
    queued = sorted(json.loads(job)["jid"] for job in r.lrange("queue:default", 0, -1))
    assert queued == sorted([first, later])  # the retry is not lost as a "duplicate"
    assert wurk.unique.locked("default", "Unique::StartFlaky", [1]) == later
    scheduler.stop(1)


def test_an_interrupted_job_pushed_again_is_not_dropped_for_a_later_pushs_lock(
        config: wurk.Config, r: redis.Redis) -> None:
    first = at_start.perform_async(4)
    [raw] = r.lrange("queue:default", 0, -1)
    r.delete("queue:default")  # fetched: it started, and released its lock at its start
    [key] = lock_keys(r)
    r.delete(key)
    later = at_start.perform_async(4)  # let in while the first one runs
    assert later is not None
    InterruptHandler(config).push_again(json.loads(raw), "default")  # the first, interrupted
    queued = sorted(json.loads(job)["jid"] for job in r.lrange("queue:default", 0, -1))
    assert queued == sorted([first, later])  # it goes on, not dropped as a "duplicate"
    assert r.get(key) == later


class _AheadClock:
    """The pushing process's clock, ``ahead`` seconds ahead of Redis's."""

    def __init__(self, r: redis.Redis, ahead: float) -> None:
        seconds, micros = r.time()
        self.offset = seconds + micros / 1e6 + ahead - time.time()

    def time(self) -> float:
        return time.time() + self.offset


def test_a_scheduled_lock_lasts_until_the_job_is_due_on_redis_clock(
        config: wurk.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    seconds, _ = r.time()
    due = seconds + 1000  # due in 1000 s by Redis's clock, which the scheduler goes by
    monkeypatch.setattr(wurk.client.locks, "time", _AheadClock(r, 5000))
    jid = sync.perform_at(due, 1)
    [key] = lock_keys(r)
    # unique_for (600 s) + the delay, counted on Redis's clock: the lock outlives the wait
    # even when the pusher's clock says the job is overdue
    assert 1595 < r.pttl(key) / 1000 <= 1600
    assert sync.perform_async(1) is None and r.get(key) == jid


def test_a_batch_or_reliable_scheduled_lock_counts_the_delay_on_redis_clock(
        config: wurk.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    seconds, _ = r.time()
    monkeypatch.setattr(wurk.client.locks, "time", _AheadClock(r, 5000))
    batch = wurk.Batch()
    with batch.jobs():
        assert sync.perform_at(seconds + 1000, 1) is not None
    reliable_config = wurk.configure(reliable_push="memory")
    job = {"class": "Unique::Sync", "args": [2], "unique_for": 600, "at": seconds + 2000}
    client = default_client(reliable_config)
    assert isinstance(client.writer, ReliableWriter) and client.push(job) is not None
    # unique_for + each wait, as Redis's clock counts it (from ``seconds``, a whole second
    # read before the pushes: up to a second and the pushes' own time less remain)
    short, long = sorted(r.pttl(key) / 1000 for key in lock_keys(r))
    assert 1595 < short <= 1600 and 2595 < long <= 2600


# -- perform_inline (Sidekiq Enterprise 7.3.2) -------------------------------------------------
def test_perform_inline_is_refused_while_a_pushed_duplicate_holds_the_lock(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """unique-jobs.md: perform_inline takes the lock as a push does; a duplicate returns None
    without running, and the holder's jid is logged."""
    ran.clear()
    first = sync.perform_async(3)
    with caplog.at_level(logging.INFO, logger="wurk"):
        assert sync.perform_inline(3) is None
    assert ran == [] and any(f"jid {first} holds its lock" in rec.getMessage()
                             for rec in caplog.records)
    assert wurk.unique.locked("default", "Unique::Sync", [3]) == first  # left as it was
    assert sync.perform_inline(4) is None and ran == [[4]]  # other args: runs
    assert lock_keys(r) == [f"unique:{wurk.unique.job_digest(json.loads(x))}"
                            for x in r.lrange("queue:default", 0, -1)]


def test_perform_inline_holds_the_lock_while_it_runs_and_releases_it_after(
        config: wurk.Config, r: redis.Redis) -> None:
    seen: list[Any] = []

    @wurk.job(name="Unique::Inline", unique_for=600)
    def inline_job(n: int) -> None:
        seen.append(wurk.unique.locked("default", "Unique::Inline", [n]))
        seen.append(inline_job.perform_async(n))  # a duplicate while it runs
        if n == 2:
            raise RuntimeError("fails")

    inline_job.perform_inline(1)
    assert seen[0] is not None and seen[1] is None and lock_keys(r) == []
    with pytest.raises(RuntimeError):
        inline_job.perform_inline(2)  # nothing is pending to retry: released all the same
    assert lock_keys(r) == [] and inline_job.perform_async(2) is not None
    assert inline_job.set(unique_for=False).perform_inline(3) is None  # bypass: no lock
    assert seen[-2] is None and seen[-1] is not None
    assert len(seen) == 6
