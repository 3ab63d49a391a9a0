"""What every rate limiter shares: its name, its options, its wait and its block.

1. ``Limiter``: a validated name (letters, digits, ``-``, ``_``: names may be built per
   call, ``f"stripe-{user_id}"``), the options every type takes (``wait_timeout``, ``policy``,
   ``reschedule``, ``backoff``, ``ttl``) and the loop that asks Redis, waits and asks again
   until it is let in or its wait runs out. Every decision is one Lua script run with
   Redis's clock; the loop only keeps the caller's own deadline.
2. ``within_limit()`` returns a ``Block``, a context manager for ``with`` and ``async with``;
   entering it yields a ``Handle`` (``handle.points_used(actual)`` for points limiters).
   ``run(fn, ...)`` calls ``fn`` inside the limit and honours ``policy="skip"`` (a ``with``
   block cannot be skipped, so it raises ``OverLimit`` whatever the policy).
3. A limiter writes its metadata (``lmtr:<name>``, ``lmtr-list``) on its first use in a
   process and again every ``REGISTER_EVERY`` seconds, never at construction: a module that
   defines limiters at import does no I/O. A registration that writes over another
   definition's rule (``size``, lock, interval) warns, naming both.
4. Redis: inside a job, the connection the processor lends its jobs (``wurk.redis()``);
   elsewhere one of the client pool's, per attempt, given back before any sleep. A limiter
   given ``config=`` uses that configuration's client pool, even inside a job (it may be
   another Redis). A concurrent limiter's waiter blocks on its wake-up list only on a
   processor's own connection; elsewhere it sleeps and asks again (``POLL_OUTSIDE_JOBS``).
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import itertools
import json
import logging
import os
import re
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar, cast

from .. import scripts
from .. import stored as values
from ..config import DEFAULT_SHARD, Config, _not_seconds, default_config
from ..connections.lease import Lease
from ..connections.lending import kept
from ..connections.lending import redis as lent_redis
from ..errors import OverLimit
from ..stored import Invalid

if TYPE_CHECKING:
    from ..scripts import _Caller

__all__ = ["DEFAULT_TTL", "MIN_TTL", "Block", "Handle", "Limiter", "Policy", "interval_seconds"]

log = logging.getLogger("wurk")
T = TypeVar("T")

Policy = Literal["raise", "skip"]
Backoff = Callable[["Limiter | None", dict[str, Any], BaseException], float]

NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,200}")
UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
DAY = 86400
# Metadata and counters of a limiter nobody used for this long vanish (Ruby wurk's default);
# less than a day would drop a daily limiter's record between two uses.
DEFAULT_TTL = 90 * DAY
MIN_TTL = DAY
# The shortest interval, drain period or lock a limiter takes: the scripts count whole
# milliseconds, and a shorter one rounded to 0 — a limiter that let every call in.
SHORTEST = 0.001
# The longest duration a limiter takes (interval, drain period, lock, ttl, wait_timeout):
# Redis keeps expiries this long, while one of 1e300 s made it refuse the key's expiry on
# every use, after the script had written (and a wait of 1e306 s overflowed its first try).
LONGEST = 100 * 365 * DAY
# The longest single wait: a job being shut down while it waits notices within this, and a
# blocking read stays well inside the connection's socket timeout.
WAIT_SLICE = 0.5
# How often a process re-writes a limiter's metadata while it uses it: often enough that it
# never expires in use, rarely enough to cost nothing.
REGISTER_EVERY = 3600.0
# Processes with many dynamic limiters forget their registrations past this many names (and
# register each again on its next use) rather than growing without bound.
REGISTERED_CAP = 10_000

COMMON = ("limiter_common.lua",)
# The kinds a limiter's metadata may name (``lmtr:<name>`` ``type``).
KINDS = ("concurrent", "bucket", "window", "leaky", "points")
STAT_FIELDS = ("held", "held_ms", "immediate", "waited", "wait_ms", "refused", "overages",
               "reclaimed")
_REGISTER = scripts.Script("limiter_register.lua", prelude=COMMON)
_registered: dict[tuple[Any, ...], float] = {}
_registered_lock = threading.Lock()
_blocks_lock = threading.Lock()


def forget_registrations() -> None:
    """Make every limiter write its metadata again on its next use (after a FLUSHALL)."""
    with _registered_lock:
        _registered.clear()


def pairs(reply: Any) -> dict[str, Any]:
    """HGETALL's reply as a dict, whether it came as a dict (RESP3) or a flat list."""
    if isinstance(reply, Mapping):
        return {values.text(k): v for k, v in reply.items()}
    if isinstance(reply, (list, tuple)):
        return {values.text(reply[i]): reply[i + 1] for i in range(0, len(reply) - 1, 2)}
    return {}


