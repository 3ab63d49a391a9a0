"""ScheduledSet, RetrySet, DeadSet and their entries against the real server."""

from __future__ import annotations

import json
import logging
import math
import random
import re
import threading
import time
from typing import Any

import pytest
import redis

import wurk
import wurk.api
from tests.helpers.faults import config_for
from tests.helpers.proxy import FaultProxy
from tests.helpers.server import Server
from tests.helpers.wait import wait_until
from wurk.api import DeadSet, JobSet, RetrySet, ScheduledSet, SortedEntry
from wurk.api.sets import BULK_PAGE
from wurk.errors import InspectionError, JobKilled, RedisUnavailable


def payload(n: int, **extra: Any) -> dict[str, Any]:
    return {"retry": True, "queue": "default", "class": "HardJob", "args": [n],
            "jid": f"{n:024x}", "created_at": 1700000000123, **extra}


def member(n: int, **extra: Any) -> str:
    return json.dumps(payload(n, **extra), separators=(",", ":"))


def seed(r: redis.Redis, key: str, scores: dict[str, float]) -> None:
    pipe = r.pipeline(transaction=False)
    items = list(scores.items())
    for start in range(0, len(items), 1000):
        pipe.zadd(key, dict(items[start:start + 1000]))
    pipe.execute()


SETS = [ScheduledSet, RetrySet, DeadSet]


@pytest.mark.parametrize("cls", SETS)
def test_size_iterate_newest_first_fetch_find(cls: type[JobSet], config: wurk.Config,
                                              r: redis.Redis) -> None:
    job_set = cls(config)
    assert (job_set.key, job_set.size(), list(job_set)) == (cls.name, 0, [])
    seed(r, cls.name, {member(n): 1000.0 + n for n in range(120)})
    seed(r, cls.name, {member(500 + n): 1050.5 for n in range(3)})  # equal scores
    entries = list(job_set.iterate(page_size=7))
    assert job_set.size() == 123 == len(entries) == len({e.raw for e in entries})
    assert [e.score for e in entries] == sorted((e.score for e in entries), reverse=True)
    assert entries[0].args == [119] and entries[-1].args == [0]
    tied = job_set.fetch(1050.5)
    assert sorted(e.args[0] for e in tied) == [500, 501, 502]
    (one,) = job_set.fetch(1050.5, jid=f"{501:024x}")
    assert one.args == [501] and one.entry_id == f"1050.5-{501:024x}"
    found = job_set.find_job(f"{42:024x}")
    assert found is not None and found.score == 1042.0 and found.at == 1042.0
    assert job_set.find_job("f" * 24) is None and job_set.find_job("") is None


def test_scan_matches_substrings_literally(config: wurk.Config, r: redis.Redis) -> None:
    seed(r, "retry", {member(1, error_message="undefined method `x' for nil"): 1.0,
                      member(2, error_message="a*b literally"): 2.0,
                      member(3, error_message="axxb"): 3.0})
    retries = RetrySet(config)
    assert [e.args for e in retries.scan("undefined method")] == [[1]]
    assert [e.args for e in retries.scan("a*b")] == [[2]]  # the * is not a wildcard
    assert list(retries.scan("NoSuchText")) == []


def test_schedule_delete_clear(config: wurk.Config, r: redis.Redis) -> None:
    scheduled = ScheduledSet(config)
    scheduled.schedule(2000.25, payload(1))
    scheduled.schedule(2000.25, payload(2))
    scheduled.schedule(3000.0, payload(3))
    assert r.zscore("schedule", member(1)) == 2000.25
    assert scheduled.delete_by_jid(2000.25, f"{2:024x}") is True
    assert scheduled.delete_by_jid(2000.25, f"{2:024x}") is False
    assert scheduled.delete_by_value(member(3)) is True
    (entry,) = scheduled.iterate()
    assert entry.delete() is True and entry.delete() is False
    scheduled.schedule(1.0, payload(4))
    assert scheduled.clear() == 1 and r.exists("schedule") == 0


