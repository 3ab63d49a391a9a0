"""Workflows against a real server: steps run by the worker's own runner and middleware
(``Drain``, in this thread), and the docs' examples on an embedded worker.

A step writes what it received to the Redis list ``ran`` (``name:args``), so a test reads
how often each step ran and with what.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.runner import Drain
from tests.helpers.server import Server
from wurk.workflow import Workflow, WorkflowError, WorkflowStatus, cancel, fan_out

DOCS = Path(__file__).resolve().parents[2] / "docs" / "workflows.md"


def note(name: str, *args: Any) -> None:
    with wurk.redis() as conn:
        conn.call("RPUSH", "ran", f"{name}:{json.dumps(args)}")


def runs(r: redis.Redis, name: str) -> list[Any]:
    return [json.loads(line.split(":", 1)[1]) for line in r.lrange("ran", 0, -1)
            if line.split(":", 1)[0] == name]


@wurk.job(name="WfTest::square")
def square(n: int) -> int:
    return n * n


@wurk.job(name="WfTest::split")
def split(count: int) -> int:
    note("split", count)
    fan_out(square, [[i] for i in range(count)])
    return count


@wurk.job(name="WfTest::gather")
def gather(values: list[int]) -> int:
    note("gather", values)
    return sum(values)


@wurk.job(name="WfTest::final")
def final(total: Any, count: Any) -> str:
    note("final", total, count)
    return f"{count}:{total}"


@wurk.job(name="WfTest::boom", retry=False)
def boom() -> None:
    raise RuntimeError("this step dies")


@wurk.job(name="WfTest::echo")
def echo(*values: Any) -> list[Any]:
    note("echo", *values)
    return list(values)


@pytest.fixture
def drain(config: wurk.Config) -> Iterator[Drain]:
    running = Drain(config)
    yield running
    running.close()


def run_all(drain: Drain) -> None:
    while drain():
        pass


def fan_in_workflow(count: int, policy: str = "stop") -> Workflow:
    wf = Workflow("fan", on_death=policy)  # type: ignore[arg-type]
    parts = wf.step(split, count)
    total = wf.step(gather, parts.children)
    wf.step(final, total, parts).named("final")
    return wf


def test_fan_out_a_thousand_fan_in_once_with_every_result_then_the_final_once(
        drain: Drain, r: redis.Redis) -> None:
    wid = fan_in_workflow(1000).start()
    run_all(drain)
    assert runs(r, "gather") == [[[i * i for i in range(1000)]]]
    assert runs(r, "final") == [[sum(i * i for i in range(1000)), 1000]]
    status = WorkflowStatus(wid)
    assert status.state == "succeeded" and status.total == 1003 and status.pending == 0
    assert status.result("final") == f"1000:{sum(i * i for i in range(1000))}"
    assert status.steps["split[999]"].value == 999 * 999
    assert wurk.BatchStatus(wid).succeeded  # the workflow's batch saw every step


def test_a_step_run_twice_is_counted_once(drain: Drain, r: redis.Redis,
                                          config: wurk.Config) -> None:
    """A redelivered step (its worker killed after the count, before the ACK) runs again:
    its children, its dependants and the fan-in are pushed once."""
    wid = fan_in_workflow(3).start()
    (raw,) = r.lrange("queue:default", 0, -1)
    r.lpush("queue:default", raw)  # the same payload delivered twice
    run_all(drain)
    assert len(runs(r, "split")) == 2  # it ran twice...
    assert runs(r, "gather") == [[[0, 1, 4]]]  # ...and counted once
    assert len(runs(r, "final")) == 1
    status = WorkflowStatus(wid)
    assert status.state == "succeeded" and status.total == 6
    assert sorted(status.steps) == ["final", "gather", "split", "split[0]", "split[1]",
                                    "split[2]"]


def test_a_dying_step_stops_its_dependants_under_stop(drain: Drain, r: redis.Redis) -> None:
    wf = Workflow("stop")
    dies = wf.step(boom)
    after = wf.step(echo, dies).named("after")
    wf.step(echo, after).named("after-after")
    wf.step(echo, "other branch").named("other")
    wid = wf.start()
    run_all(drain)
    status = WorkflowStatus(wid)
    assert status.state == "failed" and status.dead == 1
    assert {n: s.state for n, s in status.steps.items()} == {
        "boom": "dead", "after": "stopped", "after-after": "stopped", "other": "succeeded"}
    assert runs(r, "echo") == [["other branch"]]
    with pytest.raises(wurk.JobFailed):
        status.result("boom")


def test_a_dying_step_under_continue_runs_the_rest_with_null(drain: Drain,
                                                             r: redis.Redis) -> None:
    wf = Workflow("continue", on_death="continue")
    dies = wf.step(boom)
    wf.step(echo, dies, "x").named("after")
    wid = wf.start()
    run_all(drain)
    status = WorkflowStatus(wid)
    assert status.state == "failed"
    assert status.steps["after"].state == "succeeded"
    assert runs(r, "echo") == [[None, "x"]]


@wurk.job(name="WfTest::split_into_dying", retry=False)
def split_into_dying() -> None:
    fan_out(boom, [[], []])
    fan_out(square, [[3]])


def test_a_dying_child_stops_the_fan_in_or_leaves_null_in_its_list(
        drain: Drain, r: redis.Redis) -> None:
    ids = {}
    for policy in ("stop", "continue"):
        wf = Workflow(policy, on_death=policy)  # type: ignore[arg-type]
        parent = wf.step(split_into_dying)
        wf.step(gather, parent.children)
        ids[policy] = wf.start()
    run_all(drain)  # the fan-in under continue fails (sum over None) and waits for a retry
    stopped, went_on = WorkflowStatus(ids["stop"]), WorkflowStatus(ids["continue"])
    assert stopped.steps["gather"].state == "stopped" and stopped.state == "failed"
    assert went_on.steps["split_into_dying[2]"].value == 9
    assert runs(r, "gather") == [[[None, None, 9]]]


def test_cancel_takes_queued_steps_out_and_pushes_nothing_more(
        drain: Drain, r: redis.Redis) -> None:
    wf = Workflow("cancelled")
    first = [wf.step(square, i) for i in range(3)]
    wf.step(gather, first)
    wid = wf.start()
    assert r.llen("queue:default") == 3
    status = WorkflowStatus(wid)
    assert status.state == "running"
    assert [s.state for s in status.steps.values()] == ["waiting", "queued", "queued",
                                                        "queued"]
    assert cancel(wid) == "running"
    assert r.llen("queue:default") == 0
    run_all(drain)
    status = WorkflowStatus(wid)
    assert status.state == "cancelled"
    assert {s.state for s in status.steps.values()} == {"cancelled"}
    assert runs(r, "gather") == []
    assert wurk.BatchStatus(wid).complete  # the batch no longer waits for them
    assert cancel(wid) == "cancelled"  # a second cancel changes nothing
    with pytest.raises(WorkflowError):
        cancel("wf-nothing")



# What a hand (or another version) may have written in place of what the workflow stored:
# (what is changed, field or None for the whole key, the value, what the warning names).
HOSTILE = {
    "pending": ("", "pending", "many", ':wf field "pending" holds no count: "many"'),
    "waiting": ("waiting", "b", "x", ':wf:waiting field "b" holds no count: "x"'),
    "template": ("steps", "b", "garbage",
                 ':wf:steps field "b" holds no step template: "garbage"; the step is not '
                 "pushed"),
    "state type": ("state", None, "a string",
                   ":wf:state holds a string, not a hash (written by something else); the "
                   "step's end is not counted"),
    "ttl": ("", "ttl", "-5", None),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_stored_state_is_named_and_no_step_fails_or_runs_twice(
        drain: Drain, r: redis.Redis, config: wurk.Config, case: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """The step script failed half-way on what it read back: a count that is none
    (HINCRBY), a template that is none, a key of another type, a ttl EXPIRE refuses (or,
    negative, one that deleted the values at once: the dependant received null). The step
    was counted but what came after it was not done, and its job failed with a Redis error
    naming no key, so it ran again (and again, with every retry) while the workflow stayed
    running for good. Now nothing fails: a key of another type stops the count (and a
    cancel) before any write, anything else waits where it is, and a warning names the key
    and field."""
    part, field, value, named = HOSTILE[case]
    wf = Workflow("hostile")
    a = wf.step(square, 3).named("a")
    wf.step(echo, a).named("b")
    wf.step(echo, "beside").named("c")
    wid = wf.start()
    key = config.keys.workflow(wid, part)
    if field is None:
        r.delete(key)
        r.set(key, "not a hash")
    else:
        r.hset(key, field, value)
    with caplog.at_level(logging.WARNING, logger="wurk"):
        run_all(drain)
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0  # no step failed...
    pushed = case in ("pending", "ttl")  # b's own inputs are intact: it runs, with a's value
    assert sorted(map(json.dumps, runs(r, "echo"))) == (
        ['["beside"]', "[9]"] if pushed else ['["beside"]'])
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    if named is None:  # the ttl is the default: nothing lost, the dependant got its value
        assert warned == []
        assert WorkflowStatus(wid).state == "succeeded"
        return
    assert warned and all(named.replace(":wf", f"wurk:workflow:{wid}") in w for w in warned)
    if field is None:  # a cancel says so and changes nothing (it failed half-way on WRONGTYPE)
        with pytest.raises(WorkflowError, match=f"wurk:workflow:{wid}:state holds a string"):
            cancel(wid)
        assert r.hget(config.keys.workflow(wid), "state") == "running"


def test_a_workflow_is_checked_before_it_starts(config: wurk.Config) -> None:
    wf = Workflow()
    a = wf.step(square, 1)
    b = wf.step(square, 2).after(a)
    a.after(b)
    with pytest.raises(WorkflowError, match="wait for each other"):
        wf.start()
    other = Workflow().step(square, 3)
    with pytest.raises(WorkflowError, match="not a step of this workflow"):
        Workflow().step(echo, other).workflow.start()
    with pytest.raises(WorkflowError, match="step name"):
        wf.step(square, 4).named("bad name[0]")
    with pytest.raises(WorkflowError, match="on_death"):
        Workflow(on_death="ignore")  # type: ignore[arg-type]
    with pytest.raises(WorkflowError, match="running workflow step"):
        fan_out(square, [[1]])


def test_the_docs_examples_run_as_workflows(redis_server: Server) -> None:
    """Every block of docs/workflows.md marked as run by this file, on an embedded worker:
    each asserts its own result."""
    config = wurk.configure(redis_url=redis_server.url, heartbeat_interval=0.2,
                            fetch_timeout=0.2, timeout=1, shutdown_grace=0.5,
                            scheduler_initial_wait=0, concurrency=4, tag="workflows")
    text = DOCS.read_text(encoding="utf-8")
    marker = "<!-- run by tests/integration/test_workflows.py -->"
    blocks = re.findall(re.escape(marker) + r"\n```python\n(.*?)```", text, re.S)
    assert len(blocks) == 5
    worker = wurk.embed(config)
    try:
        for block in blocks:
            exec(compile(block, str(DOCS), "exec"), {"__name__": "docs_workflows"})
    finally:
        worker.stop()
