"""Counting round trips to Redis in a benchmark: every request written to a Redis socket by
redis-py's connection (a command, or a whole pipeline) is one."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import redis


class RoundTrips:
    """``count`` goes up by one per request written while ``counting()`` is open."""

    def __init__(self) -> None:
        self.count = 0

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        connection = redis.connection.AbstractConnection
        original = connection.send_packed_command

        def counted(conn: Any, command: Any, check_health: bool = True) -> None:
            self.count += 1
            original(conn, command, check_health)

        connection.send_packed_command = counted  # type: ignore[method-assign]
        try:
            yield
        finally:
            connection.send_packed_command = original  # type: ignore[method-assign]
