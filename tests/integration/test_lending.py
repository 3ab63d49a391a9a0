"""``wurk.redis()``: a connection lent to application code, kept by each processor."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.faults import InProcessWorker, config_for, wait_until
from tests.helpers.proxy import FaultProxy
from tests.helpers.server import Server, start_server
from wurk.connections.lease import Lease
from wurk.connections.lending import lend_from
from wurk.connections.pool import RedisPool
from wurk.runtime.clock import ManualClock

LENT = "test:lent"


@wurk.job(name="LendingProbe")
def lending_probe() -> None:
    with wurk.redis() as conn:
        client_id, name = conn.pipeline([("CLIENT", "ID"), ("CLIENT", "GETNAME")])
        with wurk.redis() as inner:  # a helper opening its own block: the same connection
            assert inner is conn
            inner.call("RPUSH", LENT, f"{client_id}|{name.decode()}")


def test_outside_a_worker_a_block_checks_out_a_client_connection(
    config: wurk.Config, r: redis.Redis
) -> None:
    with wurk.redis(config) as conn:
        assert conn.call("SET", "k", "v") == b"OK"
        assert conn.call("GET", "k") == b"v"
        first = conn.call("CLIENT", "ID")
        with wurk.redis(config) as nested:
            assert nested is conn
        assert conn.call("CLIENT", "GETNAME") == b"wurk-client"
    with wurk.redis(config) as conn:  # given back at the end of the block, taken again
        assert conn.call("CLIENT", "ID") == first


def test_error_replies_raise_or_come_back_in_place(config: wurk.Config, r: redis.Redis) -> None:
    r.set("text", "x")
    with wurk.redis(config) as conn:
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            conn.call("LPUSH", "text", "y")
        assert conn.call("GET", "text") == b"x"  # the connection is still in step
        replies = conn.pipeline([("INCR", "text"), ("GET", "text")])
        assert isinstance(replies[0], redis.ResponseError) and replies[1] == b"x"
        with pytest.raises(redis.DataError, match="SET"):
            conn.call("SET", "k", None)  # not a word Redis can be sent: said before sending
        assert conn.call("PING") == b"PONG"


def test_a_processor_thread_keeps_one_connection_for_its_jobs_and_gives_it_back(
    config: wurk.Config,
) -> None:
    pool = config.pool("lent", size=2)
    with lend_from(pool):
        with wurk.redis() as conn:
            kept = conn.call("CLIENT", "ID")
        with wurk.redis() as conn:
            assert conn.call("CLIENT", "ID") == kept  # not checked out again between jobs
    assert Lease(pool).call("CLIENT", "ID") == kept  # back in the pool once the thread left


def test_a_command_cut_short_drops_its_connection(config: wurk.Config) -> None:
    """A shutdown interrupting a job between a command and its reply leaves the reply on the
    wire: the connection must not serve the next command."""
    lease = Lease(config.pool("lent", size=2))
    lease.call("SET", "k", "before")
    before = lease.call("CLIENT", "ID")
    lease._take()
    wire = lease._wire
    assert wire is not None  # the lease reads its replies itself

    class Interrupted:
        """The lease's wire, interrupted while it waits for the reply."""

        sock = wire.sock

        def read(self) -> Any:
            raise KeyboardInterrupt

    lease._wire = Interrupted()  # type: ignore[assignment]
    with pytest.raises(KeyboardInterrupt):
        lease.call("GET", "k")
    assert lease.call("GET", "k") == b"before"  # not the stale reply of the cut command
    assert lease.call("CLIENT", "ID") != before


class _Failed(Exception):
    pass


@pytest.mark.parametrize("left", [
    [("MULTI",), ("SET", "half", "1")],  # an exception between MULTI and EXEC
    [("SELECT", "1")],  # another db for the rest of the connection's life
    [("WATCH", "k")],  # a WATCH that would make a later MULTI of another's fail
])
def test_a_block_that_leaves_its_connection_in_a_state_does_not_lend_it_again(
    config: wurk.Config, r: redis.Redis, left: list[tuple[str, ...]],
) -> None:
    """What a block's commands set on its connection (an open MULTI, a SELECT, a WATCH) ends
    with the block: the next user of the pool (a push) must not run inside it."""
    pool = config.pool("client")
    with pytest.raises(_Failed), wurk.redis(config) as conn:
        first = conn.call("CLIENT", "ID")
        for command in left:
            conn.call(*command)
        raise _Failed
    jid = wurk.push({"class": "Probe", "args": [], "queue": "q"}, config=config)
    assert jid is not None and r.llen("queue:q") == 1  # pushed, on db 0, applied at once
    assert r.get("half") is None
    with wurk.redis(config) as conn:
        assert conn.call("CLIENT", "ID") != first
    pool.run(lambda c: c.ping())


