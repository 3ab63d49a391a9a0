"""A job over a rate limit is rescheduled with a backoff, not failed; then it fails."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.runner import Drain
from wurk.limiter import OverLimit
from wurk.limiter.base import forget_registrations
from wurk.limiter.reschedule import (
    BACKOFF_JITTER,
    BACKOFF_STEP,
    default_backoff,
    informed_backoff,
)

FULL = wurk.limiter.concurrent("jobs-full", 1, wait_timeout=0, reschedule=2,
                               backoff=lambda limiter, job, exc: 30)
SKIPPING = wurk.limiter.concurrent("jobs-skip", 1, wait_timeout=0, policy="skip")
ran: list[str] = []


class TooManyRequests(Exception):
    """What an HTTP client raises for a 429."""


@wurk.job(name="Limits::Full", retry=3)
def full_job() -> None:
    with FULL.within_limit():
        ran.append("full")


@wurk.job(name="Limits::Skip")
def skip_job() -> None:
    with SKIPPING.within_limit():
        ran.append("skip")


@wurk.job(name="Limits::UniqueSkip", unique_for=3600)
def unique_skip_job(n: int) -> None:
    with SKIPPING.within_limit():
        ran.append("unique skip")


@wurk.job(name="Limits::Http")
def http_job() -> None:
    raise TooManyRequests("429")


@pytest.fixture
def drain(config: wurk.Config) -> Iterator[Drain]:
    forget_registrations()
    ran.clear()
    runner = Drain(config)
    yield runner
    runner.close()


def scheduled(r: redis.Redis) -> list[tuple[dict[str, Any], float]]:
    return [(json.loads(m), s) for m, s in r.zrange("schedule", 0, -1, withscores=True)]


def test_over_limit_reschedules_after_the_backoff_and_is_no_failure(
        config: wurk.Config, r: redis.Redis, drain: Drain) -> None:
    holder = FULL.within_limit()
    holder.__enter__()  # someone else holds the only slot
    jid = full_job.perform_async()
    before = time.time()
    assert drain() == 1
    [(job, at)] = scheduled(r)
    assert job["jid"] == jid and job["overrated"] == 1 and "enqueued_at" not in job
    assert before + 29 < at < time.time() + 31  # the limiter's own backoff
    assert r.zcard("retry") == 0 and drain.counters.failed == 0 and ran == []
    holder.__exit__(None, None, None)


def test_past_reschedule_the_error_takes_the_retry_path(
        config: wurk.Config, r: redis.Redis, drain: Drain) -> None:
    FULL.within_limit().__enter__()
    wurk.push({"class": "Limits::Full", "args": [], "overrated": 2, "retry": 3})
    drain()
    [raw] = r.zrange("retry", 0, -1)
    job = json.loads(raw)
    assert job["error_class"] == "wurk.limiter.OverLimit"
    assert job["overrated"] == 2  # not reset
    assert drain.counters.failed == 1 and r.zcard("schedule") == 0


def test_configured_error_classes_reschedule_with_the_default_backoff(
        r: redis.Redis, drain: Drain) -> None:
    config = drain.config
    config.limiter_errors.append(TooManyRequests)
    http_job.perform_async()
    before = time.time()
    drain()
    [(job, at)] = scheduled(r)
    assert job["overrated"] == 1
    assert before + BACKOFF_STEP < at < time.time() + BACKOFF_STEP + BACKOFF_JITTER + 2


def test_a_global_backoff_hook_decides_when_none_is_given(
        r: redis.Redis, drain: Drain) -> None:
    seen: list[Any] = []

    def backoff(limiter: Any, job: dict[str, Any], exc: BaseException) -> float:
        seen.append((limiter, job["overrated"], type(exc).__name__))
        return 5

    drain.config.limiter_errors.append(TooManyRequests)
    drain.config.limiter_backoff = backoff
    http_job.perform_async()
    before = time.time()
    drain()
    [(_, at)] = scheduled(r)
    assert seen == [(None, 1, "TooManyRequests")] and before + 4 < at < time.time() + 6


def test_skip_policy_finishes_the_job_unrun(r: redis.Redis, drain: Drain) -> None:
    SKIPPING.within_limit().__enter__()
    skip_job.perform_async()
    assert drain() == 1
    assert ran == [] and r.zcard("schedule") == 0 and r.zcard("retry") == 0
    assert drain.counters.failed == 0


def test_a_skipped_unique_job_releases_its_lock(r: redis.Redis, drain: Drain) -> None:
    SKIPPING.within_limit().__enter__()
    assert unique_skip_job.perform_async(1) is not None
    assert drain() == 1 and ran == []
    # done, unrun and not rescheduled: nothing is pending, so nothing holds the lock
    assert wurk.unique.locked("default", "Limits::UniqueSkip", [1]) is None
    assert list(r.scan_iter("unique:*")) == []
    assert unique_skip_job.perform_async(1) is not None


def test_reschedule_zero_means_an_ordinary_failure(r: redis.Redis, drain: Drain) -> None:
    drain.config.limiter_reschedule = 0
    drain.config.limiter_errors.append(TooManyRequests)
    http_job.perform_async()
    drain()
    assert r.zcard("schedule") == 0 and r.zcard("retry") == 1


def test_over_limit_outside_jobs_is_just_an_exception(config: wurk.Config) -> None:
    FULL.within_limit().__enter__()
    forget_registrations()
    with pytest.raises(OverLimit), FULL.within_limit():
        pass


def test_the_default_backoff_grows_with_each_reschedule() -> None:
    for count in (1, 2, 10):
        value = default_backoff(count)
        assert BACKOFF_STEP * count < value <= BACKOFF_STEP * count + BACKOFF_JITTER


class SlowDown(Exception):
    """A 429 error that carries the server's Retry-After."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"429, retry after {retry_after} s")
        self.retry_after = retry_after


