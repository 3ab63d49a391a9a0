"""Reliable fetch and the reaper against the real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import psutil
import pytest
import redis

import wurk
from tests.helpers.wait import wait_until
from wurk import payload as P
from wurk.config import Capsule
from wurk.fetch.reaper import Owner, Reaper, parse_private
from wurk.fetch.reliable import ReliableFetch
from wurk.runtime.identity import Identity


def job(n: int, jid: str | None = None) -> str:
    return P.dumps({"class": "X", "args": [n], "queue": "default", "jid": jid or f"jid{n:021d}"})


def fetcher(config: wurk.Config, queues: list[str], *, slot: int = 0,
            identity: Identity | None = None) -> ReliableFetch:
    capsule = Capsule(queues=[(q, 0) for q in queues])
    return ReliableFetch(config, capsule, config.pool("test", size=4),
                         identity=identity or Identity.current(), capsule_index=0, slot=slot)


def test_fetch_moves_into_the_private_list_and_the_ack_rides_the_next_fetch(
    config: wurk.Config, r: redis.Redis
) -> None:
    r.lpush("queue:default", job(1), job(2))
    r.set(config.keys.poison_counter("jid000000000000000000001"), 2)  # recovered before
    f = fetcher(config, ["default"])
    private = f.private_lists["default"]
    first = f.fetch(0.1)
    assert first is not None and json.loads(first.raw)["args"] == [1]
    assert r.lrange(private, 0, -1) == [job(1)]
    first.jid = "jid000000000000000000001"
    first.acknowledge()
    assert r.lrange(private, 0, -1) == [job(1)]  # not yet: the ACK waits for the next fetch
    calls_before = r.info("commandstats")
    second = f.fetch(0.1)
    assert second is not None and r.lrange(private, 0, -1) == [job(2)]
    assert not r.exists(config.keys.poison_counter(first.jid))  # reset by the ACK
    assert r.info("commandstats")["cmdstat_lrem"]["calls"] == \
        calls_before.get("cmdstat_lrem", {"calls": 0})["calls"] + 1
    second.acknowledge()
    f.flush()  # a processor that stops flushes its pending ACK
    assert not r.exists(private)


def test_several_queues_strict_order_and_blocking_turns(
    config: wurk.Config, r: redis.Redis
) -> None:
    r.lpush("queue:low", job(1))
    r.lpush("queue:high", job(2))
    f = fetcher(config, ["high", "low"])
    assert [f.fetch(0.1).queue, f.fetch(0.1).queue] == ["high", "low"]  # type: ignore[union-attr]
    assert f.fetch(0.2) is None
    assert fetcher(config, ["high", "low"], slot=1)._turn(["high", "low"]) == "low"
    assert fetcher(config, ["high", "low"], slot=2)._turn(["high", "low"]) == "high"


def test_fetch_survives_script_flush(config: wurk.Config, r: redis.Redis) -> None:
    f = fetcher(config, ["a", "b"])
    r.lpush("queue:b", job(1))
    assert f.fetch(0.1) is not None
    r.script_flush()
    r.lpush("queue:a", job(2))
    unit = f.fetch(0.1)
    assert unit is not None and unit.queue == "a"


def test_requeue_puts_jobs_back_at_the_tail_and_out_of_the_private_list(
    config: wurk.Config, r: redis.Redis
) -> None:
    r.lpush("queue:default", job(1), job(2))
    f = fetcher(config, ["default"])
    unit = f.fetch(0.1)
    assert unit is not None
    f.requeue([unit])
    assert r.lindex("queue:default", -1) == job(1)  # next to run
    assert not r.exists(f.private_lists["default"])


def test_paused_queues_are_skipped(config: wurk.Config, r: redis.Redis) -> None:
    r.lpush("queue:a", job(1))
    r.lpush("queue:b", job(2))
    capsule = Capsule(queues=[("a", 0), ("b", 0)])
    f = ReliableFetch(config, capsule, config.pool("t"), identity=Identity.current(),
                      capsule_index=0, slot=0, paused=lambda: frozenset({"a"}))
    unit = f.fetch(0.1)
    assert unit is not None and unit.queue == "b"
    everything = ReliableFetch(config, capsule, config.pool("t"), identity=Identity.current(),
                               capsule_index=0, slot=0, paused=lambda: frozenset({"a", "b"}))
    started = time.monotonic()
    assert everything.fetch(0.3) is None and time.monotonic() - started >= 0.25


def test_a_process_sees_its_own_pause_at_once_and_anothers_after_the_cache_ttl(
    redis_server: Any, r: redis.Redis
) -> None:
    """docs/reliability.md: "Each process caches the `paused` set for `paused_cache_ttl`
    (5 s) and drops its cache at once when it pauses or unpauses a queue itself." A pause
    written by another process waits for the cache to expire (60 s here: never within the
    test); one made through this process's `Queue.pause()` / `unpause()` is seen at once."""
    from wurk.api import Queue
    from wurk.fetch.pause import PausedCache

    assert wurk.Config().paused_cache_ttl == 5
    cfg = wurk.Config(redis_url=redis_server.url, paused_cache_ttl=60)
    try:
        cache = PausedCache(cfg)
        assert cache.get() == frozenset()
        r.sadd("paused", "elsewhere")  # another process's pause
        assert cache.get() == frozenset(), "re-read before its TTL"
        Queue("reports", config=cfg).pause()
        assert cache.get() == frozenset({"elsewhere", "reports"})
        Queue("reports", config=cfg).unpause()
        assert cache.get() == frozenset({"elsewhere"})
    finally:
        cfg.close()


