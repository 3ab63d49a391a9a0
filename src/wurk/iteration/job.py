"""``wurk.IterableJob``: a job that walks its items one by one and can stop between two of
them, to go on later from where it stopped (Sidekiq 7.3+'s iterable jobs).

1. A subclass defines ``build_enumerator(*args, cursor)`` — an iterable of ``(item, cursor)``
   pairs starting at ``cursor`` (None the first time), where each item's cursor names that
   item, so resuming at a cursor starts with its item — and ``each_iteration(item, *args)``.
   It must not define ``perform``: the class writes its own, whose signature is
   ``each_iteration``'s without the item, so pushes are checked against it.
2. The state (executions, the cursor, the runtime) lives in ``it-<jid>``
   (``wurk.iteration.state``). Before each item the job checks whether to stop: when its
   worker quiets or stops (``interrupted()``), after ``max_iteration_runtime`` seconds of
   this execution (the class's own, else the configuration's), or when it was cancelled.
   The state is flushed every ``flush_interval`` seconds (5), at every stop and before an
   item's error is re-raised — so a retry resumes at the failed item, and a worker killed
   outright repeats at most the items since the last flush.
3. A stop for the worker or the time limit saves the cursor of the next item and raises
   ``wurk.Interrupted``: the worker's interrupt link pushes the same payload (same jid) to
   the back of its queue. Not a failure, not a retry, not a batch count.
4. Cancellation (``wurk.cancel(jid)`` or ``self.cancel()``): a job cancelled before it starts
   runs ``on_cancel`` then ``on_stop`` and none of its items; a running one notices at its
   next flush (within ``flush_interval`` seconds and one item), runs ``on_cancel`` then
   ``on_stop``. Either way it then raises ``wurk.JobCancelled`` and ends as any cancelled
   job does (not a failure, not retried; dead in its batch), and its state stays (with
   ``cancelled``) until its TTL, so a copy of the job that turns up later is dropped too.
   Sidekiq also runs ``on_complete`` and deletes the state on a cancel; wurk does not,
   since the job did not complete.
5. Hooks: ``on_start`` (first execution), ``on_resume`` (later ones), ``around_iteration(item,
   call_next)``, ``on_stop`` (every stop, completion included), ``on_cancel``,
   ``on_complete`` (then the state is deleted).
6. An ``async def each_iteration`` (or an async generator ``build_enumerator``) makes an async
   job: the same steps awaited on the worker's event loop; hooks may then be ``async def``
   too, and the enumerator may be an async iterable.
7. Time is read from ``clock`` (a class attribute; tests set a ``ManualClock``).
"""

from __future__ import annotations

import enum
import inspect
import logging
import math
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Callable,
    Iterable,
    Iterator,
)
from functools import partial
from typing import Any, ClassVar

from .. import stored
from ..config import Config, default_config
from ..connections.lending import redis as lent_redis
from ..errors import Interrupted, JobCancelled, RegistrationError
from ..job import Job, interrupted
from ..runtime.clock import SYSTEM, Clock
from . import state as S

__all__ = ["FLUSH_INTERVAL", "IterableJob"]

log = logging.getLogger("wurk")

# Sidekiq's: how often the state is written (and a cancellation noticed) while iterating.
FLUSH_INTERVAL = 5.0


class _End(enum.Enum):
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"


