"""``cpu_affinity``: reading the setting, choosing CPUs, pinning a thread."""

from __future__ import annotations

import os
import threading
import time

import pytest

import wurk
from wurk import affinity


def test_parse_reads_auto_lists_and_ranges() -> None:
    assert affinity.parse(None) is None
    assert affinity.parse("none") is None
    assert affinity.parse("auto") == "auto"
    assert affinity.parse("1") == frozenset({1})
    assert affinity.parse("0, 2-4") == frozenset({0, 2, 3, 4})


@pytest.mark.parametrize("spec, message", [
    ("", "'' is not a CPU number"),
    ("one", "'one' is not a CPU number"),
    ("3-1", "'3-1' is not a valid range"),
    ("-1", "is not a CPU number"),
])
def test_bad_values_are_named(spec: str, message: str) -> None:
    with pytest.raises(wurk.ConfigError, match=message):
        affinity.parse(spec)
    with pytest.raises(wurk.ConfigError, match="cpu_affinity"):
        wurk.Config(cpu_affinity=spec)


def test_a_value_that_is_not_text_is_refused() -> None:
    with pytest.raises(wurk.ConfigError, match="cpu_affinity must be text"):
        wurk.Config(cpu_affinity=1)  # type: ignore[arg-type]


def test_choose_spreads_swarm_children_and_picks_one_cpu_alone() -> None:
    cpus = affinity.allowed()
    assert affinity.choose(None) is None
    chosen = affinity.choose("auto")
    assert chosen is not None and len(chosen) == 1 and chosen <= set(cpus)
    by_slot = [affinity.choose("auto", slot=slot) for slot in range(len(cpus))]
    assert [next(iter(c)) for c in by_slot if c] == cpus  # one child per CPU, in order
    assert affinity.choose(",".join(map(str, cpus))) == frozenset(cpus)


def test_a_cpu_outside_the_allowed_set_is_refused() -> None:
    outside = max(affinity.allowed()) + 1
    with pytest.raises(wurk.ConfigError, match=f"CPU {outside} is not available"):
        affinity.choose(str(outside))


def _in_thread(pinning: affinity.Pinning, started: threading.Event,
               done: threading.Event, seen: list[set[int]]) -> threading.Thread:
    def run() -> None:
        pinning.enter()
        seen.append(os.sched_getaffinity(0))
        started.set()
        done.wait(10)
        seen.append(os.sched_getaffinity(0))
        pinning.leave()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_fixed_pinning_holds_the_entering_thread_only() -> None:
    cpus = affinity.allowed()
    pinning = affinity.Pinning(frozenset({cpus[-1]}), lambda: 0, adaptive=False)
    started, done, seen = threading.Event(), threading.Event(), []
    thread = _in_thread(pinning, started, done, seen)
    started.wait(10)
    pinning.sample()  # a fixed choice ignores the load
    done.set()
    thread.join()
    assert seen == [{cpus[-1]}, {cpus[-1]}]
    assert sorted(os.sched_getaffinity(0)) == cpus  # this thread is untouched


class FakeCpu:
    """The processor threads' CPU seconds as if they used ``cores`` cores all along."""

    def __init__(self, cores: float) -> None:
        self.cores = cores
        self._total = 0.0
        self._at = time.monotonic()

    def __call__(self, threads: object) -> float:
        now = time.monotonic()
        self._total += (now - self._at) * self.cores
        self._at = now
        return self._total


def _sample_for(pinning: affinity.Pinning, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pinning.sample()
        time.sleep(0.005)


@pytest.fixture
def fast_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(affinity, "CPU_WINDOW", 0.05)
    monkeypatch.setattr(affinity, "PROBE_EVERY", 0.3)
    monkeypatch.setattr(affinity, "PARALLEL_HOLD", 0.5)


def test_adaptive_pinning_follows_the_average_number_of_running_jobs(
    fast_guard: None,
) -> None:
    cpus = affinity.allowed()
    running = [0]
    pinning = affinity.Pinning(frozenset({cpus[-1]}), lambda: running[0], adaptive=True,
                               cpu=FakeCpu(1.0))
    started, done, seen = threading.Event(), threading.Event(), []
    thread = _in_thread(pinning, started, done, seen)
    started.wait(10)
    assert seen == [set(cpus)] and not pinning.pinned  # quiet: anywhere
    running[0] = 4
    _sample_for(pinning, 0.2)  # a busy unpinned window is measured first: one core
    assert pinning.pinned
    native = next(iter(pinning._threads))
    assert os.sched_getaffinity(native) == {cpus[-1]}  # moved from outside the thread
    running[0] = 1  # one job at a time: no GIL contention, but not quiet enough to flip
    for _ in range(affinity.SAMPLES):
        pinning.sample()
    assert pinning.pinned
    running[0] = 0
    for _ in range(affinity.SAMPLES):
        pinning.sample()
    assert not pinning.pinned
    done.set()
    thread.join()
    assert seen[-1] == set(cpus)
    pinning.sample()  # the thread is gone: nothing to move, no error


def test_jobs_computing_in_parallel_are_never_pinned(fast_guard: None) -> None:
    """Jobs that release the GIL (numpy, compression) use more than one core unpinned:
    ``auto`` leaves them on every core."""
    cpus = affinity.allowed()
    pinning = affinity.Pinning(frozenset({cpus[-1]}), lambda: 10, adaptive=True,
                               cpu=FakeCpu(1.9))
    for _ in range(6):
        _sample_for(pinning, 0.1)
        assert not pinning.pinned


def test_pinned_threads_are_measured_again_and_let_go_when_they_compute_in_parallel(
    fast_guard: None,
) -> None:
    cpus = affinity.allowed()
    cpu = FakeCpu(1.0)
    pinning = affinity.Pinning(frozenset({cpus[-1]}), lambda: 10, adaptive=True, cpu=cpu)
    _sample_for(pinning, 0.2)
    assert pinning.pinned
    cpu.cores = 1.9  # the job mix changed: the work now runs beside the GIL
    states = []
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        pinning.sample()
        states.append(pinning.pinned)
        time.sleep(0.005)
    assert not pinning.pinned, "the probe should have found the parallel work"
    assert False in states[: len(states) // 2]
    cpu.cores = 1.0
    _sample_for(pinning, 1.0)  # the hold passes, a serial window is measured: pinned again
    assert pinning.pinned