def test_parse_private_list_names(config: wurk.Config) -> None:
    assert parse_private(config, "queue:default|web1|123|0a1b2c3d4e5f|0") == (
        "default", Owner("web1", 123, "0a1b2c3d4e5f"))
    assert parse_private(config, "queue:default|web1|123|2") == ("default",
                                                                  Owner("web1", 123, None))
    assert parse_private(config, "queue:sq|web1:123:0a1b2c3d4e5f|critical") == (
        "critical", Owner("web1", 123, "0a1b2c3d4e5f"))
    assert parse_private(config, "queue:default") is None
    assert parse_private(config, "queues") is None


def foreign_list(r: redis.Redis, config: wurk.Config, host: str, pid: int, nonce: str,
                 jobs: list[str]) -> str:
    key = config.keys.private("default", host, pid, nonce, 0)
    r.lpush(key, *jobs)
    return key


def reaper(config: wurk.Config) -> Reaper:
    return Reaper(config, Identity.current(), ["default"])


def test_foreign_owner_with_a_heartbeat_is_left_alone_then_recovered_when_it_stops(
    config: wurk.Config, r: redis.Redis
) -> None:
    owner = "elsewhere:4242:aaaaaaaaaaaa"
    key = foreign_list(r, config, "elsewhere", 4242, "aaaaaaaaaaaa", [job(1), job(2), job(3)])
    r.hset(owner, mapping={"info": json.dumps({"started_at": time.time()})})
    assert reaper(config).sweep() == 0 and r.llen(key) == 3
    r.delete(owner)  # its heartbeat expired
    assert reaper(config).sweep() == 3
    assert not r.exists(key)
    # The oldest recovered job is at the very tail: fetched first.
    assert r.lrange("queue:default", 0, -1) == [job(3), job(2), job(1)]
    assert r.get(config.keys.poison_counter("jid000000000000000000001")) == "1"
    assert 0 < r.ttl(config.keys.poison_counter("jid000000000000000000001")) <= 72 * 3600


def same_pids(**info: Any) -> str:
    """An ``info`` JSON that says its process sees this process's pids (same boot, same pid
    namespace), as every wurk worker on this machine writes it."""
    me = Identity.current()
    return json.dumps({"boot_id": me.boot_id, "pid_namespace": me.pid_namespace, **info})


def test_same_host_owner_with_a_gone_pid_is_dead_at_once(
    config: wurk.Config, r: redis.Redis
) -> None:
    me = Identity.current()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    owner = f"{me.hostname}:{gone.pid}:bbbbbbbbbbbb"
    r.hset(owner, mapping={"info": same_pids(started_at=time.time())})  # still "beating"
    foreign_list(r, config, me.hostname, gone.pid, "bbbbbbbbbbbb", [job(1)])
    assert reaper(config).sweep() == 1


def test_same_host_reused_pid_is_dead(config: wurk.Config, r: redis.Redis) -> None:
    me = Identity.current()
    alive = os.getppid()  # a live process that is not the owner
    started = psutil.Process(alive).create_time()
    owner = f"{me.hostname}:{alive}:cccccccccccc"
    r.hset(owner, mapping={"info": same_pids(started_at=started + 50)})
    foreign_list(r, config, me.hostname, alive, "cccccccccccc", [job(1)])
    assert reaper(config).sweep() == 1
    r.hset(owner, mapping={"info": same_pids(started_at=started)})
    foreign_list(r, config, me.hostname, alive, "cccccccccccc", [job(2)])
    assert reaper(config).sweep() == 0  # same pid, same start: alive


