"""``RedisPool.send_all``: commands in one write, every reply read, nothing replayed; the
pool's idle timeout."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.server import start_server
from tests.helpers.wait import wait_until
from wurk.cli import run
from wurk.connections.pool import AsyncRedisPool, RedisPool
from wurk.runtime.clock import ManualClock


def _one_connection(config: wurk.Config) -> RedisPool:
    """A pool of one connection with a short wait: a connection kept out of it, or given
    back out of step, shows in the next call."""
    return RedisPool(config.redis_url, size=1, name="send-all-test", socket_timeout=1.0)


def test_connections_idle_longer_than_the_idle_timeout_are_closed(
        config: wurk.Config, r: redis.Redis) -> None:
    """``redis_idle_timeout``: a connection left unused in the pool longer than it is
    closed — when another comes back to the pool, or when ``close_idle`` is called (the
    heartbeat's, for a pool nobody uses) — and connects again at its next use."""
    clock = ManualClock()
    pool = RedisPool(str(config.redis_url), size=2, name="idle-test", idle_timeout=30,
                     clock=clock)

    def connected() -> int:
        return sum(1 for client in r.client_list() if client["name"] == "idle-test")

    try:
        first, second = pool.take_connection(), pool.take_connection()
        pool.release_connection(first)
        pool.release_connection(second)
        assert connected() == 2
        clock.advance(30)
        assert pool.close_idle() == 0  # idle 30 s: not longer than the timeout
        clock.advance(1)
        assert pool.client.ping()  # takes the last one back, returns it: the other is closed
        wait_until(lambda: connected() == 1)
        clock.advance(31)
        assert pool.close_idle() == 1  # nobody used the pool since
        wait_until(lambda: connected() == 0)
        assert pool.client.ping() and connected() == 1  # connects again when used
    finally:
        pool.close()


def test_a_configuration_s_pools_take_redis_idle_timeout(redis_server: Any) -> None:
    cfg = wurk.Config(redis_url=redis_server.url, redis_idle_timeout=300)
    plain = wurk.Config(redis_url=redis_server.url)
    try:
        assert cfg.pool("client").idle_timeout == 300
        assert cfg.pool("client").client.ping()
        assert cfg.close_idle_connections() == 0  # just used
        assert plain.pool("client").idle_timeout is None  # kept open, as before

        async def async_timeouts() -> tuple[float | None, float | None]:
            try:
                return cfg.async_pool().idle_timeout, plain.async_pool().idle_timeout
            finally:
                await cfg.aclose()
                await plain.aclose()

        assert asyncio.run(async_timeouts()) == (300, None)
    finally:
        cfg.close()
        plain.close()


async def _client_id(connection: Any) -> int:
    """The server's id for a raw asyncio connection of a pool."""
    await connection.send_command("CLIENT", "ID")
    return int(await connection.read_response())


def _ids(r: redis.Redis, name: str) -> set[int]:
    return {int(client["id"]) for client in r.client_list() if client["name"] == name}


def test_async_connections_idle_longer_than_the_idle_timeout_are_closed(
        config: wurk.Config, r: redis.Redis) -> None:
    """The same on an asyncio pool, on its own loop: a connection left unused longer than
    the timeout is closed when another comes back or when ``close_idle`` looks; one in use
    is never closed under its user; the next command connects anew."""
    clock = ManualClock()

    async def main() -> None:
        pool = AsyncRedisPool(str(config.redis_url), asyncio.get_running_loop(), size=3,
                              name="idle-async-test", idle_timeout=30, clock=clock)
        take = pool.connections.get_connection
        try:
            first, second, held = await take(), await take(), await take()
            ids = [await _client_id(c) for c in (first, second, held)]
            await pool.connections.release(first)
            await pool.connections.release(second)
            assert _ids(r, "idle-async-test") == set(ids)
            clock.advance(30)
            assert await pool.close_idle() == 0  # idle 30 s: not longer than the timeout
            clock.advance(1)
            assert await pool.client.ping()  # takes the second back, returns it: first closed
            wait_until(lambda: _ids(r, "idle-async-test") == set(ids[1:]))
            clock.advance(31)
            assert await pool.close_idle() == 1  # nobody used the pool since
            wait_until(lambda: _ids(r, "idle-async-test") == {ids[2]})
            assert await _client_id(held) == ids[2]  # in use for 62 s: left alone
            await pool.connections.release(held)
            assert await pool.client.ping()  # connects again when used
            assert len(_ids(r, "idle-async-test")) == 1
        finally:
            await pool.aclose()

    asyncio.run(main())


def test_a_busy_async_pool_keeps_the_connections_it_uses(
        config: wurk.Config, r: redis.Redis) -> None:
    """Connections used within the timeout stay open however long the pool runs; only the
    one left unused is closed."""
    clock = ManualClock()

    async def main() -> None:
        pool = AsyncRedisPool(str(config.redis_url), asyncio.get_running_loop(), size=3,
                              name="busy-async-test", idle_timeout=5, clock=clock)
        take, give = pool.connections.get_connection, pool.connections.release
        try:
            spare, *busy = await take(), await take(), await take()
            busy_ids = {await _client_id(c) for c in busy}
            for connection in (spare, *busy):
                await give(connection)
            for _ in range(20):  # 80 s, each connection used every 4 s
                clock.advance(4)
                first, second = await take(), await take()
                assert {await _client_id(first), await _client_id(second)} == busy_ids
                await give(first)
                await give(second)
            wait_until(lambda: _ids(r, "busy-async-test") == busy_ids)  # the spare: closed
        finally:
            await pool.aclose()

    asyncio.run(main())


def test_replies_come_back_in_order(config: wurk.Config) -> None:
    pool = _one_connection(config)
    assert pool.send_all([("SADD", "s", "a", "b"), ("LPUSH", "l", "x", "y", "z"),
                          ("LRANGE", "l", 0, -1)]) == [2, 3, [b"z", b"y", b"x"]]


def test_text_goes_as_utf8_and_numbers_as_their_digits(config: wurk.Config) -> None:
    pool = _one_connection(config)
    assert pool.send_all([("SET", "k", "ünïcode ✓"), ("GET", "k"), ("INCRBY", "n", 5),
                          ("INCRBYFLOAT", "f", 1.5)]) == [
        b"OK", "ünïcode ✓".encode(), 5, b"1.5"]


def test_an_error_reply_is_raised_after_every_reply_is_read(config: wurk.Config) -> None:
    """The command after a refused one is still applied (Redis runs each), and the
    connection goes back in step: the next call on the pool's only connection reads its
    own replies, not the ones left over."""
    pool = _one_connection(config)
    pool.client.set("queues-as-text", "v")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        pool.send_all([("SADD", "queues-as-text", "default"), ("LPUSH", "queue:x", "job")])
    assert pool.client.llen("queue:x") == 1
    assert pool.send_all([("PING",), ("LLEN", "queue:x")]) == [b"PONG", 1]


def test_a_command_that_cannot_be_packed_takes_no_connection(config: wurk.Config) -> None:
    pool = _one_connection(config)
    with pytest.raises(redis.DataError, match="SET"):
        pool.send_all([("SET", "k", object())])
    taken = pool.take_connection()  # the only one: would wait 1 s and fail if kept
    pool.release_connection(taken)
    assert pool.send_all([("SET", "k", "v")]) == [b"OK"]


def test_a_connection_cut_short_is_closed_not_lent_again(config: wurk.Config,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """An interrupt between the write and the last reply (a signal handler raising, a
    shutdown) leaves replies on the wire: the connection is closed, so the next call opens
    a fresh one and reads only its own replies."""
    pool = _one_connection(config)
    pool.send_all([("PING",)])
    connection = pool.take_connection()
    first_socket = connection._sock
    pool.release_connection(connection)
    calls = 0

    def interrupted(self: object, *args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        raise KeyboardInterrupt

    monkeypatch.setattr(type(connection), "read_response", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pool.send_all([("INCR", "n"), ("INCR", "n")])
    monkeypatch.undo()
    assert calls == 1
    assert connection._sock is None  # closed, replies and all
    assert pool.send_all([("INCR", "n")]) == [3]  # both INCRs were applied, once each
    again = pool.take_connection()
    assert again._sock is not first_socket
    pool.release_connection(again)


def test_a_push_writes_the_queue_and_the_job(config: wurk.Config) -> None:
    """What a single push writes: SADD of the queue, LPUSH of the job, as Sidekiq does."""
    jid = wurk.push({"class": "PoolProbe", "args": [1], "queue": "probe"})
    r = redis.Redis.from_url(config.redis_url)
    assert r.smembers("queues") == {b"probe"}
    [raw] = r.lrange("queue:probe", 0, -1)
    assert jid is not None and jid.encode() in raw


# -- AsyncRedisPool.send_all: the same rules on an event loop --------------------------------

def _on_a_loop(config: wurk.Config, work: Any) -> Any:
    """Run ``work(pool)`` on a fresh loop with a one-connection asyncio pool, closed after."""
    async def main() -> Any:
        pool = AsyncRedisPool(config.redis_url, asyncio.get_running_loop(), size=1,
                              name="send-all-async-test", socket_timeout=1.0)
        try:
            return await work(pool)
        finally:
            await pool.aclose()

    return asyncio.run(main())


def test_async_replies_come_back_in_order_and_an_error_after_all(config: wurk.Config) -> None:
    redis.Redis.from_url(config.redis_url).set("queues-as-text", "v")

    async def work(pool: AsyncRedisPool) -> list[Any]:
        first = await pool.send_all([("SADD", "s", "a"), ("LPUSH", "l", "x", "y")])
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            await pool.send_all([("SADD", "queues-as-text", "q"), ("LPUSH", "queue:q", "j")])
        return [first, await pool.send_all([("PING",), ("LLEN", "queue:q")])]

    assert _on_a_loop(config, work) == [[1, 2], [b"PONG", 1]]


def test_an_async_push_cancelled_before_its_replies_closes_its_connection(
        config: wurk.Config, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task cancelled between the write and the replies (a timeout around the push, a
    shutdown) leaves replies on the wire: the connection is closed, so the pool's only
    connection then reads only its own replies (kept open, it would read the first INCR's)."""

    async def work(pool: AsyncRedisPool) -> list[Any]:
        await pool.send_all([("PING",)])
        reading = asyncio.Event()

        async def stalled(self: object, *args: object, **kwargs: object) -> object:
            reading.set()
            await asyncio.Event().wait()  # until cancelled

        monkeypatch.setattr(pool.connections.connection_class, "read_response", stalled)
        task = asyncio.ensure_future(pool.send_all([("INCR", "n"), ("INCR", "n")]))
        await reading.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        monkeypatch.undo()
        return await pool.send_all([("INCR", "n")])

    assert _on_a_loop(config, work) == [3]  # both INCRs applied once, nothing replayed


@pytest.fixture(scope="module")
def unix_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server of the module's own that also listens on a Unix socket."""
    directory = tmp_path_factory.mktemp("unix")
    path = directory / "redis.sock"
    server = start_server(directory, extra=("--unixsocket", str(path),
                                            "--unixsocketperm", "700"))
    yield f"unix://{path}"
    server.stop()


def test_a_unix_socket_url_connects(unix_url: str, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``unix://`` is a documented ``redis_url``: the pools leave out the TCP-only
    keepalive option its connection class refuses (a TypeError at the first command, a
    traceback from every ``wurk`` command)."""
    pool = RedisPool(unix_url, size=1, name="unix-test", socket_timeout=1.0)
    assert pool.send_all([("SADD", "queues", "u"), ("LPUSH", "queue:u", "x")]) == [1, 1]
    pool.close()

    async def ping() -> Any:
        pool = AsyncRedisPool(unix_url, asyncio.get_running_loop(), size=1, socket_timeout=1.0)
        try:
            return await pool.run(lambda client: client.llen("queue:u"))
        finally:
            await pool.aclose()

    assert asyncio.run(ping()) == 1
    monkeypatch.setenv("REDIS_URL", unix_url)
    assert run(["stats", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["enqueued"] == 1
