"""Workflows against a real server: steps run by the worker's own runner and middleware
(``Drain``, in this thread), and the docs' examples on an embedded worker.

A step writes what it received to the Redis list ``ran`` (``name:args``), so a test reads
how often each step ran and with what.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.runner import AsyncDrain, Drain
from tests.helpers.server import Server
from tests.helpers.wait import wait_until
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


@wurk.job(name="WfTest::split_elsewhere")
def split_elsewhere(count: int) -> int:
    fan_out(square.set(queue="elsewhere"), [[i] for i in range(count)])
    return count


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
    "pending nan": ("", "pending", "nan", ':wf field "pending" holds no count: "nan"'),
    "pending 0x0": ("", "pending", "0x0", ':wf field "pending" holds no count: "0x0"'),
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
    negative, one that deleted the values at once: the dependant received null), a pending
    the end read as none left ('nan', '0x0': the workflow succeeded early). The step
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
    # b's own inputs are intact: it runs, with a's value
    pushed = case.startswith("pending") or case == "ttl"
    assert sorted(map(json.dumps, runs(r, "echo"))) == (
        ['["beside"]', "[9]"] if pushed else ['["beside"]'])
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    if named is None:  # the ttl is the default: nothing lost, the dependant got its value
        assert warned == []
        assert WorkflowStatus(wid).state == "succeeded"
        values = config.keys.workflow(wid, "values")  # made by a's end: the default's 3 days
        assert 3 * 86400 - 60 < r.ttl(values) <= 3 * 86400
        return
    assert warned and all(named.replace(":wf", f"wurk:workflow:{wid}") in w for w in warned)
    if case.startswith("pending"):  # Lua's tonumber took 'nan' and '0x0' for none left
        assert WorkflowStatus(wid).state == "running"
    if field is None:  # a cancel says so and changes nothing (it failed half-way on WRONGTYPE)
        with pytest.raises(WorkflowError, match=f"wurk:workflow:{wid}:state holds a string"):
            cancel(wid)
        assert r.hget(config.keys.workflow(wid), "state") == "running"


# What a hand may have written where a step's end registers the dependant it pushes: the
# workflow's batch (same id) or the dependant's queue. (key, field or None for the whole key,
# the value, what the warning names; whether b, pushed by a's end, runs).
REGISTER_HOSTILE = {
    "total": ("b-{wid}", "total", "many",
              'b-{wid} field total holds no count: "many" (written by something else); left '
              "as it is", True),
    "pending": ("b-{wid}", "pending", "lots",
                'b-{wid} field pending held no count: "lots" (written by something else); '
                "rebuilt from the batch's sets as ", True),
    "batch type": ("b-{wid}", None, None,
                   "b-{wid} holds a string, not a hash (written by something else); the "
                   "step's end is not counted", False),
    "jids type": ("b-{wid}-jids", None, None,
                  "b-{wid}-jids holds a string, not a set (written by something else); the "
                  "step's end is not counted", False),
    "queue type": ("queue:elsewhere", None, None,
                   'queue:elsewhere holds a string, not a list; step "b" is not pushed '
                   "(written by something else)", False),
}


@pytest.mark.parametrize("case", list(REGISTER_HOSTILE))
def test_hostile_batch_or_queue_stops_no_step_half_way(
        drain: Drain, r: redis.Redis, case: str, caplog: pytest.LogCaptureFixture) -> None:
    """A step's end pushed its dependant and registered it with the batch by a plain LPUSH,
    SADD and HINCRBY: a batch count that is none, or a batch key or queue of another type,
    failed the script after it had marked the step succeeded (Redis does not roll back) and,
    for the counts, pushed the dependant. The step's job failed on a Redis error naming no
    key and retried, its rerun counted nothing, the dependant (if pushed) ran uncounted, and
    the workflow stayed running for good. Now a batch count that is none is rebuilt from the
    sets (pending) or left as it is (total) and the dependant runs; a batch key of another
    type stops the count before any write; a queue of another type leaves the dependant
    waiting, unpushed. A warning names each."""
    key, field, value, named, pushed = REGISTER_HOSTILE[case]
    wf = Workflow("hostile batch")
    a = wf.step(square, 3).named("a")
    wf.step(echo.set(queue="elsewhere" if case == "queue type" else "default"), a).named("b")
    wid = wf.start()
    key = key.format(wid=wid)
    if field is None:
        r.delete(key)
        r.set(key, "not wurk's")
    else:
        r.hset(key, field, value)
    with caplog.at_level(logging.WARNING, logger="wurk"):
        run_all(drain)
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0  # no step failed, none runs again
    assert runs(r, "echo") == ([[9]] if pushed else [])
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    named = named.format(wid=wid)
    assert any(w.startswith(f"workflow {wid}, step a: ") and named in w
               for w in warned), warned
    status = WorkflowStatus(wid)
    if pushed:
        assert status.state == "succeeded"
        assert r.hget(key, field) == ("many" if case == "total" else "0")
        assert wurk.BatchStatus(wid).succeeded
        return
    assert r.get(key) == "not wurk's"
    assert status.state == "running" and status.steps["b"].state == "waiting"
    # a key of the batch: nothing written, a is still queued to be counted; a queue: a is
    # counted, b waits (as a step whose template is none)
    assert status.steps["a"].state == ("succeeded" if case == "queue type" else "queued")


def test_children_for_a_queue_of_another_type_stop_the_count_before_any_write(
        drain: Drain, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """A step's children were pushed after the step was marked succeeded: a queue of another
    type failed the script there, the step's job failed on a Redis error naming no key and
    retried, and its rerun counted nothing (the workflow ran for good). Now the count stops
    before any write, the job does not fail, and a warning names the queue and the child."""
    r.set("queue:elsewhere", "not a list")
    wf = Workflow("fans out")
    wf.step(split_elsewhere, 2).named("s")
    wid = wf.start()
    with caplog.at_level(logging.WARNING, logger="wurk"):
        run_all(drain)
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert (f'workflow {wid}, step s: queue:elsewhere holds a string, not a list; its child '
            '"s[0]" cannot be pushed (written by something else); the step\'s end is not '
            "counted") in warned
    status = WorkflowStatus(wid)
    assert status.state == "running" and status.steps["s"].state == "queued"
    assert r.get("queue:elsewhere") == "not a list"


def test_a_stored_value_that_is_no_json_leaves_its_dependant_unpushed_and_named(
        drain: Drain, r: redis.Redis, config: wurk.Config,
        caplog: pytest.LogCaptureFixture) -> None:
    """A dependant's arguments are its template with its dependencies' stored values put
    in, byte for byte: a value that is no JSON (written by a hand) made a payload no worker
    can read. It was pushed, went raw to the dead set, and was never counted: the workflow
    stayed running for good, with nothing naming why. Now the step is not pushed (it waits,
    as for a template that is none) and a warning names the values key and the step."""
    wf = Workflow("values")
    a = wf.step(square, 3).named("a")
    c = wf.step(echo, "c").named("c")
    wf.step(echo, a).named("b").after(c)
    wid = wf.start()
    drain.runner.run(drain.fetcher.fetch(1))  # a: its value stored, b still waits for c
    assert r.hget(config.keys.workflow(wid, "values"), "a") == "9"
    r.hset(config.keys.workflow(wid, "values"), "a", '9, "x": }')
    with caplog.at_level(logging.WARNING, logger="wurk"):
        run_all(drain)
    assert r.zcard("dead") == 0 and r.zcard("retry") == 0 and r.llen("queue:default") == 0
    assert runs(r, "echo") == [["c"]]
    status = WorkflowStatus(wid)
    assert status.steps["c"].state == "succeeded" and status.steps["b"].state == "waiting"
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert warned == [f"workflow {wid}, step c: wurk:workflow:{wid}:values holds what makes no "
                      "JSON of step \"b\"'s arguments (the values of \"a\", or its template); "
                      "the step is not pushed (written by something else)"]


def test_a_step_in_a_queue_of_another_type_stops_a_start_before_any_write(
        r: redis.Redis, config: wurk.Config) -> None:
    """The start script pushed its first steps after writing the whole graph: a queue of
    another type failed it there with a Redis error naming no key, and the workflow stayed
    written, running, with nothing pushed (for its ttl). Now the start refuses first."""
    r.set("queue:elsewhere", "not a list")
    wf = Workflow("refused")
    wf.step(square, 1)
    wf.step(square.set(queue="elsewhere"), 2)
    with pytest.raises(WorkflowError, match=f"workflow {wf.id} cannot start: queue:elsewhere "
                                            'holds a string, not a list; step "square-2" '
                                            "cannot be pushed"):
        wf.start()
    assert r.exists(config.keys.workflow(wf.id)) == 0
    assert r.llen("queue:default") == 0 and r.get("queue:elsewhere") == "not a list"


def test_a_refused_start_leaves_no_batch_and_fires_no_callback(
        drain: Drain, r: redis.Redis, config: wurk.Config) -> None:
    """A start refused before any write closed the workflow's batch all the same: with no
    job in it, it completed and succeeded at once, and pushed the workflow's `complete` and
    `success` callbacks for a workflow that never started; and the workflow could not be
    started again. Now its batch is deleted, and once the cause is mended it starts."""
    r.set("queue:elsewhere", "not a list")
    wf = Workflow("refused, no callbacks")
    wf.step(square.set(queue="elsewhere"), 2)
    wf.on("success", Callbacks).on("complete", Callbacks)
    with pytest.raises(WorkflowError, match="cannot start"):
        wf.start()
    assert r.exists(f"b-{wf.id}") == 0 and r.zscore("batches", wf.id) is None
    assert r.llen("queue:default") == 0
    run_all(drain)
    assert runs(r, "cb") == []
    r.delete("queue:elsewhere")
    assert wf.start() == wf.id
    assert WorkflowStatus(wf.id).steps["square"].state == "queued"


def test_a_status_reads_step_names_whose_index_is_no_number(
        r: redis.Redis, config: wurk.Config) -> None:
    """Children are ordered by their index: a step name whose index str.isdigit() took and
    int() refused ('²', or past Python's 4,300 digits) made WorkflowStatus raise ValueError."""
    wf = Workflow("names")
    wf.step(square, 1).named("a")
    wid = wf.start()
    for name in ("a[\u00b2]", "a[" + "9" * 5000 + "]", "a[1]"):
        r.hset(config.keys.workflow(wid, "state"), name, "queued")
    status = WorkflowStatus(wid)
    assert list(status.steps) == ["a", "a[\u00b2]", "a[" + "9" * 5000 + "]", "a[1]"]
    assert status.steps["a[\u00b2]"].state == "queued"


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


# -- promises of docs/workflows.md that the tests above do not reach ---------------------------
def test_steps_are_named_after_their_job_then_dash_2_and_names_are_1_to_200(
        config: wurk.Config) -> None:
    """docs: `.named(name)` names it (default: the job's name after its last `.` or `:`, then
    `-2`, `-3`…); step names are 1–200 of `A-Z a-z 0-9 _ . : @ -`."""
    wf = Workflow()
    names = [wf.step(square, n).name for n in range(3)]
    assert names == ["square", "square-2", "square-3"]  # the job is WfTest::square
    assert wf.step(gather.set(queue="other"), [1]).name == "gather"
    assert wf.step(square, 4).named("a" * 200).name == "a" * 200
    for bad in ("", "a" * 201, "a b", "a/b"):
        with pytest.raises(WorkflowError, match="1 to 200"):
            wf.step(square, 5).named(bad)


@wurk.job(name="WfTest::fans_out_nothing")
def fans_out_nothing() -> int:
    fan_out(square, [])
    return 0


def test_a_step_that_fans_out_nothing_leaves_its_children_an_empty_list(
        drain: Drain, r: redis.Redis) -> None:
    wf = Workflow("empty")
    parent = wf.step(fans_out_nothing)
    wf.step(echo, parent.children).named("after")
    wid = wf.start()
    run_all(drain)
    assert runs(r, "echo") == [[[]]]
    assert WorkflowStatus(wid).state == "succeeded"


def test_a_workflows_keys_and_its_steps_results_live_three_days_by_default(
        drain: Drain, r: redis.Redis) -> None:
    """docs: a workflow's keys live `ttl` seconds from its start (3 days by default), and
    its steps keep their results as long."""
    wf = Workflow("ttl")
    first = wf.step(square, 3)
    wf.step(square, first).named("second")
    wid = wf.start()
    run_all(drain)
    status = WorkflowStatus(wid)
    assert status.state == "succeeded"
    three_days = 3 * 86400
    keys = r.keys(f"wurk:workflow:{wid}*")
    assert f"wurk:workflow:{wid}" in keys and len(keys) >= 4
    for key in keys:
        assert three_days - 60 < r.ttl(key) <= three_days, key
    for step in status.steps.values():
        assert step.jid is not None
        assert three_days - 60 < r.ttl(f"wurk:result:{step.jid}") <= three_days


def test_the_index_of_workflows_loses_the_entries_of_expired_workflows(
        r: redis.Redis, config: wurk.Config) -> None:
    """Every start added its workflow to the `wurk:workflows` index, which nothing ever
    trimmed: its keys expired, its entry stayed for ever (listed as "expired" by the
    Workflows tab). A start now removes the entries of gone workflows from the index's
    oldest end, ten at most."""
    index = config.keys.workflows
    live = Workflow("live")
    live.step(square, 1)
    kept = live.start()
    first = Workflow("first")
    first.step(square, 2)
    old = first.start()
    for key in r.keys(f"wurk:workflow:{old}*"):
        r.delete(key)  # as its ttl would
    r.zadd(index, {f"wf-gone-{n}": n + 1 for n in range(12)})  # older, their keys gone
    r.zadd(index, {kept: 0})  # the oldest entry, its workflow still there: kept
    newest = Workflow("newest")
    newest.step(square, 3)
    new = newest.start()
    assert r.zrange(index, 0, 3) == [kept, "wf-gone-9", "wf-gone-10", "wf-gone-11"]
    assert set(r.zrange(index, 4, -1)) == {old, new}  # (started in one second, maybe)
    another = Workflow("another")
    another.step(square, 4)
    last = another.start()
    assert r.zrange(index, 0, 0) == [kept] and set(r.zrange(index, 1, -1)) == {new, last}


def test_an_index_of_workflows_of_another_type_stops_a_start_before_any_write(
        r: redis.Redis, config: wurk.Config) -> None:
    """The start script added the workflow to its index last, after writing the graph and
    pushing the first steps: an index of another type failed it there (Redis does not roll
    back), and start() raised for a workflow that was running. Now the start refuses first."""
    r.set(config.keys.workflows, "not a sorted set")
    wf = Workflow("refused by its index")
    wf.step(square, 1)
    with pytest.raises(WorkflowError, match=f"workflow {wf.id} cannot start: wurk:workflows "
                                            "holds a string, not a zset"):
        wf.start()
    assert r.exists(config.keys.workflow(wf.id)) == 0 and r.llen("queue:default") == 0


def test_a_workflows_own_ttl_and_callback_queue_are_used_and_result_ttl_wins(
        config: wurk.Config, r: redis.Redis) -> None:
    """docs: `Workflow(name, ttl=, callback_queue=)`: its keys and its steps' results live
    `ttl` seconds from its start (a step's own `result_ttl` wins), and the callbacks of
    its batch (`wf.on`) are pushed to `callback_queue`."""
    drain, callbacks = Drain(config, "default"), Drain(config, "wf-callbacks")
    try:
        wf = Workflow("own ttl", ttl=600, callback_queue="wf-callbacks")
        first = wf.step(square, 3)
        wf.step(square.set(result_ttl=5000), first).named("keeps")
        wf.on("success", Callbacks)
        wid = wf.start()
        drain()
        assert WorkflowStatus(wid).state == "succeeded"
        assert r.llen("queue:wf-callbacks") == 1 and r.llen("queue:default") == 0
        (callback,) = [json.loads(raw) for raw in r.lrange("queue:wf-callbacks", 0, -1)]
        assert callback["args"][0] == "success" and callback["args"][1] == wid
        keys = r.keys(f"wurk:workflow:{wid}*")
        assert f"wurk:workflow:{wid}" in keys and len(keys) >= 4
        for key in keys:
            assert 540 < r.ttl(key) <= 600, key
        steps = WorkflowStatus(wid).steps
        assert 540 < r.ttl(f"wurk:result:{steps['square'].jid}") <= 600
        assert 4940 < r.ttl(f"wurk:result:{steps['keeps'].jid}") <= 5000
        callbacks()  # the callback, on its own queue
        assert runs(r, "cb") == [["success"]]
    finally:
        drain.close()
        callbacks.close()


def test_a_steps_jid_is_a_result_handle_like_any_jobs(drain: Drain, r: redis.Redis) -> None:
    """docs: a step's `jid` is a job like any: `wurk.ResultHandle(status.steps[name].jid)`
    gives its value once it ran (and raises `wurk.JobFailed` for one that died)."""
    wf = Workflow("handles", on_death="continue")
    first = wf.step(square, 7)
    wf.step(echo, first).named("after")
    wf.step(boom).named("dies")
    wid = wf.start()
    steps = WorkflowStatus(wid).steps
    assert steps["after"].state == "waiting" and steps["after"].jid  # its jid from the start
    handles = {name: wurk.ResultHandle(str(steps[name].jid)) for name in ("square", "after")}
    run_all(drain)
    assert handles["square"].result(timeout=5) == 49
    assert handles["after"].result(timeout=5) == [49]
    with pytest.raises(wurk.JobFailed):
        wurk.ResultHandle(str(steps["dies"].jid)).result(timeout=5)
    assert WorkflowStatus(wid).state == "failed"


class Callbacks(wurk.Job, name="WfTest::Callbacks"):
    def on_success(self, status: wurk.BatchStatus, options: dict[str, Any]) -> None:
        note("cb", "success")

    def on_death(self, status: wurk.BatchStatus, options: dict[str, Any]) -> None:
        note("cb", "death")

    def on_complete(self, status: wurk.BatchStatus, options: dict[str, Any]) -> None:
        note("cb", "complete")


def test_the_death_callback_fires_once_and_success_never(drain: Drain, r: redis.Redis) -> None:
    """docs: when steps die, the batch's `death` callback fires once; `success` never
    fires (and `complete` once every step that was pushed has run)."""
    wf = Workflow("callbacks", on_death="continue")
    wf.step(boom)
    wf.step(boom)
    wf.step(square, 2)
    wf.on("success", Callbacks).on("death", Callbacks).on("complete", Callbacks)
    wid = wf.start()
    run_all(drain)
    run_all(drain)  # the callbacks' own jobs
    assert WorkflowStatus(wid).state == "failed"
    assert sorted(runs(r, "cb")) == [["complete"], ["death"]]


@wurk.job(name="WfTest::dies_once", retry=0)
def dies_once() -> int:
    """Dies on its first run; a run after (its retry from the dead set) succeeds."""
    with wurk.redis() as conn:
        if conn.call("INCR", "dies_once") == 1:
            raise RuntimeError("this step dies, once")
    return 1


@pytest.mark.parametrize("policy", ["stop", "continue"])
def test_a_dead_step_retried_by_hand_to_success_fires_no_success_of_its_failed_workflow(
        drain: Drain, r: redis.Redis, policy: str) -> None:
    """docs: when a step dies, `success` never fires. A dead step retried from the dead set
    (the dashboard's Retry) that then succeeded counted nothing in its workflow — it stays
    `failed`, the steps after it stopped — but counted as a success in its batch, which then
    fired `success` for the failed workflow."""
    from wurk.api.sets import DeadSet

    wf = Workflow("retried by hand", on_death=policy)  # type: ignore[arg-type]
    first = wf.step(dies_once)
    wf.step(echo, first).named("after")
    wf.on("success", Callbacks).on("death", Callbacks).on("complete", Callbacks)
    wid = wf.start()
    run_all(drain)
    assert DeadSet().retry_all() == 1
    run_all(drain)  # the step, now succeeding, and the callbacks' own jobs
    assert r.get("dies_once") == "2"
    status = WorkflowStatus(wid)
    assert status.state == "failed" and status.steps["dies_once"].state == "dead"
    assert not wurk.BatchStatus(wid).succeeded
    assert sorted(runs(r, "cb")) == [["complete"], ["death"]]


def test_a_cancelled_workflow_fires_no_success(drain: Drain, r: redis.Redis) -> None:
    """A cancel takes the queued steps out of the workflow's batch: with none left pending
    the batch completed — and succeeded, firing `success` for a workflow whose steps never
    ran. So did a cancel while a step was running, once that step returned."""
    wf = Workflow("cancelled, no success")
    first = [wf.step(square, i) for i in range(2)]
    wf.step(gather, first)
    wf.on("success", Callbacks).on("complete", Callbacks)
    wid = wf.start()
    assert cancel(wid) == "running"
    running = Workflow("cancelled while a step runs")
    running.step(square, 5)
    running.on("success", Callbacks)
    other = running.start()
    raw = r.rpop("queue:default")  # the step, fetched: running while the cancel comes
    assert cancel(other) == "running"
    r.rpush("queue:default", raw)
    run_all(drain)
    assert WorkflowStatus(wid).state == "cancelled"
    assert WorkflowStatus(other).state == "cancelled"
    assert wurk.BatchStatus(wid).complete
    assert not wurk.BatchStatus(wid).succeeded and not wurk.BatchStatus(other).succeeded
    assert runs(r, "cb") == [["complete"]]


@wurk.job(name="WfTest::unstorable", retry=0)
def unstorable() -> object:
    return object()


def test_a_result_that_is_not_json_fails_the_step_with_unstorable_result(
        drain: Drain, r: redis.Redis) -> None:
    wf = Workflow("unstorable")
    bad = wf.step(unstorable)
    wf.step(echo, bad).named("after")
    wid = wf.start()
    run_all(drain)
    status = WorkflowStatus(wid)
    assert status.steps["unstorable"].state == "dead" and status.state == "failed"
    (dead,) = [json.loads(raw) for raw in r.zrange("dead", 0, -1)]
    assert dead["error_class"] == "wurk.UnstorableResult"
    assert runs(r, "echo") == []


def test_a_step_that_runs_after_its_workflow_expired_counts_nothing(
        drain: Drain, r: redis.Redis) -> None:
    """docs: a step that runs after the workflow's keys expired finds no workflow: it counts
    nothing (its job still succeeds; nothing is written back)."""
    wf = Workflow("expired")
    first = wf.step(square, 3)
    wf.step(echo, first).named("after")
    wid = wf.start()
    for key in r.keys(f"wurk:workflow:{wid}*"):
        r.delete(key)  # as the TTL would
    run_all(drain)
    assert drain.counters.failed == 0 and r.zcard("retry") == 0 and r.zcard("dead") == 0
    assert r.keys(f"wurk:workflow:{wid}*") == []
    assert runs(r, "echo") == [] and r.llen("queue:default") == 0


def test_a_step_dropped_unrun_by_expires_in_is_dead_and_its_batch_never_succeeds(
        drain: Drain, r: redis.Redis) -> None:
    """docs: a step with `expires_in` dropped unrun is `dead` (it will never run): the
    policy applies to the steps after it, the workflow ends `failed`, and its batch fires
    `death` and `complete`, never `success`. (It used to count nothing in the workflow but
    as a success in its batch: the workflow stayed `running` for ever while its `success`
    callback fired.)"""
    import time

    wf = Workflow("dropped")
    first = wf.step(square.set(expires_in=0.2), 3)
    wf.step(echo, first).named("after")
    wf.on("success", Callbacks).on("death", Callbacks).on("complete", Callbacks)
    wid = wf.start()
    time.sleep(0.3)
    run_all(drain)
    run_all(drain)  # the callbacks' own jobs
    status = WorkflowStatus(wid)
    assert r.get("stat:expired") == "1"
    assert status.steps["square"].state == "dead" and status.state == "failed"
    assert status.steps["after"].state == "stopped" and runs(r, "echo") == []
    assert not wurk.BatchStatus(wid).succeeded
    assert sorted(runs(r, "cb")) == [["complete"], ["death"]]


def test_a_step_dropped_unrun_by_expires_in_gives_null_under_continue(
        drain: Drain, r: redis.Redis) -> None:
    """docs: under `continue`, the steps after an expired step run with `null` for it."""
    import time

    wf = Workflow("dropped-continue", on_death="continue")
    first = wf.step(square.set(expires_in=0.2), 3)
    wf.step(echo, first).named("after")
    wid = wf.start()
    time.sleep(0.3)
    run_all(drain)
    status = WorkflowStatus(wid)
    assert status.steps["square"].state == "dead" and status.state == "failed"
    assert runs(r, "echo") == [[None]]


def test_a_steps_expires_in_counts_from_when_its_workflow_pushes_it(
        drain: Drain, r: redis.Redis) -> None:
    """expiring-jobs.md: `expires_in` counts from the push. A step is pushed when what it
    waits for is done, not when its workflow starts: a step of an hour-old workflow with
    `expires_in=60` runs when it comes due (its deadline was counted from the workflow's
    start, and it was dropped unrun the moment it was pushed)."""
    import re
    import time

    wf = Workflow("late-step")
    first = wf.step(square, 3)
    wf.step(echo.set(expires_in=60), first).named("after")
    wid = wf.start()
    key = f"wurk:workflow:{wid}:steps"
    hour_ago = time.time() - 3600
    for step, template in r.hgetall(key).items():  # a workflow started an hour ago
        r.hset(key, step, re.sub(r'"created_at":[0-9.]+', f'"created_at":{hour_ago}',
                                 template))
    run_all(drain)
    assert runs(r, "echo") == [[9]] and r.get("stat:expired") is None
    assert WorkflowStatus(wid).state == "succeeded"


# -- Redis unreachable when a step ends (workflows.md: "sent again for about 3.5 s") ----------

class CountWaits:
    """Stands in for ``time`` in ``wurk.workflow.transitions``: records each wait between
    the count's attempts (without waiting) and ends the outage once ``until`` seconds of
    them have passed (never, with ``until=None``)."""

    def __init__(self, proxy: Any, until: float | None) -> None:
        self.proxy, self.until = proxy, until
        self.waits: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        if self.until is not None and sum(self.waits) >= self.until:
            self.proxy.restore()


def test_a_steps_count_redis_refuses_is_sent_again_and_lands_once_redis_is_back(
        redis_server: Server, r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """The outage begins as the step's count is sent (its result is stored already): the
    count waits it out and lands, the step runs once and its dependant is pushed."""
    from contextlib import contextmanager

    from tests.helpers.proxy import FaultProxy
    from wurk.errors import RedisUnavailable
    from wurk.workflow import transitions

    real_lent = transitions.lent_redis
    with FaultProxy(redis_server.port) as proxy:
        monkeypatch.setenv("REDIS_URL", proxy.url)  # REDIS_URL wins over configure's
        config = wurk.configure()
        wf = Workflow("outage")
        wf.step(echo, wf.step(square, 3))
        wid = wf.start()
        cut: list[bool] = []

        @contextmanager
        def lent_in_outage(cfg: wurk.Config) -> Iterator[Any]:
            if not cut:  # the first count: Redis unreachable from now on
                cut.append(True)
                proxy.drop()
                proxy.cut()
            with real_lent(cfg) as conn:
                yield conn

        monkeypatch.setattr(transitions, "lent_redis", lent_in_outage)
        waits = CountWaits(proxy, until=1.0)  # an outage of a second: a restart
        monkeypatch.setattr(transitions, "time", waits)
        drain = Drain(config)  # its parts: its loop's own client is cut with the rest
        try:
            while r.llen("queue:default"):
                try:
                    unit = drain.fetcher.fetch(1)
                except RedisUnavailable:  # its connection was cut too: a worker fetches again
                    continue
                assert unit is not None
                drain.runner.run(unit)
        finally:
            drain.close()
            config.close()
    assert waits.waits == [0.1, 0.25, 0.5, 1.0]  # sent again until Redis answered
    assert runs(r, "echo") == [[9]]  # counted once: its dependant pushed, given its result
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    assert WorkflowStatus(wid, config=wurk.configure()).state == "succeeded"
    assert 3.0 <= sum(transitions.COUNT_RETRIES) <= 4.0  # "about 3.5 s" in all


def test_a_count_still_refused_after_about_three_and_a_half_seconds_raises(
        redis_server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past its waits the count gives up with ``RedisUnavailable``: the step's run fails, to
    be retried like any failure (the count is idempotent per step)."""
    from tests.helpers.proxy import FaultProxy
    from wurk.errors import RedisUnavailable
    from wurk.workflow import transitions

    with FaultProxy(redis_server.port) as proxy:
        proxy.drop()
        monkeypatch.setenv("REDIS_URL", proxy.url)  # REDIS_URL wins over a Config's own
        config = wurk.Config()
        waits = CountWaits(proxy, until=None)
        monkeypatch.setattr(transitions, "time", waits)
        attempts_before = proxy.accepted
        try:
            with pytest.raises(RedisUnavailable):
                transitions.finish_retried(config, "wf-gone", "step", "success", "1")
        finally:
            config.close()
        assert waits.waits == list(transitions.COUNT_RETRIES)
        assert 3.0 <= sum(waits.waits) <= 4.0
        assert proxy.accepted - attempts_before >= len(transitions.COUNT_RETRIES) + 1


@wurk.job(name="WfTest::flaky", retry=3)
def flaky() -> int:
    """Fails while the key ``fail:flaky`` exists."""
    note("flaky")
    with wurk.redis() as conn:
        if conn.call("EXISTS", "fail:flaky"):
            raise RuntimeError("flaky was told to fail")
    return 7


def flaky_workflow(drain: Drain, r: redis.Redis) -> str:
    """flaky -> echo(flaky), run until flaky's first run failed and waits in the retry set."""
    r.set("fail:flaky", 1)
    wf = Workflow("flaky")
    first = wf.step(flaky)
    wf.step(echo, first)
    wid = wf.start()
    run_all(drain)
    assert r.zcard("retry") == 1 and runs(r, "flaky") == [[]]
    return wid


def test_a_failure_with_a_retry_due_changes_nothing_and_the_step_runs_again(
        drain: Drain, r: redis.Redis) -> None:
    """workflows.md: "A failure with a retry due changes nothing: the step stays queued and
    runs again"."""
    from wurk.api.sets import RetrySet

    wid = flaky_workflow(drain, r)
    status = WorkflowStatus(wid)
    assert status.state == "running"
    assert (status.steps["flaky"].state, status.steps["echo"].state) == ("queued", "waiting")
    assert runs(r, "echo") == []
    r.delete("fail:flaky")
    assert RetrySet().retry_all() == 1
    run_all(drain)
    status = WorkflowStatus(wid)
    assert status.state == "succeeded" and status.result("echo") == [7]
    assert runs(r, "flaky") == [[], []] and runs(r, "echo") == [[7]]


def test_cancel_cancels_a_step_in_the_retry_set_with_wurk_cancel(
        drain: Drain, r: redis.Redis) -> None:
    """workflows.md: on cancel, steps "in the retry or scheduled set" are cancelled with
    wurk.cancel: taken out, never run again."""
    wid = flaky_workflow(drain, r)
    assert cancel(wid) == "running"
    assert r.zcard("retry") == 0
    status = WorkflowStatus(wid)
    assert status.state == "cancelled"
    assert {s.state for s in status.steps.values()} == {"cancelled"}
    run_all(drain)
    assert runs(r, "flaky") == [[]] and runs(r, "echo") == []


def _steps_among_plain_jobs(r: redis.Redis, at: tuple[int, ...], plain: int) -> list[str]:
    """A workflow of len(at) queued steps, put at those positions from the queue's oldest
    end among ``plain`` plain jobs (in a queue emptied first); the steps' jids, then the
    workflow's id."""
    r.delete("queue:default")
    wf = Workflow("cancel among many")
    for i in range(len(at)):
        wf.step(square, i).named(f"s{i}")
    wid = wf.start()
    steps = r.lrange("queue:default", 0, -1)[::-1]  # oldest first
    for n in range(plain):
        square.perform_async(1000 + n)
    fillers = r.lrange("queue:default", 0, plain - 1)[::-1]
    order = list(fillers)
    for position, payload in zip(at, steps, strict=True):
        order.insert(position, payload)
    r.delete("queue:default")
    r.lpush("queue:default", *order)  # the first of ``order`` ends up the oldest
    assert r.lrange("queue:default", -1, -1) == [order[0]]
    return [str(WorkflowStatus(wid).steps[f"s{i}"].jid) for i in range(len(at))] + [wid]


def test_cancel_takes_steps_out_from_among_many_other_jobs(
        drain: Drain, r: redis.Redis) -> None:
    """docs: on cancel, steps still in a queue are taken out of it by the script — here
    spread over 3 chunks of its read, the other jobs left in their order."""
    *jids, wid = _steps_among_plain_jobs(r, (0, 150, 302), 300)
    before = [raw for raw in r.lrange("queue:default", 0, -1) if '"wf":' not in raw]
    assert cancel(wid) == "running"
    assert r.lrange("queue:default", 0, -1) == before and len(before) == 300
    assert {s.state for s in WorkflowStatus(wid).steps.values()} == {"cancelled"}
    assert jids and wurk.BatchStatus(wid).complete


def test_cancels_script_reads_a_bounded_part_of_the_queues(
        drain: Drain, r: redis.Redis, config: wurk.Config,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancel's script reads at most CANCEL_SCAN queue entries, never a whole queue of a
    million jobs while Redis waits: a queued step past them is handed back to be cancelled
    with `wurk.cancel`, which takes it out all the same."""
    from wurk.workflow import transitions

    monkeypatch.setattr(transitions, "CANCEL_SCAN", 100, raising=False)
    *jids, wid = _steps_among_plain_jobs(r, (50, 250), 300)
    with wurk.redis() as conn:
        _, removed, others = transitions.cancel(conn, config, wid)
    assert removed == [jids[0]] and others == [jids[1]]
    *jids, wid = _steps_among_plain_jobs(r, (50, 250), 300)
    assert cancel(wid) == "running"  # the public cancel: the one past them goes too
    assert not [raw for raw in r.lrange("queue:default", 0, -1) if wid in raw]
    run_all(drain)
    assert {s.state for s in WorkflowStatus(wid).steps.values()} == {"cancelled"}


def test_a_cancel_takes_its_queued_steps_out_of_the_batch_in_the_same_script(
        drain: Drain, r: redis.Redis, config: wurk.Config,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The queued steps a cancel takes out of their queue leave the workflow's batch in the
    same script call: a cancel cut short right after it (Redis gone, the process killed)
    used to leave them out of the queue but pending in the batch, which then never
    completed. Here the next call the cancel makes fails."""
    from wurk.batch import accounting

    def cut_short(*args: Any, **kwargs: Any) -> int:
        raise wurk.RedisUnavailable("the connection dropped after the cancel's script")

    wf = Workflow("cut short")
    first = [wf.step(square, i) for i in range(3)]
    wf.step(gather, first)
    wf.on("complete", Callbacks)
    wid = wf.start()
    monkeypatch.setattr(accounting, "remove", cut_short)
    monkeypatch.setattr(accounting, "fired", cut_short, raising=False)
    with pytest.raises(wurk.RedisUnavailable):
        cancel(wid)
    monkeypatch.undo()
    assert not [raw for raw in r.lrange("queue:default", 0, -1) if '"wf":' in raw]
    assert WorkflowStatus(wid).state == "cancelled"
    status = wurk.BatchStatus(wid)
    assert status.complete and status.pending == 0 and status.total == 0
    run_all(drain)  # the complete callback, pushed by that same script
    assert runs(r, "cb") == [["complete"]]


@pytest.mark.parametrize("bad", ["queue:zz-broken", "queues"])
def test_a_queue_key_of_another_type_leaves_no_cancel_half_way(
        drain: Drain, r: redis.Redis, bad: str, caplog: pytest.LogCaptureFixture) -> None:
    """A cancel read every known queue with LRANGE (and the queues set with SMEMBERS) after
    it had set the workflow cancelled and (queue by queue) taken steps out: a key of another
    type failed it there (Redis does not roll back), so the steps taken out never left the
    workflow's batch, which stayed pending for good. Now such a key is passed over, named in
    a warning; the steps are taken out of the other queues and out of the batch."""
    wf = Workflow("beside a broken queue")
    for i in range(3):
        wf.step(square, i)
    wid = wf.start()
    if bad == "queues":
        r.delete("queues")
    else:
        r.sadd("queues", "zz-broken")
    r.set(bad, "not a list or set")
    with caplog.at_level(logging.WARNING, logger="wurk"):
        assert cancel(wid) == "running"
    assert not [raw for raw in r.lrange("queue:default", 0, -1) if '"wf":' in raw]
    assert r.get(bad) == "not a list or set"
    assert WorkflowStatus(wid).state == "cancelled"
    batch = wurk.BatchStatus(wid)
    assert batch.pending == 0  # (with no queues set its complete callback cannot be pushed)
    assert batch.complete or bad == "queues"
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert any(f"{bad} holds a string, not a {'set' if bad == 'queues' else 'list'} (written "
               "by something else); the cancelled steps are not looked for there" in w
               for w in warned), warned
    run_all(drain)
    assert r.llen("queue:default") == 0


def test_wurk_cancel_of_a_steps_jid_is_a_death(drain: Drain, r: redis.Redis) -> None:
    """workflows.md: a step "dies" when `wurk.cancel` is called on its jid: it is dead, the
    workflow ends failed, and under "stop" the step after it is stopped."""
    wf = Workflow("cancelled step")
    first = wf.step(square, 3)
    wf.step(echo, first)
    wid = wf.start()
    jid = WorkflowStatus(wid).steps["square"].jid
    assert jid is not None and wurk.cancel(jid).removed_from == ["queue:default"]
    run_all(drain)
    status = WorkflowStatus(wid)
    assert (status.steps["square"].state, status.steps["echo"].state) == ("dead", "stopped")
    assert status.state == "failed" and runs(r, "echo") == []


def test_a_steps_own_result_ttl_wins_over_the_workflows(drain: Drain, r: redis.Redis) -> None:
    """workflows.md: "its steps keep their results as long (a step's own result_ttl
    wins)"."""
    wf = Workflow("own ttl")
    wf.step(square.set(result_ttl=120), 3).named("short")
    wf.step(square, 4).named("long")
    wid = wf.start()
    run_all(drain)
    steps = WorkflowStatus(wid).steps
    assert 60 < r.ttl(f"wurk:result:{steps['short'].jid}") <= 120
    assert r.ttl(f"wurk:result:{steps['long'].jid}") > 3 * 86400 - 60


# -- async steps: the same counts through the async path (an embedded worker's lane) -----------
@wurk.job(name="WfTest::asquare")
async def asquare(n: int) -> int:
    return n * n


@wurk.job(name="WfTest::asplit")
async def asplit(count: int) -> int:
    fan_out(square, [[i] for i in range(count)])
    return count


@wurk.job(name="WfTest::aboom", retry=False)
async def aboom() -> None:
    raise RuntimeError("this async step dies")


def async_config(redis_server: Server) -> wurk.Config:
    return wurk.configure(redis_url=redis_server.url, heartbeat_interval=0.2,
                          fetch_timeout=0.2, timeout=1, shutdown_grace=0.5,
                          scheduler_initial_wait=0, concurrency=2, tag="workflows-async")


@pytest.fixture
def aworker(redis_server: Server) -> Iterator[wurk.InProcessWorker]:
    running = wurk.embed(async_config(redis_server))
    yield running
    running.stop()


def expire_queued(r: redis.Redis, queue: str = "queue:default") -> None:
    """Move every queued job's deadline a minute into the past, as time passing would (a
    step's counts from its ``created_at``, a pushed job's is its ``expires_at``)."""
    for index, raw in enumerate(r.lrange(queue, 0, -1)):
        payload = json.loads(raw)
        for key in ("expires_at", "created_at"):
            if key in payload:  # integer ms or float seconds
                at = payload[key]
                payload[key] = at - 60_000 if isinstance(at, int) else at - 60
        r.lset(queue, index, json.dumps(payload))


def test_an_async_step_dropped_unrun_by_expires_in_is_dead_and_its_batch_never_succeeds(
        redis_server: Server, r: redis.Redis) -> None:
    """As its sync twin: an ``async def`` step dropped unrun as expired (on the async walk,
    ``LimitsMiddleware.acall``) is dead, the workflow fails, its batch fires `death` and
    `complete`, never `success`."""
    wf = Workflow("adropped")
    first = wf.step(asquare.set(expires_in=30), 3)
    wf.step(echo, first).named("after")
    wf.on("success", Callbacks).on("death", Callbacks).on("complete", Callbacks)
    wid = wf.start()
    expire_queued(r)
    worker = wurk.embed(async_config(redis_server))
    try:
        wait_until(lambda: len(runs(r, "cb")) >= 2, what="the death and complete callbacks")
        wait_until(lambda: WorkflowStatus(wid).state == "failed", what="the workflow to fail")
    finally:
        worker.stop()
    status = WorkflowStatus(wid)
    assert r.get("stat:expired") == "1"
    assert status.steps["asquare"].state == "dead"
    assert status.steps["after"].state == "stopped" and runs(r, "echo") == []
    assert not wurk.BatchStatus(wid).succeeded
    assert sorted(runs(r, "cb")) == [["complete"], ["death"]]


def test_an_async_step_dropped_unrun_by_expires_in_gives_null_under_continue(
        redis_server: Server, r: redis.Redis) -> None:
    wf = Workflow("adropped-continue", on_death="continue")
    first = wf.step(asquare.set(expires_in=30), 3)
    wf.step(echo, first).named("after")
    wid = wf.start()
    expire_queued(r)
    worker = wurk.embed(async_config(redis_server))
    try:
        wait_until(lambda: runs(r, "echo") != [], what="the step after the expired one")
    finally:
        worker.stop()
    status = WorkflowStatus(wid)
    assert status.steps["asquare"].state == "dead" and status.state == "failed"
    assert runs(r, "echo") == [[None]]


def test_async_steps_fan_out_fan_in_and_count_once(aworker: wurk.InProcessWorker,
                                                   r: redis.Redis) -> None:
    """An async step's fan_out (its task's context) and value are counted as a sync one's."""
    wf = Workflow("afan")
    parts = wf.step(asplit, 4)
    total = wf.step(gather, parts.children)
    wf.step(final, total, parts).named("final")
    wid = wf.start()
    wait_until(lambda: WorkflowStatus(wid).state == "succeeded", what="the workflow")
    assert runs(r, "gather") == [[[0, 1, 4, 9]]]
    assert WorkflowStatus(wid).result("final") == "4:14"
    # The last step's batch count comes after its workflow state (the batch link is
    # outside the step's): under load the test read the batch in between.
    wait_until(lambda: wurk.BatchStatus(wid).succeeded, what="the workflow's batch")


def test_a_dying_async_step_stops_its_dependants_and_fires_death_once(
        aworker: wurk.InProcessWorker, r: redis.Redis) -> None:
    wf = Workflow("adeath")
    dies = wf.step(aboom)
    wf.step(echo, dies).named("after")
    wf.on("success", Callbacks).on("death", Callbacks).on("complete", Callbacks)
    wid = wf.start()
    wait_until(lambda: len(runs(r, "cb")) >= 2, what="the death and complete callbacks")
    status = WorkflowStatus(wid)
    assert status.steps["aboom"].state == "dead" and status.state == "failed"
    assert status.steps["after"].state == "stopped" and runs(r, "echo") == []
    assert sorted(runs(r, "cb")) == [["complete"], ["death"]]


@wurk.job(name="WfTest::aflaky", retry=3)
async def aflaky() -> int:
    """``flaky``'s async twin."""
    note("aflaky")
    async with wurk.redis() as conn:
        if await conn.call("EXISTS", "fail:flaky"):
            raise RuntimeError("aflaky was told to fail")
    return 7


def test_an_async_steps_failure_with_a_retry_due_changes_nothing_and_it_runs_again(
        config: wurk.Config, r: redis.Redis) -> None:
    """test_a_failure_with_a_retry_due_changes_nothing_and_the_step_runs_again, the step
    ``async def`` on the async walk."""
    from wurk.api.sets import RetrySet

    r.set("fail:flaky", 1)
    wf = Workflow("aflaky")
    first = wf.step(aflaky)
    wf.step(echo, first)
    wid = wf.start()
    adrain = AsyncDrain(config)
    try:
        adrain()
        assert r.zcard("retry") == 1 and runs(r, "aflaky") == [[]]
        status = WorkflowStatus(wid)
        assert status.state == "running"
        assert (status.steps["aflaky"].state, status.steps["echo"].state) == ("queued",
                                                                              "waiting")
        r.delete("fail:flaky")
        assert RetrySet().retry_all() == 1
        while adrain():
            pass
    finally:
        adrain.close()
    status = WorkflowStatus(wid)
    assert status.state == "succeeded" and status.result("echo") == [7]
    assert runs(r, "aflaky") == [[], []] and runs(r, "echo") == [[7]]
    assert wurk.BatchStatus(wid).succeeded


workflow_tenant: contextvars.ContextVar[str] = contextvars.ContextVar("workflow_tenant")


@wurk.job(name="WfTest::tenant_callback")
def tenant_callback(status: wurk.BatchStatus, options: dict[str, Any]) -> None:
    note("tenant", workflow_tenant.get("<unset>"))


def test_callbacks_run_in_the_context_the_workflow_was_started_in(
        config: wurk.Config, drain: Drain, r: redis.Redis) -> None:
    """A plain batch's callbacks carry the persisted context variables set where it was
    created; a workflow's batch fired its callbacks without them (a tenant or request id
    unset in the callback), though the step that fired them ran in another context."""
    wurk.context.persist(workflow_tenant, config=config)
    token = workflow_tenant.set("acme")
    try:
        wf = Workflow("tenant")
        wf.step(square, 3)
        wf.on("success", tenant_callback).on("complete", tenant_callback)
        wid = wf.start()
    finally:
        workflow_tenant.reset(token)
    run_all(drain)
    run_all(drain)  # the callbacks' own jobs
    assert WorkflowStatus(wid).state == "succeeded"
    assert runs(r, "tenant") == [["acme"], ["acme"]]
    assert json.loads(str(r.hget(f"b-{wid}", "context"))) == {"workflow_tenant": "acme"}
