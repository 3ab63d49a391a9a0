"""Middleware chains: code that wraps every push (client) or every execution (server).

1. A chain is an ordered list of entries; an entry is a factory plus its arguments, and a
   fresh instance is made per invocation so middleware may keep per-call state (Sidekiq's
   semantics). A plain function (or an instance) added without arguments is used as is.
2. A link calls ``call_next()`` to go on; not calling it, or returning ``None``/``False``
   from a client link, stops the push.
3. An empty chain costs nothing per job: ``invoke`` calls the final step directly.
4. A link may be ``async def`` (its ``__call__``, or an ``acall`` method beside a sync
   ``__call__``). There is one walk from sync code and one from async code:
   ``invoke`` (a sync job, a plain push) calls each sync link in place and hands each async
   link to ``run_async``; ``ainvoke`` (an async job, an ``a`` push) awaits async links and
   runs a sync link either in a helper thread whose ``call_next()`` waits for the rest on
   the loop (a server link may block: it wraps a job) or, for a client chain
   (``sync_links="inline"``), on the loop itself, its ``call_next()`` returning an
   awaitable of the rest; each call runs the rest once, as in ``invoke``.
5. A link may also say, per job, what it has to do around it (``wurk_plan``), which the async
   walk asks before it would await the link: nothing (``None``: the link is not a frame on
   that job's await chain), its coroutine as ever (``AWAIT``), or its work before the job
   done and a ``leave(result, error)`` for after. The leaves of the links planned in a row
   run innermost first once the rest has ended, each given what the rest returned or
   raised, as the links' own ``try`` blocks would be; a leave that must await (a Redis
   round trip off the loop) returns ``Later(awaitable)``. A resume of an async job passes
   through every frame of its await chain, so a link the job does not need costs it on
   every step, not once (``docs/design.md``, "Async jobs: where the CPU goes").
6. A link may also say which jobs it has anything to do for at all: those whose payload has
   one of its ``wurk_keys`` (a collection of payload keys), or whose job object is one of
   its ``wurk_job_types``, or whose payload's ``class`` is in one of its
   ``wurk_job_names`` (a set of job names it keeps up to date: read at each job, never
   copied). Every other job's walk, sync or async, leaves it out: no frame,
   no plan (most jobs use none of the features the built-in links serve). It is decided
   once, from the payload as the walk begins: a key an outer link adds on the way does not
   bring an inner link back.
7. ``bridge`` is the one way an async link runs from sync code: the link runs on an event
   loop (the worker's, or ``TemporaryLoop``'s for a sync push), and each ``await
   call_next()`` runs the rest of the chain back in the calling thread, so a job keeps its
   thread's lent connection and its shutdown interrupt.

Client middleware: ``__call__(self, job, payload, queue, call_next)`` where ``job`` is the
wire name. Server middleware: the same, with ``job`` the job instance or definition.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import inspect
import queue
import threading
import types
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from .errors import is_shutdown
from .runtime.executors import abandon_running

__all__ = ["AWAIT", "AsyncRunner", "Chain", "Later", "Leave", "Middleware"]

Middleware = Callable[..., Any]
# Runs one async link from sync code: (link, job, payload, queue, rest) -> its result.
AsyncRunner = Callable[[Callable[..., Coroutine[Any, Any, Any]], Any, dict[str, Any], str,
                        Callable[[], Any]], Any]


# After the rest of the chain: (its result, its error or None) -> the link's result, or raises.
Leave = Callable[[Any, "BaseException | None"], Any]


class _Await:
    """``wurk_plan``'s answer for a job the link has work around: await its coroutine."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "AWAIT"


AWAIT = _Await()


class Later:
    """A leave's answer when it must await: the link's result is what ``awaitable`` gives."""

    __slots__ = ("awaitable",)

    def __init__(self, awaitable: Awaitable[Any]) -> None:
        self.awaitable = awaitable


def _planner(link: Middleware, form: Callable[..., Coroutine[Any, Any, Any]] | None
             ) -> Callable[..., Leave | _Await | None] | None:
    """``link.wurk_plan`` when the async walk may use it: an async link whose ``wurk_plan``
    is of the same class as its coroutine, or of a subclass (a subclass that wrote its own
    ``acall`` and left its base's ``wurk_plan`` is awaited as ever)."""
    plan = getattr(link, "wurk_plan", None)
    if form is None or not callable(plan) or not inspect.ismethod(plan):
        return None
    mro = type(link).__mro__

    def owner(name: str) -> int:
        return next((i for i, kind in enumerate(mro) if name in vars(kind)), len(mro))

    if owner("wurk_plan") > owner(getattr(form, "__name__", "")):
        return None
    return plan


