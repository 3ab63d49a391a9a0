"""``cpu_affinity``: reading the setting, choosing CPUs, pinning a thread."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable

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


class Fake:
    """A process whose jobs run at ``rates[pinned]`` per second, its processor threads
    using ``cores`` cores: the two things the guard measures."""

    def __init__(self, *, cores: float, pinned_rate: float, free_rate: float) -> None:
        self.cores = cores
        self.rates = {True: pinned_rate, False: free_rate}
        self.pinning: affinity.Pinning | None = None
        self._cpu = self._done = 0.0
        self._at = time.monotonic()

    def _advance(self) -> None:
        now = time.monotonic()
        pinned = self.pinning is not None and self.pinning.pinned
        self._cpu += (now - self._at) * self.cores
        self._done += (now - self._at) * self.rates[pinned]
        self._at = now

    def cpu(self, threads: object) -> float:
        self._advance()
        return self._cpu

    def done(self) -> int:
        self._advance()
        return int(self._done)


def pinning_of(fake: Fake, running: Callable[[], int]) -> affinity.Pinning:
    cpus = affinity.allowed()
    fake.pinning = affinity.Pinning(frozenset({cpus[-1]}), running, adaptive=True,
                                    done=fake.done, cpu=fake.cpu)
    return fake.pinning


def _sample_for(pinning: affinity.Pinning, seconds: float) -> list[bool]:
    states = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pinning.sample()
        states.append(pinning.pinned)
        time.sleep(0.005)
    return states


@pytest.fixture
def fast_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(affinity, "WINDOW", 0.1)
    monkeypatch.setattr(affinity, "RETRY", 0.6)
    monkeypatch.setattr(affinity, "HOLD", 0.5)


def test_adaptive_pinning_follows_the_average_number_of_running_jobs(
    fast_guard: None,
) -> None:
    cpus = affinity.allowed()
    running = [0]
    pinning = pinning_of(Fake(cores=1.0, pinned_rate=5000, free_rate=3000), lambda: running[0])
    started, done, seen = threading.Event(), threading.Event(), []
    thread = _in_thread(pinning, started, done, seen)
    started.wait(10)
    assert seen == [set(cpus)] and not pinning.pinned  # quiet: anywhere
    running[0] = 4
    _sample_for(pinning, 0.4)  # a free window, then a pinned trial that pays
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
    pinning = pinning_of(Fake(cores=1.9, pinned_rate=5000, free_rate=9500), lambda: 10)
    assert not any(_sample_for(pinning, 1.0))


def test_a_trial_that_does_not_pay_leaves_the_threads_free(fast_guard: None) -> None:
    """On a machine loaded by others a parallel job may get under PARALLEL_CORES cores even
    unpinned; then the pinned trial finds fewer jobs done and pinning is dropped."""
    pinning = pinning_of(Fake(cores=0.4, pinned_rate=6000, free_rate=10000), lambda: 10)
    states = _sample_for(pinning, 1.2)
    assert not pinning.pinned
    trials = sum(1 for a, b in itertools.pairwise(states) if b and not a)
    assert 1 <= trials <= 2, "one trial per hold, not a flip every window"


def test_kept_pinning_is_tried_again(fast_guard: None) -> None:
    fake = Fake(cores=1.0, pinned_rate=5000, free_rate=3000)
    pinning = pinning_of(fake, lambda: 10)
    _sample_for(pinning, 0.4)
    assert pinning.pinned
    fake.rates[True] = 1000  # the job mix changed: pinning now costs
    states = _sample_for(pinning, 1.5)
    assert False in states and not pinning.pinned
