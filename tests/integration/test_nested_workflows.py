"""Nested workflows against a real server: a step that is a whole workflow, run by the
worker's own runner and middleware (``Drain``, in this thread).

A step writes what it received to the Redis list ``ran`` (``name:args``), as in
``test_workflows.py``, so a test reads how often each step ran and with what.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

import wurk
from tests.helpers.runner import Drain
from tests.integration.test_workflows import boom, echo, gather, run_all, runs, split, square
from wurk.workflow import Workflow, WorkflowError, WorkflowStatus, cancel


@pytest.fixture
def drain(config: wurk.Config) -> Iterator[Drain]:
    running = Drain(config)
    yield running
    running.close()


def two_levels(inner_policy: str = "stop", outer_policy: str = "stop",
               dies: bool = False) -> Workflow:
    """outer: first -> [middle: m1 -> [inner: i1, i2 (fans out 3) -> fan-in] -> m2] -> last"""
    inner = Workflow("inner", on_death=inner_policy)  # type: ignore[arg-type]
    i1 = inner.step(boom if dies else square, *([] if dies else [4])).named("i1")
    parts = inner.step(split, 3).named("i2")
    inner.step(gather, parts.children).named("sum")
    inner.step(echo, i1).named("after-i1")
    middle = Workflow("middle")
    m1 = middle.step(echo, "m1").named("m1")
    nested = middle.step(inner).after(m1)
    middle.step(echo, nested).named("m2")
    outer = Workflow("outer", on_death=outer_policy)  # type: ignore[arg-type]
    first = outer.step(echo, "first").named("first")
    mid = outer.step(middle).after(first)
    outer.step(echo, mid, first).named("last")
    outer.step(echo, "side").named("side")
    return outer


def test_a_two_level_nested_workflow_runs_and_passes_its_leaves_values(
        drain: Drain, r: redis.Redis) -> None:
    wid = two_levels().start()
    run_all(drain)
    status = WorkflowStatus(wid)
    assert status.state == "succeeded" and status.dead == 0
    inner_value = {"sum": 5, "after-i1": [16]}  # the leaves: no step of it waits for them
    assert runs(r, "echo").count(["m1"]) == 1
    assert runs(r, "echo").count([inner_value]) == 1  # m2 got the inner workflow's value
    assert runs(r, "echo").count([{"m2": [inner_value]}, ["first"]]) == 1  # last, once
    assert status.steps["middle"].kind == "workflow"
    assert status.steps["middle"].state == "succeeded"
    assert status.result("middle/inner") == inner_value
    assert status.result("middle") == {"m2": [inner_value]}
    assert status.steps["middle/inner/i2[2]"].value == 4
    # the nesting: each step says which workflow it is in
    assert [s.name for s in status.members()] == ["first", "last", "middle", "side"]
    assert [s.name for s in status.members("middle")] == ["middle/inner", "middle/m1",
                                                          "middle/m2"]
    assert {s.name for s in status.members("middle/inner")} == {
        "middle/inner/i1", "middle/inner/i2", "middle/inner/i2[0]", "middle/inner/i2[1]",
        "middle/inner/i2[2]", "middle/inner/sum", "middle/inner/after-i1"}
    assert status.steps["middle/inner/sum"].within == "middle/inner"
    assert status.total == 12  # job steps only: 3 outer, 2 middle, 4 inner and 3 children
    assert wurk.BatchStatus(wid).succeeded


def test_an_inner_step_that_dies_under_stop_stops_its_workflow_then_the_outer_policy(
        drain: Drain, r: redis.Redis) -> None:
    """inner ``stop``: the step after the dead one is stopped, the rest of the inner
    workflow runs; it fails, and the middle workflow's ``stop`` stops m2 and, middle failing,
    the outer ``stop`` stops ``last``; other branches run."""
    wid = two_levels(dies=True).start()
    run_all(drain)
    status = WorkflowStatus(wid)
    states = {name: step.state for name, step in status.steps.items()}
    assert states["middle/inner/i1"] == "dead"
    assert states["middle/inner/after-i1"] == "stopped"
    assert states["middle/inner/sum"] == "succeeded"  # its own branch went on
    assert states["middle/inner"] == "failed"
    assert states["middle/m2"] == "stopped"
    assert states["middle"] == "failed"
    assert states["last"] == "stopped" and states["side"] == "succeeded"
    assert status.state == "failed" and status.dead == 1 and status.pending == 0
    with pytest.raises(WorkflowError, match="has no value"):
        status.result("middle/inner")


def test_an_inner_step_that_dies_under_continue_and_an_outer_continue(
        drain: Drain, r: redis.Redis) -> None:
    """inner ``continue``: after-i1 runs with null; the inner workflow fails still; the
    middle's ``stop`` stops m2; middle fails, and the outer ``continue`` runs ``last`` with
    null for it."""
    wid = two_levels(inner_policy="continue", outer_policy="continue", dies=True).start()
    run_all(drain)
    status = WorkflowStatus(wid)
    states = {name: step.state for name, step in status.steps.items()}
    assert states["middle/inner/after-i1"] == "succeeded"
    assert [None] in runs(r, "echo")
    assert states["middle/inner"] == "failed" and states["middle/m2"] == "stopped"
    assert states["middle"] == "failed" and states["last"] == "succeeded"
    assert runs(r, "echo").count([None, ["first"]]) == 1  # the failed middle is null
    assert status.state == "failed"


def test_a_nested_workflow_all_stopped_is_stopped(drain: Drain, r: redis.Redis) -> None:
    inner = Workflow("inner")
    inner.step(echo, "never").named("a")
    outer = Workflow("outer")
    dies = outer.step(boom)
    sub = outer.step(inner).after(dies)
    outer.step(echo, sub).named("after")
    wid = outer.start()
    run_all(drain)
    status = WorkflowStatus(wid)
    assert {n: s.state for n, s in status.steps.items()} == {
        "boom": "dead", "inner": "stopped", "inner/a": "stopped", "after": "stopped"}
    assert runs(r, "echo") == []


def test_cancel_of_the_outer_cancels_the_nested_steps(drain: Drain, r: redis.Redis) -> None:
    inner = Workflow("inner")
    inner.step(echo, "i1").named("i1")
    middle = Workflow("middle")
    m1 = middle.step(echo.set(queue="held"), "m1").named("m1")  # a queue drain does not run
    middle.step(inner).after(m1)
    outer = Workflow("outer")
    first = outer.step(echo, "first").named("first")
    outer.step(echo, outer.step(middle).after(first)).named("last")
    wid = outer.start()
    run_all(drain)  # first runs; m1 waits in its queue
    status = WorkflowStatus(wid)
    assert status.steps["middle"].state == "running"
    assert status.steps["middle/m1"].state == "queued"
    assert status.steps["middle/inner"].state == "waiting"
    assert cancel(wid) == "running"
    assert r.llen("queue:held") == 0  # the nested step was taken out of its queue
    status = WorkflowStatus(wid)
    assert status.state == "cancelled"
    assert {status.steps[name].state for name in
            ("middle", "middle/m1", "middle/inner", "middle/inner/i1", "last")} == {"cancelled"}
    assert status.steps["first"].state == "succeeded"
    assert runs(r, "echo") == [["first"]]


def test_nesting_is_checked(config: wurk.Config) -> None:
    inner = Workflow("inner")
    step = inner.step(square, 1)
    outer = Workflow("outer")
    outer.step(inner)
    with pytest.raises(WorkflowError, match="nested already"):
        Workflow().step(inner)
    with pytest.raises(WorkflowError, match="start that one"):
        inner.start()
    with pytest.raises(WorkflowError, match="register callbacks on the outermost"):
        inner.on("success", square)
    with_callback = Workflow().on("success", square)
    with_callback.step(square, 1)
    with pytest.raises(WorkflowError, match="no callbacks of its own"):
        Workflow().step(with_callback)
    with pytest.raises(WorkflowError, match="no arguments"):
        Workflow().step(Workflow(), 1)
    with pytest.raises(WorkflowError, match="at least one step"):
        Workflow().step(Workflow())
    with pytest.raises(WorkflowError, match="adds no children"):
        other_inner = Workflow()
        other_inner.step(square, 2)
        wf = Workflow()
        wf.step(gather, wf.step(other_inner).children)
        wf.start()
    cyclic = Workflow()
    looped = Workflow()
    looped.step(square, 1)
    sub = cyclic.step(looped)
    looped.step(echo, sub)  # a step of the nested workflow waits for the nested workflow
    with pytest.raises(WorkflowError, match="wait for each other"):
        cyclic.start()
    elsewhere = Workflow()
    elsewhere_inner = Workflow()
    elsewhere_inner.step(echo, step)  # a step of an unrelated workflow
    elsewhere.step(elsewhere_inner)
    with pytest.raises(WorkflowError, match="not a step of this workflow"):
        elsewhere.start()


def test_an_inner_step_takes_an_outer_steps_result(drain: Drain, r: redis.Redis) -> None:
    outer = Workflow("outer")
    seed = outer.step(square, 3)
    inner = Workflow("inner")
    inner.step(echo, seed).named("uses-seed")  # waits for the outer step, gets its value
    outer.step(inner)
    wid = outer.start()
    run_all(drain)
    assert runs(r, "echo") == [[9]]
    assert WorkflowStatus(wid).result("inner") == {"uses-seed": [9]}




def test_a_hostile_leaf_name_in_subs_still_makes_the_nested_value_json(
        drain: Drain, r: redis.Redis, config: wurk.Config) -> None:
    """A nested workflow's value was written as '"' name '":' value from the leaves its
    `subs` field lists: a leaf name holding a quote (written by a hand) made it no JSON,
    and the step after it was pushed with a payload no worker can read — it went raw to
    the dead set, was never counted, and the workflow stayed running for good. The name is
    encoded now: the step after it runs with the value, the leaf that is no step a null."""
    inner = Workflow("inner")
    inner.step(square, 2).named("x")
    outer = Workflow("outer")
    nested = outer.step(inner)
    outer.step(echo, nested).named("after")
    wid = outer.start()
    r.hset(config.keys.workflow(wid, "subs"), "inner", 'stop inner/x inner/"}\\')
    run_all(drain)
    assert r.zcard("dead") == 0 and r.zcard("retry") == 0
    assert runs(r, "echo") == [[{"x": 4, '"}\\': None}]]
    status = WorkflowStatus(wid)
    assert status.state == "succeeded"
    assert status.result("inner") == {"x": 4, '"}\\': None}
