"""Redis connections: one pool factory, timeouts on every call, replay only when safe.

1. ``RedisPool`` wraps a bounded redis-py pool whose connections are named (``CLIENT SETNAME``
   and, where the server knows it, ``CLIENT SETINFO``) and time out (3 s by default).
2. redis-py's own retry is switched off (``decisions.md`` 17): after a broken connection a
   ``LPUSH`` or ``INCR`` may already have been applied, and replaying it duplicates a job or a
   count. ``run(fn, idempotent=True)`` replays once, for reads and naturally idempotent writes
   only (the seed's ``PoolCheckout`` rule).
3. ``READONLY``/``NOREPLICAS``/``UNBLOCKED`` replies (failover leftovers) mean the command was
   refused, not applied: the pool reconnects and the block runs once more.
4. Every reply that refuses a command for a while — the server is loading its data
   (``LOADING``), running a long script (``BUSY``), a replica (``READONLY``), out of memory
   (``OOM``) — and every broken connection reach the caller as ``RedisUnavailable``, so the
   loops that retry (``wurk.outage``) and the code that pushes see one kind of error.
5. ``resolve_url`` finds Redis: ``REDIS_URL`` (read into the config), the configured URL, then
   the embedded server (``api.md`` "Finding Redis").
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
import struct
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar
from urllib.parse import urlsplit, urlunsplit

import hiredis
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .errors import EmbeddedServerError, RedisUnavailable

if TYPE_CHECKING:
    from .config import Config

__all__ = ["Lease", "RedisPool", "describe_url", "refusal", "resolve_url"]

log = logging.getLogger("wurk")
T = TypeVar("T")

_FAILOVER_REPLIES = frozenset({"READONLY", "NOREPLICAS", "UNBLOCKED"})
# Error replies that mean "not now" rather than "never": the command was refused, not applied.
_TRANSIENT_REPLIES = _FAILOVER_REPLIES | {"LOADING", "BUSY", "OOM", "MASTERDOWN", "TRYAGAIN",
                                          "CLUSTERDOWN"}
_CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)
# redis-py strips the code from the message of the replies it has a class for; these give
# it back (most specific class first: MasterDownError is a ClusterDownError).
_CODE_OF_CLASS: tuple[tuple[type[Exception], str], ...] = (
    (redis.exceptions.ReadOnlyError, "READONLY"),
    (redis.exceptions.OutOfMemoryError, "OOM"),
    (redis.exceptions.BusyLoadingError, "LOADING"),
    (redis.exceptions.TryAgainError, "TRYAGAIN"),
    (redis.exceptions.MasterDownError, "MASTERDOWN"),
    (redis.exceptions.ClusterDownError, "CLUSTERDOWN"),
)


# redis-py prefixes the first error of a pipeline with this (and the command's position).
_PIPELINE_NOTE = "caused error: "


def reply_code(exc: BaseException) -> str:
    """The error reply's code (``READONLY``, ``BUSY``…), whichever way redis-py parsed it."""
    for cls, code in _CODE_OF_CLASS:
        if isinstance(exc, cls):
            return code
    text = str(exc)
    if _PIPELINE_NOTE in text:
        text = text.split(_PIPELINE_NOTE, 1)[1]
    return text.split(" ", 1)[0]


def refusal(exc: BaseException, url: str) -> RedisUnavailable | None:
    """A ``RedisUnavailable`` naming the refusal when ``exc`` is a transient error reply."""
    if not isinstance(exc, redis.RedisError):
        return None
    code = reply_code(exc)
    if code not in _TRANSIENT_REPLIES:
        return None
    text = str(exc)
    shown = text if text.startswith(code) else f"{code} {text}"
    return RedisUnavailable(f"{describe_url(url)} refused the command: {shown}")


def _version() -> str:
    from . import __version__

    return __version__


def _driver_info() -> dict[str, Any]:
    """``CLIENT SETINFO`` naming wurk; redis-py ignores an error reply from old servers."""
    try:
        from redis.driver_info import DriverInfo
    except ImportError:  # redis-py < 7.1 spells it differently
        return {"lib_name": "wurk", "lib_version": _version()}
    return {"driver_info": DriverInfo().add_upstream_driver("wurk", _version())}


