"""The reading client of the dashboard and the command line: a key of the wrong Redis type
reads as absent, never as an error.

Everything read from Redis was written by someone else. A ``queues`` key that is a string,
a batch record that is a list, a limiter's metadata that is a set — left by hand at
``redis-cli``, by another program, by an attacker — makes Redis answer ``WRONGTYPE`` to the
command that reads it. Before, that error ended the whole page (a 500) or the whole listing
(a traceback), whichever key it was.

1. ``ReadingRedis`` (the client of the ``api`` and ``web`` pools) answers a read command that
   meets a key of the wrong type with what an absent key gives — ``None``, ``0``, an empty
   list, set or mapping — and logs a warning naming the key once. Only read commands
   (``READS``) are answered so; a write that meets the wrong type still raises.
2. Its pipelines do the same, reply by reply (the other replies are kept) — unless the
   caller runs one with ``raise_on_error=False``, which means it looks at each error reply
   itself (and may show it as a problem of that record).

What is stored in a key of the right type is checked where it is read (``wurk.stored``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import redis
import redis.client

__all__ = ["READS", "ReadingRedis"]

log = logging.getLogger("wurk")

# What an absent key answers, by read command (the others raise as ever).
_ABSENT: dict[str, Any] = {
    "GET": None, "HGET": None, "LINDEX": None, "ZSCORE": None, "ZRANK": None,
    "ZREVRANK": None, "LPOS": None, "SRANDMEMBER": None, "GETRANGE": b"",
    "HGETALL": {}, "SMEMBERS": set(),
    "HLEN": 0, "SCARD": 0, "LLEN": 0, "ZCARD": 0, "ZCOUNT": 0, "STRLEN": 0, "SISMEMBER": 0,
    "HEXISTS": 0, "ZLEXCOUNT": 0,
    "LRANGE": [], "ZRANGE": [], "ZREVRANGE": [], "ZRANGEBYSCORE": [],
    "ZREVRANGEBYSCORE": [], "HKEYS": [], "HVALS": [],
    "SSCAN": (0, []), "HSCAN": (0, {}), "ZSCAN": (0, []),
}
READS = frozenset({*_ABSENT, "HMGET", "BITFIELD_RO"})
# Keys warned about, at most this many (an attacker's million keys cost no memory).
_WARNED_LIMIT = 1000
_warned: set[str] = set()
_warned_lock = threading.Lock()


def _absent(command: tuple[Any, ...]) -> Any:
    name = str(command[0]).upper()
    if name == "HMGET":
        return [None] * (len(command) - 2)
    if name == "BITFIELD_RO":
        return [0] * sum(1 for part in command if str(part).upper() == "GET")
    found = _ABSENT[name]
    return found.copy() if isinstance(found, (dict, set, list)) else found


def _wrong_type(exc: BaseException, command: tuple[Any, ...]) -> bool:
    return (isinstance(exc, redis.ResponseError) and str(exc).startswith("WRONGTYPE")
            and str(command[0]).upper() in READS)


def _warn(command: tuple[Any, ...]) -> None:
    key = command[1] if len(command) > 1 else "?"
    text = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
    with _warned_lock:
        if text in _warned or len(_warned) >= _WARNED_LIMIT:
            return
        _warned.add(text)
    log.warning("Redis key %r holds a value of another type than wurk reads there (%s): "
                "read as absent; delete or repair the key", text[:200], command[0])


class ReadingRedis(redis.Redis):
    """A redis-py client whose read commands take a key of the wrong type as absent."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        except redis.ResponseError as exc:
            if not _wrong_type(exc, args):
                raise
            _warn(args)
            return _absent(args)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        return ReadingPipeline(self.connection_pool, self.response_callbacks, transaction,
                               shard_hint)


class ReadingPipeline(redis.client.Pipeline):
    """The same rule for each reply of a pipeline."""

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        if not raise_on_error:  # the caller reads each error reply itself
            return list(super().execute(raise_on_error=False))
        commands = [args for args, _ in self.command_stack]
        replies = list(super().execute(raise_on_error=False))
        for index, (command, reply) in enumerate(zip(commands, replies, strict=False)):
            if isinstance(reply, BaseException) and _wrong_type(reply, command):
                _warn(command)
                replies[index] = _absent(command)
        if raise_on_error:
            for reply in replies:
                if isinstance(reply, BaseException):
                    raise reply
        return replies
