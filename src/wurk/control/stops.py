"""Stopping a sync job from outside its thread: the processor's guard.

Python cannot kill a thread; it can raise an exception in one at its next bytecode
(``PyThreadState_SetAsyncExc``). That is safe only where the job's own code runs, so a
processor's ``Guard`` marks two nested windows:

1. The **frame** (``enter``/``leave``): the job's middleware and body. The shutdown deadline
   raises ``Shutdown`` there (``interrupt``); fetch, ACK and ``finally`` code outside never
   see it, and ``leave`` withdraws one sent but not raised yet.
2. The **body** (``open_body``/``close_body``): the job's own code, inside the innermost
   link. A time limit or a cancel raises there (``stop_body``) — never in a middleware's
   bookkeeping, so a batch count or a lock release is never cut in half. ``close_body``
   withdraws one not raised yet; a shutdown interrupt always wins over a stop (one pending
   exception per thread: a stop never replaces it).

Each body opened gets a new **run** number (``run``; 0 while none is open). A stop names
the run it is meant for and is refused for any other: the thread runs job after job, and a
time limit or a cancel that comes due as one job ends must never reach the next.

The exception raised is a class (the C API raises a class, instantiated without
arguments): the link that opened the body turns it into the full error.

A body that catches its stop and runs on (an ``except Exception:`` around its work) is told
again (``force_body``) with a ``BaseException`` of the same reason (``TimeoutForced``,
``CancelForced``), which ``except Exception`` does not catch — as ``Shutdown``. It replaces a
stop still pending (a body in C code never saw the first), never a ``Shutdown``.

Withdrawing is done by the guarded thread itself, and never by handing the C API ``NULL``:
on CPython 3.11 that clears the thread's exception but leaves the interpreter's "an
exception is pending" flag set for good, so every thread of the process then stops at every
bytecode check, and a thread under a profiler or tracer (``profile``, coverage, a debugger)
spins at its next function entry forever. ``_withdraw`` replaces the pending exception
with one of its own and takes it at once, which clears the flag as any raised one does.
"""

from __future__ import annotations

import contextvars
import itertools
import threading
from collections.abc import Callable
from typing import Protocol

from ..errors import JobCancelled, JobTimeout, Shutdown

__all__ = ["BodyTarget", "CancelForced", "CancelRaised", "Guard", "JobGuard", "TimeoutForced",
           "TimeoutRaised", "current_guard", "set_guard"]


# Run numbers of bodies, unique in the process (``next`` on it is atomic).
_RUNS = itertools.count(1)


class TimeoutRaised(JobTimeout):
    """What a time limit raises in a sync job's thread (the link re-raises a JobTimeout that
    says which limit)."""

    def __init__(self) -> None:
        super().__init__("the job ran past its time limit")


class CancelRaised(JobCancelled):
    """What a cancel raises in a sync job's thread."""

    def __init__(self) -> None:
        super().__init__("the job was cancelled")


class TimeoutForced(BaseException):
    """A time limit's stop raised again in a job that caught the first and ran on: a
    ``BaseException``, so its ``except Exception`` lets it through (the link re-raises it as
    the ``JobTimeout``)."""

    def __init__(self) -> None:
        super().__init__("the job ran past its time limit and caught the error")


class CancelForced(BaseException):
    """A cancel raised again in a job that caught the first and ran on."""

    def __init__(self) -> None:
        super().__init__("the job was cancelled and caught the error")


class BodyTarget(Protocol):
    """What the innermost link keeps on a thread's guard for all its jobs (``running.py``'s
    ``SyncTarget``): it opens each job's body, and says how a stopped one ends."""

    @property
    def reason(self) -> str | None: ...

    def begin(self, jid: str, limit: float | None, cooperative: bool) -> int: ...

    def error(self) -> Exception: ...


class JobGuard:
    """Marks where in a job's run an exception may be raised from outside; this base marks
    nothing (a job run where no processor watches: ``perform_inline``-like uses)."""

    # The short id of the thread the guard belongs to (``wurk.log.tid``), kept by the
    # processor so a job does not look it up; None where no processor set it.
    thread_id: str | None = None
    # What the innermost link registers for the thread's jobs (None: nothing can stop them).
    target: BodyTarget | None = None
    run = 0  # the body open now (0: none)
    stopped_with: type[BaseException] | None = None  # what stopped that run

    def enter(self) -> None:
        return None

    def leave(self) -> bool:
        """Out of the job's frame: True when it was interrupted (nothing may then be
        acknowledged: the job is back on its queue)."""
        return False

    def open_body(self) -> int:
        return 0

    def close_body(self) -> None:
        return None

    def stop_body(self, exc: type[BaseException], run: int) -> bool:
        return False

    def force_body(self, exc: type[BaseException], run: int) -> bool:
        return False

    def while_open(self, run: int, action: Callable[[], object]) -> bool:
        return False


