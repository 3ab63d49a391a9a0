"""wurk.api.Queue against the real server, including paging while jobs come and go."""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.faults import config_for
from tests.helpers.proxy import FaultProxy
from tests.helpers.server import Server
from wurk.api import JobRecord, Queue, paging
from wurk.errors import RedisUnavailable


def job(n: int, **extra: Any) -> str:
    return json.dumps({"class": "Q", "args": [n], "jid": f"{n:024d}", "queue": "default",
                       **extra}, separators=(",", ":"))


def seed(r: redis.Redis, count: int, queue: str = "default") -> list[str]:
    """``count`` jobs pushed oldest first, as producers push them; returns them newest first."""
    entries = [job(n) for n in range(count)]
    pipe = r.pipeline(transaction=False)
    for start in range(0, count, 1000):
        pipe.lpush(f"queue:{queue}", *entries[start:start + 1000])
    pipe.sadd("queues", queue)
    pipe.execute()
    return entries[::-1]


def test_all_lists_known_queues_sorted(config: wurk.Config, r: redis.Redis) -> None:
    r.sadd("queues", "low", "critical", "default")
    assert [q.name for q in Queue.all()] == ["critical", "default", "low"]
    assert Queue.all(config)[0].config is config


def test_size_latency_paused(config: wurk.Config, r: redis.Redis) -> None:
    queue = Queue("default", config)
    assert (queue.size(), queue.latency(), queue.paused()) == (0, 0.0, False)
    now = time.time()
    r.lpush("queue:default", job(1, enqueued_at=int((now - 30) * 1000)))  # Sidekiq 8: ms
    r.lpush("queue:default", job(2, enqueued_at=now - 5))                # newer, at the head
    assert queue.size() == 2
    assert queue.latency() == pytest.approx(30, abs=1)  # the oldest job is at the tail
    r.rpush("queue:default", job(3, created_at=now - 60.0))  # no enqueued_at: created_at
    assert queue.latency() == pytest.approx(60, abs=1)
    r.rpush("queue:default", "{not json")
    assert queue.latency() == 0.0


def test_pause_and_unpause_write_the_paused_set(config: wurk.Config, r: redis.Redis) -> None:
    queue = Queue("mail", config)
    queue.pause()
    queue.pause()
    assert r.smembers("paused") == {"mail"} and queue.paused()
    queue.unpause()
    assert r.smembers("paused") == set() and not queue.paused()


def test_iterate_newest_first_and_find_and_delete(config: wurk.Config, r: redis.Redis) -> None:
    entries = seed(r, 130)
    records = list(Queue("default", config).iterate(page_size=7))
    assert [rec.text for rec in records] == entries
    assert all(rec.queue == "default" for rec in records)
    found = Queue("default", config).find_job(f"{17:024d}")
    assert found is not None and found.args == [17]
    assert Queue("default", config).find_job("nope") is None
    assert Queue("default", config).find_job("") is None
    assert found.delete() is True and found.delete() is False
    assert Queue("default", config).delete(records[0]) is True
    assert Queue("default", config).delete(records[1].raw) is True
    assert r.llen("queue:default") == 127


def test_delete_matches_the_stored_bytes_not_a_reserialisation(config: wurk.Config,
                                                              r: redis.Redis) -> None:
    stored = '{"args":[1.0, 2],"class":"Ruby","jid":"j"}'  # a form wurk would never write
    r.lpush("queue:default", stored)
    (record,) = Queue("default", config).iterate()
    assert record.delete() is True and r.llen("queue:default") == 0


def test_clear_removes_list_and_name(config: wurk.Config, r: redis.Redis) -> None:
    seed(r, 12)
    r.sadd("queues", "other")
    assert Queue("default", config).clear() == 12
    assert r.exists("queue:default") == 0 and r.smembers("queues") == {"other"}
    assert Queue("default", config).clear() == 0


@pytest.mark.parametrize("name", ["", "a|b"])
def test_bad_names_are_refused(config: wurk.Config, name: str) -> None:
    with pytest.raises(ValueError, match="queue name"):
        Queue(name, config)


def test_bad_page_size_is_refused(config: wurk.Config) -> None:
    with pytest.raises(ValueError, match="page_size"):
        next(Queue("default", config).iterate(page_size=0))


