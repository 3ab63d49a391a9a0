"""The dead set's one writer: every job that dies in this package is buried here.

1. ``bury`` adds one raw entry and trims the set in the same transaction, with the two
   commands and limits Sidekiq uses — including the rank trim's
   off-by-one, so Ruby and Python agree on which entries survive.
2. ``kill`` buries a parsed job and then runs the death handlers (unless told not to).

Sidekiq wrote the trimming twice (retry and API); keeping one writer keeps one rule.
"""

from __future__ import annotations

import time
from typing import Any

from . import payload as P
from .config import Config
from .connections.pool import RedisPool
from .reporting import run_death_handlers

__all__ = ["Morgue"]


class Morgue:
    """Adds entries to ``dead``, trimmed by age and count."""

    def __init__(self, config: Config, pool: RedisPool | None = None) -> None:
        self.config = config
        self.pool = pool if pool is not None else config.pool("internal")

    def bury(self, *raws: str | bytes, now: float | None = None, trim: bool = True) -> None:
        """Store each raw entry as is (it may not even be JSON) and trim; never replayed.

        ``trim=False`` skips the trims (the API's kill-all trims once at the end)."""
        at = time.time() if now is None else now
        key = self.config.keys.dead
        oldest_kept = at - self.config.dead_timeout
        # Sidekiq's rank trim: ranks 0..-N go, so at most N - 1 entries stay.
        last_rank = -self.config.dead_max_jobs

        def write(redis: Any) -> None:
            pipe = redis.pipeline(transaction=True)
            if raws:
                pipe.zadd(key, dict.fromkeys(raws, at))
            if trim:
                pipe.zremrangebyscore(key, "-inf", oldest_kept)
                pipe.zremrangebyrank(key, 0, last_rank)
            pipe.execute()

        # Not replayed after a broken connection: only reads are (a write may apply twice); a lost
        # reply surfaces as RedisUnavailable to the caller, which decides.
        self.pool.run(write)

    def kill(self, job: dict[str, Any], exc: BaseException, *, raw: str | None = None,
             notify: bool = True) -> None:
        """Bury ``raw`` (or the job, serialised) and tell the death handlers."""
        self.bury(raw if raw is not None else P.dumps(job))
        if notify:
            run_death_handlers(self.config, job, exc)
