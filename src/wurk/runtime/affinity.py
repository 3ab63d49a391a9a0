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
   it. CPUs given by number are held always. Held, the threads run under Linux's
   SCHED_BATCH policy, so one woken by its reply waits for the GIL's holder to block
   rather than preempting it (``_schedule``). Only processor threads are touched: a host
   process's own threads (the in-process worker's host) keep theirs.
4. The guard (``auto`` only) keeps pinning only where it is measured to pay, pinned first:
   GIL-bound jobs unpinned cost up to twice the CPU per job, so they run pinned from the
   first sample. Turning busy with no verdict, the threads are pinned at once for a trial
   ``WINDOW``; then one processor thread, the scout, is set free for a second window while
   the others stay pinned. Each window counts the jobs done, the scout's also the threads'
   CPU time. Jobs that compute with the GIL released (numpy, compression, image work) show
   it with one thread: the scout computes on another core beside the pinned ones, and the
   threads use more than ``PARALLEL_CORES`` cores — then every thread is set free for
   ``HOLD`` seconds, unless the scout window did fewer than ``KEEP`` of the pinned
   window's jobs (the extra core went on the scout handing the GIL across cores, not on
   work): then pinning is kept. Under that, the threads are set free if the pinned window
   did fewer than ``KEEP`` of the scout window's jobs, or none where it did some — but only
   once a second pinned window has confirmed it (the better of the two pinned windows
   against the scout's: the first may be spoilt by the worker's start). Else pinning is
   kept, and measured again the same way after ``RETRY`` seconds. A scout window plainly losing
   (one core, under ``LOSING`` of the pinned rate after ``SCOUT_AT_LEAST``) ends early,
   pinning kept. A window counts only if the
   process was busy throughout. Scouting with one thread rather than freeing them all is
   what makes the measurement cheap where pinning pays: freeing every GIL-bound thread
   cost ~70 % of a window's jobs on the 2-core benchmark machine, one scout ~25 %, while
   GIL-releasing jobs show 1.7 cores with one scout against 1.8 with every thread free.
