"""Signals through a self-pipe: handlers only write a byte; the main loop acts.

1. ``SignalPipe.install`` traps TERM, INT, TSTP, TTIN (and INFO where the system has it:
   BSD, macOS), USR1 and USR2; each handler writes the
   signal's number to a pipe and returns — no application code runs in a signal handler.
2. ``wait(timeout)`` returns the names of the signals received, blocking on the pipe.
3. ``push(name)`` queues a signal from elsewhere (the heartbeat's remote signals) on the
   same path, so local and remote signals are handled alike; from any thread, and after
   ``close`` it does nothing. A remote name is checked first (``remote_signal``): only the
   signals of ``HANDLED`` count (with or without Ruby's ``SIG`` prefix); any other entry —
   no signal's name, or a signal a worker does not act on (``KILL``, ``HUP``) — is ignored
   with a warning naming it, cut and escaped.
4. ``serve(launcher, pipe)``: a worker's main loop. The first TERM or INT stops the
   launcher (waiting up to its timeout for running jobs); while it does, a watcher thread
   keeps reading the pipe, and a second TERM or INT (Ctrl-C again, a second or more after
   the first) hurries the stop: the unfinished jobs go back to their queues now and the
   process exits. ``stop_watched`` is that stop alone, for a loop of its own (a swarm child).
   With ``drain`` (``wurk worker --drain``, a single process's rolling restart) the stop
   first drains (``drain_watched``): quiet, then wait with no deadline until no job runs;
   a second TERM or INT, ``HURRY_AFTER`` or more after the first, ends the drain, and the
   bounded stop runs as after a first one (a third hurries it).
5. ``act_on``: what a worker does with each; USR1, a swarm's rolling restart, is ignored
   with a warning (a swarm child names its parent instead).
6. ``dump_threads`` writes every thread's stack to the log (TTIN, INFO), then every task on the
   worker's event loops with its await chain (``loopwatch.dump_tasks``, waiting a second at
   most for a loop to answer); ``reopen_logs`` reopens
   the log files (USR2), reporting a file it cannot reopen rather than raising.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType
from typing import Protocol

from .. import log as wurk_log
from ..log import VERBATIM
from .loopwatch import dump_tasks

__all__ = ["DUMP_SIGNALS", "HANDLED", "HURRY_AFTER", "HURRY_HINT", "STOP_SIGNALS", "SignalPipe",
           "act_on", "drain_watched", "dump_threads", "remote_signal", "reopen_logs", "serve",
           "stop_watched"]

log = logging.getLogger("wurk")

# DUMP_SIGNALS log every thread's backtrace: TTIN, and INFO (Ctrl-T) where the system has it
# (BSD, macOS; Linux has none).
DUMP_SIGNALS = ("TTIN", *(("INFO",) if hasattr(signal, "SIGINFO") else ()))
HANDLED = ("TERM", "INT", "TSTP", *DUMP_SIGNALS, "USR2", "USR1")
STOP_SIGNALS = ("TERM", "INT")
# How often the watcher of a stop in progress looks whether the stop is over; a signal
# itself wakes it at once, so this only bounds how long the exit waits for the watcher.
WATCH_TICK = 0.1
# A second stop signal this soon after the first is the same request sent twice — a process
# manager (honcho, foreman) passing on the terminal's Ctrl-C that reached the worker too —
# not a person pressing Ctrl-C again after reading the line below.
HURRY_AFTER = 1.0
# Of a remote signal's name that is no signal, this many characters are logged.
REMOTE_NAME_SHOWN = 100
HURRY_HINT = ("a second Ctrl-C (INT or TERM) stops now, pushing unfinished jobs back to their "
              "queues first")
AGAIN_HINT = ("another TERM or INT stops now, pushing unfinished jobs back to their queues "
              "first")


class SignalPipe:
    """A pipe the signal handlers write into and the main thread reads from."""

    def __init__(self, names: tuple[str, ...] = HANDLED) -> None:
        self.names = names
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._previous: dict[int, object] = {}
        # ``push`` (any thread) against ``close``: once closed, the descriptors' numbers
        # may be another file's. The handlers take no lock (they run on the main thread,
        # which may hold it); ``close`` restores them first.
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._closed = False

    def install(self) -> None:
        for name in self.names:
            number = getattr(signal, f"SIG{name}")
            self._previous[number] = signal.signal(number, self._handle)

    def restore(self) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def _handle(self, number: int, frame: FrameType | None) -> None:
        # A full pipe means unread signals are waiting; one more changes nothing.
        with contextlib.suppress(BlockingIOError):
            os.write(self._write, bytes([number]))

    def push(self, name: str) -> None:
        checked = remote_signal(name)  # the signals a worker acts on, trapped here or not
        if checked is None:
            return
        number = signal.Signals[f"SIG{checked}"]
        with self._guard():
            if not self._closed:  # closed: nobody reads it any more
                self._handle(int(number), None)

    def _guard(self) -> threading.Lock:
        if os.getpid() != self._pid:  # a forked child (a swarm's) closing its parent's pipe:
            self._pid = os.getpid()  # a thread of the parent's may have held the lock
            self._lock = threading.Lock()
        return self._lock

    def wait(self, timeout: float) -> list[str]:
        ready, _, _ = select.select([self._read], [], [], timeout)
        if not ready:
            return []
        try:
            data = os.read(self._read, 64)
        except BlockingIOError:
            return []
        return [signal.Signals(number).name.removeprefix("SIG") for number in data]

    def close(self) -> None:
        self.restore()
        with self._guard():
            if self._closed:
                return
            self._closed = True
            os.close(self._read)
            os.close(self._write)


def remote_signal(name: str, handled: tuple[str, ...] = HANDLED) -> str | None:
    """A remote signal's name, as read from Redis (anyone may write it), checked: one of
    ``handled``, written as Sidekiq's API writes it (``TSTP``) or as Ruby's ``Process.kill``
    also takes it (``SIGTSTP``); else None, after a warning naming the entry (its first
    ``REMOTE_NAME_SHOWN`` characters, escaped). Only a signal's own name counts, not the
    signal module's other SIG names (SIG_DFL, SIG_SETMASK: 0 and 2 as numbers); a real
    signal this process does not trap (KILL, HUP) was written to the pipe and dropped there
    without a word."""
    bare = name.removeprefix("SIG")
    known = f"SIG{bare}" in signal.Signals.__members__
    if known and bare in handled:
        return bare
    shown = name[:REMOTE_NAME_SHOWN]
    if known:
        log.warning("ignoring remote signal %r: a worker obeys only %s", shown,
                    ", ".join(handled))
    else:
        log.warning("ignoring unknown remote signal %r", shown)
    return None


class _Quietable(Protocol):
    def quiet(self) -> None: ...


class _Stoppable(_Quietable, Protocol):
    def stop(self, timeout: float | None = None, *, hint: str = "") -> None: ...

    def hurry(self) -> None: ...


class _Drainable(_Stoppable, Protocol):
    @property
    def working(self) -> bool: ...


def act_on(launcher: _Quietable, name: str) -> bool:
    """What a worker process does with a signal; True when it asks the process to stop."""
    if name in STOP_SIGNALS:
        return True
    if name == "TSTP":
        launcher.quiet()
    elif name in ("TTIN", "INFO"):  # INFO arrives only where the system has it
        dump_threads()
    elif name == "USR2":
        reopen_logs()
    elif name == "USR1":  # trapped for a swarm (its rolling restart); a worker has none
        log.warning("ignoring USR1: it restarts a swarm's children (wurk swarm); a worker "
                    "alone has nothing to restart (TERM stops it)")
    return False


def reopen_logs() -> None:
    """USR2: reopen the log files. One that cannot be reopened (its directory gone, left
    unwritable by a rotation) is reported, never raised: the loop reading signals goes on."""
    try:
        wurk_log.reopen()
    except OSError as exc:
        log.error("USR2: could not reopen the log file: %s", exc)


def serve(launcher: _Drainable, pipe: SignalPipe, *, tick: float, drain: bool = False,
          on_stop: Callable[[], None] | None = None) -> None:
    """Obey signals until one asks to stop, then stop ``launcher``; returns once stopped.

    The stop runs on this (the main) thread, where lifecycle hooks expect to run; a watcher
    thread reads the pipe meanwhile, so that a second stop signal can hurry it. ``drain``:
    the stop waits for every running job first, with no deadline (``drain_watched``).
    ``on_stop`` is called once the stop is decided, before it (or its drain) begins: the
    worker tells systemd ``STOPPING=1`` there."""
    while True:
        stop = False
        for name in pipe.wait(tick):  # stop signals read together are one request
            stop = act_on(launcher, name) or stop
        if stop:
            if on_stop is not None:
                on_stop()
            if drain and not drain_watched(launcher, pipe):
                stop_watched(launcher, pipe, hint=AGAIN_HINT)
            else:
                stop_watched(launcher, pipe)
            return


def drain_watched(launcher: _Drainable, pipe: SignalPipe) -> bool:
    """Quiet ``launcher`` and wait, with no deadline, until none of its jobs runs; True once
    they all finished, False when a second stop signal (``HURRY_AFTER`` or more after this
    call) ended the wait first. Other signals act as ever meanwhile. The stop that follows
    either way is the caller's."""
    first = time.monotonic()
    launcher.quiet()
    log.info("draining: waiting for the running jobs to finish, with no time limit; a second "
             "TERM or INT stops within the timeout instead, pushing the jobs still running "
             "then back to their queues")
    while launcher.working:
        for name in pipe.wait(WATCH_TICK):
            if not act_on(launcher, name):
                continue
            if time.monotonic() - first >= HURRY_AFTER:
                log.info("%s: ending the drain; stopping within the timeout", name)
                return False
            log.debug("%s right after the first stop signal: taken as the same one", name)
    return True


