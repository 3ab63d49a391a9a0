"""Pushing jobs: normalise a payload, run client middleware, write it in one round trip.

1. ``normalize`` applies Sidekiq's push rules: defaults under the
   item, a jid and ``created_at`` when missing, transient keys dropped, bad fields refused.
2. Client middleware may change the payload or stop the push (the call then returns None):
   a push goes out only if the chain reached its end (every link called ``call_next``) and
   the result is not None or False.
3. Arguments are checked after the middleware, so middleware may convert them.
4. The entries end in a writer (``wurk.client.writers``): this client's own, Redis —
   one round trip per push or per bulk slice, never a transaction, never replayed after a
   broken connection — unless a testing mode or a batch's jobs block selected another. The
   client imports neither batches nor unique jobs: they attach there.
5. A push while Redis is down or refusing raises ``wurk.RedisUnavailable`` naming the jobs
   and what to do; nothing is buffered (reliable push is a later feature). A job larger
   than the server takes in one value raises ``wurk.PayloadTooLarge`` from the writer
   (``writers.check_size``) before its round trip is sent; a bulk push's steps say which
   job it was and how many went before it.
6. A job with ``expires_in`` gets its deadline (``options.stamp_expiry``); a job with
   ``unique_for`` is pushed together with its lock by the Redis writer's script
   (``wurk.client.locks``) and a duplicate returns None.
7. ``apush`` / ``apush_bulk`` are the same pushes for async code, on redis-py's asyncio
   client: the push is written once as steps (``_push_steps``, ``_bulk_steps``) that ask
   for the middleware and for the write, and a sync or an async driver answers them.
   No thread is used: async client middleware is awaited on the loop, sync client
   middleware is called there (plain code: one doing blocking I/O blocks the loop; the
   built-in links only edit the payload). A sync push meeting an async client middleware
   runs it on a ``TemporaryLoop`` through the one bridge (``wurk.middleware.bridge``), its
   ``await call_next()`` running the rest of the chain back in the pushing thread.
8. Shards (``docs/scaling.md``): a push goes to the shard its own ``pool`` names (a
   ``Pinned``: ``job.set(pool=...)``, ``set(shard=...)``, ``perform_bulk(pool=...)``), else
   the one a ``wurk.via`` block chose, else the one its job's ``shard`` (or ``pool``)
   option names, else the one the configuration's ``shard_router`` answers for it, else
   this client's own; a bulk push with a router is
   split by the shard of each job. Another shard's pushes go through a client of that
   shard's configuration, made once. Inside a batch's jobs block nothing is routed: a
   batch and its jobs live on one shard. On Redis Cluster a push goes to its queue's
   keyspace, whatever else says (``docs/scaling.md``); the first push of a process to a
   queue records it in the cluster's index of queues.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from .. import payload as P
from ..config import DEFAULT_SHARD, Config, chosen_shard, default_config
from ..connections.pool import RedisPool
from ..crypto import seal, unique_args
from ..errors import (
    ConfigError,
    InvalidArguments,
    InvalidPayload,
    PartlyPushed,
    PayloadTooLarge,
)
from ..middleware import TemporaryLoop, bridge
from ..options import (
    SHARD,
    check_expiry_fields,
    check_job_queue,
    check_result_ttl,
    check_unique_fields,
    retry_for_seconds,
    stamp_expiry,
)
from . import writers
from .locks import job_digest
from .writers import Entries, RedisWriter, Writer

__all__ = ["Client", "Parts", "Pinned", "pin"]

# The queues this process has recorded in a Redis Cluster's index (``Keys.cluster_queues``):
# (the cluster's URL, the index's key, the queue).
_indexed: set[tuple[str | None, str, str]] = set()

# Sidekiq raises spread intervals below this to it (8.0.8).
MIN_SPREAD_INTERVAL = 5.0

_DEFAULTS: dict[str, Any] = {P.RETRY: True, P.QUEUE: P.DEFAULT_QUEUE}

T = TypeVar("T")


@dataclass(frozen=True)
class _Middleware:
    """A push step's request: run this payload through the client middleware."""

    job: P.Payload


