"""The Workflows tab: the list, a workflow's graph drawn as SVG with each step's state, its
JSON twin, hostile stored data (a corrupted workflow, an unknown wid, a huge graph) —
through TestClient, and once in real headless Chromium."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

import wurk
from tests.helpers.server import Server
from tests.web.conftest import XSS
from tests.web.live import browser_context, serve
from wurk.keys import Keys
from wurk.web import create_app
from wurk.web.workflows import GONE, GROUP_OVER, NODES_DRAWN, layout
from wurk.workflow import Workflow, WorkflowStatus, fan_out


@wurk.job(name="WebWf::square")
def square(n: int) -> int:
    return n * n


@wurk.job(name="WebWf::split")
def split(count: int) -> int:
    fan_out(square, [[i] for i in range(count)])
    return count


@wurk.job(name="WebWf::total")
def total(values: list[int]) -> int:
    return sum(values)


@wurk.job(name="WebWf::report")
def report(*values: Any) -> str:
    return repr(values)


@wurk.job(name="WebWf::boom", retry=False)
def boom() -> None:
    raise RuntimeError("a step that dies")


@pytest.fixture
def worker_config(redis_server: Server) -> Iterator[wurk.Config]:
    config = wurk.configure(redis_url=redis_server.url, heartbeat_interval=0.2,
                            fetch_timeout=0.2, timeout=1, shutdown_grace=0.5,
                            scheduler_initial_wait=0, concurrency=5, tag="web-workflows")
    yield config


def run_by_a_worker(config: wurk.Config) -> str:
    """fan-out 1,000 -> fan-in -> report, a nested workflow beside it, and a dead branch:
    run by an embedded worker to its end."""
    inner = Workflow("inner")
    inner.step(square, 7).named("seven")
    wf = Workflow("web graph", on_death="continue")
    parts = wf.step(split, 1000).named("split")
    summed = wf.step(total, parts.children).named("sum")
    nested = wf.step(inner)
    dies = wf.step(boom).named("dies")
    wf.step(report, summed, nested, dies).named("report")
    wid = wf.start()
    worker = wurk.embed(config)
    try:
        assert WorkflowStatus(wid).join(timeout=60).state == "failed"  # "dies" died
    finally:
        worker.stop()
    return wid


def boxes(page: str) -> dict[str, str]:
    """Each drawn box's label -> its state."""
    return dict(re.findall(r'data-step="([^"]*)" data-state="([^"]*)"', page))


def test_a_workflow_run_by_a_worker_is_drawn_with_each_steps_state(
        worker_config: wurk.Config, client: TestClient) -> None:
    wid = run_by_a_worker(worker_config)
    listing = client.get("/workflows/")
    assert listing.status_code == 200 and wid in listing.text and "web graph" in listing.text
    started = time.process_time()  # this process's CPU: what a loaded machine does not swell
    page = client.get(f"/workflows/{wid}")
    took = time.process_time() - started
    assert page.status_code == 200 and "<svg" in page.text
    drawn = boxes(page.text)
    assert drawn == {"split": "succeeded", "split[*] ×1,000": "group", "sum": "succeeded",
                     "inner": "succeeded", "inner/seven": "succeeded", "dies": "dead",
                     "report": "succeeded"}
    assert "1,000 succeeded" in page.text  # the fan-out's box counts its children
    assert "workflow · succeeded" in page.text  # the nested workflow's own box
    assert page.text.count('class="wf-edge') == 6  # split→its children→sum→report,
    # seven→inner→report, dies→report
    assert took < 3.0, f"a 1,000-child fan-out took {took:.2f} s of CPU to draw"
    assert client.get("/").status_code == 200 and "Workflows" in client.get("/").text
    one = client.get(f"/api/workflows/{wid}").json()
    assert one["state"] == "failed" and one["total"] == 1005
    assert {s["name"]: s["state"] for s in one["steps"]}["dies"] == "dead"
    assert client.get("/api/workflows/").json()["workflows"][0]["wid"] == wid
    batch = client.get(f"/batches/{wid}")  # the workflow's batch links its graph
    assert batch.status_code == 200 and f'href="/workflows/{wid}"' in batch.text


def test_an_unknown_or_corrupted_workflow_answers_a_sentence_never_a_500(
        config: wurk.Config, client: TestClient, r: redis.Redis) -> None:
    missing = client.get("/workflows/wf-nothing")
    assert missing.status_code == 404 and GONE in missing.text
    assert client.get("/api/workflows/wf-nothing").status_code == 404
    keys = Keys()
    wf = Workflow(XSS[:50].replace("/", "_"))
    first = wf.step(square, 2)
    wf.step(total, [first]).named("after")
    wid = wf.start()
    r.hset(keys.workflow(wid), mapping={"state": XSS, "total": "many", "created_at": "nan"})
    r.hset(keys.workflow(wid, "state"), mapping={"after": XSS, XSS: "queued",
                                                 "a[1][2][x]": "dead"})
    r.hset(keys.workflow(wid, "then"), mapping={"square": "after square", "after": "square",
                                                "x" * 50_000: "y " * 50_000})
    r.hset(keys.workflow(wid, "subs"), "after", "stop square nothing")
    page = client.get(f"/workflows/{wid}")
    assert page.status_code == 200 and XSS not in page.text
    assert "unreadable" in page.text  # the state no workflow has, said so
    r.delete(keys.workflow(wid, "state"))
    r.set(keys.workflow(wid, "state"), "not a hash")
    page = client.get(f"/workflows/{wid}")
    assert page.status_code == 200 and "its state is a string, not a hash" in page.text
    r.delete(keys.workflow(wid))
    r.set(keys.workflow(wid), "not a hash")
    page = client.get(f"/workflows/{wid}")
    assert page.status_code == 200 and "cannot be read" in page.text
    assert client.get(f"/api/workflows/{wid}").json()["problem"].startswith("its record")
    r.zadd(keys.workflows, {"": 1, "x" * 5000: 2, XSS: 3})
    listing = client.get("/workflows/")
    assert listing.status_code == 200 and XSS not in listing.text
    r.delete(keys.workflows)
    r.set(keys.workflows, "not a zset")
    assert "not a sorted set" in client.get("/workflows/").text


