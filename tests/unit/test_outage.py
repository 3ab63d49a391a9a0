"""The backoff and the outage log; telling a transient refusal from any other error reply."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
import redis

import wurk
from wurk.connections.replies import refusal, reply_code
from wurk.runtime.outage import FIRST_WAIT, MAX_WAIT, Backoff, Outage


def test_backoff_ceiling_doubles_from_the_first_wait_up_to_the_cap_and_resets() -> None:
    backoff = Backoff()
    assert backoff.wait == 0 and backoff.ceiling == 0
    ceilings = []
    for _ in range(9):
        wait = backoff.next_wait()
        ceilings.append(backoff.ceiling)
        assert 0 <= wait <= backoff.ceiling and backoff.wait == wait  # drawn once per failure
    assert ceilings == [FIRST_WAIT * 2**i for i in range(6)] + [MAX_WAIT] * 3
    assert ceilings[:6] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2])
    for _ in range(10_000):  # a very long outage: still the cap, no overflow
        backoff.next_wait()
    assert backoff.ceiling == MAX_WAIT and backoff.wait <= MAX_WAIT
    backoff.reset()
    assert backoff.wait == 0 and backoff.ceiling == 0
    assert 0 <= backoff.next_wait() <= FIRST_WAIT


def test_threads_that_failed_together_do_not_retry_in_lockstep() -> None:
    """Full jitter: 200 threads that lost Redis at one moment draw their waits across the
    whole range under the ceiling, so they do not all come back in the same instant."""
    backoffs = [Backoff() for _ in range(200)]
    for failures in range(1, 8):
        waits = [b.next_wait() for b in backoffs]
        ceiling = backoffs[0].ceiling
        assert all(0 <= w <= ceiling for w in waits)
        assert len(set(waits)) > 190, f"after {failures} failures the waits are in step"
        assert min(waits) < ceiling / 4 and max(waits) > ceiling * 3 / 4
        assert ceiling / 3 < sum(waits) / len(waits) < ceiling * 2 / 3


def test_an_outage_is_reported_once_and_its_end_logged_once_with_its_length(
    caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="wurk")
    reported: list[tuple[BaseException, dict[str, Any]]] = []
    config = wurk.Config(error_handlers=[lambda exc, ctx: reported.append((exc, ctx))])
    outage = Outage(config, "fetch (capsule default)")
    outage.ended()  # no outage: nothing to say
    errors = [wurk.RedisUnavailable(f"down {n}") for n in range(5)]
    for error in errors:
        outage.failed(error)
    assert outage.active
    assert reported == [(errors[0], {"context": "fetch (capsule default)"})]
    outage.ended()
    outage.ended()
    ends = [r.getMessage() for r in caplog.records if "Redis is back" in r.getMessage()]
    assert len(ends) == 1
    assert ends[0].startswith("fetch (capsule default): Redis is back after ")
    assert ends[0].endswith("s (5 failed tries)")
    assert not outage.active


def test_an_outage_shared_by_threads_is_still_one_start_and_one_end(
    caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="wurk")
    reported: list[BaseException] = []
    outage = Outage(wurk.Config(error_handlers=[lambda e, c: reported.append(e)]), "fetch")
    barrier = threading.Barrier(8)

    def one_thread() -> None:
        barrier.wait(timeout=5)
        for _ in range(50):
            outage.failed(wurk.RedisUnavailable("down"))
        outage.ended()

    threads = [threading.Thread(target=one_thread) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    ends = [r for r in caplog.records if "Redis is back" in r.getMessage()]
    # Threads that fail after another one ended it start a new outage; never more starts
    # than ends, and far fewer than the 400 failures.
    assert 1 <= len(reported) == len(ends) <= 8


@pytest.mark.parametrize(("error", "code"), [
    (redis.exceptions.ReadOnlyError("You can't write against a read only replica."),
     "READONLY"),
    (redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
     "OOM"),
    (redis.exceptions.BusyLoadingError("Valkey is loading the dataset in memory"), "LOADING"),
    (redis.ResponseError("BUSY Redis is busy running a script."), "BUSY"),
    (redis.ResponseError("UNBLOCKED force unblock from blocking operation"), "UNBLOCKED"),
    (redis.ResponseError("NOREPLICAS Not enough good replicas to write."), "NOREPLICAS"),
    (redis.ResponseError("Command # 1 (SADD queues x) of pipeline caused error: BUSY Redis "
                         "is busy"), "BUSY"),
    (redis.exceptions.MasterDownError("Link with MASTER is down"), "MASTERDOWN"),
])
def test_transient_refusals_become_redis_unavailable_naming_the_reply(
    error: Exception, code: str
) -> None:
    assert reply_code(error) == code
    unavailable = refusal(error, "redis://:secret@example:6379/0")
    assert isinstance(unavailable, wurk.RedisUnavailable)
    assert f"refused the command: {code}" in str(unavailable)
    assert "secret" not in str(unavailable)


@pytest.mark.parametrize("error", [
    redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
    redis.ResponseError("BUSYGROUP Consumer Group name already exists"),
    redis.ResponseError("ERR unknown command 'FOO'"),
    redis.exceptions.NoScriptError("No matching script."),
    ValueError("not a Redis error at all"),
])
def test_other_errors_are_not_refusals(error: Exception) -> None:
    assert refusal(error, "redis://localhost") is None