def test_paging_with_changes_between_pages(config: wurk.Config, r: redis.Redis) -> None:
    """Pushes at the head (more than a page, forcing a search), pops at the tail, and removal
    of the last entry read (the anchor) and of entries not yet read, between pages."""
    entries = seed(r, 25_000)
    removed: set[str] = set()
    seen: list[str] = []
    extra = 0
    for index, record in enumerate(Queue("default", config).iterate(page_size=50)):
        seen.append(record.text)
        if index % 50 != 49:
            continue
        page = index // 50
        extra += 1 + (120 if page % 7 == 0 else 0)
        r.lpush("queue:default", *[job(100_000 + extra * 1000 + k) for k in range(
            1 + (120 if page % 7 == 0 else 0))])
        popped = r.rpop("queue:default", 3)
        removed.update(popped or [])
        if page % 5 == 0:
            r.lrem("queue:default", 1, record.text)  # the anchor itself
            removed.add(record.text)
        if page % 3 == 0:
            victim = entries[index + 400] if index + 400 < len(entries) else None
            if victim is not None and r.lrem("queue:default", 1, victim):
                removed.add(victim)
    assert len(seen) == len(set(seen)), "an entry was yielded twice"
    stable = [e for e in entries if e not in removed]
    missing = set(stable) - set(seen)
    assert not missing, f"{len(missing)} entries present throughout were not yielded"


def test_paging_while_a_producer_and_a_consumer_run(config: wurk.Config,
                                                    r: redis.Redis) -> None:
    entries = seed(r, 5_000)
    stop = threading.Event()
    popped: list[str] = []

    def churn() -> None:
        other = redis.Redis.from_url(config.redis_url or "", decode_responses=True)
        n = 0
        while not stop.is_set():
            other.lpush("queue:default", job(900_000 + n))
            n += 1
            if n % 2 == 0:
                popped.extend(other.rpop("queue:default", 1) or [])
        other.close()

    thread = threading.Thread(target=churn, name="test-churn")
    thread.start()
    try:
        seen = [rec.text for rec in Queue("default", config).iterate(page_size=50)]
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert len(seen) == len(set(seen))
    assert set(entries) - set(popped) - set(seen) == set()
    assert len(popped) > 0


def test_iteration_ends_when_consumers_pass_the_last_page(config: wurk.Config,
                                                          r: redis.Redis) -> None:
    seed(r, 200)
    records = Queue("default", config).iterate(page_size=50)
    first = [next(records) for _ in range(50)]
    r.ltrim("queue:default", 0, 9)  # everything from the 11th newest on was consumed
    rest = list(records)
    assert len(first) == 50 and rest == []


def test_iteration_ends_when_the_whole_page_was_consumed(config: wurk.Config,
                                                         r: redis.Redis) -> None:
    seed(r, 100)
    records = Queue("default", config).iterate(page_size=10)
    assert len([next(records) for _ in range(10)]) == 10
    r.lpush("queue:default", *[job(1000 + n) for n in range(5)])
    r.ltrim("queue:default", 0, 4)  # only jobs pushed after the walk began are left
    assert list(records) == []


def test_a_push_of_exactly_one_page_between_pages(config: wurk.Config, r: redis.Redis) -> None:
    entries = seed(r, 30)
    records = Queue("default", config).iterate(page_size=5)
    seen = [next(records).text for _ in range(5)]
    r.lpush("queue:default", *[job(1000 + n) for n in range(5)])  # the anchor ends a window
    seen += [record.text for record in records]
    assert seen == entries


@pytest.mark.parametrize("size", [100, 149, 151, 175])
@pytest.mark.parametrize("pushes", [1, 2, 3])
def test_a_consumer_popping_the_tail_between_every_read(
        config: wurk.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch,
        size: int, pushes: int) -> None:
    # Before each read of the walk, producers push and a consumer pops the oldest job: at the
    # end of the walk the entry it stopped at is the next to be popped, every time it is found
    # again. Found and read on in two round trips, it was gone at each read and the walk gave
    # up ("changed faster than it could be paged"), as it did once in CI with a real consumer.
    entries = seed(r, size)
    popped: list[str] = []
    read = paging._lrange
    counter = itertools.count(900_000)

    def churn_then_read(pool: Any, key: str, start: int, count: int) -> list[bytes]:
        r.lpush("queue:default", *[job(next(counter)) for _ in range(pushes)])
        popped.extend(r.rpop("queue:default", 1) or [])
        return read(pool, key, start, count)

    monkeypatch.setattr(paging, "_lrange", churn_then_read)
    seen = [rec.text for rec in Queue("default", config).iterate(page_size=50)]
    assert len(seen) == len(set(seen))
    assert set(entries) - set(popped) - set(seen) == set()
    assert popped and seen


