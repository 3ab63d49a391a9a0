"""Paused queues, as every fetcher of a process sees them.

1. ``PausedCache.get()`` returns the ``paused`` set, re-read from Redis at most once per
   ``paused_cache_ttl`` seconds (5 s), so a pause reaches every process within that time
   without a round trip per fetch.
2. ``invalidate_local()`` drops every cache of this process at once: a pause or unpause made
   here is seen here immediately.
3. A failed read keeps the last known set: an outage must not un-pause. It is reported once
   per outage, and the outage's length logged at its end (``wurk.runtime.outage``).
4. A member that is no UTF-8 names no queue: it is left out, with a warning once. A key of
   another type than a set pauses nothing (as the dashboard reads it), with a warning once.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Iterable, Iterator

import redis

from ..config import Config
from ..connections.pool import RedisPool
from ..connections.replies import reply_code
from ..runtime.outage import Outage

__all__ = ["PausedCache", "invalidate_local"]

log = logging.getLogger("wurk")

_caches: weakref.WeakSet[PausedCache] = weakref.WeakSet()


def invalidate_local() -> None:
    for cache in list(_caches):
        cache.invalidate()


class PausedCache:
    """The ``paused`` set, cached for a short TTL; shared by a process's fetchers."""

    def __init__(self, config: Config, pool: RedisPool | None = None) -> None:
        self.key = config.keys.paused
        self.ttl = config.paused_cache_ttl
        self._pool = pool
        self._config = config
        self._lock = threading.Lock()
        self._value: frozenset[str] = frozenset()
        self._expires = 0.0
        self._outage = Outage(config, "paused queues")
        self._ignored: set[bytes] = set()  # members already warned about
        self._wrong_type = False  # the key held another type at the last read (warned)
        _caches.add(self)

    def get(self) -> frozenset[str]:
        if time.monotonic() < self._expires:
            return self._value
        with self._lock:
            if time.monotonic() >= self._expires:
                self._refresh()
            return self._value

    def _refresh(self) -> None:
        pool = self._pool or self._config.pool("internal")
        try:
            members = pool.run(lambda r: r.smembers(self.key), idempotent=True)
        except redis.ResponseError as exc:
            if reply_code(exc) != "WRONGTYPE":
                self._outage.failed(exc)  # the last known set stays
            else:  # written by something else: no queue paused, as the dashboard reads it
                self._value = frozenset()
                self._outage.ended()
                if not self._wrong_type:
                    self._wrong_type = True
                    log.warning("paused queues: %s holds another Redis type than a set "
                                "(written by something else): no queue is taken as paused; "
                                "delete the key to pause queues again", self.key)
        except Exception as exc:
            self._outage.failed(exc)  # the last known set stays
        else:
            self._wrong_type = False
            self._value = frozenset(self._names(members))
            self._outage.ended()
        self._expires = time.monotonic() + self.ttl

    def _names(self, members: Iterable[bytes | str]) -> Iterator[str]:
        """The queue names of the set's members. Anyone may have added one: a member that is
        no UTF-8 names no queue, and is left out with a warning (once per member)."""
        for member in members:
            if isinstance(member, str):
                yield member
                continue
            try:
                yield member.decode()
            except UnicodeDecodeError:
                if member not in self._ignored:
                    self._ignored.add(member)
                    log.warning("paused queues: ignoring a member of %s that is no queue's "
                                "name (not UTF-8): %r", self.key, member[:100])

    def invalidate(self) -> None:
        self._expires = 0.0
