"""Batches worked by real worker processes that are SIGKILLed mid-run: the reaper gives
their jobs back, the jobs run again, and every callback still fires exactly once."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable

import redis

import wurk
from tests.system import batch_jobs
from tests.system.conftest import Worker, wait_for

StartWorker = Callable[..., Worker]
SETTINGS = """
reaper_interval: 1
"""
JOBS = 10_000


def fired(r: redis.Redis) -> Counter[str]:
    """event:bid → how many distinct callback jobs ran for it."""
    runs = set(r.lrange(batch_jobs.FIRED, 0, -1))  # a callback job run twice counts once
    return Counter(line.rsplit(":", 1)[0] for line in runs)


def start(start_worker: StartWorker) -> Worker:
    return start_worker("-c", "10", "-r", "tests.system.batch_jobs", settings=SETTINGS)


def kill_after(r: redis.Redis, worker: Worker, marks: int) -> None:
    wait_for(lambda: r.llen("batch:marks") >= marks, timeout=120, message=f"{marks} marks")
    worker.signal("KILL")
    worker.wait(10)


def test_a_10000_job_batch_survives_two_sigkills(config: wurk.Config, r: redis.Redis,
                                                 start_worker: StartWorker) -> None:
    batch = batch_jobs.watched(description="ten thousand")
    with batch.jobs():
        batch_jobs.mark.perform_bulk([["batch:marks", 0.001]] * JOBS)
    kill_after(r, start(start_worker), 2_000)
    kill_after(r, start(start_worker), 5_000)
    assert not wurk.BatchStatus(batch.bid).complete
    start(start_worker)
    wait_for(lambda: fired(r)[f"success:{batch.bid}"] >= 1, timeout=180,
             message="the success callback")
    wait_for(lambda: r.llen("queue:default") == 0, timeout=30, message="an empty queue")
    status = wurk.BatchStatus(batch.bid)
    ran = Counter(r.lrange("batch:marks", 0, -1))
    print(f"\nbatch of {JOBS} through two SIGKILLs: jobs run {sum(ran.values())} times, "
          f"{len(ran)} distinct; callbacks {dict(fired(r))}")
    assert len(ran) == JOBS  # every job ran; some twice (in flight at a kill)
    assert (status.total, status.pending, status.failures) == (JOBS, 0, 0)
    assert fired(r) == Counter({f"complete:{batch.bid}": 1, f"success:{batch.bid}": 1})


def test_a_poison_pill_fires_its_batchs_death_once(config: wurk.Config, r: redis.Redis,
                                                  start_worker: StartWorker) -> None:
    """A job that keeps killing its worker is killed as a poison pill on its third recovery;
    the kill goes through the death handlers, so the batch fires death (and complete) and
    is not left pending forever."""
    batch = batch_jobs.watched(description="with a pill")
    with batch.jobs():
        batch_jobs.mark.perform_async("batch:marks", 0)
        pill = batch_jobs.crash.perform_async("batch:crashes")
    for _ in range(6):
        worker = start_worker("-c", "1", "-r", "tests.system.batch_jobs", settings=SETTINGS)
        while worker.process.poll() is None and r.zcard("dead") == 0:
            time.sleep(0.05)
        if r.zcard("dead"):
            break
    wait_for(lambda: fired(r)[f"death:{batch.bid}"] == 1, message="the death callback")
    wait_for(lambda: fired(r)[f"complete:{batch.bid}"] == 1, message="the complete callback")
    status = wurk.BatchStatus(batch.bid)
    assert status.dead_jids == [pill] and not status.succeeded
    assert json.loads(r.zrange("dead", 0, -1)[0])["error_class"] == "wurk.Poisoned"
    time.sleep(0.5)
    assert sum(fired(r).values()) == 2
