"""A job over a rate limit comes back when the limiter says there is room (its
``retry_after``, with jitter), not five minutes later: a real worker in a temporary project."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import redis

from tests.system.conftest import FAST_SETTINGS, ROOT, wait_for

JOBS = '''import wurk

API = wurk.limiter.window("api", 2, 10)   # 2 calls in any 10 s


@wurk.job(name="call_api")
def call_api(n: int) -> None:
    with API.within_limit():
        with wurk.redis() as conn:
            conn.call("RPUSH", "called", n)
'''


def test_a_rate_limited_job_is_rescheduled_by_what_the_limiter_knows(
        tmp_path: Path, r: redis.Redis) -> None:
    app = tmp_path / "proj"
    app.mkdir()
    (app / "pyproject.toml").write_text("[project]\nname = 'proj'\n")
    (app / "jobs.py").write_text(JOBS)
    (app / "wurk.yml").write_text(FAST_SETTINGS)
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for n in (1, 2, 3):
        subprocess.run([sys.executable, "-m", "wurk", "enqueue", "-r", "jobs", "call_api",
                        str(n)], cwd=app, env=env, check=True, capture_output=True, timeout=60)
    log = app / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen([sys.executable, "-m", "wurk", "-r", "jobs", "-c", "3", "-C",
                                   "wurk.yml"], cwd=app, env=env, stdout=out,
                                  stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: r.zcard("schedule") == 1, timeout=30, message="the third rescheduled")
        refused_at = time.time()
        ((raw, at),) = r.zrange("schedule", 0, -1, withscores=True)
        assert json.loads(raw)["overrated"] == 1
        line = r"over the limit of limiter 'api': rescheduled in (\d+) s \(1 of 20\)"
        wait_for(lambda: re.search(line, log.read_text()) is not None, message="its log line")
        said = re.search(line, log.read_text())
        assert said is not None
        # retry_after is at most the window (10 s), the jitter at most that again: never the
        # 300-600 s of the default backoff, which is for limiters that cannot know.
        assert 0 <= int(said.group(1)) <= 20
        assert refused_at - 2 <= at <= refused_at + 21
        wait_for(lambda: r.llen("called") == 3, timeout=40, message="the third call, later")
        assert r.zcard("retry") == 0  # rescheduled, never a failure
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
