"""Iterable jobs in real worker processes: a 10,000-item job through two SIGTERMs and one
SIGKILL, and cancellation of a running job, counted from inside the job."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import redis

import wurk
from tests.system import iterable_jobs as jobs
from tests.system.conftest import Worker, wait_for

StartWorker = Callable[..., Worker]
SETTINGS = """
reaper_interval: 1
timeout: 10
"""
ITEMS = 10_000
PAUSE = 0.001  # per item: keeps the job running across the signals


def start(start_worker: StartWorker) -> Worker:
    return start_worker("-c", "2", "-r", "tests.system.iterable_jobs", settings=SETTINGS)


def progress(r: redis.Redis) -> int:
    return int(r.hlen(jobs.LEDGER))


def test_a_10000_item_job_survives_two_sigterms_and_a_sigkill(
        config: wurk.Config, r: redis.Redis, start_worker: StartWorker) -> None:
    jid = jobs.Walk.perform_async(ITEMS, PAUSE)
    assert jid is not None
    key = f"it-{jid}"
    cursors = []
    for mark in (1_500, 3_500):  # two stops: each saves the next item's cursor and re-pushes
        worker = start(start_worker)
        wait_for(lambda mark=mark: progress(r) >= mark, timeout=120, message=f"{mark} items")
        worker.signal("TERM")
        assert worker.wait(30) == 0, worker.output()
        queued = [json.loads(raw) for raw in r.lrange("queue:default", 0, -1)]
        assert [job["jid"] for job in queued] == [jid]  # back on its queue, same jid
        cursor = json.loads(r.hget(key, "c") or "null")
        assert cursor == progress(r)  # the next item: none ran twice, none was skipped
        cursors.append(cursor)
    worker = start(start_worker)
    # Killed once this execution has flushed (5 s in), so the kill lands between two flushes.
    wait_for(lambda: progress(r) >= 6_000 and json.loads(r.hget(key, "c") or "0") > cursors[1],
             timeout=120, message="6,000 items and a flush")
    worker.signal("KILL")
    worker.wait(10)
    flushed = json.loads(r.hget(key, "c") or "null")  # the last flush before the kill
    reached = progress(r)  # items run in order: the highest run so far is reached - 1
    assert reached >= 6_000 and flushed <= reached
    start(start_worker)  # its reaper gives the killed worker's job back
    wait_for(lambda: r.lrange(jobs.EVENTS, 0, -1) == ["complete"], timeout=180,
             message="the job to complete")
    counts = {int(item): int(n) for item, n in r.hgetall(jobs.LEDGER).items()}
    twice = sorted(item for item, n in counts.items() if n == 2)
    print(f"\n{ITEMS} items through 2 SIGTERMs and a SIGKILL: cursors at the stops "
          f"{cursors}, last flush before the kill {flushed}, reached {reached}; "
          f"{len(twice)} items ran twice")
    assert sorted(counts) == list(range(ITEMS))  # every item at least once
    assert set(counts.values()) <= {1, 2}  # and at most twice
    # Twice only between the last flush and the kill: the one in flight and those after it.
    assert all(flushed <= item < reached for item in twice)
    runs = r.lrange(jobs.RUNS, 0, -1)
    assert runs[:3] == ["1:None", f"2:{cursors[0]}", f"3:{cursors[1]}"]
    assert runs[3] == f"4:{flushed}"  # resumed from its cursor, not from the start
    assert not r.exists(key)


def test_a_cancelled_running_job_stops_within_a_flush_and_an_item(
        config: wurk.Config, r: redis.Redis, start_worker: StartWorker) -> None:
    start(start_worker)
    pause = 0.05
    jid = jobs.Walk.perform_async(ITEMS, pause)
    assert jid is not None
    wait_for(lambda: progress(r) >= 5, timeout=60, message="the job to start")
    asked = time.time()
    wurk.cancel(jid)
    wait_for(lambda: r.llen(jobs.EVENTS) >= 1, timeout=30, message="on_cancel")
    event = r.lrange(jobs.EVENTS, 0, -1)
    assert len(event) == 1 and event[0].startswith("cancel:")
    took = float(event[0].rsplit(":", 1)[1]) - asked
    print(f"\ncancelled after {took:.2f} s (flush interval 5 s, items of {pause} s)")
    # The bound the job keeps: one flush interval and one item. The margin is for the
    # clocks of two processes and a loaded machine's scheduling, not for the job.
    assert took <= wurk.iteration.FLUSH_INTERVAL + pause + 1.0
    stopped_at = progress(r)
    time.sleep(0.5)  # ample: 10 items' time, had it gone on
    assert progress(r) == stopped_at
    assert r.llen("queue:default") == 0 and r.zcard("retry") == 0
    assert r.hexists(f"it-{jid}", "cancelled")


def test_an_async_job_stops_on_sigterm_and_resumes_at_its_cursor(
        config: wurk.Config, r: redis.Redis, start_worker: StartWorker) -> None:
    jid = jobs.AsyncWalk.perform_async(2_000, 0.001)
    assert jid is not None
    worker = start(start_worker)
    wait_for(lambda: progress(r) >= 300, timeout=60, message="300 items")
    worker.signal("TERM")
    assert worker.wait(30) == 0, worker.output()
    cursor = json.loads(r.hget(f"it-{jid}", "c") or "null")
    assert cursor == progress(r)
    start(start_worker)
    wait_for(lambda: r.lrange(jobs.EVENTS, 0, -1) == ["complete"], timeout=120,
             message="the job to complete")
    counts = [int(n) for n in r.hvals(jobs.LEDGER)]
    assert len(counts) == 2_000 and set(counts) == {1}
    assert r.lrange(jobs.RUNS, 0, -1) == [f"2:{cursor}"]