@dataclass(frozen=True)
class _Write:
    """A push step's request: write these entries; answered with the refused jids."""

    entries: Entries


# What a push's steps yield, what they are sent back, and what they return.
Steps = Generator["_Middleware | _Write", Any, T]


@dataclass(frozen=True)
class _Place:
    """Where a bulk push's slice starts, for an error that names the job it refused: the
    arguments are checked slice by slice (after the middleware, which may convert them),
    so earlier slices may be in Redis already."""

    start: int
    total: int
    done: list[str | None]  # the earlier slices' jids (None: not pushed)

    def refused(self, offset: int, exc: InvalidArguments) -> str:
        pushed = sum(jid is not None for jid in self.done)
        return (f"job {self.start + offset} of {self.total} in this bulk push: {exc} "
                f"({pushed} jobs before it were pushed, by earlier round trips; it and the "
                "jobs after it were not)")

    def too_large(self, offset: int, size: int, exc: PayloadTooLarge) -> str:
        """A job of this slice too large for the server: no job of its round trip went."""
        pushed = sum(jid is not None for jid in self.done)
        return (f"job {self.start + offset} of {self.total} in this bulk push: {exc} "
                f"({pushed} jobs before its round trip were pushed; no job of its round trip "
                f"(jobs {self.start} to {self.start + size - 1}) nor after it was)")


class Pinned:
    """A push's own pool (``job.set(pool=...)``, ``set(shard=...)``, ``perform_bulk(pool=
    ...)``, ``wurk.push(..., pool=...)``), carried in the item's ``shard`` field: the shard
    it goes to, over a ``via`` block, as Sidekiq's ``set(pool:)`` wins over ``Client.via``.
    A payload read from Redis cannot hold one (JSON has no such value), so a stored job
    pushed again (a due retry, an interrupted iteration) still goes where ``via`` says."""

    __slots__ = ("target",)

    def __init__(self, target: str | Config) -> None:
        self.target = target

    def __repr__(self) -> str:
        target = self.target
        return f"Pinned({target if isinstance(target, str) else target.shard_name!r})"

    def config(self, seen_from: Config) -> Config:
        target = self.target
        return target if isinstance(target, Config) else seen_from.shard(target)


def pin(pool: Any, where: str) -> Pinned:
    """``pool=`` as Sidekiq's ``set(pool: POOL)`` takes it: a shard's name, a shard's view
    (``config.shard("eu")``) or a ``Config`` of its own; anything else is a ``ConfigError``
    naming ``where``."""
    if isinstance(pool, Config) or (isinstance(pool, str) and pool):
        return Pinned(pool)
    raise ConfigError(f"{where}: pool must be a shard's name or a wurk.Config (the Redis the "
                      f"push goes to), not {pool!r:.80}")


