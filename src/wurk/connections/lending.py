"""``wurk.redis()``: a connection lent to application code, as ``Sidekiq.redis`` lends one.

1. Inside a job, the processor running it lends its own connection: taken on the first
   ``wurk.redis()`` of its thread, kept across jobs, given back when the processor stops. A
   job's Redis command then costs one round trip and no pool checkout.
2. Anywhere else (a web request, a script, an async job's event loop) a connection is
   checked out of the client pool for the outermost block and given back at its end.
3. Nested blocks in one thread share one connection, so a helper that opens its own block
   inside a job does not take a second one.
4. ``async with wurk.redis() as conn: await conn.call(...)`` is the form for async code (an
   async job, an ``aperform_async``): a connection of redis-py's asyncio pool (one pool per
   event loop and configuration, ``Config.async_pool``) held for the block, so the loop
   never blocks.
5. Inside ``wurk.via(shard)`` a block borrows from that shard's client pool, in a job too
   (the processor's own connection reaches the shard its capsule serves).

Commands are sent as written and replies come back raw (bytes, ints, lists), the way
``Sidekiq.redis`` hands out a ``redis-client`` connection; for redis-py's command methods,
keep a ``redis.Redis`` of your own. A connection that breaks, or whose command was cut
short (a shutdown interrupting the job mid-reply), is closed rather than lent again.

6. So is one that a block leaves with something open, at the end of the outermost block:
   a ``MULTI`` without its ``EXEC`` or ``DISCARD`` (an exception between them), a
   ``WATCH``, or a setting of the connection's own (``SELECT``, ``CLIENT SETNAME``,
   ``HELLO``…). Lent again, it would take the next user's commands — a push's — into that
   transaction or that db, and the push would be reported done and never applied.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import redis as redis_py

from ..config import Config, chosen_shard, default_config
from .lease import Lease
from .pool import AsyncRedisPool, Kept, RedisPool
from .replies import CONNECTION_ERRORS, raise_refusal, reply_code, retry_replies, unavailable

__all__ = ["AsyncConnection", "Borrowed", "Connection", "async_pool", "kept", "lend_from",
           "redis"]

# Blocks holding a connection at once on one loop (the size of its pool).
ASYNC_POOL_SIZE = 50


# What a block's commands may leave open on its connection past their replies (point 6):
# a transaction (``MULTI`` until ``EXEC`` / ``DISCARD``), a ``WATCH`` (until those or
# ``UNWATCH``), or a setting of the connection's own.
_MULTI, _WATCH, _SET = 1, 2, 4
_SETTINGS = frozenset({"SELECT", "AUTH", "HELLO", "RESET", "READONLY", "READWRITE",
                       "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "MONITOR"})
# ``CLIENT`` subcommands that change the connection (``CLIENT ID``, ``INFO``… do not).
_CLIENT_SETTINGS = frozenset({"SETNAME", "REPLY", "TRACKING", "CACHING", "NO-EVICT",
                              "NO-TOUCH", "SETINFO"})
_STATEFUL = _SETTINGS | {"MULTI", "WATCH", "EXEC", "DISCARD", "UNWATCH", "CLIENT"}


def _word(value: Any) -> str:
    return (value.decode("latin-1") if isinstance(value, (bytes, bytearray))
            else str(value)).upper()


def _left_open(open_: int, commands: Iterable[tuple[Any, ...]]) -> int:
    """What is open on a connection (``_MULTI``, ``_WATCH``, ``_SET``) after ``commands``."""
    for command in commands:
        name = _word(command[0]) if command else ""
        if name not in _STATEFUL:
            continue
        if name == "MULTI":
            open_ |= _MULTI
        elif name == "WATCH":
            open_ |= _WATCH
        elif name in ("EXEC", "DISCARD"):
            open_ &= _SET
        elif name == "UNWATCH":
            open_ &= ~_WATCH
        elif name != "CLIENT" or (len(command) > 1 and _word(command[1]) in _CLIENT_SETTINGS):
            open_ |= _SET
    return open_


class Connection:
    """What ``wurk.redis()`` yields: ``call`` one command, or ``pipeline`` several."""

    __slots__ = ("_lease", "blocks", "open")

    def __init__(self, lease: Lease) -> None:
        self._lease = lease
        self.blocks = 0  # the blocks using it now (nested ones share it)
        self.open = 0  # what its commands left open (``_left_open``)

    def call(self, *args: Any) -> Any:
        """One command, one round trip: ``conn.call("INCR", "hits")`` returns the raw reply.
        An error reply raises ``redis.ResponseError``; an unreachable or refusing server
        raises ``wurk.RedisUnavailable``."""
        if args and _word(args[0]) in _STATEFUL:
            self.open = _left_open(self.open, (args,))
        return self._lease.call(*args)

    def pipeline(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Several commands in one round trip; an error reply comes back in its place as a
        ``redis.ResponseError`` instance, so one refusal does not hide the other replies."""
        self.open = _left_open(self.open, commands)
        return self._lease.pipeline(commands)

    def enter(self) -> Connection:
        self.blocks += 1
        return self

    def leave(self) -> None:
        """The end of a block: at the outermost one's, a connection left with something open
        is closed (given back to the pool to be made anew), not lent again as it is."""
        self.blocks -= 1
        if self.open and not self.blocks:
            self.open = 0
            self._lease.drop()


