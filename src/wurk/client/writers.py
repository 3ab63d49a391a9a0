"""Where a push ends: the writer a client hands its entries to.

1. A push runs normalisation, client middleware and the argument check, then hands its
   entries (payload, ``at`` or None) to a ``Writer``, which writes them and returns the jids
   it refused (duplicates of a unique job). The client knows nothing of what a writer does:
   batches, unique jobs and testing modes attach here, never inside the client.
2. ``RedisWriter``, every client's own unless given another: one round trip per push —
   ``SADD queues`` + ``LPUSH`` per queue for immediate jobs, one ``ZADD schedule`` for
   scheduled ones (``RedisPool.send_all``), then unique jobs each with its lock by a script
   (``wurk.client.locks``). Never a transaction, never replayed after a broken connection.
   A job whose JSON is larger than the server takes in one value (``proto-max-bulk-len``,
   asked once per server and only for a payload over Redis's least limit, 1 MB) raises
   ``PayloadTooLarge`` before anything is sent (``check_size``), as every writer does.
3. Another writer is selected for a block of code or for the process: a testing mode
   (``wurk.testing``: kept in memory, or run inline) process-wide or for the current thread
   and the asyncio tasks it starts (a ``contextvars`` value), which wins; a ``None`` block
   value means "Redis here", whatever the process default is. Over that, an **overlay**
   (a batch's jobs block) takes the pushes made inside it, writes its own and hands the
   rest to what lies beneath (``beneath()``). Pushes under an overlay go out at the call:
   a transactional client does not defer them.
4. Selecting is explicit: nothing here changes at import. The fake mode's store of kept
   pushes is registered here when that mode is first chosen (``keep_in``), so
   ``resize.jobs`` / ``resize.drain()`` reach it without the job module importing
   ``wurk.testing`` (which builds on the job module).
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import redis

from .. import partitions
from .. import payload as P
from ..config import Config
from ..connections.pool import AsyncRedisPool, RedisPool
from ..errors import PayloadTooLarge, RedisUnavailable
from . import locks

__all__ = [
    "UNSET",
    "Entries",
    "KeepingWriter",
    "KeptJobs",
    "RedisWriter",
    "Writer",
    "aoversize",
    "areplicated",
    "beneath",
    "block_value",
    "bulk_limit",
    "check_replicated",
    "check_size",
    "keep_in",
    "kept",
    "overlay",
    "oversize",
    "replica_wait",
    "replicated",
    "reset_block",
    "reset_overlay",
    "selected",
    "set_block",
    "set_overlay",
    "set_process",
]

Entries = Sequence[tuple[dict[str, Any], "float | None"]]
T = TypeVar("T")


class Writer(Protocol):
    """Writes a push's entries (payloads already through middleware, each with its ``at``
    in epoch seconds or None for now); returns the jids it refused."""

    def write(self, config: Config, pool: RedisPool, entries: Entries) -> set[str]: ...

    async def awrite(self, config: Config, entries: Entries) -> set[str]: ...


class KeepingWriter:
    """A writer that keeps or runs pushes in this process (the testing modes): the same from
    sync and async code, and it refuses nothing."""

    def keep(self, config: Config, entries: Entries) -> None:
        raise NotImplementedError

    def write(self, config: Config, pool: RedisPool, entries: Entries) -> set[str]:
        self.keep(config, entries)
        return set()

    async def awrite(self, config: Config, entries: Entries) -> set[str]:
        self.keep(config, entries)  # kept in memory, or run inline as a test asks
        return set()


# -- Redis --------------------------------------------------------------------------------------
@dataclass
class _Commands:
    """One write, built once for either sender: plain commands for one pipeline, the
    unique jobs (pushed by their script) and the jobs of partitioned queues (pushed by
    theirs, ``wurk.partitions``)."""

    pipeline: list[tuple[Any, ...]] = field(default_factory=list)
    locked: list[locks.Locked] = field(default_factory=list)
    partitioned: dict[str, list[str]] = field(default_factory=dict)


class RedisWriter:
    """Writes to the client's Redis: the sync push on the pool it is given, the async push
    on the running loop's pool (``Config.async_pool``)."""

    def write(self, config: Config, pool: RedisPool, entries: Entries) -> set[str]:
        commands = _commands(config, entries)
        try:
            return pool.run(lambda redis: _send(config, pool, redis, commands))
        except RedisUnavailable as exc:
            raise RedisUnavailable(push_failed(entries, exc)) from exc

    async def awrite(self, config: Config, entries: Entries) -> set[str]:
        try:
            commands = _commands(config, entries, asking=False)
        except _LimitUnknown:  # once per process and server: asked here, not on the loop
            await learn_bulk_limit(config)
            commands = _commands(config, entries)
        pool = config.async_pool()
        try:
            return await pool.run(lambda redis: _asend(config, pool, redis, commands))
        except RedisUnavailable as exc:
            raise RedisUnavailable(push_failed(entries, exc)) from exc


