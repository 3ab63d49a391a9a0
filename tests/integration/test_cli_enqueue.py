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


def test_with_r_the_jobs_own_options_apply_and_queue_still_wins(
        config: wurk.Config, r: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """inspection.md: with -r "the job's own options apply (its queue, `retry`…; `--queue`
    still wins)"."""
    (tmp_path / "claims_enqueue_jobs.py").write_text(
        "import wurk\n\n\n@wurk.job(name='Claims::Nightly', queue='reports', retry=2)\n"
        "def nightly(day: str) -> None:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert run(["enqueue", "-r", "claims_enqueue_jobs", "Claims::Nightly", '"mon"']) == 0
    (own,) = [json.loads(raw) for raw in r.lrange("queue:reports", 0, -1)]
    assert (own["args"], own["retry"]) == (["mon"], 2)
    assert run(["enqueue", "-r", "claims_enqueue_jobs", "Claims::Nightly", '"tue"',
                "--queue", "low"]) == 0
    (moved,) = [json.loads(raw) for raw in r.lrange("queue:low", 0, -1)]
    assert (moved["args"], moved["retry"], moved["queue"]) == (["tue"], 2, "low")
    assert r.llen("queue:reports") == 1
    assert "Enqueued Claims::Nightly on queue 'low' now." in capsys.readouterr().err


def test_enqueue_as_a_command(r: redis.Redis) -> None:
    done = subprocess.run([sys.executable, "-m", "wurk", "enqueue", "Sys::Incr", '"k"'],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ), check=False)
    assert done.returncode == 0, done.stderr
    (stored,) = r.lrange("queue:default", 0, -1)
    assert json.loads(stored)["jid"] == done.stdout.strip()


@pytest.mark.parametrize(("delay", "said"), [("nan", "finite"), ("inf", "finite"),
                                             ("1e400", "finite"), ("1e300", "year 9999")])
def test_an_in_that_is_no_number_of_seconds_is_a_usage_error(
        delay: str, said: str, config: wurk.Config, r: redis.Redis,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``--in nan`` is a bad flag value (exit 2 naming ``--in``), not a push that fails; so
    is a time no listing can show (``wurk scheduled`` would call it invalid)."""
    assert run(["enqueue", "Later", "--in", delay]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert "Error: Invalid value for '--in': " in err and said in err
    assert r.zcard("schedule") == 0