@wurk.job(name="Limits::SlowDown")
def slow_down_job() -> None:
    raise SlowDown(3)


def test_a_known_wait_reschedules_after_it_with_jitter_not_the_default(
        r: redis.Redis, drain: Drain) -> None:
    drain.config.limiter_errors.append(SlowDown)
    slow_down_job.perform_async()
    before = time.time()
    drain()
    [(job, at)] = scheduled(r)
    assert job["overrated"] == 1
    assert before + 3 <= at <= time.time() + 3 + 3  # the wait, plus up to once more


def test_the_jitter_on_a_known_wait_grows_with_each_reschedule() -> None:
    for overrated in (1, 2, 5):
        waits = [informed_backoff(6.5, overrated) for _ in range(200)]
        assert all(6.5 <= w <= 6.5 + 6.5 * overrated for w in waits)
        assert max(waits) - min(waits) > 6.5 * overrated / 2  # spread, not one instant
    # A wait of milliseconds still spreads its jobs over a second per reschedule.
    assert max(informed_backoff(0.01, 1) for _ in range(200)) > 0.5


@pytest.mark.parametrize(("answer", "low", "high"), [
    (-1.0, 300, 600), (float("nan"), 300, 600),  # outside 0 s - 1 day: the default backoff
    (10 * 86400.0, 86400 - 1, 86400 + 1),  # capped at a day
])
def test_a_backoff_hook_answer_outside_a_day_falls_back_or_is_capped(
        r: redis.Redis, drain: Drain, answer: float, low: float, high: float) -> None:
    """rate-limiting.md: ``limiter_backoff`` answers outside 0 s - 1 day fall back (to
    300 x overrated s plus up to 300 s of jitter) or are capped; ``limiter_reschedule``
    defaults to 20."""
    assert wurk.Config().limiter_reschedule == 20
    drain.config.limiter_errors.append(TooManyRequests)
    drain.config.limiter_backoff = lambda limiter, job, exc: answer
    http_job.perform_async()
    before = time.time()
    drain()
    [(_, at)] = scheduled(r)
    assert before + low <= at <= time.time() + high
