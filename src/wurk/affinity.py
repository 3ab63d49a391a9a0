"""Pinning a worker's processor threads to CPUs (the ``cpu_affinity`` setting).

A CPython process runs Python code on one core at a time (the GIL), and its processor
threads hand the GIL to one another around every socket wait. Spread over several cores,
each hand-off wakes a thread on another core, which then waits for the GIL there: on the
2-core benchmark machine that was 18 context switches and ~220 µs of kernel time per job at
concurrency 10. With the processor threads on one core a hand-off is a plain switch on that
core (1.3 per job), and the other cores are left to Redis and to other processes.

The price: jobs that release the GIL to compute (numpy, compression, image work) no longer
run in parallel on several cores within one process. So it is off by default; run one
process per core (the swarm does) and turn it on.

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
   is on it (p99 push-to-start 3.2 ms pinned against 1.8 ms unpinned at 200 jobs/s). CPUs
   given by number are held always. Only processor threads are touched: a host process's
   own threads (the in-process worker's host) keep theirs.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable

import psutil

from .errors import ConfigError

__all__ = ["Pinning", "allowed", "choose", "parse"]

AUTO = "auto"
NONE = "none"  # the same as no setting: lets a flag undo a config file's choice
_SAMPLE_SECONDS = 0.1
# Pinning pays when threads compete for the GIL: two or more jobs running at once.
PIN_AT = 1.5
UNPIN_AT = 0.5  # below PIN_AT, so a load near the line does not flip it on every sample
SAMPLE_INTERVAL = 0.05
SAMPLES = 10  # averaged: half a second of samples


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


class Pinning:
    """Keeps processor threads on ``cpus``: always, or (``adaptive``) while busy."""

    def __init__(self, cpus: frozenset[int], running: Callable[[], int], *,
                 adaptive: bool) -> None:
        self.cpus = cpus
        self.adaptive = adaptive
        self._anywhere = frozenset(allowed())
        self._running = running
        self._lock = threading.Lock()
        self._threads: set[int] = set()  # native ids of the processor threads
        self._samples: deque[int] = deque(maxlen=SAMPLES)
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
        """One look at how many jobs run now; pins or unpins every thread when the average
        crosses a line. Called every ``SAMPLE_INTERVAL`` by the launcher's timer."""
        if not self.adaptive:
            return
        self._samples.append(self._running())
        average = sum(self._samples) / len(self._samples)
        want = average >= PIN_AT if not self.pinned else average > UNPIN_AT
        if want == self.pinned:
            return
        with self._lock:
            self.pinned = want
            target = self._target()
            for thread in list(self._threads):
                try:
                    os.sched_setaffinity(thread, target)
                except OSError:  # the thread ended since: nothing to move
                    self._threads.discard(thread)

    def _target(self) -> frozenset[int]:
        return self.cpus if self.pinned else self._anywhere
