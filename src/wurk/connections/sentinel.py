"""Redis Sentinel: a ``redis+sentinel://`` URL, and pools that follow the primary it names.

1. ``parse`` reads the URL form (``docs/sentinel.md``)::

       redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]…]/SERVICE[/DB]
           [?sentinel_username=NAME&sentinel_password=SECRET]

   Hosts are the sentinels (port 26379 when left out); the user and password are the data
   nodes' (primary and replicas); ``sentinel_username`` / ``sentinel_password`` the
   sentinels' own, when they have ``requirepass``. Anything else in it is refused with a
   ``ConfigError`` naming it: an option accepted that did nothing would be a lie.
2. ``blocking_pool`` / ``async_blocking_pool`` make redis-py's own Sentinel machinery
   (``redis.sentinel``) serve wurk's bounded pools: every new connection asks the
   sentinels where the primary is, so a connection closed after a failover (a broken one,
   or one retired for reading ``READONLY``) reconnects to the new primary. Each sentinel is
   asked in turn until one names a healthy primary: one that does not answer, answers an
   error (a plain Redis at that address) or a reply of the wrong shape is passed over.
3. A ``READONLY`` reply stays a ``READONLY`` reply here (redis-py's Sentinel connection
   turns it into a connection error): wurk's pools know it means "refused, not applied",
   retire the connection and try once more (``wurk.connections.pool``); a push is never
   replayed after a broken connection, and a refusal is no broken connection.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote

import redis
import redis.asyncio.sentinel as async_sentinel
import redis.sentinel as sync_sentinel
from redis.asyncio.connection import Connection as AsyncConnection
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.connection import Connection
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError

from ..errors import ConfigError
from .hostlist import CUT_SHORT, credentials, cut_short, host_list

__all__ = ["DEFAULT_PORT", "SCHEME", "SentinelTarget", "async_blocking_pool",
           "blocking_pool", "describe", "is_sentinel", "parse"]

SCHEME = "redis+sentinel"
DEFAULT_PORT = 26379
# The query parameters the URL form takes; any other is refused.
_QUERY = ("sentinel_username", "sentinel_password")
# The pool's settings the connections to the sentinels take too.
_SENTINEL_OPTIONS = ("socket_timeout", "socket_connect_timeout", "socket_keepalive")
FORM = ("redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/SERVICE[/DB]"
        "[?sentinel_username=NAME&sentinel_password=SECRET]")


@dataclass(frozen=True)
class SentinelTarget:
    """What a ``redis+sentinel://`` URL says."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None


def is_sentinel(url: str) -> bool:
    return url.lower().startswith(f"{SCHEME}://")


def parse(url: str) -> SentinelTarget:
    """The sentinels, service, db and credentials of ``url``; ``ConfigError`` naming what is
    wrong and the form otherwise."""
    if not is_sentinel(url):
        raise ConfigError(f"not a Sentinel URL (it must start with {SCHEME}://): {FORM}")
    rest = url[len(SCHEME) + 3:]
    netloc, _, tail = rest.partition("/")
    path, _, query = tail.partition("?")
    if cut_short(netloc, path):  # not the query: a sentinel_password may hold a '@'
        raise ConfigError(f"Sentinel URL: {CUT_SHORT}: {FORM}")
    hosts, username, password = credentials(netloc)
    parts = [part for part in path.split("/") if part]
    if not parts or len(parts) > 2:
        raise ConfigError(f"a Sentinel URL names the service (the master's name in the "
                          f"sentinels' configuration) and optionally a db: {FORM}")
    db = _db(parts[1]) if len(parts) == 2 else 0
    options = _query(query)
    return SentinelTarget(sentinels=_hosts(hosts), service=unquote(parts[0]), db=db,
                          username=username, password=password,
                          sentinel_username=options.get("sentinel_username"),
                          sentinel_password=options.get("sentinel_password"))


def _hosts(text: str) -> tuple[tuple[str, int], ...]:
    return host_list(text, url="Sentinel URL", member="sentinel", form=FORM,
                     default_port=DEFAULT_PORT)


def _db(text: str) -> int:
    if not (text.isascii() and text.isdigit()):  # "²" is a digit int() refuses
        raise ConfigError(f"Sentinel URL: the db after the service must be a number, not "
                          f"{text!r}: {FORM}")
    return int(text)


def _query(query: str) -> dict[str, str]:
    pairs = parse_qsl(query, keep_blank_values=True)
    options = dict(pairs)
    if len(options) < len(pairs):
        twice = next(name for name in options if [n for n, _ in pairs].count(name) > 1)
        raise ConfigError(f"Sentinel URL: option {twice!r} is given twice: {FORM}")
    unknown = sorted(set(options) - set(_QUERY))
    if unknown:
        raise ConfigError(f"Sentinel URL: unknown option {unknown[0]!r}; it takes "
                          f"{' and '.join(_QUERY)} only: {FORM}")
    return options