class _LimitUnknown(Exception):
    """A payload is over Redis's least limit and the server's own is not known yet."""


def _commands(config: Config, entries: Entries, *, asking: bool = True) -> _Commands:
    """What ``entries`` take to write, for either sender; ``PayloadTooLarge`` for a job
    the server cannot take, before anything is sent. Unless ``asking``, ``_LimitUnknown``
    where the server's limit would be asked (a blocking round trip)."""
    if not asking and config.redis_url not in _bulk_limits:
        for job, _ in entries:
            if P.too_large(P.dumps(job), P.MIN_BULK_LIMIT) is not None:
                raise _LimitUnknown
    keys = config.keys
    scheduled: list[Any] = []
    by_queue: dict[str, list[str]] = {}
    commands = _Commands()
    for job, at in entries:
        if job.get(P.UNIQUE_FOR) is not None:
            locks.stamp(job)  # the digest is part of the JSON checked and pushed
            text = P.dumps(job)
            check_size(config, job, text, asking=asking)
            commands.locked.append((job, at, text))  # pushed with its lock, by a script
            continue
        if job[P.QUEUE] in config.partitions and at is None:
            partitions.stamp(job)
        text = P.dumps(job)
        check_size(config, job, text, asking=asking)
        if at is not None:
            scheduled += [P.score(float(at)), text]
        elif job[P.QUEUE] in config.partitions:
            commands.partitioned.setdefault(job[P.QUEUE], []).append(text)
        else:
            by_queue.setdefault(job[P.QUEUE], []).append(text)
    if scheduled:
        commands.pipeline.append(("ZADD", keys.schedule, *scheduled))
    if by_queue:
        commands.pipeline.append(("SADD", keys.queues, *by_queue))
        for queue, jsons in by_queue.items():
            commands.pipeline.append(("LPUSH", keys.queue(queue), *jsons))
    return commands


def _send(config: Config, pool: RedisPool, redis: Any, commands: _Commands) -> set[str]:
    if commands.pipeline:
        # Not redis-py's Pipeline: its command stack and per-command hooks cost a single
        # push more CPU than the rest of the push (``RedisPool.send_all``). WAIT, when
        # pushes wait for replicas, goes last on the same connection.
        replies = pool.send_all([*commands.pipeline, *replica_wait(config)])
        check_replicated(config, replies[-1])
    if commands.partitioned:
        replicated(config, pool, lambda pinned: partitions.push(
            pinned, config.keys, commands.partitioned))
    if not commands.locked:
        return set()
    if not config.push_replicas:
        return locks.push(redis, config.keys, commands.locked)
    return replicated(config, pool, lambda pinned: locks.push_each(pinned, config.keys,
                                                                   commands.locked))


async def _asend(config: Config, pool: AsyncRedisPool, redis: Any,
                 commands: _Commands) -> set[str]:
    if commands.pipeline:
        replies = await pool.send_all([*commands.pipeline, *replica_wait(config)])  # as ``_send``
        check_replicated(config, replies[-1])
    if commands.partitioned:
        await areplicated(config, pool, lambda pinned: partitions.apush(
            pinned, config.keys, commands.partitioned))
    if not commands.locked:
        return set()
    if not config.push_replicas:
        return await locks.apush(redis, config.keys, commands.locked)
    return await areplicated(config, pool, lambda pinned: locks.apush_each(
        pinned, config.keys, commands.locked))


# -- the largest value the server takes ----------------------------------------------------------
# The ``proto-max-bulk-len`` of each server (by URL) this process asked; asked once, and only
# when a payload is larger than the smallest limit Redis allows.
_bulk_limits: dict[str | None, int] = {}


