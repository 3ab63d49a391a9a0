"""The pieces that keep jobs through faults, one at a time against the real server: strays
returned, held jobs left alone, refused ACKs kept, failures that cannot be booked, the
scheduler's put-back, the boot checks, and a paused basic fetch that does not spin."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import wurk
from tests.chaos import jobs
from tests.helpers.faults import InProcessWorker, all_ran, config_for, use_ledger, wait_until
from tests.helpers.proxy import FaultProxy
from tests.helpers.server import Server, free_port, start_server
from wurk import payload as P
from wurk.config import Capsule
from wurk.connections.pool import RedisPool
from wurk.connections.preflight import check_server, eviction_policy, require_version
from wurk.fetch.basic import BasicFetch, UnitOfWork
from wurk.fetch.reaper import STRAY_MARGIN, Reaper
from wurk.fetch.reliable import Claims, ReliableFetch
from wurk.metrics.counters import Counters
from wurk.middleware import Chain
from wurk.morgue import Morgue
from wurk.processor import JobRunner
from wurk.retry import JobRetry
from wurk.runtime.busy import Busy
from wurk.runtime.clock import ManualClock
from wurk.runtime.identity import Identity
from wurk.scheduled import Scheduler

SOCKET_TIMEOUT = 0.5
GRACE = SOCKET_TIMEOUT + STRAY_MARGIN


def job(n: int, **fields: Any) -> bytes:
    return P.dumps({"class": "Chaos::Mark", "args": [0], "queue": "default",
                    "jid": f"jid{n:021d}", **fields}).encode()


class Rig:
    """One processor's fetcher and this process's reaper, sharing their claims."""

    def __init__(self, url: str, socket_timeout: float = SOCKET_TIMEOUT) -> None:
        self.config = config_for(url, socket_timeout=socket_timeout)
        self.me = Identity.current()
        self.claims = Claims()
        self.fetcher = ReliableFetch(self.config, Capsule(), self.config.pool("t", size=2),
                                     identity=self.me, capsule_index=0, slot=0,
                                     claims=self.claims)
        self.private = self.fetcher.private_lists["default"]
        self.clock = ManualClock()  # the reaper's: strays age only when the test says
        self.reaper = Reaper(self.config, self.me, ["default"], claims=self.claims,
                             own_lists=[(self.private, "default")],
                             pool=RedisPool(url, socket_timeout=5), clock=self.clock)

    def strays_after_grace(self) -> int:
        """Strays returned by a look now and one a whole grace later (none in between)."""
        first = self.reaper.return_strays()
        self.clock.advance(GRACE - 0.001)
        assert self.reaper.return_strays() == 0, "a stray went back within the grace"
        self.clock.advance(0.001)
        return first + self.reaper.return_strays()


@pytest.fixture
def rig(redis_server: Server) -> Iterator[Rig]:
    made = Rig(redis_server.url)
    yield made
    made.config.close()


# -- strays -----------------------------------------------------------------------------------
def test_a_move_whose_reply_a_cut_lost_goes_back_uncounted(
    redis_server: Server, r: redis.Redis
) -> None:
    with FaultProxy(redis_server.port) as proxy:
        rig = Rig(proxy.url)
        rig.reaper.pool = RedisPool(redis_server.url)
        assert rig.fetcher.fetch(0.05) is None  # connected through the proxy
        r.lpush("queue:default", job(1))
        proxy.latency(0.3)  # the move is forwarded after 0.3 s, its reply 0.3 s after that…
        failures: list[BaseException] = []

        def fetch() -> None:
            try:
                rig.fetcher.fetch(0.1)
            except wurk.RedisUnavailable as exc:
                failures.append(exc)

        fetching = threading.Thread(target=fetch)
        fetching.start()
        wait_until(lambda: r.llen(rig.private) == 1, 10, "the move to reach Redis")
        proxy.cut()  # …and is lost on its way
        fetching.join(timeout=5)
        assert failures and r.lrange(rig.private, 0, -1) == [job(1).decode()]
        assert rig.strays_after_grace() == 1  # first seen, then a whole grace later
        assert r.lrange("queue:default", 0, -1) == [job(1).decode()] and not r.exists(
            rig.private)
        assert not r.exists("super_fetch:recovered:jid000000000000000000001")
        rig.config.close()


def test_a_held_job_is_never_a_stray_however_long_it_runs(rig: Rig, r: redis.Redis) -> None:
    r.lpush("queue:default", job(1))
    unit = rig.fetcher.fetch(0.1)
    assert unit is not None
    assert rig.strays_after_grace() == 0
    assert r.llen(rig.private) == 1
    unit.acknowledge()
    rig.fetcher.flush_acks()
    assert not r.exists(rig.private)


def test_an_abandoned_job_goes_back_and_three_abandonments_make_a_poison_pill(
    rig: Rig, r: redis.Redis, config: wurk.Config
) -> None:
    deaths: list[str] = []
    rig.config.death_handlers.append(lambda job, exc: deaths.append(type(exc).__name__))
    r.lpush("queue:default", job(1))
    for attempt in range(1, 4):
        unit = rig.fetcher.fetch(0.1)
        assert unit is not None and unit.raw == job(1)
        assert rig.fetcher.fetch(0.05) is None  # never acknowledged: let go of
        returned = rig.strays_after_grace()
        if attempt < 3:
            assert returned == 1 and r.lrange("queue:default", 0, -1) == [job(1).decode()]
            assert r.get("super_fetch:recovered:jid000000000000000000001") == str(attempt)
    assert r.llen("queue:default") == 0 and not r.exists(rig.private)
    dead = [json.loads(entry) for entry in r.zrange("dead", 0, -1)]
    assert [d["error_class"] for d in dead] == ["wurk.Poisoned"] and deaths == ["Poisoned"]


def test_an_abandoned_stray_is_counted_in_a_poison_counter_of_72_hours(
    rig: Rig, r: redis.Redis
) -> None:
    """docs/guarantees.md, Redis keys: "Strays are returned with `scripts/return_stray.lua`,
    which counts abandoned jobs in the poison counter `super_fetch:recovered:<jid>` (72 h
    TTL) like the reaper does." """
    r.lpush("queue:default", job(1))
    assert rig.fetcher.fetch(0.1) is not None
    assert rig.fetcher.fetch(0.05) is None  # never acknowledged: let go of
    assert rig.strays_after_grace() == 1
    counter = "super_fetch:recovered:jid000000000000000000001"
    assert r.get(counter) == "1"
    assert 72 * 3600 - 60 < r.ttl(counter) <= 72 * 3600


