"""The periodic poller against a real server: the leader registers and prunes loops, each
tick is pushed once — even by two processes that both believe they lead — and hostile
marks in Redis never stop a loop."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.wait import wait_until
from wurk import payload as P
from wurk.config import Config
from wurk.periodic.leader import Leadership
from wurk.periodic.loops import tick_jid
from wurk.periodic.poller import PeriodicPoller

# Every second: the tests see several ticks in a few seconds (on Redis's clock: they wait
# for ticks to be pushed, never for a fixed time). A leader's key lives 10 s, so no term
# lapses on a slow machine and skips a tick.
EVERY_SECOND = "* * * * * *"
FAST = {"periodic_seconds_field": True, "periodic_poll_interval": 0.2,
        "leader_renew_interval": 5.0, "leader_check_interval": 0.2}


@wurk.job(name="Per::Tick", queue="ticks", retry=3)
def tick_job(*args: Any) -> None:
    """Never run here: the tests read what was pushed."""


@dataclass
class Believer:
    """A process that believes it leads, whatever Redis says (paused past its key's life,
    or cut off in a partition): its ``term`` is fixed."""

    identity: str
    token: int | None
    refusals: int = 0

    def term(self) -> int | None:
        return self.token

    def lost(self) -> None:
        self.refusals += 1  # and goes on believing


@dataclass
class Built:
    config: Config
    pollers: list[PeriodicPoller] = field(default_factory=list)
    leaders: list[Leadership] = field(default_factory=list)


@pytest.fixture
def world() -> Iterator[Callable[..., Built]]:
    made: list[Built] = []

    def build(cron: str = EVERY_SECOND, *, catch_up: float = 300.0,
              **settings: Any) -> Built:
        config = Config(**{**FAST, "periodic_catch_up": catch_up, **settings})
        config.periodic.register(cron, tick_job, args=[7])
        built = Built(config)
        made.append(built)
        return built

    yield build
    for built in made:
        for poller in built.pollers:
            poller.stop(10)
        for leader in built.leaders:
            leader.stop(10)
        built.config.close()


def elect(built: Built, identity: str) -> Leadership:
    leadership = Leadership(built.config, identity)
    built.leaders.append(leadership)
    leadership.start()
    wait_until(leadership.is_leader, what="a leader")
    return leadership


def poller(built: Built, term: Any) -> PeriodicPoller:
    made = PeriodicPoller(built.config, term)
    built.pollers.append(made)
    return made


def synced(built: Built) -> tuple[Leadership, PeriodicPoller]:
    """A leader and its poller after a first look (its loops written to Redis)."""
    leader = elect(built, "host:1:a")
    made = poller(built, leader)
    made.look()
    return leader, made


def pushed(r: redis.Redis, queue: str = "ticks") -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in reversed(r.lrange(f"queue:{queue}", 0, -1))]


def lid_of(built: Built) -> str:
    return built.config.periodic.loops()[0].lid


def next_tick(r: redis.Redis, built: Built) -> int:
    return int(r.hget(f"loops:{lid_of(built)}", "nf") or 0)


def pushes(r: redis.Redis, count: int) -> None:
    """Wait for ``count`` ticks pushed (one a second: a few seconds at most)."""
    wait_until(lambda: len(pushed(r)) >= count, what=f"{count} ticks pushed")


def check_each_tick_once(jobs: list[dict[str, Any]], lid: str) -> list[int]:
    """The ticks the jobs were pushed for (jid = digest of loop and tick), checked unique."""
    by_jid = Counter(job["jid"] for job in jobs)
    doubled = [jid for jid, n in by_jid.items() if n > 1]
    assert not doubled, f"ticks pushed twice: {doubled}"
    ticks = []
    for job in jobs:
        tick = round(P.read_time(job["enqueued_at"]) or 0)
        match = [t for t in range(tick - 3, tick + 1) if tick_jid(lid, t) == job["jid"]]
        assert match, f"{job['jid']} is no tick's jid"
        ticks.append(match[0])
    return ticks


def test_the_leader_registers_its_loops_in_ruby_wurks_layout(world: Callable[..., Built],
                                                              r: redis.Redis) -> None:
    built = world("*/5 * * * *", catch_up=60)
    synced(built)
    lid = lid_of(built)
    assert r.smembers("periodic") == {lid}
    stored = r.hgetall(f"loops:{lid}")
    assert stored["schedule"] == "*/5 * * * *" and stored["klass"] == "Per::Tick"
    assert json.loads(stored["options"]) == {"args": [7]} and stored["tz"] == ""
    assert stored["paused"] == "0" and int(stored["nf"]) % 300 == 0
    assert int(stored["nf"]) > time.time() and "lf" not in stored


def test_each_tick_is_pushed_once_with_the_jobs_options(world: Callable[..., Built],
                                                        r: redis.Redis) -> None:
    built = world()
    leader = elect(built, "host:1:a")
    poller(built, leader).start()
    pushes(r, 2)
    built.pollers[0].stop(10)
    jobs = pushed(r)
    ticks = check_each_tick_once(jobs, lid_of(built))
    assert len(jobs) >= 2 and ticks == list(range(ticks[0], ticks[0] + len(ticks)))
    first = jobs[0]
    assert (first["class"], first["args"], first["queue"], first["retry"]) == \
        ("Per::Tick", [7], "ticks", 3)
    stored = r.hgetall(f"loops:{lid_of(built)}")
    assert int(stored["lf"]) == ticks[-1] and int(stored["nf"]) == ticks[-1] + 1
    history = [json.loads(e) for e in r.lrange(f"loop-history:{lid_of(built)}", 0, -1)]
    assert [h[0] for h in history] == list(reversed(ticks))
    assert [h[1] for h in history] == [j["jid"] for j in reversed(jobs)]
    # One Redis keeps the one-script fire: no key of the cluster's mark/push/settle steps.
    assert set(r.keys()) == {"dear-leader", "leader-token", "periodic", "queues",
                             "queue:ticks", f"loops:{lid_of(built)}",
                             f"loop-history:{lid_of(built)}"}


def test_a_stale_leader_that_still_believes_is_fenced_off(world: Callable[..., Built],
                                                          r: redis.Redis) -> None:
    """The old leader was paused past its key's life; a new leader took over (token 2);
    the old one wakes believing it leads with token 1. Both poll for several ticks."""
    built = world()
    r.set("leader-token", "1")
    stale = Believer("host:1:old", 1)
    new = elect(built, "host:2:new")
    assert new.token == 2
    poller(built, stale).start()
    poller(built, new).start()
    wait_until(lambda: len(pushed(r)) >= 2 and stale.refusals > 0,
               what="two ticks pushed while the stale leader was refused")
    for made in built.pollers:
        made.stop(10)
    ticks = check_each_tick_once(pushed(r), lid_of(built))
    assert len(ticks) >= 2 and ticks == list(range(ticks[0], ticks[0] + len(ticks)))


def test_two_leaders_the_fence_cannot_tell_apart_still_push_each_tick_once(
        world: Callable[..., Built], r: redis.Redis) -> None:
    """Same identity and token (two copies of one leader in a partition): only the loop's
    last-fired mark, checked and set with the push, stands between them."""
    built = world()
    r.set("dear-leader", "host:1:a")
    r.set("leader-token", "5")
    twins = [Believer("host:1:a", 5), Believer("host:1:a", 5)]
    for twin in twins:
        poller(built, twin).start()
    pushes(r, 2)  # both twins tried each of these ticks
    for made in built.pollers:
        made.stop(10)
    ticks = check_each_tick_once(pushed(r), lid_of(built))
    assert len(ticks) >= 2 and ticks == list(range(ticks[0], ticks[0] + len(ticks)))


def test_the_fire_script_refuses_a_tick_already_fired(world: Callable[..., Built],
                                                      r: redis.Redis) -> None:
    built = world("* * * * *")
    leader, poll = synced(built)
    loop = built.config.periodic.loops()[0]
    tick = int(time.time()) // 60 * 60
    assert poll.push(loop, tick, tick + 60, leader.token or 0)
    assert not poll.push(loop, tick, tick + 60, leader.token or 0)
    assert not poll.push(loop, tick - 60, tick, leader.token or 0)  # an older tick
    assert len(pushed(r)) == 1


def test_a_new_leader_fires_the_tick_it_missed_and_warns_of_older_ones(
        world: Callable[..., Built], r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    built = world("* * * * *", catch_up=90)
    _, poll = synced(built)
    lid = lid_of(built)
    minute = int(time.time()) // 60 * 60
    r.hset(f"loops:{lid}", mapping={"nf": minute - 240, "lf": minute - 300})  # four missed
    poll.look()
    jobs = pushed(r)
    assert [job["jid"] for job in jobs] == [tick_jid(lid, minute)]
    assert int(r.hget(f"loops:{lid}", "nf") or 0) == minute + 60
    missed = [rec.getMessage() for rec in caplog.records if "missed" in rec.getMessage()]
    assert missed and "missed 4 tick(s)" in missed[0]


def test_ticks_older_than_catch_up_are_not_pushed(world: Callable[..., Built],
                                                 r: redis.Redis) -> None:
    # An hourly loop whose last tick was five minutes ago, whatever the time now: older
    # than catch_up (60 s), so it is passed over and the next one is an hour after it.
    last = (int(time.time()) // 60 - 5) * 60
    built = world(f"{last // 60 % 60} * * * *", catch_up=60)
    _, poll = synced(built)
    lid = lid_of(built)
    r.hset(f"loops:{lid}", "nf", last)
    poll.look()
    assert pushed(r) == [] and int(r.hget(f"loops:{lid}", "nf") or 0) == last + 3600


def test_the_leader_prunes_loops_it_does_not_register_and_a_stale_one_cannot(
        world: Callable[..., Built], r: redis.Redis) -> None:
    built = world("*/5 * * * *")
    r.sadd("periodic", "0123456789abcdef")
    r.hset("loops:0123456789abcdef", mapping={"schedule": "* * * * *", "klass": "Old"})
    r.rpush("loop-history:0123456789abcdef", "[1,\"x\"]")
    stale = poller(built, Believer("host:9:old", 99))
    stale.look()
    assert r.smembers("periodic") == {"0123456789abcdef"}, "a stale leader prunes nothing"
    leader = elect(built, "host:1:a")
    poller(built, leader).look()
    assert r.smembers("periodic") == {lid_of(built)}
    assert not r.exists("loops:0123456789abcdef", "loop-history:0123456789abcdef")


def test_a_paused_loop_pushes_nothing_and_moves_on(world: Callable[..., Built],
                                                   r: redis.Redis) -> None:
    built = world()
    _, poll = synced(built)
    r.hset(f"loops:{lid_of(built)}", "paused", "1")
    first = next_tick(r, built)
    poll.start()
    wait_until(lambda: next_tick(r, built) > first, what="a paused tick passed over")
    poll.stop(10)
    assert pushed(r) == []


@pytest.mark.parametrize("nf", ["soon", "1e400", "99999999999999"])
def test_an_unreadable_next_tick_is_repaired_not_fatal(world: Callable[..., Built],
                                                       r: redis.Redis, nf: str) -> None:
    built = world()
    _, poll = synced(built)
    r.hset(f"loops:{lid_of(built)}", mapping={"nf": nf, "lf": "garbage"})
    poll.start()
    pushes(r, 1)
    poll.stop(10)
    now = float(r.time()[0])
    assert now - 60 < next_tick(r, built) <= now + 60  # an epoch near now again


def test_loop_keys_of_the_wrong_type_are_replaced(world: Callable[..., Built],
                                                  r: redis.Redis) -> None:
    built = world()
    lid = lid_of(built)
    r.set(f"loops:{lid}", "a string")
    r.set(f"loop-history:{lid}", "another")
    leader = elect(built, "host:1:a")
    poll = poller(built, leader)
    poll.start()
    pushes(r, 1)
    poll.stop(10)
    assert r.type(f"loops:{lid}") == "hash" and len(pushed(r)) >= 1
    assert r.type(f"loop-history:{lid}") == "list"


def test_a_queue_of_the_wrong_type_loses_no_mark(world: Callable[..., Built],
                                                 r: redis.Redis,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    built = world()
    leader, poll = synced(built)
    r.set("queue:ticks", "not a list")
    loop = built.config.periodic.loops()[0]
    tick = int(time.time())
    assert not poll.push(loop, tick, tick + 1, leader.token or 0)
    assert "lf" not in r.hgetall(f"loops:{loop.lid}")
    assert any("holds another type" in rec.getMessage() for rec in caplog.records)


def test_client_middleware_runs_and_may_stop_a_tick(world: Callable[..., Built],
                                                   r: redis.Redis) -> None:
    built = world()
    stopped: list[str] = []

    def tag(job_class: str, job: dict[str, Any], queue: str, call_next: Any) -> Any:
        job["tagged"] = True
        if r.exists("stop-ticks"):
            stopped.append(job["jid"])
            return None
        return call_next()

    built.config.client_middleware.add(tag)
    leader = elect(built, "host:1:a")
    poll = poller(built, leader)
    poll.start()
    pushes(r, 1)
    r.set("stop-ticks", "1")
    before = len(pushed(r))
    wait_until(lambda: stopped, what="a tick stopped by the middleware")
    poll.stop(10)
    assert before >= 1 and all(job["tagged"] for job in pushed(r))
    assert len(pushed(r)) <= before + 1  # at most one in flight when the switch flipped


def test_a_tick_pushed_late_is_warned_about(world: Callable[..., Built], r: redis.Redis,
                                            caplog: pytest.LogCaptureFixture) -> None:
    tick = int(time.time()) - 15  # a daily tick 15 s ago: the newest one due
    due = time.gmtime(tick)
    built = world(f"{due.tm_sec} {due.tm_min} {due.tm_hour} * * *")
    _, poll = synced(built)
    r.hset(f"loops:{lid_of(built)}", "nf", tick)
    poll.look()
    assert [job["jid"] for job in pushed(r)] == [tick_jid(lid_of(built), tick)]
    late = [rec.getMessage() for rec in caplog.records if " late" in rec.getMessage()]
    assert late and re.search(r"pushed its \S+ tick \d+ s late", late[0])


def test_a_push_that_raises_is_reported_once_and_retried_at_each_look(
        world: Callable[..., Built], r: redis.Redis) -> None:
    """docs: a push that raises (a middleware error) is reported once, retried at each look
    until the tick is older than `periodic_catch_up`."""
    tick = int(time.time()) - 15  # a daily tick 15 s ago: the newest one due
    due = time.gmtime(tick)
    built = world(f"{due.tm_sec} {due.tm_min} {due.tm_hour} * * *")
    tries: list[str] = []

    def broken(job_class: str, job: dict[str, Any], queue: str, call_next: Any) -> Any:
        tries.append(job["jid"])
        if r.exists("broken"):
            raise RuntimeError("middleware down")
        return call_next()

    built.config.client_middleware.add(broken)
    reported: list[BaseException] = []
    built.config.error_handlers.append(lambda exc, context: reported.append(exc))
    _, poll = synced(built)
    r.set("broken", "1")
    r.hset(f"loops:{lid_of(built)}", "nf", tick)
    for _ in range(3):
        poll.look()
    assert len(tries) == 3 and pushed(r) == []  # tried at each look...
    assert [str(exc) for exc in reported] == ["middleware down"]  # ...reported once
    r.delete("broken")
    poll.look()
    assert [job["jid"] for job in pushed(r)] == [tick_jid(lid_of(built), tick)]


def test_a_loops_history_keeps_its_25_newest_runs(world: Callable[..., Built],
                                                  r: redis.Redis) -> None:
    tick = int(time.time()) - 15
    due = time.gmtime(tick)
    built = world(f"{due.tm_sec} {due.tm_min} {due.tm_hour} * * *")
    _, poll = synced(built)
    history = f"loop-history:{lid_of(built)}"
    r.rpush(history, *[json.dumps([n, f"old{n}"]) for n in range(40)])
    r.hset(f"loops:{lid_of(built)}", "nf", tick)
    poll.look()
    kept = [json.loads(e) for e in r.lrange(history, 0, -1)]
    assert len(kept) == 25 and kept[0] == [tick, tick_jid(lid_of(built), tick)]
    assert kept[1:] == [[n, f"old{n}"] for n in range(24)]


@pytest.mark.parametrize(("field", "value"), [
    ("nf", "99999999999"),  # a time (year 5138): the loop waited for it
    ("lf", "99999999999"),  # fired "then": every tick counted as done
    ("lf", "inf"), ("lf", "1e400"),  # Lua's tonumber takes both: the fire script said done
])
def test_a_mark_no_tick_of_the_loop_could_have_is_repaired_with_a_warning(
        world: Callable[..., Built], r: redis.Redis, caplog: pytest.LogCaptureFixture,
        field: str, value: str) -> None:
    built = world()
    _, poll = synced(built)
    key = f"loops:{lid_of(built)}"
    r.hset(key, field, value)
    poll.start()
    pushes(r, 2)
    poll.stop(10)
    now = float(r.time()[0])
    assert now - 60 < next_tick(r, built) <= now + 60
    assert now - 60 < float(r.hget(key, "lf") or 0) <= now
    warned = [rec.getMessage() for rec in caplog.records if f"{key} {field}" in rec.getMessage()]
    assert len(warned) == 1 and value in warned[0], warned


def test_looks_redis_refuses_are_reported_once_per_outage(
        redis_server: Any, world: Callable[..., Built], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """periodic.md: "the leader's looks fail and are reported once per outage" — one error
    for a run of failed looks, the outage's end logged once, and a second outage reported
    once again."""
    import logging

    from tests.helpers.proxy import FaultProxy

    caplog.set_level(logging.DEBUG, logger="wurk")
    with FaultProxy(redis_server.port) as proxy:
        monkeypatch.setenv("REDIS_URL", proxy.url)  # REDIS_URL wins over a Config's own
        built = world()
        made = poller(built, Believer("host:1:a", token=None))  # follows: looks do nothing
        duty = made._duty

        def errors() -> list[str]:
            return [rec.getMessage() for rec in caplog.records if rec.levelno >= logging.ERROR]

        for outage in (1, 2):
            with proxy.outage():
                made.leadership = Believer("host:1:a", token=1)  # leads: looks read Redis
                assert [duty.run() for _ in range(4)] == [False] * 4
                assert len(errors()) == outage and "periodic" in errors()[-1]
            assert duty.run()  # Redis answers again: the outage ends
            back = [rec.getMessage() for rec in caplog.records
                    if "Redis is back" in rec.getMessage()]
            assert len(back) == outage and "(4 failed tries)" in back[-1]
        assert duty.outage.count == 2