def test_a_processor_s_kept_connection_is_let_go_when_a_job_leaves_it_in_a_state(
    config: wurk.Config, r: redis.Redis,
) -> None:
    pool = config.pool("lent", size=2)
    with lend_from(pool):
        with pytest.raises(_Failed), wurk.redis() as conn:  # one job
            kept = conn.call("CLIENT", "ID")
            conn.call("MULTI")
            conn.call("INCR", "n")
            raise _Failed
        with wurk.redis() as conn:  # the next job
            assert conn.call("CLIENT", "ID") != kept
            assert conn.call("INCR", "n") == 1
        with wurk.redis() as conn:  # a transaction run to its end keeps the connection
            again = conn.call("CLIENT", "ID")
            conn.call("MULTI")
            conn.call("INCR", "n")
            assert conn.call("EXEC") == [2]
        with wurk.redis() as conn:
            assert conn.call("CLIENT", "ID") == again
    assert r.get("n") == "2"


def test_jobs_in_a_worker_borrow_their_processors_connection(
    redis_server: Server, r: redis.Redis
) -> None:
    worker = InProcessWorker(redis_server.url, concurrency=2).start()
    try:
        wurk.push_bulk({"class": "LendingProbe", "args": [[] for _ in range(60)]},
                       config=worker.config)
        wait_until(lambda: r.llen(LENT) == 60, 30, "the probes to run")
    finally:
        worker.stop()
    seen = set(r.lrange(LENT, 0, -1))
    assert 1 <= len(seen) <= 2  # one connection per processor, kept across its jobs
    assert {entry.split("|")[1] for entry in seen} == {"wurk-capsule-default"}


def test_a_held_connection_still_times_out_when_redis_goes_silent(
    redis_server: Server,
) -> None:
    """Held connections time out through the kernel, not a poll: a server that stops
    answering is reported within about ``socket_timeout``, and the lease recovers."""
    with FaultProxy(redis_server.port) as proxy:
        pool = RedisPool(proxy.url, size=2, socket_timeout=0.5)
        lease = Lease(pool)
        assert lease.call("PING") == b"PONG"
        sock = lease._take()._sock
        if sys.platform.startswith("linux"):
            assert sock.gettimeout() is None  # blocking: no poll before each read or write
        proxy.blackhole()
        started = time.monotonic()
        with pytest.raises(wurk.RedisUnavailable):
            lease.call("PING")
        assert 0.4 < time.monotonic() - started < 3
        proxy.restore()
        assert lease.call("PING") == b"PONG"  # a fresh connection
        fresh = lease._take()._sock
        assert fresh is not sock
        lease.release()
        assert fresh.gettimeout() == 0.5  # given back with redis-py's own timeout again
        pool.close()


@wurk.job(name="LendingBlocked")
def lending_blocked() -> None:
    with wurk.redis() as conn:
        conn.call("RPUSH", "test:started", 1)
        while True:  # until the shutdown interrupts it
            conn.call("BLPOP", "test:never", 0.2)


def test_stop_interrupts_a_job_waiting_on_its_lent_connection(
    redis_server: Server, r: redis.Redis
) -> None:
    """The shutdown path: the job is requeued, the interrupt lands when the blocking call
    returns, and the processor thread leaves (giving its connection back) in time."""
    worker = InProcessWorker(redis_server.url, concurrency=1).start()
    wurk.push({"class": "LendingBlocked", "args": []}, config=worker.config)
    wait_until(lambda: r.llen("test:started") == 1, 10, "the job to start")
    threads = [p.thread for m in worker.launcher.managers for p in m.processors]
    started = time.monotonic()
    worker.launcher.stop(timeout=0.3)
    assert time.monotonic() - started < 3
    worker.config.close()
    assert not any(thread.is_alive() for thread in threads)
    queued = r.lrange("queue:default", 0, -1)
    assert [json.loads(raw)["class"] for raw in queued] == ["LendingBlocked"]  # not lost


@pytest.fixture
def demoted_pair(tmp_path: Path) -> Iterator[tuple[Server, Server, FaultProxy]]:
    """Two servers and a proxy in front of the first (the primary, until a test demotes it
    and points the proxy at the second, as a failover behind a VIP or a proxy does)."""
    old, new = start_server(tmp_path / "old"), start_server(tmp_path / "new")
    proxy = FaultProxy(old.port).start()
    yield old, new, proxy
    proxy.close()
    old.stop()
    new.stop()


def test_an_async_block_s_connection_that_reads_readonly_is_not_kept(
    demoted_pair: tuple[Server, Server, FaultProxy],
) -> None:
    """The async form keeps its connection for the next block; one that read a failover
    reply (it reaches a demoted primary) is closed instead, so the next block reaches the
    new primary rather than reading READONLY on the old one for good."""
    old, new, proxy = demoted_pair
    config = config_for(proxy.url)

    async def main() -> tuple[BaseException | None, Any]:
        async with wurk.redis(config) as conn:
            assert await conn.call("SET", "k", "before") == b"OK"  # kept for the next block
        redis.Redis(port=old.port).replicaof("127.0.0.1", new.port)  # demoted
        proxy.retarget(new.port)  # new connections reach the new primary
        refused: BaseException | None = None
        try:
            async with wurk.redis(config) as conn:
                await conn.call("SET", "k", "refused")
        except wurk.RedisUnavailable as exc:
            refused = exc
        async with wurk.redis(config) as conn:
            after = await conn.call("SET", "k", "after")
        await config.aclose()
        return refused, after

    try:
        refused, after = asyncio.run(main())
    finally:
        config.close()
    assert refused is not None and "READONLY" in str(refused)
    assert after == b"OK"
    assert redis.Redis(port=new.port).get("k") == b"after"