class Parts:
    """A bulk push sent in parts (by shard, by partition), each part's jids put in place as
    it goes; when a part fails after another went, ``fail`` raises the error that says
    what went (``wurk.PartlyPushed``), so the caller can push only what did not."""

    __slots__ = ("jids", "pushed", "shards")

    def __init__(self, total: int) -> None:
        self.jids: list[str | None] = [None] * total
        self.pushed: list[int] = []
        self.shards: list[str] = []  # the shards of the parts pushed, each once

    def took(self, shards: list[str], indices: list[int], jids: list[str | None]) -> None:
        """A part pushed: its jobs' places in the push, and their jids."""
        for index, jid in zip(indices, jids, strict=True):
            self.jids[index] = jid
        self.pushed += indices
        self.shards += [shard for shard in shards if shard not in self.shards]

    def fail(self, exc: BaseException, shards: list[str], indices: list[int],
             later: list[tuple[list[str], list[int]]]) -> None:
        """Raise the ``wurk.PartlyPushed`` a part (its shards, its jobs' places) that failed
        with ``exc`` calls for, ``later`` the parts not tried; return when there is none
        (nothing went, or ``exc`` is an interrupt): the caller raises ``exc`` as it is."""
        partly = self._failed(exc, shards, indices, later)
        if partly is not None:
            raise partly from partly.error

    def _failed(self, exc: BaseException, shards: list[str], indices: list[int],
                later: list[tuple[list[str], list[int]]]) -> PartlyPushed | None:
        if not isinstance(exc, Exception):
            return None
        error: Exception = exc
        unpushed_shards = list(shards)
        unpushed = list(indices)
        if isinstance(exc, PartlyPushed):  # a part itself sent in parts: some of it went
            self.took(exc.shards_pushed, [indices[i] for i in exc.pushed],
                      [exc.jids[i] for i in exc.pushed])
            error, unpushed_shards = exc.error, list(exc.shards_unpushed)
            unpushed = [indices[i] for i in exc.unpushed]
        if not self.pushed:
            return None if error is exc else PartlyPushed(
                str(exc), error=error, jids=self.jids, pushed=[], unpushed=unpushed,
                shards_pushed=[], shards_unpushed=unpushed_shards)
        for part_shards, part_indices in later:
            unpushed += part_indices
            unpushed_shards += [s for s in part_shards if s not in unpushed_shards]
        pushed, unpushed = sorted(self.pushed), sorted(unpushed)
        message = (f"a bulk push of {len(self.jids)} jobs went in parts, and the part for "
                   f"{_shards(shards)} failed (its jobs numbered within that part): "
                   f"{str(error).rstrip('.')}. Pushed: {len(pushed)} jobs {_places(pushed)}, "
                   f"to {_shards(self.shards)} (.pushed, .jids); not pushed: {len(unpushed)} "
                   f"jobs {_places(unpushed)}, for {_shards(unpushed_shards)} (.unpushed): "
                   "push only those again, or the others run twice")
        return PartlyPushed(message, error=error, jids=self.jids, pushed=pushed,
                             unpushed=unpushed, shards_pushed=self.shards,
                             shards_unpushed=unpushed_shards)


def _shards(names: list[str]) -> str:
    return ("shard " if len(names) == 1 else "shards ") + ", ".join(map(repr, names))


def _places(indices: list[int]) -> str:
    """The places of a bulk push's jobs, as a message shows them: the first 20."""
    shown = ", ".join(map(str, indices[:20]))
    return f"[{shown}, … {len(indices) - 20} more]" if len(indices) > 20 else f"[{shown}]"


