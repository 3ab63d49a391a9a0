"""Async jobs: the worker's event loop, each capsule's async slots, and a watch on the loop.

1. ``EventLoop`` owns the worker's one event-loop thread, started on first use; ``close``
   cancels what still runs there and stops the thread. Nothing a job does ends the loop
   before that (a task it left raising ``SystemExit``, a ``loop.stop()``). Helper threads
   that may wait long (a sync middleware around an async job) come from its executor, one
   an async slot; short Redis bookkeeping (a failure booked, a batch count) from two
   threads of its own (``bookkeeping``).
2. ``AsyncLane`` is a capsule's share of it: at most ``async_concurrency`` jobs at once. A
   processor that fetched an ``async def`` job hands it here and fetches on, so a thousand
   waiting jobs hold no thread. A few more than that (``BACKLOG``) may wait on the loop for
   a slot, so a job ending starts the next at once, without a thread's wake; at quiet they
   go back to their queues. The job runs as a task through the same runner code as a
   sync job (middleware, perform, retry); its ACK goes through the capsule's one
   acknowledging thread: the ACKs of the jobs ending within ``ACK_GATHER``, whichever
   processor fetched them, in one round trip, by the same fetcher code. At the deadline the
   manager gives back what still runs, then the lane cancels it: a job given back is never
   acknowledged.
3. The loop's watch (``wurk.runtime.loopwatch``): a tick on the loop measures how late it
   runs (the process record's ``loop_lag_us``), and a thread of the watch's names the async
   job holding the loop longer than ``loop_lag_warning``, while it holds it: a blocking
   call inside an async job stalls every other one. Nothing wraps a job's steps for it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import logging
import queue
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from contextlib import suppress
from typing import Any, TypeVar

from .config import EVENT_LOOPS, UVLOOP_MISSING, Capsule, Config
from .connections.lease import Lease
from .connections.pool import RedisPool
from .errors import ConfigError, RedisUnavailable, Shutdown
from .fetch.basic import UnitOfWork
from .middleware import async_form
from .reporting import report_error
from .runtime.affinity import Pinning
from .runtime.executors import abandon_running
from .runtime.loopwatch import LoopWatch
from .runtime.outage import Backoff, Outage

try:  # the default event loop where it is installed (a core dependency on Linux and macOS)
    import uvloop
except ImportError:  # pragma: no cover - Windows, PyPy, or removed by hand
    uvloop = None  # type: ignore[assignment]

__all__ = ["AsyncLane", "EventLoop", "bookkeeping", "loop_factory"]

log = logging.getLogger("wurk")
T = TypeVar("T")

# A processor waiting for a free async slot looks this often whether it should stop.
SLOT_WAIT = 0.1
# The acknowledging thread looks this often whether its lane is closing.
ACK_WAIT = 0.5
# After the first finished job it waits this long for more, so one round trip (and one
# wake of the thread) serves many.
ACK_GATHER = 0.002
# Threads for the blocking parts of async jobs that may last (a sync middleware link around
# a job holds one while the job runs, a limiter's wait) beyond one per async slot.
SPARE_HELPERS = 4
# Jobs a lane holds handed over beyond its slots, each waiting on the loop for one: a job
# ending starts the next there and then, instead of the freed slot waiting for a processor
# thread to wake, take the GIL and hand one over (which it then does for a batch at once).
BACKLOG = 16
# Threads for short Redis bookkeeping of async jobs (``bookkeeping``): bounded, so a
# thousand jobs failing at once do not add a thread each.
BOOKKEEPERS = 2


def loop_factory(kind: str) -> tuple[str, Callable[[], asyncio.AbstractEventLoop]]:
    """The ``event_loop`` setting's loop: its name and how to make one. "auto" takes uvloop
    where it is installed (libuv's loop: the same asyncio API, each task step and socket
    read cheaper), else asyncio's own; "asyncio" and "uvloop" ask for one by name (the
    configuration's check refuses "uvloop" where it is not installed)."""
    if kind not in EVENT_LOOPS:
        raise ConfigError(f"event_loop must be one of {', '.join(map(repr, EVENT_LOOPS))}, "
                          f"not {kind!r}")
    if kind == "asyncio" or (kind == "auto" and uvloop is None):
        return "asyncio", asyncio.new_event_loop
    if uvloop is None:
        raise ConfigError(UVLOOP_MISSING)
    return "uvloop", uvloop.new_event_loop