def test_a_processor_that_stops_lets_go_of_what_it_still_holds(rig: Rig, r: redis.Redis) -> None:
    r.lpush("queue:default", job(1))
    assert rig.fetcher.fetch(0.1) is not None
    rig.fetcher.flush()  # its thread died mid-job
    assert rig.strays_after_grace() == 1
    assert r.lrange("queue:default", 0, -1) == [job(1).decode()]


# -- ACKs refused for now ---------------------------------------------------------------------
@pytest.fixture
def private_server(tmp_path: Path) -> Iterator[Server]:
    server = start_server(tmp_path / "private")
    yield server
    server.stop()


def test_at_maxmemory_pushes_are_refused_and_acks_still_go_through(
    private_server: Server,
) -> None:
    """docs/guarantees.md, Riding out Redis faults: "`OOM` (at `maxmemory`) | as an outage:
    writes are refused, ACKs still go through" — a push meets `OOM` as
    `wurk.RedisUnavailable`, and the ACK of a job that ran (written at once while another
    job taken ahead waits) still takes it out of the in-flight list."""
    admin = redis.Redis(port=private_server.port, decode_responses=True)
    rig = Rig(private_server.url)
    try:
        admin.lpush("queue:default", job(2), job(1))
        first = rig.fetcher.fetch(0.1)
        assert first is not None and admin.llen(rig.private) >= 1
        held = admin.llen(rig.private)
        admin.config_set("maxmemory", 1)  # every write that may grow memory is refused now
        with pytest.raises(wurk.RedisUnavailable, match="OOM"):
            wurk.push({"class": "Faults::OomPush", "args": []}, config=rig.config)
        first.acknowledge()
        rig.fetcher.flush_acks()
        wait_until(lambda: admin.llen(rig.private) == held - 1, 10, "the ACK to land")
        assert job(1).decode() not in admin.lrange(rig.private, 0, -1)
    finally:
        admin.config_set("maxmemory", 0)
        rig.config.close()


