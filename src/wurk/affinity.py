"""Pinning a worker's processor threads to CPUs (the ``cpu_affinity`` setting).

A CPython process runs Python code on one core at a time (the GIL), and its processor
threads hand the GIL to one another around every socket wait. Spread over several cores,
each hand-off wakes a thread on another core, which then waits for the GIL there: on the
2-core benchmark machine that was 18 context switches and ~220 µs of kernel time per job at
concurrency 10. With the processor threads on one core a hand-off is a plain switch on that
core (1.3 per job), and the other cores are left to Redis and to other processes.

The price would be jobs that release the GIL to compute (numpy, compression, image work):
pinned, they no longer run in parallel on several cores within one process. So ``auto``
(the default) pins only while the processor threads are measured not to run in parallel
anyway: their CPU time, unpinned, stays under ``PARALLEL_CORES`` cores.

1. ``parse`` reads the setting: ``None`` or ``"none"`` (the OS decides), ``"auto"`` (one
   CPU), or a list of CPUs such as ``"1"``, ``"0,2"``, ``"0-3"``. A bad value is a
   ``ConfigError`` naming it.
2. ``choose`` resolves it at boot: ``auto`` takes a swarm child's slot modulo the allowed
   CPUs (children spread over the cores), else the allowed CPU that was least busy over a
   tenth of a second.
3. ``Pinning`` holds the processor threads to the choice. With ``auto`` it does so only
   while the process is busy — on average at least ``PIN_AT`` jobs running over the last
   half second — and lets them run anywhere again once it is quiet (``UNPIN_AT``): one
   pinned thread woken at a light load waits for its one CPU when Redis or another process
   is on it. CPUs given by number are held always. Only processor threads are touched: a
   host process's own threads (the in-process worker's host) keep theirs.
4. The guard (``auto`` only) keeps pinning only where it is measured to pay. Busy and
   unpinned, a ``WINDOW`` measures the jobs done and the processor threads' CPU time: above
   ``PARALLEL_CORES`` cores the jobs compute in parallel (the GIL released), and the
   threads stay free for ``HOLD`` seconds. Otherwise the next window runs pinned, on
   trial: pinning is kept unless it did fewer than ``KEEP`` of the free window's jobs,
   else the threads stay free for ``HOLD``. Kept, it is tried again after ``RETRY`` seconds
   (one free window, one trial). A window counts only if the process was busy throughout;
   a quiet spell starts over unpinned.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Collection

import psutil

from .errors import ConfigError

__all__ = ["Pinning", "allowed", "choose", "parse", "threads_cpu"]

log = logging.getLogger("wurk")

AUTO = "auto"
NONE = "none"  # the same as no setting: lets a flag undo a config file's choice
_SAMPLE_SECONDS = 0.1
# Pinning pays when threads compete for the GIL: two or more jobs running at once.
PIN_AT = 1.5
UNPIN_AT = 0.5  # below PIN_AT, so a load near the line does not flip it on every sample
SAMPLE_INTERVAL = 0.05
SAMPLES = 10  # averaged: half a second of samples
# The guard. GIL-bound threads use about one core (measured 1.0–1.1 with their system
# calls); jobs that release the GIL use more where there are cores for it. On a machine
# loaded by others a process may get less than that either way: then the trial decides.
WINDOW = 0.25
PARALLEL_CORES = 1.3
# A pinned trial keeps pinning unless it did clearly fewer jobs than the free window before
# it: on a busy machine two quarter-seconds differ by more than what pinning moves, so the
# trial only has to catch pinning that hurts (parallel work starved of its second core).
KEEP = 0.85
HOLD = 30.0
RETRY = 20.0


def allowed() -> list[int]:
    """The CPUs this process may run on, lowest first; empty where the OS cannot pin."""
    getter = getattr(os, "sched_getaffinity", None)
    return sorted(getter(0)) if getter is not None else []


def parse(spec: str | None) -> frozenset[int] | str | None:
    """``None``, ``"auto"``, or the CPUs a list names; ``ConfigError`` for anything else."""
    if spec is None or spec == NONE:
        return None
    if spec == AUTO:
        return spec
    if not isinstance(spec, str):
        raise ConfigError(f"cpu_affinity must be 'auto' or a list of CPUs such as '0,2-3', "
                          f"not {spec!r}")
    cpus: set[int] = set()
    for part in spec.split(","):
        low, _, high = part.strip().partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise ConfigError(f"cpu_affinity {spec!r}: {part.strip()!r} is not a CPU number "
                              f"or range (use 'auto', '1', '0,2' or '0-3')") from None
        if first < 0 or last < first:
            raise ConfigError(f"cpu_affinity {spec!r}: {part.strip()!r} is not a valid range")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def choose(spec: str | None, *, slot: int | None = None) -> frozenset[int] | None:
    """The CPUs to pin processor threads to, or None to leave them to the OS."""
    parsed = parse(spec)
    if parsed is None:
        return None
    cpus = allowed()
    if not cpus:
        return None  # no sched_setaffinity here (macOS): nothing to pin
    if parsed == AUTO:
        if len(cpus) == 1:
            return frozenset(cpus)
        index = slot % len(cpus) if slot is not None else _least_busy(cpus)
        return frozenset({cpus[index]})
    assert isinstance(parsed, frozenset)
    outside = sorted(parsed - set(cpus))
    if outside:
        raise ConfigError(f"cpu_affinity {spec!r}: CPU {outside[0]} is not available to this "
                          f"process (available: {', '.join(map(str, cpus))})")
    return parsed


def _least_busy(cpus: list[int]) -> int:
    """Index into ``cpus`` of the one with the least non-idle time over a short sample."""
    before = psutil.cpu_times(percpu=True)
    time.sleep(_SAMPLE_SECONDS)  # a sample, not a poll: once, at boot
    after = psutil.cpu_times(percpu=True)

    def busy(cpu: int) -> float:
        if cpu >= len(before) or cpu >= len(after):
            return 0.0
        spent = sum(after[cpu]) - sum(before[cpu])
        return spent - (after[cpu].idle - before[cpu].idle)

    return min(range(len(cpus)), key=lambda i: busy(cpus[i]))


def threads_cpu(native_ids: Collection[int]) -> float | None:
    """CPU seconds (user + system) the threads ``native_ids`` of this process have used;
    None where the OS does not tell."""
    try:
        threads = psutil.Process().threads()
    except (psutil.Error, OSError, NotImplementedError):
        return None
    return sum(t.user_time + t.system_time for t in threads if t.id in native_ids)


class _Window:
    """Jobs done and CPU used since ``start``; ``spoilt`` once the process went quiet."""

    __slots__ = ("cpu", "done", "spoilt", "start")

    def __init__(self, now: float, done: int, cpu: float | None) -> None:
        self.start, self.done, self.cpu, self.spoilt = now, done, cpu, False


class _Guard:
    """Whether pinning pays, by measurement (``auto`` only): free window, pinned trial,
    keep the better; see the module's point 4."""

    def __init__(self, cpu: Callable[[Collection[int]], float | None],
                 done: Callable[[], int]) -> None:
        self._cpu = cpu
        self._done = done
        self.state = "free"  # free: measuring unpinned; trial: measuring pinned; pinned
        self._window: _Window | None = None
        self._free_rate = 0.0
        self.hold_until = 0.0
        self.pinned_at = 0.0

    def want(self, threads: Collection[int], *, busy: bool, now: float) -> bool:
        """Whether the threads should be pinned now."""
        if not busy:
            self.state, self._window = "free", None
            return False
        if self.state == "pinned":
            if now - self.pinned_at >= RETRY:
                self.state, self._window = "free", None  # measure again
            return self.state == "pinned"
        if now < self.hold_until:
            return False
        window = self._window
        if window is None:
            self._window = _Window(now, self._done(), self._cpu(threads))
            return self.state == "trial"
        if now - window.start < WINDOW:
            return self.state == "trial"
        return self._close(window, threads, now)

    def _close(self, window: _Window, threads: Collection[int], now: float) -> bool:
        elapsed = now - window.start
        done, cpu = self._done(), self._cpu(threads)
        rate = (done - window.done) / elapsed
        self._window = _Window(now, done, cpu)
        if self.state == "free":
            cores = (cpu - window.cpu) / elapsed if cpu is not None and \
                window.cpu is not None else None
            log.debug("affinity: free window %.0f jobs/s on %s cores", rate,
                      "?" if cores is None else f"{cores:.2f}")
            if cores is not None and cores > PARALLEL_CORES:
                self.hold_until = now + HOLD  # computing in parallel: leave them free
                return False
            self.state, self._free_rate = "trial", rate
            return True
        log.debug("affinity: pinned trial %.0f jobs/s against %.0f free", rate, self._free_rate)
        if rate >= self._free_rate * KEEP and rate > 0:
            self.state, self.pinned_at = "pinned", now
            return True
        self.state, self.hold_until = "free", now + HOLD  # pinning did not pay
        return False


