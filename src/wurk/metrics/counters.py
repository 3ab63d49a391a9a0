"""Processed/failed counters: counted in memory per job, flushed with the heartbeat.

1. A job costs no round trip for its stats: ``record`` bumps two integers under a lock.
2. ``flush`` sends the lifetime and daily counters in one pipeline
   and, when Redis refuses, puts the counts back so the next beat sends them (Sidekiq 6's
   behaviour; Sidekiq 7+ loses them).
"""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

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
        """Send the counts; on any error they stay counted for the next flush."""
        processed, failed = self.take()
        if not processed and not failed:
            return
        try:
            pool.run(lambda r: _send(r, keys, processed, failed))
        except BaseException:
            self.put_back(processed, failed)
            raise


def _send(r: Any, keys: Keys, processed: int, failed: int) -> None:
    today = dt.datetime.now(dt.timezone.utc).date()
    pipe = r.pipeline(transaction=False)
    pipe.incrby(keys.stat_processed, processed)
    pipe.incrby(keys.stat_processed_day(today), processed)
    pipe.expire(keys.stat_processed_day(today), DAILY_TTL)
    pipe.incrby(keys.stat_failed, failed)
    pipe.incrby(keys.stat_failed_day(today), failed)
    pipe.expire(keys.stat_failed_day(today), DAILY_TTL)
    pipe.execute()
