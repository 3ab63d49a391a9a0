"""Pushing jobs: normalise a payload, run client middleware, write it in one round trip.

1. ``normalize`` applies Sidekiq's push rules: defaults under the
   item, a jid and ``created_at`` when missing, transient keys dropped, bad fields refused.
2. Client middleware may change the payload or stop the push (the call then returns None).
3. Arguments are checked after the middleware, so middleware may convert them.
4. One pipeline per push or per bulk slice: ``SADD queues`` + ``LPUSH`` per queue for
   immediate jobs, one ``ZADD schedule`` for scheduled ones. Never a transaction, never replayed
   after a broken connection (a replay could push the job twice).
5. A push while Redis is down or refusing raises ``wurk.RedisUnavailable`` naming the jobs
   and what to do; nothing is buffered (reliable push is a later feature).
6. A job with ``expires_in`` gets its deadline (``wurk.expiry``); a job with ``unique_for``
   is pushed together with its lock by a Lua script (``wurk.unique``) and a duplicate
   returns None. Other jobs pay two dict lookups for this.
7. ``apush`` / ``apush_bulk`` are the same pushes for async code: the very same push, run in
   a helper thread of the running loop so the loop never waits on Redis. A sync push
   meeting an async client middleware runs it on a loop of its own.
8. Jobs pushed inside a batch's jobs block are written by the batch's script, which
   registers each with the batch as it pushes it (with a unique job's lock, when it has
   one: a duplicate is neither pushed nor registered; ``wurk.batch.accounting``).
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from . import expiry, sinks, unique
from . import payload as P
from .config import Config, default_config
from .errors import InvalidPayload, RedisUnavailable
from .pool import RedisPool

__all__ = ["Client"]

# Sidekiq raises spread intervals below this to it (8.0.8).
MIN_SPREAD_INTERVAL = 5.0
# retry_for must be relative seconds; anything larger was surely meant as a timestamp.
MAX_RETRY_FOR = 1_000_000_000

_DEFAULTS: dict[str, Any] = {P.RETRY: True, P.QUEUE: P.DEFAULT_QUEUE}


class Client:
    """Pushes payloads into one Redis, through the configuration's client middleware."""

    def __init__(self, config: Config | None = None, *, pool: RedisPool | None = None) -> None:
        self.config = config if config is not None else default_config()
        self._pool = pool

    @property
    def pool(self) -> RedisPool:
        return self._pool if self._pool is not None else self.config.pool("client")

    # -- public -----------------------------------------------------------------------------
    def push(self, item: Mapping[str, Any]) -> str | None:
        """Push one job; returns its jid, or None when a middleware stopped it."""
        normalized = self.normalize(item)
        at = normalized.pop(P.AT, None)
        job = self._through_middleware(normalized)
        if job is None:
            return None
        P.check_args(job[P.ARGS])
        if self._write([(job, at)]):
            return None  # a duplicate of a unique job whose lock is held
        return str(job[P.JID])

    def prepare(self, item: Mapping[str, Any]) -> P.Payload | None:
        """An immediate job ready to write, for a writer that writes it itself (a Lua script
        that pushes only under a condition): normalised, through the client middleware,
        arguments checked, ``enqueued_at`` set. None when a middleware stopped it."""
        if P.AT in item:
            raise InvalidPayload("a prepared job is pushed now; it cannot have 'at'",
                                 field=P.AT)
        job = self._through_middleware(self.normalize(item))
        if job is None:
            return None
        P.check_args(job[P.ARGS])
        job[P.ENQUEUED_AT] = P.write_time(self.config.timestamp_format)
        return job

    def push_bulk(self, item: Mapping[str, Any]) -> list[str | None]:
        """Push many jobs of one class: ``item["args"]`` is a list of argument lists.

        ``at`` may be one time or one per job; ``spread_interval`` spreads them at random
        over that many seconds; ``batch_size`` caps the jobs per round trip.
        """
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
        size = base.pop("batch_size", None) or (
            self.config.scheduled_bulk_batch_size if any(ats) else self.config.bulk_batch_size
        )
        own_jid = P.JID in base
        # Normalised once, as Sidekiq does: every job of a bulk push shares its options and
        # its created_at; only args and jid differ.
        template = self.normalize({**base, P.ARGS: []})
        results: list[str | None] = []
        for start in range(0, len(all_args), size):
            chunk = range(start, min(start + size, len(all_args)))
            results.extend(self._push_slice(template, own_jid,
                                            [all_args[i] for i in chunk],
                                            [ats[i] for i in chunk]))
        return results

    # -- normalisation ----------------------------------------------------------------------
    def normalize(self, item: Mapping[str, Any]) -> P.Payload:
        """Sidekiq's ``normalize_item``: a complete payload ready for middleware."""
        if not isinstance(item, Mapping):
            raise InvalidPayload(f"a job must be a dict, not {type(item).__name__}")
        job: P.Payload = {**_DEFAULTS, **item}
        for key in ("pool", "client_class", "sync", P.TRANSACTIONAL):
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
        if P.CREATED_AT not in job:
            job[P.CREATED_AT] = P.write_time(self.config.timestamp_format)
        return job

    @staticmethod
    def _check_fields(job: P.Payload) -> None:
        queue = job.get(P.QUEUE)
        if not isinstance(queue, str) or not queue:
            raise InvalidPayload(f"'queue' must be a non-empty string, not {queue!r}",
                                 field=P.QUEUE)
        if "|" in queue:
            raise InvalidPayload(f"queue name {queue!r} contains '|', which wurk reserves for "
                                 "in-flight lists", field=P.QUEUE)
        at = job.get(P.AT)
        if at is not None and (isinstance(at, bool) or not isinstance(at, (int, float))):
            raise InvalidPayload(f"'at' must be epoch seconds, not {at!r}", field=P.AT)
        if P.TAGS in job and not isinstance(job[P.TAGS], list):
            raise InvalidPayload(f"'tags' must be a list, not {job[P.TAGS]!r}", field=P.TAGS)
        if P.RETRY_FOR in job:
            retry_for = job[P.RETRY_FOR]
            if isinstance(retry_for, bool) or not isinstance(retry_for, (int, float)) or not (
                0 < retry_for <= MAX_RETRY_FOR
            ):
                raise InvalidPayload(f"'retry_for' must be seconds between 1 and "
                                     f"{MAX_RETRY_FOR}, not {retry_for!r}", field=P.RETRY_FOR)
            job[P.RETRY_FOR] = int(retry_for)
        if P.UNIQUE_FOR in job or P.UNIQUE_UNTIL in job:
            unique.check_fields(job)
        if P.EXPIRES_IN in job:
            expiry.check_fields(job)
        P.validate(job)

    def _through_middleware(self, job: P.Payload) -> P.Payload | None:
        chain = self.config.client_middleware
        if not chain:
            return job
        result = chain.invoke(job[P.CLASS], job, job[P.QUEUE], lambda: job,
                              run_async=_run_async_link)
        if result is None or result is False:
            return None
        return result if isinstance(result, dict) else job

    # -- async code -------------------------------------------------------------------------
    async def apush(self, item: Mapping[str, Any]) -> str | None:
        """``push`` for async code: ``await client.apush({...})``. The helper thread runs in
        a copy of the task's context, so a batch's jobs block (or a testing mode's block)
        open in the task covers the push."""
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(None, context.run, self.push,
                                                                item)

    async def apush_bulk(self, item: Mapping[str, Any]) -> list[str | None]:
        """``push_bulk`` for async code."""
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(None, context.run,
                                                                self.push_bulk, item)

    # -- bulk -------------------------------------------------------------------------------
    def _bulk_times(self, base: P.Payload, count: int) -> list[float | None]:
        at = base.pop(P.AT, None)
        spread = base.pop("spread_interval", None)
        if at is not None and spread is not None:
            raise InvalidPayload("give 'at' or 'spread_interval', not both", field=P.AT)
        if spread is not None:
            window = max(float(spread), MIN_SPREAD_INTERVAL)
            now = time.time()
            return [now + random.random() * window for _ in range(count)]
        if isinstance(at, (list, tuple)):
            if len(at) != count:
                raise InvalidPayload(f"'at' has {len(at)} times for {count} jobs", field=P.AT)
            return [float(t) for t in at]
        return [None if at is None else float(at)] * count

    def _push_slice(self, template: P.Payload, own_jid: bool, args_list: list[Any],
                    ats: list[float | None]) -> list[str | None]:
        results: list[str | None] = []
        entries: list[tuple[P.Payload, float | None]] = []
        for args, at in zip(args_list, ats, strict=True):
            fresh = template.copy()
            fresh[P.ARGS] = list(args)
            if not own_jid:
                fresh[P.JID] = P.new_jid()
            job = self._through_middleware(fresh)
            if job is None:
                results.append(None)
                continue
            P.check_args(job[P.ARGS])
            entries.append((job, at))
            results.append(str(job[P.JID]))
        if entries:
            refused = self._write(entries)
            if refused:
                results = [None if jid in refused else jid for jid in results]
        return results

    # -- writing ----------------------------------------------------------------------------
    def _write(self, entries: Sequence[tuple[P.Payload, float | None]]) -> set[str]:
        """The last step: Redis, or the sink selected for this push (``wurk.sinks``).
        Returns the jids of unique jobs refused as duplicates (only Redis holds locks)."""
        fmt = self.config.timestamp_format
        enqueued_at = P.write_time(fmt)
        for job, at in entries:
            if P.EXPIRES_IN in job:
                expiry.stamp(job, at, fmt)
            if at is not None:
                job.pop(P.ENQUEUED_AT, None)
            else:
                job[P.ENQUEUED_AT] = enqueued_at
        sink = sinks.selected()
        if sink is None:
            return self._write_redis(entries)
        from .batch.accounting import register  # the batch package imports the client

        register(self.config, entries)  # a batch is in Redis still
        sink.write(self.config, entries)
        return set()

    def _write_redis(self, entries: Sequence[tuple[P.Payload, float | None]]) -> set[str]:
        keys = self.config.keys
        scheduled: dict[str, float] = {}
        by_queue: dict[str, list[str]] = {}
        locked: list[tuple[P.Payload, float | None]] = []
        from .batch.accounting import write as write_in_batch  # it imports the client
        from .batch.block import split

        plain, in_batch = split(entries)
        for job, at in plain:
            if P.UNIQUE_FOR in job:
                locked.append((job, at))  # pushed with its lock, by a script
            elif at is not None:
                scheduled[P.dumps(job)] = float(at)
            else:
                by_queue.setdefault(job[P.QUEUE], []).append(P.dumps(job))

        def send(redis: Any) -> set[str]:
            if scheduled or by_queue:
                pipe = redis.pipeline(transaction=False)
                if scheduled:
                    pipe.zadd(keys.schedule, scheduled)
                if by_queue:
                    pipe.sadd(keys.queues, *by_queue)
                    for queue, jsons in by_queue.items():
                        pipe.lpush(keys.queue(queue), *jsons)
                pipe.execute()
            refused = unique.push(redis, keys, locked) if locked else set()
            if in_batch:
                refused |= write_in_batch(redis, self.config, in_batch)
            return refused

        try:
            return self.pool.run(send)
        except RedisUnavailable as exc:
            raise RedisUnavailable(_push_failed(entries, exc)) from exc


def _run_async_link(link: Callable[..., Coroutine[Any, Any, Any]], job: Any,
                    payload: dict[str, Any], queue: str, rest: Callable[[], Any]) -> Any:
    """An async client middleware met by a sync push: run on a loop of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        async def call_next() -> Any:
            return rest()

        return asyncio.run(link(job, payload, queue, call_next))
    raise TypeError(f"{link!r} is async client middleware and this sync push runs inside an "
                    "event loop: push with await job.aperform_async(...) / wurk.apush(...)")


def _push_failed(entries: Sequence[tuple[P.Payload, float | None]], exc: Exception) -> str:
    first = entries[0][0]
    what = f"{first.get(P.CLASS)} (jid {first.get(P.JID)})"
    if len(entries) > 1:
        what = f"{len(entries)} jobs, the first {what}"
    return (f"could not push {what}: {exc}. Nothing was kept to retry later: push again "
            "once Redis is back, or catch wurk.RedisUnavailable. (If the connection broke "
            "mid-command, the push may have reached Redis.)")
