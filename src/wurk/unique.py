"""Unique jobs: while one job of a (class, queue, args) is pending, a second push is refused.

1. ``@wurk.job(unique_for=600, unique_until="success")``: a push takes the lock
   ``unique:<digest>`` (value: its jid) for ``unique_for`` seconds — plus the delay, for a
   scheduled job — in the same Lua script that pushes it (``scripts/unique_push.lua``), so
   a job is never pushed without its lock nor its lock taken without the job. A duplicate
   push returns None and the holder's jid is logged.
2. The digest is base64url(sha256(JSON ``[class, queue, args]``)), or of the list a job's
   ``unique_context`` hook returns (a class method, or the option of a function job). It is
   stored in the payload (``unique_digest``), so any process — the dashboard, a worker
   without the job's module — can release the lock.
3. Release: at the job's start (``unique_until="start"``) or success (``"success"``, kept
   across retries), on its death (a death handler: exhausted, killed, poison pill), when it
   expires unrun, and when the API or dashboard deletes or clears it. Each release deletes
   the lock only if this jid still holds it (``scripts/unique_release.lua``).
4. No lock refuses the job itself coming back — the scheduler pushing a due retry or
   scheduled job (client mode), an interrupted job pushed again (``coming_back``): not its
   own, nor a later push's, left alone. ``set(unique_for=False)`` pushes without a lock.
5. ``run_inline``: ``perform_inline`` of a unique job takes its lock as a push would
   (``scripts/unique_take.lua``); while another jid holds it the run is refused (None,
   the holder logged), as Sidekiq Enterprise 7.3.2 does. Nothing is pending after an
   inline run, so the lock is released when it ends, however it ends (at its start for
   ``unique_until="start"``).
6. ``locked(queue, name, args)``: the jid holding the lock, or None (on Redis Cluster, read
   in ``queue``'s keyspace). For a job registered with ``encrypt=True`` (or given
   ``encrypt=True``) the digest is taken as its push takes it, over the keyed stand-in for
   its last argument (``wurk.crypto.unique_args``).

Uniqueness is best effort: a job whose retries outlast ``unique_for`` lets a duplicate in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from . import payload as P
from . import scripts, stored
from .client.locks import digest, job_digest, lock_for, refused, use_context
from .config import Config, default_config
from .connections.lending import redis as lent_redis
from .crypto import unique_args
from .errors import InvalidPayload, RedisUnavailable
from .options import UNIQUE_UNTIL as UNTIL
from .options import check_unique_fields, unique_for_seconds

__all__ = [
    "UNTIL",
    "LockRelease",
    "check_fields",
    "digest",
    "job_digest",
    "lock_for",
    "locked",
    "release",
    "release_stored",
    "run_inline",
    "seconds",
    "use_context",
    "use_sealed",
]

log = logging.getLogger("wurk")

_RELEASE = scripts.Script("unique_release.lua")
_TAKE = scripts.Script("unique_take.lua", prelude=("owned.lua",))
T = TypeVar("T")
# Stored payloads read per round trip when a whole queue or set is cleared.
CLEAR_PAGE = 500
# Waits between the attempts to release a lock while Redis cannot be reached: about 3.5 s in
# all, which covers a restart or a failover without holding a processor much longer.
RELEASE_RETRIES = (0.1, 0.25, 0.5, 1.0, 1.5)
# In the stored JSON of every unique job, and of few others: the cheap test before parsing.
MARK = f'"{P.UNIQUE_DIGEST}"'


# -- options ----------------------------------------------------------------------------------
# The checks live with the other job options (``wurk.options``); named here too.
seconds = unique_for_seconds
check_fields = check_unique_fields


def locked(queue: str, name: str, args: Sequence[Any], *, config: Config | None = None,
           encrypt: bool | None = None) -> str | None:
    """The jid holding the lock of a ``name`` job with these ``args`` on ``queue``, or None.

    Uses the job's ``unique_context`` when this process has the job registered, exactly as a
    push would; and, for an encrypted job (``encrypt``, by default as the job registered here
    says), the keyed stand-in its push digests instead of the secret argument. On Redis
    Cluster the lock is read in ``queue``'s keyspace, where its push took it."""
    cfg = config if config is not None else default_config()
    if cfg.is_cluster:  # a push takes the lock in its queue's keyspace, whatever the config
        cfg = cfg.shard(queue)
    job: P.Payload = {P.CLASS: name, P.QUEUE: queue, P.ARGS: list(args)}
    if encrypt if encrypt is not None else name in _sealed:
        plain = unique_args(cfg, job)
        if plain is not None:
            job[P.ARGS] = plain
    key = cfg.keys.unique(job_digest(job))
    holder = cfg.pool("api").run(lambda r: r.get(key), idempotent=True)
    if holder is None:
        return None
    return stored.text(holder)


