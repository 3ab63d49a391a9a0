"""Reliable push: a push that cannot reach Redis is kept and sent later, never lost.

1. ``reliable_push="memory"`` or ``"disk"`` gives the process's client a ``ReliableWriter``
   (``writer_for``). It pushes as the Redis writer does, but through the recording script
   (``wurk.client.idempotent``), so any later try of the same job pushes nothing twice.
2. Only a **connection error** keeps a push: refused, reset, timed out, cut mid-command, or
   no connection free in the pool. The push then returns its jid as usual. An error reply
   (``LOADING``, ``OOM``, a wrong type…) still raises: Redis answered. A full buffer raises
   ``RedisUnavailable`` saying so; nothing is ever dropped to make room.
3. Kept jobs are sent **oldest first**: by the next push (before its own job, which waits
   behind them if they cannot go), and by a background flush on a thread of the writer's
   own, woken when a job is kept and retrying with the outage backoff
   (``wurk.runtime.duty``), so an idle process does not sit on them. A push within a
   backoff's wait of a failure goes to the buffer at once instead of waiting for Redis.
   Scheduled jobs keep their ``at``; a unique job takes its lock when it is sent.
   With ``shards`` the process's one writer keeps the pushes of every shard: each kept job
   remembers its shard and is sent there (oldest first per shard), and a shard that cannot
   be reached holds up only its own jobs and pushes; the records to forget are per shard.
4. Each job sent from a buffer counts: ``jobs.recovered.push`` in StatsD (Sidekiq Pro's
   name), ``wurk:stat:recovered-push`` in Redis, and this process's report
   (``wurk:push-buffer:<identity>``: buffered, oldest, sent; an hour's TTL, indexed in
   ``wurk:push-buffers``), which ``wurk stats`` and the dashboard show.
5. The ``disk`` kind (``wurk.client.buffer``) survives the process: a successor using the
   same directory sends what a dead process left (its writer looks when it is made, then
   at each idle tick), as does ``wurk push-buffer flush DIR``. A file records the target
   of each shard (``target_of``: server, db, key prefix); a job is sent only by a
   configuration with a shard of the same target, whatever that shard's name there, so
   applications sharing a directory never send each other's jobs.
6. Fork: a forked child starts with an empty buffer, no file, no thread and no lock held
   by a thread of its parent's (``os.register_at_fork``); at exit a memory buffer with
   jobs left says how many were lost, a disk buffer leaves its file for a successor. Both
   hooks are registered when the first writer is made (``wurk.runtime.hooks``), not at
   import.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import redis

from ..config import DEFAULT_SHARD, Config
from ..connections import cluster, sentinel
from ..connections.home import find_home
from ..connections.locate import LOOPBACK_NAMES, describe_url
from ..connections.pool import RedisPool
from ..connections.replies import CONNECTION_ERRORS
from ..errors import ConfigError, InvalidPayload, RedisUnavailable
from ..metrics.statsd import sink_for
from ..reporting import report_error
from ..runtime import hooks
from ..runtime.duty import Duty
from ..runtime.identity import hostname, process_nonce
from . import idempotent, writers
from .buffer import (
    BufferFull,
    DiskBuffer,
    Entry,
    ForeignFile,
    LeftInFile,
    Malformed,
    MemoryBuffer,
    Orphan,
    OtherTarget,
    Targets,
    orphans,
    peek_targets,
    sweep_unfinished,
)
from .writers import Entries

__all__ = ["ReliableWriter", "buffer_directory", "connection_error", "flush_directory",
           "writer_for"]

log = logging.getLogger("wurk")

# Jobs sent from a buffer per round trip.
FLUSH_BATCH = 200
# The background flush's wait while nothing is buffered: how often a disk buffer's
# directory is looked at for files dead processes left.
IDLE_INTERVAL = 30.0
# A process's report lives this long after its last change.
REPORT_TTL = 3600


def connection_error(exc: BaseException) -> bool:
    """Whether a ``RedisUnavailable`` comes from the connection (refused, reset, timed out,
    cut) rather than from an error reply Redis sent."""
    return isinstance(exc, RedisUnavailable) and isinstance(exc.__cause__, CONNECTION_ERRORS)


def _too_large(config: Config, jobs: Sequence[idempotent.Sendable], what: str
               ) -> dict[str, str]:
    """The kept jobs (jid -> "") too large for the server ever to take (kept by an older
    version, or before its limit was lowered): logged with their size and the start of
    their JSON, and given up — sent again they would be refused, or cut the connection,
    every time, and hold up the jobs behind them for ever. Not to the dead set either:
    no value of that size fits there."""
    dropped: dict[str, str] = {}
    for job in jobs:
        over = writers.oversize(config, job.text)
        if over is None:
            continue
        log.error("%s %s is %s bytes of JSON, over the %s bytes the Redis server takes in "
                  "one value (proto-max-bulk-len), so Redis could never take it; it is "
                  "dropped. Its JSON starts: %s", what, job.jid, f"{over[0]:,}",
                  f"{over[1]:,}", job.text[:500])
        dropped[job.jid] = ""
    return dropped


def buffer_directory(config: Config) -> Path:
    """Where a disk buffer's files go: ``reliable_push_dir``, else ``push-buffer`` in the
    embedded server's home (``.wurk`` of the project)."""
    if config.reliable_push_dir:
        return Path(os.path.abspath(config.reliable_push_dir))
    return find_home(config.home) / "push-buffer"