async def within(coro: Coroutine[Any, Any, Any], context: contextvars.Context) -> Any:
    """Await ``coro`` seeing ``context``'s variables (the running job, the log fields): a
    task started from another thread otherwise copies the loop thread's."""
    for variable, value in context.items():
        variable.set(value)
    return await coro


def settle(waiter: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """Answer an async link's ``await call_next()`` (on its loop) with the rest of the chain's
    result or error, run in another thread; a waiter already cancelled (the link is going
    away) is left alone. ``KeyboardInterrupt`` and ``SystemExit`` cancel the link's await
    instead, as ``asyncio.run`` does: raised in a task they would escape the loop and end
    its thread, the link never told."""
    if waiter.done():
        return
    if isinstance(error, (KeyboardInterrupt, SystemExit)):
        waiter.cancel()
    elif error is not None:
        waiter.set_exception(error)
    else:
        waiter.set_result(result)


def async_form(link: Middleware, *, prefer_async: bool = True
               ) -> Callable[..., Coroutine[Any, Any, Any]] | None:
    """The coroutine function to await for ``link``, or None to call it as a sync link.
    ``prefer_async`` (inside a coroutine) takes an ``acall`` beside a sync ``__call__``;
    from sync code only a link with nothing but an async form is async."""
    if inspect.iscoroutinefunction(link):
        return link
    call = getattr(link, "__call__", None)  # noqa: B004 - an instance's own __call__
    if call is not None and inspect.iscoroutinefunction(call):
        return call  # type: ignore[no-any-return]
    acall = getattr(link, "acall", None)
    if prefer_async and acall is not None and inspect.iscoroutinefunction(acall):
        return acall  # type: ignore[no-any-return]
    return None


def _direct(link: Middleware) -> Middleware:
    """A link object's own ``__call__`` as a bound method, where it is a Python function:
    the interpreter calls a bound method in place, but an object through its type's call
    slot, from C (55 ns a link a job, measured on 3.11)."""
    for owner in type(link).__mro__:  # the class whose __call__ a call of ``link`` runs
        if "__call__" in vars(owner):
            call = vars(owner)["__call__"]
            if isinstance(call, types.FunctionType):
                return types.MethodType(call, link)
            break
    return link


# A link, and its coroutine function when it is an async link.
Link = tuple[Middleware, "Callable[..., Coroutine[Any, Any, Any]] | None"]


class _Skips(NamedTuple):
    """What lets a job's walk leave links out: the payload keys, job types and job names
    some link declared (``wurk_keys``, ``wurk_job_types``, ``wurk_job_names``), and which
    links a job with none of them passes through."""

    keys: frozenset[str]
    types: tuple[type, ...]
    kept: tuple[int, ...]  # the positions of the links such a job passes through
    names: tuple[Collection[str], ...] = ()  # the links' own sets, kept up to date by them

    def plain(self, job: Any, payload: dict[str, Any]) -> bool:
        """Whether ``job`` needs none of the links that declared what they need."""
        if not self.keys.isdisjoint(payload) or isinstance(job, self.types):
            return False
        if self.names:  # on every job's path: a loop, not a generator
            name = payload.get("class")
            if isinstance(name, str):
                for held in self.names:
                    if name in held:
                        return False
        return True


def _skips(links: list[Middleware]) -> _Skips | None:
    """The chain's ``_Skips``; None when no link declared what it needs."""
    keys: set[str] = set()
    types: list[type] = []
    names: list[Collection[str]] = []
    kept: list[int] = []
    for position, link in enumerate(links):
        owner = getattr(link, "__self__", link)  # a link's bound ``__call__`` (``_direct``)
        wanted_keys = getattr(owner, "wurk_keys", None)
        wanted_types = getattr(owner, "wurk_job_types", None)
        wanted_names = getattr(owner, "wurk_job_names", None)
        if wanted_keys is None and wanted_types is None and wanted_names is None:
            kept.append(position)
            continue
        if wanted_names is not None:
            if isinstance(wanted_names, str) or not isinstance(wanted_names, Collection):
                raise TypeError(f"{owner!r}: wurk_job_names must be a collection of job "
                                f"names (text), not {wanted_names!r}")
            names.append(wanted_names)
        if isinstance(wanted_keys, str) or not all(
                isinstance(key, str) for key in wanted_keys or ()):
            raise TypeError(f"{owner!r}: wurk_keys must be a collection of payload keys "
                            f"(text), not {wanted_keys!r}")
        if not all(isinstance(kind, type) for kind in wanted_types or ()):
            raise TypeError(f"{owner!r}: wurk_job_types must be a tuple of classes, not "
                            f"{wanted_types!r}")
        keys.update(wanted_keys or ())
        types.extend(wanted_types or ())
    if len(kept) == len(links):
        return None
    return _Skips(frozenset(keys), tuple(dict.fromkeys(types)), tuple(kept), tuple(names))


# ``Chain._fresh_skips`` of a chain with a factory (not a class) making its links: what they
# need is read off the links made for each call, as ``ainvoke`` reads it.
_PER_CALL = _Skips(frozenset(), (), ())


def _walk(links: tuple[Link, ...], position: int, job: Any, payload: dict[str, Any],
          queue: str, final: Callable[[], Any], run_async: AsyncRunner | None) -> Any:
    """Call ``links[position:]`` around ``final`` from sync code, each async link through
    ``run_async``. Each link's ``call_next`` is a ``partial`` of this function (made in C, no
    Python frame of its own between two links: this runs around every job)."""
    link, coroutine = links[position]
    rest = final if position == len(links) - 1 else functools.partial(
        _walk, links, position + 1, job, payload, queue, final, run_async)
    if coroutine is None:
        return link(job, payload, queue, rest)
    if run_async is None:
        raise TypeError(f"{link!r} is async middleware: it runs around async jobs "
                        "and pushes made with the a- methods (aperform_async)")
    return run_async(coroutine, job, payload, queue, rest)


@dataclass(frozen=True)
class _Entry:
    factory: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    # Held at the tail whatever is added after it (``Chain.pin_innermost``).
    innermost: bool = False
    # Decided once, not per job: whether each invocation makes a fresh instance.
    fresh: bool = field(init=False)

    def __post_init__(self) -> None:
        fresh = inspect.isclass(self.factory) or bool(self.args or self.kwargs)
        object.__setattr__(self, "fresh", fresh)

    def make(self) -> Middleware:
        if self.fresh:
            return self.factory(*self.args, **self.kwargs)  # type: ignore[no-any-return]
        return self.factory


class Chain:
    """An ordered, editable list of middleware; frozen with the configuration."""

    def __init__(self) -> None:
        self._entries: list[_Entry] = []
        self._frozen = False
        # The links with their async forms, found once per edit when none is a class made
        # fresh per call (the usual chain: the built-in links and the application's
        # functions), so a job's walk asks nothing of them; None when one is.
        self._links: tuple[Link, ...] | None = None
        self._checked = False
        # And the walk of a job none of the links that said what they need has anything for:
        # what tells one, and its links (``_Skips``); None when no link said.
        self._skips: tuple[_Skips, tuple[Link, ...]] | None = None
        # The same for a chain with a link made fresh per call (``_walk_fresh``): read off
        # the classes once, or ``_PER_CALL`` off the links each call makes.
        self._fresh_skips: _Skips | None = None
        # The same for ``ainvoke`` (async forms preferred): the links and their forms, found
        # on its first call after an edit, so an async job does not ask every link with
        # ``inspect`` again; None until then, or while a link is made fresh per call.
        # And each link's ``wurk_plan`` where the walk may use it.
        self._async_links: _AsyncWalks | None = None

    def __iter__(self) -> Iterator[Callable[..., Any]]:
        return (entry.factory for entry in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def exists(self, factory: Callable[..., Any]) -> bool:
        return any(entry.factory is factory for entry in self._entries)

    def add(self, factory: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Append (moving it to the end if already present), though still outside a link
        pinned innermost: the worker's time limits and cancels stay closest to the job."""
        self._edit()
        self.remove(factory)
        self._entries.insert(self._tail(), _Entry(factory, args, kwargs))

    def pin_innermost(self, factory: Callable[..., Any]) -> None:
        """``factory`` as the innermost link, kept there: what is added or inserted after
        goes outside it (the worker's ``Stopper``, so a link added once the worker was
        built does not run inside a job's time limit)."""
        self._edit()
        self.remove(factory)
        self._entries.append(_Entry(factory, innermost=True))

    def prepend(self, factory: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self._edit()
        self.remove(factory)
        self._entries.insert(0, _Entry(factory, args, kwargs))

    def insert_before(
        self, existing: Callable[..., Any], factory: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> None:
        self._edit()
        self._check_anchor(existing, factory)
        self.remove(factory)
        self._entries.insert(self._index(existing), _Entry(factory, args, kwargs))

    def insert_after(
        self, existing: Callable[..., Any], factory: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> None:
        self._edit()
        self._check_anchor(existing, factory)
        self.remove(factory)
        self._entries.insert(min(self._index(existing) + 1, self._tail()),
                             _Entry(factory, args, kwargs))

    def remove(self, factory: Callable[..., Any]) -> None:
        self._edit()
        self._entries = [entry for entry in self._entries if entry.factory is not factory]

    def clear(self) -> None:
        self._edit()
        self._entries.clear()

    def copy(self) -> Chain:
        clone = Chain()
        clone._entries = list(self._entries)
        return clone

    def then(self, inner: Chain) -> Chain:
        """A new chain: this one's links, then ``inner``'s, still outside this one's links
        pinned innermost (a capsule's own links after the application's, outside the
        worker's time limits and cancels, as each ``add`` of them on a copy would put
        them). A link in both is where ``inner`` has it, as ``add`` moves one."""
        own = {id(entry.factory) for entry in inner._entries}
        kept = [entry for entry in self._entries if id(entry.factory) not in own]
        tail = next((i for i, entry in enumerate(kept) if entry.innermost), len(kept))
        joined = Chain()
        joined._entries = [*kept[:tail], *inner._entries, *kept[tail:]]
        return joined

    def freeze(self) -> None:
        self._frozen = True

    def invoke(
        self, job: Any, payload: dict[str, Any], queue: str, final: Callable[[], Any],
        *, run_async: AsyncRunner | None = None,
    ) -> Any:
        """Run ``final`` inside every link, first added outermost; an async link goes to
        ``run_async`` (a ``TypeError`` without one)."""
        if not self._entries:
            return final()
        if not self._checked:
            self._check()
        links = self._links
        if links is None:  # a class made fresh per call: its links are made now
            return self._walk_fresh(job, payload, queue, final, run_async)
        if self._skips is not None and self._skips[0].plain(job, payload):
            links = self._skips[1]
            if not links:
                return final()
        return _walk(links, 0, job, payload, queue, final, run_async)

    def _check(self) -> None:
        """What ``invoke`` needs of the chain, found once per edit: its links and what they
        declared they need (``_Skips``, whose wrong declarations are refused here); for a
        chain with a link made fresh per call, the declarations read off its class."""
        self._links = self._skips = self._fresh_skips = None
        if not any(entry.fresh for entry in self._entries):
            self._links = tuple((_direct(link), async_form(link, prefer_async=False))
                                for link in (entry.make() for entry in self._entries))
            skips = _skips([link for link, _ in self._links])
            if skips is not None:
                self._skips = (skips, tuple(self._links[i] for i in skips.kept))
        elif all(not entry.fresh or inspect.isclass(entry.factory) for entry in self._entries):
            # A class's ``wurk_keys`` (a class attribute) is its instances'.
            self._fresh_skips = _skips([entry.factory for entry in self._entries])
        else:  # a factory of other links: what they declare is seen as each is made
            self._fresh_skips = _PER_CALL
        self._checked = True

    def _walk_fresh(self, job: Any, payload: dict[str, Any], queue: str,
                    final: Callable[[], Any], run_async: AsyncRunner | None) -> Any:
        """``invoke`` of a chain with a link made fresh per call, leaving out the links a job
        has nothing for as ``ainvoke`` does (a skipped class is not even made)."""
        entries = self._entries
        skips = self._fresh_skips
        if skips is _PER_CALL:
            made = [entry.make() for entry in entries]
            found = _skips(made)
            if found is not None and found.plain(job, payload):
                made = [made[i] for i in found.kept]
        elif skips is not None and skips.plain(job, payload):
            made = [entries[i].make() for i in skips.kept]
        else:
            made = [entry.make() for entry in entries]
        if not made:
            return final()
        links = tuple((link, async_form(link, prefer_async=False)) for link in made)
        return _walk(links, 0, job, payload, queue, final, run_async)

    def ainvoke(
        self, job: Any, payload: dict[str, Any], queue: str, final: Callable[[], Any],
        *, sync_links: Literal["thread", "inline"] = "thread",
    ) -> Coroutine[Any, Any, Any]:
        """``invoke`` inside a coroutine: async links awaited; ``final`` awaited when it
        returns an awaitable. A sync link runs in a helper thread of the running loop's
        executor (``"thread"``: a server link may block, it wraps a job), or on the loop
        itself (``"inline"``: client links edit a payload), where its ``call_next()``
        returns an awaitable of the rest, which the link returns; if it returns something
        else the rest is still run (it was called for), unless it stopped the push. A chain
        of sync links only, inline, is ``invoke``'s walk exactly. (The coroutine to await is
        the walk's own: no frame of ``ainvoke`` stays on the job's await chain.)"""
        if not self._entries:
            return _finished(final)
        walks = self._async_links
        if walks is None:
            links = [entry.make() for entry in self._entries]
            forms = [async_form(link) for link in links]
            plans = [_planner(link, form) for link, form in zip(links, forms, strict=True)]
            skips = _skips(links)
            kept = skips.kept if skips is not None else range(len(links))
            few = ([links[i] for i in kept], [forms[i] for i in kept], [plans[i] for i in kept])
            walks = _AsyncWalks(
                (_AsyncWalk(links, forms, plans, len(links), False),
                 _AsyncWalk(links, forms, plans, len(links), True)),
                skips,
                (_AsyncWalk(*few, len(kept), False), _AsyncWalk(*few, len(kept), True)))
            if not any(entry.fresh for entry in self._entries):
                self._async_links = walks
        if walks.skips is not None and walks.skips.plain(job, payload):
            walk = walks.plain[sync_links == "inline"]
            if not walk.size:
                return _finished(final)
        else:
            walk = walks.full[sync_links == "inline"]
        if walk.inline and not any(walk.forms):
            return _walked(tuple(zip(walk.links, walk.forms, strict=True)), job, payload, queue,
                           final)
        return _step(walk, 0, job, payload, queue, final)

    def _check_anchor(self, existing: Callable[..., Any], factory: Callable[..., Any]) -> None:
        """Refuse an ``insert_before``/``insert_after`` that cannot be done before anything
        changes: ``factory``, already in the chain, was removed first and lost."""
        if existing is factory:
            raise ValueError(f"{factory!r} cannot be inserted before or after itself")
        self._index(existing)

    def _index(self, existing: Callable[..., Any]) -> int:
        for index, entry in enumerate(self._entries):
            if entry.factory is existing:
                return index
        raise ValueError(f"{existing!r} is not in this middleware chain")

    def _tail(self) -> int:
        """Where the links pinned innermost begin (the end when there are none)."""
        for index, entry in enumerate(self._entries):
            if entry.innermost:
                return index
        return len(self._entries)

    def _edit(self) -> None:
        self._checked = False
        self._async_links = None
        if self._frozen:
            raise RuntimeError(
                "middleware chains are frozen once the worker starts; add middleware "
                "before calling start()"
            )


class _AsyncWalks(NamedTuple):
    """``ainvoke``'s walks of a chain (its sync links in a helper thread, or inline), and
    those of a job none of the links that said what they need has anything for."""

    full: tuple[_AsyncWalk, _AsyncWalk]
    skips: _Skips | None
    plain: tuple[_AsyncWalk, _AsyncWalk]


class _AsyncWalk(NamedTuple):
    """What ``ainvoke``'s walk needs of its chain, found once per chain."""

    links: list[Middleware]
    forms: list[Any]
    plans: list[Any]
    size: int
    inline: bool  # sync links run on the loop (client links), else in a helper thread


async def _step(walk: _AsyncWalk, position: int, job: Any, payload: dict[str, Any],
                queue: str, final: Callable[[], Any]) -> Any:
    """The links of ``walk`` from ``position`` around ``final``. Those that plan their work
    are not frames: their leaves gather here, and one link awaited (or the end) is the rest.
    A function of the module with its state in arguments, not a closure calling itself:
    that would be a reference cycle per job, left for the garbage collector to find."""
    leaves: list[Leave] = []
    result: Any = None
    error: BaseException | None = None
    plans, count = walk.plans, walk.size
    try:
        while True:
            if position == count:
                outcome = final()
                result = await outcome if _awaitable(outcome) else outcome
                break
            plan = plans[position]
            if plan is not None:
                leave = plan(job, payload, queue)
                if leave is not AWAIT:
                    if leave is not None:
                        leaves.append(leave)
                    position += 1
                    continue
            rest = functools.partial(_step, walk, position + 1, job, payload, queue, final)
            coroutine = walk.forms[position]
            if coroutine is not None:
                result = await coroutine(job, payload, queue, rest)
            elif walk.inline:
                result = await _inline(walk.links[position], job, payload, queue, rest)
            else:
                result = await _in_thread(asyncio.get_running_loop(), walk.links[position],
                                          job, payload, queue, rest)
            break
    except BaseException as exc:
        if not leaves:
            raise
        error = exc
    while leaves:  # innermost first, as their links' frames would end
        try:
            result = leaves.pop()(result, error)
            if type(result) is Later:
                result = await result.awaitable
            error = None
        except BaseException as exc:
            result, error = None, exc
    if error is not None:
        raise error
    return result


def _awaitable(value: Any) -> bool:
    """``inspect.isawaitable``, answering at once for a coroutine and for nothing."""
    return type(value) is types.CoroutineType or (value is not None
                                                  and inspect.isawaitable(value))


async def _finished(final: Callable[[], Any]) -> Any:
    return await _result(final())


async def _walked(links: tuple[Link, ...], job: Any, payload: dict[str, Any], queue: str,
                  final: Callable[[], Any]) -> Any:
    return _walk(links, 0, job, payload, queue, final, None)


async def _result(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def _inline(link: Middleware, job: Any, payload: dict[str, Any], queue: str,
                  rest: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """A sync client link on the loop: its ``call_next()`` returns the rest, to await. Each
    call runs the rest once, in the order called, as each call does in a sync push: a link
    that calls it twice and returns the second's awaitable runs the rest twice (only the
    returned one used to run, the other's coroutine never awaited)."""
    pending: list[Coroutine[Any, Any, Any]] = []

    def call_next() -> Coroutine[Any, Any, Any]:
        pending.append(rest())
        return pending[-1]

    result = link(job, payload, queue, call_next)
    if inspect.isawaitable(result):
        if len(pending) == 1 and result is pending[0]:  # the usual ``return call_next()``
            return await result
        if not any(result is coroutine for coroutine in pending):
            value = await result  # an awaitable of its own: then what it left unstarted
            for coroutine in pending:
                if inspect.getcoroutinestate(coroutine) == inspect.CORO_CREATED:
                    await coroutine
            return value
        for coroutine in pending:
            outcome = await coroutine
            if coroutine is result:
                value = outcome
        return value
    for coroutine in pending:
        if result is None or result is False:
            coroutine.close()  # the link stopped the push: the rest never starts
        else:
            await coroutine
    return result


async def _in_thread(loop: asyncio.AbstractEventLoop, link: Middleware, job: Any,
                     payload: dict[str, Any], queue: str,
                     rest: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """A sync server link in a helper thread: its ``call_next()`` runs the rest on the loop
    and waits for it there."""
    inner: list[concurrent.futures.Future[Any]] = []

    def call_next() -> Any:  # in the helper thread
        future = asyncio.run_coroutine_threadsafe(within(rest(), contextvars.copy_context()),
                                                  loop)
        inner.append(future)
        return future.result()

    run = functools.partial(contextvars.copy_context().run, link, job, payload, queue,
                            call_next)
    try:
        return await loop.run_in_executor(None, run)
    except asyncio.CancelledError:
        for future in inner:
            future.cancel()
        raise


# -- the bridge ---------------------------------------------------------------------------------
# A thread waiting for an async link looks this often whether it was interrupted: an
# interrupt (the shutdown's) is only raised in a thread that runs Python code.
BRIDGE_WAIT = 0.1
_DONE = object()
Submit = Callable[[Coroutine[Any, Any, Any]], "concurrent.futures.Future[Any]"]


def bridge(submit: Submit, link: Callable[..., Coroutine[Any, Any, Any]], job: Any,
           payload: dict[str, Any], queue_name: str, rest: Callable[[], Any]) -> Any:
    """Run async ``link`` from sync code: ``submit`` starts it on an event loop (in this
    thread's context), and each ``await call_next()`` of the link runs ``rest`` here, its
    result or error handed back to the link's await. A failure of the rest (an
    ``Exception``) is the link's to handle; the shutdown reaches the link's await and is
    raised here too, as are ``KeyboardInterrupt`` and ``SystemExit`` (the link's await is
    cancelled by them). The link is cancelled if
    this thread leaves early; this thread owns it."""
    requests: queue.SimpleQueue[Any] = queue.SimpleQueue()

    async def call_next() -> Any:  # on the link's loop: the rest runs in the calling thread
        waiter = asyncio.get_running_loop().create_future()
        requests.put(waiter)
        return await waiter

    future = submit(within(link(job, payload, queue_name, call_next),
                           contextvars.copy_context()))
    future.add_done_callback(lambda _: requests.put(_DONE))
    try:
        while True:
            try:
                waiter = requests.get(timeout=BRIDGE_WAIT)
            except queue.Empty:
                continue
            if waiter is _DONE:
                return future.result(timeout=0)
            try:
                _answer(waiter, rest(), None)
            except BaseException as exc:
                _answer(waiter, None, exc)
                if not isinstance(exc, Exception) or is_shutdown(exc):
                    raise
    finally:
        future.cancel()


def _answer(waiter: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    # A closed loop: the link stopped waiting (a timeout) and ended; its outcome is queued.
    with contextlib.suppress(RuntimeError):
        waiter.get_loop().call_soon_threadsafe(settle, waiter, result, error)


class TemporaryLoop:
    """An event loop on a short-lived thread of its own, for an async link met by a sync
    push (the pushing thread cannot run a loop while the link waits for the rest: a second
    async link would find that loop running). ``with TemporaryLoop() as loop:
    bridge(loop.submit, ...)``; leaving closes it as ``asyncio.run`` closes one (what the
    link left running cancelled first) and joins its thread."""

    JOIN_TIMEOUT = 5.0

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        # Its own default executor (no thread until a link uses one): one still running at
        # the close is let go of, not joined at the process's exit (``runtime.executors``).
        self._helpers = concurrent.futures.ThreadPoolExecutor(
            thread_name_prefix="wurk-client-link-helper")
        self._loop.set_default_executor(self._helpers)
        self._thread = threading.Thread(target=self._loop.run_forever,
                                        name="wurk-client-link", daemon=True)

    def __enter__(self) -> TemporaryLoop:
        self._thread.start()
        return self

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def __exit__(self, *exc_info: object) -> None:
        done = asyncio.run_coroutine_threadsafe(_wind_down(), self._loop)
        with contextlib.suppress(Exception):
            done.result(self.JOIN_TIMEOUT)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(self.JOIN_TIMEOUT)
        if not self._thread.is_alive():
            self._loop.close()
        abandon_running(self._helpers)  # a link's blocking call still under way


def on_own_loop(link: Callable[..., Coroutine[Any, Any, Any]], job: Any,
                payload: dict[str, Any], queue_name: str, rest: Callable[[], Any]) -> Any:
    """An ``AsyncRunner`` for a job run in the calling thread (``perform_inline``,
    ``wurk.testing``'s inline mode and drains): the async link runs on a ``TemporaryLoop``,
    its ``await call_next()`` runs the rest of the chain (the job) back in this thread, as
    the worker's bridge does around a sync job. A loop this thread runs stands still
    meanwhile, as it does while such a test runs an async job."""
    with TemporaryLoop() as loop:
        return bridge(loop.submit, link, job, payload, queue_name, rest)


async def _wind_down() -> None:
    """Cancel what a link left running on its loop, then its async generators and helpers."""
    me = asyncio.current_task()
    left = [task for task in asyncio.all_tasks() if task is not me]
    for task in left:
        task.cancel()
    if left:
        await asyncio.wait(left)
    loop = asyncio.get_running_loop()
    await loop.shutdown_asyncgens()
    await loop.shutdown_default_executor()
