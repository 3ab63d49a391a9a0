"""Periodic jobs on a real Redis Cluster (the session's ``redis_cluster``): the leader keeps the
loops in the default keyspace and pushes each run into its queue's keyspace, once — with two
pushers contending, and across a leader lost between marking a run and pushing it, or between
pushing it and settling it (``wurk.periodic.cluster``, docs/scaling.md)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from redis.crc import key_slot

import wurk
from tests.helpers.cluster import Cluster, slot_of
from tests.helpers.wait import wait_until
from wurk.api.periodic import PeriodicSet
from wurk.client import core
from wurk.config import Config
from wurk.inprocess import InProcessWorker
from wurk.periodic.leader import Leadership
from wurk.periodic.loops import tick_jid
from wurk.periodic.poller import PeriodicPoller

runs: Counter[str] = Counter()
lock = threading.Lock()


@wurk.job(name="ClusterPeriodic::Report", queue="mail")
def report(n: int) -> None:
    with lock:
        runs[f"{wurk.current_job()['queue']}:{wurk.current_job()['jid']}"] += 1  # type: ignore[index]


class Crash(Exception):
    """A leader lost at a fault point (killed, cut off): nothing after it runs."""


@dataclass
class Believer:
    """A process that believes it leads with a fixed identity and token (a twin of the leader
    in a partition: the fence cannot tell them apart)."""

    identity: str
    token: int | None

    def term(self) -> int | None:
        return self.token

    def lost(self) -> None:
        pass


class Clocked(PeriodicPoller):
    """A poller whose reading of Redis's time is the test's: it plans the minute the test
    names. The scripts still check each tick against Redis's own clock (never in the future,
    within catch-up), so the test's minutes are minutes already past."""

    now: float = 0.0

    def _redis_time(self) -> float:
        self._clock = (self.now, time.monotonic())
        return self.now


