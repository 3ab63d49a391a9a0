"""A workflow through faults: fan-out 1,000 → fan-in 1 → a final step, on two ``wurk
worker`` processes (reliable fetch), while one is SIGKILLed and Redis restarts once
(its append-only file kept). Every child runs, the fan-in runs once with exactly the 1,000
results in order, the final step runs once, and the workflow succeeds.

It takes ~26 s (most of it the wait before the killed worker's jobs are recovered), over the
suite's budget, so it runs when asked: ``WURK_CHAOS_WORKFLOW=1 pytest
tests/chaos/test_workflow_chaos.py``. The suite's own version is
``tests/integration/test_workflows.py``'s redelivered step, counted once."""

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

from tests.chaos import jobs
from tests.chaos.run import WORKER_SETTINGS
from tests.chaos.workflow_jobs import CHILDREN, FINAL, GATHERED, final, gather, split
from tests.helpers.faults import Restartable, config_for
from tests.helpers.server import Server, start_server
from tests.helpers.wait import wait_until
from wurk.workflow import Workflow, WorkflowStatus

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not os.environ.get("WURK_CHAOS_WORKFLOW"),
                                reason="~26 s: set WURK_CHAOS_WORKFLOW=1 to run it")
COUNT = 1_000


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


@pytest.fixture
def setting(tmp_path: Path) -> Iterator[tuple[Restartable, redis.Redis, Workers]]:
    server = Restartable(tmp_path / "redis")
    ledger_server: Server = start_server(tmp_path / "ledger")
    ledger = redis.Redis(port=ledger_server.port)
    (tmp_path / "wurk.yml").write_text(WORKER_SETTINGS)
    env = {**os.environ, "REDIS_URL": server.url, "PYTHONUNBUFFERED": "1",
           jobs.LEDGER_ENV: f"redis://127.0.0.1:{ledger_server.port}/0"}
    workers = Workers(tmp_path, env)
    try:
        yield server, ledger, workers
    finally:
        workers.stop()
        ledger.close()
        ledger_server.stop()
        server.stop()


def test_fan_out_a_thousand_through_kills_and_a_restart(
        setting: tuple[Restartable, redis.Redis, Workers]) -> None:
    server, ledger, workers = setting
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

    wait_until(lambda: children_ran(150), timeout=30, what="150 children run")
    workers.kill_one()
    wait_until(lambda: children_ran(400), timeout=30, what="400 children run")
    server.restart(down_for=0.3)
    wait_until(lambda: ledger.llen(FINAL) >= 1, timeout=60, what="the final step")

    ran = {int(n) for n in ledger.lrange(CHILDREN, 0, -1)}
    assert ran == set(range(COUNT))  # every child ran (a few twice: at least once)
    gathered = [json.loads(raw) for raw in ledger.lrange(GATHERED, 0, -1)]
    assert gathered == [[n * n for n in range(COUNT)]]  # once, every result, in order
    expected = sum(n * n for n in range(COUNT))
    assert [json.loads(raw) for raw in ledger.lrange(FINAL, 0, -1)] == [[expected, COUNT]]
    status = WorkflowStatus(wid, config=config)
    wait_until(lambda: status.refresh().done, timeout=10, what="the workflow's end")
    assert status.state == "succeeded" and status.total == COUNT + 3
    assert status.result("final") == f"{COUNT}:{expected}"
    config.close()
