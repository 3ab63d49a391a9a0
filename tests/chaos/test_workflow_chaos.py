"""Workflows through the chaos suite's faults: fan-out 1,000 → fan-in 1 → a final step,
on two ``wurk worker`` processes (reliable fetch) that reach Redis through a fault proxy,
while one worker is SIGKILLed, every connection is cut at the proxy, and Redis restarts
once (its append-only file kept). Every child runs, the fan-in runs once with exactly the
1,000 results in order, the final step runs once, and the workflow succeeds. Two workflows
whose step dies, started while the faults strike, each follow their policy: ``stop`` never
runs the step after it (a branch beside it runs), ``continue`` runs it once with null.

It is one test of ~30 s (most of it the wait before the killed worker's jobs are
recovered), in the suite; every wait is on state, with bounds a loaded 2-core machine
meets."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import wurk
from tests.chaos import jobs
from tests.chaos.run import WORKER_SETTINGS
from tests.chaos.workflow_jobs import (
    AFTER,
    CHILDREN,
    FINAL,
    GATHERED,
    after,
    doomed,
    final,
    gather,
    split,
)
from tests.helpers.faults import Restartable, config_for
from tests.helpers.proxy import FaultProxy
from tests.helpers.server import Server, start_server
from tests.helpers.wait import wait_until
from wurk.workflow import Workflow, WorkflowStatus

ROOT = Path(__file__).resolve().parents[2]
COUNT = 1_000
# Bounds for each wait: far above what a loaded machine takes (the whole run is ~30 s).
STAGE = 60
END = 180


class Workers:
    """``wurk worker`` processes this test owns; each is stopped (or killed) and waited for."""

    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        self.directory, self.env = directory, env
        self.processes: list[subprocess.Popen[bytes]] = []

    def spawn(self) -> None:
        log = (self.directory / f"worker-{len(self.processes)}.log").open("w")
        self.processes.append(subprocess.Popen(
            [sys.executable, "-m", "wurk", "worker", "-r", "tests.chaos.workflow_jobs",
             "-c", "10", "-C", str(self.directory / "wurk.yml")],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT))
        log.close()

    def kill_one(self) -> None:
        victim = next(p for p in self.processes if p.poll() is None)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        self.spawn()

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


Setting = tuple[Restartable, FaultProxy, redis.Redis, Workers]


@pytest.fixture
def setting(tmp_path: Path) -> Iterator[Setting]:
    server = Restartable(tmp_path / "redis")
    proxy = FaultProxy(server.port).start()  # the workers' way to Redis: cut on command
    ledger_server: Server = start_server(tmp_path / "ledger")
    ledger = redis.Redis(port=ledger_server.port)
    (tmp_path / "wurk.yml").write_text(WORKER_SETTINGS)
    env = {**os.environ, "REDIS_URL": proxy.url, "PYTHONUNBUFFERED": "1",
           jobs.LEDGER_ENV: f"redis://127.0.0.1:{ledger_server.port}/0"}
    workers = Workers(tmp_path, env)
    try:
        yield server, proxy, ledger, workers
    finally:
        workers.stop()
        proxy.close()
        ledger.close()
        ledger_server.stop()
        server.stop()


def dying(config: wurk.Config, policy: str) -> str:
    """A workflow whose first step dies: ``after`` waits for it, ``beside`` does not."""
    wf = Workflow(f"dies-{policy}", on_death=policy, config=config)  # type: ignore[arg-type]
    dies = wf.step(doomed)
    wf.step(after, policy, dies).named("after")
    wf.step(after, f"{policy}-beside", 1).named("beside")
    return wf.start()


@pytest.mark.timeout(600)  # the waits' own bounds (below) decide, not the suite's 120 s
def test_fan_out_a_thousand_through_a_kill_cuts_and_a_restart(setting: Setting) -> None:
    server, proxy, ledger, workers = setting
    config = config_for(server.url)
    wf = Workflow("chaos", config=config)
    parts = wf.step(split, COUNT)
    total = wf.step(gather, parts.children)
    wf.step(final, total, parts).named("final")
    wid = wf.start()
    workers.spawn()
    workers.spawn()

    def children_ran(at_least: int) -> bool:
        return int(ledger.llen(CHILDREN)) >= at_least

    wait_until(lambda: children_ran(150), timeout=STAGE, what="150 children run")
    workers.kill_one()
    stopping = dying(config, "stop")
    wait_until(lambda: children_ran(300), timeout=STAGE, what="300 children run")
    assert proxy.cut() > 0  # every worker connection reset mid-run
    going_on = dying(config, "continue")
    wait_until(lambda: children_ran(450), timeout=STAGE, what="450 children run")
    server.restart(down_for=0.3)
    wait_until(lambda: ledger.llen(FINAL) >= 1, timeout=END, what="the final step")

    ran = {int(n) for n in ledger.lrange(CHILDREN, 0, -1)}
    assert ran == set(range(COUNT))  # every child ran (a few twice: at least once)
    gathered = [json.loads(raw) for raw in ledger.lrange(GATHERED, 0, -1)]
    assert gathered == [[n * n for n in range(COUNT)]]  # once, every result, in order
    expected = sum(n * n for n in range(COUNT))
    assert [json.loads(raw) for raw in ledger.lrange(FINAL, 0, -1)] == [[expected, COUNT]]
    status = WorkflowStatus(wid, config=config)
    wait_until(lambda: status.refresh().done, timeout=STAGE, what="the workflow's end")
    assert status.state == "succeeded" and status.total == COUNT + 3
    assert status.result("final") == f"{COUNT}:{expected}"

    ended = {}
    for policy, dying_wid in (("stop", stopping), ("continue", going_on)):
        found = WorkflowStatus(dying_wid, config=config)
        wait_until(lambda found=found: found.refresh().done, timeout=STAGE,
                   what=f"the {policy} workflow's end")
        ended[policy] = {name: step.state for name, step in found.steps.items()}
        assert found.state == "failed" and found.dead == 1
    assert ended["stop"] == {"doomed": "dead", "after": "stopped", "beside": "succeeded"}
    assert ended["continue"] == {"doomed": "dead", "after": "succeeded",
                                 "beside": "succeeded"}
    ran_after = sorted(json.loads(raw) for raw in ledger.lrange(AFTER, 0, -1))
    # "stop" never ran its step after the dead one; "continue" ran it with null (at least
    # once: a fault may strike it mid-run; counted once, as its state above says)
    assert ["stop", None] not in ran_after and ["continue", None] in ran_after
    assert ["stop-beside", 1] in ran_after and ["continue-beside", 1] in ran_after
    config.close()