class Guard(JobGuard):
    """A processor's guard (see the module's docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_job = False
        self._pending: type[BaseException] | None = None
        self.interrupted = False
        self.ident: int | None = None
        self.run = 0
        self.stopped_with = None

    def enter(self) -> None:
        with self._lock:
            self._in_job = True

    def leave(self) -> bool:
        with self._lock:
            self._in_job = False
            self.run = 0  # a body left by an exception raised before its close
            if self._pending is not None and self.ident is not None:
                _withdraw(self.ident)  # not raised yet (or raised): it never will be again
            self._pending = None
            return self.interrupted

    def interrupt(self) -> bool:
        """Raise ``Shutdown`` in the thread if it is inside a job's frame; True if sent. Sent
        once: a second exception could land in the first one's handling."""
        with self._lock:
            if not self._in_job or self.interrupted or self.ident is None:
                return False
            self.interrupted = True
            self._pending = Shutdown
            _async_exc(self.ident, Shutdown)
            return True

    def open_body(self) -> int:
        """The job's body begins: its run number."""
        with self._lock:
            self.stopped_with = None
            self.run = run = next(_RUNS)
            return run

    def close_body(self) -> None:
        with self._lock:
            self.run = 0
            if self._pending is not None and self._pending is not Shutdown and \
                    self.ident is not None:
                _withdraw(self.ident)
                self._pending = None

    def stop_body(self, exc: type[BaseException], run: int) -> bool:
        """Raise ``exc`` in the thread if the body of run ``run`` is open, nothing is pending
        and no stop was sent to it; True if sent."""
        with self._lock:
            if run == 0 or self.run != run or self.stopped_with is not None or \
                    self._pending is not None or self.ident is None:
                return False
            self._pending = self.stopped_with = exc
            _async_exc(self.ident, exc)
            return True

    def force_body(self, exc: type[BaseException], run: int) -> bool:
        """Raise ``exc`` again in the body of run ``run``, which was told to stop and still
        runs: it caught the stop (or has not seen it yet, inside C code — then ``exc`` takes
        its place). Never over a ``Shutdown``; True if sent."""
        with self._lock:
            if run == 0 or self.run != run or self.stopped_with is None or \
                    self.interrupted or self._pending is Shutdown or self.ident is None:
                return False
            self._pending = exc
            _async_exc(self.ident, exc)
            return True

    def while_open(self, run: int, action: Callable[[], object]) -> bool:
        """Call ``action`` (from another thread) if the body of run ``run`` is still open, the
        body kept from closing until it returns; True if called. What it does to the job's
        entry (a stuck mark) is then done before the job's end clears that entry, never to
        the next job's."""
        with self._lock:
            if run == 0 or self.run != run:
                return False
            action()
            return True


def _async_exc(ident: int, exc: type[BaseException] | None) -> None:
    """Raise ``exc`` in thread ``ident`` at its next bytecode; None withdraws a pending one.

    ctypes is imported here, on the way to a deadline or a stop, rather than with the
    module: a third of a megabyte for a rare call, which a worker embedded in an application
    (``wurk.inprocess``) otherwise never pays."""
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(ident), ctypes.py_object(exc) if exc is not None else None)


class _Withdrawn(BaseException):
    """Takes the place of a pending exception being withdrawn; caught where it is sent."""


# How many backward jumps the thread makes for its own exception to be raised: the first one
# does (a backward jump checks for pending exceptions); the bound only keeps a broken
# interpreter from looping.
_WITHDRAW_SPINS = 10_000


def _withdraw(ident: int) -> None:
    """Withdraw what is pending for thread ``ident`` (see the module's docstring)."""
    if ident != threading.get_ident():
        _async_exc(ident, None)  # not the guarded thread: only the C API's way is left
        return
    try:
        _async_exc(ident, _Withdrawn)
        for _ in range(_WITHDRAW_SPINS):
            pass
    except _Withdrawn:
        return
    _async_exc(ident, None)  # never raised: withdraw it the plain way rather than leave it


_guard: contextvars.ContextVar[JobGuard | None] = contextvars.ContextVar("wurk_guard",
                                                                         default=None)


def set_guard(guard: JobGuard) -> None:
    """Called by a processor thread once: the guard its jobs' innermost link opens."""
    _guard.set(guard)


# The guard of the running thread's job (None off a processor thread): the context
# variable's own method, no Python frame of its own — the innermost link asks it per job.
current_guard: Callable[[], JobGuard | None] = _guard.get