class IterableJob(Job, abstract=True):
    """Base class of iterable jobs: define ``build_enumerator`` and ``each_iteration``::

        class Export(wurk.IterableJob, queue="exports"):
            def build_enumerator(self, user_id: int, *, cursor: int | None):
                return wurk.iteration.ids(0, 10_000, cursor=cursor)

            def each_iteration(self, item: int, user_id: int) -> None:
                export_row(user_id, item)
    """

    # Seconds one execution may iterate before it stops and is pushed again (None: no limit).
    max_iteration_runtime: ClassVar[float | None] = None
    flush_interval: ClassVar[float] = FLUSH_INTERVAL
    clock: ClassVar[Clock] = SYSTEM
    # The worker's configuration, handed over by its interrupt link; the process default
    # where the job runs without one (a testing mode).
    config: Config | None = None

    _executions: int = 0
    _cursor: Any = None
    _arguments: tuple[Any, ...] = ()
    _cancel_asked: bool = False

    def __init_subclass__(cls, **options: Any) -> None:
        own = cls.__dict__.get("perform")
        if own is not None and not getattr(own, "_wurk_iteration", False):
            raise RegistrationError(
                f"{cls.__qualname__} is an iterable job and must not define perform(): "
                "define build_enumerator(*args, cursor) and each_iteration(item, *args)")
        _check_seconds(cls, "max_iteration_runtime", cls.max_iteration_runtime,
                       "above 0, or None for no limit", optional=True)
        _check_seconds(cls, "flush_interval", cls.flush_interval, "0 or more")
        _check_hooks(cls)
        cls.perform = _performer(cls)  # type: ignore[method-assign]
        super().__init_subclass__(**options)

    # -- to define ----------------------------------------------------------------------------
    # Typed ``(*args, **kwargs) -> Any``, the one base signature a type checker lets any
    # override narrow: ``(self, user_id: int, *, cursor: int | None)``, sync or async.
    def build_enumerator(self, *args: Any, **kwargs: Any) -> Any:
        """The ``(item, cursor)`` pairs to walk, starting at the ``cursor`` keyword argument;
        None skips the job."""
        raise NotImplementedError(f"{type(self).__qualname__} must define build_enumerator()")

    def each_iteration(self, *args: Any, **kwargs: Any) -> Any:
        """Process one item (idempotently: after a kill it may run again)."""
        raise NotImplementedError(f"{type(self).__qualname__} must define each_iteration()")

    # -- hooks --------------------------------------------------------------------------------
    def on_start(self) -> Any:
        """Before the first item of the first execution."""

    def on_resume(self) -> Any:
        """Before the first item of every later execution."""

    def around_iteration(self, item: Any, call_next: Callable[[], Any]) -> Any:
        """Around each item: call ``call_next()`` (await it in an async job) to process it."""
        return call_next()

    def on_stop(self) -> Any:
        """After every execution that did not fail: interrupted, cancelled or complete."""

    def on_cancel(self) -> Any:
        """Once, when the job finds it was cancelled."""

    def on_complete(self) -> Any:
        """After the last item; the state is deleted next."""

    # -- read inside the job ------------------------------------------------------------------
    @property
    def cursor(self) -> Any:
        """The cursor of the item being processed (of the next one, once stopped)."""
        return self._cursor

    @property
    def executions(self) -> int:
        """This execution's number: 1 the first time, one more per interruption or retry."""
        return self._executions

    @property
    def arguments(self) -> tuple[Any, ...]:
        return self._arguments

    def cancel(self) -> None:
        """Cancel this job from inside it: it stops before its next item, as ``wurk.cancel``
        would make it stop at its next flush."""
        self._cancel_asked = True
        with lent_redis(self._config()) as conn:
            reply = S.cancel_script.call(conn, [self._key()], [S.STATE_TTL])
        S.cancel_time(self._key(), reply)

    def _config(self) -> Config:
        return self.config if self.config is not None else default_config()

    def _key(self) -> str:
        return self._config().keys.iteration(self.jid)


def _check_seconds(cls: type[IterableJob], name: str, value: Any, expected: str, *,
                   optional: bool = False) -> None:
    """A class attribute in seconds, checked when the class is made: a limit of 0 stopped
    every execution before its first item (pushed again for ever), NaN never stopped or
    flushed, and text failed each execution."""
    if optional and value is None:
        return
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and (isinstance(value, int) or math.isfinite(value)) \
            and (value > 0 if optional else value >= 0):
        return
    raise RegistrationError(f"{cls.__qualname__}.{name} = {value!r} is invalid; expected "
                            f"seconds {expected}")