class AsyncConnection:
    """What ``async with wurk.redis()`` yields: the same two methods, awaited, on one
    connection held for the block (no pool checkout per command)."""

    __slots__ = ("_connection", "_url", "broken", "open")

    def __init__(self, connection: Any, url: str) -> None:
        self._connection = connection
        self._url = url
        # Out of step (cut, or cancelled mid-reply), or reaching a demoted primary (it read a
        # failover reply): closed at the block's end, not kept for the next block.
        self.broken = False
        self.open = 0  # what its commands left open (``_left_open``): closed at the end too

    async def call(self, *args: Any) -> Any:
        """One command; the raw reply (``await conn.call("INCR", "hits")``)."""
        return (await self._send([args]))[0]

    async def pipeline(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Several commands in one round trip; error replies come back in place."""
        return await self._send(commands, in_place=True)

    async def _send(self, commands: list[tuple[Any, ...]], *, in_place: bool = False
                    ) -> list[Any]:
        connection = self._connection
        self.open = _left_open(self.open, commands)
        self.broken = True  # until every reply is read
        refused: redis_py.ResponseError | None = None
        try:
            await connection.send_packed_command(connection.pack_commands(commands),
                                                 check_health=False)
            replies = []
            for _ in commands:
                try:
                    replies.append(await connection.read_response())
                except redis_py.ResponseError as exc:
                    refused = refused or exc
                    replies.append(exc)
        except CONNECTION_ERRORS as exc:
            raise unavailable(exc, self._url) from exc
        self.broken = False
        if refused is not None:
            retire = retry_replies(self._url)
            self.broken = any(isinstance(reply, redis_py.ResponseError)
                              and reply_code(reply) in retire for reply in replies)
            if not in_place:
                raise_refusal(refused, self._url)
        return replies


# Each loop's kept connections, beside the configuration's pool they came from (a pool
# closed and made anew gets a fresh set).
_idles: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop,
                                  dict[int, tuple[Config, AsyncRedisPool, _Idle]]] = \
    weakref.WeakKeyDictionary()


class _Idle(Kept):
    """One loop's connections: at most ``ASYNC_POOL_SIZE`` blocks hold one at once (the
    others wait their turn, up to the socket timeout), and a block's connection is kept for
    the next block, since taking one from redis-py's pool costs more than the command it
    serves (the newest is taken first). One idle longer than ``IDLE_RECHECK`` goes back
    through the pool, whose health check sees a dropped one; one idle longer than the pool's
    ``idle_timeout`` (``redis_idle_timeout``) is closed — when it is taken, when a block puts
    one back (the oldest is looked at), or when the pool looks (``AsyncRedisPool.keep``)."""

    __slots__ = ("turns",)

    def __init__(self) -> None:
        super().__init__()
        self.turns = asyncio.Semaphore(ASYNC_POOL_SIZE)


# Seconds a kept connection may sit idle before the pool checks it again.
IDLE_RECHECK = 10.0


def async_pool(config: Config | None = None) -> tuple[Any, str]:
    """The running loop's asyncio connection pool for ``config`` (the configuration's, made
    on first use) and its URL; nothing taken from it is ever replayed."""
    pool = (config or default_config()).async_pool()
    return pool.connections, pool.url


def _idle(config: Config | None) -> tuple[AsyncRedisPool, _Idle]:
    """The running loop's pool for ``config`` and its kept connections, from one look: a
    close from another thread between two looks would pair a pool with another's set."""
    cfg = config or default_config()
    pool = cfg.async_pool()
    idles = _idles.setdefault(pool.loop, {})
    entry = idles.get(id(cfg))
    if entry is None or entry[0] is not cfg or entry[1] is not pool:
        entry = idles[id(cfg)] = (cfg, pool, _Idle())
        pool.keep(entry[2])
    return pool, entry[2]


class _Holding(threading.local):
    def __init__(self) -> None:
        self.connection: Connection | None = None  # the thread's current lent connection
        self.pool: RedisPool | None = None  # set while a processor lends its own