class Client:
    """Pushes payloads into one Redis, through the configuration's client middleware."""

    def __init__(self, config: Config | None = None, *, pool: RedisPool | None = None,
                 writer: Writer | None = None) -> None:
        self.config = config if config is not None else default_config()
        self._pool = pool
        self.writer: Writer = writer if writer is not None else RedisWriter()
        self._shard_clients: dict[int, Client] = {}  # id(shard's config) -> its client

    @property
    def pool(self) -> RedisPool:
        return self._pool if self._pool is not None else self.config.pool("client")

    # -- public -----------------------------------------------------------------------------
    def push(self, item: Mapping[str, Any]) -> str | None:
        """Push one job; returns its jid, or None when a middleware stopped it."""
        other = self._routed(item)
        if other is not None:
            return other.push(item)
        return self._drive(self._push_steps(self.normalize(item)))

    async def apush(self, item: Mapping[str, Any]) -> str | None:
        """``push`` for async code (``await client.apush({...})``): the same steps on the
        running loop's asyncio pool, never blocking it on Redis."""
        other = self._routed(item)
        if other is not None:
            return await other.apush(item)
        return await self._adrive(self._push_steps(self.normalize(item)))

    def _push_steps(self, normalized: P.Payload) -> Steps[str | None]:
        """The push of a payload ``normalize`` made (and that this takes over)."""
        at = normalized.pop(P.AT, None)
        job = yield _Middleware(normalized)
        if job is None:
            return None
        P.check_args(job[P.ARGS])
        if (yield _Write([(job, at)])):
            return None  # a duplicate of a unique job whose lock is held
        return str(job[P.JID])

    def prepare(self, item: Mapping[str, Any]) -> P.Payload | None:
        """An immediate job ready to write, for a writer that writes it itself (a Lua script
        that pushes only under a condition): normalised, through the client middleware,
        arguments checked, an ``encrypt`` job's last argument sealed, ``enqueued_at`` set.
        None when a middleware stopped it."""
        if P.AT in item:
            raise InvalidPayload("a prepared job is pushed now; it cannot have 'at'",
                                 field=P.AT)
        job = self._through_middleware(self.normalize(item))
        if job is None:
            return None
        P.check_args(job[P.ARGS])
        if job.get(P.ENCRYPT) is True:  # written by a script, not ``_write``: sealed here
            self._seal(job)
        job[P.ENQUEUED_AT] = P.write_time(self.config.timestamp_format)
        return job

    def push_bulk(self, item: Mapping[str, Any]) -> list[str | None]:
        """Push many jobs of one class: ``item["args"]`` is a list of argument lists.

        ``at`` may be one time or one per job; ``spread_interval`` spreads them at random
        over that many seconds; ``batch_size`` caps the jobs per round trip.
        """
        parts = self._bulk_routes(item)
        if parts is None:
            return self._drive(self._bulk_steps(item))
        sent = Parts(len(item[P.ARGS]))
        for number, (client, indices, part) in enumerate(parts):
            try:
                jids = client.push_bulk(part)
            except BaseException as exc:
                sent.fail(exc, [client.config.shard_name], indices, _later(parts, number))
                raise
            sent.took([client.config.shard_name], indices, jids)
        return sent.jids

    async def apush_bulk(self, item: Mapping[str, Any]) -> list[str | None]:
        """``push_bulk`` for async code, as ``apush`` is for ``push``."""
        parts = self._bulk_routes(item)
        if parts is None:
            return await self._adrive(self._bulk_steps(item))
        sent = Parts(len(item[P.ARGS]))
        for number, (client, indices, part) in enumerate(parts):
            try:
                jids = await client.apush_bulk(part)
            except BaseException as exc:
                sent.fail(exc, [client.config.shard_name], indices, _later(parts, number))
                raise
            sent.took([client.config.shard_name], indices, jids)
        return sent.jids

    def shards_of(self, item: Mapping[str, Any]) -> list[str]:
        """The shards a bulk push of ``item`` goes to (for an error that names them)."""
        parts = self._bulk_routes(item)
        if parts is None:
            return [self.config.shard_name]
        return [client.config.shard_name for client, _, _ in parts]

    # -- shards -----------------------------------------------------------------------------
    def _routed(self, item: Mapping[str, Any]) -> Client | None:
        """The client of the shard ``item`` goes to, when that is not this one's."""
        if not isinstance(item, Mapping):
            return None  # refused by the push itself, naming what it must be
        target = self._shard_of(item, item.get(P.ARGS))
        return None if target is self.config else self._client_of(target)

    def _shard_of(self, item: Mapping[str, Any], args: Any) -> Config:
        """Where a push of ``item`` (with these ``args``) goes: its own pool (``Pinned``),
        else ``via``'s shard, else the job's ``shard`` option, else the router's answer,
        else this client's own."""
        if writers.overlay() is not None:  # a batch's jobs block: its batch's shard
            return self.config
        if self.config.is_cluster:
            return self._keyspace_of(item)
        name = item.get(SHARD)
        if name is not None and name.__class__ is Pinned:  # the push's own pool: over via
            return name.config(self.config)
        chosen = chosen_shard()
        if chosen is not None:
            return chosen
        router = self.config.shard_router
        if name is None and router is not None:
            name = router(str(item.get(P.CLASS)), str(item.get(P.QUEUE) or P.DEFAULT_QUEUE),
                          list(args) if isinstance(args, (list, tuple)) else [])
        if name is None:
            return self.config
        if isinstance(name, Config):  # a job's definition's pool of its own
            return name
        if not isinstance(name, str):
            raise InvalidPayload(f"'shard' must be a shard's name, not {name!r}", field=SHARD)
        return self.config.shard(name)

    def keyspace_of(self, item: Mapping[str, Any]) -> Config:
        """On Redis Cluster: the keyspace a push of ``item`` goes to, for a writer that pushes
        by a script of its own (``wurk.periodic.cluster``); ``InvalidPayload`` for a queue
        that cannot be a keyspace or a ``retry_queue`` naming another queue."""
        return self._keyspace_of(item)

    def _keyspace_of(self, item: Mapping[str, Any]) -> Config:
        """On Redis Cluster: the keyspace of the queue ``item`` goes to, recorded in the
        cluster's index the first time this process pushes there."""
        queue = item.get(P.QUEUE) or P.DEFAULT_QUEUE
        if not isinstance(queue, str):
            return self.config  # refused by the push itself, naming the field
        retry_queue = item.get(P.RETRY_QUEUE)
        if retry_queue not in (None, "", queue):
            raise InvalidPayload(
                f"retry_queue {retry_queue!r} is not supported on Redis Cluster: a job's "
                f"retries stay in its queue's keyspace ({queue!r}), where no worker of "
                f"{retry_queue!r} would see them (docs/scaling.md)", field=P.RETRY_QUEUE)
        try:
            target = self.config.shard(queue)
        except ConfigError as exc:
            raise InvalidPayload(str(exc), field=P.QUEUE) from None
        root = self.config.shard(DEFAULT_SHARD)
        index = root.keys.cluster_queues
        if (root.redis_url, index, queue) not in _indexed:
            root.pool("client").run(lambda r: r.sadd(index, queue), idempotent=True)
            _indexed.add((root.redis_url, index, queue))
        return target

    def _client_of(self, target: Config) -> Client:
        if target is self.config:
            return self
        found = self._shard_clients.get(id(target))
        if found is None or found.config is not target:
            found = self._shard_clients[id(target)] = type(self)(target, writer=self.writer)
        return found

    def _bulk_routes(self, item: Mapping[str, Any]
                     ) -> list[tuple[Client, list[int], dict[str, Any]]] | None:
        """None when every job of a bulk push goes where this client writes; else, per
        shard, its client, the jobs' places in the push and the push of those jobs (the
        router may send each job elsewhere)."""
        all_args = item.get(P.ARGS) if isinstance(item, Mapping) else None
        if not isinstance(all_args, (list, tuple)) or not all_args:
            return None  # refused by the push itself, naming the field
        targets = [self._shard_of(item, args) for args in all_args]
        if all(target is self.config for target in targets):
            return None
        # Checked whole, as an unsplit push is, before any part goes: a part checked alone
        # would take a list of times of its own length, or go before a later part is refused.
        if not all(isinstance(args, (list, tuple)) for args in all_args):
            raise InvalidPayload("bulk push needs 'args' as a list of argument lists",
                                 field=P.ARGS)
        at = item.get(P.AT)
        if isinstance(at, (list, tuple)) and len(at) != len(all_args):
            raise InvalidPayload(f"'at' has {len(at)} times for {len(all_args)} jobs",
                                 field=P.AT)
        places: dict[int, tuple[Config, list[int]]] = {}
        for index, target in enumerate(targets):
            places.setdefault(id(target), (target, []))[1].append(index)
        parts = []
        for target, indices in places.values():
            part = {**item, P.ARGS: [all_args[i] for i in indices]}
            if isinstance(at, (list, tuple)):
                part[P.AT] = [at[i] for i in indices]
            parts.append((self._client_of(target), indices, part))
        return parts

    def _bulk_steps(self, item: Mapping[str, Any]) -> Steps[list[str | None]]:
        base = dict(item)
        all_args = base.pop(P.ARGS, None)
        if not isinstance(all_args, (list, tuple)) or not all(
            isinstance(a, (list, tuple)) for a in all_args
        ):
            raise InvalidPayload("bulk push needs 'args' as a list of argument lists",
                                 field=P.ARGS)
        ats = self._bulk_times(base, len(all_args))
        if P.JID in base and len(all_args) > 1:
            raise InvalidPayload("a jid cannot be given for more than one job", field=P.JID)
        size = self._batch_size(base.pop("batch_size", None),
                                scheduled=any(at is not None for at in ats))
        own_jid = P.JID in base
        # Normalised once, as Sidekiq does: every job of a bulk push shares its options and
        # its created_at; only args and jid differ.
        template = self.normalize({**base, P.ARGS: []})
        results: list[str | None] = []
        for start in range(0, len(all_args), size):
            chunk = range(start, min(start + size, len(all_args)))
            results.extend((yield from self._slice_steps(template, own_jid,
                                                         [all_args[i] for i in chunk],
                                                         [ats[i] for i in chunk],
                                                         _Place(start, len(all_args), results))))
        return results

    def _batch_size(self, size: Any, *, scheduled: bool) -> int:
        if size is None:
            return self.config.scheduled_bulk_batch_size if scheduled \
                else self.config.bulk_batch_size
        # Refused, not read as the default or as "nothing": a bulk push given 0 or -1 used to
        # push every job in one slice, or none, and say nothing (Sidekiq refuses 0 too).
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InvalidPayload(f"'batch_size' must be a positive int (jobs per round trip) "
                                 f"or None, not {size!r}", field="batch_size")
        return size

    # -- the drivers ------------------------------------------------------------------------
    def _drive(self, steps: Steps[T]) -> T:
        """Answer a push's requests from sync code."""
        try:
            request = next(steps)
            while True:
                if isinstance(request, _Middleware):
                    request = steps.send(self._through_middleware(request.job))
                else:
                    try:
                        refused = self._write(request.entries)
                    except PayloadTooLarge as exc:  # the steps say where it was in a bulk
                        request = steps.throw(exc)
                        continue
                    request = steps.send(refused)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _adrive(self, steps: Steps[T]) -> T:
        """Answer a push's requests on the running loop."""
        try:
            request = next(steps)
            while True:
                if isinstance(request, _Middleware):
                    request = steps.send(await self._athrough_middleware(request.job))
                else:
                    try:
                        refused = await self._awrite(request.entries)
                    except PayloadTooLarge as exc:
                        request = steps.throw(exc)
                        continue
                    request = steps.send(refused)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    # -- normalisation ----------------------------------------------------------------------
    def normalize(self, item: Mapping[str, Any]) -> P.Payload:
        """Sidekiq's ``normalize_item``: a complete payload ready for middleware."""
        if not isinstance(item, Mapping):
            raise InvalidPayload(f"a job must be a dict, not {type(item).__name__}")
        job: P.Payload = {**_DEFAULTS, **item}
        for key in ("pool", "client_class", "sync", P.TRANSACTIONAL, SHARD):
            job.pop(key, None)
        cls = job.get(P.CLASS)
        if not isinstance(cls, str) or not cls:
            raise InvalidPayload(f"'class' must be the job's name (a non-empty string), "
                                 f"not {cls!r}", field=P.CLASS)
        if not isinstance(job.get(P.ARGS), list):
            raise InvalidPayload(f"'args' must be a list, not {type(job.get(P.ARGS)).__name__}",
                                 field=P.ARGS)
        self._check_fields(job)
        if not job.get(P.JID):
            job[P.JID] = P.new_jid()
        if job.get(P.CREATED_AT) is None:  # Sidekiq's ``||=``: a null is no time either
            job[P.CREATED_AT] = P.write_time(self.config.timestamp_format)
        return job

    @staticmethod
    def _check_fields(job: P.Payload) -> None:
        # The check a job's options get: a raw push used to take "a b", a queue no worker
        # can be given, and the job waited there for ever.
        for key in (P.QUEUE, P.RETRY_QUEUE):
            if key == P.QUEUE or job.get(key) not in (None, ""):
                try:
                    check_job_queue(job.get(key), key=key)
                except ConfigError as exc:
                    raise InvalidPayload(f"'{key}' is not a queue name: {exc}",
                                         field=key) from None
        if job.get(P.AT) is not None:
            job[P.AT] = _at(job[P.AT])
        # None (Ruby's nil) is an option not set, kept as Sidekiq's client keeps it: a job
        # Ruby pushed so passes here again when the scheduler pushes it through the client.
        # Every option is read so (``payload.get(X) is not None``), never as ``X in job``.
        if job.get(P.ENCRYPT) is not None and not isinstance(job[P.ENCRYPT], bool):
            # anything else would be pushed in plain text, shown as "[encrypted data]"
            raise InvalidPayload(f"'encrypt' must be true or false (true seals the last "
                                 f"argument: wurk.crypto), not {job[P.ENCRYPT]!r}",
                                 field=P.ENCRYPT)
        if job.get(P.TAGS) is not None and not isinstance(job[P.TAGS], list):
            raise InvalidPayload(f"'tags' must be a list, not {job[P.TAGS]!r}", field=P.TAGS)
        if job.get(P.RETRY_FOR) is not None:
            retry_for = job[P.RETRY_FOR]
            job[P.RETRY_FOR] = retry_for_seconds(retry_for, lambda expected: InvalidPayload(
                f"'retry_for' must be {expected}, not {retry_for!r}", field=P.RETRY_FOR))
        if P.UNIQUE_FOR in job or P.UNIQUE_UNTIL in job:
            check_unique_fields(job)
        if job.get(P.EXPIRES_IN) is not None:
            check_expiry_fields(job)
        if P.RESULT_TTL in job:
            check_result_ttl(job)
        P.validate(job)

    def _through_middleware(self, job: P.Payload) -> P.Payload | None:
        chain = self.config.client_middleware
        if not chain:
            return job
        reached = False

        def final() -> P.Payload:
            nonlocal reached
            reached = True
            return job

        result = chain.invoke(job[P.CLASS], job, job[P.QUEUE], final, run_async=_run_async_link)
        return _let_through(job, result, reached)

    async def _athrough_middleware(self, job: P.Payload) -> P.Payload | None:
        chain = self.config.client_middleware
        if not chain:
            return job
        reached = False

        def final() -> P.Payload:
            nonlocal reached
            reached = True
            return job

        result = await chain.ainvoke(job[P.CLASS], job, job[P.QUEUE], final,
                                     sync_links="inline")
        return _let_through(job, result, reached)

    # -- bulk -------------------------------------------------------------------------------
    def _bulk_times(self, base: P.Payload, count: int) -> list[float | None]:
        at = base.pop(P.AT, None)
        spread = base.pop("spread_interval", None)
        if at is not None and spread is not None:
            raise InvalidPayload("give 'at' or 'spread_interval', not both", field=P.AT)
        if spread is not None:
            window = max(P.finite_seconds(spread, "'spread_interval'", "a finite number of "
                                          "seconds", field="spread_interval"),
                         MIN_SPREAD_INTERVAL)
            now = time.time()
            return [now + random.random() * window for _ in range(count)]
        if isinstance(at, (list, tuple)):
            if len(at) != count:
                raise InvalidPayload(f"'at' has {len(at)} times for {count} jobs", field=P.AT)
            return [_at(t, f"'at'[{index}]") for index, t in enumerate(at)]
        return [None if at is None else _at(at)] * count

    def _slice_steps(self, template: P.Payload, own_jid: bool, args_list: list[Any],
                     ats: list[float | None], place: _Place) -> Steps[list[str | None]]:
        results: list[str | None] = []
        entries: list[tuple[P.Payload, float | None]] = []
        for offset, (args, at) in enumerate(zip(args_list, ats, strict=True)):
            fresh = template.copy()
            fresh[P.ARGS] = list(args)
            if not own_jid:
                fresh[P.JID] = P.new_jid()
            job = yield _Middleware(fresh)
            if job is None:
                results.append(None)
                continue
            try:
                P.check_args(job[P.ARGS])  # after the middleware: it may convert them
            except InvalidArguments as exc:
                raise InvalidArguments(place.refused(offset, exc)) from None
            entries.append((job, at))
            results.append(str(job[P.JID]))
        if entries:
            try:
                refused = yield _Write(entries)
            except PayloadTooLarge as exc:
                offset = results.index(exc.jid) if exc.jid in results else 0
                raise PayloadTooLarge(place.too_large(offset, len(args_list), exc),
                                      jid=exc.jid, job_class=exc.job_class, size=exc.size,
                                      limit=exc.limit) from None
            if refused:
                results = [None if jid in refused else jid for jid in results]
        return results

    # -- writing ----------------------------------------------------------------------------
    def _write(self, entries: Entries) -> set[str]:
        """The last step: the writer selected for this push (``wurk.client.writers``), else
        this client's own. Returns the jids it refused (duplicates of unique jobs)."""
        self._stamp(entries)
        return (writers.selected() or self.writer).write(self.config, self.pool, entries)

    async def _awrite(self, entries: Entries) -> set[str]:
        """``_write`` for async code: the writer's async form (the running loop's pool)."""
        self._stamp(entries)
        return await (writers.selected() or self.writer).awrite(self.config, entries)

    def _stamp(self, entries: Entries) -> None:
        fmt = self.config.timestamp_format
        enqueued_at = P.write_time(fmt)
        for job, at in entries:
            if job.get(P.EXPIRES_IN) is not None:
                stamp_expiry(job, at, fmt)
            if job.get(P.ENCRYPT) is True:
                self._seal(job)
            if at is not None:
                job.pop(P.ENQUEUED_AT, None)
            else:
                job[P.ENQUEUED_AT] = enqueued_at

    def _seal(self, job: P.Payload) -> None:
        """Seal the last argument of an ``encrypt: true`` job (``wurk.crypto``), its unique
        digest taken first: every payload this client makes ready to write passes here,
        whoever writes it (a writer, or a script: a periodic tick, a workflow step)."""
        if job.get(P.UNIQUE_FOR) is not None and not job.get(P.UNIQUE_DIGEST):
            # digested before sealing: a fresh nonce per push would make every push's
            # digest differ, and no duplicate would ever be refused
            plain = unique_args(self.config, job)
            if plain is not None:
                job[P.UNIQUE_DIGEST] = job_digest({**job, P.ARGS: plain})
        seal(self.config, job)  # the last argument; never an envelope twice


