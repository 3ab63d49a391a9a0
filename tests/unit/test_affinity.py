"""``cpu_affinity``: reading the setting, choosing CPUs, pinning a thread."""

from __future__ import annotations

import os
import threading

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


def test_adaptive_pinning_follows_the_average_number_of_running_jobs() -> None:
    cpus = affinity.allowed()
    running = [0]
    pinning = affinity.Pinning(frozenset({cpus[-1]}), lambda: running[0], adaptive=True)
    started, done, seen = threading.Event(), threading.Event(), []
    thread = _in_thread(pinning, started, done, seen)
    started.wait(10)
    assert seen == [set(cpus)] and not pinning.pinned  # quiet: anywhere
    running[0] = 4
    for _ in range(affinity.SAMPLES):
        pinning.sample()
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