def _placed(pinning: Pinning | None, body: Callable[[], Any]) -> None:
    """Run a thread's ``body`` where ``pinning`` places the processor threads."""
    if pinning is None:
        body()
        return
    pinning.enter()
    try:
        body()
    finally:
        pinning.leave()


class EventLoop:
    """The worker's event loop thread, made on first use (a worker with no async job never
    starts it)."""

    def __init__(self, helpers: int = 32, watch: LoopWatch | None = None,
                 kind: str = "auto") -> None:
        self._helpers = helpers
        # The ``event_loop`` setting: which loop ``get`` makes (``loop_factory``).
        self.kind, self._new_loop = loop_factory(kind)
        # The loop's lag, and the async job holding it (named when ``watch.limit`` is set;
        # the runner tells it how to name a job).
        self.watch = watch if watch is not None else LoopWatch(None)
        # Set before the first job by the launcher: the loop thread keeps with the processor
        # threads (``wurk.runtime.affinity``), since the GIL passes between them on every job.
        self.pinning: Pinning | None = None
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._watcher: threading.Thread | None = None
        self._closing = threading.Event()
        self._serving = False  # in ``run_forever`` (read and written on the loop thread only)
        # The loop's default executor (``asyncio.to_thread``, sync links around async jobs):
        # its threads still running when the loop does not stop in time are abandoned.
        self._helper_pool: concurrent.futures.ThreadPoolExecutor | None = None

    def reserve_helpers(self, count: int) -> None:
        """At least ``count`` helper threads (``helper_count``) for the loop made next: the
        launcher's, once its server chain is final (at start)."""
        with self._lock:
            self._helpers = max(self._helpers, count)

    def get(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = self._new_loop()
                helpers = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self._helpers, thread_name_prefix="wurk-async-helper")
                loop.set_default_executor(helpers)
                self._helper_pool = helpers
                # Short Redis bookkeeping (booking a failure, a batch count) gets threads of
                # its own, so a thousand async jobs failing at once add BOOKKEEPERS threads,
                # not one each.
                _bookkeepers[loop] = concurrent.futures.ThreadPoolExecutor(
                    max_workers=BOOKKEEPERS, thread_name_prefix="wurk-async-bookkeeping")
                loop.call_soon(self.watch.start_ticking, loop)
                thread = threading.Thread(target=self._run, args=(loop,),
                                          name="wurk-asyncio", daemon=True)
                thread.start()
                if self.watch.limit is not None:
                    self._watcher = threading.Thread(
                        target=self.watch.run, args=(loop, thread, self._closing),
                        name="wurk-loop-watch", daemon=True)
                    self._watcher.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        _placed(self.pinning, lambda: self._serve(loop))

    def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run ``loop`` until ``close``. asyncio lets a task's ``KeyboardInterrupt`` or
        ``SystemExit`` (one a job spawned and left running) out of ``run_forever``, and job
        code may call ``loop.stop()``: either would end this thread, and with it every async
        job of the process, so the loop is run again."""
        self._serving = True
        while not self._closing.is_set():
            try:
                loop.run_forever()
            except BaseException as exc:
                if not self._closing.is_set():
                    log.error("a task on the event loop raised %s: %s; the loop goes on "
                              "(a task an async job started and left running?)",
                              type(exc).__name__, exc)
        self._serving = False
        # What still runs is cancelled and gets to handle that while the helpers stop.
        for task in asyncio.all_tasks(loop):
            task.cancel()
        try:
            loop.run_until_complete(loop.shutdown_default_executor())
        except BaseException as exc:
            log.warning("stopping the event loop's helper threads: %s: %s",
                        type(exc).__name__, exc)
        finally:
            bookkeepers = _bookkeepers.pop(loop, None)
            if bookkeepers is not None:
                bookkeepers.shutdown(wait=False, cancel_futures=True)
            loop.close()

    def _stop_serving(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._serving:  # not during the final run: that one ends by itself
            loop.stop()

    @property
    def started(self) -> bool:
        return self._loop is not None

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.get())

    def take_lag(self) -> float:
        """The worst lateness (seconds) since the last call; 0 when the loop never ran."""
        return self.watch.take_lag()

    def close(self, timeout: float = 5.0) -> None:
        """Cancel what still runs, stop the thread and free the helpers."""
        with self._lock:
            loop, thread, watcher = self._loop, self._thread, self._watcher
            helpers, self._helper_pool = self._helper_pool, None
            self._loop = self._thread = self._watcher = None
            self._closing.set()
        if loop is None or thread is None:
            return
        # The thread may have closed the loop already: back from ``run_forever`` (a job's
        # ``loop.stop()``, a stray task's ``SystemExit``), it saw ``_closing`` and ended.
        with suppress(RuntimeError):
            loop.call_soon_threadsafe(self._stop_serving, loop)
        thread.join(timeout)
        if watcher is not None:
            watcher.join(timeout)  # it wakes at once: ``_closing`` is what it waits on
        if thread.is_alive():
            stuck = abandon_running(helpers) if helpers is not None else 0
            log.warning("the event loop did not stop within %.0f s%s", timeout,
                        f"; abandoning {stuck} helper thread(s) still running (a blocking "
                        "call an async job handed to asyncio.to_thread or run_in_executor)"
                        if stuck else "")


# The bookkeeping threads of each worker loop (``EventLoop.get``), for ``bookkeeping``.
_bookkeepers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop,
                                        concurrent.futures.ThreadPoolExecutor] = \
    weakref.WeakKeyDictionary()


async def bookkeeping(call: Callable[..., T], *args: Any) -> T:
    """``call(*args)``, a short blocking Redis round trip or two (booking a failure, a
    batch count), off the running loop: on the worker loop's few bookkeeping threads, else
    (a loop of the application's) its default executor. The context goes along."""
    loop = asyncio.get_running_loop()
    bound = functools.partial(contextvars.copy_context().run, call, *args)
    return await loop.run_in_executor(_bookkeepers.get(loop), bound)


class Slots:
    """A counting semaphore that wakes its waiters in batches: a finished async job frees
    a slot, and waking a processor thread for each one would hand the GIL over per job. A
    release wakes them once ``batch`` slots are free (a waiter's timeout wakes it anyway)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.free = limit
        self._batch = max(1, min(8, limit // 4))
        self._changed = threading.Condition(threading.Lock())

    def acquire(self, timeout: float) -> bool:
        with self._changed:
            if not self.free and not self._changed.wait_for(lambda: self.free > 0, timeout):
                return False
            self.free -= 1
            return True

    def release(self) -> None:
        with self._changed:
            self.free += 1
            if self.free == self._batch or self.free == self.limit:
                # As many waiters as there are slots: each takes one, and a thread woken to
                # find none taken by others is a wake (and a GIL hand-over) for nothing.
                self._changed.notify(self.free)


class AsyncLane:
    """A capsule's async jobs: slots, the jobs in flight, and their acknowledging thread."""

    def __init__(self, config: Config, capsule: Capsule, loop: EventLoop,
                 pool: RedisPool) -> None:
        self.config = config
        self.name = capsule.name
        self.limit = capsule.async_concurrency
        self.loop = loop
        # Places: a job running, or handed over and waiting for a slot on the loop.
        self._slots = Slots(self.limit + min(BACKLOG, self.limit))
        self._tasks = 0  # jobs running as tasks (at most ``limit``), under ``_lock
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._running: dict[int, tuple[UnitOfWork, asyncio.Task[None] | None]] = {}
        self._starting: list[tuple[UnitOfWork, Callable[[], Awaitable[bool]]]] = []
        self._given_back: set[int] = set()
        self._done: queue.SimpleQueue[UnitOfWork | None] = queue.SimpleQueue()
        self._unacked = 0  # finished, ACK not through yet
        self._lease = Lease(pool)
        self._acker: threading.Thread | None = None
        self._outage = Outage(config, f"async ACKs (capsule {capsule.name})")
        self.pinning: Pinning | None = None  # set by the manager, as its processors'
        self.stopping = threading.Event()  # set at quiet: what interrupted() reads in its jobs


    # -- taking jobs ------------------------------------------------------------------------
    def take_slot(self, stopping: Callable[[], bool]) -> bool:
        """Wait for a free place (a slot, or one of the few waiting for a slot on the
        loop); False when the caller began stopping meanwhile."""
        while not self._slots.acquire(timeout=SLOT_WAIT):
            if stopping():
                return False
        if stopping():  # the place came free as quiet came: the job goes back all the same
            self._slots.release()
            return False
        return True

    def start(self, unit: UnitOfWork, run: Callable[[], Awaitable[bool]]) -> None:
        """Run ``run()`` (True: acknowledge) as a task, in the place the caller took: at
        once when a slot is free, else when a job ends. Starts are gathered: the jobs a
        processor took in one fetch wake the loop once."""
        with self._lock:
            self._start_acker()
            self._running[id(unit)] = (unit, None)
            self._starting.append((unit, run))
            first = len(self._starting) == 1
        if first:
            self.loop.get().call_soon_threadsafe(self._start_gathered)

    def _start_acker(self) -> None:
        """Under ``_lock``: the acknowledging thread, started on first need."""
        if self._acker is None:
            self._acker = threading.Thread(target=self._acknowledging,
                                           name=f"wurk-{self.name}-async-ack", daemon=True)
            self._acker.start()

    def _start_gathered(self) -> None:
        """On the loop: a task for each job handed over, while slots are free; the rest
        start as jobs end (``_task``)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            while self._starting and self._tasks < self.limit:
                self._start_next(loop)

    def _start_next(self, loop: asyncio.AbstractEventLoop) -> None:
        """Under ``_lock``, on the loop: the oldest job waiting becomes a task."""
        unit, run = self._starting.pop(0)
        self._running[id(unit)] = (unit, loop.create_task(self._task(unit, run)))
        self._tasks += 1

    def take_waiting(self) -> list[UnitOfWork]:
        """At quiet: the jobs handed over that wait for a slot, taken back (to requeue), as a
        processor gives back the job it holds when quiet comes while it waits for a place.
        (Those with a slot free for them start: they were handed over before quiet.)"""
        with self._lock:
            starts = max(0, self.limit - self._tasks)  # these have their slots: they run
            waiting, self._starting = self._starting[starts:], self._starting[:starts]
            for unit, _ in waiting:
                self._running.pop(id(unit), None)
            self._changed.notify_all()
        for _ in waiting:
            self._slots.release()
        return [unit for unit, _ in waiting]

    async def _task(self, unit: UnitOfWork, run: Callable[[], Awaitable[bool]]) -> None:
        acknowledge = False
        try:
            acknowledge = await run()
        except asyncio.CancelledError:
            # At the deadline the job was given back first; a job cancelled by its own code
            # (or by code it awaited) is let go of below, as an ended sync job would be.
            if not self._was_given_back(unit):
                log.warning("async job from %s (jid %s) ended cancelled, not by the "
                            "shutdown: not acknowledged", unit.queue, unit.jid)
        except BaseException as exc:
            # The runner books job errors (Exception); what reaches here is SystemExit,
            # KeyboardInterrupt, the job's own Shutdown, or a fault of the runner's.
            if not isinstance(exc, Shutdown):
                report_error(self.config, exc, {"context": "running an async job",
                                                "queue": unit.queue})
        finally:
            with self._lock:
                self._tasks -= 1
                if self._starting:  # its slot goes to the next job waiting, here and now
                    self._start_next(asyncio.get_running_loop())
                self._running.pop(id(unit), None)
                given_back = id(unit) in self._given_back
                self._given_back.discard(id(unit))
                if acknowledge and not given_back:
                    self._unacked += 1
                    self._done.put(unit)
                self._changed.notify_all()
            if not acknowledge and not given_back:
                # Its failure could not be booked, or it ended cancelled or with SystemExit:
                # nobody will settle it, so its entry is let go of and the reaper returns it
                # at its next sweep, rather than when this process ends.
                unit.fetcher.let_go(unit)
            self._slots.release()

    def _was_given_back(self, unit: UnitOfWork) -> bool:
        with self._lock:
            return id(unit) in self._given_back

    # -- the deadline -----------------------------------------------------------------------
    def unfinished(self) -> list[UnitOfWork]:
        with self._lock:
            return [unit for unit, _ in self._running.values()]

    def give_back(self, units: list[UnitOfWork]) -> list[UnitOfWork]:
        """``units`` are to be requeued: they must not be acknowledged when they end. Returns
        those still running, the ones to requeue: one that ended since ``unfinished`` was
        settled by its own end (acknowledged, or let go of)."""
        with self._lock:
            kept = [u for u in units if id(u) in self._running]
            self._given_back.update(id(u) for u in kept)
        return kept

    def cancel_all(self) -> None:
        """Cancel every running task; a job handed over but not started yet is dropped
        (it was given back)."""
        with self._lock:
            tasks = [task for _, task in self._running.values() if task is not None]
            dropped, self._starting = self._starting, []
            for unit, _ in dropped:
                self._running.pop(id(unit), None)
                self._given_back.discard(id(unit))
            self._changed.notify_all()
        for _ in dropped:
            self._slots.release()
        if tasks:
            loop = self.loop.get()
            for task in tasks:
                loop.call_soon_threadsafe(task.cancel)

    def wait_idle(self, deadline: float) -> bool:
        """Until no async job runs and every finished one's ACK went through."""
        with self._lock:
            while self._running or self._unacked:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, SLOT_WAIT))
            return True

    def __len__(self) -> int:
        return len(self._running)

    # -- acknowledging ----------------------------------------------------------------------
    def _acknowledging(self) -> None:
        _placed(self.pinning, self._acknowledge_until_closed)

    def _acknowledge_until_closed(self) -> None:
        backoff = Backoff()
        waiting: list[UnitOfWork] = []
        closing = False
        while True:
            closing = self._collect(waiting, backoff.wait if waiting else ACK_WAIT) or closing
            if waiting:
                waiting = self._acknowledge(waiting)
                if waiting:
                    backoff.next_wait()
                else:
                    backoff.reset()
            if closing:
                break  # one last try was made: what is left, the reaper gives back
        self._lease.release()

    def _collect(self, into: list[UnitOfWork], wait: float) -> bool:
        """Wait up to ``wait`` for a finished job, then take every one waiting; True when
        the lane is closing."""
        try:
            item = self._done.get(timeout=wait)
        except queue.Empty:
            return False
        time.sleep(ACK_GATHER)  # let the jobs ending with this one ride the same round trip
        closing = False
        while True:
            if item is None:
                closing = True
            else:
                into.append(item)
            try:
                item = self._done.get_nowait()
            except queue.Empty:
                return closing

    def _acknowledge(self, units: list[UnitOfWork]) -> list[UnitOfWork]:
        """ACK ``units``, grouped by fetcher; returns those to try again."""
        left: list[UnitOfWork] = []
        groups: dict[int, list[UnitOfWork]] = {}
        for unit in units:
            groups.setdefault(id(unit.fetcher), []).append(unit)
        # Every processor's ACKs in one round trip: the point of gathering them.
        commands: list[tuple[Any, ...]] = []
        spans: list[tuple[list[UnitOfWork], int, int]] = []
        for group in groups.values():
            made = group[0].fetcher.ack_commands(group)
            spans.append((group, len(commands), len(commands) + len(made)))
            commands += made
        try:
            replies = self._lease.pipeline(commands) if commands else []
        except RedisUnavailable as exc:
            self._outage.failed(exc)
            left = list(units)
        except Exception as exc:  # a fault of ours: kept to try again, the thread goes on
            report_error(self.config, exc, {"context": "acknowledging finished jobs",
                                            "jobs": len(units)})
            left = list(units)
        else:
            for group, start, end in spans:
                left += group[0].fetcher.settle_acks(group, replies[start:end])
        if not left:
            self._outage.ended()
        with self._lock:
            self._unacked -= len(units) - len(left)
            self._changed.notify_all()
        return left

    def close(self, timeout: float = 5.0) -> None:
        """Send the ACKs still waiting, then stop the acknowledging thread."""
        with self._lock:
            acker = self._acker
        if acker is None:
            return
        self._done.put(None)
        acker.join(timeout)
        if acker.is_alive():
            log.warning("async ACKs of capsule %s did not go through within %.0f s; "
                        "those jobs go back to their queues", self.name, timeout)


def helper_count(capsules: list[Capsule], held_per_job: int | Sequence[int] = 1) -> int:
    """Helper threads an event loop may need at most: ``held_per_job`` a slot (each sync
    server link around an async job holds one for its run, ``sync_server_links``; one count
    for every capsule, or one a capsule, in order, as each has a chain of its own), and the
    spare ones for what the jobs themselves hand to a thread (``asyncio.to_thread``). With
    one a slot only, two slots' jobs under three sync links held every thread, and their
    ``to_thread`` waited for ever."""
    held = [held_per_job] * len(capsules) if isinstance(held_per_job, int) else held_per_job
    return sum(c.async_concurrency * max(1, links)
               for c, links in zip(capsules, held, strict=True)) + SPARE_HELPERS


def sync_server_links(chain: Iterable[Callable[..., Any]]) -> int:
    """How many links of a server chain run as sync links around an async job (in a helper
    thread each, held while the rest of the chain runs): those with no async form."""
    count = 0
    for factory in chain:
        if inspect.isclass(factory):  # made fresh per job: its class says which form it has
            is_async = any(inspect.iscoroutinefunction(getattr(factory, name, None))
                           for name in ("__call__", "acall"))
        else:
            is_async = async_form(factory) is not None
        count += not is_async
    return count
