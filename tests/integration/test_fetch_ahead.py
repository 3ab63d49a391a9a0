"""Reliable fetch taking several jobs per round trip out of a backlog (``prefetch``)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

import wurk
from wurk import payload as P
from wurk.config import Capsule
from wurk.connections.lease import Lease
from wurk.errors import RedisUnavailable
from wurk.fetch.basic import UnitOfWork
from wurk.fetch.reliable import Claims, ReliableFetch
from wurk.runtime.identity import Identity


def job(n: int) -> str:
    return P.dumps({"class": "X", "args": [n], "queue": "default", "jid": f"jid{n:021d}"})


def push(r: redis.Redis, queue: str, numbers: range) -> None:
    r.lpush(f"queue:{queue}", *[job(n) for n in numbers])  # oldest at the tail, as LPUSH


def fetcher(config: wurk.Config, queues: list[str], *, concurrency: int = 10,
            paused: frozenset[str] = frozenset()) -> ReliableFetch:
    capsule = Capsule(queues=[(q, 0) for q in queues], concurrency=concurrency)
    return ReliableFetch(config, capsule, config.pool("test", size=4),
                         identity=Identity.current(), capsule_index=0, slot=0,
                         paused=lambda: paused)


def number(unit: UnitOfWork | None) -> int:
    assert unit is not None
    return int(json.loads(unit.raw)["args"][0])


def test_a_backlog_is_taken_several_jobs_per_round_trip_in_order(
    config: wurk.Config, r: redis.Redis
) -> None:
    push(r, "default", range(200))
    f = fetcher(config, ["default"])
    private = f.private_lists["default"]
    taken = [number(f.fetch(0.1)) for _ in range(8)]  # the first loads the script
    assert taken == list(range(8))  # oldest first, as one at a time would
    assert r.llen(private) == 8 and r.llen("queue:default") == 192
    before = r.info("commandstats")["cmdstat_evalsha"]["calls"]
    assert [number(f.fetch(0.1)) for _ in range(8)] == list(range(8, 16))
    assert r.info("commandstats")["cmdstat_evalsha"]["calls"] == before + 1


def test_a_processor_takes_no_more_than_its_share_of_a_short_queue(
    config: wurk.Config, r: redis.Redis
) -> None:
    push(r, "default", range(25))
    f = fetcher(config, ["default"], concurrency=10)
    f.fetch(0.1)
    assert r.llen(f.private_lists["default"]) == 2  # 25 jobs / 10 processors
    r.delete("queue:default", f.private_lists["default"])
    push(r, "default", range(5))
    g = fetcher(config, ["default"], concurrency=10)
    g.fetch(0.1)
    assert r.llen(g.private_lists["default"]) == 1  # fewer jobs than processors: one each


def test_prefetch_one_fetches_one_job_at_a_time(config: wurk.Config, r: redis.Redis) -> None:
    one = wurk.Config(redis_url=config.redis_url, prefetch=1)
    push(r, "default", range(200))
    f = fetcher(one, ["default"])
    assert number(f.fetch(0.1)) == 0
    assert r.llen(f.private_lists["default"]) == 1
    one.close()


def test_the_ack_of_a_job_with_others_waiting_reaches_redis_at_once(
    config: wurk.Config, r: redis.Redis
) -> None:
    """No round trip is due while jobs fetched ahead wait: the ACK is written right away
    (the kernel may hold it for the connection's next write, never more than one: the
    second goes out at once and takes it along), so a finished job does not wait for it."""
    push(r, "default", range(100))
    f = fetcher(config, ["default"])
    private = f.private_lists["default"]
    first = f.fetch(0.1)
    assert first is not None and r.llen(private) == 8
    first.jid = json.loads(first.raw)["jid"]
    first.acknowledge()
    # Written, not awaited: another connection's read may reach Redis a moment before it.
    assert settles(lambda: r.llen(private) == 7), r.llen(private)
    assert job(0) not in r.lrange(private, 0, -1)
    for _ in range(7):  # the rest, from the buffer, no round trip
        unit = f.fetch(0.1)
        assert unit is not None
        unit.jid = json.loads(unit.raw)["jid"]
        unit.acknowledge()
    # The six ACKs were written, not awaited (as above); the last one's rides the next round
    # trip, so the list settles at one and stays there.
    assert settles(lambda: r.llen(private) == 1), r.llen(private)
    time.sleep(0.05)
    assert r.llen(private) == 1
    assert number(f.fetch(0.1)) == 8
    assert r.llen(private) == 8  # 0–7 acknowledged, 8–15 taken
    f.flush()  # stops while running 8: 9–15 go back, 8 stays held
    assert r.lrange(private, 0, -1) == [job(8)] and r.llen("queue:default") == 91
    assert r.lindex("queue:default", -1) == job(9)  # given back first in line


def test_stopping_gives_back_the_jobs_fetched_ahead(config: wurk.Config, r: redis.Redis) -> None:
    push(r, "default", range(100))
    f = fetcher(config, ["default"])
    running = f.fetch(0.1)
    assert running is not None
    f.flush()  # the processor stops while running job 0: 1–7 go back, 0 stays held
    assert r.lrange(f.private_lists["default"], 0, -1) == [job(0)]
    assert r.lrange("queue:default", -7, -1) == [job(n) for n in range(7, 0, -1)]  # 1 next
    assert r.llen("queue:default") == 99


def test_jobs_fetched_ahead_from_a_queue_paused_since_go_back(
    config: wurk.Config, r: redis.Redis
) -> None:
    push(r, "a", range(100))
    paused: set[str] = set()
    capsule = Capsule(queues=[("a", 0), ("b", 0)], concurrency=10)
    f = ReliableFetch(config, capsule, config.pool("test", size=4), identity=Identity.current(),
                      capsule_index=0, slot=0, paused=lambda: frozenset(paused))
    first = f.fetch(0.1)
    assert first is not None
    first.acknowledge()
    paused.add("a")
    push(r, "b", range(1000, 1001))
    unit = f.fetch(0.1)
    assert unit is not None and unit.queue == "b"
    assert r.llen("queue:a") == 99  # 1–7 went back, 0 acknowledged
    assert r.lindex("queue:a", -1) == job(1)


def test_requeue_never_pushes_a_job_twice(config: wurk.Config, r: redis.Redis) -> None:
    push(r, "default", range(100))
    f = fetcher(config, ["default"])
    unit = f.fetch(0.1)
    assert unit is not None
    f.requeue([unit])
    again = UnitOfWork("default", unit.raw, f)
    f.requeue([again])  # already back (say, by the reaper): not pushed a second time
    assert r.lrange("queue:default", 0, -1).count(job(0)) == 1


def test_lease_reads_replies_of_written_commands_first(config: wurk.Config) -> None:
    lease = Lease(config.pool("test", size=2))
    lease.send([("SET", "k", "1"), ("INCR", "k")])
    with pytest.raises(RuntimeError, match="unread"):
        lease.call("GET", "k")
    assert lease.pipeline([("GET", "k")]) == [b"OK", 2, b"2"]
    lease.send([("INCR", "k")])
    lease.release()  # a reply still on the wire: the connection is not reused
    assert Lease(config.pool("test", size=2)).call("GET", "k") == b"3"


def test_a_job_recovered_before_is_taken_alone(config: wurk.Config, r: redis.Redis) -> None:
    """It may be the poison pill: jobs taken with it would share its recovery count."""
    push(r, "default", range(100))
    r.set(config.keys.poison_counter(f"jid{3:021d}"), 1)  # job 3 came back once already
    f = fetcher(config, ["default"])
    private = f.private_lists["default"]
    assert number(f.fetch(0.1)) == 0
    assert r.llen(private) == 3  # 0, 1, 2: the batch stops before job 3
    for expected in (1, 2):
        assert number(f.fetch(0.1)) == expected
    assert number(f.fetch(0.1)) == 3
    assert r.lrange(private, 0, -1) == [job(3), job(2), job(1), job(0)]  # 3 taken alone
    assert number(f.fetch(0.1)) == 4
    assert r.llen(private) == 12  # then batches again: 4–11
    assert r.lrange("queue:default", -1, -1) == [job(12)]  # the order of the rest kept


def test_only_the_ack_of_a_job_recovered_before_resets_its_poison_counter(
    config: wurk.Config, r: redis.Redis
) -> None:
    """The fetch says which job had a counter; the others' ACK is one LREM, no DEL."""
    push(r, "default", range(40))
    r.set(config.keys.poison_counter(f"jid{0:021d}"), 1)
    f = fetcher(config, ["default"], concurrency=1)
    recovered = f.fetch(0.1)
    assert number(recovered) == 0 and recovered is not None and recovered.counted
    fresh = f.fetch(0.1)
    assert number(fresh) == 1 and fresh is not None and not fresh.counted
    for unit in (recovered, fresh):
        unit.jid = json.loads(unit.raw)["jid"]
    dels = r.info("commandstats").get("cmdstat_del", {"calls": 0})["calls"]
    recovered.acknowledge()
    # Jobs fetched ahead wait, so the ACK is written, not awaited: another connection's read
    # may reach Redis a moment before it.
    assert settles(lambda: not r.exists(config.keys.poison_counter(f"jid{0:021d}")))
    assert r.info("commandstats")["cmdstat_del"]["calls"] == dels + 1
    fresh.acknowledge()
    f.flush()
    assert r.info("commandstats")["cmdstat_del"]["calls"] == dels + 1  # no DEL for it
    assert job(1).encode() not in r.lrange(f.private_lists["default"], 0, -1)


