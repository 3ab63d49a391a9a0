"""Which Redis a process uses, as a newcomer meets it: real ``wurk`` commands and push scripts
run as subprocesses in a project tree with a subfolder, no ``REDIS_URL``, no ``WURK_HOME``.

The embedded server is found as git finds ``.git``: the nearest ``.wurk`` from the current
directory up to the project root, else the project root's; a new one is announced on
stderr; read-only commands refuse to start one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import redis

from tests.helpers.embedded import servers_in, stop_everything
from wurk.connections.server import EmbeddedServer

PUSH_SCRIPT = """
import wurk

@wurk.job(name="Probe")
def probe(n: int) -> None: ...

print(probe.perform_async(1))
"""

NO_SERVER = "start one with `wurk server start` or set REDIS_URL"


@dataclass
class Project:
    root: Path
    sub: Path

    @property
    def home(self) -> Path:
        return self.root / ".wurk"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("REDIS_URL", "WURK_HOME", "WURK_SERVER_BINARY")}
        return {**env, "PYTHONUNBUFFERED": "1", **extra}

    def wurk(self, *args: str, cwd: Path | None = None,
             **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "wurk", *args], cwd=cwd or self.sub,
                              env=self.env(**env), capture_output=True, text=True, timeout=60)

    def push(self, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
        script = self.root / "push.py"
        script.write_text(PUSH_SCRIPT)
        return subprocess.run([sys.executable, str(script)], cwd=cwd or self.sub,
                              env=self.env(**env), capture_output=True, text=True, timeout=60)

    def queued(self) -> int:
        client = redis.Redis.from_url(EmbeddedServer(self.home).status().url)
        try:
            return int(client.llen("queue:default"))
        finally:
            client.close()


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    """``proj/`` (with a pyproject.toml: the project root) and ``proj/app/scripts``."""
    root = tmp_path / "proj"
    sub = root / "app" / "scripts"
    sub.mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'proj'\n")
    made = Project(root, sub)
    yield made
    for home in (made.home, sub / ".wurk", root / "app" / ".wurk"):
        stop_everything(home)
        assert servers_in(home) == []


def test_a_push_from_a_subfolder_reaches_the_server_started_at_the_top(
        project: Project) -> None:
    started = project.wurk("server", "start", cwd=project.root)
    assert started.returncode == 0, started.stderr
    assert f"the embedded server at {project.home}, port" in started.stdout

    pushed = project.push()
    assert pushed.returncode == 0, pushed.stderr
    assert pushed.stderr == ""  # the server was found, none started
    assert project.queued() == 1
    assert not (project.sub / ".wurk").exists()

    status = project.wurk("server", "status")  # from the subfolder too
    assert status.returncode == 0 and f"home:      {project.home}\n" in status.stdout
    assert "queued:    1 jobs (default 1)" in status.stdout


def test_a_new_server_is_announced_on_stderr_once_and_goes_to_the_project_root(
        project: Project) -> None:
    first = project.push()
    assert first.returncode == 0, first.stderr
    status = EmbeddedServer(project.home).status()
    assert status.running
    assert first.stderr == (f"wurk: started the embedded server at {project.home} (port "
                            f"{status.port}, pid {status.pid}); it keeps running for your "
                            "app, worker and dashboard, and `wurk server stop` stops it\n")
    again = project.push()
    assert (again.returncode, again.stderr) == (0, "")
    assert project.queued() == 2
    assert not (project.sub / ".wurk").exists()


def test_the_nearest_wurk_directory_wins(project: Project) -> None:
    nearer = project.root / "app" / ".wurk"
    made = project.wurk("server", "start", "--home", str(nearer))
    assert made.returncode == 0, made.stderr
    pushed = project.push()
    assert pushed.returncode == 0 and pushed.stderr == ""
    assert not project.home.exists()
    client = redis.Redis.from_url(EmbeddedServer(nearer).status().url)
    assert client.llen("queue:default") == 1
    client.close()


@pytest.mark.parametrize("command", [["stats"], ["queues"], ["retries"], ["scheduled"],
                                     ["dead"], ["processes"], ["stats", "--json"],
                                     ["retries", "clear", "--yes"]])
def test_read_only_commands_refuse_to_start_a_server(project: Project,
                                                     command: list[str]) -> None:
    done = project.wurk(*command)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == (f"Error: no wurk server here (none runs at {project.home}); "
                           f"{NO_SERVER}\n")
    assert not project.home.exists() and servers_in(project.home) == []


def test_start_embedded_false_in_the_file_makes_a_worker_refuse(project: Project) -> None:
    (project.sub / "wurk.yml").write_text("start_embedded: false\n")
    done = project.wurk("worker", "-C", "wurk.yml", "-r", "wurk.cli.examples")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (f"Error: no wurk server here (none runs at "
                                            f"{project.home}); {NO_SERVER}")
    assert not project.home.exists()


def test_stats_from_a_subfolder_say_which_server_they_read(project: Project) -> None:
    assert project.push().returncode == 0
    status = EmbeddedServer(project.home).status()
    done = project.wurk("stats")
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(None, 1) for line in done.stdout.splitlines())
    assert lines["Redis"] == f"embedded at {project.home}, port {status.port}"
    assert lines["Enqueued"] == "1"
    assert done.stderr == ""


def test_redis_url_over_an_existing_embedded_server_is_said_once(
        project: Project, redis_server: object) -> None:
    assert project.push().returncode == 0  # an embedded server now exists here
    url = os.environ["REDIS_URL"]
    script = project.root / "twice.py"
    script.write_text(PUSH_SCRIPT + "wurk.default_config().pool('other')\n"
                      "print(probe.perform_async(2))\n")
    done = subprocess.run([sys.executable, str(script)], cwd=project.sub,
                          env=project.env(REDIS_URL=url), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == (f"wurk: REDIS_URL is set, so this process uses {url}, not the "
                           f"embedded server at {project.home}\n")
    assert project.queued() == 1  # the embedded server got nothing more


def test_outside_any_project_the_home_is_the_current_directory(tmp_path: Path) -> None:
    loose = tmp_path / "loose" / "sub"
    loose.mkdir(parents=True)
    from wurk.connections.home import PROJECT_MARKERS

    above = [d for d in loose.parents
             if any((d / name).exists() for name in (*PROJECT_MARKERS, ".wurk"))]
    if above:
        pytest.skip(f"{above[0]} is a project root or holds a .wurk")
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "WURK_HOME")}
    try:
        done = subprocess.run([sys.executable, "-m", "wurk", "server", "start"], cwd=loose,
                              env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert f"at {loose / '.wurk'}, port" in done.stdout
    finally:
        stop_everything(loose / ".wurk")


def test_a_stopped_server_is_reaped_by_the_process_that_started_it(project: Project) -> None:
    """Where PID 1 reaps nothing (a container without an init), a server stopped by
    ``wurk server stop`` would stay a zombie unless its starter waits for it."""
    starter = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, wurk.connections.server as e\n"
         "print(e.EmbeddedServer(sys.argv[1]).start().pid, flush=True)\n"
         "sys.stdin.readline()\n", str(project.home)],
        cwd=project.sub, env=project.env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True)
    try:
        assert starter.stdout is not None and starter.stdin is not None
        pid = int(starter.stdout.readline())
        assert psutil.Process(pid).ppid() == starter.pid
        stopped = project.wurk("server", "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert starter.poll() is None  # the starter still runs, and reaped its server
        deadline = time.monotonic() + 10
        state = "running"
        while time.monotonic() < deadline:
            try:
                state = psutil.Process(pid).status()
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"the stopped server (pid {pid}) is still there, {state}")
    finally:
        if starter.stdin is not None:
            starter.stdin.close()
        starter.wait(timeout=10)


def test_a_server_outlives_the_process_that_started_it(project: Project) -> None:
    done = project.push()
    assert done.returncode == 0
    assert EmbeddedServer(project.home).status().running
