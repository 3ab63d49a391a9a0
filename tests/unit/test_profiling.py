"""Profiling's parts without Redis: the size cap and its note, the reading of both stored
formats (and of what is neither), the flame graph's layout, the options' checks, and the
link's place among the built-ins."""

from __future__ import annotations

import gzip
import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import wurk
from wurk.errors import ConfigError
from wurk.launcher import BUILT_IN, install_built_ins
from wurk.options import check_profiler_options
from wurk.profiling import middleware as profiling
from wurk.profiling import record
from wurk.profiling.flame import MAX_DEPTH, Flame, Node, Unreadable, parse
from wurk.profiling.middleware import JobProfiler
from wurk.web.charts import FLAME_RECTS, FLAME_ROW, FLAME_WIDTH, flame_graph

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "profiles" / "vernier_firefox.json"
RUN = record.Run(token="tok", jid="a" * 24, type="Reports::Export", started_at=1_796_400_000,
                 elapsed=2.5)


def gz(document: Any) -> bytes:
    return gzip.compress(json.dumps(document).encode())


def speedscope(events: list[tuple[str, float, int]], names: list[str]) -> dict[str, Any]:
    return {"shared": {"frames": [{"name": n, "file": "app.py", "line": i}
                                  for i, n in enumerate(names)]},
            "profiles": [{"type": "evented", "unit": "seconds", "events": [
                {"type": kind, "at": at, "frame": frame} for kind, at, frame in events]}]}


def children(node: Node) -> dict[str, float]:
    return {child.name: child.value for child in node.children.values()}


# -- the cap ----
def test_a_profile_that_fits_is_stored_as_rendered_at_the_finest_threshold() -> None:
    asked: list[float] = []

    def render(threshold: float) -> str:
        asked.append(threshold)
        return json.dumps(speedscope([("O", 0, 0), ("C", 1, 0)], ["work"]))

    data = record.capped(RUN, render)
    assert asked == [0.01]
    assert parse(data).root.value == 1


def test_a_huge_profile_is_cut_coarser_then_kept_as_a_note(caplog: Any) -> None:
    asked: list[float] = []

    def render(threshold: float) -> str:
        asked.append(threshold)
        return os.urandom(4000).hex() if threshold < 0.2 else json.dumps(
            speedscope([("O", 0, 0), ("C", 1, 0)], ["small enough"]))

    assert parse(record.capped(RUN, render, limit=3000)).root.value == 1
    assert asked == [0.01, 0.05, 0.2]

    data = record.capped(RUN, lambda threshold: os.urandom(4000).hex(), limit=3000)
    flame = parse(data)
    [note] = flame.root.children.values()
    assert note.name.startswith("profile too large to keep: ")
    assert "over the 3,000-byte cap" in note.name
    assert note.value == RUN.elapsed
    assert "over the cap of 3,000" in caplog.text


def test_a_profile_that_cannot_be_rendered_is_kept_as_a_note_naming_the_error() -> None:
    def render(threshold: float) -> str:
        raise RecursionError("too deep")

    [note] = parse(record.capped(RUN, render)).root.children.values()
    assert note.name == "profile could not be rendered (RecursionError); the job succeeded"


def test_a_runs_download_name_says_what_and_when() -> None:
    assert RUN.member == f"tok-{'a' * 24}"
    assert RUN.filename == f"tok-Reports::Export-{'a' * 24}-20261204-160000.speedscope.json.gz"


# -- reading speedscope ----
def test_evented_profiles_add_up_each_stack_time() -> None:
    events = [("O", 0, 0), ("O", 0, 1), ("C", 3, 1), ("O", 3, 2), ("C", 4, 2), ("C", 5, 0)]
    flame = parse(gz(speedscope(events, ["perform", "crunch", "sleep"])))
    assert flame.kind == "speedscope" and flame.unit == "seconds"
    [perform] = flame.root.children.values()
    assert (perform.name, perform.file, perform.value) == ("perform", "app.py:0", 5)
    assert children(perform) == {"crunch": 3, "sleep": 1}


def test_sampled_profiles_and_bad_events_are_read_as_far_as_they_make_sense() -> None:
    sampled = {"shared": {"frames": [{"name": "a"}, {"name": "b"}]},
               "profiles": [{"type": "sampled", "samples": [[0, 1], [0], [0, 9], "x"],
                             "weights": [2, 3, None, "INF"]}]}
    flame = parse(gzip.compress(json.dumps(sampled).replace('"INF"', "1e999").encode()))
    assert children(flame.root) == {"a": 6}  # 2 + 3 + 1 (an unweighted sample counts once)
    # Closes out of order, unknown frames, times that go back, NaN: no error, no negatives.
    events = [("O", 0, 0), ("O", 1, 1), ("C", 2, 0), ("C", 3, 1), ("O", "x", 0), ("O", 9, 7),
              ("O", 4, 0), ("C", 1, 0)]
    flame = parse(gz(speedscope(events, ["a", "b"])))
    assert flame.root.value == 2 and children(flame.root) == {"a": 2}