def settles(check: Callable[[], bool], within: float = 2.0) -> bool:
    """True once ``check`` holds, looking again until ``within`` seconds have passed."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _lane(config: wurk.Config) -> tuple[Any, Any]:
    from wurk.asyncjobs import AsyncLane, EventLoop

    loop = EventLoop()
    capsule = Capsule(queues=[("default", 0)], concurrency=10)
    return AsyncLane(config, capsule, loop, config.pool("acks", size=2)), loop


def _ended(lane: Any, unit: UnitOfWork) -> None:
    """An async job handed to ``lane`` ended well: what its task does last."""
    unit.fetcher.hand_off(unit)
    with lane._lock:
        lane._start_acker()  # as its start did
        lane._unacked += 1
    lane._done.put(unit)


def test_async_acks_of_several_processors_share_one_round_trip(
    config: wurk.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The acknowledging thread writes the ACKs of the async jobs ending within
    ``ACK_GATHER`` of each other in one round trip, whichever processor fetched them; each
    job stays held (not a stray for the reaper) until its LREM is through, and ``wait_idle``
    waits for them, so a stop never leaves a finished job behind."""
    push(r, "default", range(100))
    lane, loop = _lane(config)
    trips: list[int] = []
    real = lane._lease.pipeline
    monkeypatch.setattr(lane._lease, "pipeline", lambda commands: (trips.append(len(commands)),
                                                                   real(commands))[1])
    claims = Claims()
    processors = []
    for slot in range(5):
        f = ReliableFetch(config, Capsule(queues=[("default", 0)], concurrency=10),
                          config.pool("test", size=8), identity=Identity.current(),
                          capsule_index=0, slot=slot, claims=claims)
        unit = f.fetch(0.1)
        assert unit is not None
        unit.jid = json.loads(unit.raw)["jid"]
        processors.append((f, unit))
    private = processors[0][0].private_lists["default"]
    taken = r.llen(private)
    assert taken > 5 * 5  # each took several (its share of what was left)
    for _, unit in processors:
        _ended(lane, unit)  # five async jobs ending at once
    assert sum(claims.held(private).values()) > taken - 5  # held until through: not strays
    assert lane.wait_idle(time.monotonic() + 10)
    assert r.llen(private) == taken - 5 and sum(claims.held(private).values()) == taken - 5
    assert 5 <= sum(trips) <= 10 and len(trips) <= 2, trips  # an LREM (+ DEL) each, batched
    lane.close()
    loop.close()
    for f, _ in processors:
        f.flush()