class RedisPool:
    """A bounded, named pool of connections to one Redis."""

    def __init__(self, url: str, *, size: int = 10, name: str = "wurk",
                 socket_timeout: float = 3.0) -> None:
        self.url = url
        self.size = size
        self.name = name
        self.socket_timeout = socket_timeout
        self._pool = redis.BlockingConnectionPool.from_url(
            url,
            max_connections=size,
            timeout=socket_timeout,  # how long to wait for a free connection
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
            socket_keepalive=True,
            client_name=name,
            retry=Retry(NoBackoff(), 0),
            **_driver_info(),
        )
        self.client: redis.Redis = redis.Redis(connection_pool=self._pool)
        self._pid = os.getpid()

    def run(self, fn: Callable[[redis.Redis], T], *, idempotent: bool = False) -> T:
        """Run ``fn`` against the pool; replay it once only when ``idempotent``."""
        try:
            return fn(self.client)
        except redis.ResponseError as exc:
            if reply_code(exc) not in _FAILOVER_REPLIES:
                self._raise_refusal(exc)
            # Logged at debug only: the loops that retry report the outage once.
            log.debug("redis answered %s; reconnecting and trying once more", exc)
            self._pool.disconnect()
            return self._second_try(fn)
        except _CONNECTION_ERRORS as exc:
            if not idempotent:
                raise self._unavailable(exc) from exc
            return self._second_try(fn)

    def _second_try(self, fn: Callable[[redis.Redis], T]) -> T:
        try:
            return fn(self.client)
        except redis.ResponseError as exc:
            self._raise_refusal(exc)
        except _CONNECTION_ERRORS as exc:
            raise self._unavailable(exc) from exc

    def _raise_refusal(self, exc: redis.ResponseError) -> NoReturn:
        """``RedisUnavailable`` for a transient refusal; any other reply (a bug, a wrong
        type) is raised as it is."""
        unavailable = refusal(exc, self.url)
        if unavailable is None:
            raise exc
        raise unavailable from exc

    def _unavailable(self, exc: Exception) -> RedisUnavailable:
        return refusal(exc, self.url) or RedisUnavailable(f"{describe_url(self.url)}: {exc}")

    def pipeline(self, *, transaction: bool = False) -> Any:
        return self.client.pipeline(transaction=transaction)

    def lease(self) -> Lease:
        return Lease(self)

    def reset_after_fork(self) -> None:
        """Forget inherited sockets without closing them: the parent still uses them."""
        self._pool.reset()  # type: ignore[no-untyped-call]

    def close(self) -> None:
        if os.getpid() == self._pid:
            self._pool.disconnect()


def describe_url(url: str) -> str:
    """The URL without its password, for logs."""
    parts = urlsplit(url)
    if parts.password:
        host = parts.hostname or ""
        netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
        parts = parts._replace(netloc=netloc)
    return urlunsplit(parts)


def resolve_url(config: Config) -> str:
    """``REDIS_URL`` (already folded into ``config.redis_url``), the config, else embedded.

    Logs which server it is, once per process and server (``decisions.md`` 24).
    """
    if config.redis_url:
        _announce(f"Redis: {describe_url(config.redis_url)}")
        return config.redis_url
    try:
        embedded = importlib.import_module("wurk.embedded")
    except ImportError as exc:  # pragma: no cover - the module ships with the package
        raise EmbeddedServerError(f"the embedded server module failed to load: {exc}") from exc
    url = str(embedded.ensure_running(config.home))
    _announce(f"Redis: embedded at {embedded.shown_home(config.home)}, port {urlsplit(url).port}")
    return url


# Each pool resolves the URL; saying where Redis is once per process is enough.
_announced: set[str] = set()


def _announce(line: str) -> None:
    if line not in _announced:
        _announced.add(line)
        log.info("%s", line)


