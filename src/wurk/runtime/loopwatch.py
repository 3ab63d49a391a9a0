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

A look that fails (a bug, a task it cannot describe) is a warning and the watch goes on;
the same failure again is logged at most once a ``REPEAT_FAILURE`` seconds, with how many
times it came meanwhile, so a lasting fault cannot fill the log twenty lines a second.

The decisions take the time as an argument (``tick(now)``, ``look(now, …)``,
``failed(now, …)``): the tests drive them with a clock of their own.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
import sysconfig
import threading
import time
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["TICK", "LoopWatch"]

log = logging.getLogger("wurk")

# How often the tick runs on the loop.
TICK = 0.05
# The watch's thread looks at least this often, however small the limit.
SHORTEST_LOOK = 0.01
# The same failure to look is logged at most once in this many seconds.
REPEAT_FAILURE = 60.0
# At most this much of a failure's text goes into its warning.
FAILURE_SHOWN = 300


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

    # -- on the loop ------------------------------------------------------------------------
    def tick(self, now: float) -> float:
        """A turn of the loop reached the tick: its lateness; when the next one is due."""
        if self._due is not None and now - self._due > self._worst_lag:
            self._worst_lag = now - self._due
        self._due = now + TICK
        return self._due

    def start_ticking(self, loop: asyncio.AbstractEventLoop) -> None:
        """Schedule the tick on ``loop`` (called on it), every ``TICK`` from now on."""
        def ticked() -> None:
            loop.call_at(self.tick(loop.time()), ticked)
        ticked()

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

