"""Redis connection pools: bounded, named, timed out, and never replaying a write.

1. ``RedisPool`` wraps a bounded redis-py pool whose connections are named (``CLIENT SETNAME``
   and, where the server knows it, ``CLIENT SETINFO``) and time out (3 s by default).
2. redis-py's own retry is switched off: after a broken connection a ``LPUSH`` or ``INCR``
   may already have been applied, and replaying it would duplicate a job or a count.
   ``run(fn, idempotent=True)`` replays once, for reads and naturally idempotent writes only.
3. A failover reply (``READONLY``…, ``wurk.connections.replies``) means the command was refused, not
   applied: the connection that read it is retired (closed when it comes back to the pool)
   and the block runs once more, on another connection. Connections other threads hold —
   mid-``BLMOVE``, mid-job — are left alone: each finds out on its own next reply. Every
   other refusal and every broken connection reaches the caller as ``RedisUnavailable``.
4. ``take_connection`` / ``release_connection`` serve a thread that holds one connection
   for many commands (``wurk.connections.lease``).
5. ``send_all`` writes several commands in one write on one connection and reads every
   reply: a pipeline without redis-py's ``Pipeline`` object, for pushes (whose two commands
   cost less than that object's machinery). Never replayed; ``run`` applies the rules above.
   ``AsyncRedisPool.send_all`` is the same on an event loop.
6. ``AsyncRedisPool``: the same rules on redis-py's asyncio client, for one event loop
   (asyncio connections belong to the loop that opened them). ``Config.async_pool()``
   makes one per loop; ``aclose()`` on its loop, or ``close()`` from anywhere, ends its
   connections.
7. A ``redis+sentinel://`` URL makes both pools ask the sentinels where the primary is for
   each new connection (``wurk.connections.sentinel``): after a failover, every connection
   made anew reaches the promoted replica; the rules above stay as they are. A
   ``redis+cluster://`` URL makes them ask the cluster's nodes where its keyspace's slot is
   (``wurk.connections.cluster``), and a ``MOVED`` reply counts as a failover reply.
8. ``idle_timeout`` (the ``redis_idle_timeout`` setting): a connection waiting in the pool
   unused for longer is closed (and connects again at its next use). A connection coming
   back to the pool looks at the others at most once a second; ``close_idle`` looks at
   once (the worker's heartbeat calls it, for pools nobody uses). redis-py's pools have no
   such timeout (``health_check_interval`` pings a connection before use, keeping it open).
   ``AsyncRedisPool`` applies it the same way, on its own loop (an asyncio connection is
   closed by the loop that owns it): a connection given back looks at most once a second,
   a block's kept connection (``Kept``, ``wurk.connections.lending``) is looked at as it
   is put back or taken, and ``close_idle_soon`` (the heartbeat's, from its own thread)
   has the loop look at every one. A stale connection leaves the pool as it is closed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from typing import Any, TypeVar

import redis
import redis.asyncio as aredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from .._version import __version__
from ..runtime.clock import SYSTEM, Clock
from . import cluster, sentinel
from .packing import pack_all
from .replies import (
    CONNECTION_ERRORS,
    FAILOVER_REPLIES,
    SLOT_MOVED,
    raise_refusal,
    reply_code,
    retry_replies,
    unavailable,
)

__all__ = ["AsyncRedisPool", "Kept", "RedisPool"]

log = logging.getLogger("wurk")
T = TypeVar("T")


def _version() -> str:
    return __version__


class _RetiresOnFailover:
    """Mixed into the pool's connection class: a connection that reads a failover reply
    marks itself, so the pool closes it when it comes back (``_Pool.release``) rather than
    lending it again. Closing it at once would break a transaction whose later replies are
    still to be read on it."""

    saw_failover = False

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)  # type: ignore[misc]
        except redis.ResponseError as exc:
            if reply_code(exc) in FAILOVER_REPLIES or reply_code(exc) in SLOT_MOVED:
                self.saw_failover = True
            raise


_retiring_classes: dict[type, type] = {}


def _retiring(connection_class: type) -> type:
    """``connection_class`` (TCP, TLS or Unix socket, as the URL chose) with the mark."""
    if connection_class not in _retiring_classes:
        _retiring_classes[connection_class] = type(
            f"Retiring{connection_class.__name__}", (_RetiresOnFailover, connection_class), {})
    return _retiring_classes[connection_class]


class _Pool(redis.BlockingConnectionPool):
    # Seconds a connection may wait in the pool unused before it is closed (None: for ever),
    # by time of ``clock``; ``RedisPool`` sets both.
    idle_timeout: float | None = None
    clock: Clock = SYSTEM
    _next_look = 0.0

    def release(self, connection: Any) -> None:
        if getattr(connection, "saw_failover", False):
            connection.saw_failover = False
            connection.disconnect()  # reconnects on its next use: maybe to the new master
        timeout = self.idle_timeout
        if timeout is None:
            super().release(connection)  # type: ignore[no-untyped-call]
            return
        now = self.clock.monotonic()
        connection.wurk_idle_since = now
        super().release(connection)  # type: ignore[no-untyped-call]
        if now >= self._next_look:  # a look at most once per IDLE_LOOK of a busy pool
            self._next_look = now + min(timeout, IDLE_LOOK)
            self.close_idle()

    def close_idle(self) -> int:
        """Close the connections waiting in the pool unused for longer than
        ``idle_timeout``; returns how many. Each stays in the pool, closed: its next use
        connects it again (as ``disconnect`` leaves them). Under the queue's lock, so no
        thread takes one while it is being closed."""
        timeout = self.idle_timeout
        if timeout is None:
            return 0
        now = self.clock.monotonic()
        closed = 0
        waiting = self.pool
        with waiting.mutex:
            for connection in waiting.queue:
                if connection is None or getattr(connection, "_sock", None) is None:
                    continue  # a place for a connection not made yet, or one closed already
                if now - getattr(connection, "wurk_idle_since", now) > timeout:
                    connection.disconnect()
                    closed += 1
        return closed


class _AsyncPool(aredis.BlockingConnectionPool):
    """redis-py's asyncio blocking pool with ``_Pool``'s idle timeout, for one loop."""

    idle_timeout: float | None = None
    clock: Clock = SYSTEM
    _next_look = 0.0

    async def release(self, connection: Any, idle_since: float | None = None) -> None:
        """Give ``connection`` back, idle since now (or ``idle_since``: a kept connection
        handed back after waiting outside the pool); at most once per ``IDLE_LOOK`` of a
        busy pool, close the others idle too long."""
        timeout = self.idle_timeout
        if timeout is None:
            await super().release(connection)
            return
        now = self.clock.monotonic()
        connection.wurk_idle_since = now if idle_since is None else idle_since
        await super().release(connection)
        if now >= self._next_look:
            self._next_look = now + min(timeout, IDLE_LOOK)
            await self.close_idle()

    async def close_idle(self) -> int:
        """Close the connections waiting in the pool unused for longer than
        ``idle_timeout``; how many. On the pool's loop. Each is taken out of the pool before
        it is closed (no task can take it meanwhile: no await between the look and the
        taking), so the pool makes a new one when it needs one."""
        timeout = self.idle_timeout
        if timeout is None:
            return 0
        now = self.clock.monotonic()
        waiting = self._available_connections
        stale = [connection for connection in waiting
                 if getattr(connection, "_writer", None) is not None
                 and now - getattr(connection, "wurk_idle_since", now) > timeout]
        if not stale:
            return 0
        gone = set(map(id, stale))
        waiting[:] = [connection for connection in waiting if id(connection) not in gone]
        for connection in stale:
            with suppress(Exception):
                await connection.disconnect()
        return len(stale)


class Kept:
    """Connections a holder took out of an ``AsyncRedisPool`` and keeps between its uses
    (async ``wurk.redis()`` blocks, ``wurk.connections.lending``), oldest first, each with
    the time (the pool's clock) it was put back. ``AsyncRedisPool.keep`` registers it, so
    the pool's idle timeout reaches these too."""

    __slots__ = ("__weakref__", "connections")

    def __init__(self) -> None:
        self.connections: deque[tuple[Any, float]] = deque()

    def stale(self, now: float, timeout: float) -> list[Any]:
        """Take out the connections kept unused for longer than ``timeout``: the oldest,
        from the front, so a look costs one comparison while none is stale."""
        connections = self.connections
        taken = []
        while connections and now - connections[0][1] > timeout:
            taken.append(connections.popleft()[0])
        return taken


def _driver_info() -> dict[str, Any]:
    """``CLIENT SETINFO`` naming wurk; redis-py ignores an error reply from old servers."""
    try:
        from redis.driver_info import DriverInfo
    except ImportError:  # redis-py < 7.1 spells it differently
        return {"lib_name": "wurk", "lib_version": _version()}
    return {"driver_info": DriverInfo().add_upstream_driver("wurk", _version())}


def _shut_down(sock: Any) -> None:
    """Shut down a transport's socket from any thread. asyncio's stand-in for it does this
    itself; uvloop's refuses (a ``TypeError``), so it goes through a duplicate of the
    descriptor: ``shutdown`` acts on the socket both name, and only the duplicate is closed."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
        return
    except TypeError:
        pass
    fd = sock.fileno()
    if fd < 0:  # closed already
        return
    with socket.socket(fileno=os.dup(fd)) as duplicate:
        duplicate.shutdown(socket.SHUT_RDWR)


def _raise_first_error(replies: list[Any]) -> list[Any]:
    """``send_all``'s replies, or the first error reply among them raised: once all are read,
    so the connection goes back in step (as redis-py's pipelines raise)."""
    for reply in replies:
        if isinstance(reply, redis.ResponseError):
            raise reply
    return replies


# Options of a TCP socket: a ``unix://`` connection's class refuses them (a ``TypeError`` at
# its first connection, every command of the process failing).
_TCP_ONLY_OPTIONS = ("socket_keepalive", "socket_keepalive_options")


def _for_scheme(url: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` without those a ``unix://`` URL's connections do not take."""
    if not url.lower().startswith("unix:"):
        return options
    return {name: value for name, value in options.items() if name not in _TCP_ONLY_OPTIONS}


def _sync_pool(url: str, **options: Any) -> _Pool:
    """The bounded pool for ``url``: a ``redis+sentinel://`` one follows the primary the
    sentinels name (``wurk.connections.sentinel``)."""
    options = _for_scheme(url, options)
    if sentinel.is_sentinel(url):
        return sentinel.blocking_pool(url, _Pool, **options)  # type: ignore[no-any-return]
    if cluster.is_cluster(url):
        return cluster.blocking_pool(  # type: ignore[no-any-return]
            url, _Pool, redis.Connection, **options)
    return _Pool.from_url(url, **options)


def _async_pool(url: str, **options: Any) -> _AsyncPool:
    options = _for_scheme(url, options)
    if sentinel.is_sentinel(url):
        return sentinel.async_blocking_pool(  # type: ignore[no-any-return]
            url, _AsyncPool, **options)
    if cluster.is_cluster(url):
        return cluster.async_blocking_pool(  # type: ignore[no-any-return]
            url, _AsyncPool, **options)
    return _AsyncPool.from_url(url, **options)


def _sentinel_clients(pool: Any) -> list[Any]:
    """The clients a Sentinel pool keeps to the sentinels themselves (none otherwise)."""
    return list(getattr(getattr(pool, "sentinel_manager", None), "sentinels", ()))


def _close_sentinels(pool: Any) -> None:
    for client in _sentinel_clients(pool):
        with suppress(Exception):
            client.close()


# A pool with an idle timeout looks for connections idle too long when one comes back, at
# most this often (seconds): a busy pool's releases cost one clock read each, not a scan.
IDLE_LOOK = 1.0


# Bytes a connection reads at a time (see ``RedisPool``): a fetch of eight jobs of ordinary
# size is one read.
READ_BUFFER = 16 * 1024


class RedisPool:
    """A bounded, named pool of connections to one Redis."""

    def __init__(self, url: str, *, size: int = 10, name: str = "wurk",
                 socket_timeout: float = 3.0,
                 client_class: type[redis.Redis] = redis.Redis,
                 idle_timeout: float | None = None, clock: Clock = SYSTEM) -> None:
        self.url = url
        self.size = size
        self.name = name
        self.socket_timeout = socket_timeout
        self._pool = _sync_pool(
            url,
            max_connections=size,
            timeout=socket_timeout,  # how long to wait for a free connection
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
            socket_keepalive=True,
            # Each connection's parser keeps a read buffer this size, zeroed, for as long as
            # the connection lives: redis-py's 64 KiB made 1.3 MB of a worker's memory over
            # its 20 connections. Replies larger than this take more than one read.
            socket_read_size=READ_BUFFER,
            client_name=name,
            retry=Retry(NoBackoff(), 0),
            **_driver_info(),
        )
        # Before any connection exists: the class the URL's scheme chose, with the mark.
        self._pool.connection_class = _retiring(self._pool.connection_class)
        self.idle_timeout = self._pool.idle_timeout = idle_timeout
        self._pool.clock = clock
        self.client: redis.Redis = client_class(connection_pool=self._pool)
        self._pid = os.getpid()
        self._retry_replies = retry_replies(url)

    def run(self, fn: Callable[[redis.Redis], T], *, idempotent: bool = False) -> T:
        """Run ``fn`` against the pool; replay it once only when ``idempotent``."""
        try:
            return fn(self.client)
        except redis.ResponseError as exc:
            if reply_code(exc) not in self._retry_replies:
                raise_refusal(exc, self.url)
            # Logged at debug only: the loops that retry report the outage once. The
            # connection that read the reply was retired as it came back to the pool.
            log.debug("redis answered %s; trying once more on another connection", exc)
            return self._second_try(fn)
        except CONNECTION_ERRORS as exc:
            if not idempotent:
                raise unavailable(exc, self.url) from exc
            return self._second_try(fn)

    def _second_try(self, fn: Callable[[redis.Redis], T]) -> T:
        try:
            return fn(self.client)
        except redis.ResponseError as exc:
            raise_refusal(exc, self.url)
        except CONNECTION_ERRORS as exc:
            raise unavailable(exc, self.url) from exc

    def send_all(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """``commands`` in one write on one connection, every reply read: a pipeline
        without redis-py's ``Pipeline`` object. A single push is two commands, and the
        object's command stack, per-command hooks and reply callbacks cost it more CPU than
        wurk's own work on the push. An error reply is raised once every reply is read (the
        connection goes back in step); a connection broken or cut short is closed, never
        replayed. Run it through ``run`` for the failover and outage rules."""
        packed = pack_all(commands)  # before a connection is taken: a bad argument costs none
        connection = self.take_connection()
        try:
            connection.send_packed_command([packed], check_health=False)
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(connection.read_response())
                except redis.ResponseError as exc:
                    replies.append(exc)
        except BaseException:
            connection.disconnect()  # out of step with its replies: never lent as it is
            raise
        finally:
            self.release_connection(connection)
        return _raise_first_error(replies)

    def pipeline(self, *, transaction: bool = False) -> Any:
        return self.client.pipeline(transaction=transaction)

    def take_connection(self) -> Any:
        """A redis-py connection of the pool, for a holder that speaks to it directly."""
        return self._pool.get_connection()  # type: ignore[no-untyped-call]

    def release_connection(self, connection: Any) -> None:
        self._pool.release(connection)

    def close_idle(self) -> int:
        """Close the connections idle in the pool longer than its ``idle_timeout`` (the
        ``redis_idle_timeout`` setting); how many. A connection coming back to the pool
        does this too (at most once a second); the worker's heartbeat does it for pools
        nobody uses."""
        return self._pool.close_idle()

    def reset_after_fork(self) -> None:
        """Forget inherited sockets without closing them: the parent still uses them."""
        self._pool.reset()  # type: ignore[no-untyped-call]

    def close(self) -> None:
        if os.getpid() == self._pid:
            self._pool.disconnect()
            _close_sentinels(self._pool)


class AsyncRedisPool:
    """A bounded, named pool of asyncio connections to one Redis, for one event loop."""

    def __init__(self, url: str, loop: asyncio.AbstractEventLoop, *, size: int = 100,
                 name: str = "wurk-async", socket_timeout: float = 3.0,
                 idle_timeout: float | None = None, clock: Clock = SYSTEM) -> None:
        self.url = url
        self.loop = loop
        self.size = size  # half at most kept by async ``wurk.redis()`` blocks (``lending``)
        # A blocking pool: a caller finding every connection taken waits its turn (up to
        # the socket timeout) instead of failing while the loop is merely busy.
        self.connections = _async_pool(
            url, max_connections=size, timeout=socket_timeout or None,
            socket_timeout=socket_timeout or None,
            socket_connect_timeout=socket_timeout or None, socket_keepalive=True,
            client_name=name, retry=AsyncRetry(NoBackoff(), 0), **_driver_info())
        self.idle_timeout = self.connections.idle_timeout = idle_timeout
        self.connections.clock = clock
        self.client: aredis.Redis = aredis.Redis(connection_pool=self.connections)
        self._kept: weakref.WeakSet[Kept] = weakref.WeakSet()
        self._looks: set[asyncio.Task[int]] = set()  # close_idle_soon's, until done

    @property
    def clock(self) -> Clock:
        """The clock idle times are read from (a test's ``ManualClock``, or real time)."""
        return self.connections.clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self.connections.clock = clock

    def keep(self, kept: Kept) -> None:
        """Have the idle timeout reach ``kept`` (connections of this pool kept outside it)."""
        self._kept.add(kept)

    async def close_kept(self, connections: list[Any]) -> None:
        """Close connections taken from a ``Kept`` and give them back to the pool (closed:
        connected anew at their next use)."""
        for connection in connections:
            with suppress(Exception):
                await connection.disconnect()
            await self.connections.release(connection)

    async def close_idle(self) -> int:
        """Close the connections idle longer than ``idle_timeout``, in the pool and kept
        outside it; how many. On the pool's loop."""
        timeout = self.idle_timeout
        if timeout is None:
            return 0
        now = self.clock.monotonic()
        stale = [connection for kept in list(self._kept)
                 for connection in kept.stale(now, timeout)]
        await self.close_kept(stale)
        return len(stale) + await self.connections.close_idle()

    def close_idle_soon(self) -> None:
        """``close_idle`` on the pool's loop, from any thread (the worker's heartbeat, for a
        loop with no block or command that would look): its connections belong to it. Does
        nothing without a timeout or with the loop stopped or closed."""
        if self.idle_timeout is None or self.loop.is_closed() or not self.loop.is_running():
            return
        with suppress(RuntimeError):  # the loop closing meanwhile: nothing left to close
            self.loop.call_soon_threadsafe(self._look)

    def _look(self) -> None:
        task = self.loop.create_task(self.close_idle())
        self._looks.add(task)
        task.add_done_callback(self._looks.discard)

    async def run(self, fn: Callable[[aredis.Redis], Awaitable[T]]) -> T:
        """Run ``fn`` against the pool, never replaying it after a broken connection. A
        failover reply means nothing was applied: the idle connections (to the old master)
        are closed and ``fn`` runs once more."""
        try:
            return await fn(self.client)
        except redis.ResponseError as exc:
            if reply_code(exc) not in retry_replies(self.url):
                raise_refusal(exc, self.url)
            log.debug("redis answered %s; trying once more on a new connection", exc)
            await self.connections.disconnect(inuse_connections=False)
        except CONNECTION_ERRORS as exc:
            raise unavailable(exc, self.url) from exc
        try:
            return await fn(self.client)
        except redis.ResponseError as exc:
            raise_refusal(exc, self.url)
        except CONNECTION_ERRORS as exc:
            raise unavailable(exc, self.url) from exc

    async def send_all(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """``RedisPool.send_all`` on this loop: ``commands`` in one write on one connection,
        every reply read, an error reply raised once all are read; a connection cancelled
        or broken between its write and its last reply is closed, never replayed."""
        packed = pack_all(commands)  # before a connection is taken: a bad argument costs none
        connection = await self.connections.get_connection()  # type: ignore[no-untyped-call]
        try:
            await connection.send_packed_command([packed], check_health=False)
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(await connection.read_response())
                except redis.ResponseError as exc:
                    replies.append(exc)
        except BaseException:
            await connection.disconnect(nowait=True)  # out of step with its replies
            raise
        finally:
            await self.connections.release(connection)
        return _raise_first_error(replies)

    async def aclose(self) -> None:
        """Close every connection; on the pool's own loop."""
        await self.connections.aclose()
        for client in _sentinel_clients(self.connections):
            await client.aclose()

    def close(self) -> None:
        """Close every connection from sync code, whatever the loop is doing now (running
        here or in another thread, stopped, closed): each socket is shut down, so Redis
        drops the client at once; a transport on a live loop is closed as well, which
        frees its file descriptor when that loop next runs. Never awaits."""
        for pool in (self.connections,
                     *(client.connection_pool for client in _sentinel_clients(self.connections))):
            self._shut(pool)

    def _shut(self, pool: Any) -> None:
        idle = list(pool._available_connections)
        for connection in [*idle, *pool._in_use_connections]:
            writer = getattr(connection, "_writer", None)
            if writer is None:
                continue
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with suppress(OSError):
                    _shut_down(sock)  # a command in flight fails at once
            if not self.loop.is_closed():
                with suppress(RuntimeError):  # a loop closing in another thread meanwhile
                    self.loop.call_soon_threadsafe(writer.close)
        for connection in idle:  # not in use: nothing reads these fields any more
            connection._writer = connection._reader = None
        pool._available_connections.clear()
