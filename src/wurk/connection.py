"""Redis connections: one pool factory, timeouts on every call, replay only when safe.

1. ``RedisPool`` wraps a bounded redis-py pool whose connections are named (``CLIENT SETNAME``
   and, where the server knows it, ``CLIENT SETINFO``) and time out (3 s by default).
2. redis-py's own retry is switched off (``decisions.md`` 17): after a broken connection a
   ``LPUSH`` or ``INCR`` may already have been applied, and replaying it duplicates a job or a
   count. ``run(fn, idempotent=True)`` replays once, for reads and naturally idempotent writes
   only (the seed's ``PoolCheckout`` rule).
3. ``READONLY``/``NOREPLICAS``/``UNBLOCKED`` replies (failover leftovers) mean the command was
   refused, not applied: the pool reconnects and the block runs once more.
4. ``resolve_url`` finds Redis: ``REDIS_URL`` (read into the config), the configured URL, then
   the embedded server (``api.md`` "Finding Redis").
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .errors import EmbeddedServerError, RedisUnavailable

if TYPE_CHECKING:
    from .config import Config

__all__ = ["RedisPool", "describe_url", "resolve_url"]

log = logging.getLogger("wurk")
T = TypeVar("T")

_FAILOVER_REPLIES = ("READONLY", "NOREPLICAS", "UNBLOCKED")
_CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)


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
            if not str(exc).startswith(_FAILOVER_REPLIES):
                raise
            log.warning("redis answered %s; reconnecting and trying once more", exc)
            self._pool.disconnect()
            return self._second_try(fn)
        except _CONNECTION_ERRORS as exc:
            if not idempotent:
                raise RedisUnavailable(f"{describe_url(self.url)}: {exc}") from exc
            return self._second_try(fn)

    def _second_try(self, fn: Callable[[redis.Redis], T]) -> T:
        try:
            return fn(self.client)
        except _CONNECTION_ERRORS as exc:
            raise RedisUnavailable(f"{describe_url(self.url)}: {exc}") from exc

    def pipeline(self, *, transaction: bool = False) -> Any:
        return self.client.pipeline(transaction=transaction)

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
