"""Waiting for a job's outcome: woken by Redis (pub/sub), never by asking it again and again.

A stored outcome is announced on its channel (``wurk:result-ready:<jid>``) in the round trip
that stores it (``wurk.results.store.record``): the record itself, or — one longer than
``store.ANNOUNCE_INLINE`` — ``store.NOTICE``, on which a waiter reads the stored record (a
``GET``; an async listener's ``MGET``) rather than have Redis drop its connection for a
message over its pub/sub output-buffer limit. A waiter subscribes first, then — once Redis
confirms the subscription — looks for a record already stored: stored before, it is found;
stored after, it is announced to a subscriber. Either way nothing is missed, and nothing is
sent to Redis for the wait's first ``RECHECK`` seconds (then a read every ``RECHECK`` s: 4.).

1. ``wait(config, jid, timeout)``: a sync wait, on a connection of its own for the wait (the
   ``results`` pool's, ``WAIT_POOL_SIZE`` at most at once), given back at its end.
2. ``await_outcome(config, jid, timeout)``: an async wait. Every waiter of one event loop
   and one configuration shares one ``Listener``: one pub/sub connection, subscriptions sent
   a batch per loop turn (``SUBSCRIBE`` of every channel asked for meanwhile, in one
   command), and the records of the newly confirmed ones read in one ``MGET`` (``_records``:
   a key of another type is told apart). Channels nobody waits on any more are left until
   ``UNSUBSCRIBE_AT`` of them gather (an outcome is announced once a run: a stale channel
   costs the server a few bytes, an ``UNSUBSCRIBE`` per result would cost a command each). A
   thousand waiters cost a few commands and one connection, not a thousand. The listener
   closes its connection ``LINGER`` seconds after its last waiter left (however it left: its
   outcome, its timeout, a cancellation); a waiter that comes meanwhile keeps it. Time is
   read from the listener's ``clock`` (``Listener(config, clock=...)``; a test gives a
   ``ManualClock``).
3. A timeout raises ``TimeoutError``; a connection lost mid-wait raises
   ``wurk.RedisUnavailable`` (every waiter of that listener): wait again once Redis is back.
   An error reply to the listener (a ``SUBSCRIBE`` refused: NOPERM, for an ACL user
   without channel permissions) is raised to every waiter as it is, as a sync wait raises
   it — never a listener left without its reader and its waiters waiting for good.
4. A pub/sub connection can die without a word (half-open: the server or a network dropped
   it, no reset came): it then hears nothing, ever. So a wait that has lasted ``RECHECK``
   seconds reads the record again, and again every ``RECHECK`` seconds (a sync waiter a
   ``GET``, a listener one ``MGET`` for all its waiters, on other connections): an outcome
   stored while its announcement was lost is found within ``RECHECK`` seconds.
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
import threading
import time
import weakref
from collections.abc import Coroutine, Iterator
from typing import Any

from .. import stored
from ..config import Config
from ..connections.pool import RedisPool
from ..connections.replies import CONNECTION_ERRORS, unavailable
from ..errors import RedisUnavailable
from ..runtime.clock import SYSTEM, Clock
from ..stored import Invalid
from .store import NOTICE, Outcome, afind, decode, find, kept, kept_changed, kept_here

__all__ = ["LINGER", "RECHECK", "UNSUBSCRIBE_AT", "WAIT_POOL_SIZE", "Listener", "await_outcome",
           "wait"]

# Sync waits holding a connection at once, per configuration: each blocks a thread anyway.
WAIT_POOL_SIZE = 100
WAIT_ROLE = "results"
# A blocking read returns at least this often (never sending anything): a wait without a
# timeout still checks it is wanted, and redis-py's older releases take no "forever".
READ_SLICE = 30.0
# A wait reads the record again this often (seconds): the bound on how late an outcome
# whose announcement was lost (a half-open pub/sub connection) is found.
RECHECK = 5.0
# An async listener without a waiter keeps its connection this long for the next one (a
# loop awaiting handles one after another reconnects once, not per handle).
LINGER = 10.0
# Channels one SUBSCRIBE (or UNSUBSCRIBE) names, and keys one MGET reads, at most.
BATCH = 1_000
# Channels nobody waits on that a listener keeps subscribed before it unsubscribes them in
# one command.
UNSUBSCRIBE_AT = 500


def _timed_out(jid: str, timeout: float | None) -> TimeoutError:
    return TimeoutError(f"job {jid} stored no result within {timeout} s")


def _limit(timeout: Any) -> float | None:
    """``timeout`` as the seconds a wait takes at most (None: no limit; infinity is none
    either, and a negative one is 0); a clear error for one that is no number of seconds
    (NaN never ran out in async code, nor a text in sync code, which raised a bare
    ``TypeError`` from the arithmetic)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"a result's timeout is a number of seconds or None, not "
                        f"{timeout!r:.80}")
    if math.isnan(timeout):
        raise ValueError("a result's timeout is a number of seconds or None, not NaN")
    return None if math.isinf(timeout) and timeout > 0 else max(0.0, float(timeout))