# -- a failover reply --------------------------------------------------------------------------
def test_a_failover_reply_retires_only_the_connection_that_read_it(
    private_server: Server, tmp_path: Path
) -> None:
    """After a failover, the connection that reads ``READONLY`` is retired and the block runs
    once more on a fresh connection (through the proxy: the new master); a connection
    another thread holds mid-command is not cut under it, and finds out on its own reply."""
    replica = start_server(tmp_path / "replica")
    proxy = FaultProxy(replica.port).start()
    pool = RedisPool(proxy.url, size=4, socket_timeout=5)
    try:
        redis.Redis(port=replica.port).replicaof("127.0.0.1", private_server.port)
        outcome: dict[str, Any] = {}
        blocking = threading.Event()

        def hold() -> None:  # a processor blocked on its fetch, on the old master
            def blocked_read(r: redis.Redis) -> Any:
                blocking.set()
                return r.xread({"nothing-here": "$"}, block=1500)  # a read: served by replicas
            started = time.monotonic()
            try:
                outcome["read"] = pool.run(blocked_read)
            except Exception as exc:
                outcome["read"] = exc
            outcome["seconds"] = time.monotonic() - started
            try:  # its own next write meets the refusal, and is retried on the new master
                pool.run(lambda r: r.set("from-holder", "1"))
            except Exception as exc:
                outcome["write"] = exc

        warm = [pool.take_connection(), pool.take_connection()]  # both reach the replica
        for connection in warm:
            pool.release_connection(connection)  # one for the holder, one left idle
        holder = threading.Thread(target=hold)
        holder.start()
        assert blocking.wait(5)
        time.sleep(0.2)  # the XREAD is on the wire
        proxy.retarget(private_server.port)  # the failover: new connections reach the master
        pool.run(lambda r: r.set("k", "v"))  # the idle connection reads READONLY, then retried
        holder.join(10)
        assert outcome["read"] in (None, []) and outcome["seconds"] >= 1.4, outcome
        assert "write" not in outcome, outcome
        master = redis.Redis(port=private_server.port)
        assert master.get("k") == b"v" and master.get("from-holder") == b"1"
        old = redis.Redis(port=replica.port)  # both connections to it were retired
        wait_until(lambda: not [c for c in old.client_list() if c.get("name") == "wurk"], 5,
                   "no connection left on the old master")
    finally:
        pool.close()
        proxy.close()
        replica.stop()


# -- no record, no jobs -----------------------------------------------------------------------
def heartbeat_refusals(admin: redis.Redis) -> int:
    """How many heartbeat writes the server's ACL refused (each writes the ``…:work`` key)."""
    return sum(int(entry["count"]) for entry in admin.acl_log()
               if str(entry["object"]).endswith(":work"))


