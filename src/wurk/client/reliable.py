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
4. Each job sent from a buffer counts: ``jobs.recovered.push`` in StatsD (Sidekiq Pro's
   name), ``wurk:stat:recovered-push`` in Redis, and this process's report
   (``wurk:push-buffer:<identity>``: buffered, oldest, sent; an hour's TTL, indexed in
   ``wurk:push-buffers``), which ``wurk stats`` and the dashboard show.
5. The ``disk`` kind (``wurk.client.buffer``) survives the process: a successor using the
   same directory sends what a dead process left (its writer looks when it is made, then
   at each idle tick), as does ``wurk push-buffer flush DIR``.
6. Fork: a forked child starts with an empty buffer, no file, no thread and no lock held
   by a thread of its parent's (``os.register_at_fork``); at exit a memory buffer with
   jobs left says how many were lost, a disk buffer leaves its file for a successor. Both
   hooks are registered when the first writer is made (``wurk.runtime.hooks``), not at
   import.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

from ..config import Config
from ..connections.locate import find_home
from ..connections.pool import RedisPool
from ..connections.replies import CONNECTION_ERRORS
from ..errors import InvalidPayload, RedisUnavailable
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
    MemoryBuffer,
    Orphan,
    orphans,
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


class ReliableWriter:
    """The Redis writer's pushes, recorded, and kept in a buffer while Redis cannot be
    reached (see the module's notes)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.buffer: MemoryBuffer | DiskBuffer = (
            DiskBuffer(buffer_directory(config), config.reliable_push_size)
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
        self.forgets = idempotent.Forgets()
        self._flush_lock = threading.Lock()
        self._down_until = 0.0
        self.sent = 0  # jobs this process sent from a buffer (its own or a dead one's)
        self.flusher = _Flusher(self)

    # -- the writer's two forms ---------------------------------------------------------
    def write(self, config: Config, pool: RedisPool, entries: Entries) -> set[str]:
        self._check_pid()
        jobs = [idempotent.sendable(config.keys, job, at) for job, at in entries]
        for ready, (job, _) in zip(jobs, entries, strict=True):
            writers.check_size(config, job, ready.text)  # never kept: it could never go
        if (len(self.buffer) or self._down()) and not self._flush_first(pool):
            self._keep(jobs)  # behind the older ones, which Redis did not take either
            return set()
        forget = self.forgets.take()
        try:
            outcome = idempotent.send(config, pool, jobs, forget)
        except BaseException as exc:
            self.forgets.add(forget)
            if not connection_error(exc):
                raise
            self._failed()
            self._keep(jobs, exc)
            return set()
        return self._landed(outcome)

    async def awrite(self, config: Config, entries: Entries) -> set[str]:
        """On the running loop: kept jobs are sent by the background flush (never by this
        loop's thread); a push finding some waits behind them."""
        self._check_pid()
        jobs = [idempotent.sendable(config.keys, job, at) for job, at in entries]
        for ready, (job, _) in zip(jobs, entries, strict=True):
            writers.check_size(config, job, ready.text)  # never kept: it could never go
        if len(self.buffer) or self._down():
            await self._akeep(jobs)
            return set()
        forget = self.forgets.take()
        try:
            outcome = await idempotent.asend(config, jobs, forget)
        except BaseException as exc:
            self.forgets.add(forget)
            if not connection_error(exc):
                raise
            self._failed()
            await self._akeep(jobs, exc)
            return set()
        return self._landed(outcome)

    async def _akeep(self, jobs: list[idempotent.Sendable],
                     cause: BaseException | None = None) -> None:
        if isinstance(self.buffer, DiskBuffer):  # an fsync: off the loop's thread
            await asyncio.to_thread(self._keep, jobs, cause)
        else:
            self._keep(jobs, cause)

    def _landed(self, outcome: idempotent.Outcome) -> set[str]:
        self._down_until = 0.0
        self.forgets.add(outcome.landed)
        return set(outcome.refused)

    # -- keeping ----------------------------------------------------------------------------
    def _keep(self, jobs: list[idempotent.Sendable], cause: BaseException | None = None
              ) -> None:
        if not jobs:
            return
        was_empty = not len(self.buffer)
        now = time.time()
        try:
            self.buffer.keep([Entry(job, now) for job in jobs])
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

    def _down(self) -> bool:
        return time.monotonic() < self._down_until

    def _failed(self) -> None:
        """Redis could not be reached: pushes go straight to the buffer for a backoff's
        wait (the background flush probes meanwhile)."""
        self._down_until = time.monotonic() + max(self.flusher.duty.backoff.ceiling, 0.1)

    # -- flushing ---------------------------------------------------------------------------
    def _flush_first(self, pool: RedisPool) -> bool:
        """Before a push: send what waits, oldest first. False when they could not all go
        (Redis unreachable, or another thread is sending them): the push waits behind."""
        if self._down() or not self._flush_lock.acquire(blocking=False):
            return False
        try:
            self.drain(pool)
        except RedisUnavailable as exc:
            if not connection_error(exc):
                raise  # Redis answered (LOADING, OOM…): said to the caller, as a push would
            self._failed()
            return False
        finally:
            self._flush_lock.release()
        return True

    def drain(self, pool: RedisPool) -> int:
        """Send everything buffered, oldest first; the number pushed. Raises
        ``RedisUnavailable`` when Redis cannot take them (they stay). The caller holds the
        flush lock."""
        pushed = 0
        while True:
            batch = self.buffer.take(FLUSH_BATCH)
            if not batch:
                break
            outcome = self._send_kept(pool, [entry.job for entry in batch])
            self.buffer.done(outcome.landed)  # fsync'd (disk) before the records go
            self.forgets.add(outcome.landed)
            pushed += len(outcome.pushed)
        self._down_until = 0.0
        if pushed:
            self._sent(pool, pushed)
        return pushed

    def _send_kept(self, pool: RedisPool, jobs: Sequence[idempotent.Sendable]
                   ) -> idempotent.Outcome:
        """Send kept jobs; one Redis refuses for good (a queue key of another type) is
        reported and goes to the dead set, so it cannot hold up the others."""
        dropped = _too_large(self.config, jobs, "reliable push: buffered job")
        jobs = [job for job in jobs if job.jid not in dropped]
        forget = self.forgets.take()
        try:
            outcome = idempotent.send(self.config, pool, jobs, forget)
            outcome.refused.update(dropped)
        except redis.ResponseError:
            self.forgets.add(forget)
            outcome = idempotent.Outcome(refused=dict(dropped))
            for job in jobs:
                try:
                    one = idempotent.send(self.config, pool, [job])
                except redis.ResponseError as exc:
                    report_error(self.config, exc, {"context": "reliable push", "jid": job.jid})
                    self._bury_refused(pool, job, exc)
                    outcome.refused[job.jid] = ""
                    continue
                outcome.pushed += one.pushed
                outcome.already += one.already
                outcome.refused.update(one.refused)
            return outcome
        except BaseException:
            self.forgets.add(forget)
            raise
        for jid, holder in outcome.refused.items():
            log.info("reliable push: buffered unique job %s not pushed: jid %s holds its lock",
                     jid, holder)
        return outcome

    def _bury_refused(self, pool: RedisPool, job: idempotent.Sendable,
                      exc: redis.ResponseError) -> None:
        """A kept job Redis refused for good: to the dead set as the text it was (where
        the dashboard shows it and a retry pushes it); logged with its payload and dropped
        only when the dead set refuses it too, for good (its key of another type): an outage
        or a refusal for now (OOM, LOADING) raises, and the job stays kept."""
        dead = self.config.keys.dead
        try:
            pool.run(lambda r: r.zadd(dead, {job.text: time.time()}))
        except redis.ResponseError as error:
            log.error("reliable push: Redis refused buffered job %s for good (%s), and the "
                      "dead set too (%s); it is dropped: %s", job.jid, exc, error, job.text)
            return
        log.error("reliable push: Redis refused buffered job %s for good (%s); moved to the "
                  "dead set", job.jid, exc)

    def adopt(self, pool: RedisPool, path: Path) -> tuple[int, int]:
        """Send the jobs of a dead process's buffer file (if its owner is gone and nobody
        else claimed it): (pushed, left)."""
        orphan = Orphan.claim(path)
        if orphan is None:
            return 0, 0
        pushed = 0
        try:
            while True:
                batch = orphan.take(FLUSH_BATCH)
                if not batch:
                    break
                jobs, lines, buried = [], [], []
                for jid, text, _, at in batch:
                    try:
                        jobs.append(idempotent.from_text(self.config.keys, text, at))
                        lines.append(jid)
                    except InvalidPayload as exc:  # the file is untrusted: no job to send
                        self._bury(pool, path, text, exc)
                        buried.append(jid)
                orphan.done(buried)
                outcome = self._send_kept(pool, jobs)
                # Recorded under each line's own jid: one written by hand or by another
                # version may name another than its payload's, and would stay pending (taken
                # again at once, for ever) if the payload's were recorded.
                landed = set(outcome.landed)
                orphan.done([line for line, job in zip(lines, jobs, strict=True)
                             if job.jid in landed])
                self.forgets.add(outcome.landed)
                pushed += len(outcome.pushed)
        finally:
            left = len(orphan.pending)
            orphan.release()
            if pushed:
                log.info("reliable push: sent %d job(s) a dead process left in %s", pushed,
                         path)
                self._sent(pool, pushed)
        return pushed, left

    def _bury(self, pool: RedisPool, path: Path, text: str, exc: InvalidPayload) -> None:
        """A kept line of a dead process's file that no push can send: to the dead set as
        the text it was, as the outbox relay does with such a row. When the dead set refuses
        it for good (its key of another type) it is logged with its text and dropped, as a
        kept job Redis refuses is: raised, it held up this file and every file after it at
        every try. An outage or a refusal for now (OOM, LOADING) raises: the line stays."""
        dead = self.config.keys.dead
        try:
            pool.run(lambda r: r.zadd(dead, {text: time.time()}))
        except redis.ResponseError as error:
            log.error("reliable push: a job in %s cannot be sent (%s), and the dead set "
                      "refused it too (%s); it is dropped: %s", path, exc, error, text)
            return
        log.error("reliable push: a job in %s cannot be sent (%s); moved to the dead set",
                  path, exc)

    def _sent(self, pool: RedisPool, count: int) -> None:
        """Count jobs sent from a buffer, and report this process's buffer."""
        self.sent += count
        if self.config.statsd is not None:
            try:
                sink_for(self.config).recovered_push(count)
            except Exception as exc:
                log.debug("reliable push: StatsD: %s", exc)
        self.report(pool, recovered=count)

    def report(self, pool: RedisPool, *, recovered: int = 0) -> None:
        """This process's buffer, in Redis for ``wurk stats`` and the dashboard; best
        effort (the jobs are what matters)."""
        keys, me, now = self.config.keys, identity(), time.time()
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
                    self.drain(self.config.pool("client"))
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
        pool = writer.config.pool("client")
        if len(writer.buffer):
            with writer._flush_lock:
                try:
                    writer.drain(pool)
                except RedisUnavailable:
                    writer._failed()
                    raise
        buffer = writer.buffer
        if isinstance(buffer, DiskBuffer):
            left = 0
            unusable = set()
            sweep_unfinished(buffer.directory)
            for path in orphans(buffer.directory, buffer.path):
                try:
                    left += writer.adopt(pool, path)[1]
                except RedisUnavailable:
                    raise
                except (OSError, ForeignFile) as exc:  # this file only: the others go
                    unusable.add(path)
                    _unusable(path, exc, again=path in self._unusable)
            self._unusable = unusable
            self.orphans_left = bool(left)
        if len(writer.forgets):  # idle: drop the records of the last pushes now
            forget = writer.forgets.take()
            try:
                pool.run(lambda _: pool.send_all([("ZREM", writer.config.keys.push_sent,
                                                   *forget)]))
            except BaseException:
                writer.forgets.add(forget)
                raise


def flush_directory(config: Config, directory: Path) -> tuple[int, int, int]:
    """``wurk push-buffer flush``: send the jobs of every file in ``directory`` no live
    process holds; (pushed, jobs left in unreachable or held files, files held by a live
    process). Raises ``RedisUnavailable`` when Redis cannot take them."""
    writer = _Adopter(config)
    pool = config.pool("client")
    pushed = left = held = 0
    sweep_unfinished(directory)
    for path in orphans(directory):
        try:
            sent, remaining = writer.adopt(pool, path)
        except RedisUnavailable:
            raise
        except (OSError, ForeignFile) as exc:  # this file only: the others go
            _unusable(path, exc)
            continue
        if path.exists() and not sent and not remaining:
            held += 1
        pushed += sent
        left += remaining
    forget = writer.forgets.take()
    if forget:
        pool.run(lambda _: pool.send_all([("ZREM", config.keys.push_sent, *forget)]))
    return pushed, left, held


def _unusable(path: Path, exc: OSError | ForeignFile, *, again: bool = False) -> None:
    """A file in the buffer directory that cannot be read or written (a directory named
    like one, no permission, the disk full) or is of another format version: its jobs stay
    in it; said once, not at every idle look."""
    (log.debug if again else log.error)(
        "reliable push: buffer file %s passed over (%s); any jobs in it stay there, the "
        "other files are sent", path, exc)


class _Adopter(ReliableWriter):
    """A writer with no buffer of its own, for sending other processes' files."""

    def __init__(self, config: Config) -> None:  # no buffer file, no thread, no registry
        self.config = config
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