HOOKS = ("around_iteration", "on_start", "on_resume", "on_stop", "on_cancel", "on_complete")


def _check_hooks(cls: type[IterableJob]) -> None:
    """An ``async def`` hook on a sync job is refused when the class is made: a sync job
    cannot await it, so ``around_iteration``'s coroutine was dropped (no item ran, and the
    job completed) and the others failed the job after its items. Checked once the class
    has its own ``each_iteration``, so a base class may hold async hooks for async jobs."""
    if cls.each_iteration is IterableJob.each_iteration or _is_async(cls):
        return
    for name in HOOKS:
        hook = getattr(cls, name)
        if inspect.iscoroutinefunction(hook) or inspect.isasyncgenfunction(hook):
            raise RegistrationError(
                f"{cls.__qualname__}.{name} is async def but each_iteration is not: a sync "
                "job cannot await it; make each_iteration async def too, or the hook not")


def _is_async(cls: type[IterableJob]) -> bool:
    return inspect.iscoroutinefunction(cls.each_iteration) or \
        inspect.isasyncgenfunction(cls.build_enumerator)


def _performer(cls: type[IterableJob]) -> Callable[..., Any]:
    """The ``perform`` of an iterable job class, with ``each_iteration``'s signature less
    the item (so a push is checked against what the job takes)."""
    if _is_async(cls):
        async def run_async(self: IterableJob, *args: Any) -> None:
            await _Execution(self, args).arun()
        perform: Any = run_async
    else:
        def run(self: IterableJob, *args: Any) -> None:
            _Execution(self, args).run()
        perform = run
    try:
        signature = inspect.signature(cls.each_iteration)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        params = list(signature.parameters.values())
        if len(params) >= 2 and params[1].kind in (params[1].POSITIONAL_ONLY,
                                                   params[1].POSITIONAL_OR_KEYWORD):
            del params[1]  # the item
            perform.__signature__ = signature.replace(
                parameters=params, return_annotation=inspect.Signature.empty)
    perform._wurk_iteration = True
    perform.__qualname__ = f"{cls.__qualname__}.perform"
    made: Callable[..., Any] = perform
    return made


def _runtime_limit(job: IterableJob, config: Config) -> float | None:
    """The job class's own ``max_iteration_runtime`` when a class below ``IterableJob`` sets
    it (None included: no limit for that job), else the configuration's."""
    for klass in type(job).__mro__:
        if klass is IterableJob:
            break
        if "max_iteration_runtime" in vars(klass):
            own: float | None = vars(klass)["max_iteration_runtime"]
            return own
    return config.max_iteration_runtime


def _pair(value: Any, name: str) -> tuple[Any, Any]:
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return value[0], value[1]
    raise TypeError(f"{name}.build_enumerator must yield (item, cursor) pairs, not "
                    f"{stored.shown(repr(value), 200)}; wrap a plain sequence in "
                    "wurk.iteration.items(sequence, cursor=cursor)")


