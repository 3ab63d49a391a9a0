"""Results across processes: a ``wurk worker`` process runs the jobs, this process pushes
them and waits — sync and async — for the value, or the typed failure."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

import pytest
import redis

import wurk
from tests.system.conftest import Worker
from tests.system.result_jobs import aadd, add, charge


def test_sync_and_async_handles_get_the_value_another_process_returned(
        start_worker: Callable[..., Worker], r: redis.Redis) -> None:
    worker = start_worker("-r", "tests.system.result_jobs", "-c", "2")
    handle = add.perform_async(2, 3)
    assert handle is not None
    found = handle.result(timeout=5)
    assert found["sum"] == 5
    assert found["pid"] == worker.process.pid != os.getpid()  # run by the worker process

    async def main() -> list[int]:
        handles = [await aadd.aperform_async(n, n) for n in range(10)]
        first = handles[0]
        assert first is not None
        return [await first.aresult(timeout=5),
                *await asyncio.gather(*(h.aresult(timeout=5) for h in handles if h))]

    assert asyncio.run(main()) == [0, *(2 * n for n in range(10))]


def test_a_failed_job_raises_its_remote_class_and_message(
        start_worker: Callable[..., Worker]) -> None:
    start_worker("-r", "tests.system.result_jobs")
    handle = charge.perform_async("4242")
    assert handle is not None
    with pytest.raises(wurk.JobFailed) as failed:
        handle.result(timeout=5)
    error = failed.value
    assert error.error_class == "tests.system.result_jobs.CardDeclined"
    assert error.message == "card 4242 declined" and not error.retries_remain
    assert str(error) == (f"job {handle} failed: tests.system.result_jobs.CardDeclined: "
                          "card 4242 declined")

    async def main() -> None:
        with pytest.raises(wurk.JobFailed, match="CardDeclined: card 1 declined"):
            await (await charge.aperform_async("1"))  # type: ignore[misc]

    asyncio.run(main())
