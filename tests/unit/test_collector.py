"""``wurk.runtime.collector``: a worker process's garbage collector, read back from ``gc``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

# Each case in a fresh interpreter: the collector's settings are the whole process's.
TUNE = textwrap.dedent("""
    import gc, json, sys
    from wurk.runtime.collector import tune_collector
    if sys.argv[2] == "high":
        gc.set_threshold(50_000, 10, 10)
    if sys.argv[2] == "off":
        gc.disable()
    garbage = []
    garbage.append(garbage)  # a cycle alive only in itself: freed, not frozen
    del garbage
    threshold = None if sys.argv[1] == "None" else int(sys.argv[1])
    said = tune_collector(threshold)
    print(json.dumps({"said": said, "threshold": gc.get_threshold(),
                      "frozen": gc.get_freeze_count(), "garbage": gc.collect()}))
""")


def _tune(threshold: str, before: str = "default") -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", TUNE, threshold, before], capture_output=True,
                          text=True, timeout=60, check=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_the_threshold_is_raised_and_what_exists_at_start_is_frozen() -> None:
    tuned = _tune("10000")
    assert tuned["said"] is True
    assert tuned["threshold"] == [10000, 10, 10]
    assert isinstance(tuned["frozen"], int) and tuned["frozen"] > 10_000  # the modules, …
    assert tuned["garbage"] == 0  # the cycle was collected before the freeze


def test_none_leaves_the_collector_as_python_set_it() -> None:
    left = _tune("None")
    assert left["said"] is False and left["threshold"] == [700, 10, 10]
    assert left["frozen"] == 0
    assert isinstance(left["garbage"], int) and left["garbage"] >= 1  # the cycle, still there


def test_a_higher_threshold_set_by_the_application_is_not_lowered() -> None:
    tuned = _tune("10000", before="high")
    assert tuned["said"] is True and tuned["threshold"] == [50000, 10, 10]


def test_a_disabled_collector_stays_as_it_is() -> None:
    tuned = _tune("10000", before="off")
    assert tuned["said"] is False and tuned["frozen"] == 0
