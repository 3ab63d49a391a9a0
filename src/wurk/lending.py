"""``wurk.redis()``: a connection lent to application code, as ``Sidekiq.redis`` lends one.

1. Inside a job, the processor running it lends its own connection: taken on the first
   ``wurk.redis()`` of its thread, kept across jobs, given back when the processor stops. A
   job's Redis command then costs one round trip and no pool checkout.
2. Anywhere else (a web request, a script, an async job's event loop) a connection is
   checked out of the client pool for the outermost block and given back at its end.
3. Nested blocks in one thread share one connection, so a helper that opens its own block
   inside a job does not take a second one.

Commands are sent as written and replies come back raw (bytes, ints, lists), the way
``Sidekiq.redis`` hands out a ``redis-client`` connection; for redis-py's command methods,
keep a ``redis.Redis`` of your own. A connection that breaks, or whose command was cut
short (a shutdown interrupting the job mid-reply), is closed rather than lent again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .config import Config, default_config
from .lease import Lease
from .pool import RedisPool

__all__ = ["Borrowed", "Connection", "kept", "lend_from", "redis"]


class Connection:
    """What ``wurk.redis()`` yields: ``call`` one command, or ``pipeline`` several."""

    __slots__ = ("_lease",)

    def __init__(self, lease: Lease) -> None:
        self._lease = lease

    def call(self, *args: Any) -> Any:
        """One command, one round trip: ``conn.call("INCR", "hits")`` returns the raw reply.
        An error reply raises ``redis.ResponseError``; an unreachable or refusing server
        raises ``wurk.RedisUnavailable``."""
        return self._lease.call(*args)

    def pipeline(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Several commands in one round trip; an error reply comes back in its place as a
        ``redis.ResponseError`` instance, so one refusal does not hide the other replies."""
        return self._lease.pipeline(commands)


class _Holding(threading.local):
    def __init__(self) -> None:
        self.connection: Connection | None = None  # the thread's current lent connection
        self.pool: RedisPool | None = None  # set while a processor lends its own


_held = _Holding()


class Borrowed:
    """The context manager ``wurk.redis()`` returns (a class, not a generator: it runs in
    every job that touches Redis, and this is the cheaper of the two)."""

    __slots__ = ("_config", "_lease")

    def __init__(self, config: Config | None) -> None:
        self._config = config
        self._lease: Lease | None = None  # checked out by this block, given back at its end

    def __enter__(self) -> Connection:
        held = _held
        connection = held.connection
        if connection is not None:  # nested, or a processor's kept connection
            return connection
        if held.pool is not None:  # a processor thread's first borrow: kept for later jobs
            connection = held.connection = Connection(Lease(held.pool))
            return connection
        self._lease = Lease((self._config or default_config()).pool("client"))
        connection = held.connection = Connection(self._lease)
        return connection

    def __exit__(self, *exc_info: object) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            _held.connection = None
            lease.release()


def redis(config: Config | None = None) -> Borrowed:
    """Borrow a Redis connection for the block: ``with wurk.redis() as conn: conn.call(...)``.
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
