"""The event loop's watch: how late it runs, and which async job holds it, while it does.

An ``async def`` job that makes a blocking call (``time.sleep``, a sync HTTP client, a long
computation) holds the worker's one event loop, and every other async job waits. The watch
finds it at no cost to the jobs (no wrapper around their steps):

1. On the loop, a timer ticks every ``TICK`` seconds (``tick``). How late it runs is the
   loop's lag; the worst since the last heartbeat goes into the process record
   (``loop_lag_us``).
2. A thread of its own (``LoopWatch.run``) looks every half ``limit`` seconds (``look``).
   While the tick is overdue, the loop has not begun a new turn since the tick was due, and
   a task runs once a turn: the same task running at two looks ``limit`` apart, with no
   tick between, has held the loop all that while. It is named once — the job (``describe``)
   and the line the loop's thread is on — while it still holds the loop.

3. TTIN (``dump_tasks``) logs every task on each worker loop with its await chain, the
   frames from the task's coroutine down to what it waits on, each async job's named by its
   class and jid (a thread dump shows only the loop thread's own frames). It asks the loop,
   between two steps of its tasks, where every task is suspended, and waits ``DUMP_WAIT``
   at most: a loop that does not answer is held by a task, which is named instead.

A look that fails (a bug, a task it cannot describe) is a warning and the watch goes on;
the same failure again is logged at most once a ``REPEAT_FAILURE`` seconds, with how many
times it came meanwhile, so a lasting fault cannot fill the log twenty lines a second.

The decisions take the time as an argument (``tick(now)``, ``look(now, …)``,
``failed(now, …)``): the tests drive them with a clock of their own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import os
import sys
import sysconfig
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any

from ..log import VERBATIM

__all__ = ["DUMP_WAIT", "TICK", "LoopWatch", "dump_tasks"]

log = logging.getLogger("wurk")

# How often the tick runs on the loop.
TICK = 0.05
# The watch's thread looks at least this often, however small the limit.
SHORTEST_LOOK = 0.01
# The same failure to look is logged at most once in this many seconds.
REPEAT_FAILURE = 60.0
# At most this much of a failure's text goes into its warning.
FAILURE_SHOWN = 300
# TTIN waits at most this long (seconds) for the worker's event loops to list their tasks.
DUMP_WAIT = 1.0
# At most this many frames of a task's await chain are logged.
DUMP_FRAMES = 100

# A task's stack as the loop hands it to ``dump_tasks``: its heading, its await chain's
# frames (outermost first, lines not read yet), and what the innermost one waits on.
TaskStack = tuple[str, traceback.StackSummary, str | None]


@functools.cache
def _library_dirs() -> tuple[str, ...]:
    """The interpreter's and the libraries' trees: the line named is the innermost one
    outside them (the job's own), when there is one. Found at the first warning."""
    return tuple(dict.fromkeys(
        os.path.realpath(path) + os.sep
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
        if (path := sysconfig.get_paths().get(key))))


def _nobody(task: asyncio.Task[Any]) -> str | None:
    return None


class LoopWatch:
    """The tick's record and the watch's memory for one event loop.

    ``limit`` (seconds, ``loop_lag_warning``): how long one task may hold the loop before it
    is named; None or 0 keeps the lag only. ``describe(task)``: the job a task runs, as the
    warning names it, or None for a task that runs none (one a job started)."""

    def __init__(self, limit: float | None,
                 describe: Callable[[asyncio.Task[Any]], str | None] = _nobody) -> None:
        self.limit = limit or None
        self.describe = describe
        self._due: float | None = None  # when the next tick is due, on the loop's clock
        self._worst_lag = 0.0
        # The task running at the last look: itself, when first seen, the tick due then.
        self._seen: tuple[weakref.ref[asyncio.Task[Any]], float, float] | None = None
        self._named: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
        # The last failure logged: its text, when, and how often it came since.
        self._failure: tuple[str, float, int] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # once it ticks: for TTIN

    # -- on the loop ------------------------------------------------------------------------
    def tick(self, now: float) -> float:
        """A turn of the loop reached the tick: its lateness; when the next one is due."""
        if self._due is not None and now - self._due > self._worst_lag:
            self._worst_lag = now - self._due
        self._due = now + TICK
        return self._due

    def start_ticking(self, loop: asyncio.AbstractEventLoop) -> None:
        """Schedule the tick on ``loop`` (called on it), every ``TICK`` from now on; from now
        on TTIN lists the loop's tasks too (``dump_tasks``)."""
        def ticked() -> None:
            loop.call_at(self.tick(loop.time()), ticked)
        ticked()
        self._loop = loop
        _watched.add(self)

    def take_lag(self) -> float:
        """The worst lateness (seconds) since the last call; 0 when the loop never ran."""
        worst, self._worst_lag = self._worst_lag, 0.0
        return max(worst, 0.0)

    # -- from the watch's thread ------------------------------------------------------------
    def look(self, now: float, current: asyncio.Task[Any] | None,
             where: Callable[[], str | None]) -> str | None:
        """One look at the loop, running ``current`` at ``now`` (the loop's clock): the
        warning to log when ``current`` has held it ``limit`` or longer, else None.
        ``where()``: the line the loop's thread is on, asked only for a warning."""
        due = self._due
        if self.limit is None or due is None or now <= due or current is None:
            self._seen = None  # the loop turned, or runs no task: nothing holds it
            return None
        seen = self._seen
        if seen is None or seen[0]() is not current or seen[2] != due:
            self._seen = (weakref.ref(current), now, due)
            return None
        held = now - seen[1]
        if held < self.limit or current in self._named:
            return None
        self._named.add(current)  # once a job: a loop inside it would flood the log
        job = self.describe(current)
        what = f"async job {job}" if job is not None else \
            f"a task on the event loop ({_task_name(current)}, not a job's own)"
        line = where()
        at = f" at {line}" if line else ""
        return (f"{what} has held the event loop for {held * 1e3:.0f} ms{at}; every other "
                "async job waits. Move blocking calls off the loop (await "
                "asyncio.to_thread(...)) or make the job a plain def")

    def failed(self, now: float, exc: Exception) -> str | None:
        """A look that raised ``exc`` at ``now``: the warning to log, or None for the same
        failure within ``REPEAT_FAILURE`` seconds of its last warning."""
        text = f"{type(exc).__name__}: {exc}"[:FAILURE_SHOWN]
        last = self._failure
        if last is not None and last[0] == text:
            if now - last[1] < REPEAT_FAILURE:
                self._failure = (text, last[1], last[2] + 1)
                return None
            since = f" (and {last[2]} more time(s) in the last {now - last[1]:.0f} s)" \
                if last[2] else ""
        else:
            since = ""
        self._failure = (text, now, 0)
        return f"the event loop's watch could not look: {text}{since}"

    def run(self, loop: asyncio.AbstractEventLoop, thread: threading.Thread,
            closing: threading.Event) -> None:
        """The watch's thread: looks until ``closing`` is set. Started by the owner of the
        loop when ``limit`` is set, joined when the loop stops."""
        assert self.limit is not None
        interval = max(self.limit / 2, SHORTEST_LOOK)
        while not closing.wait(interval):
            if not thread.is_alive():
                return
            try:
                warning = self.look(loop.time(), asyncio.current_task(loop),
                                    lambda: where_thread_is(thread.ident))
            except Exception as exc:  # naming a job must never end the watch
                failure = self.failed(time.monotonic(), exc)
                if failure is not None:
                    log.warning("%s", failure)
                continue
            if warning is not None:
                log.warning("%s", warning)


    # -- TTIN -------------------------------------------------------------------------------
    def ask_stacks(self) -> concurrent.futures.Future[list[TaskStack]] | None:
        """From any thread: ask the loop for its tasks' stacks (``_stacks``, run there at
        its next turn); None when it no longer runs. Cancel the answer to withdraw it."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return None
        answer: concurrent.futures.Future[list[TaskStack]] = concurrent.futures.Future()

        def on_loop() -> None:
            if not answer.set_running_or_notify_cancel():
                return  # given up on: the loop answered too late
            try:
                answer.set_result(self._stacks(loop))
            except BaseException as exc:  # handed to the asking thread, never the loop's
                answer.set_exception(exc)

        try:
            loop.call_soon_threadsafe(on_loop)
        except RuntimeError:  # closed meanwhile
            return None
        return answer

    def _stacks(self, loop: asyncio.AbstractEventLoop) -> list[TaskStack]:
        """On the loop, between two task steps (every task suspended): each task's await
        chain. Source lines are read by the asking thread, not here."""
        stacks: list[TaskStack] = []
        for task in asyncio.all_tasks(loop):
            frames, waits_on = _await_chain(task.get_coro())
            summary = traceback.StackSummary.extract(
                ((frame, frame.f_lineno) for frame in frames), lookup_lines=False)
            stacks.append((self._heading(task), summary, waits_on))
        return stacks

    def _heading(self, task: asyncio.Task[Any]) -> str:
        try:
            job = self.describe(task)
        except Exception as exc:  # naming a job must never spoil the dump
            job = f"(not named: {type(exc).__name__}: {exc})"[:FAILURE_SHOWN]
        if job is None:
            return f"task {_task_name(task)} (not a job's own)"
        return f"async job {job}, task {task.get_name()}"

    def holder(self) -> str:
        """From any thread: what runs on the loop now (it did not answer)."""
        loop = self._loop
        current = asyncio.current_task(loop) if loop is not None else None
        if current is None:
            return "a callback, not a task"
        try:
            job = self.describe(current)
        except Exception:
            job = None
        return f"async job {job}" if job is not None else f"task {_task_name(current)}"


# The watches of the loops that run (``start_ticking``), for TTIN; a loop closed is passed over.
_watched: weakref.WeakSet[LoopWatch] = weakref.WeakSet()


def dump_tasks(wait: float | None = None) -> None:
    """TTIN: log every task on each worker event loop with its await chain (outermost frame
    first), an async job's named by its class and jid. Every loop is asked at once and the
    answers waited for ``wait`` seconds (``DUMP_WAIT``) in all: a loop held by a blocking
    call cannot answer, and what holds it is named instead (the thread dump shows where)."""
    asked = [(watch, watch.ask_stacks()) for watch in list(_watched)]
    deadline = time.monotonic() + (DUMP_WAIT if wait is None else wait)
    for watch, answer in asked:
        if answer is None:
            continue
        try:
            stacks = answer.result(max(0.0, deadline - time.monotonic()))
        except concurrent.futures.TimeoutError:
            answer.cancel()
            log.warning("the event loop did not list its tasks within %.1f s: %s holds it "
                        "(the stack of its thread, wurk-asyncio, is above)",
                        DUMP_WAIT if wait is None else wait, watch.holder())
            continue
        except Exception as exc:
            log.warning("could not list the event loop's tasks: %s",
                        f"{type(exc).__name__}: {exc}"[:FAILURE_SHOWN])
            continue
        for heading, summary, waits_on in stacks:
            text = "".join(summary.format()).rstrip() or "  (not started)"
            if waits_on is not None:
                text += f"\n  awaiting {waits_on}"
            log.warning("%s:\n%s", heading, text, extra={VERBATIM: True})


def _await_chain(awaitable: Any) -> tuple[list[FrameType], str | None]:
    """The frames of a suspended coroutine and of those it awaits, down to the innermost;
    and the type of what that one waits on when it is no coroutine (a future, a lock's)."""
    frames: list[FrameType] = []
    while awaitable is not None and len(frames) < DUMP_FRAMES:
        frame = getattr(awaitable, "cr_frame", None) or getattr(awaitable, "gi_frame", None)
        if frame is None:  # a future's iterator, a C awaitable, or a finished coroutine
            return frames, type(awaitable).__qualname__
        frames.append(frame)
        awaitable = getattr(awaitable, "cr_await", None) if hasattr(awaitable, "cr_await") \
            else getattr(awaitable, "gi_yieldfrom", None)
    return frames, None


def where_thread_is(ident: int | None) -> str | None:
    """``path:line in function`` of the innermost frame of thread ``ident`` outside the
    interpreter's and the libraries' trees (else its innermost), or None."""
    frame: FrameType | None = sys._current_frames().get(ident) if ident is not None else None
    innermost, libraries = frame, _library_dirs()
    while frame is not None:
        path = os.path.realpath(frame.f_code.co_filename)
        if not path.startswith(libraries) and not frame.f_code.co_filename.startswith("<"):
            break
        frame = frame.f_back
    chosen = frame or innermost
    if chosen is None:
        return None
    return f"{_short(chosen.f_code.co_filename)}:{chosen.f_lineno} in {chosen.f_code.co_name}"


def _short(path: str) -> str:
    """``path`` relative to the working directory when it is under it."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive
        return path
    return path if relative.startswith("..") else relative


def _task_name(task: asyncio.Task[Any]) -> str:
    coro = task.get_coro()
    name = getattr(coro, "__qualname__", None) or type(coro).__name__
    return f"{task.get_name()} running {name}"