# -- reading the Firefox Profiler's format (Ruby's Vernier) ----
def test_a_vernier_profile_is_read_from_its_samples() -> None:
    flame = parse(gzip.compress(FIXTURE.read_bytes()))
    assert flame.kind == "firefox" and flame.unit == "samples" and flame.root.value == 10
    [execute] = flame.root.children.values()
    assert execute.name == "Sidekiq::Processor#execute_job"
    [perform] = execute.children.values()
    assert perform.file == "/app/jobs/hard_job.rb" and children(perform) == {
        "Array#each": 7, "Kernel#sleep": 2}
    [each] = (c for c in perform.children.values() if c.name == "Array#each")
    assert children(each) == {"HardJob#crunch": 6}


def test_newer_firefox_profiles_share_their_strings_and_cycles_end() -> None:
    document = json.loads(FIXTURE.read_text())
    thread = document["threads"][0]
    document["shared"] = {"stringArray": thread.pop("stringArray")}
    thread["stackTable"]["prefix"][0] = 4  # a cycle: 0 → 4 → 1 → 0 …
    thread["samples"]["weight"] = None
    flame = parse(gz(document))
    assert flame.root.value == 10
    deepest = flame.root
    depth = 0
    while deepest.children:
        deepest = max(deepest.children.values(), key=lambda node: node.value)
        depth += 1
    assert depth == MAX_DEPTH  # walked to the bound, not for ever


@pytest.mark.parametrize(("data", "reason"), [
    (b"not gzip at all", "not gzip"),
    (b"{}", "damaged"),
    (b"\0" * (9 * 1024 * 1024), "too large to draw"),
    (b"[" * 100_000, "not JSON"),
    (b'{"threads": 5}', "neither"),
    (b"NaN", "not JSON"),
], ids=["not gzip", "damaged", "bomb", "deep", "neither", "NaN"])
def test_what_cannot_be_drawn_says_why(data: bytes, reason: str) -> None:
    stored = data if reason == "not gzip" else gzip.compress(data)
    if reason == "damaged":
        stored = stored[:-9] + b"garbage!!"
    with pytest.raises(Unreadable, match=reason):
        parse(stored)