def describe(url: str) -> str:
    """``url`` without either password, for logs and errors."""
    try:
        target = parse(url)
    except ConfigError:
        return f"{SCHEME}://(not a valid Sentinel URL)"
    user = target.username or ""
    auth = f"{user}:***@" if target.password is not None else (f"{user}@" if user else "")
    hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in target.sentinels)
    query = "?sentinel_password=***" if target.sentinel_password is not None else ""
    return f"{SCHEME}://{auth}{hosts}/{target.service}/{target.db}{query}"


def _sentinel_kwargs(target: SentinelTarget, options: dict[str, Any],
                     retry: Any) -> dict[str, Any]:
    """How to reach the sentinels: the pool's timeouts, the sentinels' own credentials, and
    ``retry`` (none: redis-py's default retries a sentinel that does not answer three more
    times, with backoff, before the next one is asked)."""
    chosen = {name: value for name, value in options.items() if name in _SENTINEL_OPTIONS}
    chosen["retry"] = retry
    if target.sentinel_username is not None:
        chosen["username"] = target.sentinel_username
    if target.sentinel_password is not None:
        chosen["password"] = target.sentinel_password
    return chosen


# What one sentinel's answer can raise: an error reply (a server there that is no sentinel,
# a sentinel refusing), a broken connection, or a reply of the wrong shape (untrusted).
_SENTINEL_FAULTS = (redis.RedisError, OSError, KeyError, ValueError, TypeError,
                    AttributeError, IndexError)


# How much of the names a sentinel monitors an error quotes (they are the server's: untrusted).
_NAMES_SHOWN = 5
_NAME_LENGTH = 60


def _primary_named(manager: Any, masters: Any, service: str) -> tuple[str, int] | str:
    """The primary's address in one sentinel's ``SENTINEL MASTERS`` reply, if it names a
    healthy one, else why not (it monitors no such service, or sees its primary down);
    ``ValueError`` when the reply names it in a shape no sentinel sends."""
    state = masters.get(service)
    if not state:
        return f"monitors no master named {service!r} ({_monitored(masters)})"
    if not manager.check_master_state(state, service):
        flags = str(state.get("flags"))[:_NAME_LENGTH]
        return f"sees the primary of {service!r} down or not a primary (flags {flags})"
    host, port = state["ip"], state["port"]
    if not isinstance(host, str) or not host or not isinstance(port, int) \
            or not 0 < port < 65536:
        raise ValueError(f"the primary's address {host!r}:{port!r} is not HOST:PORT")
    return host, port


def _monitored(masters: Any) -> str:
    """The names a sentinel monitors, as an error quotes them: a few, each cut short."""
    names = [str(name)[:_NAME_LENGTH] for name in list(masters)[:_NAMES_SHOWN]]
    if not names:
        return "it monitors none"
    more = ", …" if len(masters) > _NAMES_SHOWN else ""
    return f"it monitors {', '.join(repr(name) for name in names)}{more}"


def _where(client: Any) -> str:
    """``sentinel HOST:PORT``: which sentinel a line is about (not redis-py's client repr,
    kilobytes of its settings)."""
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    host, port = kwargs.get("host", "?"), kwargs.get("port", "?")
    return f"sentinel [{host}]:{port}" if ":" in str(host) else f"sentinel {host}:{port}"


def _reason(exc: BaseException) -> str:
    """What went wrong asking one sentinel, in the error's own words (one line)."""
    text = " ".join(str(exc).split()).rstrip(".")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _not_found(service: str, errors: list[str]) -> MasterNotFoundError:
    detail = "; ".join(errors) if errors else "no sentinel to ask"
    return MasterNotFoundError(f"no sentinel named a primary for service {service!r}: "
                               f"{detail}")


def _answered(manager: Any, client: Any, masters: Any, service: str,
              errors: list[str]) -> tuple[str, int] | None:
    """The primary ``client`` (a sentinel) named in its reply (``masters``, or what asking it
    raised), moved to the front to be asked first next time; None, with the sentinel and
    why noted in ``errors``, when it named none or answered an error or a wrong shape."""
    try:
        if isinstance(masters, BaseException):
            raise masters
        found = _primary_named(manager, masters, service)
    except _SENTINEL_FAULTS as exc:
        errors.append(f"{_where(client)}: {_reason(exc)}")
        return None
    if isinstance(found, str):
        errors.append(f"{_where(client)}: {found}")
        return None
    with _reorder_lock:  # two threads' swaps by stale positions lost a sentinel
        sentinels = manager.sentinels
        for index, each in enumerate(sentinels):
            if each is client:
                sentinels[0], sentinels[index] = each, sentinels[0]
                break
    return found


