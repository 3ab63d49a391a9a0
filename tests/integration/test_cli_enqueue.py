"""``wurk enqueue``: a job pushed from the shell, now or later, as Sidekiq would read it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

import wurk
from wurk.cli import run

ROOT = Path(__file__).resolve().parents[2]


def test_enqueue_now_with_json_arguments(config: wurk.Config, r: redis.Redis,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["enqueue", "HardJob", "42", '"two"', '{"a": [1, null]}', "--queue",
                "critical"]) == 0
    out, err = capsys.readouterr()
    jid = out.strip()
    (stored,) = r.lrange("queue:critical", 0, -1)
    job = json.loads(stored)
    assert (job["class"], job["args"], job["queue"], job["jid"]) == (
        "HardJob", [42, "two", {"a": [1, None]}], "critical", jid)
    assert "enqueued_at" in job and r.sismember("queues", "critical")
    assert "Enqueued HardJob on queue 'critical' now." in err


def test_enqueue_in_seconds_schedules_it(config: wurk.Config, r: redis.Redis,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    before = time.time()
    assert run(["enqueue", "Later", "--in", "30"]) == 0
    ((member, score),) = r.zrange("schedule", 0, -1, withscores=True)
    assert json.loads(member)["class"] == "Later" and json.loads(member)["args"] == []
    assert before + 30 <= score <= time.time() + 30
    assert r.llen("queue:default") == 0


@pytest.mark.parametrize(("args", "text"), [
    (["Job", "two"], "argument 1 ('two') is not JSON"),
    (["Job", "1", "[" * 200], "argument 2"),
    (["Job", "NaN"], "argument 1"),
    (["Job", "--queue", "a|b"], "--queue"),
    (["Job", "--in", "-1"], "--in"),
])
def test_bad_input_is_one_line_and_exit_2(config: wurk.Config, r: redis.Redis,
                                          capsys: pytest.CaptureFixture[str],
                                          args: list[str], text: str) -> None:
    assert run(["enqueue", *args]) == 2
    assert text in capsys.readouterr().err
    assert r.dbsize() == 0


def test_enqueue_as_a_command(r: redis.Redis) -> None:
    done = subprocess.run([sys.executable, "-m", "wurk", "enqueue", "Sys::Incr", '"k"'],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ), check=False)
    assert done.returncode == 0, done.stderr
    (stored,) = r.lrange("queue:default", 0, -1)
    assert json.loads(stored)["jid"] == done.stdout.strip()
