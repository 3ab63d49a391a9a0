"""Pruning the ``processes`` set of entries whose process is gone.

1. ``prune_processes`` removes identities whose heartbeat hash has expired, at most once a
   minute across the whole cluster (the ``process_cleanup`` lock), as Sidekiq does.

The scheduler calls it once after its startup wait; the API calls it before listing
processes. A crashed process leaves its identity in ``processes``; the scheduler scales its
poll interval by that set's size, so stale members would slow every poll.
"""

from __future__ import annotations

from typing import Any

from .. import stored
from ..config import Config
from ..connections.pool import RedisPool

__all__ = ["CLEANUP_INTERVAL", "prune_processes"]

# Sidekiq prunes at most once a minute cluster-wide; the lock key expires after this long.
CLEANUP_INTERVAL = 60
# SSCAN page size: large enough for few round trips, small enough not to block Redis.
SCAN_COUNT = 1000


def prune_processes(config: Config, pool: RedisPool | None = None) -> int:
    """Remove dead identities from ``processes``; returns how many went (0 when another
    process pruned within the last minute). Not replayed on a broken connection."""
    keys = config.keys
    used = pool if pool is not None else config.pool("internal")

    def prune(redis: Any) -> int:
        if not redis.set(keys.process_cleanup, "1", nx=True, ex=CLEANUP_INTERVAL):
            return 0
        identities = [stored.utf8(i) for i in redis.sscan_iter(keys.processes, count=SCAN_COUNT)]
        readable = [i for i in identities if i is not None]
        if not readable:
            return 0
        pipe = redis.pipeline(transaction=False)
        for identity in readable:
            pipe.hget(keys.process(identity), "info")
        infos = pipe.execute()
        gone = [i for i, info in zip(readable, infos, strict=True) if info is None]
        if gone:
            redis.srem(keys.processes, *gone)
        return len(gone)

    return used.run(prune)
