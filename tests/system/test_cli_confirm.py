"""Destructive commands ask on a terminal: the real ``wurk`` CLI in a subprocess whose stdin
is a pseudo-terminal, answered yes and no."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

import wurk

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pty")

CLI = [sys.executable, "-c", "from wurk.cli import entry; entry()"]


def answer(argv: list[str], reply: bytes) -> subprocess.CompletedProcess[bytes]:
    """Run the CLI with a terminal as stdin and type ``reply`` into it."""
    controller, terminal = os.openpty()
    try:
        process = subprocess.Popen([*CLI, *argv], stdin=terminal, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, env=os.environ.copy())
        os.close(terminal)
        os.write(controller, reply)  # the terminal buffers the line until it is read
        out, err = process.communicate(timeout=60)
    finally:
        os.close(controller)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def test_clear_asks_and_a_no_changes_nothing(config: wurk.Config, r: redis.Redis) -> None:
    r.lpush("queue:default", "{}", "{}")
    r.sadd("queues", "default")
    result = answer(["queues", "clear", "default"], b"n\n")
    assert result.returncode == 1, result.stderr
    assert b"Delete all 2 jobs in queue 'default'?" in result.stdout
    assert b"nothing changed" in result.stderr
    assert r.llen("queue:default") == 2


def test_clear_asks_and_a_yes_clears(config: wurk.Config, r: redis.Redis) -> None:
    r.lpush("queue:default", "{}", "{}")
    r.sadd("queues", "default")
    result = answer(["queues", "clear", "default"], b"y\n")
    assert result.returncode == 0, result.stderr
    assert b"2 jobs deleted" in result.stdout and r.exists("queue:default") == 0


def test_kill_asks(config: wurk.Config, r: redis.Redis) -> None:
    r.zadd("retry", {'{"class":"X","args":[],"jid":"abc"}': 1.0})
    result = answer(["kill", "abc"], b"y\n")
    assert result.returncode == 0, result.stderr
    assert b"Kill X abc" in result.stdout and r.zcard("dead") == 1


# -- wurk retries | scheduled | dead clear, run in a subfolder of a project --------------------
SETS = [("retries", "retry", "retry set"), ("scheduled", "schedule", "scheduled set"),
        ("dead", "dead", "dead set")]


@pytest.fixture
def subfolder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands run in ``proj/app``, a subfolder of a project (REDIS_URL: the harness's)."""
    root = tmp_path / "proj"
    (root / "app").mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    monkeypatch.chdir(root / "app")


@pytest.mark.parametrize(("command", "key", "label"), SETS)
def test_clearing_a_set_asks_and_a_yes_clears(config: wurk.Config, r: redis.Redis,
                                              subfolder: None, command: str, key: str,
                                              label: str) -> None:
    r.zadd(key, {'{"class":"X","args":[1],"jid":"a1"}': 1.0,
                 '{"class":"X","args":[2],"jid":"a2"}': 2.0})
    refused = answer([command, "clear"], b"n\n")
    assert refused.returncode == 1 and b"nothing changed" in refused.stderr
    assert f"Delete all 2 jobs in the {label}?".encode() in refused.stdout
    assert r.zcard(key) == 2
    done = answer([command, "clear"], b"y\n")
    assert done.returncode == 0, done.stderr
    assert f"Cleared the {label}: 2 jobs deleted.".encode() in done.stdout
    assert r.zcard(key) == 0


@pytest.mark.parametrize(("command", "key", "label"), SETS)
def test_clearing_a_set_without_a_terminal_needs_yes(config: wurk.Config, r: redis.Redis,
                                                     subfolder: None, command: str, key: str,
                                                     label: str) -> None:
    r.zadd(key, {'{"class":"X","args":[1],"jid":"a1"}': 1.0})
    refused = subprocess.run([*CLI, command, "clear"], stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    assert refused.stderr == (f"Error: not clearing the {label} without confirmation: stdin "
                              "is not a terminal, so there is no one to ask; pass --yes to do "
                              "it anyway\n")
    assert r.zcard(key) == 1
    done = subprocess.run([*CLI, command, "clear", "--yes"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, f"Cleared the {label}: 1 job deleted.\n")
    again = subprocess.run([*CLI, command, "clear", "--yes"], capture_output=True, text=True,
                           timeout=60)
    assert (again.returncode, again.stdout) == (0, f"The {label} is empty; nothing to clear.\n")
