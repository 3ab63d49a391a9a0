"""Ruby's nil in a payload's options, on every path: the entries real Sidekiq 6.4 wrote for a
job whose options a Ruby app unset with nil (``tests/fixtures/sidekiq-6.4/nil_options.json``:
a due scheduled job, and the retry entry Sidekiq booked when the job failed) are read as
options not set by the client's push, by both scheduler modes, by the worker, by the retry
booking, by the API and by the dashboard — none of them refuses the job or buries it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

import wurk
from wurk import payload as P
from wurk.api import RetrySet, ScheduledSet
from wurk.config import Capsule
from wurk.fetch.reliable import ReliableFetch
from wurk.metrics.counters import Counters
from wurk.processor import JobRunner
from wurk.runtime.busy import Busy
from wurk.runtime.identity import Identity
from wurk.scheduled import Scheduler
from wurk.web import create_app

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sidekiq-6.4" / "nil_options.json"
PAST = 1_000_000_000.5  # 2001: due
RAN: list[list[Any]] = []


@wurk.job(name="PlainJob")
def plain_job(*args: Any) -> None:
    RAN.append(list(args))


def _an_hour(count: int, exc: BaseException) -> float:
    return 3600.0


@wurk.job(name="FailJob", retry=3, retry_in=_an_hour)
def fail_job(n: int) -> None:
    raise ValueError(f"failure {n}")


def ruby_entries() -> dict[str, str]:
    """The members Sidekiq wrote: ``schedule`` (PlainJob) and ``retry`` (FailJob)."""
    stored = json.loads(FIXTURE.read_text())
    return {key: stored[key][0][0] for key in ("schedule", "retry")}


def nulls(raw: str) -> set[str]:
    return {key for key, value in P.loads(raw).items() if value is None}


@pytest.fixture
def settings(redis_server: Any) -> Iterator[dict[str, Any]]:
    yield {"redis_url": redis_server.url, "timestamp_format": "float"}


def work_off(config: wurk.Config, r: redis.Redis) -> None:
    """Run every job queued in ``default`` with a real fetch and runner."""
    runner = JobRunner(config, counters=Counters(), busy=Busy())
    fetcher = ReliableFetch(config, Capsule(queues=[("default", 0)]),
                            config.pool("nil", size=2), identity=Identity.current(),
                            capsule_index=0, slot=0)
    while r.llen("queue:default"):
        unit = fetcher.fetch(0.01)
        assert unit is not None
        runner.run(unit)
    fetcher.flush_acks()
    runner.close()


@pytest.mark.parametrize("mode", ["atomic", "client"])
def test_ruby_nil_options_are_moved_run_and_retried_as_not_set(
        settings: dict[str, Any], r: redis.Redis, mode: str) -> None:
    """``scheduler="client"`` pushed the due job and the due retry through the client, which
    refused ``"unique_until":null`` and ``"expires_in":null``: both went to the dead set
    (the error naming the field), where the atomic mode and the worker ran them."""
    entries = ruby_entries()
    unset = nulls(entries["schedule"])
    assert {"unique_until", "expires_in", "unique_for", "retry", "retry_for", "tags",
            "backtrace", "dead", "retry_queue", "bid", "wrapped", "encrypt",
            "timeout"} <= unset
    config = wurk.configure(scheduler=mode, **settings)
    r.zadd("schedule", {entries["schedule"]: PAST})
    r.zadd("retry", {entries["retry"]: PAST})
    scheduler = Scheduler(config)
    try:
        assert scheduler.enqueue_due() == 2
    finally:
        scheduler.stop(2)
    assert r.zcard("dead") == 0, r.zrange("dead", 0, -1)
    queued = {P.loads(raw)["class"]: raw for raw in r.lrange("queue:default", 0, -1)}
    assert set(queued) == {"PlainJob", "FailJob"}
    for raw in queued.values():  # moved as they are: every null kept, none stamped
        job = P.loads(raw)
        assert nulls(raw) >= unset - {"retry"} and "expires_at" not in job, job
    RAN.clear()
    work_off(config, r)
    assert RAN == [["due"]]
    (retried,) = [P.loads(raw) for raw in r.zrange("retry", 0, -1)]
    assert (retried["class"], retried["retry_count"], retried["retry"]) == ("FailJob", 1, 3)
    assert retried["error_message"] == "failure 9" and "error_backtrace" not in retried
    assert nulls(P.dumps(retried)) >= unset - {"retry"}
    assert r.zcard("dead") == 0


def test_a_push_of_ruby_nil_options_keeps_them_and_reads_them_as_not_set(
        settings: dict[str, Any], r: redis.Redis) -> None:
    """A raw push (what the client-mode scheduler does with a due job) of the payload Ruby
    wrote: refused with ``InvalidPayload`` naming ``unique_until`` (or ``expires_in``)."""
    wurk.configure(**settings)
    job = P.loads(ruby_entries()["schedule"])
    for only in ({"unique_until": None}, {"expires_in": None},
                 {"unique_for": 60, "unique_until": None}):
        pushed = wurk.push({"class": "PlainJob", "args": [1], **only})
        (stored,) = [P.loads(raw) for raw in r.lrange("queue:default", 0, -1)
                     if P.loads(raw)["jid"] == pushed]
        assert {key: stored[key] for key in only} == only and "expires_at" not in stored
        if "unique_for" in only:  # the lock is taken, released on success (the default)
            assert r.get(f"unique:{stored['unique_digest']}") == pushed
    assert wurk.push(job) == job["jid"]
    assert r.zcard("dead") == 0


def test_the_api_and_the_dashboard_read_ruby_nil_options_as_not_set(
        settings: dict[str, Any], r: redis.Redis) -> None:
    config = wurk.configure(**settings)
    entries = ruby_entries()
    r.zadd("schedule", {entries["schedule"]: time.time() + 3600})
    r.zadd("retry", {entries["retry"]: time.time() + 3600})
    (scheduled,) = list(ScheduledSet(config))
    (retry,) = list(RetrySet(config))
    for entry in (scheduled, retry):
        assert (entry.tags, entry.bid, entry.display_args) == ([], None, entry.args)
    assert (scheduled.display_class, retry.display_class) == ("PlainJob", "FailJob")
    with TestClient(create_app(config), base_url="http://localhost") as browser:
        for page in ("scheduled", "retries"):
            key = browser.get(f"/api/{page}").json()["entries"][0]["key"]
            shown = browser.get(f"/{page}/{key}")
            assert shown.status_code == 200 and "Job" in shown.text


def test_a_null_partition_is_the_default_partition_at_push_as_the_scripts_read_it(
        settings: dict[str, Any], r: redis.Redis) -> None:
    """A push to a partitioned queue refused ``"partition":null`` (not a partition name),
    where the fetch scripts read it as the default partition."""
    wurk.configure(partitions={"imports": 2}, **settings)
    jid = wurk.push({"class": "PlainJob", "args": [1], "queue": "imports", "partition": None})
    assert isinstance(jid, str) and r.zcard("dead") == 0
