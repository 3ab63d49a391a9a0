"""The garbage collector of the processes a worker owns (``wurk.runtime.collector``): what
docs/worker.md says, read back from ``gc`` inside a job of a real ``wurk worker`` and of a
swarm's child."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

import wurk
from tests.helpers.server import Server

ROOT = Path(__file__).resolve().parents[2]
QUEUE = "collector"


def _probe(redis_server: Server, tmp_path: Path, command: list[str], settings: str) -> dict:
    r = redis.Redis.from_url(redis_server.url)
    key = f"collector-probe-{time.monotonic_ns()}"
    wurk.Client(wurk.configure(redis_url=redis_server.url)).push(
        {"class": "CollectorProbe", "args": [key], "queue": QUEUE})
    settings_file = tmp_path / "wurk.yml"
    settings_file.write_text(settings or "{}\n")
    log = tmp_path / "worker.log"
    worker = subprocess.Popen(
        [sys.executable, "-m", "wurk", *command, "-r", "tests.helpers.collector_jobs",
         "-q", QUEUE, "-c", "1", "-C", str(settings_file)],
        cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT,
        env={**os.environ, "REDIS_URL": redis_server.url})
    try:
        deadline = time.monotonic() + 60
        while (found := r.get(key)) is None:
            assert worker.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        return json.loads(found)  # type: ignore[no-any-return]
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        r.close()


@pytest.mark.parametrize("command", [["worker"], ["swarm", "-n", "1"]])
def test_a_worker_process_collects_every_ten_thousand_and_froze_its_boot(
    redis_server: Server, tmp_path: Path, command: list[str]
) -> None:
    seen = _probe(redis_server, tmp_path, command, "")
    assert seen["threshold"] == [10_000, 10, 10]
    assert seen["frozen"] > 10_000  # the modules, the application, the configuration


def test_gc_threshold_null_leaves_pythons_collector_alone(
    redis_server: Server, tmp_path: Path
) -> None:
    seen = _probe(redis_server, tmp_path, ["worker"], "gc_threshold: null\n")
    assert seen == {"threshold": [700, 10, 10], "frozen": 0}


@pytest.mark.parametrize("value", ["many", "0", "3000000000"])
def test_a_threshold_that_is_no_whole_number_is_refused(
    redis_server: Server, tmp_path: Path, value: str
) -> None:
    """3,000,000,000 (more than a C int) was taken, and the worker crashed at its start
    with gc.set_threshold's OverflowError and a traceback."""
    settings_file = tmp_path / "wurk.yml"
    settings_file.write_text(f"gc_threshold: {value}\n")
    done = subprocess.run(
        [sys.executable, "-m", "wurk", "worker", "-r", "tests.helpers.collector_jobs",
         "-C", str(settings_file)], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "REDIS_URL": redis_server.url})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "gc_threshold must be a whole number from 1 to 2,147,483,647 (a C int, what " \
        "gc.set_threshold takes) or null" in done.stderr


def test_a_worker_inside_an_application_leaves_its_collector_alone(
    config: wurk.Config
) -> None:
    before = gc.get_threshold(), gc.get_freeze_count()
    with wurk.InProcessWorker(config):
        pass
    assert (gc.get_threshold(), gc.get_freeze_count()) == before