def _kernel_timeouts(sock: Any, seconds: float) -> None:
    """Let the kernel time out a held connection's sends and receives.

    A Python socket with a timeout polls before every send and every receive, releasing
    the GIL around each poll: twice the system calls and GIL hand-offs of a blocking
    socket, on the path every job takes. A blocking socket with ``SO_RCVTIMEO`` /
    ``SO_SNDTIMEO`` still gives up after ``seconds`` (as ``EAGAIN``, which redis-py reports
    as a connection error, as it does a timeout). Plain TCP and Unix sockets on Linux only;
    TLS sockets and other systems keep Python's timeouts.
    """
    if type(sock) is not socket.socket or not sys.platform.startswith("linux") or seconds <= 0:
        return
    whole = int(seconds)
    timeval = struct.pack("@ll", whole, int((seconds - whole) * 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
    sock.settimeout(None)


def _pack(command: tuple[Any, ...]) -> bytes:
    """One command in the wire protocol, by hiredis (redis-py's packer, without the layers
    a lease does not need: each argument is one word, as given)."""
    try:
        return bytes(hiredis.pack_command(command))
    except TypeError as exc:
        raise redis.DataError(f"cannot send {command[:1]!r} to Redis: {exc}") from exc


def _pack_all(commands: list[tuple[Any, ...]]) -> bytes:
    return b"".join([_pack(command) for command in commands])


class Lease:
    """One connection held by one thread across many commands.

    A processor fetches thousands of times a second; taking a connection from the pool and
    going through redis-py's command machinery for each costs more CPU than the round trip
    itself. A lease keeps the connection and speaks to it directly. Nothing is ever
    replayed: a broken connection is dropped, reported as ``RedisUnavailable``, and the next
    call takes a fresh one.
    """

    def __init__(self, pool: RedisPool) -> None:
        self.pool = pool
        self._connection: Any = None
        self._unread = 0  # replies of commands written by ``send``, not read yet

    def call(self, *args: Any) -> Any:
        """One command, one round trip; a transient refusal raises ``RedisUnavailable``."""
        if self._unread:
            raise RuntimeError("Lease.call with replies unread: read them with pipeline()")
        packed = _pack(args)
        try:
            connection = self._take()
            connection.send_packed_command([packed], check_health=False)
            return connection.read_response()
        except redis.ResponseError as exc:
            self._after_refusal(exc)
            self.pool._raise_refusal(exc)
        except BaseException as exc:
            self._lost(exc)

    def send(self, commands: list[tuple[Any, ...]]) -> None:
        """Write commands without waiting for their replies: the next ``pipeline`` returns
        them first. Redis acts on them now; the caller learns how it went one round trip
        later. A broken connection raises ``RedisUnavailable``, and then whether they
        reached Redis is unknown."""
        packed = _pack_all(commands)
        try:
            self._take().send_packed_command([packed], check_health=False)
        except BaseException as exc:
            self._lost(exc)
        self._unread += len(commands)

    def pipeline(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Several commands in one round trip; error replies come back as exceptions in place,
        so one refused command does not desynchronise the connection. The replies of
        commands written earlier by ``send`` come first."""
        packed = _pack_all(commands)
        try:
            connection = self._take()
            if commands:
                connection.send_packed_command([packed], check_health=False)
            replies = [self._read(connection) for _ in range(self._unread + len(commands))]
            self._unread = 0
        except BaseException as exc:
            self._lost(exc)
        for reply in replies:
            if isinstance(reply, redis.ResponseError):
                self._after_refusal(reply)
        return replies

    def _lost(self, exc: BaseException) -> NoReturn:
        """The connection is out of step — broken, or a command cut short between request
        and reply (an interrupt): never used again. A broken one is ``RedisUnavailable``."""
        self._drop()
        if isinstance(exc, _CONNECTION_ERRORS):
            raise self.pool._unavailable(exc) from exc
        raise exc

    def _after_refusal(self, exc: redis.ResponseError) -> None:
        """A failover reply: this connection reaches a demoted master; the next one may
        reach the new master (through a proxy, Sentinel-aware DNS or a VIP)."""
        if reply_code(exc) in _FAILOVER_REPLIES:
            self._drop()

    @staticmethod
    def _read(connection: Any) -> Any:
        try:
            return connection.read_response()
        except redis.ResponseError as exc:
            return exc

    def _take(self) -> Any:
        if self._connection is None:
            connection = self.pool._pool.get_connection()  # type: ignore[no-untyped-call]
            _kernel_timeouts(connection._sock, self.pool.socket_timeout)
            self._connection = connection
        return self._connection

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        self._unread = 0
        if connection is not None:
            connection.disconnect()
            self.pool._pool.release(connection)  # type: ignore[no-untyped-call]

    def release(self) -> None:
        """Give the connection back to the pool (when the holder stops)."""
        if self._unread:  # replies still on the wire: the connection cannot be reused
            self._drop()
            return
        connection, self._connection = self._connection, None
        if connection is not None:
            if connection._sock is not None:  # back to redis-py's own way of timing out
                connection._sock.settimeout(self.pool.socket_timeout)
            self.pool._pool.release(connection)  # type: ignore[no-untyped-call]