@pytest.mark.parametrize("namespace", ["another pid namespace", "another boot", "not recorded",
                                       "not JSON"])
def test_same_hostname_in_another_pid_namespace_is_judged_by_its_heartbeat(
    config: wurk.Config, r: redis.Redis, namespace: str
) -> None:
    """Containers given one hostname (``hostNetwork`` pods, ``--hostname``) each have their
    own pids: a pid that is gone here, or taken by another process here, says nothing about
    an owner whose record does not prove it sees the same pids. Its heartbeat decides."""
    me = Identity.current()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    alive = os.getppid()  # a pid that exists here, started at another time than the owner
    record = {"started_at": psutil.Process(alive).create_time() + 50,
              "boot_id": me.boot_id, "pid_namespace": me.pid_namespace}
    if namespace == "another pid namespace":
        record["pid_namespace"] = (me.pid_namespace or 0) + 1
    elif namespace == "another boot":
        record["boot_id"] = "00000000-0000-0000-0000-000000000000"
    elif namespace == "not recorded":  # Ruby wurk, an older wurk, Sidekiq Pro
        del record["boot_id"], record["pid_namespace"]
    info = "{not json" if namespace == "not JSON" else json.dumps(record)
    keys = []
    for pid in (gone.pid, alive):
        r.hset(f"{me.hostname}:{pid}:ffffffffffff", mapping={"info": info})
        keys.append(foreign_list(r, config, me.hostname, pid, "ffffffffffff", [job(pid)]))
    assert reaper(config).sweep() == 0
    assert [r.llen(key) for key in keys] == [1, 1]
    for pid in (gone.pid, alive):
        r.delete(f"{me.hostname}:{pid}:ffffffffffff")  # the heartbeats expired
    assert reaper(config).sweep() == 2


def test_a_worker_records_the_boot_and_pid_namespace_it_sees(
    config: wurk.Config, r: redis.Redis
) -> None:
    from wurk.launcher import Launcher

    me = Identity.current()
    assert me.boot_id and me.pid_namespace  # Linux: both readable
    info = Launcher(config).info()
    assert info["boot_id"] == me.boot_id and info["pid_namespace"] == me.pid_namespace
    assert me.shares_pids_with(info)
    assert not me.shares_pids_with({**info, "pid_namespace": me.pid_namespace + 1})


def test_own_lists_and_live_pre_nonce_owners_are_never_touched(
    config: wurk.Config, r: redis.Redis
) -> None:
    me = Identity.current()
    own = foreign_list(r, config, me.hostname, me.pid, me.nonce, [job(1)])
    old_layout = config.keys.queue("default") + "|far|77|0"
    r.lpush(old_layout, job(2))
    r.sadd("processes", "far:77:dddddddddddd")
    r.hset("far:77:dddddddddddd", "info", "{}")
    assert reaper(config).sweep() == 0 and r.llen(own) == 1 and r.llen(old_layout) == 1
    r.delete("far:77:dddddddddddd")
    assert reaper(config).sweep() == 1 and r.llen(own) == 1


def test_full_scan_runs_once_an_hour_cluster_wide(config: wurk.Config, r: redis.Redis) -> None:
    key = config.keys.private("nobody-serves-this", "gone", 1, "eeeeeeeeeeee", 0)
    r.lpush(key, job(1))
    first = reaper(config)
    assert first.sweep() == 1  # won the lock: scanned every private list
    r.lpush(key, job(2))
    assert reaper(config).sweep() == 0  # the lock holds for an hour
    assert 3500 < r.ttl(config.keys.reaper_lock) <= 3600
    assert first.reap_all() == 1


def test_the_full_scan_runs_once_per_super_fetch_orphan_check(
        redis_server: Any, r: redis.Redis) -> None:
    """The full sweep's interval is a setting (Sidekiq Pro's ``super_fetch_orphan_check``):
    its lock lives that long on Redis's clock, not the hour it was fixed at."""
    cfg = wurk.Config(redis_url=redis_server.url, super_fetch_orphan_check=120)
    try:
        key = cfg.keys.private("nobody-serves-this", "gone", 1, "eeeeeeeeeeee", 0)
        r.lpush(key, job(1))
        assert reaper(cfg).sweep() == 1  # won the lock: scanned every private list
        assert 119_000 < r.pttl(cfg.keys.reaper_lock) <= 120_000
        r.lpush(key, job(2))
        assert reaper(cfg).sweep() == 0  # inside the interval: the served queues only
        r.pexpire(cfg.keys.reaper_lock, 1)  # Redis's clock at the interval's end
        wait_until(lambda: not r.exists(cfg.keys.reaper_lock))
        assert reaper(cfg).sweep() == 1  # the next full sweep, 120 s after the first
    finally:
        cfg.close()