def identity() -> str:
    return f"{hostname()}:{os.getpid()}:{process_nonce()}"


def target_of(config: Config) -> dict[str, str]:
    """Where ``config``'s pushes land, as a disk buffer's header records it: ``id``, a hash
    of the server (host and port, a socket's path, a Sentinel service, or the embedded
    server's home), its db and the key prefix — no password, no user, no option, so a
    successor whose URL differs in those alone is the same target — and ``redis``, the URL
    without its password (and the prefix), for people."""
    url = config.redis_url
    prefix = config.keys.prefix
    if not url:
        home = str(find_home(config.home))
        canonical: list[Any] = ["embedded", home]
        described = f"the embedded server at {home}"
    else:
        canonical = _canonical_url(url)
        described = describe_url(url)
    canonical.append(prefix)
    if prefix:
        described += f" (key_prefix {config.key_prefix!r})"
    digest = hashlib.sha256(json.dumps(canonical).encode()).hexdigest()[:16]
    return {"id": digest, "redis": described}


def _canonical_url(url: str) -> list[Any]:
    if sentinel.is_sentinel(url):
        found = sentinel.parse(url)
        return ["sentinel", found.service, found.db]
    if cluster.is_cluster(url):  # reliable push refuses it; named as written all the same
        return ["cluster", describe_url(url)]
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    if parts.scheme.lower() == "unix":
        return ["unix", parts.path, query.get("db", ["0"])[0]]
    db = query.get("db", [""])[0] or parts.path.strip("/") or "0"
    try:
        host, port = (parts.hostname or "").lower(), parts.port or 6379
    except ValueError:  # validated at boot; a hash of it as written rather than a crash
        return ["url", describe_url(url)]
    return ["redis", "loopback" if host in LOOPBACK_NAMES | {"::1"} else host, port, db]


def targets_of(config: Config) -> Targets:
    """Each shard's target (``target_of``), by name: what a disk buffer's header records."""
    root = config.shard(DEFAULT_SHARD)  # the configuration itself, whatever view this is
    names = [root.shard_name] if root.is_cluster else root.shard_names()
    return {name: target_of(root.shard(name)) for name in names}