def _remaining(deadline: float | None, next_look: float) -> float:
    """How long the next read may block: to the deadline or the next re-read, whichever
    comes first (``READ_SLICE`` at most)."""
    now = time.monotonic()
    until = min(READ_SLICE, max(0.0, next_look - now))
    return until if deadline is None else max(0.0, min(deadline - now, until))


def _text(value: Any) -> str:
    return stored.text(value)


def _notice(data: Any) -> bool:
    """Whether an announcement is ``store.NOTICE``: a record stored, too long to publish."""
    return isinstance(data, (bytes, str)) and len(data) == len(NOTICE) \
        and _text(data) == NOTICE


# -- sync -----------------------------------------------------------------------------------------
def wait(config: Config, jid: str, timeout: float | None) -> Outcome | Invalid:
    """The outcome of ``jid`` once it is stored; ``TimeoutError`` after ``timeout`` seconds
    (None: no limit)."""
    limit = _limit(timeout)
    if kept_here(jid):  # a job wurk.testing runs: its outcome is kept in memory
        return _wait_kept(jid, limit, timeout)
    deadline = None if limit is None else time.monotonic() + limit
    pool = config.pool(WAIT_ROLE, size=WAIT_POOL_SIZE)
    # A connection of the pool is waited for within the wait's own time (the pool's own
    # wait would take socket_timeout, then say Redis is unavailable): the slots are its size.
    slot = _slot(pool)
    if not slot.acquire(timeout=None if deadline is None else
                        max(0.0, deadline - time.monotonic())):
        raise _timed_out(jid, timeout)
    try:
        return _wait_on(config, pool, jid, timeout, deadline)
    finally:
        slot.release()


def _wait_kept(jid: str, limit: float | None, timeout: float | None) -> Outcome:
    """The outcome a job run by ``wurk.testing`` kept in memory (``store.keep``), waited for
    up to ``limit`` seconds (None: no limit)."""
    with kept_changed:
        if not kept_changed.wait_for(lambda: kept(jid) is not None, timeout=limit):
            raise _timed_out(jid, timeout)
    found = kept(jid)
    assert found is not None
    return found


def _wait_on(config: Config, pool: RedisPool, jid: str, timeout: float | None,
             deadline: float | None) -> Outcome | Invalid:
    pubsub = pool.client.pubsub()  # type: ignore[no-untyped-call, unused-ignore]
    looked = False  # the record read once the subscription was confirmed
    try:
        pubsub.subscribe(config.keys.result_channel(jid))
        next_look = time.monotonic() + RECHECK
        while deadline is None or time.monotonic() < deadline:
            if time.monotonic() >= next_look:
                # The announcement may have been lost (a half-open connection hears
                # nothing): the stored record is read again, every RECHECK seconds.
                found = find(config, jid)
                if found is not None:
                    return found
                next_look = time.monotonic() + RECHECK
            message = pubsub.get_message(timeout=_remaining(deadline, next_look))
            looked = looked or (message is not None and message["type"] == "subscribe")
            found = _heard(config, jid, message)
            if found is not None:
                return found
        if not looked:
            # The time ran out before the confirmation came (a timeout of 0, or shorter than
            # a round trip): a record stored before the wait is still its outcome.
            found = find(config, jid)
            if found is not None:
                return found
    except CONNECTION_ERRORS as exc:
        raise unavailable(exc, pool.url) from exc
    finally:
        pubsub.close()
    raise _timed_out(jid, timeout)


# The sync waits one pool may hold at once: its size (per process: a fork starts afresh).
_slots: weakref.WeakKeyDictionary[RedisPool, tuple[int, threading.BoundedSemaphore]] = \
    weakref.WeakKeyDictionary()
_slots_lock = threading.Lock()