_held = _Holding()


class Borrowed:
    """The context manager ``wurk.redis()`` returns (a class, not a generator: it runs in
    every job that touches Redis, and this is the cheaper of the two)."""

    __slots__ = ("_async", "_config", "_lease", "_lent")

    def __init__(self, config: Config | None) -> None:
        self._config = config
        self._lease: Lease | None = None  # checked out by this block, given back at its end
        self._lent: Connection | None = None  # what this block yielded
        # The async form's held connection, with the pool and idle set it came from, where it
        # goes back (the configuration's may be closed and made anew while the block runs).
        self._async: tuple[AsyncConnection, AsyncRedisPool, _Idle] | None = None

    def __enter__(self) -> Connection:
        held = _held
        shard = chosen_shard() if self._config is None else None
        if shard is not None:  # inside ``wurk.via``: that shard's, for this block only
            self._lease = Lease(shard.pool("client"))
            connection = Connection(self._lease)
        elif held.connection is not None:  # nested, or a processor's kept connection
            connection = held.connection
        elif held.pool is not None:  # a processor thread's first borrow: kept for later jobs
            connection = held.connection = Connection(Lease(held.pool))
        else:
            self._lease = Lease((self._config or default_config()).pool("client"))
            connection = held.connection = Connection(self._lease)
        self._lent = connection
        return connection.enter()

    def __exit__(self, *exc_info: object) -> None:
        lent, self._lent = self._lent, None
        if lent is not None:
            lent.leave()
        lease, self._lease = self._lease, None
        if lease is not None:
            held = _held.connection
            if held is not None and held._lease is lease:
                _held.connection = None
            lease.release()

    async def __aenter__(self) -> AsyncConnection:
        found, idle = _idle(self._config)
        url = found.url
        timeout = (self._config or default_config()).socket_timeout or None
        try:
            await asyncio.wait_for(idle.turns.acquire(), timeout)
        except TimeoutError:
            raise unavailable(redis_py.ConnectionError(
                f"no connection free within {timeout} s ({ASYNC_POOL_SIZE} in use)"),
                url) from None
        try:
            connection = AsyncConnection(await self._take(found, idle, url), url)
        except BaseException:
            idle.turns.release()
            raise
        self._async = (connection, found, idle)
        return connection

    @staticmethod
    async def _take(found: AsyncRedisPool, idle: _Idle, url: str) -> Any:
        pool = found.connections
        timeout = found.idle_timeout
        now = pool.clock.monotonic()
        while idle.connections:
            connection, since = idle.connections.pop()
            age = now - since
            if age < IDLE_RECHECK and (timeout is None or age <= timeout):
                return connection
            if timeout is not None and age > timeout:
                await found.close_kept([connection])  # redis_idle_timeout: closed
            else:  # through the pool's health check again, idle since it was put back
                await pool.release(connection, idle_since=since)
        try:
            return await pool.get_connection()  # type: ignore[no-untyped-call]
        except CONNECTION_ERRORS as exc:
            raise unavailable(exc, url) from exc

    async def __aexit__(self, *exc_info: object) -> None:
        taken, self._async = self._async, None
        if taken is None:
            return
        held, found, idle = taken
        try:
            if held.broken or held.open:
                await held._connection.disconnect()
                await found.connections.release(held._connection)
            else:
                kept = idle.connections
                now = found.connections.clock.monotonic()
                kept.append((held._connection, now))
                timeout = found.idle_timeout  # then the oldest kept: one comparison
                if timeout is not None and now - kept[0][1] > timeout:
                    await found.close_kept(idle.stale(now, timeout))
        finally:
            idle.turns.release()


def redis(config: Config | None = None) -> Borrowed:
    """Borrow a Redis connection for the block: ``with wurk.redis() as conn: conn.call(...)``,
    or in async code ``async with wurk.redis() as conn: await conn.call(...)``.
    ``config`` picks the client pool outside a worker (the process-wide default if None)."""
    return Borrowed(config)


def kept() -> bool:
    """Whether ``wurk.redis()`` in this thread lends a processor's own connection, which
    nobody else waits for (so a blocking wait on it holds up no other thread)."""
    return _held.pool is not None


@contextmanager
def lend_from(pool: RedisPool) -> Iterator[None]:
    """For a processor thread's whole life: jobs it runs borrow a connection of ``pool``,
    taken on first use and given back when the thread leaves the block."""
    held = _held
    held.pool = pool
    try:
        yield
    finally:
        held.pool = None
        connection, held.connection = held.connection, None
        if connection is not None:
            connection._lease.release()
