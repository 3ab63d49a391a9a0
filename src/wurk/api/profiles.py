"""Job profiles as Sidekiq 8 keeps them: ``ProfileSet`` and its ``ProfileRecord``.

1. ``ProfileSet``: the ``profiles`` sorted set, each member ``<token>-<jid>`` naming a hash
   and scored by when it expires. ``prune()`` drops the expired members (Sidekiq's
   ``ZREMRANGEBYSCORE profiles -inf <now>``, which its dashboard runs before each listing);
   ``size()``, ``page(start, count)`` and iteration list the newest first (the latest
   expiry); ``find(key)``, ``data(key)`` and ``delete(key)`` act on one.
2. ``ProfileRecord``: the hash's fields (``started_at``, ``jid``, ``type``, ``token``,
   ``size``, ``elapsed``, ``filename``) read through ``wurk.stored``: a field that cannot be
   read is ``Invalid``, a member whose hash is gone or of another type has a ``problem``.
   ``data()`` is the stored gzip JSON (read only after its length is checked), ``flame()``
   its call tree (``wurk.profiling.flame``; ``Unreadable`` says why not).
3. ``delete`` removes the member, and the hash only when it is that profile's own (a script
   checks its token and jid): a member is read from Redis, and ``queues`` in the set must
   not delete the ``queues`` key.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import redis

from .. import scripts
from .. import stored as values
from ..config import Config, default_config
from ..connections.pool import RedisPool
from ..profiling.flame import Flame, Unreadable, parse
from ..stored import Invalid
from .paging import PAGE_SIZE, zset_entries

__all__ = ["DATA_LIMIT", "FIELDS", "ProfileRecord", "ProfileSet"]

# Read with each listed profile (its ``data`` only on demand).
FIELDS = ("started_at", "jid", "type", "token", "size", "elapsed", "filename")
# A stored profile is read at most this large: wurk stores at most 5 MB; what someone else
# stored past this is not read into a web process at all.
DATA_LIMIT = 64 * 1024 * 1024
_DELETE = scripts.Script("profile_delete.lua")


def _seconds(value: Any) -> float | Invalid | None:
    """A duration stored as text (``elapsed``): a finite number ≥ 0."""
    if value is None:
        return None
    text = values.text(value)
    try:
        seconds = float(text)
    except ValueError:
        return values.invalid(value, "seconds")
    return seconds if math.isfinite(seconds) and seconds >= 0 else values.invalid(
        value, "seconds")


def _raw(member: Any) -> bytes:
    return member if isinstance(member, bytes) else str(member).encode()


class ProfileRecord:
    """One stored profile (a snapshot of its fields; ``data`` is read on demand)."""

    def __init__(self, config: Config, key: str, expires_at: float,
                 fields: list[Any] | Invalid | None) -> None:
        self.config = config
        self.key = key
        self.expires_at = expires_at
        self.problem: str | None = None
        found = fields if isinstance(fields, list) else [None] * len(FIELDS)
        if isinstance(fields, Invalid):
            self.problem = "its key holds another type than a hash"
        elif all(value is None for value in found):
            self.problem = "its hash is gone (expired or deleted)"
        raw = dict(zip(FIELDS, found, strict=True))
        started = raw["started_at"]
        self.started_at = values.epoch(None if started is None else values.text(started))
        self.jid = values.text(raw["jid"])
        self.type = values.text(raw["type"])
        self.token = values.text(raw["token"])
        self.size = values.count(raw["size"])
        self.elapsed = _seconds(raw["elapsed"])
        self.filename = values.text(raw["filename"])

    def __repr__(self) -> str:
        return f"<ProfileRecord {self.key!r}>"

    @property
    def _hash(self) -> str:
        return self.config.keys.profile(self.key)

    def data(self) -> bytes | None:
        """The stored ``data`` (gzip JSON), or None: absent, not in a hash, or over
        ``DATA_LIMIT`` bytes."""
        key = self._hash

        def read(r: Any) -> bytes | None:
            pipe = r.pipeline(transaction=False)
            pipe.hstrlen(key, "data")
            length = values.replies(pipe)[0]
            if not isinstance(length, int) or not 0 < length <= DATA_LIMIT:
                return None
            found = r.hget(key, "data")
            return found if isinstance(found, bytes) and found else None

        found: bytes | None = self.config.pool("api").run(read, idempotent=True)
        return found

    def flame(self) -> Flame:
        """The profile's call tree; ``Unreadable`` (its message says why) when it has none
        that can be drawn."""
        data = self.data()
        if data is None:
            raise Unreadable("no profile data is stored (or it is over "
                             f"{DATA_LIMIT // (1024 * 1024)} MB)")
        return parse(data)

    def delete(self) -> bool:
        return ProfileSet(self.config).delete(self.key)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "expires_at": self.expires_at, "started_at": self.started_at,
                "jid": self.jid, "type": self.type, "token": self.token, "size": self.size,
                "elapsed": self.elapsed, "filename": self.filename, "problem": self.problem}


class ProfileSet:
    """The ``profiles`` sorted set: every profile kept, newest first."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config if config is not None else default_config()

    @property
    def key(self) -> str:
        return self.config.keys.profiles

    @property
    def _pool(self) -> RedisPool:
        return self.config.pool("api")

    def prune(self, now: float | None = None) -> int:
        """Drop the members whose day is over (their hashes expired on their own)."""
        at = time.time() if now is None else now
        try:
            return int(self._pool.run(lambda r: r.zremrangebyscore(self.key, "-inf", at),
                                      idempotent=True))
        except redis.ResponseError as exc:
            if not str(exc).startswith("WRONGTYPE"):
                raise
            return 0  # not a sorted set: the listing reads it as empty (wurk.stored)

    def size(self) -> int:
        return int(self._pool.run(lambda r: r.zcard(self.key), idempotent=True))

    def page(self, start: int, count: int) -> list[ProfileRecord]:
        """``count`` profiles from rank ``start``, newest first: one ``ZRANGE`` and one
        pipelined read of their fields."""
        if start < 0 or count < 1:
            raise ValueError(f"page needs start ≥ 0 and count ≥ 1, not {start!r}, {count!r}")
        def read(r: Any) -> list[tuple[Any, Any]]:
            return list(r.zrange(self.key, start, start + count - 1, desc=True,
                                 withscores=True))

        rows = self._pool.run(read, idempotent=True)
        return self._records([(_raw(member), float(score)) for member, score in rows])

    def iterate(self, page_size: int = PAGE_SIZE) -> Iterator[ProfileRecord]:
        """Every profile, newest first, in pages (``wurk.api.paging``'s guarantee)."""
        batch: list[tuple[bytes, float]] = []
        for entry in zset_entries(self._pool, self.key, page_size):
            batch.append(entry)
            if len(batch) == page_size:
                yield from self._records(batch)
                batch = []
        yield from self._records(batch)

    def __iter__(self) -> Iterator[ProfileRecord]:
        return self.iterate()

    def find(self, key: str) -> ProfileRecord | None:
        """The profile of member ``key`` (``<token>-<jid>``), or None when not listed."""
        if not key:
            return None
        score = self._pool.run(lambda r: r.zscore(self.key, key), idempotent=True)
        if score is None:
            return None
        return self._records([(key.encode(), float(score))])[0]

    def data(self, key: str) -> bytes | None:
        found = self.find(key)
        return found.data() if found is not None else None

    def delete(self, key: str) -> bool:
        """Remove the profile: its member, and its hash when the hash is its own."""
        if not key:
            return False
        replies = self._pool.run(lambda r: _DELETE.call_many(
            r, [([self.key, self.config.keys.profile(key)], [key])]))
        if isinstance(replies[0], Exception):
            raise replies[0]
        return bool(replies[0])

    def _records(self, entries: list[tuple[bytes, float]]) -> list[ProfileRecord]:
        """Records of ``(member, score)`` pairs; a member that is not UTF-8 text cannot name
        a hash wurk can read, and is listed with that problem."""
        named = [(values.utf8(member), member, score) for member, score in entries]
        keys = [self.config.keys.profile(text) for text, _, _ in named if text]

        def read(r: Any) -> list[Any]:
            if not keys:
                return []
            pipe = r.pipeline(transaction=False)
            for key in keys:
                pipe.hmget(key, *FIELDS)
            return values.replies(pipe)

        found = iter(self._pool.run(read, idempotent=True))
        records = []
        for text, member, score in named:
            record = ProfileRecord(self.config, text or values.text(member), score,
                                   next(found) if text else None)
            if not text:
                record.problem = "its member is not UTF-8 text"
            records.append(record)
        return records
