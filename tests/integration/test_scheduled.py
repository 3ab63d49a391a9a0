"""The scheduler: due jobs move from retry/schedule to their queues, atomically by default."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from tests.helpers.server import Server, free_port
from tests.helpers.wait import step, wait_until
from wurk import payload as P
from wurk.config import Config
from wurk.connections.pool import RedisPool
from wurk.morgue import Morgue
from wurk.retry import JobRetry
from wurk.runtime.clock import SYSTEM, Clock, ManualClock
from wurk.runtime.outage import MAX_WAIT
from wurk.scheduled import ATOMIC_BATCH, Scheduler

PAST = 1_000_000_000.5  # 2001: due


@pytest.fixture
def make() -> Iterator[Callable[..., Scheduler]]:
    made: list[tuple[Scheduler, Config]] = []

    def build(*, pool: RedisPool | None = None, clock: Clock = SYSTEM,
              **settings: Any) -> Scheduler:
        config = Config(**settings)
        scheduler = Scheduler(config, pool=pool, clock=clock)
        made.append((scheduler, config))
        return scheduler

    yield build
    for scheduler, config in made:
        scheduler.stop(2)
        config.close()


def raw_job(queue: str = "default", **fields: Any) -> str:
    job = {"retry": True, "queue": queue, "class": "Sched::Job", "args": [1],
           "jid": P.new_jid(), "created_at": 1700000000123}
    job.update(fields)
    return P.dumps(job)


def queue_entries(r: redis.Redis, queue: str = "default") -> list[str]:
    return list(reversed(r.lrange(f"queue:{queue}", 0, -1)))  # oldest first


# -- what moves -----------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["atomic", "client"])
def test_due_jobs_move_and_future_ones_stay(make: Callable[..., Scheduler], r: redis.Redis,
                                            mode: str) -> None:
    due, future = raw_job(), raw_job()
    retry_due = raw_job(queue="low")
    r.zadd("schedule", {due: PAST, future: time.time() + 3600})
    r.zadd("retry", {retry_due: time.time() - 1})
    assert make(scheduler=mode).enqueue_due() == 2
    assert r.zrange("schedule", 0, -1) == [future] and r.zcard("retry") == 0
    assert [json.loads(e)["jid"] for e in queue_entries(r)] == [json.loads(due)["jid"]]
    assert [json.loads(e)["jid"] for e in queue_entries(r, "low")] == [
        json.loads(retry_due)["jid"]]
    assert r.smembers("queues") == {"default", "low"}
    assert make(scheduler=mode).enqueue_due() == 0


@pytest.mark.parametrize("mode", ["atomic", "client"])
@pytest.mark.parametrize("skew", [-86400.0, 86400.0])
def test_due_is_judged_on_redis_clock_not_the_schedulers(
        make: Callable[..., Scheduler], r: redis.Redis, monkeypatch: pytest.MonkeyPatch,
        mode: str, skew: float) -> None:
    # A scheduler whose clock is a day off (either way) moves what Redis's clock says is
    # due, and nothing else: every process moves a job at the same moment.
    redis_now = float(r.time()[0])
    due, future = raw_job(), raw_job()
    r.zadd("schedule", {due: redis_now - 5, future: redis_now + 3600})
    scheduler = make(scheduler=mode)
    # the scheduler's module alone sees the skewed clock (the client's stamps keep theirs)
    monkeypatch.setattr("wurk.scheduled.time", types.SimpleNamespace(
        time=lambda: redis_now + skew))
    assert scheduler.enqueue_due() == 1
    assert r.zrange("schedule", 0, -1) == [future]
    assert [json.loads(e)["jid"] for e in queue_entries(r)] == [json.loads(due)["jid"]]


def test_atomic_splices_enqueued_at_and_keeps_every_other_byte(
        make: Callable[..., Scheduler], r: redis.Redis) -> None:
    # args before queue, with a nested "queue" key: the queue is read, not pattern-matched
    raw = ('{"class":"Sched::Big","args":[1152921504606846977,{"queue":"evil"},'
           '"ünïcødé 😀 \\"quoted\\" }"],"queue":"default","jid":"abc",'
           '"created_at":1700000000123,"enqueued_at":"2023-01-01T00:00:00Z",'
           '"f":1.0000000000000002,"custom":{"z":1,"a":[]}}')
    r.zadd("schedule", {raw: PAST})
    before = time.time()
    assert make().enqueue_due() == 1
    [moved] = queue_entries(r)
    assert moved.startswith(raw[:-1] + ',"enqueued_at":') and moved.endswith("}")
    stamp = moved[len(raw) - 1 + len(',"enqueued_at":'):-1]
    assert re.fullmatch(r"\d{13}", stamp) and int(before * 1000) <= int(stamp)
    job = json.loads(moved)
    assert job["args"][0] == 2**60 + 1 and job["enqueued_at"] == int(stamp)
    assert r.llen("queue:evil") == 0


@pytest.mark.parametrize("stamp_format", ["ms", "float"])
def test_atomic_replaces_a_retried_jobs_enqueued_at_in_place(
        make: Callable[..., Scheduler], r: redis.Redis, stamp_format: str) -> None:
    """A retried job has an ``enqueued_at`` already: the move gives it the new time in place,
    one key, every other byte kept (no second ``enqueued_at`` for a strict JSON reader)."""
    head = ('{"class":"Sched::Retried","args":[1152921504606846977,"\\"enqueued_at\\":1"],'
            '"queue":"default","jid":"abc","enqueued_at":')
    tail = ',"retry_count":2,"custom":{"z":1}}'
    raw = head + "1700000000125" + tail
    r.zadd("retry", {raw: PAST})
    before = time.time()
    make(timestamp_format=stamp_format).enqueue_due()
    [moved] = queue_entries(r)
    assert moved.startswith(head) and moved.endswith(tail)
    assert moved.count('"enqueued_at":') == 1
    job = json.loads(moved)
    assert job["args"] == [2**60 + 1, "\"enqueued_at\":1"]  # in a string: not a key
    stamp = job["enqueued_at"]
    assert (stamp / 1000 if stamp_format == "ms" else stamp) >= before - 1


@pytest.mark.parametrize("top_key", ['"enqueued_at"', '"enqueued\\u005fat"'])
def test_atomic_appends_when_the_key_is_not_the_one_occurrence(
        make: Callable[..., Scheduler], r: redis.Redis, top_key: str) -> None:
    """"enqueued_at" also inside the arguments (a nested object's key): which occurrence is
    the top-level one cannot be told from the text, so the field is appended (the later key
    wins when read) and the nested one is left as it was. With the top-level key written
    with a \\u escape (by hand, or an older or foreign writer), the text's one literal
    "enqueued_at" is an argument's key, which the move used to overwrite with the time,
    changing what the job is called with: appended too."""
    raw = ('{"class":"Sched::Nested","args":[{"enqueued_at":5}],"queue":"default",'
           f'"jid":"abc",{top_key}:1700000000125}}')
    assert json.loads(raw)["enqueued_at"] == 1700000000125
    r.zadd("retry", {raw: PAST})
    make().enqueue_due()
    [moved] = queue_entries(r)
    assert moved.startswith(raw[:-1] + ',"enqueued_at":')
    job = json.loads(moved)
    assert job["args"] == [{"enqueued_at": 5}] and job["enqueued_at"] > 1700000000125


def test_atomic_float_format_stamps_float_seconds(make: Callable[..., Scheduler],
                                                  r: redis.Redis) -> None:
    raw = raw_job()
    r.zadd("schedule", {raw: PAST})
    make(timestamp_format="float").enqueue_due()
    [moved] = queue_entries(r)
    assert re.fullmatch(r',"enqueued_at":\d{10}\.\d+}', moved[len(raw) - 1:])
    assert type(json.loads(moved)["enqueued_at"]) is float


def test_client_mode_stamps_enqueued_at_in_both_formats(make: Callable[..., Scheduler],
                                                        r: redis.Redis) -> None:
    r.zadd("schedule", {raw_job(): PAST})
    make(scheduler="client").enqueue_due()
    assert type(json.loads(queue_entries(r)[0])["enqueued_at"]) is int
    r.delete("queue:default")
    r.zadd("schedule", {raw_job(): PAST})
    make(scheduler="client", timestamp_format="float").enqueue_due()
    assert type(json.loads(queue_entries(r)[0])["enqueued_at"]) is float


def test_a_backlog_drains_in_one_pass(make: Callable[..., Scheduler], r: redis.Redis) -> None:
    count = ATOMIC_BATCH * 2 + 50
    r.zadd("schedule", {raw_job(n=i): PAST + i for i in range(count)})
    assert make().enqueue_due() == count
    assert r.llen("queue:default") == count and r.zcard("schedule") == 0
    assert [json.loads(e)["n"] for e in queue_entries(r)] == list(range(count))


def test_a_backlog_moves_a_hundred_jobs_per_round_trip(make: Callable[..., Scheduler],
                                                     r: redis.Redis) -> None:
    """docs/scheduler.md: "a Lua script moves up to 100 due jobs per call straight from the
    set into `queue:<name>` … and a backlog drains at about a hundred jobs per round trip."
    Each call of the move script takes at most 100 (all 100 while that many are due), and
    the whole pass costs that many calls plus a constant few (the empty `retry` set, the
    looks for abandoned claims): not a round trip per job."""
    count = 10 * ATOMIC_BATCH + 50
    r.zadd("schedule", {raw_job(n=i): PAST + i for i in range(count)})
    scheduler = make()
    moved_per_call: list[int] = []
    move = scheduler._move

    def counted(*args: Any, **kwargs: Any) -> Any:
        reply = move(*args, **kwargs)
        moved_per_call.append(int(reply[0]))
        return reply

    scheduler._move = counted  # type: ignore[assignment,method-assign]

    def calls() -> int:  # the scripts called (commands they run inside count apart)
        stats = r.info("commandstats")
        return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
                   for name in ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall"))

    r.rename("schedule", "held")
    scheduler.enqueue_due()  # the scripts loaded (a first call may meet NOSCRIPT)
    before = calls()
    assert scheduler.enqueue_due() == 0  # a pass over nothing due: its fixed cost
    fixed = calls() - before
    r.rename("held", "schedule")
    moved_per_call.clear()
    before = calls()
    assert scheduler.enqueue_due() == count
    round_trips = calls() - before
    assert ATOMIC_BATCH == 100
    assert [n for n in moved_per_call if n] == [100] * 10 + [50]
    assert max(moved_per_call) <= ATOMIC_BATCH
    # One call per hundred: 11 for 1,050 jobs (the last one's 50 ends the pass), where the
    # pass over nothing made one.
    assert round_trips - fixed == 11 - 1, f"{round_trips} round trips, {fixed} for nothing"
    assert r.llen("queue:default") == count and r.zcard("schedule") == 0


def test_a_stop_ends_a_pass_in_progress_after_its_current_batch(
    make: Callable[..., Scheduler], r: redis.Redis
) -> None:
    """docs/scheduler.md: "`stop(timeout)` wakes the thread at once; a pass in progress ends
    after its current batch." — the stop asked while a batch is moved: that batch lands
    whole, and no further one is moved by this pass."""
    count = 10 * ATOMIC_BATCH
    r.zadd("schedule", {raw_job(n=i): PAST + i for i in range(count)})
    scheduler = make()
    move = scheduler._move

    def stopped_during(*args: Any, **kwargs: Any) -> Any:
        reply = move(*args, **kwargs)
        if int(reply[0]):
            scheduler.stop(0)  # asked while this batch is in progress
        return reply

    scheduler._move = stopped_during  # type: ignore[assignment,method-assign]
    assert scheduler.enqueue_due() == ATOMIC_BATCH
    assert r.llen("queue:default") == ATOMIC_BATCH
    assert r.zcard("schedule") == count - ATOMIC_BATCH
    assert [json.loads(e)["n"] for e in queue_entries(r)] == list(range(ATOMIC_BATCH))


def test_retry_queue_is_honoured(make: Callable[..., Scheduler], r: redis.Redis) -> None:
    scheduler = make()
    config = scheduler.config
    job = json.loads(raw_job(queue="critical", retry_queue="slow"))
    JobRetry(config, Morgue(config)).handle(job, ValueError("x"), definition=None,
                                            instance=None)
    [member] = r.zrange("retry", 0, -1)
    r.zadd("retry", {member: PAST})
    assert scheduler.enqueue_due() == 1
    [moved] = queue_entries(r, "slow")
    assert moved.startswith(member[:-1]) and json.loads(moved)["retry_count"] == 0


def test_survives_script_flush(make: Callable[..., Scheduler], r: redis.Redis) -> None:
    for mode in ("atomic", "client"):
        scheduler = make(scheduler=mode)
        r.zadd("schedule", {raw_job(): PAST})
        assert scheduler.enqueue_due() == 1
        r.script_flush()
        r.zadd("schedule", {raw_job(): PAST})
        assert scheduler.enqueue_due() == 1
    assert r.llen("queue:default") == 4


def test_key_prefix_applies_inside_lua(make: Callable[..., Scheduler], r: redis.Redis) -> None:
    r.zadd("ns:schedule", {raw_job(): PAST})
    r.zadd("schedule", {raw_job(): PAST})
    assert make(key_prefix="ns").enqueue_due() == 1
    assert r.llen("ns:queue:default") == 1 and r.smembers("ns:queues") == {"default"}
    assert r.zcard("schedule") == 1 and not r.exists("queue:default")


# -- payloads the script cannot read --------------------------------------------------------------
def test_a_queue_name_of_any_utf8_moves(make: Callable[..., Scheduler],
                                       r: redis.Redis) -> None:
    name = "caf\u00e9-\u4e2d-\U0001F600-\U0010FFFD"
    r.zadd("schedule", {raw_job(queue=name): PAST})
    assert make().enqueue_due() == 1
    assert len(queue_entries(r, name)) == 1 and r.smembers("queues") == {name}


def test_a_payload_without_queue_takes_the_client_path(make: Callable[..., Scheduler],
                                                       r: redis.Redis) -> None:
    no_queue = '{"class":"Sched::Job","args":[],"jid":"noqueue0"}'
    readable = raw_job()
    r.zadd("schedule", {no_queue: PAST, readable: PAST + 1})
    assert make().enqueue_due() == 2
    jobs = [json.loads(e) for e in queue_entries(r)]
    assert sorted(j["jid"] for j in jobs) == sorted(["noqueue0", json.loads(readable)["jid"]])
    assert all("enqueued_at" in j for j in jobs)


def test_unparseable_member_goes_raw_to_the_dead_set(make: Callable[..., Scheduler],
                                                     r: redis.Redis) -> None:
    scheduler = make()
    reported: list[tuple[BaseException, dict[str, Any]]] = []
    scheduler.config.error_handlers.append(lambda e, ctx, cfg: reported.append((e, ctx)))
    r.zadd("schedule", {"{not json": PAST, raw_job(): PAST + 1})
    assert scheduler.enqueue_due() == 1
    assert r.zrange("dead", 0, -1) == ["{not json"] and r.zcard("schedule") == 0
    [(error, context)] = reported
    assert "not valid JSON" in str(error) and "scheduler" in context["context"]


@pytest.mark.parametrize("mode", ["atomic", "client"])
@pytest.mark.parametrize("queue", [b"fu\xffzz", b"fu\xed\xa0\x80zz", b"fu\\ud800zz",
                                   b"fu\xc0\xafzz", b"fu\xf4\x90\x80\x80zz", b"fu\xe2\x82"],
                         ids=["byte", "raw_surrogate", "escaped_surrogate", "overlong",
                              "past_unicode", "cut"])
def test_a_queue_name_that_is_no_utf8_goes_to_the_dead_set(
    make: Callable[..., Scheduler], redis_server: Server, mode: str, queue: bytes
) -> None:
    """No worker can name such a queue (nor any reader decode it): moved there, the job
    would sit where nothing fetches it. It goes raw to the dead set, as a member that is
    not UTF-8 does on the one-at-a-time path; the good job beside it moves."""
    raw = redis.Redis.from_url(redis_server.url)
    member = b'{"class":"Sched::Job","args":[],"queue":"' + queue + b'"}'
    raw.zadd("schedule", {member: PAST, raw_job().encode(): PAST + 1})
    assert make(scheduler=mode).enqueue_due() == 1
    assert raw.zrange("dead", 0, -1) == [member]
    assert raw.smembers("queues") == {b"default"} and raw.llen("queue:default") == 1
    assert raw.keys(b"queue:fu*") == [] and raw.zcard("schedule") == 0
    raw.close()


@pytest.mark.parametrize("mode", ["atomic", "client"])
def test_invalid_members_are_killed_not_retried(make: Callable[..., Scheduler],
                                                r: redis.Redis, mode: str) -> None:
    scheduler = make(scheduler=mode)
    deaths: list[Any] = []
    scheduler.config.death_handlers.append(lambda job, exc: deaths.append(job["jid"]))
    r.zadd("schedule", {raw_job(queue="a|b", jid="pipe"): PAST,
                        '{"class":"X","args":[],"queue":5,"jid":"number"}': PAST + 1,
                        raw_job(): PAST + 2})
    assert scheduler.enqueue_due() == 1
    dead = {json.loads(m)["jid"]: json.loads(m) for m in r.zrange("dead", 0, -1)}
    assert set(dead) == {"pipe", "number"} and sorted(deaths) == ["number", "pipe"]
    assert all(d["error_class"] == "wurk.InvalidPayload" for d in dead.values())
    assert r.zcard("schedule") == 0 and r.llen("queue:default") == 1


def test_a_member_the_client_cannot_push_under_this_configuration_blocks_nothing(
        make: Callable[..., Scheduler], r: redis.Redis) -> None:
    """Client mode: a stored job whose push raised ``ConfigError`` — a ``shard`` naming no
    shard here (a Ruby job's own option, a shard since removed), ``encrypt`` with no
    encryption set up — went back at its score, the lowest due, each pass: no later due job
    of ``retry`` nor of ``schedule`` moved again. A ``shard`` field is ignored, as the
    atomic mode ignores it (the job is in this shard's set already); a job that cannot be
    pushed here goes to the dead set with the error, as one with other bad fields does."""
    scheduler = make(scheduler="client")
    r.zadd("retry", {raw_job(jid="sharded", shard="gone"): PAST,
                     raw_job(jid="sealed", encrypt=True, args=[1, "secret"]): PAST + 1,
                     raw_job(jid="plain"): PAST + 2})
    r.zadd("schedule", {raw_job(jid="later"): PAST})
    assert scheduler.enqueue_due() == 3
    assert sorted(json.loads(e)["jid"] for e in queue_entries(r)) == ["later", "plain",
                                                                       "sharded"]
    [dead] = [json.loads(m) for m in r.zrange("dead", 0, -1)]
    assert dead["jid"] == "sealed" and "encryption is not enabled" in dead["error_message"]
    assert dead["args"] == [1, "secret"] and dead["error_class"] == "wurk.InvalidPayload"
    assert r.zcard("retry") == 0 and r.zcard("schedule") == 0
    assert r.zcard("wurk:claimed:retry") == 0


def test_an_old_at_field_does_not_reschedule(make: Callable[..., Scheduler],
                                             r: redis.Redis) -> None:
    r.zadd("schedule", {raw_job(at=time.time() + 3600): PAST})
    assert make(scheduler="client").enqueue_due() == 1
    assert r.llen("queue:default") == 1 and r.zcard("schedule") == 0


# -- client mode and its middleware ---------------------------------------------------------------
def test_client_mode_runs_client_middleware(make: Callable[..., Scheduler],
                                            r: redis.Redis) -> None:
    scheduler = make(scheduler="client")

    def mark(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        payload["middleware"] = "ran"
        return call_next()

    scheduler.config.client_middleware.add(mark)
    r.zadd("schedule", {raw_job(): PAST})
    r.zadd("retry", {raw_job(error_class="X"): PAST})
    assert scheduler.enqueue_due() == 2
    assert [json.loads(e)["middleware"] for e in queue_entries(r)] == ["ran", "ran"]


def test_atomic_mode_does_not_run_client_middleware(make: Callable[..., Scheduler],
                                                    r: redis.Redis) -> None:
    scheduler = make()
    scheduler.config.client_middleware.add(
        lambda job, payload, queue, call_next: pytest.fail("middleware ran"))
    r.zadd("schedule", {raw_job(): PAST})
    assert scheduler.enqueue_due() == 1


def test_middleware_stopping_the_push_drops_the_job(make: Callable[..., Scheduler],
                                                    r: redis.Redis) -> None:
    scheduler = make(scheduler="client")
    scheduler.config.client_middleware.add(lambda job, payload, queue, call_next: None)
    r.zadd("schedule", {raw_job(): PAST})
    assert scheduler.enqueue_due() == 0
    assert r.zcard("schedule") == 0 and r.llen("queue:default") == 0


@pytest.mark.parametrize("bad", ["queue:default", "queues"])
def test_a_queue_key_of_another_type_loses_no_due_job_and_holds_up_no_other(
        make: Callable[..., Scheduler], r: redis.Redis, bad: str) -> None:
    """The atomic move took the job out of its set, then failed on WRONGTYPE pushing it to
    a queue key (or the queues set) written by hand as another type: a script's earlier
    writes stay, so the job was in neither place."""
    stuck, other = raw_job(), raw_job(queue="low")
    r.set(bad, "written by hand")
    r.zadd("schedule", {stuck: PAST, other: PAST + 1})
    scheduler = make(scheduler="atomic")
    with pytest.raises(redis.ResponseError) as refused:  # the stuck job's push, named
        scheduler.enqueue_due()
    assert "queue:default" in str(refused.value) and "stays in schedule" in str(refused.value)
    kept = r.zrange("schedule", 0, -1) + r.zrange("wurk:claimed:schedule", 0, -1)
    assert stuck in kept  # never lost: still due, waiting for the key to be mended
    if bad == "queue:default":  # the other job's queue is fine: it moved
        assert [json.loads(e)["jid"] for e in queue_entries(r, "low")] == [
            json.loads(other)["jid"]]
    r.delete(bad)
    scheduler.enqueue_due()
    assert r.zcard("schedule") == 0
    assert json.loads(stuck)["jid"] in {json.loads(e)["jid"] for e in queue_entries(r)}


@pytest.mark.parametrize("mode", ["client", "atomic"])
def test_a_due_job_that_cannot_be_pushed_holds_up_no_later_one(
        make: Callable[..., Scheduler], r: redis.Redis, mode: str) -> None:
    """One due job whose push fails every time (a client middleware that raises on it; in
    atomic mode one Lua cannot move, as a job naming no queue) stays where it is, and every
    later due job of its set moves, in the same pass, behind it."""
    scheduler = make(scheduler=mode)

    def picky(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        if payload["jid"] == "bad":
            raise RuntimeError("middleware refuses bad")
        return call_next()

    scheduler.config.client_middleware.add(picky)
    bad = '{"class":"Sched::Job","args":[],"jid":"bad"}'  # no queue: the client path
    later = [raw_job() for _ in range(ATOMIC_BATCH + 3)]  # past one atomic batch
    r.zadd("schedule", {bad: PAST, **{job: PAST + 1 + i for i, job in enumerate(later)}})
    with pytest.raises(RuntimeError, match="middleware refuses bad"):
        scheduler.enqueue_due()
    assert r.zrange("schedule", 0, -1, withscores=True) == [(bad, PAST)]
    assert [json.loads(e)["jid"] for e in queue_entries(r)] == [
        json.loads(job)["jid"] for job in later]
    assert r.zcard("wurk:claimed:schedule") == 0


@pytest.mark.parametrize("mode", ["client", "atomic"])
def test_a_stuck_retry_holds_up_no_scheduled_job(make: Callable[..., Scheduler],
                                                 r: redis.Redis, mode: str) -> None:
    """A due retry whose queue key holds another type fails each pass; the ``schedule``
    set, drained after ``retry``, still moves."""
    stuck, scheduled = raw_job(queue="broken"), raw_job()
    r.set("queue:broken", "written by hand")
    r.zadd("retry", {stuck: PAST})
    r.zadd("schedule", {scheduled: PAST})
    scheduler = make(scheduler=mode)
    with pytest.raises(redis.ResponseError, match="queue:broken"):
        scheduler.enqueue_due()
    assert r.zrange("retry", 0, -1) == [stuck]
    assert [json.loads(e)["jid"] for e in queue_entries(r)] == [json.loads(scheduled)["jid"]]


def test_a_failing_push_puts_the_exact_member_back(make: Callable[..., Scheduler],
                                                   r: redis.Redis) -> None:
    scheduler = make(scheduler="client")

    def broken(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        raise RuntimeError("middleware broke")

    scheduler.config.client_middleware.add(broken)
    member = '{"queue":"default", "class":"X","args":[2.50],"jid":"j"}'
    r.zadd("schedule", {member: PAST})
    with pytest.raises(RuntimeError, match="middleware broke"):
        scheduler.enqueue_due()
    assert r.zrange("schedule", 0, -1, withscores=True) == [(member, PAST)]


def test_a_push_that_raises_in_the_thread_is_put_back_and_reported(
        make: Callable[..., Scheduler], r: redis.Redis) -> None:
    """scheduler.md: "A job whose push raises is put back in the set with its original score
    and the error is reported" — by the running scheduler, which lives on."""
    clock = ManualClock()
    scheduler = make(scheduler="client", poll_interval_average=1.0, clock=clock)
    reported: list[tuple[BaseException, dict[str, Any]]] = []
    scheduler.config.error_handlers.append(lambda e, ctx, cfg: reported.append((e, ctx)))

    def broken(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        raise RuntimeError("middleware broke")

    scheduler.config.client_middleware.add(broken)
    member = raw_job()
    r.zadd("schedule", {member: PAST})
    scheduler.start()
    step(clock, MAX_WAIT + 60)  # past the initial wait: the first pass
    wait_until(lambda: bool(reported), what="the failed push to be reported")
    assert [(str(e), ctx) for e, ctx in reported] == [("middleware broke",
                                                       {"context": "scheduler"})]
    assert r.zrange("schedule", 0, -1, withscores=True) == [(member, PAST)]
    assert r.zcard("wurk:claimed:schedule") == 0 and r.llen("queue:default") == 0
    assert scheduler.is_alive()


# -- a crash between taking a due job and pushing it ------------------------------------------
_DIES_MID_PUSH = """
import os, sys
import wurk
from wurk.scheduled import Scheduler

config = wurk.Config(redis_url=sys.argv[1], scheduler=sys.argv[2])
config.client_middleware.add(lambda job_class, payload, queue, call_next: os._exit(9))
Scheduler(config).enqueue_due()
"""


def holders(r: redis.Redis, member: str) -> list[str]:
    """Every sorted set that holds ``member`` (wherever the scheduler keeps it)."""
    return sorted(key for key in r.scan_iter(_type="zset") if r.zscore(key, member) is not None)


@pytest.mark.parametrize("mode", ["client", "atomic"])
def test_a_scheduler_that_dies_mid_push_loses_no_job(
    redis_server: Any, r: redis.Redis, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The process dies after taking the due job out of ``schedule`` and before the push
    (every job in client mode; in atomic mode, one whose queue Lua cannot read): the job is
    in the claims, untouched while the claim is young, and pushed by the next scheduler once
    the lease ends."""
    member = raw_job() if mode == "client" else \
        '{"class":"Sched::Job","args":[],"jid":"noqueue0"}'
    r.zadd("schedule", {member: PAST})
    died = subprocess.run([sys.executable, "-c", _DIES_MID_PUSH, redis_server.url, mode],
                          capture_output=True, text=True, timeout=60)
    assert died.returncode == 9, died.stderr
    assert r.llen("queue:default") == 0
    assert holders(r, member) == ["wurk:claimed:schedule"], "the job is nowhere: lost"
    config = Config(redis_url=redis_server.url, scheduler=mode)
    try:
        survivor = Scheduler(config)
        assert survivor.enqueue_due() == 0  # a young claim: its scheduler may be pushing
        now = float(r.time()[0])  # the lease is counted on Redis's clock: age the claim there
        r.zadd("wurk:claimed:schedule", {member: now - survivor.claim_lease - 1})
        caplog.set_level(logging.WARNING, logger="wurk")
        assert survivor.enqueue_due() == 1
    finally:
        config.close()
    assert [json.loads(e)["jid"] for e in queue_entries(r)] == [json.loads(member)["jid"]]
    assert holders(r, member) == []
    assert any("stopped before pushing it" in rec.getMessage() for rec in caplog.records)


def test_a_claim_is_released_once_pushed_and_put_back_when_the_push_fails(
    make: Callable[..., Scheduler], r: redis.Redis
) -> None:
    scheduler = make(scheduler="client")
    member = raw_job()
    r.zadd("schedule", {member: PAST})
    assert scheduler.enqueue_due() == 1 and r.zcard("wurk:claimed:schedule") == 0
    failing = make(scheduler="client")
    failing.config.client_middleware.add(
        lambda job_class, payload, queue, call_next: (_ for _ in ()).throw(OSError("down")))
    r.zadd("retry", {member: PAST})
    with pytest.raises(OSError):
        failing.enqueue_due()
    assert r.zrange("retry", 0, -1, withscores=True) == [(member, PAST)]
    assert r.zcard("wurk:claimed:retry") == 0


# -- timing --------------------------------------------------------------------------------
def test_poll_interval_scales_with_processes(make: Callable[..., Scheduler],
                                             r: redis.Redis) -> None:
    scheduler = make(average_scheduled_poll_interval=2.0)
    small = [scheduler.poll_interval() for _ in range(200)]
    assert all(1.0 <= s <= 3.0 for s in small) and max(small) - min(small) > 1
    r.sadd("processes", *[f"host:{i}:nonce" for i in range(3)])
    three = [scheduler.poll_interval() for _ in range(200)]
    assert all(3.0 <= s <= 9.0 for s in three) and max(three) > 7.5
    r.sadd("processes", *[f"host:{i}:nonce" for i in range(3, 12)])
    big = [scheduler.poll_interval() for _ in range(200)]
    assert all(0 <= s <= 48.0 for s in big) and min(big) < 10 and max(big) > 38


def test_fixed_poll_interval_average_ignores_the_process_count(
        make: Callable[..., Scheduler], r: redis.Redis) -> None:
    scheduler = make(poll_interval_average=4.0)
    r.sadd("processes", "a", "b", "c")
    assert all(2.0 <= scheduler.poll_interval() <= 6.0 for _ in range(100))
    r.sadd("processes", *[f"p{i}" for i in range(10)])
    assert all(0.0 <= scheduler.poll_interval() <= 8.0 for _ in range(100))


def test_initial_wait() -> None:
    default = Scheduler(Config())
    waits = [default.initial_wait() for _ in range(100)]
    assert all(10 <= w <= 15 for w in waits)
    fixed = Scheduler(Config(poll_interval_average=15.0))
    assert all(0 <= fixed.initial_wait() <= 5 for _ in range(100))
    fast = Scheduler(Config(poll_interval_average=0.05))
    assert all(0 <= fast.initial_wait() <= 0.05 for _ in range(100))
    zero = Scheduler(Config(scheduler_initial_wait=0, average_scheduled_poll_interval=0.2))
    assert all(0 <= zero.initial_wait() <= 0.2 for _ in range(100))


# -- the thread -----------------------------------------------------------------------------------
def wait_for(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return False


def test_the_thread_moves_jobs_and_stops(make: Callable[..., Scheduler],
                                         r: redis.Redis) -> None:
    scheduler = make(poll_interval_average=0.05)
    scheduler.start()
    assert any(t.name == "wurk-scheduler" and t.daemon for t in threading.enumerate())
    r.zadd("schedule", {raw_job(): time.time() + 0.2})
    assert wait_for(lambda: r.llen("queue:default") == 1)
    scheduler.stop(10)
    assert not scheduler.is_alive()


def test_stop_ends_a_wait_that_time_never_would(make: Callable[..., Scheduler]) -> None:
    scheduler = make(clock=ManualClock())  # its 10-15 s initial wait never passes
    scheduler.start()
    scheduler.stop(10)
    assert not scheduler.is_alive()


def test_prunes_dead_processes_after_the_initial_wait(make: Callable[..., Scheduler],
                                                      r: redis.Redis) -> None:
    r.sadd("processes", "gone:1:abc", "alive:2:def")
    r.hset("alive:2:def", "info", "{}")
    scheduler = make(poll_interval_average=0.05)
    scheduler.start()
    assert wait_for(lambda: r.smembers("processes") == {"alive:2:def"})
    assert r.exists("process_cleanup")


def test_a_redis_outage_is_reported_once_and_the_loop_lives_on(
        make: Callable[..., Scheduler]) -> None:
    pool = RedisPool(f"redis://127.0.0.1:{free_port()}/0", socket_timeout=0.5)
    clock = ManualClock()
    scheduler = make(pool=pool, poll_interval_average=0.02, clock=clock)
    reported: list[tuple[BaseException, dict[str, Any]]] = []
    scheduler.config.error_handlers.append(lambda e, ctx, cfg: reported.append((e, ctx)))
    scheduler.start()
    while scheduler._duty.backoff.failures < 5:  # five failing cycles, one per step
        step(clock, MAX_WAIT + 1)  # past the interval and any backoff
    assert scheduler.is_alive()
    assert len(reported) == 1 and reported[0][1] == {"context": "scheduler"}
    scheduler.stop(10)  # its wait would end only when the clock moves: the stop ends it
    assert not scheduler.is_alive()
    pool.close()


def test_recovers_when_redis_comes_back(make: Callable[..., Scheduler], r: redis.Redis,
                                        tmp_path: Any) -> None:
    from tests.helpers.server import start_server

    port = free_port()
    pool = RedisPool(f"redis://127.0.0.1:{port}/0", socket_timeout=0.5)
    scheduler = make(pool=pool, poll_interval_average=0.02)
    reported: list[BaseException] = []
    scheduler.config.error_handlers.append(lambda e, ctx, cfg: reported.append(e))
    scheduler.start()
    assert wait_for(lambda: bool(reported))
    server = start_server(tmp_path / "late", port=port)
    try:
        late = redis.Redis(port=port, decode_responses=True)
        late.zadd("schedule", {raw_job(): PAST})
        assert wait_for(lambda: late.llen("queue:default") == 1)
        late.close()
    finally:
        scheduler.stop(2)
        pool.close()
        server.stop()
    assert len(reported) == 1