def _slot(pool: RedisPool) -> threading.BoundedSemaphore:
    with _slots_lock:
        held = _slots.get(pool)
        if held is None or held[0] != os.getpid():
            held = _slots[pool] = (os.getpid(), threading.BoundedSemaphore(pool.size))
        return held[1]


def _heard(config: Config, jid: str, message: Any) -> Outcome | Invalid | None:
    """What one pub/sub message tells a sync waiter: the subscription confirmed (look for a
    record stored before it), or the outcome announced."""
    if message is None:
        return None
    if message["type"] == "subscribe":
        return find(config, jid)  # a key of another type is an ``Invalid``, not "none yet"
    if message["type"] == "message":
        if _notice(message["data"]):  # a record too long to publish: read it
            return find(config, jid)
        found = decode(jid, message["data"])
        # An announcement that cannot be read (not what ``record`` publishes: anyone may
        # publish on the channel) is no outcome: the stored record is, if there is one.
        return find(config, jid) if isinstance(found, Invalid) else found
    return None


# -- async ----------------------------------------------------------------------------------------
class _Session:
    """One pub/sub connection of a listener, and the pump task reading it. A session that
    is lost or idle is ended whole; the next waiter opens a new one."""

    def __init__(self, pubsub: Any) -> None:
        self.pubsub = pubsub
        self.subscribed: set[str] = set()  # jids whose SUBSCRIBE is sent
        self.pump: asyncio.Task[None] | None = None
        self.ended = False