class ReliableWriter:
    """The Redis writer's pushes, recorded, and kept in a buffer while Redis cannot be
    reached (see the module's notes)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._targets_made: Targets | None = None
        self.buffer: MemoryBuffer | DiskBuffer = (
            DiskBuffer(buffer_directory(config), config.reliable_push_size,
                       self._targets())
            if config.reliable_push == "disk" else MemoryBuffer(config.reliable_push_size))
        self._fresh()
        self._closed = False
        _hook_process()
        _writers.add(self)
        if isinstance(self.buffer, DiskBuffer):
            self.flusher.wake()  # a dead predecessor's file may be waiting

    def _fresh(self) -> None:
        """Per-process state (again in a forked child)."""
        self._pid = os.getpid()
        self._forgets: dict[str, idempotent.Forgets] = {}  # per shard: its Redis's records
        self._flush_lock = threading.Lock()
        self._down_until: dict[str, float] = {}  # per shard: until when pushes are kept
        self.sent = 0  # jobs this process sent from a buffer (its own or a dead one's)
        self._said_legacy: set[Path] = set()  # files of before targets, warned of once
        self.flusher = _Flusher(self)

    # -- the writer's two forms ---------------------------------------------------------
    def write(self, config: Config, pool: RedisPool, entries: Entries) -> set[str]:
        self._check_pid()
        shard = config.shard_name
        jobs = [idempotent.sendable(config.keys, job, at) for job, at in entries]
        for ready, (job, _) in zip(jobs, entries, strict=True):
            writers.check_size(config, job, ready.text)  # never kept: it could never go
        if (len(self.buffer) or self._down(shard)) and not self._flush_first(shard):
            self._keep(shard, jobs)  # behind the older ones, which Redis did not take either
            return set()
        forgets = self._forgets_of(shard)
        forget = forgets.take()
        try:
            outcome = idempotent.send(config, pool, jobs, forget)
        except BaseException as exc:
            forgets.add(forget)
            if not connection_error(exc):
                raise
            self._failed(shard)
            self._keep(shard, jobs, exc)
            return set()
        return self._landed(shard, outcome)

    async def awrite(self, config: Config, entries: Entries) -> set[str]:
        """On the running loop: kept jobs are sent by the background flush (never by this
        loop's thread); a push finding some waits behind them."""
        self._check_pid()
        shard = config.shard_name
        jobs = [idempotent.sendable(config.keys, job, at) for job, at in entries]
        for ready, (job, _) in zip(jobs, entries, strict=True):
            writers.check_size(config, job, ready.text)  # never kept: it could never go
        if len(self.buffer) or self._down(shard):
            await self._akeep(shard, jobs)
            return set()
        forgets = self._forgets_of(shard)
        forget = forgets.take()
        try:
            outcome = await idempotent.asend(config, jobs, forget)
        except BaseException as exc:
            forgets.add(forget)
            if not connection_error(exc):
                raise
            self._failed(shard)
            await self._akeep(shard, jobs, exc)
            return set()
        return self._landed(shard, outcome)

    async def _akeep(self, shard: str, jobs: list[idempotent.Sendable],
                     cause: BaseException | None = None) -> None:
        if isinstance(self.buffer, DiskBuffer):  # an fsync: off the loop's thread
            await asyncio.to_thread(self._keep, shard, jobs, cause)
        else:
            self._keep(shard, jobs, cause)

    def _landed(self, shard: str, outcome: idempotent.Outcome) -> set[str]:
        self._down_until.pop(shard, None)
        self._forgets_of(shard).add(outcome.landed)
        return set(outcome.refused)

    def _forgets_of(self, shard: str) -> idempotent.Forgets:
        """The records this process may drop in ``shard``'s Redis (sent with its next push
        there: a ZREM elsewhere would drop nothing, and leave them for 7 days)."""
        forgets = self._forgets.get(shard)
        if forgets is None:
            forgets = self._forgets.setdefault(shard, idempotent.Forgets())
        return forgets

    def _targets(self) -> Targets:
        """Each shard's target, by name (made once: the configuration does not change)."""
        if self._targets_made is None:
            self._targets_made = targets_of(self.config)
        return self._targets_made

    def _route(self, orphan: Orphan) -> Callable[[str], str | None]:
        """For a dead process's file: the shard of this configuration a job kept for the
        file's shard ``name`` goes to — the one pushing to the same Redis, db and key prefix
        the file records for it, whatever its name here — or None: not this configuration's
        to send (another application's, sharing the directory). A file of before files
        recorded it goes by the shard's name, as then."""
        recorded = orphan.targets
        if recorded is None:
            def by_name(name: str) -> str | None:
                try:
                    self._target(name)
                except ConfigError:
                    return None
                return name
            return by_name
        mine: dict[str, str] = {}
        for name, target in self._targets().items():
            mine.setdefault(target["id"], name)

        def by_target(name: str) -> str | None:
            target = recorded.get(name)
            return None if target is None else mine.get(target["id"])
        return by_target

    def _other_target(self, recorded: Targets, counts: dict[str, int] | None
                      ) -> OtherTarget:
        """What a file's jobs of another target are (``counts`` per shard of the file, or
        None when it was not read), and what this configuration pushes to."""
        def where(name: str) -> str:
            target = recorded.get(name)
            return (f"{target.get('redis', '?')} (shard {name!r})" if target is not None else
                    f"shard {name!r}, which its header does not record")
        kept = (", ".join(f"{count} job(s) kept for {where(name)}"
                          for name, count in counts.items()) if counts is not None else
                "its jobs are kept for " + ", ".join(where(name) for name in recorded))
        return OtherTarget(
            kept + ", which this configuration does not push to (it pushes to "
            + ", ".join(target["redis"] for target in self._targets().values())
            + "); left in the file for a process that does")

    def _target(self, shard: str) -> Config:
        """The configuration a kept job of ``shard`` is sent through; ``ConfigError`` when
        this configuration names no such shard (a dead process's file of another one)."""
        return self.config if shard == self.config.shard_name else self.config.shard(shard)

    # -- keeping ----------------------------------------------------------------------------
    def _keep(self, shard: str, jobs: list[idempotent.Sendable],
              cause: BaseException | None = None) -> None:
        if not jobs:
            return
        was_empty = not len(self.buffer)
        now = time.time()
        try:
            self.buffer.keep([Entry(job, now, shard) for job in jobs])
        except BufferFull as full:
            first = jobs[0]
            why = f" ({str(cause).rstrip('.')})" if cause is not None else ""
            raise RedisUnavailable(
                f"could not push {len(jobs)} job(s), the first jid {first.jid}: Redis cannot "
                f"be reached{why} and the reliable push buffer is full: {full}. Nothing was "
                "kept for this push: catch wurk.RedisUnavailable, or raise "
                "reliable_push_size") from cause
        if was_empty:
            log.warning("reliable push: Redis cannot be reached%s; keeping pushes in %s until "
                        "it answers", f" ({cause})" if cause is not None else "",
                        self.buffer.where)
        if was_empty or not self.flusher.failing:
            self.flusher.wake()

    def _down(self, shard: str) -> bool:
        return time.monotonic() < self._down_until.get(shard, 0.0)

    def _failed(self, shard: str) -> None:
        """``shard``'s Redis could not be reached: its pushes go straight to the buffer for
        a backoff's wait (the background flush probes meanwhile)."""
        self._down_until[shard] = time.monotonic() + max(self.flusher.duty.backoff.ceiling,
                                                         0.1)

    # -- flushing ---------------------------------------------------------------------------
    def _flush_first(self, shard: str) -> bool:
        """Before a push to ``shard``: send what waits, oldest first. False when that
        shard's could not all go (its Redis unreachable, or another thread is sending
        them): the push waits behind."""
        if self._down(shard) or not self._flush_lock.acquire(blocking=False):
            return False
        try:
            # Shards known down are not tried: a push elsewhere does not wait on them.
            _, failed = self._drain({name for name in self._down_until if self._down(name)})
        finally:
            self._flush_lock.release()
        return shard not in failed

    def drain(self) -> int:
        """Send everything buffered, oldest first, each job to its shard; the number pushed.
        Raises ``RedisUnavailable`` when a shard's Redis cannot take its jobs (they stay;
        the other shards' are sent). The caller holds the flush lock."""
        pushed, failed = self._drain(set())
        if failed:
            raise next(iter(failed.values()))
        return pushed

    def _drain(self, skip: set[str]) -> tuple[int, dict[str, RedisUnavailable]]:
        """Send what waits of every shard but ``skip``'s: the number pushed, and the shards
        whose Redis could not be reached (their jobs stay), with the error. An error reply
        (LOADING, OOM…) raises: Redis answered."""
        failed: dict[str, RedisUnavailable] = {}
        pushed = 0
        try:
            while True:
                batch = self.buffer.take(FLUSH_BATCH, skip | failed.keys())
                if not batch:
                    break
                for shard, jobs in _by_shard((e.shard, e.job) for e in batch).items():
                    try:
                        outcome = self._send_kept(shard, jobs)
                    except RedisUnavailable as exc:
                        if not connection_error(exc):
                            raise
                        self._failed(shard)
                        failed[shard] = exc
                        continue
                    self.buffer.done(outcome.landed)  # fsync'd (disk) before the records go
                    self._forgets_of(shard).add(outcome.landed)
                    self._down_until.pop(shard, None)
                    pushed += len(outcome.pushed)
        finally:
            if pushed:
                self._sent(pushed)
        return pushed, failed

    def _send_kept(self, shard: str, jobs: Sequence[idempotent.Sendable]
                   ) -> idempotent.Outcome:
        """Send kept jobs of ``shard``; one Redis refuses for good (a queue key of another
        type) is reported and goes to the dead set, so it cannot hold up the others."""
        config = self._target(shard)
        pool = config.pool("client")
        forgets = self._forgets_of(shard)
        dropped = _too_large(config, jobs, "reliable push: buffered job")
        jobs = [job for job in jobs if job.jid not in dropped]
        forget = forgets.take()
        try:
            outcome = idempotent.send(config, pool, jobs, forget)
            outcome.refused.update(dropped)
        except redis.ResponseError:
            forgets.add(forget)
            outcome = idempotent.Outcome(refused=dict(dropped))
            for job in jobs:
                try:
                    one = idempotent.send(config, pool, [job])
                except redis.ResponseError as exc:
                    report_error(config, exc, {"context": "reliable push", "jid": job.jid})
                    self._bury_refused(config, job, exc)
                    outcome.refused[job.jid] = ""
                    continue
                outcome.pushed += one.pushed
                outcome.already += one.already
                outcome.refused.update(one.refused)
            return outcome
        except BaseException:
            forgets.add(forget)
            raise
        for jid, holder in outcome.refused.items():
            log.info("reliable push: buffered unique job %s not pushed: jid %s holds its lock",
                     jid, holder)
        return outcome

    def _bury_refused(self, config: Config, job: idempotent.Sendable,
                      exc: redis.ResponseError) -> None:
        """A kept job Redis refused for good: to the dead set of its shard as the text it
        was (where the dashboard shows it and a retry pushes it); logged with its payload
        and dropped only when the dead set refuses it too, for good (its key of another
        type): an outage or a refusal for now (OOM, LOADING) raises, and the job stays
        kept."""
        dead, pool = config.keys.dead, config.pool("client")
        try:
            pool.run(lambda r: r.zadd(dead, {job.text: time.time()}))
        except redis.ResponseError as error:
            log.error("reliable push: Redis refused buffered job %s for good (%s), and the "
                      "dead set too (%s); it is dropped: %s", job.jid, exc, error, job.text)
            return
        log.error("reliable push: Redis refused buffered job %s for good (%s); moved to the "
                  "dead set", job.jid, exc)

    def adopt(self, path: Path) -> tuple[int, int]:
        """Send the jobs of a dead process's buffer file (if its owner is gone and nobody
        else claimed it), each to the Redis it was pushed to: (pushed, left). Jobs kept for
        a Redis (db, key prefix) this configuration does not push to stay in the file,
        which raises ``OtherTarget`` saying so once the others are sent (at once, without
        taking its lock, when none is this configuration's); a file of before files
        recorded their Redis goes by shard name, as then (``ForeignFile`` for a shard this
        configuration does not name), with a warning naming it. A malformed file is moved
        aside and raises ``Malformed``."""
        recorded = peek_targets(path)
        if recorded is not None:
            ours = {target["id"] for target in self._targets().values()}
            if not any(target["id"] in ours for target in recorded.values()):
                raise self._other_target(recorded, None)
        orphan = Orphan.claim(path)
        if orphan is None:
            return 0, 0
        route = self._route(orphan)
        if orphan.targets is None and path not in self._said_legacy:
            self._said_legacy.add(path)
            log.warning("reliable push: buffer file %s names no Redis (an older wurk wrote "
                        "it): its jobs are sent to this configuration's shards of the names "
                        "they were kept for, as before — into this Redis, whichever "
                        "application's they were", path)
        pushed = 0
        unknown: dict[str, int] = {}  # the file's shards not sent from here: their jobs stay
        try:
            while True:
                batch = orphan.take(FLUSH_BATCH, unknown.keys())
                if not batch:
                    break
                lines: dict[str, list[tuple[str, idempotent.Sendable]]] = {}  # per shard
                buried = []
                for jid, text, _, at, kept_for in batch:
                    shard = route(kept_for)
                    if shard is None:
                        unknown[kept_for] = unknown.get(kept_for, 0) + 1
                        continue
                    config = self._target(shard)
                    try:
                        job = idempotent.from_text(config.keys, text, at)
                    except InvalidPayload as exc:  # the file is untrusted: no job to send
                        self._bury(config, path, text, exc)
                        buried.append(jid)
                        continue
                    lines.setdefault(shard, []).append((jid, job))
                orphan.done(buried)
                for shard, sent in lines.items():
                    outcome = self._send_kept(shard, [job for _, job in sent])
                    # Recorded under each line's own jid: one written by hand or by another
                    # version may name another than its payload's, and would stay pending
                    # (taken again at once, for ever) if the payload's were recorded.
                    landed = set(outcome.landed)
                    orphan.done([line for line, job in sent if job.jid in landed])
                    self._forgets_of(shard).add(outcome.landed)
                    pushed += len(outcome.pushed)
        finally:
            left = len(orphan.pending)
            orphan.release()
            if pushed:
                log.info("reliable push: sent %d job(s) a dead process left in %s", pushed,
                         path)
                self._sent(pushed)
        if unknown and orphan.targets is not None:
            other = self._other_target(orphan.targets, unknown)
            other.pushed = pushed
            raise other
        if unknown:
            foreign = ForeignFile(", ".join(f"{count} job(s) kept for shard {name!r}"
                                        for name, count in unknown.items())
                              + ", which this configuration does not name (shards: "
                              + ", ".join(repr(n) for n in self.config.shard_names())
                              + "); left in the file for a process that does")
            foreign.pushed = pushed
            raise foreign
        return pushed, left

    def _bury(self, config: Config, path: Path, text: str, exc: InvalidPayload) -> None:
        """A kept line of a dead process's file that no push can send: to the dead set as
        the text it was, as the outbox relay does with such a row. When the dead set refuses
        it for good (its key of another type) it is logged with its text and dropped, as a
        kept job Redis refuses is: raised, it held up this file and every file after it at
        every try. An outage or a refusal for now (OOM, LOADING) raises: the line stays."""
        dead, pool = config.keys.dead, config.pool("client")
        try:
            pool.run(lambda r: r.zadd(dead, {text: time.time()}))
        except redis.ResponseError as error:
            log.error("reliable push: a job in %s cannot be sent (%s), and the dead set "
                      "refused it too (%s); it is dropped: %s", path, exc, error, text)
            return
        log.error("reliable push: a job in %s cannot be sent (%s); moved to the dead set",
                  path, exc)

    def forget_now(self) -> None:
        """Drop the records of what landed, in each shard's Redis (normally sent with the
        next push there); raises when one cannot be reached (its records stay)."""
        for shard, forgets in list(self._forgets.items()):
            forget = forgets.take()
            if not forget:
                continue
            config = self._target(shard)
            try:
                _zrem(config, forget)
            except BaseException:
                forgets.add(forget)
                raise

    def _sent(self, count: int) -> None:
        """Count jobs sent from a buffer, and report this process's buffer."""
        self.sent += count
        if self.config.statsd is not None:
            try:
                sink_for(self.config).recovered_push(count)
            except Exception as exc:
                log.debug("reliable push: StatsD: %s", exc)
        self.report(recovered=count)

    def report(self, *, recovered: int = 0) -> None:
        """This process's buffer, in Redis for ``wurk stats`` and the dashboard (its
        configuration's own); best effort (the jobs are what matters)."""
        keys, me, now = self.config.keys, identity(), time.time()
        pool = self.config.pool("client")
        record = {"identity": me, "hostname": hostname(), "pid": os.getpid(),
                  "kind": self.buffer.kind, "where": self.buffer.where,
                  "buffered": len(self.buffer), "oldest": self.buffer.oldest(),
                  "sent": self.sent, "at": now}
        commands: list[tuple[Any, ...]] = [
            ("SET", keys.push_buffer(me), json.dumps(record), "EX", REPORT_TTL),
            ("ZADD", keys.push_buffers, now, me),
            ("ZREMRANGEBYSCORE", keys.push_buffers, "-inf", now - REPORT_TTL)]
        if recovered:
            commands.append(("INCRBY", keys.stat_recovered_push, recovered))
        try:
            pool.run(lambda _: pool.send_all(commands))
        except Exception as exc:
            log.debug("reliable push: report: %s", exc)

    # -- the process ------------------------------------------------------------------------
    def _check_pid(self) -> None:
        if os.getpid() != self._pid:
            self.after_fork()

    def after_fork(self) -> None:
        """In a forked child: nothing of the parent's is sent from here."""
        self.buffer.reset_after_fork()
        self._fresh()

    def close(self) -> None:
        """At exit: one last try to send what waits, then say what is left. Once."""
        if self._closed:
            return
        self._closed = True
        _writers.discard(self)
        self.flusher.stop()
        if len(self.buffer) and os.getpid() == self._pid:
            try:
                with self._flush_lock:
                    self.drain()
            except Exception as exc:
                log.debug("reliable push at exit: %s", exc)
        left = self.buffer.close()
        if not left:
            return
        if isinstance(self.buffer, DiskBuffer):
            log.warning("reliable push: %d buffered job(s) left in %s; the next process "
                        "using %s sends them, as does `wurk push-buffer flush %s`", left,
                        self.buffer.path, self.buffer.directory, self.buffer.directory)
        else:
            log.error("reliable push: %d buffered job(s) are lost with this process "
                      "(reliable_push='memory'; 'disk' keeps them for a successor)", left)


class _Flusher:
    """The background flush: a thread of the writer's own, woken when a job is kept,
    retrying with the outage backoff; it looks for dead processes' files when idle."""

    def __init__(self, writer: ReliableWriter) -> None:
        self.writer = writer
        self.duty = Duty(writer.config, "wurk-push-buffer", self.tick, self._interval,
                         component="reliable push", retry_early=True)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.orphans_left = False
        self._unusable: set[Path] = set()  # files said unreadable already (said once)

    @property
    def failing(self) -> bool:
        return self.duty.failing

    def _interval(self) -> float:
        return 0.0 if len(self.writer.buffer) or self.orphans_left else IDLE_INTERVAL

    def wake(self) -> None:
        with self._start_lock:
            if self._thread is None and not self._stopping.is_set():
                self._thread = threading.Thread(target=self._run, name="wurk-push-buffer",
                                                daemon=True)
                self._thread.start()
        self._wake.set()

    def stop(self, timeout: float = 1.0) -> None:
        self._stopping.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        wait = 0.0
        while not self._stopping.is_set():
            self._wake.wait(wait)
            self._wake.clear()
            if self._stopping.is_set():
                return
            self.duty.run()
            wait = self.duty.next_wait()

    def tick(self) -> None:
        """Send what this process keeps, then what dead processes left; raises while Redis
        cannot take them (the duty backs off and reports the outage)."""
        writer = self.writer
        if len(writer.buffer):
            with writer._flush_lock:
                writer.drain()  # each shard's that can go goes; raises for one that cannot
        buffer = writer.buffer
        if isinstance(buffer, DiskBuffer):
            left = 0
            unusable = set()
            sweep_unfinished(buffer.directory)
            for path in orphans(buffer.directory, buffer.path):
                try:
                    left += writer.adopt(path)[1]
                except RedisUnavailable:
                    raise
                except (OSError, LeftInFile) as exc:  # this file only: the others go
                    unusable.add(path)
                    _unusable(path, exc, again=path in self._unusable)
            self._unusable = unusable
            self.orphans_left = bool(left)
        writer.forget_now()  # idle: drop the records of the last pushes now


def _zrem(config: Config, jids: list[str]) -> None:
    pool = config.pool("client")
    pool.run(lambda _: pool.send_all([("ZREM", config.keys.push_sent, *jids)]))


def _by_shard(jobs: Iterable[tuple[str, idempotent.Sendable]]
              ) -> dict[str, list[idempotent.Sendable]]:
    """Jobs grouped by their shard, in the order given (oldest first within each)."""
    grouped: dict[str, list[idempotent.Sendable]] = {}
    for shard, job in jobs:
        grouped.setdefault(shard, []).append(job)
    return grouped


def flush_directory(config: Config, directory: Path) -> tuple[int, int, int]:
    """``wurk push-buffer flush``: send the jobs of every file in ``directory`` no live
    process holds; (pushed, jobs left in unreachable or held files, files held by a live
    process). Raises ``RedisUnavailable`` when Redis cannot take them."""
    writer = _Adopter(config)
    pushed = left = held = 0
    sweep_unfinished(directory)
    for path in orphans(directory):
        try:
            sent, remaining = writer.adopt(path)
        except RedisUnavailable:
            raise
        except (OSError, LeftInFile) as exc:  # this file only: the others go
            _unusable(path, exc)
            if isinstance(exc, LeftInFile):
                pushed += exc.pushed
            continue
        if path.exists() and not sent and not remaining:
            held += 1
        pushed += sent
        left += remaining
    writer.forget_now()
    return pushed, left, held


def _unusable(path: Path, exc: OSError | LeftInFile, *, again: bool = False) -> None:
    """A file in the buffer directory that cannot be read or written (a directory named
    like one, no permission, the disk full), is of another format version, or holds jobs
    of another Redis: its jobs stay in it; said once, not at every idle look. A malformed
    one was moved aside (a warning); another application's is no error (info)."""
    if isinstance(exc, Malformed):
        log.warning("reliable push: buffer file %s is malformed: %s; the other files are "
                    "sent", path, exc)
        return
    level = logging.INFO if isinstance(exc, OtherTarget) else logging.ERROR
    log.log(logging.DEBUG if again else level,
            "reliable push: buffer file %s passed over (%s); any jobs in it stay there, the "
            "other files are sent", path, exc)


class _Adopter(ReliableWriter):
    """A writer with no buffer of its own, for sending other processes' files."""

    def __init__(self, config: Config) -> None:  # no buffer file, no thread, no registry
        self.config = config
        self._targets_made = None
        self.buffer = MemoryBuffer(config.reliable_push_size)
        self._fresh()
        self._closed = False


_writers: weakref.WeakSet[ReliableWriter] = weakref.WeakSet()
_made: weakref.WeakKeyDictionary[Config, ReliableWriter] = weakref.WeakKeyDictionary()
_made_lock = threading.Lock()


def writer_for(config: Config) -> ReliableWriter | None:
    """The process's reliable writer for ``config`` (one per configuration), or None when
    ``reliable_push`` is off."""
    if config.reliable_push == "off":
        return None
    _hook_process()  # before the lock: a fork from now on gives the child a fresh one
    with _made_lock:
        writer = _made.get(config)
        if writer is None:
            writer = _made[config] = ReliableWriter(config)
        return writer


def _hook_process() -> None:
    """On first use, not at import: a forked child's writers start afresh (and its lock),
    and the exit closes the writers."""
    hooks.install(__name__, after_fork_in_child=_after_fork_in_child, at_exit=_at_exit)


def _after_fork_in_child() -> None:
    global _made_lock
    # A thread of the parent's may have been making a writer: its lock would stay held.
    _made_lock = threading.Lock()
    for writer in list(_writers):
        writer.after_fork()


def _at_exit() -> None:
    for writer in list(_writers):
        try:
            writer.close()
        except Exception as exc:  # pragma: no cover - exiting anyway
            log.debug("reliable push at exit: %s", exc)

