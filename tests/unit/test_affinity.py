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


def test_pin_applies_to_the_calling_thread_only() -> None:
    cpus = affinity.allowed()
    seen: list[set[int]] = []

    def pinned() -> None:
        affinity.pin(frozenset({cpus[-1]}))
        seen.append(os.sched_getaffinity(0))

    thread = threading.Thread(target=pinned)
    thread.start()
    thread.join()
    assert seen == [{cpus[-1]}]
    assert sorted(os.sched_getaffinity(0)) == cpus  # this thread is untouched