@pytest.fixture
def on_cluster(redis_cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[Config]:
    redis_cluster.flush()
    core._indexed.clear()
    runs.clear()
    monkeypatch.setenv("REDIS_URL", redis_cluster.url)
    config = wurk.configure(queues=["default", "mail"], concurrency=2, heartbeat_interval=0.5,
                            poll_interval_average=0.2, fetch_timeout=0.5,
                            periodic_catch_up=3600, leader_renew_interval=5.0,
                            leader_check_interval=0.2, periodic_poll_interval=0.2)
    config.periodic.register("* * * * *", report, args=[1])  # queue "mail", the job's own
    yield config
    config.close()


def redis_now(config: Config) -> float:
    seconds, micros = config.pool("internal").run(lambda r: r.time())
    return float(seconds) + micros / 1e6


def mail_jobs(config: Config) -> list[dict[str, Any]]:
    mail = config.shard("mail")
    raw = mail.pool("internal").run(lambda r: r.lrange(mail.keys.queue("mail"), 0, -1))
    return [json.loads(job) for job in reversed(raw)]


def history(config: Config, lid: str) -> list[list[Any]]:
    raw = config.pool("internal").run(lambda r: r.lrange(config.keys.loop_history(lid), 0, -1))
    return [json.loads(entry) for entry in raw]


def elect(config: Config, identity: str) -> Leadership:
    leader = Leadership(config, identity)
    leader.start()
    wait_until(leader.is_leader, what=f"{identity} leads")
    return leader


def clocked(config: Config, term: Any, now: float) -> Clocked:
    made = Clocked(config, term)
    made.now = now
    return made


def test_a_job_in_a_non_default_queue_runs_each_minute_on_the_cluster(
        on_cluster: Config, redis_cluster: Cluster) -> None:
    """Four minutes on the test's clock: each minute's run pushed once into `mail`'s keyspace
    (its own primary), then run by a worker; the loop, its marks and history stay in the
    default keyspace."""
    assert redis_cluster.primary_port("mail") != redis_cluster.primary_port("default")
    loop = on_cluster.periodic.loops()[0]
    base = int(redis_now(on_cluster)) // 60 * 60 - 240  # four minutes ago, on Redis's clock
    leader = elect(on_cluster, "host:1:a")
    try:
        poll = clocked(on_cluster, leader, base - 30)
        poll.look()  # registers the loop: its next tick is `base`
        assert mail_jobs(on_cluster) == []
        for minute in range(4):
            poll.now = base + 60 * minute + 1
            poll.look()
            poll.look()  # a second look in the same minute pushes nothing more
            assert [job["jid"] for job in mail_jobs(on_cluster)] == \
                [tick_jid(loop.lid, base + 60 * m) for m in range(minute + 1)]
        jobs = mail_jobs(on_cluster)
        assert {(job["class"], job["queue"], tuple(job["args"])) for job in jobs} == \
            {("ClusterPeriodic::Report", "mail", (1,))}
        assert [entry[0] for entry in history(on_cluster, loop.lid)] == \
            [base + 180, base + 120, base + 60, base]
        worker = InProcessWorker(on_cluster).start()  # our leader holds: it pushes nothing
        try:
            wait_until(lambda: sum(runs.values()) == 4, timeout=30, what="four runs")
        finally:
            worker.stop()
    finally:
        leader.stop(10)
    assert runs == Counter({f"mail:{job['jid']}": 1 for job in jobs})
    for node in redis_cluster.primaries():  # every key where the layout says
        direct = node.client()
        keys = [key.decode() for key in direct.scan_iter(count=1000)]
        direct.close()
        for key in keys:
            tag = key[1:key.index("}")]
            assert key_slot(key.encode()) == slot_of(tag), key
            if "periodic-run" in key:
                assert tag == "mail", key
            elif "loop" in key or "periodic" in key:
                assert tag == "default", key


def test_a_worker_and_a_twin_of_its_leader_push_each_tick_once(
        redis_cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real worker on the cluster leads and runs a loop firing every second; a twin with
    its identity and token (the fence cannot tell them apart) pushes too. Each tick runs
    once, in `mail`."""
    redis_cluster.flush()
    core._indexed.clear()
    runs.clear()
    monkeypatch.setenv("REDIS_URL", redis_cluster.url)
    config = wurk.configure(queues=["default", "mail"], concurrency=2, heartbeat_interval=0.5,
                            poll_interval_average=0.2, fetch_timeout=0.5,
                            periodic_seconds_field=True, periodic_poll_interval=0.2,
                            leader_renew_interval=5.0, leader_check_interval=0.2)
    config.periodic.register("* * * * * *", report, args=[2])
    loop = config.periodic.loops()[0]
    worker = InProcessWorker(config).start()
    twin: PeriodicPoller | None = None
    try:
        keys = config.keys
        wait_until(lambda: config.pool("internal").run(lambda r: r.get(keys.leader)),
                   what="the worker leads")
        identity, token = config.pool("internal").run(
            lambda r: r.mget(keys.leader, keys.leader_token))
        twin = PeriodicPoller(config, Believer(identity.decode(), int(token)))
        twin.start()
        wait_until(lambda: len(history(config, loop.lid)) >= 4, timeout=30,
                   what="four ticks pushed by the two")
        twin.stop(10)
        twin = None
    finally:
        if twin is not None:
            twin.stop(10)
        worker.stop()  # a job fetched and not run is back in its queue
    left = [job["jid"] for job in mail_jobs(config)]
    fired = history(config, loop.lid)
    config.close()
    assert all(key.startswith("mail:") for key in runs)
    ran = [key.split(":", 1)[1] for key in runs]
    assert all(n == 1 for n in runs.values()), f"a tick ran twice: {runs}"
    assert 4 <= len(fired) < 25  # the history keeps 25: every push of this test is in it
    assert Counter(ran + left) == Counter(jid for _, jid in fired), "each tick pushed once"
    assert all(jid == tick_jid(loop.lid, tick) for tick, jid in fired)


def fail_once(monkeypatch: pytest.MonkeyPatch, target: Any, name: str) -> list[int]:
    """``target.name`` raises ``Crash`` on its first call (the leader lost there)."""
    original = getattr(target, name)
    calls: list[int] = []

    def crashing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise Crash(f"lost at {name}")
        return original(*args, **kwargs)

    monkeypatch.setattr(target, name, crashing)
    return calls


@pytest.mark.parametrize("fault", ["after the mark", "after the push", "the queue refusing"])
def test_a_leader_lost_between_the_steps_neither_loses_the_run_nor_pushes_it_twice(
        on_cluster: Config, monkeypatch: pytest.MonkeyPatch, fault: str) -> None:
    """The crash window of a cluster run: the old leader marks a minute's run (lf set, run
    pending) and is lost before pushing it — or after pushing, before settling; or, with no
    fault injected, the push itself fails in the queue's keyspace (a key of the wrong type,
    repaired before the next look). A new
    leader's next look completes it: one job, one history entry, nothing pending; a third
    pusher completing the same run concurrently changes nothing."""
    loop = on_cluster.periodic.loops()[0]
    keys = on_cluster.keys
    tick = int(redis_now(on_cluster)) // 60 * 60 - 120
    old = elect(on_cluster, "host:1:old")
    poll = clocked(on_cluster, old, tick - 30)
    poll.look()
    assert poll._runs is not None
    mail = on_cluster.shard("mail")
    if fault == "after the mark":
        fail_once(monkeypatch, poll._runs, "complete")
    elif fault == "after the push":
        fail_once(monkeypatch, poll._runs, "_settle_run")
    else:  # no patch: the push script itself fails in the queue's keyspace, after the mark
        mail.pool("internal").run(lambda r: r.set(mail.keys.queue("mail"), "not a list"))
    poll.now = tick + 1
    poll.look()  # marks, then the leader is lost (the Crash is reported, nothing else runs)
    if fault == "the queue refusing":
        mail.pool("internal").run(lambda r: r.delete(mail.keys.queue("mail")))
    internal = on_cluster.pool("internal")
    assert int(internal.run(lambda r: r.hget(keys.loop(loop.lid), "lf"))) == tick
    assert internal.run(lambda r: r.hget(keys.loop_pending(loop.lid), "jid")) == \
        tick_jid(loop.lid, tick).encode()
    assert len(mail_jobs(on_cluster)) == (1 if fault == "after the push" else 0)
    assert history(on_cluster, loop.lid) == []
    later = {"class": "ClusterPeriodic::Report", "queue": "mail", "args": [1],
             "jid": tick_jid(loop.lid, tick + 60)}
    assert old.token is not None  # a loop with a pending run marks no newer tick
    assert poll._runs.fire(loop, later, tick + 60, tick + 120, "host:1:old",
                           old.token)[0] == "pending"
    old.stop(10)  # its successor is elected in a new term
    new = elect(on_cluster, "host:2:new")
    try:
        assert new.token is not None and new.token > 1
        successor = clocked(on_cluster, new, tick + 20)
        twin = clocked(on_cluster, Believer("host:2:new", new.token), tick + 20)
        looks = [threading.Thread(target=p.look) for p in (successor, twin)]
        for thread in looks:
            thread.start()
        for thread in looks:
            thread.join()
        successor.look()
    finally:
        new.stop(10)
    assert [job["jid"] for job in mail_jobs(on_cluster)] == [tick_jid(loop.lid, tick)]
    assert history(on_cluster, loop.lid) == [[tick, tick_jid(loop.lid, tick)]]
    assert not internal.run(lambda r: r.exists(keys.loop_pending(loop.lid)))
    assert mail.pool("internal").run(
        lambda r: r.ttl(mail.keys.periodic_run(tick_jid(loop.lid, tick)))) > 3600


def test_a_pending_run_past_catch_up_or_not_this_loop_s_is_cleared_not_pushed(
        on_cluster: Config, caplog: pytest.LogCaptureFixture) -> None:
    """The pending record is read from Redis, so untrusted: one older than catch-up is given
    up as a late tick is on one Redis; one whose jid is no run of the loop is cleared."""
    on_cluster.periodic_catch_up = 60
    loop = on_cluster.periodic.loops()[0]
    keys = on_cluster.keys
    internal = on_cluster.pool("internal")
    leader = elect(on_cluster, "host:1:a")
    try:
        now = redis_now(on_cluster)
        poll = clocked(on_cluster, leader, now)
        poll.look()
        old = int(now) // 60 * 60 - 180
        job = {"class": report.definition.name, "args": [1], "queue": "mail",
               "jid": tick_jid(loop.lid, old)}
        internal.run(lambda r: r.hset(keys.loop_pending(loop.lid), mapping={
            "tick": old, "jid": job["jid"], "queue": "mail", "payload": json.dumps(job)}))
        poll.look()
        assert not internal.run(lambda r: r.exists(keys.loop_pending(loop.lid)))
        assert any("given up, not pushed late" in rec.getMessage() for rec in caplog.records)
        internal.run(lambda r: r.hset(keys.loop_pending(loop.lid), mapping={
            "tick": int(now), "jid": "0" * 24, "queue": "mail", "payload": "{}"}))
        poll.look()
        assert not internal.run(lambda r: r.exists(keys.loop_pending(loop.lid)))
        assert any("is not valid" in rec.getMessage() for rec in caplog.records)
        internal.run(lambda r: r.set(keys.loop_pending(loop.lid), "not a hash"))
        poll.look()  # a record of the wrong type reads as none; the next mark replaces it
    finally:
        leader.stop(10)
    assert mail_jobs(on_cluster) == [] and history(on_cluster, loop.lid) == []


def test_the_dashboard_s_enqueue_now_pushes_into_the_loop_s_queue_keyspace(
        on_cluster: Config) -> None:
    """`POST /api/periodic/loops/<lid>` (enqueue) reads the loop in the default keyspace and
    pushes its job as any push is routed: into `mail`'s keyspace; history stays in default."""
    loop = on_cluster.periodic.loops()[0]
    leader = elect(on_cluster, "host:1:a")
    try:
        clocked(on_cluster, leader, redis_now(on_cluster)).look()  # registers the loop
    finally:
        leader.stop(10)
    jid = PeriodicSet(on_cluster).enqueue_now(loop.lid)
    assert [job["jid"] for job in mail_jobs(on_cluster)] == [jid]
    assert [entry[1] for entry in history(on_cluster, loop.lid)] == [jid]


def test_a_pending_run_with_a_tick_and_no_jid_is_cleared(
        on_cluster: Config, caplog: pytest.LogCaptureFixture) -> None:
    """Its jid was read as '' and the settle compared '' with none: the record stayed, and
    with it the mark's 'pending' answer — the loop pushed nothing again (for good: a record
    written by hand has no TTL), warned about at every look."""
    loop = on_cluster.periodic.loops()[0]
    keys = on_cluster.keys
    internal = on_cluster.pool("internal")
    leader = elect(on_cluster, "host:1:a")
    try:
        now = redis_now(on_cluster)
        poll = clocked(on_cluster, leader, now)
        poll.look()
        internal.run(lambda r: r.hset(keys.loop_pending(loop.lid), "tick", int(now)))
        poll.look()
        assert not internal.run(lambda r: r.exists(keys.loop_pending(loop.lid)))
        assert sum("is not valid" in rec.getMessage() for rec in caplog.records) == 1
    finally:
        leader.stop(10)