def bulk_limit(config: Config) -> int:
    """The largest value, in bytes, ``config``'s Redis takes (its ``proto-max-bulk-len``),
    asked once per process and server. Redis's default (512 MB) when ``CONFIG`` is refused
    (managed Redis) or its answer is not a number; when Redis cannot be reached, that
    default for now, and asked again next time."""
    known = _bulk_limits.get(config.redis_url)
    if known is not None:
        return known
    reply: Any
    try:
        reply = config.pool("client").run(lambda r: r.config_get("proto-max-bulk-len"),
                                          idempotent=True)
    except RedisUnavailable:
        return P.DEFAULT_BULK_LIMIT
    except redis.ResponseError:  # CONFIG renamed or forbidden
        reply = {}
    return _learned(config, reply)


async def learn_bulk_limit(config: Config) -> None:
    """``bulk_limit``'s question asked through the async pool, so an async push never asks
    it with a blocking round trip on the loop (``awrite``)."""
    reply: Any
    try:
        reply = await config.async_pool().run(
            lambda r: r.config_get("proto-max-bulk-len"))
    except RedisUnavailable:
        return  # the push that follows meets the outage itself
    except redis.ResponseError:
        reply = {}
    _learned(config, reply)


def _learned(config: Config, reply: Any) -> int:
    """The limit in ``CONFIG GET``'s ``reply``, remembered for ``config``'s server."""
    value = (reply.get("proto-max-bulk-len") or reply.get(b"proto-max-bulk-len")
             if isinstance(reply, dict) else None)
    try:
        limit = int(value) if value is not None else P.DEFAULT_BULK_LIMIT
    except (TypeError, ValueError):
        limit = P.DEFAULT_BULK_LIMIT
    if limit < P.MIN_BULK_LIMIT:  # untrusted: no Redis takes less
        limit = P.DEFAULT_BULK_LIMIT
    _bulk_limits[config.redis_url] = limit
    return limit


def oversize(config: Config, text: str, *, asking: bool = True) -> tuple[int, int] | None:
    """(size, limit) in bytes when a payload's JSON ``text`` is larger than ``config``'s
    server takes in one value; None when it fits (the server is asked only for a text over
    Redis's smallest limit, and, unless ``asking``, not at all: ``_LimitUnknown``)."""
    if P.too_large(text, P.MIN_BULK_LIMIT) is None:
        return None
    if not asking and config.redis_url not in _bulk_limits:
        raise _LimitUnknown
    limit = bulk_limit(config)
    size = P.too_large(text, limit)
    return None if size is None else (size, limit)


async def aoversize(config: Config, text: str) -> tuple[int, int] | None:
    """``oversize`` for async code: the server's limit, when it must be asked, asked
    through the async pool (``learn_bulk_limit``), never with a blocking round trip."""
    try:
        return oversize(config, text, asking=False)
    except _LimitUnknown:
        await learn_bulk_limit(config)
        return oversize(config, text)


def check_size(config: Config, job: P.Payload, text: str, *, asking: bool = True) -> None:
    """``PayloadTooLarge`` naming the job and its size when its JSON ``text`` is larger than
    the server takes in one value: Redis would refuse it (or drop the connection) every
    time, so it must be neither sent nor kept to send later."""
    over = oversize(config, text, asking=asking)
    if over is None:
        return
    size, limit = over
    raise PayloadTooLarge(
        f"job {job.get(P.CLASS)} (jid {job.get(P.JID)}) is {size:,} bytes of JSON, over the "
        f"{limit:,} bytes the Redis server takes in one value (its proto-max-bulk-len): it "
        "was not pushed, nor kept to push later, since Redis would refuse it every time. "
        "Pass a reference to the data (a key, a URL, a row id) rather than the data",
        jid=str(job.get(P.JID)), job_class=str(job.get(P.CLASS)), size=size, limit=limit)


# -- pushes that wait for replicas (``push_replicas``) ------------------------------------------
# Redis's WAIT waits for the writes of the connection it is sent on: a push's commands and
# its WAIT share one connection, or the WAIT would confirm nothing.
def replica_wait(config: Config) -> list[tuple[Any, ...]]:
    """The WAIT that ends a push's commands when pushes wait for replicas; none otherwise."""
    if not config.push_replicas:
        return []
    return [("WAIT", config.push_replicas, max(1, round(config.push_replica_timeout * 1000)))]


def check_replicated(config: Config, reply: Any) -> None:
    """``RedisUnavailable`` when the WAIT's reply counts fewer replicas than asked for."""
    wanted = config.push_replicas
    if not wanted:
        return
    confirmed = reply if isinstance(reply, int) else 0
    if confirmed < wanted:
        raise RedisUnavailable(
            f"the primary took it, but {confirmed} of the {wanted} replica(s) push_replicas "
            f"asks for confirmed it within {config.push_replica_timeout} s, so a failover "
            "now could lose it (it may also still run: pushing it again may run it twice)")