def test_hostile_tables_read_as_unknown_frames_not_errors() -> None:
    document = {"threads": [{"samples": {"stack": [0, 1, True, None, -1, 10**400 // 10**399]},
                             "stackTable": {"frame": [0, 7], "prefix": [None, "x"]},
                             "frameTable": {"func": [3]}, "funcTable": {"name": [0]},
                             "stringArray": [5]}, "junk"]}
    flame = parse(gz(document))
    assert children(flame.root) == {"?": 2} and flame.root.value == 4  # two without frames


# -- the flame graph ----
def tree(width: int, depth: int) -> Node:
    root = Node("all", value=float(width))
    for index in range(width):
        node = root.child(f"f{index}", "")
        node.value = 1.0
        for level in range(depth):
            node = node.child(f"f{index}.{level}", "")
            node.value = 1.0
    return root


def test_the_root_is_drawn_along_the_bottom_and_each_caller_below_its_callees() -> None:
    chart = flame_graph(tree(4, 2), "seconds")
    assert chart.height == 4 * FLAME_ROW
    root = chart.rects[0]
    assert (root.y, root.width, root.tone) == (3 * FLAME_ROW, FLAME_WIDTH, "root")
    by_label = {rect.title.split(" — ")[0]: rect for rect in chart.rects}
    assert by_label["f0.1"].y == 0 and by_label["f0"].y == 2 * FLAME_ROW
    assert by_label["f2"].x == pytest.approx(FLAME_WIDTH / 2)
    assert by_label["f0"].title == "f0 — 1,000.0 ms, 25.0 %"


def test_narrow_and_surplus_frames_are_left_out_and_counted() -> None:
    narrow = flame_graph(tree(5000, 1), "samples")  # 0.24 px each
    assert len(narrow.rects) == 1 and narrow.hidden == 5000
    chart = flame_graph(tree(2100, 1), "samples")  # 0.57 px each, 4,200 of them
    # Breadth first: 1,999 of the first row fit; the other 101 and the second row do not.
    assert len(chart.rects) == FLAME_RECTS and chart.hidden == 101 + 1999
    assert chart.height == 2 * FLAME_ROW
    assert all(rect.width >= 0.5 for rect in chart.rects)
    assert flame_graph(Node("all"), "seconds").rects == []


def test_labels_are_cut_to_their_frame() -> None:
    root = Node("all", value=100.0)
    root.child("x" * 500, "").value = 100.0
    root.child("y" * 500, "").value = 0.0
    chart = flame_graph(root, "seconds")
    label = chart.rects[1].label
    assert label.endswith("…") and len(label) * 7 <= FLAME_WIDTH


def test_an_event_or_a_sample_costs_the_same_at_any_depth() -> None:
    # Stacks deeper than the 256 frames read, each event or sample of them once walked the
    # whole stack, so the frames read ran out (MAX_FRAMES) a third of the way through.
    opens = [{"type": "O", "at": at, "frame": 0} for at in range(60_000)]
    evented = parse(gz({"shared": {"frames": [{"name": "deeper"}]},
                        "profiles": [{"type": "evented", "unit": "seconds", "events": opens}]}))
    assert evented.root.value == 59_999 and evented.cut and not evented.full
    firefox = parse(gz({"threads": [{"samples": {"stack": [299] * 400_000},
                                     "stackTable": {"frame": [0] * 300,
                                                    "prefix": [None, *range(299)]},
                                     "frameTable": {"func": [0]}, "funcTable": {"name": [0]},
                                     "stringArray": ["deeper"]}]}))
    assert firefox.root.value == 400_000 and firefox.cut and not firefox.full
    deepest, depth = firefox.root, 0
    while deepest.children:
        [deepest] = deepest.children.values()
        depth += 1
    assert depth == MAX_DEPTH and deepest.value == 400_000


def test_a_flame_stops_growing_at_its_bounds() -> None:
    flame = Flame(Node("all"), "speedscope", "seconds")
    flame.add([(f"f{n}", "") for n in range(MAX_DEPTH + 50)], 1.0)
    assert flame.cut and flame.nodes == MAX_DEPTH


# -- options and the link ----
@pytest.mark.parametrize(("options", "message"), [
    ([500], "expected a dict"),
    ({"interval": 99}, "interval=99 is invalid"),
    ({"interval": 1.5}, "interval=1.5 is invalid"),
    ({"interval": True}, "interval=True is invalid"),
    ({"mode": "cpu"}, "samples wall-clock time only"),
    ({"out": "/tmp/x"}, "'out' is not one wurk's profiler has"),
])
def test_profiler_options_wurk_cannot_honour_are_refused(options: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_profiler_options(options, "push")
    check_profiler_options({"interval": 100, "mode": "wall"}, "push")


def test_the_profiler_is_the_innermost_built_in_and_a_worker_installs_it() -> None:
    assert BUILT_IN[-1] is JobProfiler
    config = wurk.Config(redis_url="redis://127.0.0.1:1/0")
    install_built_ins(config)
    built_in = [link for link in config.server_middleware if isinstance(link, BUILT_IN)]
    assert isinstance(built_in[-1], JobProfiler)


def test_a_job_without_profile_goes_straight_through() -> None:
    link = JobProfiler(wurk.Config(redis_url="redis://127.0.0.1:1/0"))
    payload = {"class": "X", "args": [], "jid": "a" * 24}
    assert link(None, payload, "default", lambda: "ran") == "ran"
    assert payload == {"class": "X", "args": [], "jid": "a" * 24}


class _SlowMissing:
    """A finder for ``pyinstrument`` that takes a while to say it is missing: long enough
    for a second job asking at the same time to ask too, if it is let in."""

    def __init__(self) -> None:
        self.asked = 0

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pyinstrument":
            self.asked += 1
            threading.Event().wait(0.3)
            raise ImportError("No module named 'pyinstrument'")
        return None


def test_two_jobs_asking_for_pyinstrument_at_once_look_once_and_warn_once(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    finder = _SlowMissing()
    for name in [m for m in sys.modules if m == "pyinstrument" or m.startswith("pyinstrument.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    profiling._pyinstrument.cache_clear()
    caplog.set_level(logging.WARNING, logger="wurk")
    try:
        threads = [threading.Thread(target=profiling._profiler_tools) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(5)
    finally:
        monkeypatch.undo()
        profiling._pyinstrument.cache_clear()
    assert finder.asked == 1
    said = [r for r in caplog.records if "pyinstrument is not installed" in r.getMessage()]
    assert len(said) == 1
