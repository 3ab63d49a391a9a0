"""The in-process worker inside a real uvicorn-served app: threads only, or a hosted swarm."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import redis

import wurk
from tests.helpers.processes import kill_seen, running
from tests.system import swarm_jobs
from tests.system import worker_jobs as jobs
from tests.system.conftest import ROOT, wait_for


class Server:
    def __init__(self, process: subprocess.Popen[str], log: Path, port: int) -> None:
        self.process = process
        self.log = log
        self.port = port
        self.seen: dict[int, psutil.Process] = {}  # every child seen, by pid

    def get(self) -> dict[str, int]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/", timeout=5) as reply:
            return json.loads(reply.read())  # type: ignore[no-any-return]

    def output(self) -> str:
        return self.log.read_text()

    def children(self) -> set[int]:
        try:
            kids = psutil.Process(self.process.pid).children()
        except psutil.NoSuchProcess:
            return set()
        for kid in kids:
            self.seen.setdefault(kid.pid, kid)
        return {kid.pid for kid in kids if running(kid)}  # one reaped meanwhile: gone

    def living(self, pids: set[int]) -> list[int]:
        """Which of the children seen with these pids still run: asked of the processes
        seen, so a pid the system gave to another program since is not theirs."""
        return [pid for pid in pids if pid in self.seen and running(self.seen[pid])]

    def kill_children(self) -> None:
        """SIGKILL every child ever seen that still runs. Through the process objects kept
        when they were seen: a pid signalled afresh after its child died may belong to
        anything by then — another test's worker (a thread's id counts: a signal to it
        kills its whole process)."""
        kill_seen(self.seen.values())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[str], Server]]:
    started: list[Server] = []

    def start(mode: str) -> Server:
        port = free_port()
        log = tmp_path / f"uvicorn-{mode}.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "tests.system.in_process_app:app",
             "--port", str(port), "--lifespan", "on"],
            cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "WURK_TEST_EMBED": mode},
        )
        server = Server(process, log, port)
        started.append(server)
        deadline = time.monotonic() + 20
        while True:
            try:
                server.get()
                return server
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"uvicorn did not start:\n{server.output()}") from None
                time.sleep(0.1)

    yield start
    for server in started:
        server.children()  # the last ones seen, to kill below if they outlive the server
        if server.process.poll() is None:
            server.process.kill()
        server.process.wait(10)
        server.kill_children()


def _shutdown(server: Server) -> float:
    """SIGTERM uvicorn as a deploy would; returns how long it took to exit."""
    started = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    code = server.process.wait(30)
    assert code in (0, -signal.SIGTERM), (code, server.output())
    return time.monotonic() - started


def test_embedded_worker_runs_jobs_in_the_web_process_and_drains_on_shutdown(
    config: wurk.Config, r: redis.Redis, serve: Callable[[str], Server]
) -> None:
    server = serve("threads")
    pid = server.get()["pid"]
    wait_for(lambda: r.scard("processes") == 1, message="the in-process worker's heartbeat")
    identity = next(iter(r.smembers("processes")))
    info = json.loads(r.hget(identity, "info"))
    assert info["pid"] == pid and info["embedded"] is True and info["tag"] == "embed-test"
    assert not server.children()  # threads only, no fork
    swarm_jobs.record_pid.perform_bulk([["sys:embedded"]] * 20)
    wait_for(lambda: r.llen("sys:embedded") == 20, message="jobs run")
    assert {int(p) for p in r.lrange("sys:embedded", 0, -1)} == {pid}
    r.lpush(f"{identity}-signals", "TSTP")  # the host owns quiet and stop
    wait_for(lambda: "ignoring remote TSTP" in server.output(), message="remote quiet refused")
    assert r.hget(identity, "quiet") == "false"
    jobs.sleep_job.perform_async(30, "sys:embedded-long")
    wait_for(lambda: r.llen("sys:embedded-long:started") == 1, message="long job started")
    # Timeout + interrupt grace + uvicorn's own exit, twice over for a busy machine; not the
    # job's 30 s.
    assert _shutdown(server) < 2 * (2 + 1 + 3)
    back = [json.loads(raw) for raw in r.lrange("queue:default", 0, -1)]
    assert [job["class"] for job in back] == ["Sys::Sleep"]
    assert r.scard("processes") == 0 and not r.exists(identity)
    assert "pushing 1 unfinished job(s) back" in server.output()


def test_a_web_process_hosts_a_swarm_supervised_from_a_thread(
    config: wurk.Config, r: redis.Redis, serve: Callable[[str], Server]
) -> None:
    server = serve("swarm")
    wait_for(lambda: len(server.children()) == 2 and r.scard("processes") == 2,
             message="two children heartbeating")
    children = server.children()
    swarm_jobs.record_pid.perform_bulk([["sys:hosted"]] * 40)
    wait_for(lambda: r.llen("sys:hosted") == 40, message="jobs run")
    assert {int(p) for p in r.lrange("sys:hosted", 0, -1)} <= children
    victim = min(children)
    os.kill(victim, signal.SIGKILL)  # the supervisor thread respawns it
    wait_for(lambda: len(server.children() - {victim}) == 2 and r.scard("processes") >= 2,
             message="respawned child")
    assert server.get()["pid"] == server.process.pid  # still serving HTTP
    jobs.sleep_job.perform_async(30, "sys:hosted-long")
    wait_for(lambda: r.llen("sys:hosted-long:started") == 1, message="long job started")
    children = server.children()
    assert _shutdown(server) < 2 * (2 + 3 + 1 + 3)  # twice the budget at most; not 30 s
    assert server.living(children) == []
    back = [json.loads(raw) for raw in r.lrange("queue:default", 0, -1)]
    assert [job["class"] for job in back] == ["Sys::Sleep"]
    # Only the SIGKILLed child's record is left (for the reaper); the drained ones are gone.
    assert {int(identity.rsplit(":", 2)[1]) for identity in r.smembers("processes")} == {
        victim}


@pytest.mark.parametrize(("mode", "processes"), [("threads", 1), ("swarm", 2)])
def test_the_exit_hook_drains_when_the_host_just_exits(
    config: wurk.Config, r: redis.Redis, mode: str, processes: int
) -> None:
    result = subprocess.run([sys.executable, "-m", "tests.system.exit_hook_app", mode],
                            cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result
    assert "ready" in result.stdout
    # Each worker stopped cleanly: its last line says so. Counted as whole lines: a thread's
    # id in another line is random base 36 and may hold the letters "bye".
    assert len(re.findall(r" INFO: bye$", result.stdout, re.MULTILINE)) == processes
    assert r.scard("processes") == 0


def test_the_exit_hook_drains_an_async_job_under_a_sync_link_within_the_timeout(
    config: wurk.Config, r: redis.Redis
) -> None:
    # Python joins its thread pools (concurrent.futures) at exit, before atexit's hooks:
    # the helper thread of a sync link around a running async job (Flask's app context,
    # Django's connection link) held the exit for the job's whole 60 s before the drain.
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "tests.system.exit_hook_app", "async"],
                            cwd=ROOT, capture_output=True, text=True, timeout=25)
    took = time.monotonic() - started
    assert result.returncode == 0, result
    assert "ready" in result.stdout and r.llen("exit-hook:started") == 1
    assert took < 15, took  # timeout 1 s + grace 1 s + boot, not the job's 60 s
    assert "pushing 1 unfinished job(s) back" in result.stdout + result.stderr
    back = [json.loads(raw) for raw in r.lrange("queue:default", 0, -1)]
    assert [job["class"] for job in back] == ["ExitHook::AsyncLong"]
    assert r.scard("processes") == 0
