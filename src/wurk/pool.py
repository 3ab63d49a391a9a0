"""Redis connection pools: bounded, named, timed out, and never replaying a write.

1. ``RedisPool`` wraps a bounded redis-py pool whose connections are named (``CLIENT SETNAME``
   and, where the server knows it, ``CLIENT SETINFO``) and time out (3 s by default).
2. redis-py's own retry is switched off: after a broken connection a ``LPUSH`` or ``INCR``
   may already have been applied, and replaying it would duplicate a job or a count.
   ``run(fn, idempotent=True)`` replays once, for reads and naturally idempotent writes only.
3. A failover reply (``READONLY``…, ``wurk.replies``) means the command was refused, not
   applied: the pool reconnects and the block runs once more. Every other refusal and every
   broken connection reaches the caller as ``RedisUnavailable``.
4. ``take_connection`` / ``release_connection`` serve a thread that holds one connection
   for many commands (``wurk.lease``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .replies import CONNECTION_ERRORS, FAILOVER_REPLIES, raise_refusal, reply_code, unavailable

__all__ = ["RedisPool"]

log = logging.getLogger("wurk")
T = TypeVar("T")


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
            if reply_code(exc) not in FAILOVER_REPLIES:
                raise_refusal(exc, self.url)
            # Logged at debug only: the loops that retry report the outage once.
            log.debug("redis answered %s; reconnecting and trying once more", exc)
            self._pool.disconnect()
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

    def pipeline(self, *, transaction: bool = False) -> Any:
        return self.client.pipeline(transaction=transaction)

    def take_connection(self) -> Any:
        """A redis-py connection of the pool, for a holder that speaks to it directly."""
        return self._pool.get_connection()  # type: ignore[no-untyped-call]

    def release_connection(self, connection: Any) -> None:
        self._pool.release(connection)  # type: ignore[no-untyped-call]

    def reset_after_fork(self) -> None:
        """Forget inherited sockets without closing them: the parent still uses them."""
        self._pool.reset()  # type: ignore[no-untyped-call]

    def close(self) -> None:
        if os.getpid() == self._pid:
            self._pool.disconnect()