def test_the_full_scan_finds_private_lists_under_a_key_prefix_with_glob_characters(
        redis_server: Any, r: redis.Redis) -> None:
    """A ``key_prefix`` holding ``[`` (allowed: only braces are refused) made the full scan's
    pattern a character class: ``app[1]:queue:…`` lists never matched, so a dead process's
    jobs of a queue nobody serves were never recovered; another app's lists matched."""
    cfg = wurk.Config(redis_url=redis_server.url, key_prefix="app[1]")
    try:
        mine = cfg.keys.private("nobody-serves-this", "gone", 1, "eeeeeeeeeeee", 0)
        assert mine.startswith("app[1]:queue:")
        r.lpush(mine, job(1))
        other = "app1:queue:nobody-serves-this|gone|2|ffffffffffff|0"  # another app's
        r.lpush(other, job(2))
        assert reaper(cfg).reap_all() == 1
        assert r.llen(mine) == 0 and r.llen("app[1]:queue:nobody-serves-this") == 1
        assert r.llen(other) == 1
    finally:
        cfg.close()


def test_poison_pill_counting_kills_on_the_third_recovery(
    config: wurk.Config, r: redis.Redis
) -> None:
    pills: list[dict[str, Any]] = []
    registration = wurk.on_poison(pills.append)
    wurk.on_poison(pills.append)  # the same callable twice is one registration
    assert wurk.reliability.on_poison is wurk.on_poison  # Sidekiq Pro's spelling, the same
    wurk.reliability.on_poison(pills.append)  # so still one registration
    deaths: list[str] = []
    config.death_handlers.append(lambda payload, exc: deaths.append(type(exc).__name__))
    try:
        for _ in range(3):
            foreign_list(r, config, "gone", 9, "ffffffffffff", [job(1)])
            r.delete("queue:default")
            reaper(config).sweep()
        assert r.zcard("dead") == 1 and not r.exists("queue:default")
        dead = json.loads(r.zrange("dead", 0, -1)[0])
        assert dead["error_class"] == "wurk.Poisoned" and dead["args"] == [1]
        assert pills == [{"jid": "jid000000000000000000001", "klass": "X", "count": 3,
                          "queue": "default"}]
        assert deaths == ["Poisoned"]
        assert not r.exists(config.keys.private("default", "gone", 9, "ffffffffffff", 0))
    finally:
        registration.remove()
        registration.remove()


def test_poison_pill_with_dead_false_is_discarded(config: wurk.Config, r: redis.Redis) -> None:
    raw = P.dumps({"class": "X", "args": [], "jid": "j" * 24, "dead": False})
    r.set(config.keys.poison_counter("j" * 24), 2)
    foreign_list(r, config, "gone", 9, "ffffffffffff", [raw])
    reaper(config).sweep()
    assert r.zcard("dead") == 0 and not r.exists("queue:default")


def test_a_poison_pill_with_dead_false_still_tells_the_death_handlers(
    config: wurk.Config, r: redis.Redis
) -> None:
    """docs/reliability.md: "A job with `dead: False` is discarded instead (death handlers
    still run)." — out of its in-flight list, in no queue and not in the dead set, and the
    death handlers and poison callbacks told once, with `wurk.Poisoned`."""
    pills: list[dict[str, Any]] = []
    registration = wurk.on_poison(pills.append)
    deaths: list[tuple[str, str]] = []
    config.death_handlers.append(
        lambda payload, exc: deaths.append((payload["jid"], type(exc).__name__)))
    try:
        jid = "k" * 24
        raw = P.dumps({"class": "X", "args": [], "queue": "default", "jid": jid, "dead": False})
        r.set(config.keys.poison_counter(jid), 2)
        foreign_list(r, config, "gone", 9, "ffffffffffff", [raw])
        reaper(config).sweep()
        assert r.zcard("dead") == 0 and not r.exists("queue:default")
        assert not r.exists(config.keys.private("default", "gone", 9, "ffffffffffff", 0))
        assert deaths == [(jid, "Poisoned")]
        assert [(p["jid"], p["count"]) for p in pills] == [(jid, 3)]
    finally:
        registration.remove()