@pytest.mark.parametrize("overwrite", ["hash", "deleted"])
def test_a_queue_key_written_over_during_a_walk_ends_it(
        config: wurk.Config, r: redis.Redis, overwrite: str) -> None:
    seed(r, 120)
    records = Queue("default", config).iterate(page_size=50)
    first = [next(records) for _ in range(50)]
    r.delete("queue:default")
    if overwrite == "hash":
        r.hset("queue:default", "field", "value")  # by hand, or by an attacker
    assert list(records) == [] and len(first) == 50


def test_queues_compare_by_name_and_configuration(config: wurk.Config) -> None:
    assert Queue("a", config) == Queue("a", config) != Queue("b", config)
    assert len({Queue("a", config), Queue("a", config)}) == 1
    assert Queue("a", config) != "a" and repr(Queue("a", config)) == "<Queue 'a'>"


def test_unreachable_redis_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL")  # the environment would win over the URL given here
    config = wurk.Config(redis_url="redis://127.0.0.1:1/0", socket_timeout=0.5)
    try:
        with pytest.raises(RedisUnavailable, match=re.escape("127.0.0.1:1")):
            Queue("default", config).size()
        with pytest.raises(RedisUnavailable):
            Queue("default", config).clear()
    finally:
        config.close()


def test_records_keep_their_queue_for_delete(config: wurk.Config, r: redis.Redis) -> None:
    r.lpush("queue:low", job(1))  # the payload names "default", the list is "low"
    (record,) = Queue("low", config).iterate()
    assert isinstance(record, JobRecord) and record.queue == "low"
    assert record.delete() and r.llen("queue:low") == 0


def test_a_read_is_replayed_once_after_a_broken_connection(
        redis_server: Server, r: redis.Redis) -> None:
    """inspection.md: "Reads are replayed once after a broken connection". The connection
    breaks after the LLEN reached Redis and before its reply came back (an idle connection
    killed between calls would not do: the pool finds it closed at checkout and connects
    anew before sending anything): the call answers, from a second LLEN on a new
    connection."""
    r.lpush("queue:default", '{"class": "X", "args": [], "jid": "a"}')
    with FaultProxy(redis_server.port) as proxy:
        config = config_for(proxy.url)
        try:
            queue = Queue("default", config)
            assert queue.size() == 1  # a connection to the proxy, open
            proxy.latency(0.3)  # each way: the reply waits 0.3 s in the proxy
            r.config_resetstat()
            outcome: list[object] = []
            reading = threading.Thread(target=lambda: outcome.append(queue.size()))
            reading.start()
            deadline = time.monotonic() + 10
            while not _calls(r, "llen"):  # reached Redis; its reply still in the proxy
                assert time.monotonic() < deadline, "the LLEN never reached Redis"
                time.sleep(0.01)
            assert proxy.cut() >= 1
            reading.join(10)
            assert outcome == [1]  # answered, not raised
            assert _calls(r, "llen") == 2  # the replay, once
        finally:
            config.close()


def _calls(r: redis.Redis, command: str) -> int:
    stats: dict[str, Any] = r.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


def test_deleting_each_job_as_it_is_yielded_reads_the_whole_queue(config: wurk.Config,
                                                                   r: redis.Redis) -> None:
    """Sidekiq's ``queue.each { |job| job.delete if … }``: deleting every job of a page while
    iterating ended the walk after that page (the page was gone, which read as consumers
    having popped past it), so the jobs after it were neither seen nor deleted."""
    entries = seed(r, 95)
    seen = []
    for record in Queue("default", config).iterate(page_size=10):
        seen.append(record.text)
        if record.args[0] % 3:  # pages of deleted jobs among pages with jobs kept
            assert record.delete()
    assert seen == entries
    kept = [entry for entry in entries if not json.loads(entry)["args"][0] % 3]
    assert r.lrange("queue:default", 0, -1) == kept
    for record in Queue("default", config).iterate(page_size=7):
        assert record.delete()
    assert r.llen("queue:default") == 0
