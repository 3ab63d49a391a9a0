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
   while the process is busy — on average at least ``PIN_AT`` jobs running over the samples
   of the last half second (the first sample alone decides for a process that starts with a
   backlog) — and lets them run anywhere again once it is quiet (``UNPIN_AT``): one pinned
   thread woken at a light load waits for its one CPU when Redis or another process is on
   it. CPUs given by number are held always. Only processor threads are touched: a host
   process's own threads (the in-process worker's host) keep theirs.
4. The guard (``auto`` only) keeps pinning only where it is measured to pay, pinned first:
   GIL-bound jobs unpinned cost up to twice the CPU per job, so they run pinned from the
   first sample and pay for one free window per measurement. Turning busy with no verdict,
   the threads are pinned at once for a trial ``WINDOW``, then freed for a second one;
   each counts the jobs done, the free one also the threads' CPU time. Above ``PARALLEL_CORES``
   cores free, the jobs compute in parallel (the GIL released) and the threads stay free
   for ``HOLD`` seconds — unless free they did fewer than ``KEEP`` of the pinned window's
   jobs: then the extra core went on threads handing the GIL across cores, not on work, and
   pinning is kept. Under that, the threads stay free if the pinned window did fewer than
   ``KEEP`` of the free window's jobs, or none at all. Else pinning is kept, and measured
   again the same way (pinned, then free: the two windows back to back see the same load)
   after ``RETRY`` seconds. A window counts only if the process was busy throughout.
5. The verdict outlives a quiet spell. Quiet, the threads are free (point 3), but the next
   busy spell starts where the guard left off: pinned at once if pinning was kept, free
   while a ``HOLD`` runs, and on trial only once it has run out (or with no verdict yet). So
   jobs that compute in parallel are pinned for at most one trial window per ``HOLD``.
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
# A pinned trial keeps pinning unless it did clearly fewer jobs than the free window after
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
    """Jobs done and CPU used since ``start``."""

    __slots__ = ("cpu", "done", "start")

    def __init__(self, now: float, done: int, cpu: float | None) -> None:
        self.start, self.done, self.cpu = now, done, cpu


class _Guard:
    """Whether pinning pays, by measurement (``auto`` only): a pinned trial window, a free
    one, keep the better; the verdict held across quiet spells. See the module's points 4
    and 5."""

    def __init__(self, cpu: Callable[[Collection[int]], float | None],
                 done: Callable[[], int]) -> None:
        self._cpu = cpu
        self._done = done
        self.verdict: str | None = None  # None: not measured yet; "pinned"; "free" (held)
        self.phase: str | None = None  # measuring: "trial" (pinned window), "free"
        self._window: _Window | None = None
        self._trial_rate = 0.0
        self.hold_until = 0.0
        self.pinned_at = 0.0

    def want(self, threads: Collection[int], *, busy: bool, now: float) -> bool:
        """Whether the threads should be pinned now."""
        if not busy:
            self.phase = self._window = None  # a spoilt measurement; the verdict stands
            return False
        if self.phase is None:
            if self.verdict == "pinned" and now - self.pinned_at < RETRY:
                return True
            if self.verdict == "free" and now < self.hold_until:
                return False
            self._open("trial", threads, now)  # no verdict, or it is due again
            return True
        window = self._window
        assert window is not None
        if now - window.start < WINDOW - SAMPLE_INTERVAL / 2:  # ends at the nearest sample
            return self.phase == "trial"
        return self._close(window, threads, now)

    def _open(self, phase: str, threads: Collection[int], now: float) -> None:
        self.phase, self._window = phase, _Window(now, self._done(), self._cpu(threads))

    def _close(self, window: _Window, threads: Collection[int], now: float) -> bool:
        elapsed = now - window.start
        done, cpu = self._done(), self._cpu(threads)
        rate = (done - window.done) / elapsed
        if self.phase == "trial":
            log.debug("affinity: pinned trial %.0f jobs/s", rate)
            self._trial_rate = rate
            self.phase, self._window = "free", _Window(now, done, cpu)
            return False
        self.phase = self._window = None
        cores = (cpu - window.cpu) / elapsed if cpu is not None and \
            window.cpu is not None else None
        log.debug("affinity: free window %.0f jobs/s on %s cores, pinned %.0f", rate,
                  "?" if cores is None else f"{cores:.2f}", self._trial_rate)
        if cores is not None and cores > PARALLEL_CORES:
            # More than a core unpinned: the jobs compute in parallel (the GIL released) —
            # unless unpinned they did clearly fewer jobs, and the extra core went on threads
            # handing the GIL to one another across cores (a redis-py call per job does).
            if rate >= self._trial_rate * KEEP:
                return self._hold(now)
            self.verdict, self.pinned_at = "pinned", now
            return True
        if self._trial_rate > 0 and self._trial_rate >= rate * KEEP:
            self.verdict, self.pinned_at = "pinned", now
            return True
        return self._hold(now)  # pinning did not pay, or nothing to tell by

    def _hold(self, now: float) -> bool:
        self.verdict, self.hold_until = "free", now + HOLD
        return False


class Pinning:
    """Keeps processor threads on ``cpus``: always, or (``adaptive``) while busy and not
    computing in parallel."""

    def __init__(self, cpus: frozenset[int], running: Callable[[], int], *,
                 adaptive: bool, done: Callable[[], int] = lambda: 0,
                 cpu: Callable[[Collection[int]], float | None] = threads_cpu,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cpus = cpus
        self.adaptive = adaptive
        self._anywhere = frozenset(allowed())
        self._running = running
        self._lock = threading.Lock()
        self._threads: set[int] = set()  # native ids of the processor threads
        self._samples: deque[int] = deque(maxlen=SAMPLES)
        self._guard = _Guard(cpu, done)
        self._clock = clock
        self.busy = False
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
        now = self._clock()
        self._samples.append(self._running())
        average = sum(self._samples) / len(self._samples)  # of those so far: quick at start
        self.busy = average > UNPIN_AT if self.busy else average >= PIN_AT
        with self._lock:
            threads = set(self._threads)
        want = self._guard.want(threads, busy=self.busy, now=now)
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