def read_stats(reply: Any) -> dict[str, int | Invalid]:
    """The stats hash (``lmtr-s:{name}``): each counter a whole number (0 when absent), or
    ``Invalid`` when what is stored is not one."""
    fields = pairs(reply)
    return {name: values.count(fields.get(name)) for name in STAT_FIELDS}


def interval_seconds(value: str | float | timedelta, what: str) -> float:
    """``"second"``/``"minute"``/``"hour"``/``"day"``, seconds, or a ``timedelta``."""
    if isinstance(value, str):
        if value in UNITS:
            return float(UNITS[value])
        raise ValueError(f"{what} {value!r} is not a unit; use one of "
                         f"{', '.join(map(repr, UNITS))} or a number of seconds")
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if _not_seconds(seconds):
        raise ValueError(f"{what} must be a unit or a positive number of seconds, "
                         f"not {value!r}")
    return _span(float(seconds), what, value)


def _span(seconds: float, what: str, value: object, *, shortest: float = SHORTEST) -> float:
    """``seconds`` (positive, finite) when Redis can keep it: ``SHORTEST`` to ``LONGEST``."""
    if not shortest <= seconds <= LONGEST:
        bounds = "between 1 ms and 100 years" if shortest else "at most 100 years"
        raise ValueError(f"{what} must be {bounds}, not {value!r}")
    return float(seconds)


