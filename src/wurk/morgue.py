"""The dead set's one writer: every job that dies in this package is buried here.

1. ``bury`` adds one raw entry and trims the set in the same transaction, with the two
   commands and limits Sidekiq uses — including the rank trim's
   off-by-one, so Ruby and Python agree on which entries survive.
2. ``kill`` buries a parsed job and then runs the death handlers (unless told not to).
3. ``take`` moves entries of another sorted set (the API's kill) in one script each
   (``scripts/api_kill.lua``), with the same trims.
4. ``take_listed`` takes a poison pill out of an in-flight list and buries it in one script
   (``scripts/poison_kill.lua``), with the same trims: only the reaper that finds it there
   kills it.

Sidekiq wrote the trimming twice (retry and API); keeping one writer keeps one rule.
"""

from __future__ import annotations

import time
from typing import Any

from . import payload as P
from . import scripts
from .config import Config
from .connections.pool import RedisPool
from .reporting import run_death_handlers

__all__ = ["Morgue"]

_TAKE = "api_kill.lua"
_TAKE_LISTED = "poison_kill.lua"


class Morgue:
    """Adds entries to ``dead``, trimmed by age and count."""

    def __init__(self, config: Config, pool: RedisPool | None = None) -> None:
        self.config = config
        self.pool = pool if pool is not None else config.pool("internal")

    def bury(self, *raws: str | bytes, now: float | None = None, trim: bool = True) -> None:
        """Store each raw entry as is (it may not even be JSON) and trim; never replayed.

        ``trim=False`` skips the trims (``DeadSet.kill(..., trim=False)``: a caller adding
        many entries trims once after, with ``DeadSet.trim()``)."""
        at = time.time() if now is None else now
        key = self.config.keys.dead
        oldest_kept, last_rank = self._limits(at)

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

    def take(self, source: str, raws: list[bytes], *, now: float | None = None) -> list[bool]:
        """Move each member of the sorted set ``source`` to the dead set, removal, add and
        trims in one script each; whether each was there to move. Never replayed: a lost
        reply raises ``RedisUnavailable``, the job then in one place or the other."""
        at = time.time() if now is None else now
        oldest_kept, last_rank = self._limits(at)
        keys = [source, self.config.keys.dead]
        text = scripts.source(_TAKE)

        def move(redis: Any) -> list[bool]:
            pipe = redis.pipeline(transaction=False)
            moving = redis.register_script(text)
            for raw in raws:
                moving(keys=keys, args=[raw, P.score(at), P.score(oldest_kept), last_rank],
                       client=pipe)
            return [bool(int(done)) for done in pipe.execute()]

        return self.pool.run(move) if raws else []

    def take_listed(self, source: str, raw: bytes, entry: str | bytes | None, *,
                    now: float | None = None) -> bool:
        """Remove ``raw`` from the list ``source`` and bury ``entry`` (None: discard), in one
        script; whether ``raw`` was there to take. Never replayed: a lost reply raises
        ``RedisUnavailable``, the pill then in one place or the other."""
        at = time.time() if now is None else now
        oldest_kept, last_rank = self._limits(at)
        keys = [source, self.config.keys.dead]
        args = [raw, entry if entry is not None else "", P.score(at), P.score(oldest_kept),
                last_rank, "0" if entry is None else "1"]
        text = scripts.source(_TAKE_LISTED)
        return bool(int(self.pool.run(lambda r: r.register_script(text)(keys=keys, args=args))))

    def _limits(self, at: float) -> tuple[float, int]:
        """The oldest score kept and the last rank trimmed, for entries buried ``at``."""
        # Sidekiq's rank trim: ranks 0..-N go, so at most N - 1 entries stay.
        return at - self.config.dead_timeout, -self.config.dead_max_jobs

    def kill(self, job: dict[str, Any], exc: BaseException, *, raw: str | None = None,
             notify: bool = True) -> None:
        """Bury ``raw`` (or the job, serialised) and tell the death handlers."""
        self.bury(raw if raw is not None else P.dumps(job))
        if notify:
            run_death_handlers(self.config, job, exc)