def test_an_unexpected_error_in_the_ack_thread_is_reported_and_tried_again(
    config: wurk.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The acknowledging thread outlives a fault of its own: the ACK is kept, reported, and
    goes through on the next try, so the job never sits held in the private list."""
    push(r, "default", range(100))
    lane, loop = _lane(config)
    real = lane._lease.pipeline
    failures = [RuntimeError("a bug")]

    def once_broken(commands: list[Any]) -> list[Any]:
        if failures:
            raise failures.pop()
        return real(commands)

    monkeypatch.setattr(lane._lease, "pipeline", once_broken)
    f = fetcher(config, ["default"])
    private = f.private_lists["default"]
    first = f.fetch(0.1)
    assert first is not None
    _ended(lane, first)
    assert lane.wait_idle(time.monotonic() + 15)
    assert not failures and job(0) not in r.lrange(private, 0, -1)
    lane.close()
    loop.close()
    f.flush()


def test_acks_written_when_the_connection_is_cut_are_sent_again(
    config: wurk.Config, r: redis.Redis
) -> None:
    """ACKs written while jobs fetched ahead wait — the kernel may still hold the last — and
    lost with a connection cut before the next round trip are sent again with the one after:
    no finished job stays in the private list to run again."""
    push(r, "default", range(100))
    f = fetcher(config, ["default"])
    private = f.private_lists["default"]
    done: list[UnitOfWork] = []
    for _ in range(8):  # 0 fetched, 1–7 from the buffer, each ACK written as it ends
        unit = f.fetch(0.1)
        assert unit is not None
        if not done:
            connection_id = f.lease.call("CLIENT", "ID")
        unit.jid = json.loads(unit.raw)["jid"]
        unit.acknowledge()
        done.append(unit)
    r.client_kill_filter(_id=connection_id)
    with pytest.raises(RedisUnavailable):
        f.fetch(0.1)  # the round trip that finds the connection gone
    assert number(f.fetch(0.1)) == 8  # a fresh connection: the ACKs go first
    left = r.lrange(private, 0, -1)
    assert not {d.raw.decode() for d in done} & set(left), "an ACK was lost"
    assert r.llen("queue:default") + len(left) == 92  # 0–7 done, nothing else gone


def test_a_queue_key_of_another_type_keeps_the_jobs_given_back_in_flight(
    config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Giving jobs back took each out of the in-flight list (LREM), then pushed it to its
    queue (RPUSH): a queue key written by hand as another type failed the push after the
    removal, and a script's earlier writes stay, so the job was in neither place. The job
    now stays in flight, for the reaper to return once the key is mended, with a warning
    naming the key."""
    push(r, "default", range(100))
    f = fetcher(config, ["default"])
    running = f.fetch(0.1)
    assert running is not None
    private = f.private_lists["default"]
    assert r.llen(private) == 8  # 0 running, 1–7 fetched ahead
    r.delete("queue:default")
    r.set("queue:default", "written by hand")
    with caplog.at_level(logging.WARNING, logger="wurk"):
        f.flush()  # 1–7 cannot go back
    assert sorted(r.lrange(private, 0, -1)) == sorted(job(n) for n in range(8))
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert any("queue:default" in message and private in message for message in warned), warned
    assert r.get("queue:default") == "written by hand"


class _QuietDuringFetch(ReliableFetch):
    """A fetcher whose fetch returns as quiet comes: the job it hands out is fetched after
    quiet (``stop`` runs between the round trip and the processor's look at its flag)."""

    stop: Callable[[], None] = staticmethod(lambda: None)

    def fetch(self, timeout: float) -> UnitOfWork | None:
        unit = super().fetch(timeout)
        self.stop()
        return unit


def _processor_fetching_at_quiet(config: wurk.Config, f: _QuietDuringFetch,
                                 on_quiet: Callable[[], None] = lambda: None) -> list[Any]:
    from wurk.metrics.counters import Counters
    from wurk.processor import JobRunner, Processor
    from wurk.runtime.busy import Busy

    exits: list[Any] = []
    processor = Processor(name="p", fetcher=f, fetch_timeout=0.1,
                          runner=JobRunner(config, counters=Counters(), busy=Busy()),
                          on_exit=lambda _p, error: exits.append(error))

    def stop() -> None:
        processor.stop_fetching()
        on_quiet()

    f.stop = stop
    processor.start()
    processor.thread.join(10)
    assert not processor.thread.is_alive()
    return exits


def test_a_job_fetched_after_quiet_goes_back_first_in_line(
    config: wurk.Config, r: redis.Redis
) -> None:
    """docs/worker.md, docs/reliability.md: back untouched, first in line — ahead of the
    jobs fetched with it (pushed back alone first, it ended behind them: 1–7, 0, 8)."""
    push(r, "default", range(100))
    capsule = Capsule(queues=[("default", 0)], concurrency=10)
    f = _QuietDuringFetch(config, capsule, config.pool("test", size=4),
                          identity=Identity.current(), capsule_index=0, slot=0)
    assert _processor_fetching_at_quiet(config, f) == [None]
    assert r.llen(f.private_lists["default"]) == 0
    assert r.lrange("queue:default", -9, -1) == [job(n) for n in range(8, -1, -1)]  # 0 next


def test_a_job_fetched_after_quiet_that_cannot_go_back_is_not_counted_as_a_poison_pill(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis gone at quiet: the job, which never ran, stays in the private list for the
    reaper, uncounted — not let go of as abandoned (a processor it took down)."""
    from tests.helpers.proxy import FaultProxy

    push(r, "default", range(100))
    port = r.connection_pool.connection_kwargs["port"]
    with FaultProxy(port) as proxy:
        monkeypatch.setenv("REDIS_URL", proxy.url)  # REDIS_URL wins over the setting
        via = wurk.Config()
        capsule = Capsule(queues=[("default", 0)], concurrency=10)
        f = _QuietDuringFetch(via, capsule, via.pool("test", size=4),
                              identity=Identity.current(), capsule_index=0, slot=0)

        def redis_gone() -> None:
            proxy.drop()
            proxy.cut()

        _processor_fetching_at_quiet(via, f, redis_gone)
        private = f.private_lists["default"]
        assert r.llen(private) == 8  # nothing went back: the reaper returns them
        for n in range(8):
            assert not f.claims.abandoned(private, job(n).encode()), n
            assert not f.claims.held(private)
        via.close()


def test_acks_written_before_a_protocol_error_are_kept_and_settled_after_it(
    config: wurk.Config, r: redis.Redis
) -> None:
    """A reply that is no RESP (a protocol error, not a connection error) on the round trip
    that reads the written ACKs' replies: the connection is dropped with them unread, so each
    ACK is kept to send again — none settled with another's reply, none held for ever."""
    push(r, "default", range(100))
    f = fetcher(config, ["default"])
    private = f.private_lists["default"]
    for _ in range(8):  # 0 fetched, 1–7 from the buffer; 0–6's ACKs written, 7's pending
        unit = f.fetch(0.1)
        assert unit is not None
        unit.acknowledge()
    wire = f.lease._wire
    assert wire is not None
    wire._reader.feed(b"?not a reply\r\n")  # what the next read meets before the replies
    with pytest.raises(redis.exceptions.InvalidResponse):
        f.fetch(0.1)
    # A fresh connection: the ACKs again, then the fetch. The lost round trip's fetch ran:
    # 8–15 are in the private list, held by nobody, for the reaper to give back.
    assert number(f.fetch(0.1)) == 16
    assert r.lrange(private, 0, -1) == [job(n) for n in range(23, 7, -1)]  # 0–7 acknowledged
    assert f.claims.held(private) == {job(n).encode(): 1 for n in range(16, 24)}
    running = f._out
    assert running is not None
    running.acknowledge()  # written at once: 9–15 wait
    wire = f.lease._wire
    assert wire is not None
    wire._reader.feed(b"?not a reply\r\n")
    f.flush()  # reported, not raised: 17–23 went back, 16's ACK is kept, then let go of
    assert not f.claims.held(private)
    assert r.lrange(private, 0, -1) == [job(n) for n in range(15, 7, -1)]  # the strays
