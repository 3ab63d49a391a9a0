"""What a newcomer meets running ``wurk worker``: Ctrl-C twice, a job's own logging, slow jobs,
and the boot checks (no ``-r``, an unseen ``-q`` queue, ``-e``, unknown keys, a module that
fails on import) — each a real worker subprocess."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

import wurk
from tests.system import worker_jobs as jobs
from tests.system.conftest import FAST_SETTINGS, ROOT, Worker, wait_for

StartWorker = Callable[..., Worker]


def wait_for_line(worker: Worker, pattern: str, timeout: float = 20.0) -> re.Match[str]:
    found: list[re.Match[str]] = []

    def seen() -> bool:
        match = re.search(pattern, worker.output(), re.MULTILINE)
        if match:
            found.append(match)
        return match is not None

    wait_for(seen, timeout, message=f"{pattern!r} in the log:\n{worker.output()}")
    return found[0]


# -- Ctrl-C -----------------------------------------------------------------------------------
def test_a_second_ctrl_c_pushes_unfinished_jobs_back_and_exits_now(
        config: wurk.Config, r: redis.Redis, start_worker: StartWorker) -> None:
    jobs.sleep_job.perform_async(60, "sys:ctrl-c")
    worker = start_worker("-c", "1", "-t", "25")
    wait_for(lambda: r.llen("sys:ctrl-c:started") == 1, message="the job started")

    first = time.monotonic()
    worker.signal("INT")
    time.sleep(0.3)
    # A process manager passing the terminal's Ctrl-C on: the same request, not a second.
    worker.signal("TERM")
    wait_for_line(worker, r"stopping: waiting up to 25 s for 1 running job\(s\); a second "
                          r"Ctrl-C \(INT or TERM\) stops now, pushing unfinished jobs back "
                          r"to their queues first")
    # Both signals were taken by now; taken for two requests, the second would hurry the
    # stop within milliseconds: half a second is a hundred times that.
    time.sleep(0.5)
    assert worker.process.poll() is None  # the first one waits for the job
    assert r.llen("queue:default") == 0
    assert "stopping now" not in worker.output()

    # A second request counts only a second or more after the first (so one Ctrl-C relayed
    # twice stays one): the press waits that out, with room for a late signal handler.
    time.sleep(max(0.0, first + 1.5 - time.monotonic()))
    pressed = time.monotonic()
    worker.signal("TERM")  # TERM or INT alike: the second request
    assert worker.wait(20) == 0
    took = time.monotonic() - pressed
    assert took < 15, took  # the 3 s interrupt grace and the exit, not the 25 s timeout
    output = worker.output()
    assert "stopping now: pushing 1 unfinished job(s) back to their queues" in output
    assert r.llen("queue:default") == 1  # the job is back, not lost
    assert r.llen("sys:ctrl-c:done") == 0


# -- a job's own logging ----------------------------------------------------------------------
def test_a_jobs_own_logger_comes_out_with_the_jobs_context(
        config: wurk.Config, r: redis.Redis, start_worker: StartWorker) -> None:
    from tests.system import logging_jobs

    jid = logging_jobs.app_log.perform_async("sys:applog")
    worker = start_worker("-r", "tests.system.logging_jobs")
    wait_for(lambda: r.llen("sys:applog") == 1, message="the job ran")
    context = rf"pid=\d+ tid=\w+ class=Sys::AppLog jid={jid} queue=default"
    stamp = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
    wait_for_line(worker, rf"{stamp} {context} INFO: hello from myapp$")
    wait_for_line(worker, rf"{stamp} {context} WARNING: careful from myapp$")
    worker.signal("TERM")
    assert worker.wait(15) == 0


def test_an_applications_own_logging_configuration_is_left_as_it_is(
        config: wurk.Config, r: redis.Redis, start_worker: StartWorker) -> None:
    from tests.system import own_logging_jobs

    own_logging_jobs.own_log.perform_async("sys:ownlog")
    worker = start_worker("-r", "tests.system.own_logging_jobs")
    wait_for(lambda: r.llen("sys:ownlog") == 1, message="the job ran")
    wait_for_line(worker, r"^OWN\|INFO\|myapp\.own\|hello in my own format$")
    worker.signal("TERM")
    assert worker.wait(15) == 0
    output = worker.output()
    assert output.count("hello in my own format") == 1  # not a second time in wurk's format
    assert re.search(r"^\S+Z pid=\d+ .* INFO: wurk \S+ starting", output, re.MULTILINE)


def test_a_slow_job_says_at_info_that_it_started(
        config: wurk.Config, r: redis.Redis, start_worker: StartWorker) -> None:
    jid = jobs.sleep_job.perform_async(2.5, "sys:slow")
    quick = jobs.incr.perform_async("sys:quick")
    worker = start_worker("-c", "2", settings="log_slow_jobs_after: 1\n")
    start = wait_for_line(worker, rf"class=Sys::Sleep jid={jid} queue=default INFO: start "
                                  r"\(still running after \d s\)$")
    assert r.llen("sys:slow:done") == 0  # said while it runs, not when it ends
    wait_for(lambda: r.llen("sys:slow:done") == 1, message="the slow job ended")
    worker.signal("TERM")
    assert worker.wait(15) == 0
    output = worker.output()
    assert output.count(f"jid={jid} queue=default INFO: start") == 1
    done = re.search(rf"jid={jid} queue=default elapsed=[\d.]+ INFO: done", output)
    assert done is not None and output.index(start.group(0)) < done.start()
    assert f"jid={quick} queue=default INFO: start" not in output  # a quick job: no line


# -- boot checks, in a project tree with a subfolder ------------------------------------------
@pytest.fixture
def app(tmp_path: Path) -> Path:
    """``proj/app``: where the commands run, a subfolder of a project."""
    (tmp_path / "proj" / "app").mkdir(parents=True)
    (tmp_path / "proj" / "pyproject.toml").write_text("[project]\nname = 'proj'\n")
    (tmp_path / "proj" / "app" / "wurk.yml").write_text(FAST_SETTINGS)
    return tmp_path / "proj" / "app"


def environment() -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}


def run_wurk(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wurk", *args], cwd=cwd, env=environment(),
                          capture_output=True, text=True, timeout=60)


def boot(cwd: Path, r: redis.Redis, *args: str) -> str:
    """Start a worker in ``cwd`` with ``args``, wait for its heartbeat, stop it; its output."""
    log = cwd / "worker.log"
    before = set(r.smembers("processes"))
    with log.open("w") as out:
        process = subprocess.Popen([sys.executable, "-m", "wurk", "worker", "-C", "wurk.yml",
                                    *args], cwd=cwd, env=environment(), stdout=out,
                                   stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: set(r.smembers("processes")) != before or process.poll() is not None,
                 message="the worker's heartbeat")
        process.send_signal(2)
        assert process.wait(15) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    return log.read_text()


def test_a_worker_without_jobs_warns_at_boot(app: Path, r: redis.Redis) -> None:
    output = boot(app, r)
    assert ("WARNING: no jobs are registered: the worker was started without -r, so every "
            "job it fetches fails with JobNotRegistered; load the module that defines your "
            "jobs, e.g. `wurk -r myapp.jobs`") in output


def test_a_module_that_defines_no_job_is_named_at_boot(app: Path, r: redis.Redis) -> None:
    (app / "nojobs.py").write_text("X = 1\n")
    output = boot(app, r, "-r", "nojobs")
    assert "WARNING: no jobs are registered: nojobs defined none" in output


def test_a_queue_redis_has_never_seen_is_mentioned_with_the_close_name(
        app: Path, r: redis.Redis) -> None:
    r.sadd("queues", "critical", "default")
    output = boot(app, r, "-r", "tests.system.worker_jobs", "-q", "critcal", "-q", "default",
                  "-q", "reports")
    assert ("WARNING: queue 'critcal' has never had a job pushed to it (it is not in Redis's "
            "'queues' set); the worker waits on it anyway; did you mean 'critical'?") in output
    assert ("INFO: queue 'reports' has never had a job pushed to it (it is not in Redis's "
            "'queues' set); the worker waits on it anyway\n") in output
    assert "queue 'default' has never" not in output
    assert "no jobs are registered" not in output


def test_an_environment_with_no_section_in_the_file_exits_2(app: Path) -> None:
    (app / "sections.yml").write_text("concurrency: 2\nproduction:\n  concurrency: 9\n"
                                      "staging:\n  concurrency: 3\n")
    done = run_wurk(app, "worker", "-C", "sections.yml", "-e", "prodution")
    assert done.returncode == 2
    assert ("sections.yml: no section 'prodution' for -e; the sections are 'production', "
            "'staging'") in done.stderr
    assert "Traceback" not in done.stderr


def test_an_unknown_key_suggests_the_setting_meant(app: Path) -> None:
    (app / "typo.yml").write_text("retries: 3\n")
    done = run_wurk(app, "worker", "-C", "typo.yml")
    assert done.returncode == 2
    assert "typo.yml: unknown setting 'retries'; did you mean 'max_retries'?" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_module_failing_on_import_shows_its_own_traceback(app: Path) -> None:
    (app / "badjobs.py").write_text("import wurk\n\n\ndef helper():\n    return 1 / 0\n\n\n"
                                    "helper()\n")
    done = run_wurk(app, "worker", "-r", "badjobs")
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1].startswith(f'  File "{app / "badjobs.py"}", line 8, in <module>')
    assert "ZeroDivisionError: division by zero" in lines
    assert lines[-1] == "Error: loading 'badjobs' failed: ZeroDivisionError: division by zero"
    assert "click" not in done.stderr and "importlib" not in done.stderr
