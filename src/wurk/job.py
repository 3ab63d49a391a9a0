"""Defining jobs: the ``@wurk.job`` decorator, ``wurk.Job`` subclasses and the registry.

1. A job has a wire name (the payload's ``class``) and default options merged under every
   push. The name defaults to ``<module>.<qualname>``; give ``name=`` to match a Ruby class.
2. The registry maps wire names to definitions. A worker runs only registered jobs: a
   payload's ``class`` is a lookup key, never something to import (that would let whoever
   writes to Redis run any code).
3. ``perform_async``/``perform_in``/``perform_at`` of a decorated function are typed against
   its own signature (``ParamSpec``), so mypy catches a wrong argument, and checked against
   it at push time too, so a missing, extra or unknown argument is an ``InvalidArguments``
   naming it rather than a job that fails all its retries. Keyword arguments are bound to
   their positions: Sidekiq's payload only has positional ``args``.
4. ``set(...)`` returns a one-shot setter with the same methods and overridden options.
5. ``interrupted()`` (``self.interrupted()`` in a ``Job``): whether the worker running this
   job has been told to stop — quiet or shut down — so a long job can save its place and
   return; the processor hands its stop signal over (``set_stop_signal``).
6. ``aperform_async``/``aperform_in``/``aperform_at``/``aperform_bulk`` are the same pushes
   for async code (``await job.aperform_async(...)``): same payload, never blocking the loop.
7. A push returns a ``wurk.results.ResultHandle`` — the jid, still a ``str`` — generic in the
   job's return type: ``@wurk.job`` on ``def f() -> int`` makes a ``JobFunction[P, int]``,
   on ``async def f() -> int`` an ``AsyncJobFunction[P, int]``, and both push
   ``ResultHandle[int]``; ``handle.result()`` waits for a job with ``result_ttl``.
8. Options of the definition only, never of one push nor in the payload: ``rate_limit`` (a
   limiter) and ``partition_by`` (a function of the arguments naming each push's partition
   on a partitioned queue, ``wurk.partitions``; a push's own ``partition`` wins, and a bulk
   push is split by partition).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar, Generic, ParamSpec, Protocol, TypeVar, overload

from . import crypto, partitions, unique
from . import payload as P
from .client import writers
from .client.core import Client, Parts, Pinned, pin
from .client.default import default_client
from .client.writers import KeptJobs, kept
from .config import Config
from .errors import (
    ConfigError,
    InvalidArguments,
    InvalidPayload,
    JobNotRegistered,
    RegistrationError,
)
from .middleware import on_own_loop
from .options import SHARD, validate_options
from .results.handle import ResultHandle

__all__ = ["AsyncJobFunction", "Job", "JobDefinition", "JobFunction", "JobSetter", "Registry",
           "current_jid", "current_job", "interrupted", "job", "registry", "validate_options"]

Params = ParamSpec("Params")
R = TypeVar("R")
Interval = float | int | timedelta
When = float | int | datetime

_running: contextvars.ContextVar[P.Payload | None] = contextvars.ContextVar(
    "wurk_running_job", default=None
)
# The variable itself, for the processor to set and reset around every job without a call.
RUNNING = _running


def current_job() -> P.Payload | None:
    """The payload of the job running in this thread or task (None outside a job)."""
    return _running.get()


def current_jid() -> str | None:
    """The jid of the running job: function jobs have no ``self.jid``."""
    job = _running.get()
    jid = job.get(P.JID) if job is not None else None
    return jid if isinstance(jid, str) else None


# The stop signal of the processor thread running jobs here: set when its worker quiets or
# stops. A context variable, so an async job on the runner's loop sees it too.
_stop_signal: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar(
    "wurk_stop_signal", default=None
)


def interrupted() -> bool:
    """True once the worker running this job has been told to quiet or stop (Sidekiq's
    ``interrupted?``): finish or save progress and return, the job is not killed for it.
    Always False outside a worker (inline, tests)."""
    signal = _stop_signal.get()
    return signal is not None and signal.is_set()


def set_stop_signal(signal: threading.Event) -> None:
    """Called by a processor thread once: ``signal`` is what ``interrupted()`` reads there."""
    _stop_signal.set(signal)


def set_running(job: P.Payload | None) -> contextvars.Token[P.Payload | None]:
    return _running.set(job)


def reset_running(token: contextvars.Token[P.Payload | None]) -> None:
    _running.reset(token)


# Options that change how the worker treats the job; anything else is copied into the
# payload as is (middleware commonly reads custom keys).
_HOOK_OPTIONS = ("retry_in", "retries_exhausted", "unique_context")



# -- a job's batch ------------------------------------------------------------------------------
# How ``Job.batch`` opens a job's batch. Batches build on this module, so it imports nothing of
# them: the batch package hands its opener over when it is installed in a worker or a testing
# mode (``wurk.batch.install``), or when a batch is filled in this process.
BatchOpener = Callable[[str], Any]
_batch_opener: BatchOpener | None = None


def open_batches_with(opener: BatchOpener) -> None:
    """Record how ``Job.batch`` opens a batch by its bid (the batch package's ``Batch``)."""
    global _batch_opener
    _batch_opener = opener


def _open_batch(bid: str) -> Any:
    if _batch_opener is None:
        raise RuntimeError(f"this job belongs to batch {bid}, but batches are not set up in "
                           "this process: run it in a wurk worker or a testing mode, or "
                           "import wurk.batch and call wurk.batch.install(config)")
    return _batch_opener(bid)


class JobDefinition:
    """A registered job: its wire name, default options and how to run it."""

    def __init__(self, name: str, target: Callable[..., Any], options: Mapping[str, Any],
                 *, hooks: Mapping[str, Callable[..., Any]] | None = None,
                 is_class: bool = False, rate_limit: Any = None,
                 partition_by: Any = None) -> None:
        self.name = name
        self.target = target
        self.options = dict(options)
        self.hooks = dict(hooks or {})
        # A ``wurk.limiter`` limiter every run of this job is held to (its ``rate_limit``
        # option): kept here, not in the payload, which holds JSON only.
        self.rate_limit = _check_rate_limit(name, rate_limit)
        # Each push's partition from its arguments (``partition_by``, wurk.partitions); a
        # push's own ``partition`` wins.
        self.partition_by = _check_partition_by(name, partition_by, self.options)
        self.is_class = is_class
        perform = getattr(target, "perform", None) if is_class else target
        self.is_async = inspect.iscoroutinefunction(perform)
        self._shape: _Shape | None = None

    def __repr__(self) -> str:
        return f"<JobDefinition {self.name!r}>"

    def partition_of(self, args: Sequence[Any]) -> str:
        """The partition ``partition_by`` gives a push of ``args``; ``InvalidPayload`` naming
        the job when it raises or returns what cannot name a partition."""
        by = self.partition_by
        if by is None:
            raise RegistrationError(f"job {self.name!r} has no partition_by")
        try:
            value = by(*args)
        except Exception as exc:
            raise InvalidPayload(
                f"job {self.name!r}: its partition_by raised {type(exc).__name__} for args "
                f"{_short(args)}: {exc}", field=P.PARTITION) from exc
        try:
            return partitions.partition_name(value, where=f"job {self.name!r}: partition_by")
        except InvalidPayload as exc:
            raise InvalidPayload(f"{exc} (it returned that for args {_short(args)})",
                                 field=P.PARTITION) from None

    def positional(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
        """Arguments as the payload's positional ``args`` list, checked against the job's
        signature; ``InvalidArguments`` names a missing, extra or unknown argument."""
        shape = self._shape or self._read_shape()
        if not kwargs and shape.accepts(len(args)):  # the common push: no binding needed
            return list(args)
        if shape.signature is None:  # a callable inspect cannot read: nothing to check
            if kwargs:
                raise InvalidArguments(f"{self.name}: keyword arguments need a signature "
                                       "to bind them to positions; pass them in order")
            return list(args)
        return self._bind(shape.signature, args, kwargs)

    def _read_shape(self) -> _Shape:
        perform = self.target.perform if self.is_class else self.target  # type: ignore[attr-defined]
        try:
            signature = inspect.signature(perform)
        except (TypeError, ValueError):
            signature = None
        if signature is not None:  # shown in errors as ``add(a, b)``: no self, no types
            params = [p.replace(annotation=p.empty) for p in signature.parameters.values()]
            signature = signature.replace(parameters=params[1:] if self.is_class else params,
                                          return_annotation=inspect.Signature.empty)
        self._shape = _Shape.of(signature)
        return self._shape

    def _bind(self, signature: inspect.Signature, args: Sequence[Any],
              kwargs: Mapping[str, Any]) -> list[Any]:
        call = f"{self.name}{signature}"
        accepts_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
        unknown = [key for key in kwargs if key not in signature.parameters]
        if unknown and not accepts_any:
            raise InvalidArguments(f"{call}: unexpected keyword argument {unknown[0]!r}")
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidArguments(f"{call}: {_bind_problem(exc, signature, args)}") from None
        if bound.kwargs:
            raise InvalidArguments(
                f"{call}: keyword-only arguments {sorted(bound.kwargs)} cannot travel in "
                "a Sidekiq payload, which has positional args only"
            )
        return list(bound.args)

    def instantiate(self, payload: P.Payload) -> Any:
        """The object whose ``perform`` runs the job (a ``Job`` instance, or the function)."""
        if not self.is_class:
            return self.target
        instance = self.target()
        instance.jid = payload.get(P.JID, "")
        instance.bid = payload.get(P.BID)
        instance.payload = payload
        return instance

    def call(self, instance: Any, args: Sequence[Any]) -> Any:
        return instance.perform(*args) if self.is_class else instance(*args)

    def unique_context(self) -> Callable[[P.Payload], Any] | None:
        """The job's ``unique_context`` hook, if it defines one (a class method of a class
        job, the option of a function job)."""
        if not self.is_class:
            return self.hooks.get("unique_context")
        method: Callable[[P.Payload], Any] = self.target.unique_context  # type: ignore[attr-defined]
        base = getattr(Job.unique_context, "__func__", None)
        return None if getattr(method, "__func__", None) is base else method

    def hook(self, name: str, instance: Any) -> Callable[..., Any] | None:
        if self.is_class:
            method = getattr(instance, name, None)
            base = getattr(Job, name)
            if method is None or getattr(method, "__func__", None) is base:
                return None
            return method  # type: ignore[no-any-return]
        return self.hooks.get(name)


class _Shape:
    """How many positional arguments a job takes, read once from its signature."""

    def __init__(self, signature: inspect.Signature | None, fewest: int,
                 most: int | None) -> None:
        self.signature = signature
        self.fewest = fewest
        self.most = most  # None: any number (``*args``)

    @classmethod
    def of(cls, signature: inspect.Signature | None) -> _Shape:
        if signature is None:
            return cls(None, 0, None)
        params = list(signature.parameters.values())
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                       p.POSITIONAL_OR_KEYWORD)]
        required = [p for p in positional if p.default is p.empty]
        if any(p.kind is p.KEYWORD_ONLY and p.default is p.empty for p in params):
            return cls(signature, 1, 0)  # never satisfied by position alone: always bind
        most = None if any(p.kind is p.VAR_POSITIONAL for p in params) else len(positional)
        return cls(signature, len(required), most)

    def accepts(self, count: int) -> bool:
        return self.fewest <= count and (self.most is None or count <= self.most)


