"""Reliable push, ``disk``: a process pushes while Redis is down, is SIGKILLed with its jobs
buffered, and every one of them runs — after a successor using the same directory starts
(here a worker), or after ``wurk push-buffer flush DIR``. Each exactly once; scheduled ones at
their time; ``wurk push-buffer status`` and ``wurk stats`` say where they wait."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.faults import Restartable
from tests.system.conftest import ROOT, wait_for

JOBS = 40
SCHEDULED = 5  # of them, due two seconds after they were pushed

PUSHER = f"""
import sys, time
import wurk
wurk.configure(reliable_push="disk", reliable_push_dir=sys.argv[1])
jids = [wurk.push({{"class": "Sys::Mark", "args": ["ran", 0]}}) for _ in range({JOBS - SCHEDULED})]
at = time.time() + 2
jids += [wurk.push({{"class": "Sys::Mark", "args": ["ran", 0], "at": at}})
         for _ in range({SCHEDULED})]
print(" ".join(jids), flush=True)
time.sleep(600)  # killed with its jobs buffered
"""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Restartable]:
    made = Restartable(tmp_path / "redis")
    yield made
    made.stop()


def env_for(store: Restartable, home: Path) -> dict[str, str]:
    return {**os.environ, "REDIS_URL": store.url, "WURK_HOME": str(home),
            "PYTHONUNBUFFERED": "1"}


def killed_with_jobs_buffered(store: Restartable, directory: Path, env: dict[str, str]
                              ) -> tuple[list[str], float]:
    """Redis down, a process pushes and is SIGKILLed: its jids, and when it pushed."""
    store.stop()
    pusher = subprocess.Popen([sys.executable, "-c", PUSHER, str(directory)], cwd=ROOT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    assert pusher.stdout is not None
    line = pusher.stdout.readline()
    pushed_at = time.time()
    jids = line.split()
    assert len(jids) == JOBS, pusher.stderr.read() if pusher.poll() is not None else line
    pusher.send_signal(signal.SIGKILL)
    pusher.wait(10)
    return jids, pushed_at


def wurk_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wurk", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def run_worker(tmp_path: Path, env: dict[str, str], settings: str) -> subprocess.Popen[str]:
    config = tmp_path / "worker.yml"
    config.write_text("heartbeat_interval: 0.5\npoll_interval_average: 0.2\n"
                      "scheduler_initial_wait: 0\nfetch_timeout: 0.5\n" + settings)
    return subprocess.Popen([sys.executable, "-m", "wurk", "worker", "-r",
                             "tests.system.worker_jobs", "-C", str(config)], cwd=ROOT,
                            env=env, stdout=(tmp_path / "worker.log").open("w"),
                            stderr=subprocess.STDOUT, text=True)


def ran(store: Restartable) -> list[str]:
    return [jid.decode() for jid in store.client().lrange("ran", 0, -1)]


def test_a_killed_processes_buffered_jobs_run_once_its_successor_starts(
        store: Restartable, tmp_path: Path) -> None:
    directory = tmp_path / "buffer"
    env = env_for(store, tmp_path / "home")
    jids, _ = killed_with_jobs_buffered(store, directory, env)
    (left,) = list(directory.glob("*.jobs"))  # the dead process's file, every job in it
    assert len([line for line in left.read_text().splitlines() if '"+"' in line]) == JOBS
    store.start()
    # The successor: any process using that directory; here a worker, which runs them too.
    worker = run_worker(tmp_path, env, f"reliable_push: disk\nreliable_push_dir: {directory}\n")
    try:
        wait_for(lambda: len(ran(store)) >= JOBS, timeout=60,
                 message=f"the jobs to run\n{(tmp_path / 'worker.log').read_text()[-3000:]}")
        time.sleep(0.5)  # a job sent twice would run within this: ample for an idle worker
        assert sorted(ran(store)) == sorted(jids)  # every one, once
        assert not left.exists()  # sent, then deleted
        log = (tmp_path / "worker.log").read_text()
        assert f"reliable push: sent {JOBS} job(s) a dead process left in {left}" in log
        assert store.client().get("wurk:stat:recovered-push") == str(JOBS).encode()
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)


def test_a_killed_processes_buffered_jobs_run_after_push_buffer_flush(
        store: Restartable, tmp_path: Path) -> None:
    directory = tmp_path / "buffer"
    env = env_for(store, tmp_path / "home")
    jids, pushed_at = killed_with_jobs_buffered(store, directory, env)
    status = wurk_cli("push-buffer", "status", str(directory), "--json", env=env)
    assert status.returncode == 0, status.stderr
    (found,) = json.loads(status.stdout)["files"]
    assert (found["held"], found["pending"]) == (False, JOBS)
    assert pushed_at - 10 < found["oldest"] <= pushed_at
    said = wurk_cli("push-buffer", "status", str(directory), env=env).stdout
    assert "left by a dead process" in said and "wurk push-buffer flush" in said
    # reliable-push.md: "flush … exit 1 if Redis cannot take them" — and they stay.
    refused = wurk_cli("push-buffer", "flush", str(directory), env=env)
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert refused.stderr.startswith("Error:") and len(refused.stderr.splitlines()) == 1
    (kept,) = list(directory.glob("*.jobs"))
    assert len([line for line in kept.read_text().splitlines() if '"+"' in line]) == JOBS
    store.start()
    flushed = wurk_cli("push-buffer", "flush", str(directory), env=env)
    assert flushed.returncode == 0, flushed.stderr
    assert flushed.stdout.startswith(f"sent {JOBS} jobs from {directory}")
    assert list(directory.glob("*.jobs")) == []
    again = wurk_cli("push-buffer", "flush", str(directory), env=env)
    assert again.stdout.startswith("sent 0 jobs")  # nothing is sent twice
    direct = store.client(decode_responses=True)
    assert direct.llen("queue:default") == JOBS - SCHEDULED
    scheduled = direct.zrange("schedule", 0, -1, withscores=True)
    assert len(scheduled) == SCHEDULED
    assert all(pushed_at - 1 < score < pushed_at + 3 for _, score in scheduled)  # their `at`
    worker = run_worker(tmp_path, env, "")
    try:
        wait_for(lambda: len(ran(store)) >= JOBS, timeout=60,
                 message=f"the jobs to run\n{(tmp_path / 'worker.log').read_text()[-3000:]}")
        time.sleep(0.5)  # a job sent twice would run within this: ample for an idle worker
        assert sorted(ran(store)) == sorted(jids)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)


def test_wurk_stats_shows_a_buffer_left_on_this_host(store: Restartable,
                                                    tmp_path: Path) -> None:
    home = tmp_path / "home"
    directory = home / "push-buffer"  # the default place: the home's push-buffer
    env = env_for(store, home)
    killed_with_jobs_buffered(store, directory, env)
    store.start()
    shown = wurk_cli("stats", env=env)
    assert shown.returncode == 0, shown.stderr
    assert f"{JOBS} waiting" in shown.stdout and "its process is gone" in shown.stdout
    as_json = json.loads(wurk_cli("stats", "--json", env=env).stdout)["push_buffers"]
    assert [f["pending"] for f in as_json["files"]] == [JOBS]