class _Execution:
    """One execution of an iterable job: read the state, walk, stop, flush."""

    def __init__(self, job: IterableJob, args: tuple[Any, ...]) -> None:
        self.job = job
        self.args = args
        self.config = job._config()
        self.key = self.config.keys.iteration(job.jid)
        self.clock = job.clock
        self.name = type(job).__qualname__
        self.started = self.clock.monotonic()
        self.flushed = self.started
        self.runtime_before = 0.0
        self.limit = _runtime_limit(job, self.config)
        self.deadline = None if self.limit is None else self.started + self.limit
        # Items begun in this execution: the time limit stops one only after its first, or
        # an execution whose limit passed while it built its enumerator would stop before
        # any item, be pushed again and do the same for ever.
        self.walked = 0
        job._arguments = args

    # -- the steps both kinds share -------------------------------------------------------------
    def _begin(self, reply: Any) -> bool:
        """Take the stored state; False when the job was cancelled before it started."""
        state = S.parse(self.job.jid, self.key, reply, url=self._url())
        self.runtime_before = state.runtime
        self.job._cursor = state.cursor
        self.job._executions = state.executions + 1
        if state.cancelled:
            self.job._cancel_asked = True
            return False
        return True

    def _cancelled_error(self) -> JobCancelled:
        """How a cancelled execution ends, once ``on_cancel`` and ``on_stop`` ran: as any
        cancelled job does (``wurk.control``'s link counts it cancelled and acknowledges
        it, never retried; a batch counts it dead, a workflow step dies, a result says
        "cancelled"). Returning, it counted as a success: its batch and workflow went on
        as if it had done all its items."""
        where = "before it started" if not self.walked else \
            f"at cursor {_shown(self.job._cursor)}"
        return JobCancelled(f"{self.name} {self.job.jid} was cancelled {where}: on_cancel "
                            "and on_stop ran; its state stays, marked cancelled",
                            jid=self.job.jid)

    def _enumerator(self, built: Any) -> Any:
        if built is None:
            log.info("build_enumerator returned None: the job is skipped")
            return None
        if not isinstance(built, (Iterable, AsyncIterable)) or isinstance(built, (str, bytes)):
            raise TypeError(f"{self.name}.build_enumerator must return an iterable of "
                            f"(item, cursor) pairs, not {type(built).__name__}")
        return built

    def _stop_before(self, cursor: Any) -> _End | None:
        """Whether to stop before the item of ``cursor``, short of a flush's answer."""
        self.job._cursor = cursor
        if self.job._cancel_asked:
            return _End.CANCELLED
        if interrupted():
            log.info("interrupted by the worker's stop at cursor %s", _shown(cursor))
            return _End.INTERRUPTED
        if self.deadline is not None and self.walked \
                and self.clock.monotonic() >= self.deadline:
            log.info("max_iteration_runtime (%s s) reached at cursor %s",
                     self.limit, _shown(cursor))
            return _End.INTERRUPTED
        return None

    def _due(self) -> bool:
        return self.clock.monotonic() - self.flushed >= self.job.flush_interval

    def _flush_commands(self) -> list[tuple[Any, ...]]:
        now = self.clock.monotonic()
        self.flushed = now
        runtime = self.runtime_before + (now - self.started)
        cursor = S.encode_cursor(self.job.jid, self.job._cursor)
        return S.flush_commands(self.key, self.job._executions, cursor, runtime)

    def _cancelled(self, replies: list[Any]) -> bool:
        if S.cancelled_in(self.key, replies, url=self._url()):
            self.job._cancel_asked = True
        return self.job._cancel_asked

    def _url(self) -> str:
        """The Redis the state is on, to name in an error: the pool ``wurk.redis()`` lends
        from (a processor's own connection reaches the same server)."""
        return self.config.pool("client").url

    def _slow(self, since: float, item: Any) -> None:
        took = self.clock.monotonic() - since
        if took > self.config.timeout:
            log.warning("one iteration took %.2f s, longer than the shutdown timeout (%s s), "
                        "on item %s: a deploy will kill it mid-item", took,
                        self.config.timeout, _shown(item))

    # -- sync -----------------------------------------------------------------------------------
    def run(self) -> None:
        with lent_redis(self.config) as conn:  # a pipeline: an error reply comes back in place
            reply = conn.pipeline([S.read_command(self.key)])[0]
        if not self._begin(reply):
            self._call(self.job.on_cancel)
            self._call(self.job.on_stop)
            raise self._cancelled_error()
        enumerator = self._enumerator(self.job.build_enumerator(*self.args,
                                                                cursor=self.job._cursor))
        if enumerator is None:
            return None
        if isinstance(enumerator, AsyncIterable) and not isinstance(enumerator, Iterable):
            raise TypeError(f"{self.name}.build_enumerator returned an async iterable: make "
                            "each_iteration async def too")
        self._call(self.job.on_start if self.job._executions == 1 else self.job.on_resume)
        walked = iter(enumerator)
        try:
            end = self._walk(walked)
        except BaseException as exc:
            _close_quietly(walked)
            if isinstance(exc, Interrupted):  # raised by the job itself, its cursor flushed
                self._call(self.job.on_stop)
            raise
        _close(walked)
        return self._finish(end)

    def _walk(self, enumerator: Iterator[Any]) -> _End:
        while True:
            try:
                pair = next(enumerator)
            except StopIteration:
                return _End.COMPLETE
            except BaseException:
                # the enumerator's own error (the next page could not be read): the last
                # item begun is the last one known done, so the retry repeats it alone
                # rather than every item since the last flush
                if self.walked:
                    self._flush_quietly()
                raise
            item, cursor = _pair(pair, self.name)
            end = self._stop_before(cursor)
            if end is not None or self._due():
                if self._cancelled(self._flush()):
                    return _End.CANCELLED
                if end is not None:
                    return end
            since = self.clock.monotonic()
            self.walked += 1
            try:
                self.job.around_iteration(item, partial(self.job.each_iteration, item,
                                                        *self.args))
            except BaseException:
                self._flush_quietly()
                raise
            self._slow(since, item)

    def _flush(self) -> list[Any]:
        commands = self._flush_commands()
        with lent_redis(self.config) as conn:
            return conn.pipeline(commands)

    def _flush_quietly(self) -> None:
        """Before an error goes on: the cursor of the failed item, so its retry starts there.
        A flush that fails too is logged; the error that came first is the one raised."""
        try:
            self._flush()
        except Exception as exc:
            log.warning("could not save the cursor before the job's error: %s", exc)

    def _finish(self, end: _End) -> None:
        job = self.job
        if end is _End.CANCELLED:
            self._call(job.on_cancel)
            self._call(job.on_stop)
            raise self._cancelled_error()
        self._call(job.on_stop)
        if end is _End.INTERRUPTED:
            raise Interrupted(f"{self.name} stopped at cursor {_shown(job._cursor)}; "
                              "pushed again to go on from there")
        self._call(job.on_complete)
        with lent_redis(self.config) as conn:
            conn.call("UNLINK", self.key)

    def _call(self, hook: Callable[[], Any]) -> None:
        if inspect.isawaitable(hook()):
            raise TypeError(f"{self.name}: a hook is async def but each_iteration is not; "
                            "make both async, or both not")

    # -- async ----------------------------------------------------------------------------------
    async def arun(self) -> None:
        async with lent_redis(self.config) as conn:
            reply = (await conn.pipeline([S.read_command(self.key)]))[0]
        if not self._begin(reply):
            await _maybe(self.job.on_cancel())
            await _maybe(self.job.on_stop())
            raise self._cancelled_error()
        built = self.job.build_enumerator(*self.args, cursor=self.job._cursor)
        enumerator = self._enumerator(built)
        if enumerator is None:
            return None
        await _maybe(self.job.on_start() if self.job._executions == 1 else self.job.on_resume())
        walked = _aiter(enumerator)
        try:
            end = await self._awalk(walked)
        except BaseException as exc:  # as in ``run``
            await _aclose_quietly(walked)
            if isinstance(exc, Interrupted):
                await _maybe(self.job.on_stop())
            raise
        await walked.aclose()
        return await self._afinish(end)

    async def _awalk(self, enumerator: AsyncIterator[Any]) -> _End:
        while True:
            try:
                pair = await anext(enumerator)
            except StopAsyncIteration:
                return _End.COMPLETE
            except BaseException:  # as in ``_walk``
                if self.walked:
                    await self._aflush_quietly()
                raise
            item, cursor = _pair(pair, self.name)
            end = self._stop_before(cursor)
            if end is not None or self._due():
                if self._cancelled(await self._aflush()):
                    return _End.CANCELLED
                if end is not None:
                    return end
            since = self.clock.monotonic()
            self.walked += 1
            made: list[Any] = []
            try:
                await _maybe(self.job.around_iteration(
                    item, partial(_made_by, made, self.job.each_iteration, item, *self.args)))
                _check_awaited(made, self.name)
            except BaseException:
                await self._aflush_quietly()
                raise
            self._slow(since, item)

    async def _aflush(self) -> list[Any]:
        commands = self._flush_commands()
        async with lent_redis(self.config) as conn:
            return await conn.pipeline(commands)

    async def _aflush_quietly(self) -> None:
        try:
            await self._aflush()
        except Exception as exc:
            log.warning("could not save the cursor before the job's error: %s", exc)

    async def _afinish(self, end: _End) -> None:
        job = self.job
        if end is _End.CANCELLED:
            await _maybe(job.on_cancel())
            await _maybe(job.on_stop())
            raise self._cancelled_error()
        await _maybe(job.on_stop())
        if end is _End.INTERRUPTED:
            raise Interrupted(f"{self.name} stopped at cursor {_shown(job._cursor)}; "
                              "pushed again to go on from there")
        await _maybe(job.on_complete())
        async with lent_redis(self.config) as conn:
            await conn.call("UNLINK", self.key)


