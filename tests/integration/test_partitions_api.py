"""``wurk.api.Queue`` over a partitioned queue (``wurk.partitions``): size, listing in pages,
find and delete by jid or by where a page listed a job, and clear — across the plain list and
every partition, the clear a Lua page at a time that leaves the in-flight counts alone and
takes emptied partitions out of the ring; and what it does with hand-written data."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import wurk
from wurk import partitions
from wurk import payload as P
from wurk.api import Queue, Stats
from wurk.api import queues as api_queues
from wurk.config import Capsule
from wurk.fetch.partitioned import PartitionedFetch
from wurk.runtime.identity import Identity

Q = "imports"


@pytest.fixture
def pconfig(redis_server: Any) -> Iterator[wurk.Config]:
    yield wurk.configure(redis_url=redis_server.url, partitions={Q: 2})


@wurk.job(name="parts.api", queue=Q)
def work(n: int) -> None:
    return None


@wurk.job(name="parts.api.other", queue=Q)
def other(n: int) -> None:
    return None


@wurk.job(name="parts.api.unique", queue=Q, unique_for=600)
def once(n: int) -> None:
    return None


def fetcher(config: wurk.Config) -> PartitionedFetch:
    return PartitionedFetch(config, Capsule(queues=[(Q, 0)], concurrency=5),
                            config.pool("test", size=2), identity=Identity.current(),
                            capsule_index=0, slot=0)


def args_of(records: list[Any]) -> list[int]:
    return [int(record.args[0]) for record in records]


def seed(config: wurk.Config) -> None:
    """b: 0 1 2 · a: 10 11 · not routed yet on the plain list: 20."""
    for n in range(3):
        work.set(partition="b").perform_async(n)
    for n in (10, 11):
        work.set(partition="a").perform_async(n)
    raw = P.dumps({"class": "parts.api", "args": [20], "queue": Q, "jid": "f" * 24,
                   "partition": "c", "created_at": 1.0, "enqueued_at": 1.0})
    config.pool("api").run(lambda r: r.lpush(config.keys.queue(Q), raw))


def test_size_iteration_and_pages_cover_every_partition(pconfig: wurk.Config) -> None:
    seed(pconfig)
    queue = Queue(Q, pconfig)
    assert queue.partitioned and queue.size() == 6
    assert queue.partition_names() == ["a", "b"]
    # The plain list, then the partitions by name, each newest first.
    assert args_of(list(queue)) == [20, 11, 10, 2, 1, 0]
    assert args_of(queue.page(0, 6)) == [20, 11, 10, 2, 1, 0]
    assert args_of(queue.page(2, 3)) == [10, 2, 1]  # across a partition's edge
    assert args_of(queue.page(0, 6, oldest_first=True)) == [0, 1, 2, 10, 11, 20]
    assert args_of(queue.page(1, 3, oldest_first=True)) == [1, 2, 10]
    assert queue.page(6, 5) == []
    where = [(found.partition, found.index) for found in queue.listing(1, 4)]
    assert where == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    where = [(found.partition, found.index) for found in queue.listing(0, 2, oldest_first=True)]
    assert where == [("b", 2), ("b", 1)]
    # The queues list counts them all through the same API.
    summary = {s.name: s.size for s in Stats(pconfig).queue_summaries()}
    assert summary[Q] == 6


def test_a_page_reads_only_the_lists_it_shows(pconfig: wurk.Config, r: redis.Redis) -> None:
    """A page of a 100,000-job partition is one LRANGE of the rows shown, not the partition."""
    keys = pconfig.keys
    big = keys.partition(Q, "big")
    body = P.dumps({"class": "parts.api", "args": [0], "queue": Q, "jid": "0" * 24,
                    "partition": "big"})
    pipe = r.pipeline(transaction=False)
    for _ in range(20):
        pipe.lpush(big, *([body] * 5_000))
    pipe.zadd(keys.partition_ring(Q), {"big": 0})
    pipe.execute()
    work.set(partition="zz").perform_async(7)
    queue = Queue(Q, pconfig)
    r.config_resetstat()
    page = queue.listing(99_990, 25)
    assert [(f.partition, f.index) for f in page] == [("big", n) for n in range(99_990, 100_000)
                                                      ] + [("zz", 0)]
    stats = r.info("commandstats")
    assert stats["cmdstat_lrange"]["calls"] == 2  # one per list the page spans
    assert queue.size() == 100_001


def test_find_and_delete_a_job_by_jid_in_any_partition(pconfig: wurk.Config) -> None:
    seed(pconfig)
    queue = Queue(Q, pconfig)
    jid = next(record.jid for record in queue if record.args == [11])
    found = queue.find_job(jid)
    assert found is not None and found.args == [11]
    assert queue.delete_job(jid) is True
    assert queue.find_job(jid) is None and queue.delete_job(jid) is False
    assert queue.find_job("f" * 24) is not None  # the plain list's job is found too
    assert queue.size() == 5


def test_delete_by_class_and_by_stored_text_cover_the_partitions(pconfig: wurk.Config) -> None:
    seed(pconfig)
    other.set(partition="b").perform_async(99)
    queue = Queue(Q, pconfig)
    assert queue.delete_by_class("parts.api.other") == 1
    record = next(record for record in queue if record.args == [1])
    assert queue.delete(record) is True and queue.delete(record) is False
    in_a = next(record for record in queue if record.args == [10])
    assert in_a.delete() is True and in_a.delete() is False  # the record's own delete
    assert args_of(list(queue)) == [20, 11, 2, 0]


def test_delete_a_job_where_a_page_listed_it(pconfig: wurk.Config) -> None:
    seed(pconfig)
    queue = Queue(Q, pconfig)
    listed = queue.listing(0, 6)
    in_b = next(found for found in listed if found.record.args == [1])
    assert (in_b.partition, in_b.index) == ("b", 1)
    work.set(partition="b").perform_async(3)  # pushed since: the job moved one further
    assert queue.delete_listed(in_b.index, in_b.record.digest, in_b.partition) is True
    assert queue.delete_listed(in_b.index, in_b.record.digest, in_b.partition) is False
    plain = listed[0]
    assert plain.partition is None
    assert queue.delete_listed(plain.index, plain.record.digest, None) is True
    # A partition no push could name, or one of a queue that is not partitioned: nothing.
    first = listed[1]
    assert queue.delete_listed(first.index, first.record.digest, "a:b") is False
    assert Queue("default", pconfig).delete_listed(0, first.record.digest, "a") is False
    assert args_of(list(queue)) == [11, 10, 3, 2, 0]


def test_clear_empties_every_partition_and_leaves_the_ring_and_queues(
    pconfig: wurk.Config, r: redis.Redis
) -> None:
    seed(pconfig)
    keys = pconfig.keys
    assert Queue(Q, pconfig).clear() == 6
    assert not r.exists(keys.queue(Q), keys.partition(Q, "a"), keys.partition(Q, "b"))
    assert r.zcard(keys.partition_ring(Q)) == 0
    assert Q not in r.smembers(keys.queues)
    assert Queue(Q, pconfig).size() == 0
    work.set(partition="a").perform_async(1)  # comes back with its next push
    assert r.zrange(keys.partition_ring(Q), 0, -1) == ["a"] and Q in r.smembers(keys.queues)


def test_clear_keeps_the_in_flight_counts_of_running_jobs(pconfig: wurk.Config,
                                                          r: redis.Redis) -> None:
    keys = pconfig.keys
    for n in range(4):
        work.set(partition="a").perform_async(n)
    f = fetcher(pconfig)
    running = [f.fetch(0.05), f.fetch(0.05)]
    assert all(unit is not None for unit in running)
    assert r.hget(keys.partition_running(Q), "a") == "2"
    assert Queue(Q, pconfig).clear() == 2
    assert r.hget(keys.partition_running(Q), "a") == "2"  # the two running still count
    work.set(partition="a").perform_async(9)
    assert f.fetch(0.05) is None  # the limit of 2 still holds against them
    first = running[0]
    assert first is not None
    first.acknowledge()
    nxt = f.fetch(0.05)  # the ACK rides this fetch: one slot free
    assert nxt is not None and json.loads(nxt.raw)["args"] == [9]
    assert r.hget(keys.partition_running(Q), "a") == "2"
    f.flush()


def test_clear_runs_a_script_per_page_of_each_partition(pconfig: wurk.Config, r: redis.Redis,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """A 100,000-job partition is cleared in pages of ``PARTITION_CLEAR_PAGE``, a script call
    each, so Redis is never held for the whole partition."""
    keys = pconfig.keys
    body = P.dumps({"class": "parts.api", "args": [0], "queue": Q, "partition": "big"})
    pipe = r.pipeline(transaction=False)
    for _ in range(20):
        pipe.lpush(keys.partition(Q, "big"), *([body] * 5_000))
    pipe.zadd(keys.partition_ring(Q), {"big": 0})
    pipe.execute()
    work.set(partition="small").perform_async(1)
    r.config_resetstat()
    assert Queue(Q, pconfig).clear() == 100_001
    scripts = sum(stats["calls"] for name, stats in r.info("commandstats").items()
                  if name in ("cmdstat_evalsha", "cmdstat_eval"))
    # 200 pages of 500 for big, one for small, the forget; a load of each script at most.
    assert 200 + 1 + 1 <= scripts <= 200 + 1 + 1 + 4
    assert r.zcard(keys.partition_ring(Q)) == 0
    monkeypatch.setattr(api_queues, "PARTITION_CLEAR_PAGE", 3)
    for n in range(7):
        work.set(partition="p").perform_async(n)
    r.config_resetstat()
    assert Queue(Q, pconfig).clear() == 7
    assert r.info("commandstats")["cmdstat_evalsha"]["calls"] == 3 + 1  # 3 + 3 + 1, forget


def test_clear_releases_unique_locks_of_jobs_in_partitions(pconfig: wurk.Config,
                                                           r: redis.Redis) -> None:
    keys = pconfig.keys
    assert once.set(partition="a").perform_async(1) is not None
    # A unique job is pushed to the plain list with its lock; the fetch routes it. Routed
    # here by hand, as the fetch does.
    r.lmove(keys.queue(Q), keys.partition(Q, "a"), "RIGHT", "LEFT")
    r.zadd(keys.partition_ring(Q), {"a": 0})
    assert once.set(partition="a").perform_async(1) is None  # a duplicate while it waits
    assert Queue(Q, pconfig).clear() == 1
    handle = once.set(partition="a").perform_async(1)
    assert handle is not None
    r.lmove(keys.queue(Q), keys.partition(Q, "a"), "RIGHT", "LEFT")
    r.zadd(keys.partition_ring(Q), {"a": 0})
    assert Queue(Q, pconfig).delete_job(handle.jid) is True  # its lock released as well
    assert once.set(partition="a").perform_async(1) is not None


def test_a_cleared_queue_is_forgotten_only_when_nothing_waits(pconfig: wurk.Config,
                                                              r: redis.Redis) -> None:
    keys = pconfig.keys
    work.set(partition="a").perform_async(1)  # as if pushed while a clear ran

    def forget(conn: Any) -> Any:
        return partitions.FORGET.call_many(conn, [([keys.queue(Q), keys.partition_ring(Q),
                                                    keys.queues], [Q])])[0]

    assert pconfig.pool("api").run(forget) == 0 and Q in r.smembers(keys.queues)
    assert Queue(Q, pconfig).clear() == 1
    assert Q not in r.smembers(keys.queues)


def test_hand_written_data_is_read_and_cleared_without_an_error(pconfig: wurk.Config,
                                                                r: redis.Redis) -> None:
    keys = pconfig.keys
    ring = keys.partition_ring(Q)
    work.set(partition="a").perform_async(1)
    r.lpush(keys.partition(Q, "a"), "not json", '["a list"]')
    r.set(keys.partition(Q, "str"), "a string, not a list")  # not ours to touch
    r.zadd(ring, {"str": 0, "a:b": 0, "<script>": 0, "gone": 0})
    queue = Queue(Q, pconfig)
    assert queue.partition_names() == ["<script>", "a", "gone", "str"]
    assert queue.size() == 3
    listed = queue.page(0, 10)
    assert [record.parse_error is not None for record in listed] == [True, True, False]
    assert queue.find_job("nope") is None and queue.delete_job("nope") is False
    assert queue.delete("not json") is True  # named no partition: looked for in each
    assert queue.clear() == 2
    assert r.get(keys.partition(Q, "str")) == "a string, not a list"
    assert r.zcard(ring) == 0 and Q not in r.smembers(keys.queues)
    r.delete(ring)
    r.set(ring, "not a zset")
    r.set(keys.queue(Q), "not a list")
    assert queue.size() == 0 and queue.page(0, 5) == [] and queue.clear() == 0
    assert r.get(keys.queue(Q)) == "not a list"


def test_the_queues_list_counts_every_partition(pconfig: wurk.Config, r: redis.Redis) -> None:
    """More partitions than the dashboard shows (1,000 read): the size still counts all."""
    keys = pconfig.keys
    pipe = r.pipeline(transaction=False)
    for n in range(1_200):
        pipe.lpush(keys.partition(Q, f"p{n}"), P.dumps({"class": "parts.api", "args": [n],
                                                        "queue": Q, "partition": f"p{n}"}))
        pipe.zadd(keys.partition_ring(Q), {f"p{n}": 0})
    pipe.sadd(keys.queues, Q)
    pipe.execute()
    assert {s.name: s.size for s in Stats(pconfig).queue_summaries()}[Q] == 1_200
    assert Queue(Q, pconfig).size() == 1_200


@pytest.mark.parametrize("number", ["7", "7.0", "-3", "9007199254740993", "1e19", "1e300",
                                    "-1e300", "2.5"])
def test_a_stored_number_partition_is_the_one_the_push_script_put_the_job_in(
        pconfig: wurk.Config, r: redis.Redis, number: str) -> None:
    """Python reads a job's partition where Lua put it, or the dashboard's delete looks in
    the wrong list: a number past 2**53 (which Lua holds only roughly) is no partition on
    either side, so the default."""
    head = json.dumps({"class": "parts.api", "args": [1], "queue": Q, "jid": "e" * 24})
    raw = f'{head[:-1]}, "partition": {number}}}'  # the number as written, not as Python's
    partitions.push(r, pconfig.keys, {Q: [raw]})
    ring = list(r.zrange(pconfig.keys.partition_ring(Q), 0, -1))
    assert ring == [partitions.partition_of(raw)]
    assert r.lrange(pconfig.keys.partition_prefix(Q) + ring[0], 0, -1) == [raw]
    assert Queue(Q, pconfig).delete_job("e" * 24) is True