class Pinning:
    """Keeps processor threads on ``cpus``: always, or (``adaptive``) while busy and not
    computing in parallel."""

    def __init__(self, cpus: frozenset[int], running: Callable[[], int], *,
                 adaptive: bool, done: Callable[[], int] = lambda: 0,
                 cpu: Callable[[Collection[int]], float | None] = threads_cpu) -> None:
        self.cpus = cpus
        self.adaptive = adaptive
        self._anywhere = frozenset(allowed())
        self._running = running
        self._lock = threading.Lock()
        self._threads: set[int] = set()  # native ids of the processor threads
        self._samples: deque[int] = deque(maxlen=SAMPLES)
        self._guard = _Guard(cpu, done)
        self.pinned = not adaptive

    def enter(self) -> None:
        """Called by a processor thread as it starts: it follows the current choice."""
        with self._lock:
            self._threads.add(threading.get_native_id())
            os.sched_setaffinity(0, self._target())

    def leave(self) -> None:
        with self._lock:
            self._threads.discard(threading.get_native_id())

    def sample(self) -> None:
        """One look at how many jobs run now (and, once a window, at the jobs done and the
        threads' CPU); pins or unpins every thread when the rules say so. Called every
        ``SAMPLE_INTERVAL`` by the launcher's timer."""
        if not self.adaptive:
            return
        now = time.monotonic()
        self._samples.append(self._running())
        average = sum(self._samples) / len(self._samples)
        busy = average >= PIN_AT if not self.pinned else average > UNPIN_AT
        with self._lock:
            threads = set(self._threads)
        want = self._guard.want(threads, busy=busy, now=now)
        if want != self.pinned:
            self._apply(want)

    def _apply(self, pinned: bool) -> None:
        log.debug("processor threads %s", f"pinned to CPU {sorted(self.cpus)}" if pinned
                  else "free to run on any CPU")
        with self._lock:
            self.pinned = pinned
            target = self._target()
            for thread in list(self._threads):
                try:
                    os.sched_setaffinity(thread, target)
                except OSError:  # the thread ended since: nothing to move
                    self._threads.discard(thread)

    def _target(self) -> frozenset[int]:
        return self.cpus if self.pinned else self._anywhere