def _made_by(made: list[Any], each_iteration: Callable[..., Any], *args: Any) -> Any:
    """An async job's ``call_next``: ``each_iteration``'s coroutine, kept to be checked."""
    value = each_iteration(*args)
    made.append(value)
    return value


def _check_awaited(made: list[Any], name: str) -> None:
    """``TypeError`` when ``around_iteration`` called ``call_next()`` but neither returned
    nor awaited its coroutine: the item would be dropped without a word."""
    for value in made:
        if inspect.iscoroutine(value) and \
                inspect.getcoroutinestate(value) == inspect.CORO_CREATED:
            value.close()
            raise TypeError(f"{name}.around_iteration called call_next() but neither "
                            "returned nor awaited it, so the item did not run: in an async "
                            "job, `return call_next()` or `await call_next()`")


async def _maybe(value: Any) -> Any:
    """A hook's value, awaited when it is awaitable (an ``async def`` hook)."""
    while inspect.isawaitable(value):
        value = await value
    return value


def _close(walked: Any) -> None:
    """End a generator enumerator the walk left part-way (stopped, cancelled, failed): its
    ``finally`` and ``with`` blocks (a file, a database cursor) run now, before ``on_stop``,
    as leaving Ruby's ``each`` runs its ``ensure`` — not whenever it is collected, which
    for an async generator was never. Another iterator is the caller's, left as it is."""
    if inspect.isgenerator(walked):
        walked.close()


def _close_quietly(walked: Any) -> None:
    """``_close`` while the job's error goes on: a failing cleanup is logged, not raised
    over the error that came first."""
    try:
        _close(walked)
    except Exception as exc:
        log.warning("closing the enumerator after the job's error failed: %s", exc)


async def _aclose_quietly(walked: AsyncGenerator[Any, None]) -> None:
    try:
        await walked.aclose()
    except Exception as exc:
        log.warning("closing the enumerator after the job's error failed: %s", exc)


async def _aiter(enumerator: Any) -> AsyncGenerator[Any, None]:
    """The pairs of a sync or async enumerator; closing it closes a generator enumerator."""
    if isinstance(enumerator, AsyncIterable):
        pairs = aiter(enumerator)
        try:
            async for pair in pairs:
                yield pair
        finally:
            if inspect.isasyncgen(pairs):
                await pairs.aclose()
    else:
        walked = iter(enumerator)
        try:
            for pair in walked:
                yield pair
        finally:
            _close(walked)


def _shown(value: Any) -> str:
    return stored.shown(repr(value), 200)
