"""``manage.py wurk`` as a process: the worker restarts when code changes (DEBUG), and the
reloading parent relays TERM so both exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import redis

from tests.frameworks.conftest import EXAMPLES

PROJECT = EXAMPLES / "django_shop"


def worker_pids(r: redis.Redis) -> set[int]:
    return {int(identity.split(":")[1]) for identity in r.smembers("processes")}


def wait_for(predicate: object, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_autoreload_restarts_the_worker_when_a_file_changes(
        example_env: dict[str, str], r: redis.Redis, tmp_path: Path) -> None:
    env = {**example_env, "SHOP_DEBUG": "1"}
    parent = subprocess.Popen([sys.executable, "manage.py", "wurk"], cwd=PROJECT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: len(worker_pids(r)) == 1)
        (first,) = worker_pids(r)
        assert first != parent.pid  # the worker is the reloader's child
        jobs = PROJECT / "shop" / "jobs.py"

        def restarted() -> bool:
            """A change before the reloader's first look at the files goes unseen: touch
            the file until the worker goes (none after: the next one would restart too)."""
            if first not in worker_pids(r):
                return True
            os.utime(jobs)
            return False

        wait_for(restarted)
        wait_for(lambda: worker_pids(r) - {first} != set())
        parent.send_signal(signal.SIGTERM)
        output, _ = parent.communicate(timeout=40)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
    assert parent.returncode == 0, output
    assert "jobs.py changed, restarting the worker" in output
    wait_for(lambda: worker_pids(r) == set(), timeout=10)