def _bind_problem(exc: TypeError, signature: inspect.Signature, args: Sequence[Any]) -> str:
    """Python's complaint, with the extra arguments named where it only counts them."""
    text = str(exc)
    if text != "too many positional arguments":
        return text
    most = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
               for p in signature.parameters.values())
    extra = ", ".join(repr(a) for a in args[most:])
    return f"too many positional arguments: it takes {most}, got {len(args)} (extra: {extra})"


class Registry:
    """Wire name → definition. Thread-safe; a name belongs to one target."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobDefinition] = {}
        self._lock = threading.Lock()

    def register(self, definition: JobDefinition) -> None:
        with self._lock:
            existing = self._jobs.get(definition.name)
            if existing is not None and not _same_source(existing.target, definition.target):
                raise RegistrationError(
                    f"job name {definition.name!r} is already registered by "
                    f"{_describe(existing.target)}; give one of them another name="
                )
            self._jobs[definition.name] = definition
            unique.use_context(definition.name, definition.unique_context())
            unique.use_sealed(definition.name, definition.options.get(P.ENCRYPT) is True)
            crypto.declare(definition.name, definition.options.get(P.ENCRYPT) is True)

    def unregister(self, name: str) -> None:
        with self._lock:
            self._jobs.pop(name, None)
            unique.use_context(name, None)
            unique.use_sealed(name, False)
            crypto.declare(name, False)

    def get(self, name: Any) -> JobDefinition | None:
        """The definition registered as ``name``, or None (``lookup`` raises instead)."""
        return self._jobs.get(name) if type(name) is str else None

    def lookup(self, name: str) -> JobDefinition:
        definition = self._jobs.get(name)
        if definition is None:
            raise JobNotRegistered(
                f"no job named {name!r} is registered in this process; load the module that "
                "defines it with -r, or register it with @wurk.job(name=...)"
            )
        return definition

    def __contains__(self, name: object) -> bool:
        return name in self._jobs

    def names(self) -> list[str]:
        return sorted(self._jobs)


def _same_source(a: Any, b: Any) -> bool:
    """A module reloaded re-registers the same qualified name; that is not a clash."""
    def origin(x: Any) -> tuple[Any, Any]:
        return getattr(x, "__module__", None), getattr(x, "__qualname__", None)

    return a is b or origin(a) == origin(b)


def _describe(target: Any) -> str:
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', target)}"


registry = Registry()


def wire_name(target: Any, name: str | None) -> str:
    if name is not None:
        if not isinstance(name, str) or not name:
            raise RegistrationError(f"name= must be a non-empty string, not {name!r}")
        return name
    module = getattr(target, "__module__", None)
    if module == "__main__":
        raise RegistrationError(
            f"job {target.__qualname__!r} is defined in __main__, a name a worker cannot load; "
            f"give it a wire name: @wurk.job(name=\"{target.__qualname__}\")"
        )
    return f"{module}.{target.__qualname__}"


# -- pushing ----------------------------------------------------------------------------------
def _seconds_from_now(interval: Interval, name: str = "perform_in's interval") -> float:
    # A finite number, checked here: a NaN made a time no comparison holds, which pushed the
    # job at once and said nothing.
    seconds = interval.total_seconds() if isinstance(interval, timedelta) else \
        P.finite_seconds(interval, name, "a finite number of seconds or a timedelta",
                         field=P.AT)
    # Sidekiq: below 10^9 an interval is relative, above it an absolute epoch.
    return seconds if seconds >= P.ABSOLUTE_EPOCH_FLOOR else time.time() + seconds


def _due_at(when: When) -> float:
    """``perform_at``'s time as epoch seconds: an aware datetime is that time, however long
    ago (before 2001 it is below 10^9, and was read as seconds from now); a number follows
    Sidekiq's 10^9 rule (``perform_at`` is its ``perform_in``)."""
    if isinstance(when, datetime):
        return _epoch(when)
    return _seconds_from_now(_epoch(when), "perform_at's time")