def test_a_huge_graph_is_drawn_in_part_and_fast(config: wurk.Config, client: TestClient,
                                                 r: redis.Redis) -> None:
    """3,000 steps in a chain (3,000 columns, none alike) and 5,000 independent ones: at
    most NODES_DRAWN boxes, the rest said, in bounded time."""
    keys = Keys()
    wid = "wf-huge"
    r.hset(keys.workflow(wid), mapping={"state": "running", "total": 8000, "pending": 8000})
    states = {f"c{n}": "waiting" for n in range(3000)} | {f"g{n}": "queued"
                                                          for n in range(5000)}
    r.hset(keys.workflow(wid, "state"), mapping=states)
    r.hset(keys.workflow(wid, "then"), mapping={f"c{n}": f"c{n + 1}" for n in range(2999)})
    r.zadd(keys.workflows, {wid: time.time()})
    started = time.monotonic()
    page = client.get(f"/workflows/{wid}")
    assert page.status_code == 200
    assert time.monotonic() - started < 5.0
    assert len(boxes(page.text)) == NODES_DRAWN
    assert "boxes are not drawn" in page.text
    assert "g0 …×5,000" in page.text  # the independent ones: one box


@pytest.mark.parametrize("shape", ["fan-out's dependants", "deep names", "subs' leaves"])
def test_a_hostile_graph_costs_the_page_bounded_time(config: wurk.Config, client: TestClient,
                                                     r: redis.Redis, shape: str) -> None:
    """Hashes no workflow writes, each within the read caps, that made the drawing do work
    by their product: 10,000 children each naming 2,000 dependants (20 million pairs
    looked at), 10,000 names nested 390 deep (each sorted by walking every level), or
    10,000 nested workflows each naming 2,000 leaves."""
    keys = Keys()
    wid = "wf-hostile"
    r.hset(keys.workflow(wid), mapping={"state": "running", "total": 1, "pending": 1})
    many = " ".join(f"x{n}" for n in range(2000))
    if shape == "fan-out's dependants":
        states = {"p": "running", **{f"p[{n}]": "queued" for n in range(9999)}}
        r.hset(keys.workflow(wid, "then"), mapping={"p[*]": many, **{
            f"p[{n}]": many for n in range(9999)}})
    elif shape == "deep names":
        states = {"x" + "[0]" * 390 + f"[{n}]": "queued" for n in range(10_000)}
    else:
        states = {f"s{n}": "running" for n in range(10_000)}
        r.hset(keys.workflow(wid, "subs"), mapping={name: f"stop {many}" for name in states})
    r.hset(keys.workflow(wid, "state"), mapping=states)
    started = time.process_time()  # this process's CPU: what a loaded machine does not swell
    page = client.get(f"/workflows/{wid}")
    took = time.process_time() - started
    assert page.status_code == 200 and "<svg" in page.text
    # Bounded, not fast: the shapes took minutes before; a loaded 2-core machine never
    # needs ten seconds for the capped drawing.
    assert took < 10.0, f"{shape}: {took:.2f} s"


def test_layout_groups_only_steps_alike_beyond_the_threshold() -> None:
    few = {"p": "succeeded", **{f"p[{n}]": "succeeded" for n in range(GROUP_OVER)}}
    graph = layout(few, {"p[*]": "q"}, {})
    assert len(graph.nodes) == GROUP_OVER + 1  # q is not a step here: no box
    many = {"p": "succeeded", "q": "waiting",
            **{f"p[{n}]": "queued" if n % 2 else "dead" for n in range(GROUP_OVER + 1)}}
    graph = layout(many, {"p[*]": "q"}, {})
    assert [n.kind for n in graph.nodes] == ["job", "group", "job"]
    assert [n.column for n in graph.nodes] == [0, 1, 2]
    assert graph.nodes[1].counts == [("queued", 4), ("dead", 5)]
    cyclic = layout({"a": "waiting", "b": "waiting"}, {"a": "b", "b": "a"}, {})
    assert len(cyclic.nodes) == 2  # hostile data: drawn, not followed forever


def test_a_workflows_graph_in_chromium(worker_config: wurk.Config) -> None:
    wid = run_by_a_worker(worker_config)
    with serve(create_app(worker_config)) as server, browser_context() as browser:
        page = browser.new_page()
        page.set_default_timeout(20_000)
        page.goto(server.url + "/")
        page.click("nav >> text=Workflows")
        page.click(f"a >> text={wid}")
        page.wait_for_selector("svg g.wf-node")
        svg = page.locator("figure.wf-graph svg").bounding_box()
        assert svg is not None and svg["width"] > 500 and svg["height"] > 100
        node = page.locator('g.wf-node[data-step="report"] rect').first.bounding_box()
        assert node is not None and node["width"] > 50  # drawn, laid out, visible
        assert page.locator("g.wf-node").count() == 7
