"""Failures across the two sides, with real Ruby Sidekiq 6.4: a job wurk pushes fails in
Ruby and wurk's API and retry poller read and move its retry entry; a job Ruby pushes fails
in wurk and Sidekiq's own poller moves the entry wurk wrote; wurk's API reads a live Ruby
process, its running job and the dead entry Ruby wrote."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.faults import wait_until
from tests.helpers.ruby import RUBY, Processes, ruby, sidekiq_missing
from tests.interop.test_sidekiq_live import start_wurk_worker
from wurk import payload as P
from wurk.api import DeadSet, ProcessSet, RetrySet, WorkSet
from wurk.scheduled import Scheduler

_MISSING = sidekiq_missing()
pytestmark = pytest.mark.skipif(
    _MISSING is not None,
    reason=f"SKIPPED, NOT RUN: live interop with Ruby Sidekiq 6.4 — {_MISSING}")


def sidekiq(processes: Processes, *args: str) -> Any:
    return processes.start("sidekiq", ["sidekiq", "-r", str(RUBY / "jobs.rb"), "-q", "rb",
                                       "-c", "2", *args], cwd=RUBY)


def test_a_job_wurk_pushes_fails_in_ruby_and_wurk_reads_and_moves_its_retry(
    r: redis.Redis, processes: Processes, redis_server: Any
) -> None:
    config = wurk.Config(redis_url=redis_server.url, timestamp_format="float")
    try:
        jid = wurk.Client(config).push({
            "class": "InteropFail", "queue": "rb", "args": [1], "retry": 3,
            "tags": ["a", "b"], "bid": "abcdefabcdef", "backtrace": True})
        ruby_worker = sidekiq(processes)
        wait_until(lambda: r.zcard("retry") == 1 or ruby_worker.poll() is not None, 60,
                   "Sidekiq to fail the wurk job")
        (entry,) = list(RetrySet(config))
        assert (entry.jid, entry.retry_count, entry.error_class, entry.error_message) == (
            jid, 0, "ArgumentError", "ruby failure [1]")
        assert (entry.tags, entry.bid, entry.queue) == (["a", "b"], "abcdefabcdef", "rb")
        assert isinstance(entry.failed_at, float) and entry.retried_at is None
        backtrace = entry.error_backtrace  # Ruby 6.4's MIME base64 of zlib(JSON)
        assert isinstance(backtrace, list) and "jobs.rb" in backtrace[0]
        r.zadd("retry", {entry.raw: time.time() - 1})
        assert Scheduler(config).enqueue_due() == 1
        wait_until(lambda: r.llen("interop:ruby-failed") == 2 and r.zcard("retry") == 1, 60,
                   "Sidekiq to run the retry wurk moved")
        (again,) = list(RetrySet(config))
        assert (again.jid, again.retry_count) == (jid, 1)
        assert isinstance(again.retried_at, float) and again.failed_at == entry.failed_at
    finally:
        config.close()


def test_a_job_ruby_pushes_fails_in_wurk_and_sidekiqs_poller_moves_its_retry(
    tmp_path: Path, r: redis.Redis, processes: Processes
) -> None:
    pushed = ruby("push_nil.rb", "py")
    start_wurk_worker(processes, tmp_path, r)
    wait_until(lambda: r.zcard("retry") == 1, 30, "wurk to book the failure")
    processes.stop()
    (raw,) = r.zrange("retry", 0, -1)
    r.zadd("retry", {raw: time.time() - 1})
    (seen,) = ruby("read.rb")["retries"]
    assert (seen["jid"], seen["retry_count"], seen["error_class"]) == (
        pushed["failing"], 0, "ValueError")
    assert ruby("enq.rb") == {"py": 1}  # Sidekiq's own poller pushed it back
    assert r.zcard("retry") == 0
    back = [P.loads(entry) for entry in r.lrange("queue:py", 0, -1)]
    (job,) = [job for job in back if job["jid"] == pushed["failing"]]
    assert (job["retry_count"], job["error_class"], job["args"]) == (0, "ValueError", [9])


def test_wurks_api_reads_a_live_ruby_process_its_running_job_and_its_dead(
    r: redis.Redis, processes: Processes, redis_server: Any
) -> None:
    config = wurk.Config(redis_url=redis_server.url, timestamp_format="float")
    try:
        client = wurk.Client(config)
        slow = client.push({"class": "InteropSlow", "queue": "rb", "args": [30]})
        dies = client.push({"class": "InteropFail", "queue": "rb", "args": [2], "retry": 0})
        # -t 1: at the teardown's TERM the 30 s job goes back at once (Sidekiq's own
        # 25 s shutdown wait would hold the teardown until the helper's kill, 15 s).
        ruby_worker = sidekiq(processes, "-g", "rubytag", "-t", "1")
        wait_until(lambda: (r.llen("interop:ruby-slow") == 1 and r.zcard("dead") == 1
                            and r.hget(f"{next(iter(r.smembers('processes')), '')}",
                                       "busy") == "1")
                   or ruby_worker.poll() is not None, 60, "Sidekiq's jobs and heartbeat")
        (process,) = list(ProcessSet(config))
        assert (process.pid, process.tag, process.queues) == (ruby_worker.pid, "rubytag",
                                                              ["rb"])
        wait_until(lambda: len(list(WorkSet(config))) == 1, 20, "Sidekiq's work map")
        (work,) = list(WorkSet(config))
        assert (work.to_dict()["job"]["jid"], work.to_dict()["queue"]) == (slow, "rb")
        (dead,) = list(DeadSet(config))
        assert (dead.jid, dead.error_class, dead.retry_count) == (dies, "ArgumentError", 0)
    finally:
        config.close()
