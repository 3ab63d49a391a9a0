"""Destructive commands ask on a terminal: the real ``wurk`` CLI in a subprocess whose stdin
is a pseudo-terminal, answered yes and no."""

from __future__ import annotations

import os
import subprocess
import sys

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