def test_an_async_block_that_leaves_a_transaction_open_does_not_keep_its_connection(
    config: wurk.Config, r: redis.Redis,
) -> None:
    async def main() -> tuple[Any, Any, Any]:
        with pytest.raises(_Failed):
            async with wurk.redis(config) as conn:
                first = await conn.call("CLIENT", "ID")
                await conn.pipeline([("MULTI",), ("SET", "half", "1")])
                raise _Failed
        async with wurk.redis(config) as conn:
            after = await conn.call("INCR", "n")
            second = await conn.call("CLIENT", "ID")
        await config.aclose()
        return first, second, after

    first, second, after = asyncio.run(main())
    assert after == 1 and first != second  # applied at once, on a connection of its own
    assert r.get("half") is None and r.get("n") == "1"


def _client_ids(r: redis.Redis) -> set[int]:
    return {int(client["id"]) for client in r.client_list()}


async def _eventually(predicate: Any, what: str) -> None:
    """Let the loop run until ``predicate`` holds (up to a bound no machine reaches)."""
    deadline = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def _idle_config(redis_url: str) -> wurk.Config:
    return wurk.Config(redis_url=redis_url, redis_idle_timeout=5)


def test_an_async_block_s_kept_connections_idle_too_long_are_closed(
    redis_server: Server, r: redis.Redis,
) -> None:
    """``redis_idle_timeout`` reaches the connections async blocks keep for the next block:
    kept longer than it, they are closed, and the next block connects anew."""
    config, clock = _idle_config(redis_server.url), ManualClock()

    async def main() -> tuple[set[int], int]:
        config.async_pool().clock = clock
        async with wurk.redis(config) as one, wurk.redis(config) as two:
            kept = {await one.call("CLIENT", "ID"), await two.call("CLIENT", "ID")}
        assert kept <= _client_ids(r)  # both kept open for the next block
        clock.advance(6)
        async with wurk.redis(config) as conn:
            assert await conn.call("PING") == b"PONG"
            fresh = await conn.call("CLIENT", "ID")
        await config.aclose()
        return kept, fresh

    try:
        kept, fresh = asyncio.run(main())
    finally:
        config.close()
    assert fresh not in kept
    wait_until(lambda: not kept & _client_ids(r), 10, "the kept connections' close")


def test_a_busy_loop_keeps_its_block_connection_and_a_held_one_is_never_closed(
    redis_server: Server, r: redis.Redis,
) -> None:
    """Blocks that follow each other within the timeout reuse one connection for good; a
    kept one no block takes any more is closed as another is put back; a block holding its
    connection past the timeout keeps it."""
    config, clock = _idle_config(redis_server.url), ManualClock()

    async def main() -> None:
        config.async_pool().clock = clock
        async with wurk.redis(config) as held:
            held_id = await held.call("CLIENT", "ID")
            async with wurk.redis(config) as busy, wurk.redis(config) as spare:
                busy_id = await busy.call("CLIENT", "ID")
                spare_id = await spare.call("CLIENT", "ID")
            for _ in range(10):  # 20 s, a block every 2 s: always the busy connection
                clock.advance(2)
                async with wurk.redis(config) as conn:
                    assert await conn.call("CLIENT", "ID") == busy_id
            await _eventually(lambda: spare_id not in _client_ids(r), "the spare's close")
            assert await held.call("CLIENT", "ID") == held_id  # held 20 s: still open
            assert {held_id, busy_id} <= _client_ids(r)
        await config.aclose()

    try:
        asyncio.run(main())
    finally:
        config.close()


def test_the_heartbeat_s_look_closes_a_quiet_loop_s_kept_connections_on_that_loop(
    redis_server: Server, r: redis.Redis,
) -> None:
    """``close_idle_connections`` (the heartbeat's, from its own thread) has each loop close
    its own idle connections, for a loop where no block runs to look."""
    config, clock = _idle_config(redis_server.url), ManualClock()

    async def main() -> tuple[int, int]:
        config.async_pool().clock = clock
        async with wurk.redis(config) as conn:
            kept = await conn.call("CLIENT", "ID")
        await asyncio.to_thread(config.close_idle_connections)  # idle 0 s: kept
        await asyncio.sleep(0.05)
        assert kept in _client_ids(r)
        clock.advance(6)
        await asyncio.to_thread(config.close_idle_connections)
        await _eventually(lambda: kept not in _client_ids(r), "the kept connection's close")
        async with wurk.redis(config) as conn:
            fresh = await conn.call("CLIENT", "ID")
        await config.aclose()
        return kept, fresh

    try:
        kept, fresh = asyncio.run(main())
    finally:
        config.close()
    assert fresh != kept
