"""``wurk web`` as a real process: serves, stops on Ctrl-C with a stream open, bad input."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.server import free_port
from wurk.cli import run

ROOT = Path(__file__).resolve().parents[2]


def wait_listening(port: int, process: subprocess.Popen[bytes], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("wurk web did not start listening")


def test_wurk_web_serves_and_stops_on_interrupt(tmp_path: Path) -> None:
    port = free_port()
    settings = tmp_path / "wurk.yml"
    settings.write_text("web_read_only: true\nweb_stream_interval: 0.1\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "wurk", "web", "--port", str(port), "-C", str(settings),
         "--allowed-host", "jobs.example.com"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(os.environ))
    try:
        wait_listening(port, process)
        page = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        page.request("GET", "/queues")
        response = page.getresponse()
        assert response.status == 200 and b"read-only" in response.read()
        for host, status in (("jobs.example.com", 200), (f"127.0.0.1:{port}", 200),
                             (f"evil.example:{port}", 400)):
            page.request("GET", "/queues", headers={"Host": host})
            answer = page.getresponse()
            answer.read()
            assert answer.status == status, host
        stream = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        stream.request("GET", "/stats/stream")
        assert stream.getresponse().status == 200  # held open while we stop the server
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    output = process.stdout.read().decode() if process.stdout else ""
    assert f"http://127.0.0.1:{port}/" in output


def test_port_in_use_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert run(["web", "--port", str(port)]) == 1
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "--port" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(("args", "code", "text"), [
    (["--extension", "nocolon"], 2, "MODULE:NAME"),
    (["--extension", "no.such.module:ext"], 2, "no module named"),
    (["--extension", "wurk.web:create_app"], 2, "is not a wurk.web.Extension"),
    (["--port", "0"], 2, "--port"),
    (["--allowed-host", "jobs.example.com:443"], 2, "--allowed-host"),
])
def test_bad_flags(capsys: pytest.CaptureFixture[str], args: list[str], code: int,
                   text: str) -> None:
    assert run(["web", *args]) == code
    assert text in capsys.readouterr().err


def test_the_address_listened_on_is_a_name_it_answers_to() -> None:
    from wurk.cli.web import host_names

    assert host_names("10.0.0.5", ("jobs.example.com",)) == ["10.0.0.5", "jobs.example.com"]
    assert host_names("::1", ()) == ["[::1]"]
    assert host_names("0.0.0.0", ()) == [] and host_names("::", ("*",)) == ["*"]
    assert host_names("fe80::1%eth0", ()) == []  # no Host header carries a scoped address


def test_an_extension_module_loads_as_r_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """``--extension`` imports the application's code as ``-r`` does: from the current
    directory (an installed ``wurk`` script's path holds only its own folder), and a module
    that raises while imported is its own traceback and one ``Error:`` line, exit 1 — not
    "no module named" for a file beside you, nor wurk's and click's traceback."""
    (tmp_path / "webext_here.py").write_text("extension = 42\n")
    (tmp_path / "webext_boom.py").write_text("raise RuntimeError('no settings module')\n")
    monkeypatch.chdir(tmp_path)
    here = {"", ".", str(tmp_path)}
    monkeypatch.setattr(sys, "path", [entry for entry in sys.path if entry not in here])
    for name in ("webext_here", "webext_boom"):
        monkeypatch.delitem(sys.modules, name, raising=False)

    assert run(["web", "--extension", "webext_here:extension"]) == 2
    assert "'extension' in webext_here is not a wurk.web.Extension" in capsys.readouterr().err

    assert run(["web", "--extension", "webext_boom:extension"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and 'webext_boom.py", line 1' in err
    assert "click" not in err and "wurk/cli" not in err
    assert err.rstrip().endswith(
        "Error: loading 'webext_boom' failed: RuntimeError: no settings module")
