"""Signals through a self-pipe: handlers only write a byte; the main loop acts.

1. ``SignalPipe.install`` traps TERM, INT, TSTP, TTIN and USR2; each handler writes the
   signal's number to a pipe and returns — no application code runs in a signal handler.
2. ``wait(timeout)`` returns the names of the signals received, blocking on the pipe.
3. ``push(name)`` queues a signal from elsewhere (the heartbeat's remote signals) on the
   same path, so local and remote signals are handled alike.
4. ``dump_threads`` writes every thread's stack to the log (TTIN).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import sys
import threading
import traceback
from types import FrameType
from typing import Protocol

from .log import VERBATIM

__all__ = ["HANDLED", "SignalPipe", "act_on", "dump_threads"]

log = logging.getLogger("wurk")

HANDLED = ("TERM", "INT", "TSTP", "TTIN", "USR2", "USR1")


class SignalPipe:
    """A pipe the signal handlers write into and the main thread reads from."""

    def __init__(self, names: tuple[str, ...] = HANDLED) -> None:
        self.names = names
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._previous: dict[int, object] = {}
        self._lock = threading.Lock()

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
        number = getattr(signal, f"SIG{name}", None)
        if number is None:
            log.warning("ignoring unknown remote signal %r", name)
            return
        self._handle(int(number), None)

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
        os.close(self._read)
        os.close(self._write)


class _Quietable(Protocol):
    def quiet(self) -> None: ...


def act_on(launcher: _Quietable, name: str) -> bool:
    """What a worker process does with a signal; True when it asks the process to stop."""
    if name in ("TERM", "INT"):
        return True
    if name == "TSTP":
        launcher.quiet()
    elif name == "TTIN":
        dump_threads()
    elif name == "USR2":
        from . import log as wurk_log

        wurk_log.reopen()
    return False


def dump_threads() -> None:
    frames = sys._current_frames()
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or -1)
        stack = "".join(traceback.format_stack(frame)) if frame else "  (no frame)\n"
        log.warning("thread %s (%s):\n%s", thread.name, thread.ident, stack.rstrip(),
                    extra={VERBATIM: True})