def _epoch(when: When, name: str = "perform_at's time") -> float:
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise ValueError(
                f"perform_at got a naive datetime {when!r}; give it a timezone "
                "(e.g. datetime.now(timezone.utc)) so the time is unambiguous"
            )
        return when.timestamp()
    return P.finite_seconds(when, name, "an aware datetime or finite epoch seconds",
                            field=P.AT)


class JobSetter(Generic[Params, R]):
    """``job.set(queue=..., retry=...)``: pushes with some options overridden. Each push
    returns a ``ResultHandle[R]`` (the jid), or None when a client middleware stopped it
    (a unique job's duplicate among them)."""

    def __init__(self, definition: JobDefinition, options: Mapping[str, Any],
                 config: Config | None = None) -> None:
        opts = dict(options)
        self._config = opts.pop("config", config)
        where = f"{definition.name}.set()"
        pool = opts.pop("pool", None)
        if pool is not None and SHARD in opts:
            raise ConfigError(f"{where}: give pool or shard, not both (both name the Redis "
                              "the push goes to)")
        self._wait_until: float | None = None
        if "wait" in opts:
            self._wait_until = _seconds_from_now(opts.pop("wait"), "wait")
        if "wait_until" in opts:
            self._wait_until = _epoch(opts.pop("wait_until"), "wait_until")
        self._sync = bool(opts.pop("sync", False))
        self.definition = definition
        self.options = validate_options(opts, where=where)
        # Sidekiq's ``set(pool: POOL)`` (and a push's own ``shard``): the Redis this push
        # goes to — over a ``via`` block, the job's own pool and the router.
        if pool is not None:
            self.options[SHARD] = pin(pool, where)
            home = pool
        elif SHARD in self.options:  # a name, seen from the process's configuration
            self.options[SHARD] = Pinned(self.options[SHARD])
            home = None
        else:
            home = definition.options.get(SHARD)
        if self._config is None and isinstance(home, Config):
            self._config = home  # its client pushes there, its handles read there

    def _client(self) -> Client:
        return default_client(self._config)

    def _handle(self, jid: str | None, client: Client) -> ResultHandle[R] | None:
        if jid is None:
            return None
        config = client.config
        if config.is_cluster:  # the outcome is stored in the job's queue's keyspace
            queue = self._item([]).get(P.QUEUE) or P.DEFAULT_QUEUE
            config = config.shard(str(queue))
        return ResultHandle(jid, config)

    def _item(self, args: list[Any]) -> dict[str, Any]:
        """One job's push: its partition from ``partition_by`` when it names none."""
        item = self._bulk_base(args)
        if self.definition.partition_by is not None and P.PARTITION not in item:
            item[P.PARTITION] = self.definition.partition_of(args)
        return item

    def _bulk_base(self, args: list[Any]) -> dict[str, Any]:
        return {**self.definition.options, **self.options,
                P.CLASS: self.definition.name, P.ARGS: args}

    def perform_async(self, *args: Params.args,
                      **kwargs: Params.kwargs) -> ResultHandle[R] | None:
        if self._wait_until is not None:
            return self._schedule(self._wait_until, args, kwargs)
        if self._sync:
            self.perform_inline(*args, **kwargs)
            return None
        payload = self._item(self.definition.positional(args, kwargs))
        client = self._client()
        return self._handle(client.push(payload), client)

    def perform_in(self, interval: Interval, /, *args: Params.args,
                   **kwargs: Params.kwargs) -> ResultHandle[R] | None:
        return self._schedule(_seconds_from_now(interval), args, kwargs)

    def perform_at(self, when: When, /, *args: Params.args,
                   **kwargs: Params.kwargs) -> ResultHandle[R] | None:
        return self._schedule(_due_at(when), args, kwargs)

    def _schedule(self, at: float, args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> ResultHandle[R] | None:
        client = self._client()
        return self._handle(client.push(self._scheduled_item(at, args, kwargs)), client)

    def _scheduled_item(self, at: float, args: tuple[Any, ...],
                        kwargs: dict[str, Any]) -> dict[str, Any]:
        item = self._item(self.definition.positional(args, kwargs))
        if at > time.time():  # a time already past pushes now (Sidekiq's shortcut)
            item[P.AT] = at
        return item

    # -- the same pushes for async code -----------------------------------------------------
    async def aperform_async(self, *args: Params.args,
                             **kwargs: Params.kwargs) -> ResultHandle[R] | None:
        if self._wait_until is not None:
            return await self._aschedule(self._wait_until, args, kwargs)
        if self._sync:  # as perform_async: run now, in a thread, so the loop goes on meanwhile
            await asyncio.to_thread(self.perform_inline, *args, **kwargs)
            return None
        payload = self._item(self.definition.positional(args, kwargs))
        client = self._client()
        return self._handle(await client.apush(payload), client)

    async def aperform_in(self, interval: Interval, /, *args: Params.args,
                          **kwargs: Params.kwargs) -> ResultHandle[R] | None:
        return await self._aschedule(_seconds_from_now(interval), args, kwargs)

    async def aperform_at(self, when: When, /, *args: Params.args,
                          **kwargs: Params.kwargs) -> ResultHandle[R] | None:
        return await self._aschedule(_due_at(when), args, kwargs)

    async def _aschedule(self, at: float, args: tuple[Any, ...],
                         kwargs: dict[str, Any]) -> ResultHandle[R] | None:
        client = self._client()
        return self._handle(await client.apush(self._scheduled_item(at, args, kwargs)),
                            client)

    async def aperform_bulk(self, args: Iterable[Sequence[Any]], *,
                            batch_size: int | None = None,
                            at: When | Sequence[When] | None = None,
                            spread_interval: float | None = None,
                            pool: str | Config | None = None
                            ) -> list[ResultHandle[R] | None]:
        item = self._bulk_item(args, batch_size, at, spread_interval)
        client = self._client() if pool is None else self._pool_client(item, pool)
        parts = self._by_partition(item)
        sent = Parts(len(item[P.ARGS]))
        for number, (indices, part) in enumerate(parts):
            try:
                jids = await client.apush_bulk(part)
            except BaseException as exc:
                self._part_failed(sent, client, parts, number, exc)
                raise
            sent.took([], indices, jids)  # its shards asked only if a later part fails
        return [self._handle(jid, client) for jid in sent.jids]

    def perform_bulk(self, args: Iterable[Sequence[Any]], *, batch_size: int | None = None,
                     at: When | Sequence[When] | None = None,
                     spread_interval: float | None = None,
                     pool: str | Config | None = None) -> list[ResultHandle[R] | None]:
        """Push one job per argument list, a round trip per ``batch_size`` jobs; ``pool=``
        sends them all to that shard, as ``set(pool=...)`` does."""
        item = self._bulk_item(args, batch_size, at, spread_interval)
        client = self._client() if pool is None else self._pool_client(item, pool)
        parts = self._by_partition(item)
        sent = Parts(len(item[P.ARGS]))
        for number, (indices, part) in enumerate(parts):
            try:
                jids = client.push_bulk(part)
            except BaseException as exc:
                self._part_failed(sent, client, parts, number, exc)
                raise
            sent.took([], indices, jids)  # its shards asked only if a later part fails
        return [self._handle(jid, client) for jid in sent.jids]

    def _pool_client(self, item: dict[str, Any], pool: str | Config) -> Client:
        """A bulk push's own ``pool=``: pinned in ``item``; the client that pushes it."""
        item[SHARD] = pin(pool, f"{self.definition.name}.perform_bulk()")
        return default_client(pool if isinstance(pool, Config) else self._config)

    @staticmethod
    def _part_failed(sent: Parts, client: Client,
                     parts: list[tuple[list[int], dict[str, Any]]], number: int,
                     exc: BaseException) -> None:
        """Raise ``wurk.PartlyPushed`` when partition part ``number`` failed with ``exc``
        after another part went; return when nothing went (``exc`` is raised as it is).
        The shards are asked of the router only here, on the way out of a failed push."""
        if len(parts) == 1 or not isinstance(exc, Exception):
            return
        try:
            went = [shard for _, part in parts[:number] for shard in client.shards_of(part)]
            shards = client.shards_of(parts[number][1])
            later = [(client.shards_of(part), indices) for indices, part in parts[number + 1:]]
        except Exception:  # the router failing again: the push's own shard stands for it
            went, shards, later = [client.config.shard_name], [client.config.shard_name], [
                ([client.config.shard_name], indices) for indices, _ in parts[number + 1:]]
        sent.shards += [shard for shard in dict.fromkeys(went) if shard not in sent.shards]
        sent.fail(exc, shards, parts[number][0], later)

    def _by_partition(self, item: dict[str, Any]) -> list[tuple[list[int], dict[str, Any]]]:
        """A bulk push split by the partition ``partition_by`` gives each job (every
        partition computed before anything is pushed), each part with the indices of its
        jobs; the whole push when there is no ``partition_by`` or the push names one."""
        all_args: list[Any] = item[P.ARGS]
        if self.definition.partition_by is None or P.PARTITION in item:
            return [(list(range(len(all_args))), item)]
        groups: dict[str, list[int]] = {}
        for index, args in enumerate(all_args):
            groups.setdefault(self.definition.partition_of(args), []).append(index)
        at = item.get(P.AT)
        parts = []
        for name, indices in groups.items():
            part = {**item, P.ARGS: [all_args[i] for i in indices], P.PARTITION: name}
            if isinstance(at, list):
                part[P.AT] = [at[i] for i in indices]
            parts.append((indices, part))
        return parts

    def _bulk_item(self, args: Iterable[Sequence[Any]], batch_size: int | None,
                   at: When | Sequence[When] | None,
                   spread_interval: float | None) -> dict[str, Any]:
        positional = self.definition.positional
        item: dict[str, Any] = self._bulk_base([positional(a, {}) for a in args])
        if batch_size is not None:
            item["batch_size"] = batch_size
        if at is not None:
            item[P.AT] = ([_epoch(t, f"'at'[{index}]") for index, t in enumerate(at)]
                          if isinstance(at, (list, tuple))
                          else _epoch(at, "'at'"))  # type: ignore[arg-type]
        elif self._wait_until is not None:  # ``set(wait=...)``: every job then, as Sidekiq
            if spread_interval is not None:
                raise InvalidPayload(f"{self.definition.name}: give set(wait=...) (or "
                                     "wait_until=) or spread_interval, not both", field=P.AT)
            if self._wait_until > time.time():  # a time already past pushes now
                item[P.AT] = self._wait_until
        if spread_interval is not None:
            item["spread_interval"] = spread_interval
        return item

    def perform_inline(self, *args: Params.args, **kwargs: Params.kwargs) -> Any:
        """Run now, in this thread, through client and server middleware (Sidekiq's
        ``perform_inline``); returns the job's result, or None if a middleware stopped it
        or, for a unique job, another jid holds its lock (``wurk.unique.run_inline``)."""
        client = self._client()
        normalized = client.normalize(self._item(self.definition.positional(args, kwargs)))
        passed = client._through_middleware(normalized)
        if passed is None:
            return None
        P.check_args(passed[P.ARGS])
        job = P.loads(P.dumps(passed))
        instance = self.definition.instantiate(job)

        def run() -> Any:
            result = self.definition.call(instance, job[P.ARGS])
            return asyncio.run(result) if inspect.iscoroutine(result) else result

        def invoke() -> Any:
            return client.config.server_middleware.invoke(instance, job, job[P.QUEUE], run,
                                                          run_async=on_own_loop)

        if job.get(P.UNIQUE_FOR) is None or writers.beneath() is not None:
            return invoke()  # not unique, or a testing mode: no Redis, no lock
        return unique.run_inline(client.config, job, invoke)

    def perform_sync(self, *args: Params.args, **kwargs: Params.kwargs) -> Any:
        """``perform_inline`` by Sidekiq 7's other name."""
        return self.perform_inline(*args, **kwargs)


class JobFunction(JobSetter[Params, R]):
    """What ``@wurk.job`` returns: the function, still callable, plus the push methods, each
    returning a ``ResultHandle[R]`` for a job returning ``R``."""

    def __init__(self, func: Callable[Params, Any], definition: JobDefinition) -> None:
        super().__init__(definition, {})
        self.func = func
        self.name = definition.name
        self.__wrapped__ = func
        self.__doc__ = func.__doc__
        self.__name__ = getattr(func, "__name__", definition.name)
        self.__qualname__ = getattr(func, "__qualname__", definition.name)
        self.__module__ = func.__module__

    def __call__(self, *args: Params.args, **kwargs: Params.kwargs) -> R:
        value: R = self.func(*args, **kwargs)
        return value

    def set(self, **options: Any) -> JobSetter[Params, R]:
        return JobSetter(self.definition, options)

    # -- wurk.testing's fake mode: this job's pushes ----------------------------------------
    @property
    def jobs(self) -> list[P.Payload]:
        return _fake_store().jobs(name=self.name)

    def drain(self) -> int:
        return _fake_store().drain(self.name)

    def perform_one(self) -> Any:
        return _fake_store().perform_one(self.name)

    def clear(self) -> None:
        _fake_store().clear(self.name)

    def __repr__(self) -> str:
        return f"<wurk job {self.name!r}>"


class AsyncJobFunction(JobFunction[Params, R]):
    """What ``@wurk.job`` returns for an ``async def`` returning ``R``: called, a coroutine
    of ``R``; pushed, a ``ResultHandle[R]`` (the result is what the coroutine returned)."""

    def __call__(  # type: ignore[override]  # a coroutine of R, not R
            self, *args: Params.args, **kwargs: Params.kwargs) -> Coroutine[Any, Any, R]:
        coroutine: Coroutine[Any, Any, R] = self.func(*args, **kwargs)
        return coroutine


def _fake_store() -> KeptJobs:
    return kept()


class _FakeJobs:
    """``HardJob.jobs``: the class's pushes kept by ``wurk.testing``'s fake mode."""

    def __get__(self, instance: object, owner: type[Job]) -> list[P.Payload]:
        return _fake_store().jobs(name=owner._definition().name)


class JobDecorator(Protocol):
    """What ``@wurk.job(...)`` with options returns: the decorator, typed as ``job``."""

    @overload
    def __call__(self, func: Callable[Params, Coroutine[Any, Any, R]], /
                 ) -> AsyncJobFunction[Params, R]: ...

    @overload
    def __call__(self, func: Callable[Params, R], /) -> JobFunction[Params, R]: ...


@overload
def job(func: Callable[Params, Coroutine[Any, Any, R]], /) -> AsyncJobFunction[Params, R]: ...


@overload
def job(func: Callable[Params, R], /) -> JobFunction[Params, R]: ...


@overload
def job(*, name: str | None = None, **options: Any) -> JobDecorator: ...


def job(func: Callable[..., Any] | None = None, /, *, name: str | None = None,
        **options: Any) -> Any:
    """Register a function as a job: ``@wurk.job`` or ``@wurk.job(queue=..., name=...)``."""

    def register(fn: Callable[..., Any]) -> JobFunction[Any, Any]:
        if not callable(fn) or inspect.isclass(fn):
            raise RegistrationError(f"@wurk.job decorates a function, not {fn!r}; "
                                    "subclass wurk.Job for classes")
        hooks = {k: options.pop(k) for k in _HOOK_OPTIONS if k in options}
        _check_hooks(hooks)
        wire = wire_name(fn, name)
        limiter = options.pop(RATE_LIMIT, None)
        by = options.pop(PARTITION_BY, None)
        checked = _with_pool(options, f"job {wire!r}")
        definition = JobDefinition(wire, fn, checked, hooks=hooks, rate_limit=limiter,
                                   partition_by=by)
        registry.register(definition)
        kind = AsyncJobFunction if definition.is_async else JobFunction
        return kind(fn, definition)

    return register(func) if func is not None else register


# The Redis a job's pushes go to (Sidekiq's ``sidekiq_options pool:``): a shard's name, a
# shard's view or a ``Config`` of its own; read by the client, never in the payload.
POOL = "pool"


def _with_pool(options: dict[str, Any], where: str) -> dict[str, Any]:
    """A definition's options checked, its ``pool`` as the ``shard`` the client reads (a
    shard's name, or a ``Config``): below a ``via`` block and a push's own pool, over the
    router."""
    pool = options.pop(POOL, None)
    if pool is not None and SHARD in options:
        raise ConfigError(f"{where}: give pool or shard, not both (both name the Redis its "
                          "pushes go to)")
    if pool is not None:
        pin(pool, where)  # a name or a Config, else the error naming it
    checked = validate_options(options, where=where)
    if pool is not None:
        checked[SHARD] = pool
    return checked


# The job's rate limiter: an option of its definition, never of a push.
RATE_LIMIT = "rate_limit"


def _check_rate_limit(name: str, limiter: Any) -> Any:
    if limiter is None or callable(getattr(limiter, "within_limit", None)):
        return limiter
    raise RegistrationError(f"job {name!r}: rate_limit={limiter!r} must be a limiter, e.g. "
                            "rate_limit=wurk.limiter.window('api', 10, 1) — every run of the "
                            "job then waits for that limit, and is rescheduled when over it")


# The function naming each push's partition from its arguments: an option of the job's
# definition (a function is not JSON: never in the payload).
PARTITION_BY = "partition_by"


def _check_partition_by(name: str, by: Any, options: Mapping[str, Any]) -> Any:
    if by is None:
        return None
    if not callable(by):
        raise RegistrationError(f"job {name!r}: partition_by={by!r} must be a function of the "
                                "job's arguments returning its partition, e.g. "
                                "partition_by=lambda account_id, *rest: account_id")
    if P.PARTITION in options:
        raise RegistrationError(f"job {name!r}: give partition or partition_by, not both (a "
                                "push's own partition= already wins over partition_by)")
    return by


def _short(args: Sequence[Any]) -> str:
    text = repr(list(args))
    return text if len(text) <= 120 else text[:117] + "..."


_HOOK_EXAMPLES = {"retry_in": "lambda count, exc: 60",
                  "retries_exhausted": "lambda payload, exc: None",
                  "unique_context": "lambda payload: payload['args'][:1]"}


def _check_hooks(hooks: Mapping[str, Any]) -> None:
    for key, hook in hooks.items():
        if not callable(hook):
            raise RegistrationError(f"option {key}={hook!r} must be a function, e.g. "
                                    f"{key}={_HOOK_EXAMPLES[key]}")


class Job:
    """Base class for class-based jobs; options are class keywords::

        class HardJob(wurk.Job, queue="critical", retry=5):
            def perform(self, a: int, b: str) -> None: ...

    ``abstract=True`` makes a base class that is not registered itself.
    """

    definition: ClassVar[JobDefinition]
    jid: str
    bid: str | None
    payload: P.Payload

    def __init_subclass__(cls, *, name: str | None = None, abstract: bool = False,
                          **options: Any) -> None:
        super().__init_subclass__()
        hook_options = sorted(set(options) & set(_HOOK_OPTIONS))
        if hook_options:
            raise RegistrationError(
                f"{cls.__qualname__}: {hook_options[0]} is not a class option; define it as a "
                f"method: def {hook_options[0]}(self, ...)"
            )
        inherited = dict(getattr(cls, "_wurk_options", {}))
        for given, other in ((POOL, SHARD), (SHARD, POOL)):  # a subclass's own wins
            if given in options and other not in options:
                inherited.pop(other, None)
        merged = {**inherited, **options}
        cls._wurk_options = merged  # type: ignore[attr-defined]
        if abstract:
            return
        wire = wire_name(cls, name)
        options = dict(merged)
        limiter = options.pop(RATE_LIMIT, None)
        by = options.pop(PARTITION_BY, None)
        cls.definition = JobDefinition(wire, cls, _with_pool(options, f"job {wire!r}"),
                                       is_class=True, rate_limit=limiter, partition_by=by)
        registry.register(cls.definition)

    def perform(self, *args: Any) -> Any:
        raise NotImplementedError(f"{type(self).__qualname__} must define perform()")

    def interrupted(self) -> bool:
        """True once the worker has been told to quiet or stop (``wurk.interrupted``)."""
        return interrupted()

    def retry_in(self, count: int, exc: BaseException) -> float | str | None:
        """Seconds until the next retry, ``"kill"``, ``"discard"``, or None for the default."""
        return None

    def retries_exhausted(self, payload: P.Payload, exc: BaseException) -> str | None:
        """Called once retries run out; return ``"discard"`` to skip the dead set."""
        return None

    @property
    def batch(self) -> Any:
        """The ``wurk.Batch`` this job belongs to (to reopen it), or None."""
        return _open_batch(self.bid) if self.bid else None

    def valid_within_batch(self) -> bool:
        """False once this job's batch was invalidated: return early then."""
        batch = self.batch
        return batch is None or not batch.invalidated()

    @classmethod
    def unique_context(cls, payload: P.Payload) -> list[Any] | None:
        """What makes two pushes of a unique job duplicates; None: class, queue and args."""
        return None

    @classmethod
    def set(cls, **options: Any) -> JobSetter[..., Any]:
        return JobSetter(cls._definition(), options)

    @classmethod
    def perform_async(cls, *args: Any, **kwargs: Any) -> ResultHandle[Any] | None:
        return cls.set().perform_async(*args, **kwargs)

    @classmethod
    def perform_in(cls, interval: Interval, /, *args: Any,
                   **kwargs: Any) -> ResultHandle[Any] | None:
        return cls.set().perform_in(interval, *args, **kwargs)

    @classmethod
    def perform_at(cls, when: When, /, *args: Any,
                   **kwargs: Any) -> ResultHandle[Any] | None:
        return cls.set().perform_at(when, *args, **kwargs)

    @classmethod
    def perform_bulk(cls, args: Iterable[Sequence[Any]],
                     **options: Any) -> list[ResultHandle[Any] | None]:
        return cls.set().perform_bulk(args, **options)

    @classmethod
    def perform_inline(cls, *args: Any, **kwargs: Any) -> Any:
        return cls.set().perform_inline(*args, **kwargs)

    @classmethod
    def perform_sync(cls, *args: Any, **kwargs: Any) -> Any:
        """``perform_inline`` by Sidekiq 7's other name."""
        return cls.set().perform_inline(*args, **kwargs)

    # -- wurk.testing's fake mode: this job's pushes ----------------------------------------
    jobs: ClassVar[_FakeJobs] = _FakeJobs()

    @classmethod
    def drain(cls) -> int:
        return _fake_store().drain(cls._definition().name)

    @classmethod
    def perform_one(cls) -> Any:
        return _fake_store().perform_one(cls._definition().name)

    @classmethod
    def clear(cls) -> None:
        _fake_store().clear(cls._definition().name)

    @classmethod
    async def aperform_async(cls, *args: Any, **kwargs: Any) -> ResultHandle[Any] | None:
        return await cls.set().aperform_async(*args, **kwargs)

    @classmethod
    async def aperform_in(cls, interval: Interval, /, *args: Any,
                          **kwargs: Any) -> ResultHandle[Any] | None:
        return await cls.set().aperform_in(interval, *args, **kwargs)

    @classmethod
    async def aperform_at(cls, when: When, /, *args: Any,
                          **kwargs: Any) -> ResultHandle[Any] | None:
        return await cls.set().aperform_at(when, *args, **kwargs)

    @classmethod
    async def aperform_bulk(cls, args: Iterable[Sequence[Any]],
                            **options: Any) -> list[ResultHandle[Any] | None]:
        return await cls.set().aperform_bulk(args, **options)

    @classmethod
    def _definition(cls) -> JobDefinition:
        definition = cls.__dict__.get("definition")
        if definition is None:
            raise RegistrationError(f"{cls.__qualname__} is abstract; subclass it to push jobs")
        return definition  # type: ignore[no-any-return]
