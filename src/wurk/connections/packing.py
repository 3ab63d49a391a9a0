"""Commands in Redis's wire protocol, packed by hiredis, for code that writes to a
connection's socket itself (``wurk.connections.lease``) or through redis-py's connection without its
command layers (``RedisPool.send_all``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import hiredis
import redis

__all__ = ["pack", "pack_all"]


def pack(command: tuple[Any, ...]) -> bytes:
    """One command in the wire protocol, by hiredis (redis-py's packer, without its
    encoder's layers: each argument is one word, as given; ``str`` goes as UTF-8). A word it
    cannot send is a ``redis.DataError`` naming the command, before anything is sent."""
    try:
        return bytes(hiredis.pack_command(command))
    except (TypeError, UnicodeEncodeError) as exc:  # a word of no wire type, or a lone surrogate
        raise redis.DataError(f"cannot send {command[:1]!r} to Redis: {exc}") from exc


def pack_all(commands: Iterable[tuple[Any, ...]]) -> bytes:
    return b"".join([pack(command) for command in commands])