def replicated(config: Config, pool: RedisPool, write: Callable[[Any], T]) -> T:
    """``write(client)`` on a client of one connection, then, when pushes wait for
    replicas, WAIT on that connection; ``RedisUnavailable`` when too few confirm. Without
    ``push_replicas``, ``write`` gets the pool's own client."""
    if not config.push_replicas:
        return write(pool.client)
    pinned: Any = pool.client.client()  # type: ignore[no-untyped-call]  # one connection
    try:
        result = write(pinned)
        check_replicated(config, pinned.execute_command(*replica_wait(config)[0]))
        return result
    finally:
        pinned.close()


async def areplicated(config: Config, pool: AsyncRedisPool,
                      write: Callable[[Any], Awaitable[T]]) -> T:
    """``replicated`` on the running loop's pool."""
    if not config.push_replicas:
        return await write(pool.client)
    pinned: Any = pool.client.client()
    try:
        result = await write(pinned)
        check_replicated(config, await pinned.execute_command(*replica_wait(config)[0]))
        return result
    finally:
        await pinned.aclose()


def push_failed(entries: Entries, exc: Exception) -> str:
    first = entries[0][0]
    what = f"{first.get(P.CLASS)} (jid {first.get(P.JID)})"
    if len(entries) > 1:
        what = f"{len(entries)} jobs, the first {what}"
    # The error's own text may end a sentence already (redis-py's do): one period, not two.
    return (f"could not push {what}: {str(exc).rstrip('.')}. Nothing was kept to retry "
            "later: push again once Redis is back, or catch wurk.RedisUnavailable. (If the "
            "connection broke mid-command, the push may have reached Redis.)")


# -- selection ----------------------------------------------------------------------------------
class KeptJobs(Protocol):
    """What the fake mode keeps, as the job methods (``jobs``, ``drain``…) reach it."""

    def jobs(self, *, queue: str | None = None,
             name: str | None = None) -> list[dict[str, Any]]: ...

    def drain(self, name: str | None = None) -> int: ...

    def perform_one(self, name: str | None = None) -> Any: ...

    def clear(self, name: str | None = None, *, queue: str | None = None) -> None: ...


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
_process: Writer | None = None
_block: contextvars.ContextVar[Writer | _Unset | None] = contextvars.ContextVar(
    "wurk_writer_block", default=UNSET)
_overlay: contextvars.ContextVar[Writer | None] = contextvars.ContextVar(
    "wurk_writer_overlay", default=None)
_kept: KeptJobs | None = None


def keep_in(store: KeptJobs) -> None:
    """Register the fake mode's store (done when that mode is chosen)."""
    global _kept
    _kept = store


def kept() -> KeptJobs:
    """The fake mode's store; an error saying how to switch it on when it never was."""
    if _kept is None:
        raise RuntimeError(
            "no pushes are kept: wurk.testing's fake mode was never switched on in this "
            "process; use `with wurk.testing.fake():` or wurk.testing.set_mode('fake')")
    return _kept


def selected() -> Writer | None:
    """The writer for a push made here now; None means the client's own (Redis)."""
    over = _overlay.get()
    return over if over is not None else beneath()


def beneath() -> Writer | None:
    """The writer under any overlay: a testing mode's, or None for Redis."""
    block = _block.get()
    return _process if block is UNSET else block  # type: ignore[return-value]


def overlay() -> Writer | None:
    """The overlay taking the pushes made here now (a batch's jobs block), if any."""
    return _overlay.get()


def set_process(writer: Writer | None) -> Writer | None:
    """Select ``writer`` for every thread without a block of its own; returns the previous."""
    global _process
    previous, _process = _process, writer
    return previous


def set_block(writer: Writer | _Unset | None) -> contextvars.Token[Writer | _Unset | None]:
    """Select ``writer`` (None: Redis) for this thread and its tasks; reset with the token."""
    return _block.set(writer)


def reset_block(token: contextvars.Token[Writer | _Unset | None]) -> None:
    _block.reset(token)


def block_value() -> Writer | _Unset | None:
    return _block.get()


def set_overlay(writer: Writer | None) -> contextvars.Token[Writer | None]:
    """Lay ``writer`` over whatever is selected, for this thread and its tasks."""
    return _overlay.set(writer)


def reset_overlay(token: contextvars.Token[Writer | None]) -> None:
    _overlay.reset(token)