def stop_watched(launcher: _Stoppable, pipe: SignalPipe, *, hint: str = HURRY_HINT) -> None:
    """Stop ``launcher`` on this thread while a watcher reads ``pipe``: a second stop signal,
    ``HURRY_AFTER`` or more after this call, hurries the stop. ``hint`` ends the stop's log
    line (empty where another process has told the person already)."""
    done = threading.Event()
    watcher = threading.Thread(target=_watch_stop,
                               args=(launcher, pipe, done, time.monotonic()),
                               name="wurk-signal-watch", daemon=True)
    watcher.start()
    try:
        launcher.stop(hint=hint)
    finally:
        done.set()
        watcher.join(timeout=WATCH_TICK * 10)


def _watch_stop(launcher: _Stoppable, pipe: SignalPipe, done: threading.Event,
                first: float) -> None:
    """While the stop runs: a second TERM or INT hurries it (unless it came with the first,
    see ``HURRY_AFTER``); other signals act as ever."""
    while not done.is_set():
        for name in pipe.wait(WATCH_TICK):
            if not act_on(launcher, name):
                continue
            if time.monotonic() - first >= HURRY_AFTER:
                launcher.hurry()
            else:
                log.debug("%s right after the first stop signal: taken as the same one", name)


def dump_threads() -> None:
    """TTIN: every thread's stack, then every async job's (a task on the worker's event
    loop, suspended at an ``await``, is on no thread's stack)."""
    frames = sys._current_frames()
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or -1)
        stack = "".join(traceback.format_stack(frame)) if frame else "  (no frame)\n"
        log.warning("thread %s (%s):\n%s", thread.name, thread.ident, stack.rstrip(),
                    extra={VERBATIM: True})
    dump_tasks()