def test_pro_layout_registers_and_is_recovered_by_either_layout(
    redis_server: Any, r: redis.Redis
) -> None:
    cfg = wurk.configure(redis_url=redis_server.url, private_list_layout="pro")
    me = Identity.current()
    f = fetcher(cfg, ["default"], identity=me)
    assert f.private_lists["default"] == f"queue:sq|{me}|default"
    dead_pro = "queue:sq|other:1:aaaaaaaaaaaa|default"
    r.lpush(dead_pro, job(1))
    assert reaper(cfg).sweep() == 1


def test_a_poison_pill_is_killed_once_with_two_reapers_racing(
    config: wurk.Config, r: redis.Redis
) -> None:
    """The recovery script leaves a pill in the dead owner's list for the reaper to kill, and
    the kill removed it from there only after the dead set and the death handlers: a second
    reaper sweeping meanwhile counted it again and killed it too — two dead entries, the
    handlers and poison callbacks told twice. Only the reaper whose kill takes it out of the
    list buries it and tells anyone."""
    pills: list[dict[str, Any]] = []
    registration = wurk.on_poison(pills.append)
    deaths: list[str] = []
    other = Reaper(config, Identity("gone", 1, "111111111111"), ["default"])

    def slow_handler(payload: dict[str, Any], exc: BaseException) -> None:
        deaths.append(payload["jid"])
        if len(deaths) == 1:
            other.sweep()  # the other reaper's sweep lands while the first still kills

    config.death_handlers.append(slow_handler)
    try:
        r.set(config.keys.poison_counter("jid000000000000000000001"), 2)
        key = foreign_list(r, config, "gone", 9, "ffffffffffff", [job(1)])
        reaper(config).sweep()
        assert r.zcard("dead") == 1 and not r.exists(key, "queue:default")
        assert deaths == ["jid000000000000000000001"]
        assert [pill["count"] for pill in pills] == [3]
    finally:
        registration.remove()


def test_an_owner_back_before_its_list_is_recovered_keeps_its_jobs(
    config: wurk.Config, r: redis.Redis
) -> None:
    """The reaper judged an owner once per sweep (its record gone) and recovered its lists
    later, each in a script of its own: an owner whose record came back meanwhile (an outage
    over, its heartbeat landed) and fetched a job had that job taken from under it and run
    twice. The recovery script checks the record itself, on Redis, with the move."""
    owner = "elsewhere:4343:abababababab"
    first = config.keys.private("default", "elsewhere", 4343, "abababababab", 0)
    r.lpush(first, job(1))
    later = config.keys.private("other", "elsewhere", 4343, "abababababab", 0)
    r.lpush(later, job(2))
    sweeper = Reaper(config, Identity.current(), ["default", "other"])

    def owner_returns(queue: str, moved: int) -> None:  # between the two lists' recoveries
        r.hset(owner, mapping={"info": json.dumps({"started_at": time.time()})})
        r.lpush(later, job(3))  # its first fetch after the outage

    sweeper.observers.append(owner_returns)
    assert sweeper.sweep() == 1
    assert r.lrange(config.keys.queue("default"), 0, -1) == [job(1)]
    assert r.lrange(later, 0, -1) == [job(3), job(2)]  # the live owner's: left alone
    assert not r.exists(config.keys.queue("other"))


def test_a_dead_owners_pro_layout_lists_are_recovered_by_the_sweep_of_their_queue(
    config: wurk.Config, r: redis.Redis
) -> None:
    """The sweep of a queue scanned `queue:<q>|*`, which no Pro-layout list
    (`queue:sq|<identity>|<q>`, written by Sidekiq Pro or by wurk with
    `private_list_layout: pro`) matches: a killed process's jobs waited for the hourly
    full scan, not the heartbeat TTL plus one sweep."""
    r.set(config.keys.reaper_lock, "another process", ex=3600)  # the full scan is not ours
    dead_pro = config.keys.private_pro("gone:5:aaaaaaaaaaaa", "default")
    other_queue = config.keys.private_pro("gone:5:aaaaaaaaaaaa", "nobody-serves-this")
    r.lpush(dead_pro, job(1))
    r.lpush(other_queue, job(2))
    assert reaper(config).sweep() == 1
    assert not r.exists(dead_pro) and r.lrange("queue:default", 0, -1) == [job(1)]
    assert r.llen(other_queue) == 1  # another queue's: left to the full scan