5. Pinned to one CPU, the threads watch their neighbours there: once a ``WINDOW`` the time
   other processes took on that CPU (its busy time less this process's own) is held against
   the other allowed CPUs' busy time, and a CPU crowded by others (``CROWDED``) is left for
   one idler by ``MARGIN`` — at most once per ``MOVE_GAP``. A Redis on the same host, which
   serves every job, is the usual neighbour: the CPU least busy at boot, when Redis idles,
   may be the one it runs on once the jobs flow (measured with Redis held to CPU 0 and the
   worker's choice falling there three times in four: 75 % of a core for the threads).
6. The verdict outlives a quiet spell. Quiet, the threads are free (point 3), but the next
   busy spell starts where the guard left off: pinned at once if pinning was kept, free
   while a ``HOLD`` runs, and on trial only once it has run out (or with no verdict yet). So
   jobs that compute in parallel are pinned for at most one trial window per ``HOLD``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Collection

import psutil

try:
    import resource
except ImportError:  # not Unix
    resource = None  # type: ignore[assignment]

from ..errors import ConfigError

__all__ = ["Pinning", "allowed", "check", "choose", "cpus_busy", "parse", "threads_cpu"]

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
# A scout window is ended early, pinning kept, once it has run this long on one core at
# under LOSING of the pinned window's rate: GIL-bound jobs lose a fifth to a third there
# (the scout hands the GIL across CPUs: 10,000 and more futex calls in a quarter-second).
# The whole window would keep pinning too (on one core it frees the threads only at
# 1 / KEEP of the pinned rate), so ending early changes the cost, not the verdict.
SCOUT_AT_LEAST = 0.05
LOSING = 0.9
HOLD = 30.0
RETRY = 20.0
# Pinned, the threads share their CPU with whatever else runs there — Redis on the same
# host, above all, which serves every job. Once a WINDOW the time others took on that CPU
# (its busy time less this process's own) is held against each other allowed CPU's busy
# time: at CROWDED of a core taken by others, and another CPU idler by MARGIN, the threads
# move there; at most once per MOVE_GAP, so two processes cannot chase each other. (A Redis
# serving a GIL-bound worker on the 2-core benchmark machine took 0.25–0.4 of a core.)
CROWDED = 0.2
MARGIN = 0.15
MOVE_GAP = 2.0


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
    _check_available(spec, parsed, cpus)
    return parsed


def check(spec: str | None) -> None:
    """``ConfigError`` unless ``spec`` parses and every CPU it names may be used by this
    process: what ``choose`` would refuse, told before a worker starts (no sampling)."""
    parsed = parse(spec)
    cpus = allowed()
    if isinstance(parsed, frozenset) and cpus:
        _check_available(spec, parsed, cpus)


def _check_available(spec: str | None, parsed: frozenset[int], cpus: list[int]) -> None:
    outside = sorted(parsed - set(cpus))
    if outside:
        raise ConfigError(f"cpu_affinity {spec!r}: CPU {outside[0]} is not available to this "
                          f"process (available: {', '.join(map(str, cpus))})")


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
    None where the OS does not tell.

    Linux's ``schedstat`` counts in nanoseconds; the per-thread times psutil reads elsewhere
    count in clock ticks (10 ms), too coarse for ten threads over a tenth of a second."""
    total = 0
    try:
        for native in native_ids:
            with open(f"/proc/self/task/{native}/schedstat", "rb") as stats:
                total += int(stats.read().split(maxsplit=1)[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        pass  # no schedstat (not Linux, or a kernel without it), or a thread gone
    try:
        threads = psutil.Process().threads()
    except (psutil.Error, OSError, NotImplementedError):
        return None
    return sum(t.user_time + t.system_time for t in threads if t.id in native_ids)


def process_cpu() -> float | None:
    """CPU seconds (user + system) this process has used, to the microsecond; None where
    the OS does not tell.

    What the neighbours' watch holds against its CPU's busy time, once a window while
    pinned: one system call that keeps the GIL. Reading each processor thread's
    ``schedstat`` there (three calls a thread, each letting go of the GIL, which the pinned
    threads took on the other CPU and handed back) cost ~1,000 futex calls a window."""
    if resource is None:
        return None
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpus_busy() -> list[float] | None:
    """Busy seconds (all but idle and I/O wait) of each CPU so far, by CPU number; None
    where the OS does not tell."""
    try:
        times = psutil.cpu_times(percpu=True)
    except (psutil.Error, OSError, NotImplementedError):
        return None
    return [sum(t) - t.idle - getattr(t, "iowait", 0.0) for t in times]


class _Window:
    """Jobs done and CPU used since ``start``."""

    __slots__ = ("cpu", "done", "start")

    def __init__(self, now: float, done: int, cpu: float | None) -> None:
        self.start, self.done, self.cpu = now, done, cpu


# Where the guard wants the processor threads: all on the chosen CPUs, all but the scout
# there (the scout anywhere), or all anywhere.
PINNED, SCOUT, FREE = "pinned", "scout", "free"


class _Guard:
    """Whether pinning pays, by measurement (``auto`` only): a pinned trial window, a
    scout window (one thread free), keep the better; the verdict held across quiet spells.
    See the module's points 4 and 5."""

    def __init__(self, cpu: Callable[[Collection[int]], float | None],
                 done: Callable[[], int]) -> None:
        self._cpu = cpu
        self._done = done
        self.verdict: str | None = None  # None: not measured yet; "pinned"; "free" (held)
        # measuring: "trial" (pinned window), "scout", "confirm" (a second pinned window)
        self.phase: str | None = None
        self._window: _Window | None = None
        self._trial_rate = 0.0
        self._scout: tuple[float, float | None] = (0.0, None)  # its jobs/s and cores
        self.hold_until = 0.0
        self.pinned_at = 0.0

    def want(self, threads: Collection[int], *, busy: bool, now: float) -> str:
        """Where the threads should be now: ``PINNED``, ``SCOUT`` or ``FREE``."""
        if not busy:
            self.phase = self._window = None  # a spoilt measurement; the verdict stands
            return FREE
        if self.phase is None:
            if self.verdict == "pinned" and now - self.pinned_at < RETRY:
                return PINNED
            if self.verdict == "free" and now < self.hold_until:
                return FREE
            self._open("trial", threads, now)  # no verdict, or it is due again
            return PINNED
        window = self._window
        assert window is not None
        elapsed = now - window.start
        if elapsed < WINDOW - SAMPLE_INTERVAL / 2:  # ends at the nearest sample
            if self.phase == "scout" and elapsed >= SCOUT_AT_LEAST - SAMPLE_INTERVAL / 2:
                return self._cut_short(window, threads, now)
            return SCOUT if self.phase == "scout" else PINNED
        return self._close(window, threads, now)

    def _cut_short(self, window: _Window, threads: Collection[int], now: float) -> str:
        """A scout window that is plainly losing ends early, pinning kept: on one core
        (no parallel work) and clearly under the pinned window's rate. Anything else runs
        the whole window."""
        elapsed = now - window.start
        cpu = self._cpu(threads)
        if cpu is None or window.cpu is None or (cpu - window.cpu) / elapsed > PARALLEL_CORES:
            return SCOUT
        rate = (self._done() - window.done) / elapsed
        if rate >= self._trial_rate * LOSING:
            return SCOUT
        log.debug("affinity: scout window cut short at %.0f jobs/s, pinned %.0f", rate,
                  self._trial_rate)
        self.phase = self._window = None
        return self._keep(now)

    def _open(self, phase: str, threads: Collection[int], now: float) -> None:
        self.phase, self._window = phase, _Window(now, self._done(), self._cpu(threads))

    def _close(self, window: _Window, threads: Collection[int], now: float) -> str:
        elapsed = now - window.start
        done, cpu = self._done(), self._cpu(threads)
        rate = (done - window.done) / elapsed
        if self.phase == "trial":
            log.debug("affinity: pinned trial %.0f jobs/s", rate)
            self._trial_rate = rate
            self.phase, self._window = "scout", _Window(now, done, cpu)
            return SCOUT
        if self.phase == "confirm":
            log.debug("affinity: second pinned trial %.0f jobs/s", rate)
            self.phase = self._window = None
            scout_rate, cores = self._scout
            pinned = max(self._trial_rate, rate)
            if self._frees(pinned, scout_rate, cores):
                # Once a HOLD at most: worth a line, since it changes what a job costs.
                log.info("affinity: processor threads free for %.0f s: with one thread "
                         "free %.0f jobs/s on %s cores, pinned %.0f", HOLD, scout_rate,
                         "?" if cores is None else f"{cores:.2f}", pinned)
                return self._hold(now)
            return self._keep(now)
        cores = (cpu - window.cpu) / elapsed if cpu is not None and \
            window.cpu is not None else None
        log.debug("affinity: scout window %.0f jobs/s on %s cores, pinned %.0f", rate,
                  "?" if cores is None else f"{cores:.2f}", self._trial_rate)
        frees = self._frees(self._trial_rate, rate, cores)
        if not frees or (cores is not None and cores > PARALLEL_CORES):
            self.phase = self._window = None  # parallel work, shown by the cores: at once
            return self._hold(now) if frees else self._keep(now)
        # On one core, freeing every thread (held for HOLD) is confirmed first: a second
        # pinned window, the better of the two against the scout. The first trial opens as
        # the jobs start, and a worker's start can take a share of it — a job module's
        # client connecting from every thread at its first job, say: a pinned trial so
        # spoilt lets a scout window win and holds GIL-bound threads free (half the jobs)
        # for HOLD. Jobs computing in parallel do not wait for it: their cores tell.
        self._scout = (rate, cores)
        self.phase, self._window = "confirm", _Window(now, done, cpu)
        return PINNED

    @staticmethod
    def _frees(trial_rate: float, scout_rate: float, cores: float | None) -> bool:
        """Whether a pinned window at ``trial_rate`` against the scout's sets the threads
        free."""
        if cores is not None and cores > PARALLEL_CORES:
            # More than a core with one thread free: the jobs compute in parallel (the GIL
            # released) — unless the scout window did clearly fewer jobs, and the extra
            # core went on the scout handing the GIL across cores (a redis-py call per job).
            return scout_rate >= trial_rate * KEEP
        if trial_rate <= 0 and scout_rate <= 0:
            # No job ended in any window (a start connecting a thousand async jobs' clients,
            # or jobs longer than a window) on one core: nothing to tell by, so the threads
            # stay as GIL-bound work wants them, and are measured again after RETRY.
            return False
        # Pinning did not pay: the scout window did jobs, the pinned ones clearly fewer.
        return not (trial_rate > 0 and trial_rate >= scout_rate * KEEP)

    def _keep(self, now: float) -> str:
        self.verdict, self.pinned_at = "pinned", now
        return PINNED

    def _hold(self, now: float) -> str:
        self.verdict, self.hold_until = "free", now + HOLD
        return FREE


class Pinning:
    """Keeps processor threads on ``cpus``: always, or (``adaptive``) while busy and not
    computing in parallel."""

    def __init__(self, cpus: frozenset[int], running: Callable[[], int], *,
                 adaptive: bool, done: Callable[[], int] = lambda: 0,
                 cpu: Callable[[Collection[int]], float | None] = threads_cpu,
                 busy: Callable[[], list[float] | None] = cpus_busy,
                 own: Callable[[], float | None] = process_cpu,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cpus = cpus
        self.adaptive = adaptive
        self._anywhere = frozenset(allowed())
        self._running = running
        self._lock = threading.Lock()
        self._threads: set[int] = set()  # native ids of the processor threads
        # The threads that may scout (processor threads, in the order they came): the event
        # loop and ACK threads of async jobs follow the others, since a scout must be
        # running the sync jobs it measures.
        self._scouts: list[int] = []
        self._turn = 0
        self._samples: deque[int] = deque(maxlen=SAMPLES)
        self._guard = _Guard(cpu, done)
        self._cpu = cpu
        self._cpus_busy = busy
        self._own = own
        # The neighbours' watch: (when, each CPU's busy seconds, the process's CPU) at the
        # start of the window being watched; None while not pinned.
        self._mark: tuple[float, list[float], float] | None = None
        self._moved_at = float("-inf")
        self._clock = clock
        self.busy = False
        self.placement = FREE if adaptive else PINNED
        self.scout: int | None = None  # the thread set free while scouting

    @property
    def pinned(self) -> bool:
        """Every thread held to ``cpus`` (not while scouting)."""
        return self.placement == PINNED

    def enter(self, *, scout: bool = False) -> None:
        """Called by a thread as it starts: it follows the current choice. ``scout``: a
        processor thread, which may be the one set free to scout."""
        with self._lock:
            native = threading.get_native_id()
            self._threads.add(native)
            if scout:
                self._scouts.append(native)
            os.sched_setaffinity(0, self._target(native))
            _schedule(native, held=self._held(native))

    def leave(self) -> None:
        with self._lock:
            native = threading.get_native_id()
            self._threads.discard(native)
            if native in self._scouts:
                self._scouts.remove(native)

    def sample(self) -> None:
        """One look at how many jobs run now (and, once a window, at the jobs done and the
        threads' CPU); moves the threads when the rules say so. Called every
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
        if want != self.placement:
            self._apply(want)
        self._watch_neighbours(now)

    def _watch_neighbours(self, now: float) -> None:
        """Pinned to one CPU that others crowd (see ``CROWDED``), move to an idler one."""
        if self.placement != PINNED or len(self.cpus) != 1 or len(self._anywhere) < 2:
            self._mark = None
            return
        mark = self._mark
        if mark is not None and now - mark[0] < WINDOW - SAMPLE_INTERVAL / 2:
            return  # read only at the window's ends: /proc costs the poller, and the GIL
        busy, ours = self._cpus_busy(), self._own()
        if busy is None or ours is None:
            return
        self._mark = (now, busy, ours)
        if mark is None:
            return
        start, before, ours_before = mark
        elapsed = now - start
        (here,) = self.cpus
        others = [cpu for cpu in self._anywhere if cpu != here and cpu < len(busy)]
        if here >= len(busy) or not others or now - self._moved_at < MOVE_GAP:
            return
        crowd = (busy[here] - before[here] - (ours - ours_before)) / elapsed
        idlest = min(others, key=lambda cpu: busy[cpu] - before[cpu])
        load = (busy[idlest] - before[idlest]) / elapsed
        if crowd >= CROWDED and load <= crowd - MARGIN:
            log.debug("affinity: others took %.2f of CPU %d, CPU %d is busy %.2f: moving",
                      crowd, here, idlest, load)
            self.cpus, self._moved_at, self._mark = frozenset({idlest}), now, None
            self._apply(PINNED)

    def _apply(self, placement: str) -> None:
        with self._lock:
            self.placement = placement
            self.scout = None
            if placement == SCOUT and self._scouts:
                self._turn = (self._turn + 1) % len(self._scouts)  # a new one each time
                self.scout = self._scouts[self._turn]
            log.debug("processor threads %s", {
                PINNED: f"pinned to CPU {sorted(self.cpus)}",
                SCOUT: f"pinned to CPU {sorted(self.cpus)} but one, the scout",
                FREE: "free to run on any CPU"}[placement])
            for thread in list(self._threads):
                try:
                    os.sched_setaffinity(thread, self._target(thread))
                    _schedule(thread, held=self._held(thread))
                except OSError:  # the thread ended since: nothing to move
                    self._threads.discard(thread)
                    if thread in self._scouts:
                        self._scouts.remove(thread)

    def _held(self, thread: int) -> bool:
        return self.placement != FREE and thread != self.scout

    def _target(self, thread: int) -> frozenset[int]:
        return self.cpus if self._held(thread) else self._anywhere


# Held to their CPUs, the threads run under Linux's SCHED_BATCH policy; set free, under the
# normal one again. A batch thread woken up does not preempt the thread running on its CPU:
# without that, a processor thread woken by its Redis reply would preempt the one holding
# the GIL, find the GIL taken, and sleep again on it — two context switches and two futex
# calls that do nothing (measured pinned, a redis-py call in every job: 0.29 futex calls a
# job normal, 0.07 batch; 127 against 104 µs of CPU a job). It waits instead until that
# thread blocks on its own round trip, which on one CPU and one GIL comes as soon. A program
# a job starts from a held thread inherits the policy, as it inherits the CPUs (Linux resets
# only real-time policies on fork).
_BATCH: int | None = getattr(os, "SCHED_BATCH", None)
_NORMAL: int = getattr(os, "SCHED_OTHER", 0)


def _schedule(thread: int, *, held: bool) -> None:
    """Thread ``thread`` (a native id) batch while held to its CPUs, normal while free."""
    if _BATCH is None:
        return  # not Linux: placement alone
    # A sandbox that forbids it (or a thread gone since): placement alone still holds.
    with contextlib.suppress(OSError):
        os.sched_setscheduler(thread, _BATCH if held else _NORMAL, os.sched_param(0))
