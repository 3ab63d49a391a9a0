"""Counting round trips to Redis in a benchmark: every request written to a Redis socket (a
command, or a whole pipeline) is one, by either of the two writers in a process.

1. redis-py's connections (``AbstractConnection.send_packed_command``): redis-py's commands
   and pipelines, and wurk's ``RedisPool.send_all`` (a push).
2. wurk's own (``wurk.connections.lease.Lease._write``): what ``wurk.redis()`` lends, the
   worker's fetches and ACKs, limiters. A write the kernel holds back for the next one
   (``Lease.send_one``'s MSG_MORE: a processor's ACK) goes out with that one and is not
   counted apart; a lease on a decoding pool writes through redis-py (counted there).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import redis
import redis.connection

from wurk.connections.lease import Lease


class RoundTrips:
    """``count`` goes up by one per request written while ``counting()`` is open."""

    def __init__(self) -> None:
        self.count = 0

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        connection = redis.connection.AbstractConnection
        original = connection.send_packed_command
        original_write = Lease._write

        def counted(conn: Any, command: Any, check_health: bool = True) -> None:
            self.count += 1
            original(conn, command, check_health)

        def counted_write(lease: Lease, conn: Any, packed: bytes, *, hold: bool = False) -> None:
            wire = lease._wire
            # Through redis-py (no wire): ``counted`` sees it. Held back: rides the next write.
            if wire is not None and not (hold and wire.hold and not lease._holding):
                self.count += 1
            original_write(lease, conn, packed, hold=hold)

        connection.send_packed_command = counted  # type: ignore[method-assign]
        Lease._write = counted_write  # type: ignore[method-assign]
        try:
            yield
        finally:
            connection.send_packed_command = original  # type: ignore[method-assign]
            Lease._write = original_write  # type: ignore[method-assign]