# The names of the jobs registered here with ``encrypt=True`` (``wurk.job``'s registry keeps
# it, as it keeps ``unique_context`` hooks): ``locked`` digests them as their pushes do.
_sealed: set[str] = set()


def use_sealed(name: str, sealed: bool) -> None:
    """Record whether the job registered as ``name`` is encrypted."""
    if sealed:
        _sealed.add(name)
    else:
        _sealed.discard(name)


# -- releasing --------------------------------------------------------------------------------
def _lock_of(config: Config, job: P.Payload) -> tuple[str, str] | None:
    found, jid = job.get(P.UNIQUE_DIGEST), job.get(P.JID)
    if not isinstance(found, str) or not found or not isinstance(jid, str) or not jid:
        return None
    return config.keys.unique(found), jid


def release(config: Config, job: P.Payload) -> bool:
    """Release ``job``'s lock if it still holds it (on the connection a processor lends its
    jobs, inside a worker). Releasing twice is harmless, so while Redis is unreachable (a
    restart, a failover) it is sent again for a few seconds, ``RELEASE_RETRIES``; the job
    has finished, and its processor could not fetch another meanwhile anyway. A failure
    after that is logged, not raised: the lock then expires on its own."""
    lock = _lock_of(config, job)
    if lock is None:
        return False
    failure: Exception | None = None
    for wait in (0.0, *RELEASE_RETRIES):
        time.sleep(wait)
        try:
            with lent_redis(config) as conn:
                return bool(_RELEASE.call(conn, [lock[0]], [lock[1]]))
        except RedisUnavailable as exc:
            failure = exc
        except Exception as exc:
            failure = exc
            break
    log.warning("could not release the unique lock of %s (jid %s): %s; it expires on its "
                "own", job.get(P.CLASS), lock[1], failure)
    return False


def take(config: Config, job: P.Payload) -> bool:
    """Take ``job``'s lock for a run that pushes nothing: True when taken (or this jid's
    already), False when another jid holds it (logged, as a refused push is)."""
    if job.get(P.ENCRYPT) is True and not job.get(P.UNIQUE_DIGEST):
        plain = unique_args(config, job)  # as its push digests it: the value, not a nonce
        if plain is not None:
            job[P.UNIQUE_DIGEST] = job_digest({**job, P.ARGS: plain})
    lock, ttl_ms = lock_for(config.keys, job, None, time.time())
    with lent_redis(config) as conn:
        reply = _TAKE.call(conn, [lock], [job[P.JID], ttl_ms])
    return not refused([job], [reply])


def run_inline(config: Config, job: P.Payload, run: Callable[[], T]) -> T | None:
    """``run()`` under ``job``'s lock (``perform_inline`` of a unique job); None without
    running it while another jid holds the lock. Released when the run ends, whatever its
    outcome — no retry is pending to keep it for — or at its start (``"start"``)."""
    if not take(config, job):
        return None
    if job.get(P.UNIQUE_UNTIL) == "start":
        release(config, job)
        return run()
    try:
        return run()
    finally:
        release(config, job)


def release_stored(config: Config, raws: Iterable[bytes | str], *, role: str = "api") -> int:
    """Release the locks of stored payloads (deleted from a queue or set); returns how many
    were released. Entries that are not unique jobs, or not JSON at all, are skipped."""
    calls: list[tuple[list[str], list[object]]] = []
    for raw in raws:
        if MARK not in stored.text(raw):
            continue  # the cheap test first: most jobs are not unique
        try:
            lock = _lock_of(config, P.loads(raw))
        except InvalidPayload:
            continue
        if lock is not None:
            calls.append(([lock[0]], [lock[1]]))
    if not calls:
        return 0
    try:
        replies = config.pool(role).run(lambda r: _RELEASE.call_many(r, calls))
    except Exception as exc:  # the jobs are gone already; their locks expire on their own
        log.warning("could not release the unique locks of %d deleted jobs: %s", len(calls),
                    exc)
        return 0
    return sum(1 for reply in replies if reply == 1)


class LockRelease:
    """The death handler that releases a dead job's lock (installed on every ``Config``):
    a job killed, exhausted or discarded never comes back to release it."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def __call__(self, job: dict[str, Any], exc: BaseException) -> None:
        if isinstance(job, dict) and P.UNIQUE_DIGEST in job:
            release(self.config, job)
