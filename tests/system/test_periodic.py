"""Periodic jobs with real worker processes: three workers share a loop while the leader is
killed twice and paused once — each tick is pushed exactly once; and ``wurk periodic``.

The same run with a real minute cron and the default leader timings is a command
(``python -m tests.chaos.leader_run --minutes 5``); here a 3-second tick keeps it short."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import redis

from tests.chaos.leader_run import KILL, PAUSE, FailoverPlan, failover
from tests.system.conftest import ROOT, Worker, wait_for

FAST = FailoverPlan(workers=3, seconds=30, tick=3, faults=(KILL, PAUSE, KILL), renew=0.5,
                    check=5.0, poll=1.0)


@pytest.mark.timeout(360)  # real time, 25-60 s here: more on a slower machine
def test_three_workers_push_each_tick_once_through_kills_and_a_pause(
        tmp_path: Path, r: redis.Redis) -> None:
    result = failover(FAST, tmp_path, os.environ["REDIS_URL"])
    print("\n" + result.table() + "\n" + result.line())
    assert result.faults == [KILL, PAUSE, KILL]
    assert len(result.per_tick) >= 9
    assert result.doubled == [] and result.skipped == [] and result.stray == 0


def wurk_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wurk", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_periodic_check_exits_2_naming_each_bad_entry(tmp_path: Path) -> None:
    config = tmp_path / "wurk.yml"
    config.write_text("""
periodic:
  - {cron: "61 * * * *", job: Sys::Incr, args: [a]}
  - {cron: "*/5 * * * *", job: Sys::Incr, tz: Mars/Olympus}
  - {cron: "@hourly", job: No::SuchJob}
  - {cron: "0 3 * * *", job: Sys::Incr, tz: Europe/Berlin, args: [b], queue: low}
""")
    done = wurk_cli("periodic", "check", "-r", "tests.system.worker_jobs", "-C", str(config))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert any("entry 1" in line and "'61 * * * *' is not valid" in line for line in lines)
    assert any("entry 2" in line and "'Mars/Olympus' is not a known IANA zone" in line
               for line in lines)
    assert any("entry 3" in line and "no job named 'No::SuchJob'" in line for line in lines)
    assert not any("entry 4" in line for line in lines)
    assert "3 problems in periodic loops" in done.stderr


def test_periodic_check_passes_a_good_file_and_a_worker_refuses_a_bad_one(
        tmp_path: Path) -> None:
    good = tmp_path / "good.yml"
    good.write_text('periodic:\n  - {cron: "0 3 * * *", job: Sys::Incr, tz: Europe/Berlin}\n')
    done = wurk_cli("periodic", "check", "-r", "tests.system.worker_jobs", "-C", str(good))
    assert done.returncode == 0, done.stderr
    assert "(Europe/Berlin) → Sys::Incr  next " in done.stdout and "1 loop checked" in done.stdout
    bad = tmp_path / "bad.yml"
    bad.write_text('periodic:\n  - {cron: "@hourly", job: No::SuchJob}\n')
    worker = wurk_cli("worker", "-r", "tests.system.worker_jobs", "-C", str(bad))
    assert worker.returncode == 2 and "no job named 'No::SuchJob'" in worker.stderr


def test_periodic_list_shows_the_loops_in_redis(r: redis.Redis) -> None:
    r.sadd("periodic", "aaaaaaaaaaaaaaaa")
    r.hset("loops:aaaaaaaaaaaaaaaa", mapping={
        "schedule": "30 2 * * *", "klass": "Sys::Incr", "tz": "America/New_York",
        "options": json.dumps({"args": [1]}), "paused": "1", "nf": "1800000000"})
    done = wurk_cli("periodic", "list")
    assert done.returncode == 0, done.stderr
    assert "30 2 * * *" in done.stdout and "America/New_York" in done.stdout
    assert "2027-01-15T03:00:00-05:00" in done.stdout and "paused" in done.stdout
    listed = json.loads(wurk_cli("periodic", "list", "--json").stdout)["loops"]
    assert listed[0]["next_run"] == 1800000000 and listed[0]["paused"] is True


LEADER_SETTINGS = """
leader_renew_interval: 0.5
leader_check_interval: 1
"""


def test_the_leader_says_so_in_its_title_and_a_leader_false_process_never_leads(
        r: redis.Redis, start_worker: Callable[..., Worker]) -> None:
    follower = start_worker(settings=LEADER_SETTINGS + "leader: false\n")
    # Where a process would start campaigning (at once), this one says it does not.
    wait_for(lambda: "does not campaign (leader=false)" in follower.output(),
             message="the follower's choice")
    assert r.get("dear-leader") is None, "leader: false must keep it out of the election"
    leader = start_worker(settings=LEADER_SETTINGS)
    wait_for(lambda: (r.get("dear-leader") or "").split(":")[-2:-1] == [str(leader.process.pid)],
             message="the second worker to lead")

    def title(worker: Worker) -> str:
        return " ".join(psutil.Process(worker.process.pid).cmdline())

    wait_for(lambda: " leader" in title(leader), message="'leader' in the title")
    assert " leader" not in title(follower)
    leader.signal("TSTP")  # quiet: it steps down
    wait_for(lambda: r.get("dear-leader") is None, message="the quiet leader to step down")
    wait_for(lambda: " leader" not in title(leader), message="the title to drop 'leader'")
