"""Processed/failed counters: counted in memory per job, flushed with the heartbeat.

1. A job costs no round trip for its stats: ``record`` bumps two integers under a lock.
2. ``flush`` sends the lifetime and daily counters in one pipeline
   and, when Redis cannot be reached, puts the counts back so the next beat sends them
   (Sidekiq 6's behaviour; Sidekiq 7+ loses them). A key Redis refuses (another type, no
   number) keeps only its own counts for the next flush: the other keys took theirs.
"""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

import redis

from ..connections.pool import RedisPool
from ..keys import Keys

__all__ = ["Counters"]

# Daily counters live five years, as Sidekiq keeps them.
DAILY_TTL = 5 * 365 * 24 * 60 * 60


class Counters:
    """Executions since the last flush."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.processed = 0
        self.failed = 0
        self.total_processed = 0  # since start, never reset by a flush
        # What a key refused while the pipeline's others counted theirs: ``{key: (count,
        # ttl)}``, sent to that key alone at the next flush.
        self._refused: dict[str, tuple[int, int | None]] = {}

    def record(self, *, failed: bool) -> None:
        with self._lock:
            self.processed += 1
            self.total_processed += 1
            if failed:
                self.failed += 1

    def take(self) -> tuple[int, int]:
        with self._lock:
            counts = (self.processed, self.failed)
            self.processed = self.failed = 0
            return counts

    def put_back(self, processed: int, failed: int) -> None:
        with self._lock:
            self.processed += processed
            self.failed += failed

    def flush(self, pool: RedisPool, keys: Keys) -> None:
        """Send the counts. When Redis cannot be reached they stay counted for the next
        flush; a key it refuses keeps only its own (the first refusal is raised)."""
        processed, failed = self.take()
        with self._lock:
            refused, self._refused = self._refused, {}
        if not processed and not failed and not refused:
            return
        writes = dict(refused)
        if processed or failed:
            today = dt.datetime.now(dt.timezone.utc).date()
            for key, n, ttl in ((keys.stat_processed, processed, None),
                                (keys.stat_processed_day(today), processed, DAILY_TTL),
                                (keys.stat_failed, failed, None),
                                (keys.stat_failed_day(today), failed, DAILY_TTL)):
                writes[key] = (writes.get(key, (0, None))[0] + n, ttl)
        try:
            replies = pool.run(lambda r: _send(r, writes))
        except BaseException:
            self.put_back(processed, failed)
            self._keep(refused)
            raise
        errors = [(key, reply) for key, reply in zip(writes, replies, strict=True)
                  if isinstance(reply, redis.ResponseError)]
        if errors:
            self._keep({key: writes[key] for key, _ in errors})
            key, reply = errors[0]
            raise redis.ResponseError(f"{reply} (stats key {key}; its counts are kept)")

    def _keep(self, refused: dict[str, tuple[int, int | None]]) -> None:
        with self._lock:
            for key, (n, ttl) in refused.items():
                self._refused[key] = (self._refused.get(key, (0, None))[0] + n, ttl)


def _send(r: Any, writes: dict[str, tuple[int, int | None]]) -> list[Any]:
    """One ``INCRBY`` per key (and its ``EXPIRE``); each ``INCRBY``'s reply or error. When
    every one was refused (a failover's ``READONLY``…) nothing counted: the first refusal is
    raised, for the pool's rules."""
    pipe = r.pipeline(transaction=False)
    for key, (n, ttl) in writes.items():
        pipe.incrby(key, n)
        if ttl is not None:
            pipe.expire(key, ttl)
    replies = iter(pipe.execute(raise_on_error=False))
    found = []
    for _, ttl in writes.values():
        found.append(next(replies))
        if ttl is not None:
            next(replies)
    if all(isinstance(reply, redis.ResponseError) for reply in found):
        raise found[0]
    return found