def _whole(value: object, what: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{what} must be a whole number of at least {minimum}, not {value!r}")
    return value


def _finite(value: object, what: str, *, zero: bool, noun: str = "a number",
            shown: object = None) -> float:
    """``value`` as a float: a finite number > 0 (≥ 0 with ``zero``). The configuration's own
    rule (``config._not_seconds``): NaN, infinities, bools and integers no float holds (400
    digits, which raised OverflowError out of the check itself) are refused."""
    if _not_seconds(value, zero=zero):
        bound = "≥ 0" if zero else "> 0"
        raise ValueError(f"{what} must be {noun} {bound}, not "
                         f"{value if shown is None else shown!r}")
    return float(cast(float, value))  # _not_seconds let through only an int or a float


def _seconds(value: object, what: str, *, zero: bool, shortest: float = 0.0) -> float:
    """A duration option (seconds or a ``timedelta``): finite, > 0 (≥ 0 with ``zero``), at
    least ``shortest`` and at most ``LONGEST``. A longer one (``wait_timeout=1e306``) raised
    OverflowError from the first attempt, or Redis refused the expiry after writing."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    return _span(_finite(seconds, what, zero=zero, noun="a number of seconds", shown=value),
                 what, value, shortest=shortest)


class Handle:
    """What entering a limit yields: the limiter, how long the call waited, when Redis let
    it in (``granted_at``, epoch seconds by Redis's clock), and for points limiters
    ``points_used(actual)`` to correct the estimate once the real cost is known."""

    __slots__ = ("_reported", "granted_at", "limiter", "token", "used", "waited")

    def __init__(self, limiter: Limiter, used: float, token: str, waited: float) -> None:
        self.limiter = limiter
        self.used = used
        self.token = token
        self.waited = waited
        self.granted_at: float | None = None
        self._reported: float | None = None

    def points_used(self, actual: float) -> None:
        """The call really cost ``actual`` (points limiters; a no-op for the others)."""
        self.limiter._correct(self, actual)


class Block:
    """``with limiter.within_limit() as handle:`` — and ``async with``. One block at a time:
    entering it again while it is in use (one ``Block`` shared like a lock between threads,
    tasks or nested ``with``) raises ``RuntimeError``; call ``within_limit()`` for each."""

    __slots__ = ("_busy", "_handle", "limiter", "used")

    def __init__(self, limiter: Limiter, used: float) -> None:
        self.limiter = limiter
        self.used = used
        self._handle: Handle | None = None
        self._busy = False

    def _claim(self) -> None:
        # A second holder overwrote the first's handle: the first exit gave back the other's
        # slot while it still ran, and its own leaked until its lock expired.
        with _blocks_lock:
            if self._busy:
                raise RuntimeError(f"this within_limit() block of {self.limiter!r} is already "
                                   "in use: call within_limit() for each with-block")
            self._busy = True

    def __enter__(self) -> Handle:
        self._claim()
        try:
            self._handle = self.limiter._acquire(self.used)
        except BaseException:
            self._busy = False
            raise
        return self._handle

    def __exit__(self, *exc_info: object) -> None:
        handle, self._handle = self._handle, None
        try:
            if handle is not None:
                self.limiter._finish(handle)
        finally:
            self._busy = False

    async def __aenter__(self) -> Handle:
        """The same wait, its attempts on a worker thread, so the event loop keeps running."""
        if not self.limiter.blocking:
            return self.__enter__()
        self._claim()
        try:
            self._handle = await self.limiter._aacquire(self.used)
        except BaseException:
            self._busy = False
            raise
        return self._handle

    async def __aexit__(self, *exc_info: object) -> None:
        handle, self._handle = self._handle, None
        try:
            if handle is None:
                return
            if self.limiter.blocking:
                # Shielded: a release still queued for a thread when the task is cancelled
                # runs all the same, or the slot stayed taken until its lock expired.
                await asyncio.shield(asyncio.to_thread(self.limiter._finish, handle))
            else:
                self.limiter._finish(handle)
        finally:
            self._busy = False


class Limiter:
    """A named limit shared by every process on one Redis."""

    kind: ClassVar[str] = ""
    # Whether entering may wait or talk to Redis (unlimited does neither).
    blocking: ClassVar[bool] = True
    # The options every process must share (the scripts' rule: a size, a lock, an interval),
    # each a constructor's keyword and an attribute; two definitions differing in them are
    # told (``_register``). The others (a wait, a policy) are each caller's own.
    rule: ClassVar[tuple[str, ...]] = ()

    def __init__(self, name: str, *, wait_timeout: float | timedelta = 5.0,
                 policy: Policy = "raise", reschedule: int | None = None,
                 backoff: Backoff | None = None, ttl: float | timedelta = DEFAULT_TTL,
                 config: Config | None = None) -> None:
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            raise ValueError(f"limiter name {name!r} must be 1 to 200 letters, digits, '-' "
                             "or '_' (e.g. f\"stripe-{account_id}\")")
        if policy not in ("raise", "skip"):
            raise ValueError(f"policy must be 'raise' or 'skip', not {policy!r}")
        if reschedule is not None:
            _whole(reschedule, "reschedule", minimum=0)
        if backoff is not None and not callable(backoff):
            raise ValueError(f"backoff must be a function (limiter, job, exc) -> seconds, "
                             f"not {backoff!r}")
        self.name = name
        self.wait_timeout = _seconds(wait_timeout, "wait_timeout", zero=True)
        self.policy: Policy = policy
        self.reschedule = reschedule
        self.backoff = backoff
        # A floor, not an error: a shorter lifetime could drop a limit between two uses.
        self.ttl = max(int(_seconds(ttl, "ttl", zero=False)), MIN_TTL)
        self.config = config
        self._registry_key: tuple[Any, ...] | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    # -- public -----------------------------------------------------------------------------
    def within_limit(self, used: float = 1) -> Block:
        """``with L.within_limit():`` runs the block when allowed; otherwise waits up to
        ``wait_timeout`` and raises ``OverLimit``. ``used`` charges that many units."""
        return Block(self, self._check_used(used))

    def run(self, fn: Callable[..., T], *args: Any, used: float = 1, **kwargs: Any) -> T | None:
        """``fn(*args, **kwargs)`` within the limit; None without calling it when over the
        limit and ``policy="skip"``."""
        block = self.within_limit(used)
        try:
            block.__enter__()
        except OverLimit:
            if self.policy == "skip":
                return None
            raise
        try:
            return fn(*args, **kwargs)
        finally:
            block.__exit__(None, None, None)

    async def arun(self, fn: Callable[..., Awaitable[T]], *args: Any, used: float = 1,
                   **kwargs: Any) -> T | None:
        """The ``async`` form of ``run``."""
        block = self.within_limit(used)
        try:
            await block.__aenter__()
        except OverLimit:
            if self.policy == "skip":
                return None
            raise
        try:
            return await fn(*args, **kwargs)
        finally:
            await block.__aexit__(None, None, None)

    def options(self) -> dict[str, Any]:
        """What defines this limiter, as stored in its metadata (``lmtr:<name>``)."""
        return {"wait_timeout": self.wait_timeout, "policy": self.policy}

    def stats(self) -> dict[str, int | Invalid]:
        """The counters every process adds to (``lmtr-s:{name}``); one that is not a count
        (written by hand, say) is a ``wurk.api.values.Invalid``. Read, as the dashboard
        reads it, through the ``api`` pool: a key of another type reads as absent, with a
        warning naming it."""
        config = self._config()
        key = config.keys.limiter_stats(self.name)
        return read_stats(config.pool("api").run(lambda r: r.hgetall(key), idempotent=True))

    # -- what each type defines -------------------------------------------------------------
    def _attempt(self, conn: _Caller, handle: Handle, remaining_ms: int,
                 waited_ms: int) -> tuple[int, int]:
        """Ask Redis once: (1, Redis's time in µs) let in; (0, ms) try again after ms;
        (-1, ms) refused."""
        raise NotImplementedError

    def _release(self, conn: _Caller, handle: Handle) -> None:
        """Leaving the block (concurrent limiters give their slot back)."""

    def _correct(self, handle: Handle, actual: float) -> None:
        """``handle.points_used``: only points limiters account for it."""

    def _check_used(self, used: float) -> float:
        _whole(used, "used")
        return used

    # -- the loop ---------------------------------------------------------------------------
    def _acquire(self, used: float) -> Handle:
        handle = Handle(self, used, _token(), 0.0)
        wait: list[float] = []
        while (pause := self._step(handle, wait)) is not None:
            if pause > 0:
                time.sleep(pause)
        return handle

    async def _aacquire(self, used: float) -> Handle:
        """``_acquire`` for ``async with``: each attempt on a thread, each wait on the loop.
        A waiter holds no thread while it waits: waiters that held one for their whole wait
        emptied a small executor, and the release that would let them in queued behind
        them until their waits ran out."""
        handle = Handle(self, used, _token(), 0.0)
        wait: list[float] = []
        loop = asyncio.get_running_loop()
        while True:
            context = contextvars.copy_context()
            future = loop.run_in_executor(None, context.run, self._step, handle, wait)
            try:
                pause = await asyncio.shield(future)
            except asyncio.CancelledError:
                # The attempt goes on; a slot it takes after the cancellation is given back.
                future.add_done_callback(lambda done: self._finish_abandoned(done, handle))
                raise
            if pause is None:
                return handle
            await asyncio.sleep(pause)

    def _step(self, handle: Handle, wait: list[float]) -> float | None:
        """One attempt: None when let in (``handle`` filled in), else how long to sleep
        before the next (0 when it already waited on its connection); ``OverLimit`` when
        refused. ``wait`` holds the wait's start and deadline, set by the first attempt."""
        # A connection of the pool is held for one attempt (and a concurrent limiter's
        # wake-up wait on a processor's own connection), never across a sleep: many
        # threads waiting must not empty the pool that every other call needs.
        with self._connection() as conn:
            if not wait:
                self._register(conn)
                started = time.monotonic()  # the wait starts with the first attempt
                wait[:] = [started, started + self.wait_timeout]
            started, deadline = wait
            now = time.monotonic()
            remaining, waited = max(0.0, deadline - now), now - started
            status, value = self._attempt(conn, handle, int(remaining * 1000),
                                          int(waited * 1000))
            if status == 1:  # then the second number is when, in µs
                handle.waited, handle.granted_at = waited, value / 1e6
                return None
            if status < 0:
                raise OverLimit(self, retry_after=self._retry_after(value))
            pause = max(0.001, min(value / 1000, remaining, self._slice()))
            if self.config is None and kept():
                self._wait_on(conn, pause)
                return 0.0
        return self._poll(pause)

    def _slice(self) -> float:
        timeout = self._config().socket_timeout
        return min(WAIT_SLICE, timeout / 2) if timeout > 0 else WAIT_SLICE

    def _poll(self, pause: float) -> float:
        """How long to sleep, holding no connection, before asking again."""
        return pause

    def _wait_on(self, conn: _Caller, pause: float) -> None:
        """Wait on a connection only this thread uses (a concurrent limiter blocks on its
        wake-up list there)."""
        time.sleep(pause)

    def _retry_after(self, wait_ms: int) -> float | None:
        return wait_ms / 1000 if wait_ms > 0 else None

    def _finish(self, handle: Handle) -> None:
        """Leave the block; a release Redis refuses is logged, not raised: the block's own
        outcome matters more, and the slot comes back when its lock times out."""
        try:
            with self._connection() as conn:
                self._release(conn, handle)
        except Exception as exc:
            log.warning("limiter %s: could not give back a slot (%s); it is reclaimed when "
                        "its lock times out", self.name, exc)

    def _finish_abandoned(self, future: asyncio.Future[float | None], handle: Handle) -> None:
        """An attempt whose caller was cancelled: the slot it took (if any) goes back."""
        if not future.cancelled() and future.exception() is None and future.result() is None:
            threading.Thread(target=self._finish, args=(handle,),
                             name="wurk-limiter-release", daemon=True).start()

    # -- Redis ------------------------------------------------------------------------------
    def _config(self) -> Config:
        config = self.config if self.config is not None else default_config()
        return config.shard(DEFAULT_SHARD) if config.is_cluster else config

    def _connection(self) -> AbstractContextManager[_Caller]:
        # On Redis Cluster a job's lent connection reaches its queue's keyspace; a limiter
        # lives in the configuration's own (``docs/scaling.md``).
        if self.config is None and not default_config().is_cluster:
            return lent_redis()
        return _OwnLease(self._config())

    def _script(self, conn: _Caller, script: scripts.Script, keys: list[str],
                args: list[object]) -> tuple[int, int]:
        reply = script.call(conn, keys, args)
        self._warn_restarted(reply)
        return int(reply[0]), int(reply[1])

    def _warn_restarted(self, reply: Any) -> None:
        """Name what a script found holding what wurk never writes there (its reply's third
        element) and started again: a key of another type, a stats counter that is no
        count, a bucket's counter that is no count."""
        found = reply[2] if isinstance(reply, (list, tuple)) and len(reply) > 2 else None
        for what in found if isinstance(found, (list, tuple)) else ():
            log.warning("limiter %s: %s held what wurk never writes there (written by "
                        "something else); started again", self.name,
                        values.shown(what, 300))

    def _register(self, conn: _Caller) -> None:
        """Write the metadata on first use and every ``REGISTER_EVERY`` seconds after, and
        tell when another definition of this name had stored another rule."""
        if self._registry_key is None:  # once per instance: options never change
            self._registry_key = (id(self.config), self.kind, self.name,
                                  tuple(sorted(self.options().items())))
        now = time.monotonic()
        seen = _registered.get(self._registry_key)
        if seen is not None and now - seen < min(REGISTER_EVERY, self.ttl / 2):
            return
        options = json.dumps(self.options(), sort_keys=True, separators=(",", ":"))
        fingerprint = hashlib.sha256(f"{self.kind}|{self.name}|{options}".encode()).hexdigest()
        keys = self._config().keys
        reply = _REGISTER.call(
            conn, [keys.limiter(self.name), keys.limiter_list],
            [self.name, self.kind, options, fingerprint, self.ttl, keys.limiter("")])
        self._warn_restarted(reply)
        self._warn_replaced(reply)
        with _registered_lock:
            if len(_registered) >= REGISTERED_CAP:
                _registered.clear()
            _registered[self._registry_key] = now

    def _warn_replaced(self, reply: Any) -> None:
        """A warning when the metadata this registration wrote over was another definition's
        with another rule (``size``, lock, interval): two definitions of one name each run
        the scripts with their own, and undo each other while both are in use."""
        if not isinstance(reply, (list, tuple)) or len(reply) < 5:
            return
        kind, raw = values.text(reply[3]), values.text(reply[4])
        where = self._config().keys.limiter(self.name)
        if kind != self.kind:
            if kind in KINDS:
                log.warning("limiter %r is defined here as a %s limiter, but %s held a %s "
                            "limiter's: two limiters share its name and stats; give one "
                            "another name", self.name, self.kind, where, kind)
            return
        stored = values.json_object(raw)
        try:
            if not isinstance(stored, dict):
                raise ValueError("not a JSON object")
            other = type(self)(self.name, **{n: stored[n] for n in self.rule})
        except (KeyError, TypeError, ValueError):
            return  # no limiter's options (written by hand): ours are stored now
        theirs = {name: getattr(other, name) for name in self.rule}
        ours = {name: getattr(self, name) for name in self.rule}
        if theirs != ours:
            log.warning("limiter %r is defined here with %s, but %s held another "
                        "definition's %s: while processes with both run, each enforces its "
                        "own, and together they let more in (or reclaim each other's locks); "
                        "stored now: this one's. Expected once after a deploy that changes "
                        "the limit; repeated hourly, two definitions are live", self.name,
                        _shown(ours), where, _shown(theirs))


def _shown(rule: dict[str, Any]) -> str:
    """``size=3, lock_timeout=1``: whole floats without their ``.0``, others exactly."""
    return ", ".join(f"{name}={int(value) if float(value).is_integer() else value!r}"
                     for name, value in rule.items())


class _OwnLease:
    """A connection of an explicit configuration's client pool, for one attempt."""

    __slots__ = ("_config", "_lease")

    def __init__(self, config: Config) -> None:
        self._config = config
        self._lease: Lease | None = None

    def __enter__(self) -> Lease:
        self._lease = Lease(self._config.pool("client"))
        return self._lease

    def __exit__(self, *exc_info: object) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.release()


# Tokens naming one holder or one use: unique across hosts (a random prefix), processes
# (the pid: forked children inherit the prefix and the count) and threads (``count`` is
# atomic), without reading random bytes per call.
_TOKEN_PREFIX = os.urandom(6).hex()
_token_serial = itertools.count()


def _token() -> str:
    return f"{_TOKEN_PREFIX}{os.getpid():x}-{next(_token_serial):x}"