def _later(parts: list[tuple[Client, list[int], dict[str, Any]]], number: int
           ) -> list[tuple[list[str], list[int]]]:
    """The parts of a routed bulk push after part ``number``: their shards and places."""
    return [([client.config.shard_name], indices) for client, indices, _ in parts[number + 1:]]


def _at(value: Any, name: str = "'at'") -> float:
    return P.finite_seconds(value, name, "finite epoch seconds", field=P.AT)


def _let_through(job: P.Payload, result: Any, reached: bool) -> P.Payload | None:
    """What a client chain lets through: nothing unless it reached its end (a link that does
    not call ``call_next`` stops the push, whatever it returns) or when a link returned None
    or False; else the dict a link returned, or the payload."""
    if not reached or result is None or result is False:
        return None
    return result if isinstance(result, dict) else job


def _run_async_link(link: Callable[..., Coroutine[Any, Any, Any]], job: Any,
                    payload: dict[str, Any], queue_name: str, rest: Callable[[], Any]) -> Any:
    """An async client middleware met by a sync push: the link runs on a loop of its own
    (``TemporaryLoop``), through the one bridge the worker uses too."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:  # this thread's loop would stand still while the push waits for the link
        raise TypeError(f"{link!r} is async client middleware and this sync push runs inside "
                        "an event loop: push with await job.aperform_async(...) / "
                        "wurk.apush(...)")
    with TemporaryLoop() as loop:
        return bridge(loop.submit, link, job, payload, queue_name, rest)