class Listener:
    """The waiters of one event loop on one configuration's Redis: one pub/sub connection
    (a ``_Session``), read by one task; subscriptions and record reads batched per loop
    turn."""

    def __init__(self, config: Config, *, clock: Clock = SYSTEM) -> None:
        self.config = config
        self.clock = clock
        # When the last waiter left (the clock's time); the session ends LINGER after it.
        self.idle_since = clock.monotonic()
        # When the waiters' records are read again (the clock's time): an announcement lost
        # on a half-open connection is made up for by this read.
        self.next_look = clock.monotonic() + RECHECK
        self.channel_prefix = config.keys.result_channel_prefix
        self.waiters: dict[str, list[asyncio.Future[Outcome | Invalid]]] = {}
        # Waiters whose record has not been read since their subscription was confirmed.
        self.unlooked: set[asyncio.Future[Outcome | Invalid]] = set()
        self.session: _Session | None = None
        self.to_check: list[str] = []  # confirmed, their stored record not read yet
        self.sending = asyncio.Lock()  # one writer on the connection at a time
        self._sync_due = False
        self._check_due = False
        self._tasks: set[asyncio.Task[None]] = set()  # held: the loop keeps weak refs only
        self.commands = 0  # commands sent (subscribe, unsubscribe, mget): for tests
        self.wakes = 0  # times the pump woke (a message or its read's timeout): for tests

    async def wait(self, jid: str, timeout: float | None) -> Outcome | Invalid:
        future: asyncio.Future[Outcome | Invalid] = asyncio.get_running_loop().create_future()
        if not self.waiters:
            self.next_look = self.clock.monotonic() + RECHECK
        self.waiters.setdefault(jid, []).append(future)
        self.unlooked.add(future)
        session = self.session
        if session is not None and jid in session.subscribed:
            # Subscribed already (another waiter's, maybe one that has gone): its outcome
            # may have been announced before this waiter came, so it is looked for.
            self._check_soon(jid)
        self._sync_soon()
        try:
            return await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError:  # not the builtin one on 3.10
            if future not in self.unlooked:
                raise _timed_out(jid, timeout) from None
        finally:
            self._drop(jid, future)
        # The time ran out before the record was read (a timeout of 0, or shorter than a
        # round trip): a record stored before the wait is still its outcome.
        found = await afind(self.config, jid)
        if found is None:
            raise _timed_out(jid, timeout)
        return found

    def _drop(self, jid: str, future: asyncio.Future[Outcome | Invalid]) -> None:
        self.unlooked.discard(future)
        futures = self.waiters.get(jid)
        if futures is not None and future in futures:
            futures.remove(future)
            if not futures:
                del self.waiters[jid]
                if not self.waiters:
                    self.idle_since = self.clock.monotonic()
                self._sync_soon()

    def _start(self, step: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(step)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _sync_soon(self) -> None:
        """Bring the subscriptions in line at the next loop turn (once for every waiter
        that came or went meanwhile)."""
        if not self._sync_due:
            self._sync_due = True
            asyncio.get_running_loop().call_soon(lambda: self._start(self._sync()))

    def _check_soon(self, jid: str) -> None:
        self.to_check.append(jid)
        if not self._check_due:
            self._check_due = True
            asyncio.get_running_loop().call_soon(lambda: self._start(self._check()))

    # -- subscribing --------------------------------------------------------------------------
    async def _sync(self) -> None:
        """Subscribe to the channels waited on and not subscribed yet, then unsubscribe from
        those nobody waits on once ``UNSUBSCRIBE_AT`` have gathered — unless nobody waits at
        all: the pump then ends the session after ``LINGER`` (a connection is never
        unsubscribed down to no channel)."""
        self._sync_due = False
        async with self.sending:
            try:
                await self._send()
            except Exception as exc:  # a refusal too (NOPERM): no waiter is left unheard
                await self._fail(exc)

    async def _send(self) -> None:
        session = self.session
        new = [jid for jid in self.waiters
               if session is None or jid not in session.subscribed]
        if new:
            if session is None:
                session = self.session = _Session(self.config.async_pool().client.pubsub())
            for batch in _batches(new):
                await session.pubsub.subscribe(*(self._channel(jid) for jid in batch))
                self.commands += 1
            session.subscribed.update(new)
            if session.pump is None:
                session.pump = self._start(self._read(session))
        if session is None or not self.waiters:
            return
        stale = [jid for jid in session.subscribed if jid not in self.waiters]
        if len(stale) < UNSUBSCRIBE_AT:
            return
        for batch in _batches(stale):
            await session.pubsub.unsubscribe(*(self._channel(jid) for jid in batch))
            self.commands += 1
        session.subscribed.difference_update(stale)

    def _channel(self, jid: str) -> str:
        return f"{self.channel_prefix}{jid}"

    # -- reading ------------------------------------------------------------------------------
    async def _read(self, session: _Session) -> None:
        """The pump: every message of the session's connection, until ``LINGER`` after the
        last waiter left. While waiters wait it wakes every ``LINGER`` at the latest (it
        cannot hear the last one leave) and when their records are due to be read again
        (``RECHECK``), then reads until the linger's end."""
        try:
            while not session.ended:
                message = await session.pubsub.get_message(timeout=self._read_for())
                self.wakes += 1
                if message is not None:
                    self._heard(message)
                self._recheck_due()
                if not self.waiters and self._idle_for() >= LINGER \
                        and await self._end_idle(session):
                    return
        except asyncio.CancelledError:
            await self._end(session)
            raise
        except Exception as exc:  # a refused SUBSCRIBE (NOPERM) too: the pump is gone
            if self.session is session:
                await self._fail(exc)
            else:
                await self._end(session)  # an ended session's own read: nobody waits on it

    def _recheck_due(self) -> None:
        """Every ``RECHECK`` seconds of waiting, read every waiter's record again: the
        connection may be half-open, and an outcome announced on it never heard."""
        now = self.clock.monotonic()
        if self.waiters and now >= self.next_look:
            self.next_look = now + RECHECK
            for jid in self.waiters:
                self._check_soon(jid)

    def _idle_for(self) -> float:
        return self.clock.monotonic() - self.idle_since

    def _read_for(self) -> float:
        """How long the pump's next read may block: to the linger's end when nobody waits."""
        if self.waiters:
            until = max(0.0, self.next_look - self.clock.monotonic())
            return min(LINGER, READ_SLICE, until)
        return max(0.0, min(LINGER - self._idle_for(), READ_SLICE))

    def _heard(self, message: dict[str, Any]) -> None:
        channel = _text(message.get("channel"))
        if not channel.startswith(self.channel_prefix):
            return
        jid = channel[len(self.channel_prefix):]
        if message["type"] == "subscribe" and jid in self.waiters:
            self._check_soon(jid)
        elif message["type"] == "message":
            if _notice(message["data"]):  # a record too long to publish: read it
                if jid in self.waiters:
                    self._check_soon(jid)
                return
            found = decode(jid, message["data"])
            if isinstance(found, Invalid):
                # Not what ``record`` publishes: the stored record, if any, is the outcome.
                if jid in self.waiters:
                    self._check_soon(jid)
            elif found is not None:
                self._resolve(jid, found)

    async def _check(self) -> None:
        """Read the records of the newly confirmed jids: one stored before its subscription
        was in place is found here."""
        self._check_due = False
        jids = [jid for jid in dict.fromkeys(self.to_check) if jid in self.waiters]
        self.to_check.clear()
        keys, pool = self.config.keys, self.config.async_pool()
        try:
            for batch in _batches(jids):
                names = [keys.result(jid) for jid in batch]
                raws = await pool.run(functools.partial(_records, names=names))
                self.commands += 1
                for jid, raw in zip(batch, raws, strict=True):
                    self.unlooked.difference_update(self.waiters.get(jid, ()))
                    found = decode(jid, raw)
                    if found is not None:
                        self._resolve(jid, found)
        except Exception as exc:
            await self._fail(exc)

    def _resolve(self, jid: str, found: Outcome | Invalid) -> None:
        for future in self.waiters.get(jid, ()):
            if not future.done():
                future.set_result(found)

    # -- ending -------------------------------------------------------------------------------
    async def _end_idle(self, session: _Session) -> bool:
        async with self.sending:
            if self.waiters:
                return False
            await self._end(session)
            return True

    async def _end(self, session: _Session) -> None:
        if session.ended:
            return
        session.ended = True
        if self.session is session:
            self.session = None
        try:
            await session.pubsub.aclose()
        except (*CONNECTION_ERRORS, RedisUnavailable):
            pass  # closing a connection that is already broken

    async def _fail(self, exc: Exception) -> None:
        """Redis was lost (``wurk.RedisUnavailable``; they may wait again) or refused the
        listener (an error reply, as a sync wait raises it: NOPERM for a user without
        channel permissions): every waiter hears it, and the next waiter opens a new
        session."""
        error = unavailable(exc, self.config.async_pool().url) \
            if isinstance(exc, CONNECTION_ERRORS) and not isinstance(exc, RedisUnavailable) \
            else exc
        for futures in self.waiters.values():
            for future in futures:
                if not future.done():
                    future.set_exception(error)
        session = self.session
        if session is not None:
            await self._end(session)
            if session.pump is not None and session.pump is not asyncio.current_task():
                session.pump.cancel()


async def _records(r: Any, *, names: list[str]) -> list[Any]:
    """The records stored at ``names``, in one ``MGET``. A key of another Redis type reads
    as nil there, as an absent one does: the ``EXISTS`` sent with it counts the keys there,
    and only when it counts more than the ``MGET`` found are the nil ones read again, a
    ``GET`` each, whose error reply in place makes that record an ``Invalid`` (one written
    between the two reads is found by its ``GET``)."""
    pipe = r.pipeline(transaction=False)
    pipe.mget(names)
    pipe.exists(*names)
    found, present = await pipe.execute()
    found = list(found)
    nil = [index for index, raw in enumerate(found) if raw is None]
    if nil and present > len(found) - len(nil):
        again = r.pipeline(transaction=False)
        for index in nil:
            again.get(names[index])
        for index, raw in zip(nil, await again.execute(raise_on_error=False), strict=True):
            found[index] = raw
    return found


def _batches(jids: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(jids), BATCH):
        yield jids[start:start + BATCH]


# One listener per event loop and configuration (kept beside the configuration it serves: an
# ``id`` alone could be a later configuration's).
_listeners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop,
                                      dict[int, tuple[Config, Listener]]] = \
    weakref.WeakKeyDictionary()
_listeners_lock = threading.Lock()


def listener(config: Config) -> Listener:
    """The running loop's listener for ``config``, made on first use."""
    loop = asyncio.get_running_loop()
    with _listeners_lock:
        per_loop = _listeners.setdefault(loop, {})
        held = per_loop.get(id(config))
        if held is None or held[0] is not config:
            held = per_loop[id(config)] = (config, Listener(config))
        return held[1]


async def await_outcome(config: Config, jid: str, timeout: float | None) -> Outcome | Invalid:
    """The outcome of ``jid`` once it is stored, woken by the loop's listener;
    ``TimeoutError`` after ``timeout`` seconds (None: no limit)."""
    limit = _limit(timeout)  # before a listener is made
    if kept_here(jid):  # as ``wait``: kept in memory; a wait with time to spend, off the loop
        found = kept(jid)
        if found is not None or limit == 0:
            return found if found is not None else _wait_kept(jid, 0, timeout)
        return await asyncio.to_thread(_wait_kept, jid, limit, timeout)
    return await listener(config).wait(jid, limit)
