"""Fair, partitioned queues (``wurk.partitions``): push, round-robin fetch under a limit per
partition, ACK, requeue, the reaper's return and recount, retries and scheduled jobs back to
their partition, and the Lua's answer to hand-written data."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import wurk
from wurk import partitions
from wurk import payload as P
from wurk.config import Capsule
from wurk.fetch.basic import UnitOfWork
from wurk.fetch.partitioned import PartitionedFetch
from wurk.fetch.reaper import Reaper, return_own_lists
from wurk.fetch.reliable import Claims
from wurk.launcher import install_built_ins
from wurk.metrics.counters import Counters
from wurk.processor import JobRunner
from wurk.runtime.busy import Busy
from wurk.runtime.clock import ManualClock
from wurk.runtime.identity import Identity
from wurk.scheduled import Scheduler

Q = "imports"


@pytest.fixture
def pconfig(redis_server: Any) -> Iterator[wurk.Config]:
    yield wurk.configure(redis_url=redis_server.url, partitions={Q: 2})


@wurk.job(name="parts.work", queue=Q)
def work(n: int) -> None:
    return None


def fetcher(config: wurk.Config, queues: tuple[str, ...] = (Q,), *, prefetch: int = 1,
            claims: Claims | None = None, nonce: str | None = None,
            concurrency: int = 10, slot: int = 0) -> PartitionedFetch:
    cfg = config if config.prefetch == prefetch else wurk.Config(
        redis_url=config.redis_url, partitions=config.partitions,
        partition_rates=config.partition_rates, prefetch=prefetch)
    identity = Identity.current()
    if nonce is not None:
        identity = Identity(identity.hostname, identity.pid, nonce)
    capsule = Capsule(queues=[(q, 0) for q in queues], concurrency=concurrency)
    return PartitionedFetch(cfg, capsule, cfg.pool(f"test{slot}", size=4), identity=identity,
                            capsule_index=0, slot=slot, claims=claims)


def part_of(unit: UnitOfWork | None) -> str:
    assert unit is not None
    return str(json.loads(unit.raw)["partition"])


def arg(unit: UnitOfWork | None) -> int:
    assert unit is not None
    return int(json.loads(unit.raw)["args"][0])


def take(f: PartitionedFetch, count: int) -> list[int]:
    """The argument of each of the next ``count`` jobs ``f`` fetches, each acknowledged."""
    taken = []
    for _ in range(count):
        unit = f.fetch(0.05)
        taken.append(arg(unit))
        assert unit is not None
        unit.acknowledge()
    return taken


def test_a_push_lands_in_its_partition_and_the_ring(pconfig: wurk.Config,
                                                    r: redis.Redis) -> None:
    work.set(partition="acct-1").perform_async(1)
    work.set(partition=42).perform_async(2)
    work.perform_async(3)  # no partition: the default one
    keys = pconfig.keys
    assert r.llen(keys.partition(Q, "acct-1")) == 1
    assert json.loads(r.lrange(keys.partition(Q, "42"), 0, -1)[0])["partition"] == "42"
    assert r.llen(keys.partition(Q, "default")) == 1
    assert set(r.zrange(keys.partition_ring(Q), 0, -1)) == {"acct-1", "42", "default"}
    assert Q in r.smembers(keys.queues) and not r.exists(keys.queue(Q))


def test_a_bad_partition_is_refused_at_push_naming_it(pconfig: wurk.Config) -> None:
    with pytest.raises(wurk.ConfigError, match="partition='a:b' is invalid"):
        work.set(partition="a:b").perform_async(1)
    with pytest.raises(wurk.InvalidPayload, match="partition="):
        wurk.Client(pconfig).push({"class": "parts.work", "args": [1], "queue": Q,
                                   "partition": "x" * 201})


def test_fetch_takes_round_robin_and_never_past_the_limit(pconfig: wurk.Config,
                                                          r: redis.Redis) -> None:
    for n in range(20):
        work.set(partition="a").perform_async(n)
    for n in range(100, 103):
        work.set(partition="b").perform_async(n)
    f = fetcher(pconfig)
    units = [f.fetch(0.05) for _ in range(6)]
    taken = [part_of(u) for u in units if u is not None]
    # a, b, a, b — then both at their limit of 2: nothing more, though a has 18 waiting
    assert sorted(taken) == ["a", "a", "b", "b"] and taken[0] != taken[1]
    assert [arg(u) for u in units if u is not None and part_of(u) == "a"] == [0, 1]
    running = pconfig.keys.partition_running(Q)
    assert r.hgetall(running) == {"a": "2", "b": "2"}
    first = next(u for u in units if u is not None)
    first.acknowledge()
    nxt = f.fetch(0.05)  # the ACK rides this fetch, freeing a slot of its partition
    assert nxt is not None and part_of(nxt) == part_of(first)
    assert r.hgetall(running) == {"a": "2", "b": "2"}
    assert r.llen(f.private_lists[Q]) == 4


def test_prefetch_takes_one_job_per_partition_per_round_trip(pconfig: wurk.Config,
                                                             r: redis.Redis) -> None:
    for p in ("a", "b", "c"):
        for n in range(5):
            work.set(partition=p).perform_async(n)
    f = fetcher(pconfig, prefetch=8, concurrency=1)
    assert f.fetch(0.05) is not None
    assert Counter(json.loads(j)["partition"] for j in r.lrange(f.private_lists[Q], 0, -1)) \
        == {"a": 1, "b": 1, "c": 1}


def test_prefetch_takes_no_more_than_a_processors_share_of_the_partitions(
        pconfig: wurk.Config, r: redis.Redis) -> None:
    """Ten tenants with a job each and ten processors: each processor takes one, as on a
    plain queue (its share: partitions with work / concurrency, at least one). The first
    processor took eight into its buffer and ran them one after another while the nine
    others found nothing to fetch."""
    for t in range(10):
        work.set(partition=f"t{t}").perform_async(t)
    fetchers = [fetcher(pconfig, prefetch=8, concurrency=10, slot=slot, nonce=f"{slot:012x}")
                for slot in range(10)]
    units = [f.fetch(0.05) for f in fetchers]
    assert all(unit is not None for unit in units)  # every processor got one
    assert sorted(arg(unit) for unit in units) == list(range(10))
    assert [r.llen(f.private_lists[Q]) for f in fetchers] == [1] * 10
    for f in fetchers:
        f.flush()


@pytest.mark.parametrize(("tenants", "taken"), [(30, 3), (200, 8)])
def test_a_backlog_of_partitions_gives_each_processor_its_share_up_to_prefetch(
        pconfig: wurk.Config, r: redis.Redis, tenants: int, taken: int) -> None:
    for t in range(tenants):
        work.set(partition=f"u{t:03d}").perform_async(t)
    f = fetcher(pconfig, prefetch=8, concurrency=10)
    assert f.fetch(0.05) is not None
    assert r.llen(f.private_lists[Q]) == taken
    f.flush()


def test_an_emptied_partition_leaves_the_ring_and_comes_back_with_its_next_push(
    pconfig: wurk.Config, r: redis.Redis
) -> None:
    work.set(partition="a").perform_async(1)
    f = fetcher(pconfig)
    unit = f.fetch(0.05)
    assert unit is not None
    unit.acknowledge()
    assert f.fetch(0.05) is None
    ring = pconfig.keys.partition_ring(Q)
    assert r.zcard(ring) == 0 and r.hlen(pconfig.keys.partition_running(Q)) == 0
    work.set(partition="a").perform_async(2)
    assert r.zrange(ring, 0, -1) == ["a"] and arg(f.fetch(0.05)) == 2


def test_requeue_puts_jobs_back_to_their_partitions_tail(pconfig: wurk.Config,
                                                         r: redis.Redis) -> None:
    for n in range(3):
        work.set(partition="a").perform_async(n)
    f = fetcher(pconfig)
    unit = f.fetch(0.05)
    assert arg(unit) == 0 and unit is not None
    f.requeue([unit])
    assert r.hlen(pconfig.keys.partition_running(Q)) == 0
    assert r.llen(f.private_lists[Q]) == 0
    assert arg(f.fetch(0.05)) == 0  # next to run again
    f.requeue([unit])  # already given back: not pushed twice
    assert r.llen(pconfig.keys.partition(Q, "a")) == 3


def test_plain_queues_of_the_capsule_are_still_fetched(pconfig: wurk.Config,
                                                       r: redis.Redis) -> None:
    f = fetcher(pconfig, (Q, "default"))
    r.lpush("queue:default", P.dumps({"class": "X", "args": [7], "queue": "default",
                                      "jid": "plainjob0000000000000000"}))
    unit = f.fetch(0.05)
    assert unit is not None and unit.queue == "default" and unit.partition is None
    unit.acknowledge()
    started = time.monotonic()
    assert f.fetch(5.0) is None  # nothing anywhere: a short poll (at most 0.2 s), not 5 s
    assert time.monotonic() - started < 2.5
    f.flush()


def test_an_idle_fetch_waits_5_ms_doubling_to_200_ms_and_5_ms_again_after_a_job(
    pconfig: wurk.Config
) -> None:
    """docs: with no plain queue to block on, a processor sleeps; the wait starts at 5 ms and
    doubles to 200 ms while nothing comes, and is back to 5 ms after a job."""

    class Waits(threading.Event):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[float] = []

        def wait(self, timeout: float | None = None) -> bool:
            assert timeout is not None
            self.seen.append(timeout)
            return False  # a real wait adds nothing the test reads but time

    f = fetcher(pconfig)
    waits = Waits()
    f._idle = waits
    for _ in range(8):
        assert f.fetch(5.0) is None
    assert waits.seen == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.2, 0.2])
    work.set(partition="a").perform_async(1)
    unit = f.fetch(5.0)
    assert unit is not None
    unit.acknowledge()
    waits.seen.clear()
    assert f.fetch(5.0) is None
    assert waits.seen == pytest.approx([0.005])
    f.flush()


def test_jobs_on_the_plain_list_are_routed_to_their_partitions(pconfig: wurk.Config,
                                                               r: redis.Redis) -> None:
    """A job given back by the reaper, moved by the scheduler or pushed by a process that
    does not know the queue is partitioned lands on ``queue:<q>``: the fetch routes it."""
    r.lpush(pconfig.keys.queue(Q), json.dumps({"class": "X", "args": [1], "queue": Q,
                                               "partition": "z", "jid": "j1"}),
            json.dumps({"class": "X", "args": [2], "queue": Q, "partition": "no:good",
                        "jid": "j2"}), "not json at all")
    f = fetcher(pconfig, prefetch=8, concurrency=1)
    assert f.fetch(0.05) is not None
    assert not r.exists(pconfig.keys.queue(Q))
    # one job per partition per fetch: "z"'s, and one of the two in the default partition
    # (a bad name, or no payload to read one from, is the default partition: never lost)
    assert r.llen(f.private_lists[Q]) == 2
    assert r.llen(pconfig.keys.partition(Q, partitions.DEFAULT_PARTITION)) == 1
    assert r.hgetall(pconfig.keys.partition_running(Q)) == {"z": "1", "default": "1"}


def test_a_bad_count_is_recounted_and_bad_ring_members_dropped(pconfig: wurk.Config,
                                                               r: redis.Redis) -> None:
    for n in range(3):
        work.set(partition="a").perform_async(n)
    keys = pconfig.keys
    r.hset(keys.partition_running(Q), "a", "lots")
    f = fetcher(pconfig)
    assert part_of(f.fetch(0.05)) == "a"  # the bad count recounted (0), then one taken
    assert r.hgetall(keys.partition_running(Q)) == {"a": "1"}
    r.hset(keys.partition_running(Q), "a", "-3")
    r.zadd(keys.partition_ring(Q), {"bad|member": 0, "x:y": 0})
    assert part_of(f.fetch(0.05)) == "a"  # the bad members visited first, and dropped
    assert r.hgetall(keys.partition_running(Q)) == {"a": "2"}
    assert r.zrange(keys.partition_ring(Q), 0, -1) == ["a"]
    r.hset(keys.partition_running(Q), "a", "9")  # too high, but a whole number: the
    assert f.fetch(0.05) is None  # reaper's recount repairs it
    Reaper(pconfig, Identity.current(), [Q]).recount_partitions()
    assert r.hgetall(keys.partition_running(Q)) == {"a": "2"}


def test_a_partition_list_of_the_wrong_type_is_skipped_not_an_error(
    pconfig: wurk.Config, r: redis.Redis
) -> None:
    keys = pconfig.keys
    r.set(keys.partition(Q, "s"), "a string")
    r.zadd(keys.partition_ring(Q), {"s": 0})
    work.set(partition="a").perform_async(1)
    f = fetcher(pconfig, prefetch=8, concurrency=1)
    assert part_of(f.fetch(0.05)) == "a"
    assert r.get(keys.partition(Q, "s")) == "a string"  # not ours to touch
    assert r.zrange(keys.partition_ring(Q), 0, -1) == ["a"]


def test_the_reaper_returns_a_dead_workers_jobs_and_counts_them_out(
    pconfig: wurk.Config, r: redis.Redis
) -> None:
    for n in range(4):
        work.set(partition="a").perform_async(n)
    dead = fetcher(pconfig, nonce="deadbeef0001")
    units = [dead.fetch(0.05), dead.fetch(0.05)]
    assert all(units) and r.hget(pconfig.keys.partition_running(Q), "a") == "2"
    assert dead.fetch(0.05) is None  # at its limit
    # the worker is killed: its heartbeat record never existed, so it is dead
    recovered = Reaper(pconfig, Identity.current(), [Q]).sweep()
    assert recovered == 2 and r.hlen(pconfig.keys.partition_running(Q)) == 0
    live = fetcher(pconfig)
    taken = sorted(arg(live.fetch(0.05)) for _ in range(2))
    assert taken == [0, 1]  # the returned jobs, routed back to their partition, first


def test_a_killed_workers_count_is_repaired_by_the_recount(pconfig: wurk.Config,
                                                           r: redis.Redis) -> None:
    work.set(partition="a").perform_async(1)
    f = fetcher(pconfig)
    assert f.fetch(0.05) is not None
    r.delete(f.private_lists[Q])  # the in-flight list gone by hand: the count is stale
    Reaper(pconfig, Identity.current(), [Q]).recount_partitions()
    assert r.hlen(pconfig.keys.partition_running(Q)) == 0
    assert r.smembers(pconfig.keys.partition_holders(Q)) == set()


def test_a_clean_shutdowns_return_counts_out(pconfig: wurk.Config, r: redis.Redis) -> None:
    work.set(partition="a").perform_async(1)
    f = fetcher(pconfig)
    assert f.fetch(0.05) is not None
    assert return_own_lists(pconfig, [(f.private_lists[Q], Q)]) == 1
    assert r.hlen(pconfig.keys.partition_running(Q)) == 0
    assert arg(f.fetch(0.05)) == 1


def test_ack_survives_a_script_flush(pconfig: wurk.Config, r: redis.Redis) -> None:
    for n in range(3):
        work.set(partition="a").perform_async(n)
    f = fetcher(pconfig)
    unit = f.fetch(0.05)
    assert unit is not None
    unit.acknowledge()
    r.script_flush()
    assert f.fetch(0.05) is not None  # loads the fetch script; the ACK is refused for now
    f.flush_acks()  # sent again, with the script loaded
    assert r.llen(f.private_lists[Q]) == 1
    assert r.hget(pconfig.keys.partition_running(Q), "a") == "1"


@wurk.job(name="parts.flaky", queue=Q, retry=3)
def flaky(n: int) -> None:
    raise RuntimeError("flaky")


def test_a_retry_and_a_scheduled_job_come_back_to_their_partition(
    pconfig: wurk.Config, r: redis.Redis
) -> None:
    install_built_ins(pconfig)
    runner = JobRunner(pconfig, counters=Counters(), busy=Busy())
    flaky.set(partition="t1").perform_in(30, 1)
    r.zadd(pconfig.keys.schedule, {r.zrange(pconfig.keys.schedule, 0, -1)[0]: 0})  # due now
    Scheduler(pconfig).enqueue_due()
    f = fetcher(pconfig)
    unit = f.fetch(0.05)
    assert unit is not None and unit.partition == "t1"
    runner.run(unit)  # fails: the worker's own failure path books its retry
    f.flush_acks()  # (the ACK rides the next round trip)
    assert r.hlen(pconfig.keys.partition_running(Q)) == 0  # acknowledged
    (retry,) = r.zrange(pconfig.keys.retry, 0, -1)
    assert json.loads(retry)["partition"] == "t1"
    r.zadd(pconfig.keys.retry, {retry: 0})
    Scheduler(pconfig).enqueue_due()
    again = f.fetch(0.05)
    assert again is not None and again.partition == "t1"
    assert json.loads(again.raw)["retry_count"] == 0


def test_an_async_jobs_ack_sent_by_another_thread_counts_it_out(pconfig: wurk.Config,
                                                                 r: redis.Redis) -> None:
    work.set(partition="a").perform_async(1)
    f = fetcher(pconfig)
    unit = f.fetch(0.05)
    assert unit is not None
    f.hand_off(unit)  # runs on the event loop: its lane acknowledges it
    raw = redis.Redis.from_url(pconfig.redis_url)

    def send(commands: list[tuple[Any, ...]]) -> list[Any]:
        pipe = raw.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return list(pipe.execute(raise_on_error=False))

    r.script_flush()
    commands = f.ack_commands([unit])
    assert f.settle_acks([unit], send(commands)) == [unit]  # refused for now: sent again
    assert f.settle_acks([unit], send(f.ack_commands([unit]))) == []
    assert r.llen(f.private_lists[Q]) == 0 and r.hlen(pconfig.keys.partition_running(Q)) == 0
    raw.close()


def test_a_rate_caps_the_jobs_of_one_partition_fetched_in_a_second(
    redis_server: Any, r: redis.Redis
) -> None:
    config = wurk.configure(redis_url=redis_server.url, partitions={Q: 100},
                            partition_rates={Q: 3})
    for n in range(40):
        work.set(partition="a").perform_async(n)
    for n in range(2):
        work.set(partition="b").perform_async(n)
    f = fetcher(config)
    rates = config.keys.partition_rates(Q)
    r.hset(rates, "b", "not a count")  # written by hand: counts as none this second
    per_second: Counter[tuple[str, str]] = Counter()
    started = time.monotonic()
    while time.monotonic() - started < 1.5:  # spans at least one whole second
        unit = f.fetch(0.01)
        if unit is None:
            continue
        assert unit.partition is not None
        second, count = r.hget(rates, unit.partition).split()  # the second it was taken in
        per_second[unit.partition, second] += 1
        assert int(count) == per_second[unit.partition, second]
        unit.acknowledge()
    a_seconds = [n for (p, _), n in per_second.items() if p == "a"]
    assert max(a_seconds) == 3 and sum(a_seconds) <= 3 * len(a_seconds)
    assert sum(n for (p, _), n in per_second.items() if p == "b") == 2  # its own rate
    r.hset(rates, "gone", "12 1")  # a second long past
    Reaper(config, Identity.current(), [Q]).recount_partitions()
    assert not r.hexists(rates, "gone")


def test_a_rate_needs_a_partitioned_queue() -> None:
    with pytest.raises(wurk.ConfigError, match="'other' is not a partitioned queue"):
        wurk.Config(partitions={Q: 5}, partition_rates={"other": 3})
    with pytest.raises(wurk.ConfigError, match="at least 1"):
        wurk.Config(partitions={Q: 5}, partition_rates={Q: 0})


def test_a_stray_of_a_live_process_goes_back_counted_out(pconfig: wurk.Config,
                                                          r: redis.Redis) -> None:
    """A job no processor holds any more (its processor died, or its fetch reply was lost)
    goes back to its partition through the plain list, one fewer in flight."""
    for n in range(2):
        work.set(partition="a").perform_async(n)
    claims = Claims()
    f = fetcher(pconfig, claims=claims)
    unit = f.fetch(0.05)
    assert unit is not None
    f.let_go(unit)  # its processor could not book it
    clock = ManualClock()
    reaper = Reaper(pconfig, Identity.current(), [Q], claims=claims,
                    own_lists=[(f.private_lists[Q], Q)], clock=clock)
    assert reaper.return_strays() == 0  # not yet: a reply may still be on its way
    clock.advance(pconfig.socket_timeout + 2)
    assert reaper.return_strays() == 1
    assert r.hlen(pconfig.keys.partition_running(Q)) == 0
    assert arg(f.fetch(0.05)) == 0  # routed back to its partition, next to run


def test_an_ack_leaves_a_count_written_by_hand_for_the_fetch_to_recount(
    pconfig: wurk.Config, r: redis.Redis
) -> None:
    for n in range(3):
        work.set(partition="a").perform_async(n)
    f = fetcher(pconfig)
    first = f.fetch(0.05)
    assert first is not None and f.fetch(0.05) is not None
    r.hset(pconfig.keys.partition_running(Q), "a", "garbage")
    first.acknowledge()
    f.flush_acks()
    assert r.hget(pconfig.keys.partition_running(Q), "a") == "garbage"
    assert f.fetch(0.05) is not None  # recounted: 1 in flight, so one more fits
    assert r.hget(pconfig.keys.partition_running(Q), "a") == "2"


@pytest.mark.parametrize("count", ["5.0", "0x3", " 1", "1e400", "99999999999999999999", "-0"])
def test_a_count_written_by_hand_that_lua_reads_as_a_number_is_recounted(
    pconfig: wurk.Config, r: redis.Redis, count: str
) -> None:
    """Lua's tonumber reads more than HINCRBY writes: '5.0', '0x3', '1e400' were believed
    (the partition was held at its limit until the reaper's next recount), and ' 1' passed
    the limit, so the fetch moved the job to its in-flight list and then failed on HINCRBY:
    every fetch of the queue failed, each one leaving another job in flight unrun. Such a
    count is recounted from the in-flight lists at once, as a count that reads as no
    number is; an ACK meeting one leaves it for that recount."""
    for n in range(3):
        work.set(partition="a").perform_async(n)
    running = pconfig.keys.partition_running(Q)
    r.hset(running, "a", count)
    f = fetcher(pconfig)
    first = f.fetch(0.05)
    assert arg(first) == 0 and r.hget(running, "a") == "1"
    assert first is not None
    first.acknowledge()
    f.flush_acks()
    assert r.hget(running, "a") is None
    r.hset(running, "a", count)  # an ACK meeting it leaves it for the next fetch
    second = f.fetch(0.05)
    assert arg(second) == 1 and second is not None
    r.hset(running, "a", count)
    second.acknowledge()
    f.flush_acks()
    assert r.hget(running, "a") == count
    assert arg(f.fetch(0.05)) == 2 and r.hget(running, "a") == "1"
    assert r.llen(pconfig.keys.partition(Q, "a")) == 0


def test_an_in_flight_count_hash_of_another_type_is_recounted(pconfig: wurk.Config,
                                                               r: redis.Redis) -> None:
    work.set(partition="a").perform_async(0)
    running = pconfig.keys.partition_running(Q)
    r.set(running, "not a hash")
    f = fetcher(pconfig)
    unit = f.fetch(0.05)
    assert arg(unit) == 0 and r.hgetall(running) == {"a": "1"}



@pytest.mark.parametrize("which", ["holders", "rates"])
def test_a_holders_set_or_rate_hash_of_another_type_starts_again_with_a_warning(
    redis_server: Any, r: redis.Redis, which: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Holders of another type than a set made every fetch of the queue move a job into
    its in-flight list, count it, then fail on SADD: two fetches left the partition at its
    limit with two jobs in flight that nothing ran, and the reaper's recount failed at every
    sweep. Rate counts of another type failed every fetch. Neither has a TTL: for good.
    Each is deleted before anything moves, with a warning naming it."""
    config = wurk.configure(redis_url=redis_server.url, partitions={Q: 2},
                            partition_rates={Q: 5})
    for n in range(3):
        work.set(partition="a").perform_async(n)
    key = (config.keys.partition_holders(Q) if which == "holders"
           else config.keys.partition_rates(Q))
    r.set(key, "not ours")
    f = fetcher(config)
    with caplog.at_level(logging.WARNING, logger="wurk"):
        first = f.fetch(0.05)
        assert arg(first) == 0 and first is not None
        first.acknowledge()
        f.flush_acks()
        assert arg(f.fetch(0.05)) == 1
        r.set(key, "not ours")  # the reaper's recount meets one too
        assert partitions.recount(r, config.keys, Q) == 1
    assert r.hgetall(config.keys.partition_running(Q)) == {"a": "1"}
    if which == "holders":  # the count is kept: without holders a recount finds nothing
        assert not r.exists(key)
        assert partitions.recount(r, config.keys, Q) == 0  # …until a fetch notes its list
    else:
        assert r.smembers(config.keys.partition_holders(Q)) == {f.private_lists[Q]}
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert warned == [f"partitioned queue {Q}: {key} held another Redis type than wurk writes "
                      "there (written by something else); deleted, it starts again"] * 2
    f.flush()


def test_a_holder_that_is_no_in_flight_list_of_the_queue_is_dropped_and_counts_nothing(
        pconfig: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """The recount counted every list the holders set named: a member naming another
    queue's plain list, another partitioned queue's in-flight list or a partition's own
    list (written by something else) had its jobs counted in flight, so their partitions
    stayed at their limit and the fetch took nothing — at every recount, for good. Now a
    member that is not named as an in-flight list of this queue (either layout) is dropped
    with a warning naming it; the queue's own in-flight lists are counted as before."""
    keys = pconfig.keys
    job = json.dumps({"class": "parts.work", "args": [0], "jid": "f" * 24, "queue": Q,
                      "partition": "a"})
    own = keys.private(Q, "host", 12, "0123456789ab", 0)
    own_pro = keys.private_pro("host:34:0123456789ab", Q)
    foreign = [keys.queue("other"), keys.private("other", "host", 12, "0123456789ab", 0),
               keys.partition(Q, "a"), keys.private_pro("host:34:nonce", "other")]
    for name in [own, own_pro, *foreign]:
        r.rpush(name, job)
    holders = keys.partition_holders(Q)
    r.sadd(holders, own, own_pro, *foreign)
    with caplog.at_level(logging.WARNING, logger="wurk"):
        assert partitions.recount(r, keys, Q) == 1
    assert r.hgetall(keys.partition_running(Q)) == {"a": "2"}  # the queue's own two lists
    assert r.smembers(holders) == {own, own_pro}
    assert all(r.llen(name) == 1 for name in foreign)  # not ours to touch: only forgotten
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(warned) == 1 and warned[0].startswith(
        f"partitioned queue {Q}: {holders} named ")
    assert warned[0].endswith(", which are no in-flight list of the queue (written by "
                              "something else); dropped from it, their jobs not counted in "
                              "flight")
    assert all(name in warned[0] for name in foreign)

    # The fetch's own recount (a count that is none) meets them too: a partition held at its
    # limit (2) by a foreign list's jobs took nothing.
    r.delete(own, own_pro, keys.partition(Q, "a"))
    r.sadd(holders, *foreign)
    r.hset(keys.partition_running(Q), "a", "x")
    work.set(partition="a").perform_async(7)
    f = fetcher(pconfig)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="wurk"):
        assert arg(f.fetch(0.05)) == 7
    assert r.hgetall(keys.partition_running(Q)) == {"a": "1"}
    assert r.smembers(holders) == {f.private_lists[Q]}
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(warned) == 1 and all(name in warned[0] for name in foreign)
    f.flush()


# -- partition_by: the partition as a function of the arguments -------------------------------
@wurk.job(name="parts.by_account", queue=Q, partition_by=lambda account, batch: account)
def by_account(account: int, batch: int) -> None:
    return None


class ByTenant(wurk.Job, name="parts.by_tenant", queue=Q,
               partition_by=lambda tenant, *rest: f"tenant-{tenant}"):
    def perform(self, tenant: str, n: int) -> None:
        return None


def waiting(r: redis.Redis, config: wurk.Config, name: str) -> list[Any]:
    return [json.loads(raw)["args"] for raw in r.lrange(config.keys.partition(Q, name), 0, -1)]


def test_partition_by_names_each_pushs_partition_from_its_args(pconfig: wurk.Config,
                                                               r: redis.Redis) -> None:
    by_account.perform_async(42, 0)
    by_account.perform_async(account=7, batch=1)  # bound to positions first
    ByTenant.perform_async("acme", 2)
    by_account.set(partition="override").perform_async(42, 3)  # the push's own wins
    by_account.perform_in(60, 42, 4)  # a scheduled job carries it, to come back to it
    assert waiting(r, pconfig, "42") == [[42, 0]] and waiting(r, pconfig, "7") == [[7, 1]]
    assert waiting(r, pconfig, "tenant-acme") == [["acme", 2]]
    assert waiting(r, pconfig, "override") == [[42, 3]]
    scheduled = json.loads(r.zrange(pconfig.keys.schedule, 0, -1)[0])
    assert scheduled["partition"] == "42"


def test_a_bulk_push_goes_to_each_jobs_partition_in_order(pconfig: wurk.Config,
                                                          r: redis.Redis) -> None:
    handles = by_account.perform_bulk([[1, 0], [2, 0], [1, 1], [3, 0]])
    jids = [handle.jid for handle in handles if handle is not None]
    assert len(jids) == 4
    assert waiting(r, pconfig, "1") == [[1, 1], [1, 0]]
    assert waiting(r, pconfig, "2") == [[2, 0]] and waiting(r, pconfig, "3") == [[3, 0]]
    by_jid = {json.loads(raw)["jid"]: json.loads(raw)["args"]
              for name in ("1", "2", "3")
              for raw in r.lrange(pconfig.keys.partition(Q, name), 0, -1)}
    assert [by_jid[jid] for jid in jids] == [[1, 0], [2, 0], [1, 1], [3, 0]]
    at = time.time() + 600
    by_account.perform_bulk([[5, 0], [6, 0]], at=[at, at + 1])
    assert sorted(json.loads(raw)["partition"] for raw in
                  r.zrange(pconfig.keys.schedule, 0, -1)) == ["5", "6"]

    async def push() -> list[Any]:
        return await by_account.aperform_bulk([[8, 0], [9, 0]])

    assert all(asyncio.run(push()))
    assert waiting(r, pconfig, "8") == [[8, 0]] and waiting(r, pconfig, "9") == [[9, 0]]


def boom(account: int, batch: int) -> str:
    raise KeyError("no such account")


BAD_BY: list[tuple[Any, str]] = [
    (boom, r"its partition_by raised KeyError for args \[1, 2\]: 'no such account'"),
    (lambda account, batch: None, r"partition_by: partition=None is invalid.*for args "
                                  r"\[1, 2\]"),
    (lambda account, batch: "a|b", r"partition='a\|b' is invalid"),
    (lambda account, batch: "x" * 201, r"of 1 to 200 bytes"),
    (lambda account, batch: True, r"partition=True is invalid"),
    (lambda *args: 1 / 0, r"raised ZeroDivisionError"),
    (lambda: "no args taken", r"raised TypeError"),
]


@pytest.mark.parametrize("case", range(len(BAD_BY)))
def test_a_partition_by_that_raises_or_returns_a_bad_name_fails_the_push(
    pconfig: wurk.Config, r: redis.Redis, case: int
) -> None:
    by, problem = BAD_BY[case]
    name = f"parts.by_bad{case}"
    bad = wurk.job(name=name, queue=Q, partition_by=by)(lambda account, batch: None)
    with pytest.raises(wurk.InvalidPayload, match=f"job '{re.escape(name)}': .*{problem}"):
        bad.perform_async(1, 2)
    with pytest.raises(wurk.InvalidPayload, match=problem):
        bad.perform_bulk([[1, 2], [3, 4]])
    assert r.zcard(pconfig.keys.partition_ring(Q)) == 0 and r.zcard(pconfig.keys.schedule) == 0


def test_partition_by_is_refused_where_it_cannot_work() -> None:
    with pytest.raises(wurk.RegistrationError, match="must be a function of the job's"):
        wurk.job(name="parts.by_str", partition_by="account_id")(lambda account_id: None)
    with pytest.raises(wurk.RegistrationError, match="give partition or partition_by"):
        wurk.job(name="parts.by_both", partition="a", partition_by=lambda *a: "b")(
            lambda: None)
    with pytest.raises(wurk.ConfigError, match="partition_by is an option of the job's"):
        by_account.set(partition_by=lambda *a: "b")


def test_a_bulk_push_with_one_bad_partition_pushes_none(pconfig: wurk.Config,
                                                         r: redis.Redis) -> None:
    picky = wurk.job(name="parts.by_picky", queue=Q,
                     partition_by=lambda account, batch: account if account != 3 else "")(
        lambda account, batch: None)
    with pytest.raises(wurk.InvalidPayload, match=r"partition='' is invalid.*args \[3, 4\]"):
        picky.perform_bulk([[1, 2], [3, 4]])
    assert r.zcard(pconfig.keys.partition_ring(Q)) == 0  # every partition computed first


def test_a_job_routed_to_a_partition_key_of_another_type_is_never_lost(
    pconfig: wurk.Config, r: redis.Redis
) -> None:
    """A partition key written by hand as another type is left alone; a job of that
    partition found on the plain list (a Ruby push, a retry, the reaper's return) goes to
    the default partition rather than vanish in a fetch that fails after popping it."""
    keys = pconfig.keys
    r.set(keys.partition(Q, "s"), "a string")
    for n in range(3):
        r.lpush(keys.queue(Q), json.dumps({"class": "X", "args": [n], "queue": Q,
                                           "partition": "s", "jid": f"s{n}"}))
    f = fetcher(pconfig)
    assert sorted(take(f, 3)) == [0, 1, 2]
    assert r.get(keys.partition(Q, "s")) == "a string"  # not ours to touch


def test_a_job_requeued_or_pushed_to_a_partition_key_of_another_type_is_never_lost(
    pconfig: wurk.Config, r: redis.Redis
) -> None:
    """The requeue took the job out of its in-flight list, then failed on the partition's
    key: the job was gone. It goes to the default partition, as a push does."""
    keys = pconfig.keys
    work.set(partition="s").perform_async(1)
    f = fetcher(pconfig)
    unit = f.fetch(0.05)
    assert unit is not None
    r.set(keys.partition(Q, "s"), "a string")  # written by hand while the job ran
    f.requeue([unit])
    assert r.hlen(keys.partition_running(Q)) == 0
    again = f.fetch(0.05)
    assert again is not None and arg(again) == 1
    again.acknowledge()
    work.set(partition="s").perform_async(2)
    pushed = f.fetch(0.05)
    assert pushed is not None and arg(pushed) == 2 and pushed.partition == "default"
    assert r.get(keys.partition(Q, "s")) == "a string"  # not ours to touch


def test_a_requeue_to_a_ring_of_another_type_releases_and_returns_every_job(
    pconfig: wurk.Config, r: redis.Redis
) -> None:
    """The requeue moved the first job to its partition's list, then failed on the ring's
    ZADD (written by hand as another type; Redis does not roll back): that job's in-flight
    count was never released and the other jobs stayed in flight. Each goes back and is
    released now, the ring left for the next fetch, which rebuilds it and fetches them."""
    keys = pconfig.keys
    work.set(partition="a").perform_async(1)
    work.set(partition="b").perform_async(2)
    f = fetcher(pconfig)
    units = [f.fetch(0.05), f.fetch(0.05)]
    assert all(unit is not None for unit in units)
    ring = keys.partition_ring(Q)
    r.delete(ring)
    r.set(ring, "not ours")
    f.requeue([unit for unit in units if unit is not None])
    assert r.hlen(keys.partition_running(Q)) == 0
    assert r.llen(keys.partition(Q, "a")) == 1 and r.llen(keys.partition(Q, "b")) == 1
    got = take(f, 2)
    f.flush_acks()
    assert sorted(got) == [1, 2] and f.fetch(0.05) is None
    f.flush()


def test_a_push_to_a_ring_of_another_type_pushes_once_without_an_error(
    pconfig: wurk.Config, r: redis.Redis
) -> None:
    """The push wrote the job to its partition's list, then failed on the ring's ZADD (a
    ring written by hand as another type): the caller saw an error for a job that was
    pushed, and a retry pushed it twice. The push succeeds now, the ring left for the next
    fetch to rebuild; the job runs once."""
    keys = pconfig.keys
    ring = keys.partition_ring(Q)
    r.set(ring, "not ours")
    work.set(partition="a").perform_async(1)
    assert r.llen(keys.partition(Q, "a")) == 1 and r.get(ring) == "not ours"
    f = fetcher(pconfig)
    unit = f.fetch(0.05)
    assert unit is not None and arg(unit) == 1
    unit.acknowledge()
    f.flush_acks()
    assert f.fetch(0.05) is None
    f.flush()


def test_a_push_when_the_default_partition_key_is_foreign_too_fails_naming_them(
    pconfig: wurk.Config, r: redis.Redis
) -> None:
    keys = pconfig.keys
    r.set(keys.partition(Q, "s"), "a string")
    r.set(keys.partition(Q, partitions.DEFAULT_PARTITION), "another")
    with pytest.raises(redis.exceptions.ResponseError,
                       match=re.escape(keys.partition(Q, "s"))):
        work.set(partition="s").perform_async(1)


def test_a_bulk_push_with_a_job_no_partition_can_take_pushes_none_of_its_jobs(
    pconfig: wurk.Config, r: redis.Redis
) -> None:
    """The script pushed the jobs before the one whose partition's key and the default
    partition's both held other types, then failed: a push reported as failed had pushed
    part of its jobs, and a retry pushed those twice. It checks every job first now."""
    keys = pconfig.keys
    r.set(keys.partition(Q, "s"), "a string")
    r.set(keys.partition(Q, partitions.DEFAULT_PARTITION), "another")
    jobs = [{"class": "X", "queue": Q, "args": [n], "partition": p}
            for n, p in enumerate(["a", "b", "s", "a"])]
    with pytest.raises(redis.exceptions.ResponseError,
                       match=r"none of the 4 jobs of this push to queue imports was pushed"):
        wurk.Client(pconfig).writer.write(pconfig, pconfig.pool("client"),
                                          [(job, None) for job in _prepared(pconfig, jobs)])
    assert r.llen(keys.partition(Q, "a")) == 0 and r.llen(keys.partition(Q, "b")) == 0
    assert r.zcard(keys.partition_ring(Q)) == 0 and not r.sismember(keys.queues, Q)
    with pytest.raises(redis.exceptions.ResponseError, match="none of the 2 jobs"):
        work.set(partition="s").perform_bulk([[1], [2]])


def test_a_push_to_two_partitioned_queues_names_the_queue_whose_jobs_went(
    redis_server: Any, r: redis.Redis
) -> None:
    config = wurk.configure(redis_url=redis_server.url, partitions={Q: 2, "exports": 2})
    keys = config.keys
    r.set(keys.partition(Q, "s"), "a string")
    r.set(keys.partition(Q, partitions.DEFAULT_PARTITION), "another")
    jobs = [{"class": "X", "queue": q, "args": [n], "partition": "s"}
            for n, q in enumerate([Q, "exports"])]
    with pytest.raises(redis.exceptions.ResponseError,
                       match=r"none of the 1 jobs .* queue imports was pushed; the jobs of "
                             r"this push to queue\(s\) exports were pushed"):
        wurk.Client(config).writer.write(config, config.pool("client"),
                                         [(job, None) for job in _prepared(config, jobs)])
    assert r.llen(keys.partition("exports", "s")) == 1


def _prepared(config: wurk.Config, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    client = wurk.Client(config)
    made = [client.prepare(job) for job in jobs]
    assert all(job is not None for job in made)
    return [job for job in made if job is not None]


def test_jobs_routed_from_the_plain_list_keep_their_order_in_their_partition(
    pconfig: wurk.Config, r: redis.Redis
) -> None:
    """A Ruby client (or any process that does not declare the queue partitioned) pushes a
    partition's jobs one after another to ``queue:<q>``, as Sidekiq does (``LPUSH``): routed
    to the partition, they run in the order they were pushed, as on a plain queue."""
    for n in range(5):
        r.lpush(pconfig.keys.queue(Q), json.dumps({"class": "X", "args": [n], "queue": Q,
                                                   "partition": "z", "jid": f"r{n}"}))
    assert take(fetcher(pconfig), 5) == [0, 1, 2, 3, 4]


def test_a_ring_of_another_type_is_rebuilt_and_every_waiting_job_is_fetched(
        pconfig: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """A ring written by hand as another type failed every fetch of the queue (its ZRANGE),
    with no TTL: for good. It is deleted with a warning and rebuilt from the partitions'
    lists, so the jobs already waiting in them are fetched, not only those pushed later."""
    keys = pconfig.keys
    for name, n in (("a", 0), ("b", 1), ("c", 2)):
        work.set(partition=name).perform_async(n)
    ring = keys.partition_ring(Q)
    r.delete(ring)
    r.set(ring, "not ours")
    f = fetcher(pconfig)
    with caplog.at_level(logging.WARNING, logger="wurk"):
        got = take(f, 3)
    f.flush_acks()
    assert sorted(got) == [0, 1, 2]
    assert f.fetch(0.05) is None and r.type(ring) in ("zset", "none")
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert any(f"{ring} held another Redis type" in w for w in warned)
    f.flush()


@wurk.job(name="parts.plain", queue="plain")
def plain_work(n: int) -> None:
    return None


def test_a_plain_list_of_another_type_leaves_the_partitions_and_other_queues_served(
        pconfig: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """``queue:<q>`` written by something else as another type failed every fetch of the
    queue (the routing's RPOP) with a bare WRONGTYPE — and of every queue after it in the
    capsule — for good. Its partitions are served, the capsule's other queues too, and the
    key is named in a warning (once), left alone."""
    keys = pconfig.keys
    work.set(partition="a").perform_async(1)
    plain_work.perform_async(2)
    r.set(keys.queue(Q), "not ours")
    f = fetcher(pconfig, (Q, "plain"))
    with caplog.at_level(logging.WARNING, logger="wurk"):
        got = take(f, 2)
        assert f.fetch(0.05) is None
    f.flush_acks()
    assert sorted(got) == [1, 2] and r.get(keys.queue(Q)) == "not ours"
    warned = [rec.getMessage() for rec in caplog.records if keys.queue(Q) in rec.getMessage()]
    assert len(warned) == 1 and "another Redis type" in warned[0]
    f.flush()


def test_an_in_flight_list_of_another_type_passes_the_queue_over_not_the_capsule(
        pconfig: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    work.set(partition="a").perform_async(1)
    plain_work.perform_async(2)
    f = fetcher(pconfig, (Q, "plain"))
    private = f.private_lists[Q]
    r.set(private, "not ours")
    with caplog.at_level(logging.WARNING, logger="wurk"):
        assert take(f, 1) == [2]  # the plain queue's job: the capsule is not stuck
        assert f.fetch(0.05) is None
    f.flush_acks()
    assert r.llen(pconfig.keys.partition(Q, "a")) == 1  # not moved, not counted
    assert not r.exists(pconfig.keys.partition_running(Q))
    assert any(private in rec.getMessage() for rec in caplog.records)
    r.delete(private)
    assert take(f, 1) == [1]  # mended: served again
    f.flush()


def test_a_partition_the_ring_lost_is_found_again_by_the_hourly_sweep(
        pconfig: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """A partition list with jobs that the ring does not name (the ring deleted or edited by
    hand, a rebuild cut short) was never fetched, nor counted by ``Queue.size``, until
    that partition's next push: for good for a tenant that pushes no more. The reaper's
    hourly full sweep puts every such partition back in the ring."""
    keys = pconfig.keys
    work.set(partition="a").perform_async(1)
    work.set(partition="b").perform_async(2)
    r.zrem(keys.partition_ring(Q), "b")
    f = fetcher(pconfig)
    assert take(f, 1) == [1] and f.fetch(0.05) is None  # "b" stranded
    f.flush_acks()
    with caplog.at_level(logging.WARNING, logger="wurk"):
        Reaper(pconfig, Identity.current(), [Q]).sweep()  # the first sweep: full scan due
    assert r.zrange(keys.partition_ring(Q), 0, -1) == ["b"]
    assert any("1 partition(s)" in rec.getMessage() for rec in caplog.records)
    assert take(f, 1) == [2]
    caplog.clear()
    r.delete(keys.reaper_lock)
    with caplog.at_level(logging.WARNING, logger="wurk"):
        Reaper(pconfig, Identity.current(), [Q]).sweep()  # nothing stranded: no warning
    assert not [rec for rec in caplog.records if "ring" in rec.getMessage()]
    f.flush()
