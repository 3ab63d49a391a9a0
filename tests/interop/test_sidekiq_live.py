"""Live interop with real Ruby Sidekiq 6.4 (Debian's ``ruby-sidekiq``) on one Redis: Ruby
pushes and wurk runs, wurk pushes and Sidekiq runs, Sidekiq's API and its own dashboard read
what a wurk worker wrote. Skipped, with the reason in the summary, only where Ruby Sidekiq
cannot be run; ``.ci/run`` installs it.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.faults import wait_until
from tests.helpers.ruby import RUBY, Processes, ruby, sidekiq_missing
from tests.helpers.server import free_port
from tests.interop import wurk_jobs
from wurk import payload as P

_MISSING = sidekiq_missing()
pytestmark = pytest.mark.skipif(
    _MISSING is not None,
    reason=f"SKIPPED, NOT RUN: live interop with Ruby Sidekiq 6.4 — {_MISSING}")

# JSON-native arguments of every kind, the big integer past 2**53 and text beyond ASCII.
ARGS: list[Any] = [1, "two", {"three": 3, "nested": [{"deep": ["x"]}]}, [4.5, -0.5], None,
                   True, False, 9007199254740993, "é✓ — ünïcode", ""]
# Sidekiq 6.4 reads times as float epoch seconds.
WORKER_SETTINGS = """\
timestamp_format: float
heartbeat_interval: 0.5
poll_interval_average: 0.2
scheduler_initial_wait: 0
fetch_timeout: 0.5
timeout: 1
"""


def runs(r: redis.Redis, key: str) -> list[dict[str, Any]]:
    return [json.loads(entry) for entry in r.lrange(key, 0, -1)]


def start_wurk_worker(processes: Processes, tmp_path: Path, r: redis.Redis,
                      *args: str, settings: str = "") -> str:
    """A wurk worker on queue ``py``; its identity once its heartbeat is in Redis.
    ``settings``: more lines of its configuration file."""
    config = tmp_path / "wurk.yml"
    config.write_text(WORKER_SETTINGS + settings)
    worker = processes.wurk_worker(config, "-q", "py", *args)
    wait_until(lambda: bool(r.smembers("processes")) or worker.poll() is not None, 20,
               "the wurk worker's heartbeat")
    assert worker.poll() is None, processes.output("wurk-worker")
    (identity,) = r.smembers("processes")
    return str(identity)


# -- Ruby pushes, wurk runs --------------------------------------------------------------------
def test_ruby_pushes_plain_scheduled_and_bulk_jobs_and_wurk_runs_them_with_the_same_args(
    tmp_path: Path, r: redis.Redis, processes: Processes
) -> None:
    pushed = ruby("push.rb", "py", json.dumps(ARGS))
    assert r.zcard("schedule") == 1  # Sidekiq's own `at`: wurk's scheduler moves it
    # wurk writes JSON byte for byte as Ruby's generator does: what it reads, it writes back.
    written = [*r.lrange("queue:py", 0, -1), *r.zrange("schedule", 0, -1)]
    assert len(written) == 5 and all(P.dumps(P.loads(raw)) == raw for raw in written)
    start_wurk_worker(processes, tmp_path, r)
    wait_until(lambda: r.llen(wurk_jobs.RAN) >= 5, 30, "wurk to run the five Ruby jobs")
    ran = {entry["jid"]: entry["args"] for entry in runs(r, wurk_jobs.RAN)}
    assert ran == {pushed["plain"]: ARGS, pushed["scheduled"]: ["scheduled", *ARGS],
                   **{jid: [n] for jid, n in zip(pushed["bulk"], [1, 2, 3], strict=True)}}
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0 and r.zcard("schedule") == 0


def test_options_ruby_unset_with_nil_read_as_absent_so_the_job_runs_and_retries(
    tmp_path: Path, r: redis.Redis, processes: Processes
) -> None:
    pushed = ruby("push_nil.rb", "py")
    (failing,) = [json.loads(raw) for raw in r.lrange("queue:py", 0, -1)
                  if json.loads(raw)["jid"] == pushed["failing"]]
    assert failing["retry"] is None and failing["tags"] is None and failing["retry_for"] is None
    start_wurk_worker(processes, tmp_path, r)
    wait_until(lambda: r.llen(wurk_jobs.RAN) >= 1 and r.zcard("retry") >= 1, 30,
               "wurk to run the Ruby job and book the failure of the other")
    assert [entry["jid"] for entry in runs(r, wurk_jobs.RAN)] == [pushed["plain"]]
    (retried,) = [json.loads(raw) for raw in r.zrange("retry", 0, -1)]
    # "retry":null is no retry key: the job's own retry=3 applies, as Sidekiq applies its
    # class's option, and is written into the payload.
    assert (retried["jid"], retried["retry_count"], retried["retry"]) == (
        pushed["failing"], 0, 3)
    assert r.zcard("dead") == 0


def test_a_scheduled_job_ruby_unset_options_of_with_nil_runs_in_the_client_scheduler_mode(
    tmp_path: Path, r: redis.Redis, processes: Processes
) -> None:
    """``scheduler: client`` pushed the due job through wurk's client, which refused its
    ``"unique_until":null`` and ``"expires_in":null``: the job went to the dead set unrun."""
    pushed = ruby("schedule_nil.rb", "py")
    (entry,) = [json.loads(raw) for raw in r.zrange("schedule", 0, -1)]
    assert entry["unique_until"] is None and entry["expires_in"] is None
    start_wurk_worker(processes, tmp_path, r, settings="scheduler: client\n")
    wait_until(lambda: r.llen(wurk_jobs.RAN) >= 1 or r.zcard("dead") >= 1, 30,
               "wurk's client-mode scheduler to move the Ruby job and run it")
    assert r.zrange("dead", 0, -1) == []
    assert [entry["jid"] for entry in runs(r, wurk_jobs.RAN)] == [pushed["scheduled"]]


# -- wurk pushes, Sidekiq runs -----------------------------------------------------------------
def test_wurk_pushes_plain_scheduled_and_bulk_jobs_and_sidekiq_runs_them_with_the_same_args(
    r: redis.Redis, processes: Processes, redis_server: Any
) -> None:
    config = wurk.Config(redis_url=redis_server.url, timestamp_format="float")
    try:
        client = wurk.Client(config)
        plain = client.push({"class": "InteropRecord", "queue": "rb", "args": ARGS})
        scheduled = client.push({"class": "InteropRecord", "queue": "rb",
                                 "args": ["scheduled", *ARGS], "at": time.time() + 1})
        bulk = client.push_bulk({"class": "InteropRecord", "queue": "rb",
                                 "args": [[1], [2], [3]]})
    finally:
        config.close()
    sidekiq = processes.start("sidekiq", ["sidekiq", "-r", str(RUBY / "jobs.rb"), "-q", "rb",
                                          "-c", "2"], cwd=RUBY)
    wait_until(lambda: r.llen("interop:ruby-ran") >= 5 or sidekiq.poll() is not None, 60,
               "Sidekiq to run the five wurk jobs")
    assert sidekiq.poll() is None, processes.output("sidekiq")
    ran = {entry["jid"]: entry["args"] for entry in runs(r, "interop:ruby-ran")}
    assert ran == {plain: ARGS, scheduled: ["scheduled", *ARGS],
                   **{jid: [n] for jid, n in zip(bulk, [1, 2, 3], strict=True)}}
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0 and r.zcard("schedule") == 0
    assert "ERROR" not in processes.output("sidekiq")


# -- Sidekiq reads what a wurk worker wrote ------------------------------------------------------
def wurk_worker_with_history(processes: Processes, tmp_path: Path, r: redis.Redis,
                             redis_server: Any) -> tuple[str, int]:
    """A wurk worker (tag ``interop``, 3 threads) that ran two jobs, failed one into the retry
    set, killed one into the dead set and is running a slow one; (identity, its pid)."""
    identity = start_wurk_worker(processes, tmp_path, r, "-g", "interop", "-c", "3")
    config = wurk.Config(redis_url=redis_server.url, timestamp_format="float")
    try:
        client = wurk.Client(config)
        for job in ({"class": "Interop::Record", "args": ["a"]},
                    {"class": "Interop::Record", "args": ["b"]},
                    {"class": "Interop::Fail", "args": [7]},
                    {"class": "Interop::Die", "args": [8], "retry": 0},
                    {"class": "Interop::Slow", "args": [60]}):
            client.push({**job, "queue": "py"})
    finally:
        config.close()
    wait_until(lambda: (r.llen(wurk_jobs.RAN) == 2 and r.zcard("retry") == 1
                        and r.zcard("dead") == 1 and r.llen(wurk_jobs.SLOW_STARTED) == 1), 30,
               "the wurk worker's jobs")
    # Counters and the busy count are written with the next heartbeats.
    wait_until(lambda: r.get("stat:failed") == "2" and r.get("stat:processed") == "4"
               and r.hget(identity, "busy") == "1", 10, "the wurk worker's heartbeat")
    return identity, int(identity.split(":")[1])


def test_sidekiqs_api_reads_stats_retries_dead_and_processes_a_wurk_worker_wrote(
    tmp_path: Path, r: redis.Redis, processes: Processes, redis_server: Any
) -> None:
    identity, pid = wurk_worker_with_history(processes, tmp_path, r, redis_server)
    seen = ruby("read.rb")
    assert seen["stats"] == {"processed": 4, "failed": 2, "scheduled_size": 0,
                             "retry_size": 1, "dead_size": 1, "processes_size": 1,
                             "workers_size": 1, "enqueued": 0, "queues": {"py": 0}}
    (retry,) = seen["retries"]
    assert (retry["class"], retry["args"], retry["queue"]) == ("Interop::Fail", [7], "py")
    assert (retry["error_class"], retry["error_message"]) == ("ValueError",
                                                              "interop failure 7")
    assert retry["retry_count"] == 0 and retry["at"] > time.time() + 3000
    assert 0 < time.time() - retry["created_at"] < 120  # float seconds, read as such
    (dead,) = seen["dead"]
    assert (dead["class"], dead["args"], dead["error_class"], dead["error_message"]) == (
        "Interop::Die", [8], "RuntimeError", "interop death 8")
    (process,) = seen["processes"]
    assert (process["identity"], process["pid"], process["tag"]) == (identity, pid, "interop")
    assert (process["concurrency"], process["queues"], process["busy"]) == (3, ["py"], 1)
    assert process["quiet"] is False and 0 <= time.time() - process["beat"] < 10
    (work,) = seen["workers"]
    assert (work["process"], work["class"], work["args"], work["queue"]) == (
        identity, "Interop::Slow", [60], "py")


def test_sidekiqs_quiet_and_stop_reach_a_wurk_process(config: wurk.Config,
                                                       r: redis.Redis) -> None:
    """worker.md: a remote signal is picked up at the next heartbeat. Ruby's own
    ``Sidekiq::Process#quiet!`` and ``#stop!`` (what Sidekiq's dashboard and scripts call)
    reach a wurk process: its record is listed by Sidekiq's ProcessSet, and the TSTP and TERM
    they push are popped, once each, at its next beats."""
    from wurk.heartbeat import Heartbeat
    from wurk.metrics.counters import Counters
    from wurk.runtime.busy import Busy
    from wurk.runtime.identity import Identity
    from wurk.runtime.signals import SignalPipe

    identity = Identity.current()
    pipe = SignalPipe()
    heartbeat = Heartbeat(config, identity, busy=Busy(), counters=Counters(),
                          info={"concurrency": 1, "identity": str(identity),
                                "hostname": identity.hostname, "pid": identity.pid,
                                "queues": ["default"]}, on_signal=pipe.push)
    try:
        assert heartbeat.beat()
        for action, name in (("quiet!", "TSTP"), ("stop!", "TERM")):
            assert ruby("signal.rb", str(identity), action) == [str(identity)]
            assert heartbeat.beat()
            assert pipe.wait(0.5) == [name]
            assert heartbeat.beat()
            assert pipe.wait(0.05) == []  # acted on once
    finally:
        pipe.close()
        heartbeat.clear()


def test_sidekiqs_dashboard_lists_the_wurk_process_on_busy_and_its_failure_on_retries(
    tmp_path: Path, r: redis.Redis, processes: Processes, redis_server: Any
) -> None:
    identity, pid = wurk_worker_with_history(processes, tmp_path, r, redis_server)
    port = free_port()
    web = processes.start("rackup", ["rackup", "-p", str(port), "-o", "127.0.0.1",
                                     str(RUBY / "config.ru")], cwd=RUBY)

    def page(path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            assert answer.status == 200
            return str(answer.read().decode("utf-8"))

    def serving() -> bool:
        try:
            page("/")
        except OSError:
            return web.poll() is not None
        return True

    wait_until(serving, 60, "Sidekiq::Web under rackup")
    assert web.poll() is None, processes.output("rackup")
    busy = page("/busy")
    hostname = identity.split(":")[0]
    assert f'value="{identity}"' in busy  # the process row's quiet/stop form
    assert f"{hostname}:{pid}" in busy and "interop" in busy
    assert "Interop::Slow" in busy  # its running job
    retries = page("/retries")
    assert "Interop::Fail" in retries and "ValueError: interop failure 7" in retries
    dead = page("/morgue")
    assert "Interop::Die" in dead and "RuntimeError: interop death 8" in dead