# Moving the sentinel that answered to the front (``_answered``) is a read and two writes of
# the shared list: without this, two threads finding the primary at once could each swap by
# a position the other had changed, leaving one sentinel twice and another out.
_reorder_lock = threading.Lock()


class _Sentinel(sync_sentinel.Sentinel):
    """redis-py's Sentinel manager, asking every sentinel in turn until one names the
    primary: redis-py's stops at the first sentinel that answers an error reply (a plain
    Redis at that address, a refusal) or a reply of the wrong shape."""

    def discover_master(self, service_name: str) -> tuple[str, int]:
        errors: list[str] = []
        for client in list(self.sentinels):
            try:
                masters: Any = client.sentinel_masters()
            except _SENTINEL_FAULTS as exc:
                masters = exc
            if found := _answered(self, client, masters, service_name, errors):
                return found
        raise _not_found(service_name, errors)


class _AsyncSentinel(async_sentinel.Sentinel):
    """``_Sentinel`` for redis-py's asyncio client (the same, each sentinel awaited)."""

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        errors: list[str] = []
        for client in list(self.sentinels):
            try:
                masters: Any = await client.sentinel_masters()
            except _SENTINEL_FAULTS as exc:
                masters = exc
            if found := _answered(self, client, masters, service_name, errors):
                return found
        raise _not_found(service_name, errors)


class _Connection(sync_sentinel.SentinelManagedConnection):
    """redis-py's Sentinel connection, minus its turning ``READONLY`` into a connection
    error: the pool retires a connection that read it and tries once more (point 3)."""

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        return Connection.read_response(self, *args, **kwargs)


class _AsyncConnection(async_sentinel.SentinelManagedConnection):
    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        return await AsyncConnection.read_response(self, *args, **kwargs)


class _SparesInUse:
    """When the sentinels name a new primary, redis-py's Sentinel pool closes the idle
    connections (``disconnect(inuse_connections=False)``); redis-py before 6 has no such
    argument on its blocking pool, whose ``disconnect()`` would close connections other
    threads are using. Here the idle ones (those in the pool's queue) are closed alone."""

    pool: Any

    def disconnect(self, inuse_connections: bool = True) -> None:
        if inuse_connections:
            super().disconnect()  # type: ignore[misc]
            return
        for connection in list(self.pool.queue):
            if connection is not None:
                connection.disconnect()


_pool_classes: dict[tuple[type, type], type] = {}


def _with_sentinel(sentinel_pool: type, base: type, *mixins: type) -> type:
    """``base`` (a bounded, blocking pool of wurk's) that asks the sentinels where to
    connect: redis-py's Sentinel pool first in the method order, so its address lookup and
    its "a connection to an old primary is not mine" rule apply."""
    key = (sentinel_pool, base)
    if key not in _pool_classes:
        _pool_classes[key] = type(f"Sentinel{base.__name__}",
                                  (*mixins, sentinel_pool, base), {})
    return _pool_classes[key]


def blocking_pool(url: str, base: type, **options: Any) -> Any:
    """A pool of class ``base`` (a ``redis.BlockingConnectionPool``) for the primary of the
    Sentinel ``url``; ``options`` are the pool's and its connections' settings."""
    target = parse(url)
    manager = _Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        list(target.sentinels),
        sentinel_kwargs=_sentinel_kwargs(target, options, Retry(NoBackoff(), 0)))
    pool_class = _with_sentinel(sync_sentinel.SentinelConnectionPool, base, _SparesInUse)
    return pool_class(target.service, manager, is_master=True, connection_class=_Connection,
                      db=target.db, username=target.username, password=target.password,
                      **options)


def async_blocking_pool(url: str, base: type, **options: Any) -> Any:
    """``blocking_pool`` for redis-py's asyncio client (``base`` its blocking pool)."""
    target = parse(url)
    manager = _AsyncSentinel(  # type: ignore[no-untyped-call, unused-ignore]
        list(target.sentinels),
        sentinel_kwargs=_sentinel_kwargs(target, options, AsyncRetry(NoBackoff(), 0)))
    pool_class = _with_sentinel(async_sentinel.SentinelConnectionPool, base)
    return pool_class(target.service, manager, is_master=True,
                      connection_class=_AsyncConnection, db=target.db,
                      username=target.username, password=target.password, **options)
