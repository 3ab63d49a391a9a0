"""Real ``wurk`` worker processes against the test server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

ROOT = Path(__file__).resolve().parents[2]

FAST_SETTINGS = """
heartbeat_interval: 0.5
poll_interval_average: 0.2
scheduler_initial_wait: 0
fetch_timeout: 0.5
"""


class Worker:
    def __init__(self, process: subprocess.Popen[str], log: Path) -> None:
        self.process = process
        self.log = log

    def signal(self, name: str) -> None:
        self.process.send_signal(getattr(signal, f"SIG{name}"))

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def output(self) -> str:
        return self.log.read_text()


@pytest.fixture
def start_worker(tmp_path: Path, r: redis.Redis) -> Iterator[Callable[..., Worker]]:
    started: list[Worker] = []

    def start(*args: str, settings: str = "", wait_ready: bool = True,
              env: dict[str, str] | None = None) -> Worker:
        config = tmp_path / f"wurk-{len(started)}.yml"
        config.write_text(FAST_SETTINGS + settings)
        log = tmp_path / f"worker-{len(started)}.log"
        before = set(r.smembers("processes"))
        process = subprocess.Popen(
            [sys.executable, "-m", "wurk", "worker", "-r", "tests.system.worker_jobs",
             "-C", str(config), *args],
            cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
        worker = Worker(process, log)
        started.append(worker)
        if wait_ready:
            deadline = time.monotonic() + 20
            while set(r.smembers("processes")) == before:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"worker did not start:\n{worker.output()}")
                time.sleep(0.05)
        return worker

    yield start
    for worker in started:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait(timeout=10)


def idle(r: redis.Redis, processors: int) -> bool:
    """Whether ``processors`` fetches wait on the server (booted, swept, nothing to do): a
    worker's processors start fetching after its boot sweep."""
    return int(r.info("clients")["blocked_clients"]) >= processors


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0,
             message: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        time.sleep(0.05)