def test_no_job_is_taken_until_the_heartbeat_record_is_written(
    private_server: Server, redis_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another worker's reaper takes a live process without a record for a dead one: a
    worker whose heartbeat cannot be written (here: not allowed to write its own key, while
    the queues are open to it) must not fetch."""
    ledger = use_ledger(monkeypatch, redis_server.url)
    admin = redis.Redis(port=private_server.port)
    admin.acl_setuser("worker", enabled=True, passwords=["+pw"], commands=["+@all"],
                      keys=["queue*", "stat*", "processes", "process_cleanup", "schedule",
                            "retry", "dead", "paused", "wurk:*", "super_fetch:*"])
    pushed = wurk.Client(config_for(private_server.url)).push_bulk(
        {"class": "Chaos::Mark", "args": [[0]] * 5})
    worker = InProcessWorker(f"redis://worker:pw@127.0.0.1:{private_server.port}/0",
                             concurrency=2)
    worker.start()
    try:
        # Refused, backed off and refused again: its processors had all that time to fetch.
        wait_until(lambda: heartbeat_refusals(admin) >= 5, 10, "five refused heartbeats")
        assert ledger.llen(jobs.RAN) == 0 and admin.llen("queue:default") == 5
        assert not list(admin.scan_iter("queue:default|*"))  # nothing fetched
        admin.acl_setuser("worker", enabled=True, passwords=["+pw"], commands=["+@all"],
                          keys=["*"])  # now the record can be written
        wait_until(all_ran(pushed, ledger), 10, "the jobs, once the record exists")
    finally:
        worker.stop()


def test_an_ack_refused_while_redis_is_busy_rides_the_next_fetch(private_server: Server) -> None:
    # A server spinning in a script answers BUSY between its slices; on a loaded machine a
    # slice came later than 0.5 s, and the fetch's read timed out instead: 10 s here.
    rig = Rig(private_server.url, socket_timeout=10)
    admin = redis.Redis(port=private_server.port, socket_timeout=10)
    admin.lpush("queue:default", job(1), job(2))
    first = rig.fetcher.fetch(0.1)
    assert first is not None
    first.jid = "jid000000000000000000001"
    first.acknowledge()
    admin.config_set("busy-reply-threshold", 50)
    looping = threading.Thread(target=_endless_script, args=(private_server.port,))
    looping.start()
    wait_until(lambda: _busy(admin), 10, "the server to answer BUSY")
    try:
        with pytest.raises(wurk.RedisUnavailable, match="BUSY"):
            rig.fetcher.fetch(0.1)
    finally:
        admin.script_kill()
        looping.join(timeout=10)
    assert admin.lrange(rig.private, 0, -1) == [job(1)]  # not acknowledged yet…
    second = rig.fetcher.fetch(0.1)
    assert second is not None and second.raw == job(2)
    assert admin.lrange(rig.private, 0, -1) == [job(2)]  # …and now it is
    assert rig.claims.held(rig.private) == {job(2): 1}
    rig.config.close()


def _busy(admin: redis.Redis) -> bool:
    try:
        admin.ping()
    except redis.RedisError as exc:
        return "BUSY" in str(exc)
    return False


def _endless_script(port: int) -> None:
    with contextlib.suppress(redis.ResponseError):  # ended by SCRIPT KILL
        redis.Redis(port=port, socket_timeout=30).eval("while true do end", 0)


# -- failures that cannot be booked -----------------------------------------------------------
def unit_of(raw: bytes, fetcher: Any = None) -> UnitOfWork:
    class Recorder:
        def __init__(self) -> None:
            self.acked: list[UnitOfWork] = []

        def acknowledge(self, unit: UnitOfWork) -> None:
            self.acked.append(unit)

    return UnitOfWork("default", raw, fetcher or Recorder())  # type: ignore[arg-type]


def test_a_bad_payload_the_dead_set_refuses_is_left_unacknowledged(
    config: wurk.Config, r: redis.Redis
) -> None:
    r.set("dead", "not a sorted set")  # every write to it fails (WRONGTYPE)
    reported: list[BaseException] = []
    config.error_handlers.append(lambda exc, ctx: reported.append(exc))
    runner = JobRunner(config, counters=Counters(), busy=Busy())
    unit = unit_of(b"not json")
    runner.run(unit)  # no exception: the thread lives on
    assert unit.fetcher.acked == []  # type: ignore[attr-defined]
    assert any("WRONGTYPE" in str(e) for e in reported)


def test_a_failure_redis_refuses_to_book_is_left_unacknowledged(
    config: wurk.Config, r: redis.Redis
) -> None:
    r.set("retry", "not a sorted set")
    runner = JobRunner(config, counters=Counters(), busy=Busy())
    unit = unit_of(job(1, **{"class": "No::Such"}))
    runner.run(unit)
    assert unit.fetcher.acked == []  # type: ignore[attr-defined]


class UnbookableRetry(JobRetry):
    def handle(self, job: dict[str, Any], exc: BaseException, **kwargs: Any) -> None:
        raise OverflowError("int too large to convert to float")


def test_a_failure_the_payload_makes_unbookable_is_buried_as_it_came(
    config: wurk.Config, r: redis.Redis
) -> None:
    morgue = Morgue(config)
    runner = JobRunner(config, counters=Counters(), busy=Busy(), morgue=morgue,
                       retry=UnbookableRetry(config, morgue))
    raw = job(1, **{"class": "No::Such"})
    unit = unit_of(raw)
    runner.run(unit)
    assert unit.fetcher.acked == [unit]  # type: ignore[attr-defined]
    assert r.zrange("dead", 0, -1) == [raw.decode()]


# -- the scheduler ----------------------------------------------------------------------------
def test_a_popped_job_goes_back_when_burying_it_fails(config: wurk.Config,
                                                       r: redis.Redis) -> None:
    r.zadd("schedule", {"not json": 1000.0})
    r.set("dead", "not a sorted set")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        Scheduler(config).enqueue_due()
    assert r.zrange("schedule", 0, -1, withscores=True) == [("not json", 1000.0)]


def test_arguments_a_client_middleware_spoils_kill_the_job_in_client_mode(
    redis_server: Server, r: redis.Redis
) -> None:
    def spoil(job_class: Any, job: dict[str, Any], queue: str, call_next: Any) -> Any:
        job["args"] = [object()]
        return call_next()

    chain = Chain()
    chain.add(spoil)
    cfg = wurk.configure(redis_url=redis_server.url, scheduler="client",
                         client_middleware=chain)
    r.zadd("schedule", {job(1).decode(): 1000.0})
    Scheduler(cfg).enqueue_due()
    dead = [json.loads(entry) for entry in r.zrange("dead", 0, -1)]
    assert [d["error_class"] for d in dead] == ["wurk.InvalidPayload"]
    assert "not JSON-native" in dead[0]["error_message"] and not r.zcard("schedule")


# -- boot checks ------------------------------------------------------------------------------
def test_an_evicting_server_is_warned_about_at_boot(
    private_server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    redis.Redis(port=private_server.port).config_set("maxmemory-policy", "allkeys-lru")
    cfg = config_for(private_server.url)
    with caplog.at_level(logging.WARNING, logger="wurk"):
        check_server(cfg)
    assert any("maxmemory-policy is 'allkeys-lru'" in r.getMessage() and "noeviction" in
               r.getMessage() for r in caplog.records)
    redis.Redis(port=private_server.port).config_set("maxmemory-policy", "noeviction")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="wurk"):
        check_server(cfg)
    assert not caplog.records
    cfg.close()


def test_the_worker_checks_the_server_when_it_starts(
    private_server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    redis.Redis(port=private_server.port).config_set("maxmemory-policy", "allkeys-lfu")
    worker = InProcessWorker(private_server.url, concurrency=1)
    with caplog.at_level(logging.WARNING, logger="wurk"):
        worker.start()
    worker.stop()
    assert any("maxmemory-policy is 'allkeys-lfu'" in r.getMessage() for r in caplog.records)


def test_where_config_is_refused_the_policy_is_read_from_info(private_server: Server) -> None:
    admin = redis.Redis(port=private_server.port)
    admin.config_set("maxmemory-policy", "volatile-lru")
    admin.acl_setuser("managed", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
                      commands=["+@all", "-config"])  # as managed Redis services do
    pool = RedisPool(f"redis://managed:pw@127.0.0.1:{private_server.port}/0")
    with pytest.raises(redis.exceptions.NoPermissionError):
        pool.run(lambda c: c.config_get("maxmemory-policy"))
    assert eviction_policy(pool) == "volatile-lru"
    pool.close()


def test_boot_goes_on_when_the_server_cannot_be_asked(caplog: pytest.LogCaptureFixture) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    cfg = config_for(url)
    with caplog.at_level(logging.WARNING, logger="wurk"):
        check_server(cfg)  # returns: the worker starts and waits for Redis
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith(f"cannot reach Redis at {url}: Error 111 connecting to ")
    assert "That URL is the configuration's redis_url" in said
    assert cfg.unreached.active  # the loops' own reports stay quiet until Redis answers
    cfg.close()


def test_an_embedded_server_that_does_not_answer_is_named_as_such(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """No URL configured: the URL is the embedded server's, yet the message said it came
    from the configuration's redis_url and told to point that at a Redis that runs."""
    monkeypatch.delenv("REDIS_URL", raising=False)
    url = f"redis://127.0.0.1:{free_port()}/0"
    cfg = wurk.Config()  # no redis_url: the embedded server's is used
    pool = RedisPool(url, socket_timeout=1)
    with caplog.at_level(logging.WARNING, logger="wurk"):
        check_server(cfg, pool)
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith(f"cannot reach wurk's embedded server at {url}: ")
    assert "wurk server status" in said and "to use wurk's embedded server" not in said
    assert "redis_url (a Django" not in said
    pool.close()
    cfg.close()


def test_a_server_older_than_redis_7_is_refused() -> None:
    with pytest.raises(wurk.UnsupportedServer,
                       match=r"version 6\.2; wurk needs Redis 7\.0 or newer"):
        require_version((6, 2), "redis://:secret@old:6379/0")
    require_version((7, 0), "redis://new")
    require_version((8, 2), "redis://new")


# -- basic fetch ------------------------------------------------------------------------------
def test_basic_fetch_waits_when_every_queue_is_paused(config: wurk.Config) -> None:
    fetcher = BasicFetch(config, Capsule(), config.pool("t"),
                         paused=lambda: frozenset({"default"}))
    started = time.monotonic()
    assert fetcher.fetch(0.3) is None
    assert time.monotonic() - started >= 0.3
    fetcher.flush()


def test_a_stray_whose_queue_key_is_of_another_type_stays_in_flight_uncounted(
    rig: Rig, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """A stray's return took it out of the in-flight list (LREM), then pushed it (RPUSH) to
    a queue key written by hand as another type: WRONGTYPE after the removal, and a script's
    earlier writes stay, so the job was in neither place (its poison counter bumped too).
    It now stays in flight, uncounted, with a warning naming the key, and goes back once the
    key is mended."""
    r.lpush("queue:default", job(1))
    assert rig.fetcher.fetch(0.1) is not None
    assert rig.fetcher.fetch(0.05) is None  # never acknowledged: let go of (abandoned)
    r.set("queue:default", "written by hand")
    with caplog.at_level(logging.WARNING, logger="wurk"):
        assert rig.strays_after_grace() == 0
    assert r.lrange(rig.private, 0, -1) == [job(1).decode()]
    counter = "super_fetch:recovered:jid000000000000000000001"
    assert not r.exists(counter)
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert any("queue:default" in message and rig.private in message for message in warned)
    r.delete("queue:default")
    assert rig.strays_after_grace() == 1
    assert r.lrange("queue:default", 0, -1) == [job(1).decode()] and r.get(counter) == "1"
