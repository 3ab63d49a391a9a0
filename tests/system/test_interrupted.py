"""``Job.interrupted()`` in a real worker: False while it runs, True once the worker is told
to quiet (TSTP) or stop (TERM), for sync and async jobs; the job then ends as it chooses."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

import wurk
from tests.system import interrupt_jobs as jobs
from tests.system.conftest import Worker, wait_for


@pytest.mark.parametrize("signal", ["TSTP", "TERM"])
def test_a_job_sees_its_worker_told_to_stop(config: wurk.Config, r: redis.Redis,
                                            start_worker: Callable[..., Worker],
                                            signal: str) -> None:
    jobs.Patient.perform_async("sync")
    jobs.patient_async.perform_async("async")
    worker = start_worker("-r", "tests.system.interrupt_jobs", "-c", "2")
    for key in ("sync", "async"):
        wait_for(lambda key=key: r.llen(f"{key}:started") == 1, message=f"{key} job started")
        assert r.lrange(f"{key}:started", 0, -1) == ["0"]  # not before the signal
    worker.signal(signal)
    for key in ("sync", "async"):
        wait_for(lambda key=key: r.llen(f"{key}:saw") == 1, timeout=10,
                 message=f"{key} job saw the signal")
        assert r.lrange(f"{key}:saw", 0, -1) == ["1"]
    if signal == "TSTP":
        worker.signal("TERM")
    assert worker.wait(15) == 0
    assert r.llen("queue:default") == 0  # they returned: acknowledged, not requeued
    assert r.get("stat:processed") == "2"


def test_outside_a_worker_nothing_is_interrupted() -> None:
    assert wurk.interrupted() is False
    assert jobs.Patient().interrupted() is False