def test_retry_now_decrements_count_and_stamps_enqueued_at(config: wurk.Config,
                                                          r: redis.Redis) -> None:
    raw = member(1, retry_count=3, queue="low", error_class="E")
    r.zadd("retry", {raw: time.time() + 600})
    (entry,) = RetrySet(config).iterate()
    before = int(time.time() * 1000)
    assert entry.retry() is True
    assert r.zcard("retry") == 0 and r.smembers("queues") == {"low"}
    pushed = json.loads(r.lindex("queue:low", 0) or "")
    assert pushed["retry_count"] == 2 and pushed["error_class"] == "E"
    assert type(pushed["enqueued_at"]) is int and pushed["enqueued_at"] >= before
    assert entry.retry() is False  # already moved: nothing pushed twice
    assert r.llen("queue:low") == 1


def test_retry_now_in_float_format_and_without_retry_count(redis_server: Any,
                                                           r: redis.Redis) -> None:
    config = wurk.configure(redis_url=redis_server.url, timestamp_format="float")
    r.zadd("dead", {member(1): 5.0})
    (entry,) = DeadSet(config).iterate()
    assert entry.retry() is True
    pushed = json.loads(r.lindex("queue:default", 0) or "")
    assert "retry_count" not in pushed and type(pushed["enqueued_at"]) is float


def test_add_to_queue_keeps_retry_count(config: wurk.Config, r: redis.Redis) -> None:
    r.zadd("schedule", {member(1, retry_count=2): time.time() + 60})
    (entry,) = ScheduledSet(config).iterate()
    assert entry.add_to_queue() is True
    assert json.loads(r.lindex("queue:default", 0) or "")["retry_count"] == 2


def test_two_people_retrying_at_once_push_it_once(config: wurk.Config, r: redis.Redis) -> None:
    r.zadd("retry", {member(1): 10.0})
    first = next(RetrySet(config).iterate())
    second = RetrySet(config).find_job(first.jid)
    assert second is not None
    results: list[bool] = []
    threads = [threading.Thread(target=lambda e=e: results.append(e.retry()))
               for e in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert sorted(results) == [False, True] and r.llen("queue:default") == 1


def test_unparseable_or_unpushable_entries_refuse_retry(config: wurk.Config,
                                                        r: redis.Redis) -> None:
    r.zadd("dead", {"{not json": 1.0, member(2, queue="a|b"): 2.0, member(3, queue=7): 3.0})
    entries = {e.score: e for e in DeadSet(config).iterate()}
    with pytest.raises(InspectionError, match=r"not a job payload.*only be deleted"):
        entries[1.0].retry()
    with pytest.raises(InspectionError, match=re.escape("'a|b'")):
        entries[2.0].add_to_queue()
    with pytest.raises(InspectionError, match="queue 7"):
        entries[3.0].retry()
    assert r.zcard("dead") == 3 and r.exists("queue:default") == 0
    assert entries[1.0].delete() is True  # removable by its exact bytes


@pytest.mark.parametrize("spoiled", ["queue:default", "queues"])
def test_a_retry_into_a_key_of_another_type_moves_nothing(config: wurk.Config, r: redis.Redis,
                                                           spoiled: str) -> None:
    """inspection.md: retry() is "all in one Lua script: never in neither place". A script
    is not rolled back: a push refused after the removal lost the job, so the keys it
    writes are checked before anything is removed."""
    r.zadd("retry", {member(1): 1.0, member(2): 2.0})
    r.zadd("dead", {member(3): 3.0})
    r.set(spoiled, "a string, as a person at redis-cli left it")
    first = RetrySet(config).page(0, 1)[0]
    for move in (first.retry, first.add_to_queue, RetrySet(config).retry_all,
                 DeadSet(config).retry_all):
        with pytest.raises(redis.ResponseError, match=r"WRONGTYPE.*nothing was moved"):
            move()
    assert r.zrange("retry", 0, -1) == [member(1), member(2)]  # both still where they were
    assert r.zrange("dead", 0, -1) == [member(3)]
    assert r.get(spoiled) == "a string, as a person at redis-cli left it"
    r.delete(spoiled)
    assert first.retry() is True and r.zcard("retry") == 1  # the same call, keys put right


def test_a_write_is_not_replayed_after_its_connection_breaks(
        redis_server: Server, r: redis.Redis) -> None:
    """inspection.md: "writes are not [replayed]". The connection breaks after the ZREM
    reached Redis and before its reply came back: the call raises, and it is not sent
    again (a replay would have answered False, the entry being gone)."""
    r.zadd("retry", {member(1): 1.0})
    with FaultProxy(redis_server.port) as proxy:
        config = config_for(proxy.url)
        try:
            (entry,) = RetrySet(config).iterate()  # a connection to the proxy, open
            r.config_resetstat()
            raised = _cut_once_applied(proxy, entry.delete, lambda: not r.zcard("retry"),
                                       "the ZREM applied by Redis")
            assert isinstance(raised, RedisUnavailable), raised
            commands = r.info("commandstats").get("cmdstat_zrem", {}).get("calls")
            assert commands == 1, commands  # once: the test's client sent none
        finally:
            config.close()



@pytest.mark.parametrize("action", ["kill", "kill_all"])
def test_a_kill_whose_reply_is_lost_leaves_the_job_in_one_place(
        redis_server: Server, r: redis.Redis, action: str) -> None:
    """inspection.md: a move is "never in neither place". The connection breaks once the
    job has left the retry set and before the reply came back: the job is in the dead set
    (it was one step), not gone from both."""
    r.zadd("retry", {member(1): 1.0})
    with FaultProxy(redis_server.port) as proxy:
        config = config_for(proxy.url)
        try:
            retries = RetrySet(config)
            (entry,) = retries.iterate()  # a connection to the proxy, open
            move = entry.kill if action == "kill" else retries.kill_all
            raised = _cut_once_applied(proxy, move, lambda: not r.zcard("retry"),
                                       "the kill applied by Redis", down_after=True)
            assert isinstance(raised, RedisUnavailable), raised
            assert r.zrange("dead", 0, -1) == [member(1)] and r.zcard("retry") == 0
        finally:
            config.close()


def _cut_once_applied(proxy: FaultProxy, call: Any, applied: Any, what: str, *,
                      down_after: bool = False) -> object:
    """``call()`` in a thread while each reply waits 0.3 s in the proxy; once Redis applied
    it (``applied()``), its connection is cut before the reply comes back. What the call
    returned or raised; ``down_after``: Redis stays unreachable until the call ends (no
    second connection finishes its work)."""
    proxy.latency(0.3)
    outcome: list[object] = []
    calling = threading.Thread(target=lambda: outcome.append(_called(call)))
    calling.start()
    wait_until(applied, what=what)
    assert proxy.cut() >= 1
    if down_after:
        with proxy.outage():
            calling.join(10)
    else:
        calling.join(10)
    (result,) = outcome
    return result


def _called(fn: Any) -> object:
    try:
        return fn()
    except Exception as exc:
        return exc


def test_kill_moves_as_stored_and_runs_death_handlers(config: wurk.Config, r: redis.Redis,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    calls: list[tuple[dict[str, Any], BaseException]] = []

    def broken(job: dict[str, Any], exc: BaseException) -> None:
        raise RuntimeError("handler bug")

    config.death_handlers.extend([broken, lambda job, exc: calls.append((job, exc))])
    raw = '{"class":"Ruby","args":[1.50],"jid":"abc","retry_count":4}'
    r.zadd("retry", {raw: 10.0})
    (entry,) = RetrySet(config).iterate()
    before = time.time()
    with caplog.at_level(logging.ERROR, logger="wurk"):
        assert entry.kill() is True
    assert r.zcard("retry") == 0
    ((dead, score),) = r.zrange("dead", 0, -1, withscores=True)
    assert dead == raw and score >= before  # bytes unchanged, scored at the time of death
    ((job, exc),) = calls
    assert job["jid"] == "abc" and isinstance(exc, JobKilled) and str(exc) == "Job killed by API"
    assert "handler bug" in caplog.text or "death handler" in caplog.text
    assert entry.kill() is False and len(calls) == 1


def test_kill_without_notification_and_with_own_error(config: wurk.Config,
                                                      r: redis.Redis) -> None:
    calls: list[BaseException] = []
    config.death_handlers.append(lambda job, exc: calls.append(exc))
    r.zadd("schedule", {member(1): 1.0, member(2): 2.0})
    first, second = ScheduledSet(config).iterate()
    assert first.kill(notify_failure=False) is True and calls == []
    boom = ValueError("why")
    assert second.kill(exc=boom) is True and calls == [boom]
    assert r.zcard("dead") == 2


def test_dead_set_is_trimmed_like_sidekiq(redis_server: Any, r: redis.Redis) -> None:
    config = wurk.configure(redis_url=redis_server.url, dead_max_jobs=3, dead_timeout=3600)
    dead = DeadSet(config)
    r.zadd("dead", {member(0): time.time() - 7200})  # older than dead_timeout
    for n in range(1, 6):
        dead.kill(payload(n), notify_failure=False)
    # Sidekiq's rank trim keeps dead_max_jobs - 1 entries, and so does wurk's: both sides agree.
    assert sorted(e.args[0] for e in dead.iterate()) == [4, 5]
    dead.kill("{raw text", trim=False)
    assert dead.size() == 3
    dead.trim()
    assert dead.size() == 2


def test_dead_set_kill_accepts_text_and_notifies_with_parsed_job(config: wurk.Config,
                                                                 r: redis.Redis) -> None:
    seen: list[dict[str, Any]] = []
    config.death_handlers.append(lambda job, exc: seen.append(job))
    DeadSet(config).kill(member(7))
    DeadSet(config).kill("{not json")  # stored raw; no job to hand to handlers
    assert [job["args"] for job in seen] == [[7]]
    assert set(r.zrange("dead", 0, -1)) == {member(7), "{not json"}


def test_reschedule_uses_the_stored_member(config: wurk.Config, r: redis.Redis) -> None:
    raw = '{"class":"X","args":[1.0],"jid":"j"}'  # 1.0 would re-serialise differently
    r.zadd("schedule", {raw: 100.0})
    (entry,) = ScheduledSet(config).iterate()
    assert entry.reschedule(250.5) is True and entry.score == 250.5
    assert r.zrange("schedule", 0, -1, withscores=True) == [(raw, 250.5)]
    entry.delete()
    assert entry.reschedule(300.0) is False and r.zcard("schedule") == 0


def test_retry_all_moves_everything_it_can(config: wurk.Config, r: redis.Redis) -> None:
    seed(r, "retry", {member(n, retry_count=1, queue=f"q{n % 3}"): float(n)
                      for n in range(250)})
    r.zadd("retry", {"{broken": 0.5})
    assert RetrySet(config).retry_all() == 250
    assert r.zrange("retry", 0, -1) == ["{broken"]
    assert sum(r.llen(f"queue:q{i}") for i in range(3)) == 250
    assert r.smembers("queues") == {"q0", "q1", "q2"}
    assert {json.loads(x)["retry_count"] for x in r.lrange("queue:q0", 0, -1)} == {0}


def test_retry_all_and_kill_all_reach_every_entry_while_sooner_ones_arrive(
        config: wurk.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """New failures scored sooner than the entries left (a worker's retry while a person
    presses "retry all") shifted the ranks retry_all and kill_all paged by: entries present
    from start to end were left behind, as many as had arrived."""
    old = {member(n, queue="q"): 1000.0 + n for n in range(250)}
    arrivals = iter(range(10_000, 10_300))

    def arrive() -> None:  # 20 entries scored below every one left, after each page
        seed(r, "retry", {member(next(arrivals), queue="new"): float(n) for n in range(20)})

    requeue, take = JobSet._requeue_batch, JobSet._take
    monkeypatch.setattr(JobSet, "_requeue_batch",
                        lambda self, batch: (requeue(self, batch), arrive())[0])
    seed(r, "retry", old)
    assert RetrySet(config).retry_all() == 250
    pushed = [json.loads(x)["jid"] for x in r.lrange("queue:q", 0, -1)]
    assert sorted(pushed) == sorted(json.loads(m)["jid"] for m in old)
    assert r.llen("queue:new") == 0  # arrivals scored below the cursor are left
    assert not any(m in old for m in r.zrange("retry", 0, -1))

    r.delete("retry")
    monkeypatch.setattr(JobSet, "_requeue_batch", requeue)
    monkeypatch.setattr(JobSet, "_take", lambda self, members: (take(self, members),
                                                                 arrive())[0])
    seed(r, "retry", old)
    assert RetrySet(config).kill_all() == 250
    assert set(old) <= set(r.zrange("dead", 0, -1))
    assert not any(m in old for m in r.zrange("retry", 0, -1))


def test_dead_retry_all(config: wurk.Config, r: redis.Redis) -> None:
    seed(r, "dead", {member(n): float(n) for n in range(30)})
    assert DeadSet(config).retry_all() == 30
    assert r.zcard("dead") == 0 and r.llen("queue:default") == 30


def test_kill_all_moves_every_retry_to_dead_without_handlers(config: wurk.Config,
                                                             r: redis.Redis) -> None:
    calls: list[Any] = []
    config.death_handlers.append(lambda job, exc: calls.append(job))
    entries = {member(n): float(n) for n in range(230)}
    seed(r, "retry", entries)
    r.zadd("retry", {"{broken": 0.5})
    assert RetrySet(config).kill_all() == 231
    assert r.zcard("retry") == 0 and set(r.zrange("dead", 0, -1)) == {*entries, "{broken"}
    assert calls == []


def test_kill_all_with_notify_failure_runs_the_death_handlers_once_per_job(
        config: wurk.Config, r: redis.Redis) -> None:
    """Sidekiq 7's ``kill_all(notify_failure: true, ex:)``: each job moved is told to the
    death handlers with the error given; an entry that is no payload moves without one."""
    calls: list[tuple[str, BaseException]] = []
    config.death_handlers.append(lambda job, exc: calls.append((job["jid"], exc)))
    entries = {member(n): float(n) for n in range(230)}
    seed(r, "retry", entries)
    r.zadd("retry", {"{broken": 0.5})
    gone = RuntimeError("the release was rolled back")
    assert RetrySet(config).kill_all(notify_failure=True, exc=gone) == 231
    assert sorted(jid for jid, _ in calls) == sorted(json.loads(m)["jid"] for m in entries)
    assert all(exc is gone for _, exc in calls)
    seed(r, "retry", {member(999): 1.0})
    calls.clear()
    assert RetrySet(config).kill_all(notify_failure=True) == 1
    assert [type(exc).__name__ for _, exc in calls] == ["JobKilled"]


@pytest.mark.parametrize("at", [float("nan"), "soon", True, None])
def test_a_time_that_is_no_number_is_refused_naming_it(config: wurk.Config, r: redis.Redis,
                                                      at: Any) -> None:
    """``schedule`` and ``reschedule`` passed NaN to Redis, which refused it in its own words
    ("value is not a valid float"), and a text of digits or a bool went through ``float()``."""
    r.zadd("retry", {member(1): 10.0})
    with pytest.raises(ValueError, match="epoch seconds"):
        ScheduledSet(config).schedule(at, {"class": "X", "args": [], "jid": "b" * 24})
    (entry,) = RetrySet(config).iterate()
    with pytest.raises(ValueError, match="epoch seconds"):
        entry.reschedule(at)
    assert r.zrange("retry", 0, -1, withscores=True) == [(member(1), 10.0)]
    assert r.zcard("schedule") == 0


def test_retry_all_and_kill_all_page_through_entries_sharing_one_score(
        config: wurk.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bulk schedule puts thousands of jobs at one score. The page after the first was
    every entry sharing the last one's score — all 100,000 of a bulk schedule read and moved
    in one pipeline; each page is now ``BULK_PAGE`` entries at most, found by rank after the
    last entry handled (those left in place — not job payloads — are passed once)."""
    ties = {member(n, queue="q"): 5.0 for n in range(2_500)}
    seed(r, "retry", {**ties, "{left": 5.0, "{also left": 5.0})
    pages: list[int] = []
    requeue = JobSet._requeue_batch
    monkeypatch.setattr(JobSet, "_requeue_batch",
                        lambda self, batch: (pages.append(len(batch)), requeue(self, batch))[1])
    assert RetrySet(config).retry_all() == 2_500
    assert r.llen("queue:q") == 2_500 and r.zcard("retry") == 2
    assert max(pages) <= BULK_PAGE and sum(pages) == 2_500
    seed(r, "retry", ties)
    assert RetrySet(config).kill_all() == 2_502  # every entry, payload or not
    assert r.zcard("dead") == 2_502 and r.zcard("retry") == 0


def test_a_failed_burial_puts_the_entry_back(config: wurk.Config, r: redis.Redis) -> None:
    r.zadd("retry", {member(1): 10.0})
    r.set("dead", "not a sorted set")  # ZADD dead fails with WRONGTYPE
    (entry,) = RetrySet(config).iterate()
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        entry.kill()
    assert r.zrange("retry", 0, -1, withscores=True) == [(member(1), 10.0)]


# -- paging under concurrent change ---------------------------------------------------------
def test_25000_entries_changed_between_pages_each_yielded_once(config: wurk.Config,
                                                               r: redis.Redis) -> None:
    """Adds above, below and at the cursor's score, removes read and unread entries, every
    page; scores repeat, so ties straddle page boundaries."""
    rng = random.Random(8)
    scores = {member(n): float(rng.randrange(5000)) for n in range(25_000)}
    seed(r, "retry", scores)
    members = list(scores)
    removed: set[str] = set()
    seen: list[str] = []
    added = 0
    for index, entry in enumerate(RetrySet(config).iterate(page_size=50)):
        seen.append(entry.raw.decode())
        if index % 50 != 49:
            continue
        added += 3
        r.zadd("retry", {member(10**6 + added): entry.score,       # a tie at the cursor
                         member(10**6 + added + 1): entry.score + 1,  # already passed
                         member(10**6 + added + 2): entry.score - 1})  # still ahead
        for victim in (entry.raw.decode(), rng.choice(members)):
            if r.zrem("retry", victim):
                removed.add(victim)
    assert len(seen) == len(set(seen)), "an entry was yielded twice"
    missing = set(scores) - removed - set(seen)
    assert not missing, f"{len(missing)} entries present throughout were not yielded"


def test_25000_entries_while_another_client_adds_and_removes(config: wurk.Config,
                                                             r: redis.Redis) -> None:
    rng = random.Random(9)
    stable = {member(n): float(rng.randrange(2000)) for n in range(25_000)}
    volatile = {member(100_000 + n): float(rng.randrange(2000)) for n in range(5_000)}
    seed(r, "dead", {**stable, **volatile})
    stop = threading.Event()
    operations = 0

    def churn() -> None:
        nonlocal operations
        other = redis.Redis.from_url(config.redis_url or "", decode_responses=True)
        pool, n = list(volatile), 0
        while not stop.is_set():
            n += 1
            other.zadd("dead", {member(200_000 + n): float(rng.randrange(2000))})
            other.zrem("dead", pool[n % len(pool)])
            operations += 2
        other.close()

    thread = threading.Thread(target=churn, name="test-churn")
    thread.start()
    try:
        seen = [e.raw.decode() for e in DeadSet(config).iterate(page_size=50)]
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive() and operations > 0
    assert len(seen) == len(set(seen))
    assert set(stable) <= set(seen)


def test_entries_are_sorted_entries_with_parents(config: wurk.Config, r: redis.Redis) -> None:
    r.zadd("retry", {member(1): 1.0})
    (entry,) = RetrySet(config).iterate()
    assert isinstance(entry, SortedEntry) and isinstance(entry.parent, RetrySet)
    assert entry.to_dict()["score"] == 1.0 and entry.to_dict()["jid"] == f"{1:024x}"


def test_a_key_prefix_applies_to_every_key(redis_server: Any, r: redis.Redis) -> None:
    """Sidekiq 6 with redis-namespace: every key under `<ns>:`."""
    config = wurk.configure(redis_url=redis_server.url, key_prefix="ns")
    r.zadd("ns:retry", {member(1, queue="low"): 1.0})
    r.zadd("retry", {member(2): 1.0})  # another app's data, outside the namespace
    (entry,) = RetrySet(config).iterate()
    assert entry.args == [1] and RetrySet(config).key == "ns:retry"
    assert entry.retry()
    assert r.smembers("ns:queues") == {"low"} and r.llen("ns:queue:low") == 1
    (record,) = wurk.api.Queue("low", config).iterate()
    assert record.args == [1] and record.delete() and not r.exists("ns:queue:low")
    ScheduledSet(config).schedule(5.0, payload(3))
    DeadSet(config).kill(payload(4), notify_failure=False)
    assert r.zcard("ns:schedule") == 1 and r.zcard("ns:dead") == 1
    assert r.zcard("retry") == 1 and not r.exists("schedule") and not r.exists("dead")


def _largest_reply(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records the entries each ``RedisPool.run`` of the api brought back (its lists'
    lengths, nested ones summed)."""
    from wurk.connections.pool import RedisPool

    sizes: list[int] = []
    run = RedisPool.run

    def length(value: Any) -> int:
        if isinstance(value, (list, tuple)):
            return sum(length(item) for item in value) or len(value)
        return 1

    def recording(self: RedisPool, fn: Any, **kw: Any) -> Any:
        found = run(self, fn, **kw)
        sizes.append(length(found))
        return found

    monkeypatch.setattr(RedisPool, "run", recording)
    return sizes


def test_iterating_entries_that_share_one_score_reads_a_page_at_a_time(
        config: wurk.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bulk schedule puts thousands of jobs at one score. The page after the first read
    every member sharing the cursor's score in one reply (all 100,000 of such a schedule,
    into memory at once); each page is now found by rank after the cursor."""
    ties = {member(n): 5.0 for n in range(3_000)}
    seed(r, "schedule", {**ties, member(9_999): 7.0, member(9_998): 1.0})
    sizes = _largest_reply(monkeypatch)
    seen = [entry.raw.decode() for entry in ScheduledSet(config).iterate(page_size=50)]
    assert seen[0] == member(9_999) and seen[-1] == member(9_998)
    assert sorted(seen[1:-1]) == sorted(ties) and len(seen) == len(set(seen))
    assert max(sizes) <= 2 * 50 * 2, f"one read brought back {max(sizes)} values"


@pytest.mark.parametrize("overwrite", ["hash", "deleted"])
def test_a_set_written_over_during_a_walk_ends_it(config: wurk.Config, r: redis.Redis,
                                                   overwrite: str) -> None:
    """Both walks (newest first, and the bulk actions' oldest first) end where the set's key
    was deleted or written over by hand: the script reading on from the cursor raised
    WRONGTYPE where the reads before it find such a key absent."""
    seed(r, "retry", {member(n): float(n) for n in range(120)})
    retries = RetrySet(config)
    entries = retries.iterate(page_size=50)
    first = [next(entries) for _ in range(50)]
    cursor = (first[-1].raw, first[-1].score)
    r.delete("retry")
    if overwrite == "hash":
        r.hset("retry", "field", "value")
    assert list(entries) == [] and len(first) == 50
    assert retries._after(cursor, 10) == []


def test_a_walk_goes_on_from_where_its_cursor_was_when_the_cursor_moved(
        config: wurk.Config, r: redis.Redis) -> None:
    """The last entry yielded, rescheduled, removed or left while the walk reads on: every
    entry present throughout is still yielded once, whether the cursor's score is shared."""
    for shared in (False, True):
        r.delete("retry")
        scores = {member(n): float(n // 3 if shared else n) for n in range(60)}
        seed(r, "retry", scores)
        seen: list[str] = []
        moved: set[str] = set()
        for index, entry in enumerate(RetrySet(config).iterate(page_size=4)):
            seen.append(entry.raw.decode())
            if index % 4 == 3:  # the cursor of the next page
                action = (index // 4) % 3
                if action == 0:
                    r.zadd("retry", {entry.raw: entry.score + 30})   # above: passed
                elif action == 1:
                    r.zadd("retry", {entry.raw: entry.score - 30})   # below: ahead
                else:
                    r.zrem("retry", entry.raw)
                moved.add(entry.raw.decode())
        assert set(scores) - moved <= set(seen), f"shared={shared}: an entry was skipped"
        assert len([s for s in seen if s not in moved]) == len(set(scores) - moved)


def test_a_walk_pages_through_infinite_scores_and_their_ties(config: wurk.Config,
                                                             r: redis.Redis) -> None:
    scores = {member(n): [math.inf, -math.inf, 0.0][n % 3] for n in range(30)}
    seed(r, "dead", scores)
    for size in (1, 4):
        seen = [e.raw.decode() for e in DeadSet(config).iterate(page_size=size)]
        assert sorted(seen) == sorted(scores)
        assert [scores[s] for s in seen] == sorted(scores.values(), reverse=True)
        assert seen == r.zrange("dead", 0, -1, desc=True)


def test_fetch_by_score_and_jid_reads_entries_sharing_the_score_a_page_at_a_time(
        config: wurk.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """``fetch(score, jid)`` and ``delete_by_jid`` read every entry of a bulk schedule's
    score in one reply, and parsed each, to find one job."""
    seed(r, "schedule", {member(n): 5.0 for n in range(2_500)})
    sizes = _largest_reply(monkeypatch)
    (found,) = ScheduledSet(config).fetch(5.0, f"{2_400:024x}")
    assert found.raw.decode() == member(2_400)
    assert ScheduledSet(config).delete_by_jid(5.0, f"{7:024x}")
    assert r.zcard("schedule") == 2_499 and len(ScheduledSet(config).fetch(5.0)) == 2_499
    assert max(sizes[:2]) <= 2 * wurk.api.sets.ADDRESS_PAGE, max(sizes[:2])


@pytest.mark.parametrize("cls", SETS)
def test_fetch_by_a_score_range(cls: type[JobSet], config: wurk.Config,
                                r: redis.Redis) -> None:
    """As Sidekiq's ``fetch(score_range, jid = nil)``: a ``(low, high)`` pair
    is every entry scored from low to high, both included, lowest first (a page at a time);
    with a jid, only that job's."""
    job_set = cls(config)
    seed(r, cls.name, {member(n): 100.0 + n for n in range(2_500)})
    found = job_set.fetch((110.0, 112.5))
    assert [e.args[0] for e in found] == [10, 11, 12]
    assert [e.score for e in found] == [110.0, 111.0, 112.0]
    assert len(job_set.fetch((100.0, 2_599.0))) == 2_500  # past ADDRESS_PAGE
    (one,) = job_set.fetch((0, math.inf), jid=f"{2_400:024x}")
    assert one.args == [2_400]
    assert job_set.fetch((111.5, 111.7)) == [] and job_set.fetch((200.0, 100.0)) == []
    with pytest.raises(ValueError, match="low, high"):
        job_set.fetch((1.0, 2.0, 3.0))  # type: ignore[arg-type]
