"""Every feature the server chain serves behaves for an ``async def`` job as for a sync one:
each test here is the twin of a sync test (named in its docstring), its job ``async def``
and run on the lane's path (``AsyncDrain``: the async walk, ``JobRunner._execute_async``).
Where a test is parametrised over both kinds, the sync one runs on ``Drain``."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.runner import AsyncDrain, Drain
from tests.helpers.wait import wait_until
from wurk import api, crypto
from wurk.limiter.base import forget_registrations

ran: list[Any] = []
SECRET = "4242-4242-4242-4242-async-sekret"
tenant: contextvars.ContextVar[str] = contextvars.ContextVar("aparity_tenant")
FULL = wurk.limiter.concurrent("aparity-full", 1, wait_timeout=0, reschedule=2,
                               backoff=lambda limiter, job, exc: 30)
SKIPPING = wurk.limiter.concurrent("aparity-skip", 1, wait_timeout=0, policy="skip")


class TooManyRequests(Exception):
    """What an HTTP client raises for a 429."""


@pytest.fixture
def adrain(config: wurk.Config) -> Iterator[AsyncDrain]:
    forget_registrations()
    ran.clear()
    runner = AsyncDrain(config)
    yield runner
    runner.close()


def lock_keys(r: redis.Redis) -> list[str]:
    return sorted(r.scan_iter("unique:*"))


def scheduled(r: redis.Redis) -> list[tuple[dict[str, Any], float]]:
    return [(json.loads(m), s) for m, s in r.zrange("schedule", 0, -1, withscores=True)]


def retries_due(config: wurk.Config, r: redis.Redis) -> None:
    """Every retry due now, moved back to its queue as the scheduler does (a retry from the
    API would not count: it gives the run back)."""
    r.zadd("retry", {raw: 0 for raw in r.zrange("retry", 0, -1)})
    wurk.scheduled.Scheduler(config).enqueue_due()


def backdate(r: redis.Redis, queue: str = "queue:default") -> None:
    """Every queued job's deadline a minute in the past, as time passing would."""
    for index, raw in enumerate(r.lrange(queue, 0, -1)):
        job = json.loads(raw)
        job["expires_at"] = job["expires_at"] - 60_000 if isinstance(job["expires_at"], int) \
            else job["expires_at"] - 60
        r.lset(queue, index, json.dumps(job))


# -- expiring jobs (test_expiry.py) ---------------------------------------------------------------
@wurk.job(name="AsyncParity::expiring", expires_in=30)
async def expiring(n: int) -> None:
    ran.append(("expiring", n))


@wurk.job(name="AsyncParity::expiring_unique", expires_in=30, unique_for=600)
async def expiring_unique(n: int) -> None:
    ran.append(("expiring_unique", n))


def test_an_expired_async_job_is_acknowledged_unrun_counted_and_announced(
        config: wurk.Config, r: redis.Redis, adrain: AsyncDrain) -> None:
    """test_expiry.py::test_an_expired_job_is_acknowledged_unrun_counted_and_announced."""
    seen: list[dict[str, Any]] = []
    registration = wurk.expiry.on_expired(seen.append)
    try:
        jid = expiring.perform_async(1)
        backdate(r)
        assert adrain() == 1
    finally:
        registration.remove()
    assert ran == [] and [job["jid"] for job in seen] == [jid]
    assert r.get("stat:expired") == "1"
    assert adrain.counters.failed == 0 and r.zcard("retry") == 0 and r.zcard("dead") == 0
    assert r.llen("queue:default") == 0


def test_an_expired_unique_async_job_releases_its_lock(r: redis.Redis,
                                                       adrain: AsyncDrain) -> None:
    """test_expiry.py::test_an_expired_unique_job_releases_its_lock."""
    expiring_unique.perform_async(1)
    backdate(r)
    adrain()
    assert ran == [] and lock_keys(r) == []
    assert expiring_unique.perform_async(1) is not None


def test_an_expired_async_batch_job_counts_as_a_success(r: redis.Redis,
                                                      adrain: AsyncDrain) -> None:
    """test_batches.py::test_an_expired_job_counts_as_a_success (a job outside a workflow:
    dropped unrun, it is done)."""
    batch = wurk.Batch()
    with batch.jobs():
        expiring.perform_async(2)
    backdate(r)
    adrain()
    status = wurk.BatchStatus(batch.bid)
    assert ran == [] and status.complete and status.succeeded and status.failures == 0


# -- unique jobs (test_unique.py) -----------------------------------------------------------------
@wurk.job(name="AsyncParity::unique", unique_for=600)
async def aunique(account: int) -> None:
    ran.append([account])


@wurk.job(name="AsyncParity::unique_flaky", unique_for=600, retry=1)
async def aunique_flaky(account: int) -> None:
    ran.append([account])
    if len(ran) == 1:
        raise RuntimeError("the first run fails")


@wurk.job(name="AsyncParity::unique_doomed", unique_for=600, retry=0)
async def aunique_doomed(account: int) -> None:
    raise RuntimeError("always")


@wurk.job(name="AsyncParity::unique_start", unique_for=600, unique_until="start")
async def aunique_start(account: int) -> None:
    again = await aunique_start.aperform_async(account) if not ran else "(none)"
    ran.append([account, again is not None])


def test_an_async_jobs_success_releases_its_lock(r: redis.Redis, adrain: AsyncDrain) -> None:
    """test_unique.py::test_success_releases_the_lock."""
    aunique.perform_async(1)
    adrain()
    assert ran == [[1]] and lock_keys(r) == []
    assert aunique.perform_async(1) is not None


def test_an_async_jobs_failure_keeps_the_lock_for_the_retry(
        config: wurk.Config, r: redis.Redis, adrain: AsyncDrain) -> None:
    """test_unique.py::test_a_failure_keeps_the_lock_for_the_retry."""
    jid = aunique_flaky.perform_async(1)
    adrain()
    assert r.zcard("retry") == 1
    assert wurk.unique.locked("default", "AsyncParity::unique_flaky", [1]) == jid
    assert aunique_flaky.perform_async(1) is None
    api.RetrySet(config).retry_all()
    adrain()
    assert ran == [[1], [1]] and lock_keys(r) == []


def test_an_async_jobs_unique_until_start_releases_before_it_runs(
        r: redis.Redis, adrain: AsyncDrain) -> None:
    """test_unique.py::test_unique_until_start_releases_before_the_job_runs."""
    aunique_start.perform_async(3)
    assert aunique_start.perform_async(3) is None
    assert adrain() == 2
    assert ran == [[3, True], [3, True]]
    assert lock_keys(r) == []


@wurk.job(name="AsyncParity::unique_start_limited", unique_for=600, unique_until="start",
          rate_limit=wurk.limiter.window("aparity-unique-start", 1, 60, wait_timeout=0))
async def aunique_start_limited(account: int) -> None:
    ran.append([account])


def test_an_async_jobs_unique_until_start_keeps_the_lock_its_rate_limit_reschedules(
        r: redis.Redis, adrain: AsyncDrain) -> None:
    """test_unique.py::test_unique_until_start_keeps_the_lock_of_a_run_its_rate_limit_...."""
    aunique_start_limited.perform_async(1)
    adrain()
    assert ran == [[1]] and lock_keys(r) == []
    jid = aunique_start_limited.perform_async(1)
    adrain()  # over the limit: rescheduled unrun, still pending
    assert ran == [[1]] and r.zcard("schedule") == 1
    assert wurk.unique.locked("default", "AsyncParity::unique_start_limited", [1]) == jid
    assert aunique_start_limited.perform_async(1) is None


def test_an_async_jobs_death_releases_its_lock(r: redis.Redis, adrain: AsyncDrain) -> None:
    """test_unique.py::test_death_releases_the_lock."""
    aunique_doomed.perform_async(1)
    adrain()
    assert r.zcard("dead") == 1 and lock_keys(r) == []


# -- rate limits (test_limiter_jobs.py, test_job_options.py's rate_limit) -------------------------
@wurk.job(name="AsyncParity::full", retry=3)
async def afull() -> None:
    async with FULL.within_limit():
        ran.append("full")


@wurk.job(name="AsyncParity::skip")
async def askip() -> None:
    async with SKIPPING.within_limit():
        ran.append("skip")


@wurk.job(name="AsyncParity::unique_skip", unique_for=3600)
async def aunique_skip(n: int) -> None:
    async with SKIPPING.within_limit():
        ran.append("unique skip")


def test_a_skipped_async_unique_job_releases_its_lock(r: redis.Redis,
                                                      adrain: AsyncDrain) -> None:
    """test_limiter_jobs.py::test_a_skipped_unique_job_releases_its_lock."""
    SKIPPING.within_limit().__enter__()
    assert aunique_skip.perform_async(1) is not None
    adrain()
    assert ran == [] and lock_keys(r) == []
    assert aunique_skip.perform_async(1) is not None


@wurk.job(name="AsyncParity::http")
async def ahttp() -> None:
    raise TooManyRequests("429")


@wurk.job(name="AsyncParity::limited",
          rate_limit=wurk.limiter.window("aparity-window", 1, 60, wait_timeout=0))
async def alimited(tag: str) -> None:
    ran.append(tag)


def test_an_async_job_over_a_limit_is_rescheduled_after_the_backoff_and_no_failure(
        r: redis.Redis, adrain: AsyncDrain) -> None:
    """test_limiter_jobs.py::test_over_limit_reschedules_after_the_backoff_and_is_no_failure."""
    holder = FULL.within_limit()
    holder.__enter__()  # someone else holds the only slot
    try:
        jid = afull.perform_async()
        before = time.time()
        assert adrain() == 1
        [(job, at)] = scheduled(r)
        assert job["jid"] == jid and job["overrated"] == 1 and "enqueued_at" not in job
        assert before + 29 < at < time.time() + 31
        assert r.zcard("retry") == 0 and adrain.counters.failed == 0 and ran == []
    finally:
        holder.__exit__(None, None, None)


def test_an_async_job_past_reschedule_takes_the_retry_path(
        r: redis.Redis, adrain: AsyncDrain) -> None:
    """test_limiter_jobs.py::test_past_reschedule_the_error_takes_the_retry_path."""
    holder = FULL.within_limit()
    holder.__enter__()
    try:
        wurk.push({"class": "AsyncParity::full", "args": [], "overrated": 2, "retry": 3})
        adrain()
        [raw] = r.zrange("retry", 0, -1)
        job = json.loads(raw)
        assert job["error_class"] == "wurk.limiter.OverLimit" and job["overrated"] == 2
        assert adrain.counters.failed == 1 and r.zcard("schedule") == 0
    finally:
        holder.__exit__(None, None, None)


def test_an_async_job_under_a_skip_policy_finishes_unrun(r: redis.Redis,
                                                         adrain: AsyncDrain) -> None:
    """test_limiter_jobs.py::test_skip_policy_finishes_the_job_unrun."""
    holder = SKIPPING.within_limit()
    holder.__enter__()
    try:
        askip.perform_async()
        assert adrain() == 1
        assert ran == [] and r.zcard("schedule") == 0 and r.zcard("retry") == 0
        assert adrain.counters.failed == 0
    finally:
        holder.__exit__(None, None, None)


def test_an_async_jobs_configured_limiter_error_reschedules(r: redis.Redis,
                                                            adrain: AsyncDrain) -> None:
    """test_limiter_jobs.py::test_configured_error_classes_reschedule_with_the_default_backoff."""
    adrain.config.limiter_errors.append(TooManyRequests)
    ahttp.perform_async()
    adrain()
    [(job, _)] = scheduled(r)
    assert job["overrated"] == 1 and r.zcard("retry") == 0 and adrain.counters.failed == 0


def test_an_async_jobs_own_rate_limit_reschedules_the_second_run(
        r: redis.Redis, adrain: AsyncDrain) -> None:
    """test_job_options.py's check_rate_limit."""
    alimited.perform_async("first")
    alimited.perform_async("second")
    adrain()
    assert ran == ["first"] and r.zcard("schedule") == 1 and adrain.counters.failed == 0


def test_a_rate_limited_async_batch_job_is_not_counted_until_it_runs(
        r: redis.Redis, adrain: AsyncDrain) -> None:
    """test_batches.py::test_a_rate_limited_job_is_not_counted_until_it_runs."""
    holder = FULL.within_limit()
    holder.__enter__()
    try:
        batch = wurk.Batch()
        with batch.jobs():
            afull.perform_async()
        adrain()
        assert r.zcard("schedule") == 1
        status = wurk.BatchStatus(batch.bid)
        assert (status.pending, status.failures, status.complete) == (1, 0, False)
    finally:
        holder.__exit__(None, None, None)


# -- cancel (test_time_limits_and_cancel.py), in a batch ------------------------------------------
@wurk.job(name="AsyncParity::cancels_itself_sync")
def cancels_itself_sync() -> None:
    raise wurk.JobCancelled("cancelled while it ran")


@wurk.job(name="AsyncParity::cancels_itself_async")
async def cancels_itself_async() -> None:
    raise wurk.JobCancelled("cancelled while it ran")


@pytest.mark.parametrize("job", [cancels_itself_sync, cancels_itself_async],
                         ids=["sync", "async"])
def test_a_batch_job_cancelled_as_it_runs_counts_as_dead_so_the_batch_completes(
        config: wurk.Config, r: redis.Redis, job: Any) -> None:
    """test_time_limits_and_cancel.py::test_a_cancelled_batch_job_counts_as_dead_so_the_
    batch_completes, for a job stopped as it runs (``JobCancelled`` out of its body)."""
    batch = wurk.Batch()
    with batch.jobs():
        jid = job.perform_async()
    runner = (AsyncDrain if job is cancels_itself_async else Drain)(config)
    try:
        assert runner() == 1
    finally:
        runner.close()
    status = wurk.BatchStatus(batch.bid)
    assert status.complete and status.dead_jids == [jid] and status.pending == 1
    assert r.get("wurk:stat:cancelled") == "1"
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0 and runner.counters.failed == 0


# -- retries and death handlers (test_retry.py) ---------------------------------------------------
@wurk.job(name="AsyncParity::retried", retry=2)
async def aretried() -> None:
    raise RuntimeError("fails every time")


@wurk.job(name="AsyncParity::exhausted", retry=0,
          retries_exhausted=lambda payload, exc: ran.append(("exhausted", type(exc).__name__)))
async def aexhausted() -> None:
    raise ValueError("fails once for all")


def test_an_async_jobs_failure_is_retried_then_dies_and_the_handlers_run(
        config: wurk.Config, r: redis.Redis, adrain: AsyncDrain) -> None:
    """test_retry.py (first failure fields, retry n allows n + 1 executions, death handlers)."""
    deaths: list[tuple[str, str]] = []
    config.death_handlers.append(lambda job, exc: deaths.append((job["jid"],
                                                                 type(exc).__name__)))
    jid = aretried.perform_async()
    adrain()
    [raw] = r.zrange("retry", 0, -1)
    entry = json.loads(raw)
    assert entry["retry_count"] == 0 and entry["error_class"] == "RuntimeError"
    assert entry["error_message"] == "fails every time"
    for _ in range(2):
        retries_due(config, r)
        adrain()
    assert r.zcard("retry") == 0 and r.zcard("dead") == 1
    assert adrain.counters.failed == 3 and deaths == [(jid, "RuntimeError")]
    other = aexhausted.perform_async()
    adrain()
    assert ran == [("exhausted", "ValueError")] and deaths[-1] == (other, "ValueError")


# -- encryption (test_crypto.py) ------------------------------------------------------------------
@wurk.job(name="AsyncParity::charge", encrypt=True, retry=1)
async def acharge(order_id: int, card: dict[str, str]) -> None:
    ran.append(card)
    if card.get("fail"):
        raise RuntimeError(f"declined for order {order_id}")


def test_an_async_job_gets_its_secret_and_a_retry_keeps_one_envelope(
        config: wurk.Config, r: redis.Redis, adrain: AsyncDrain) -> None:
    """test_crypto.py::test_the_secret_never_reaches_redis_and_the_job_gets_it and
    test_a_retry_and_the_dead_set_keep_one_envelope."""
    crypto.enable(active_version=1, key_for={1: os.urandom(32)}.get, config=config)
    acharge.perform_async(7, {"card": SECRET})
    acharge.perform_async(8, {"card": SECRET, "fail": "yes"})
    assert SECRET not in json.dumps(r.lrange("queue:default", 0, -1))
    adrain()
    assert sorted(card.get("fail", "") for card in ran) == ["", "yes"]
    assert all(card["card"] == SECRET for card in ran)
    entry = json.loads(r.zrange("retry", 0, -1)[0])
    assert crypto.is_envelope(entry["args"][-1]) and SECRET not in json.dumps(entry)
    opened = crypto.open_envelope(config, entry["args"][-1], entry["jid"])
    assert crypto.ENVELOPE_MARK not in json.dumps(opened)  # sealed once
    retries_due(config, r)
    adrain()
    dead = json.loads(r.zrange("dead", 0, -1)[0])
    assert crypto.is_envelope(dead["args"][-1]) and SECRET not in json.dumps(dead)


# -- context propagation (test_context.py) --------------------------------------------------------
@wurk.job(name="AsyncParity::record_context")
async def arecord_context(label: str) -> None:
    ran.append((label, tenant.get(None)))


@wurk.job(name="AsyncParity::chain_context")
async def achain_context() -> None:
    await arecord_context.aperform_async("child")


def test_the_saved_context_is_set_around_an_async_job_and_passed_on(
        config: wurk.Config, r: redis.Redis, adrain: AsyncDrain) -> None:
    """test_context.py::test_saved_at_push_and_set_around_the_job and
    test_a_job_pushing_a_job_passes_the_context_on."""
    wurk.context.persist(tenant, config=config)
    token = tenant.set("acme")
    try:
        arecord_context.perform_async("first")
        achain_context.perform_async()
    finally:
        tenant.reset(token)
    arecord_context.perform_async("unset")
    adrain()
    assert sorted(ran) == [("child", "acme"), ("first", "acme"), ("unset", None)]


# -- execution metrics (test_metrics.py) ----------------------------------------------------------
@wurk.job(name="AsyncParity::measured", retry=0)
async def ameasured(fail: bool) -> None:
    await asyncio.sleep(0)
    if fail:
        raise RuntimeError("measured failure")


def test_the_execution_metrics_count_what_an_async_job_did(
        config: wurk.Config, adrain: AsyncDrain, caplog: pytest.LogCaptureFixture) -> None:
    """test_metrics.py::test_the_middleware_counts_what_the_job_did, through the worker's
    own link."""
    from wurk.metrics.tracking import ExecutionMetrics

    [metrics] = [link for link in config.server_middleware if isinstance(link, ExecutionMetrics)]
    seen: list[tuple[str, str | None]] = []
    metrics.add_observer(lambda name, queue, payload, ms, error: seen.append(
        (name, type(error).__name__ if error else None)))
    ameasured.perform_async(False)
    ameasured.perform_async(True)
    with caplog.at_level(logging.ERROR, logger="wurk"):
        adrain()
    assert sorted(seen, key=repr) == [("AsyncParity::measured", "RuntimeError"),
                                      ("AsyncParity::measured", None)]
    counts = metrics.tracker.pending()["AsyncParity::measured"]
    assert (counts.processed, counts.failed) == (2, 1)


# -- results (test_results.py) -------------------------------------------------------------------
@wurk.job(name="AsyncParity::result_fails", result_ttl=600, retry=3)
async def aresult_fails(message: str) -> None:
    raise ValueError(message)


@wurk.job(name="AsyncParity::result_cancelled", result_ttl=600)
async def aresult_cancelled() -> None:
    raise wurk.JobCancelled("stopped by a cancel")


def test_an_async_jobs_failure_with_a_retry_due_and_its_cancel_are_recorded(
        r: redis.Redis, adrain: AsyncDrain) -> None:
    """test_results.py::test_a_failure_with_a_retry_due_says_so and
    test_a_cancelled_job_stores_cancelled_and_the_cancel_goes_on."""
    handle = aresult_fails.perform_async("card declined")
    cancelled = aresult_cancelled.perform_async()
    assert handle is not None and cancelled is not None
    adrain()
    with pytest.raises(wurk.JobFailed) as failed:
        handle.result(timeout=1)
    assert (failed.value.error_class, failed.value.retries_remain) == ("ValueError", True)
    assert r.zcard("retry") == 1
    with pytest.raises(wurk.JobCancelled):
        cancelled.result(timeout=1)


# -- an application's own sync link around an async job (the helper-thread hop) -----------------
def app_link(job: Any, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
    ran.append(("link", payload["class"]))
    return call_next()


@wurk.job(name="AsyncParity::split")
async def asplit_under_link(count: int) -> int:
    from wurk.workflow import fan_out

    fan_out(ahalf, [[i] for i in range(count)])
    return count


@wurk.job(name="AsyncParity::half")
async def ahalf(n: int) -> int:
    return n * 2


def test_an_async_step_under_an_application_sync_link_fans_out_and_counts_once(
        config: wurk.Config, r: redis.Redis, adrain: AsyncDrain) -> None:
    """A sync server link of the application runs an async job's rest in another task (the
    walk's helper-thread hop): the step's children and count still land, once."""
    from wurk.workflow import Workflow, WorkflowStatus

    config.server_middleware.add(app_link)
    wf = Workflow("under a link")
    parts = wf.step(asplit_under_link, 3)
    wf.step(ahalf, parts.children).named("after")
    wid = wf.start()
    while adrain():
        pass
    status = WorkflowStatus(wid)
    assert [status.steps[f"split[{i}]"].value for i in range(3)] == [0, 2, 4]
    assert status.steps["split"].state == "succeeded" and status.state == "succeeded"
    assert ("link", "AsyncParity::split") in ran


def test_unique_and_limits_under_an_application_sync_link(
        config: wurk.Config, r: redis.Redis, adrain: AsyncDrain) -> None:
    config.server_middleware.add(app_link)
    aunique_doomed.perform_async(1)
    holder = FULL.within_limit()
    holder.__enter__()
    try:
        afull.perform_async()
        adrain()
    finally:
        holder.__exit__(None, None, None)
    assert r.zcard("dead") == 1 and lock_keys(r) == []
    [(job, _)] = scheduled(r)
    assert job["overrated"] == 1 and r.zcard("retry") == 0


# -- a job class's own retry hooks (test_retry.py's HookedJob) -------------------------------------
class AHooked(wurk.Job, name="AsyncParity::Hooked", retry=1):
    async def perform(self, n: int) -> None:
        raise RuntimeError(f"hooked {n}")

    def retry_in(self, count: int, exc: BaseException) -> Any:
        ran.append(("retry_in", self.jid, count))
        return 600

    def retries_exhausted(self, payload: dict[str, Any], exc: BaseException) -> Any:
        ran.append(("exhausted", self.jid, type(exc).__name__))
        return "discard"


def test_an_async_job_classs_retry_hooks_get_its_instance(
        config: wurk.Config, r: redis.Redis, adrain: AsyncDrain) -> None:
    """test_retry.py::test_class_hooks_need_an_instance / test_function_job_hooks."""
    jid = AHooked.perform_async(1)
    before = time.time()
    adrain()
    [(_, at)] = r.zrange("retry", 0, -1, withscores=True)
    assert before + 600 <= at < time.time() + 610
    retries_due(config, r)
    adrain()
    assert ran == [("retry_in", jid, 0), ("exhausted", jid, "RuntimeError")]
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0  # discarded


# -- sync links around async jobs hold helper threads: never all of them ------------------------
HOP_STARTS: list[str] = []


def hop_a(job: Any, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
    return call_next()


def hop_b(job: Any, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
    return call_next()


def hop_c(job: Any, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
    return call_next()


@wurk.job(name="AsyncParity::to_thread_together")
async def to_thread_together(n: int) -> None:
    HOP_STARTS.append(str(n))
    while len(HOP_STARTS) < 2:  # both slots' jobs inside every link before either goes on
        await asyncio.sleep(0.005)
    await asyncio.to_thread(time.sleep, 0.01)
    ran.append(n)


def test_async_jobs_under_several_sync_links_still_get_a_thread_for_to_thread(
        redis_server: Any, r: redis.Redis) -> None:
    """Each sync server link around an async job holds a helper thread of the loop's for
    the job's run; the pool had one a slot (and 4 spare), so two async slots' jobs under
    three sync links held all six, and their ``asyncio.to_thread`` waited for ever: the
    worker stuck, its jobs never acknowledged. There is now one a slot for each sync link."""
    ran.clear()
    HOP_STARTS.clear()
    config = wurk.configure(redis_url=redis_server.url, concurrency=1, async_concurrency=2,
                            heartbeat_interval=0.2, fetch_timeout=0.2, timeout=1,
                            shutdown_grace=0.5, scheduler_initial_wait=0)
    for link in (hop_a, hop_b, hop_c):
        config.server_middleware.add(link)
    to_thread_together.perform_bulk([[1], [2], [3]])
    worker = wurk.embed(config)
    try:
        wait_until(lambda: sorted(ran) == [1, 2, 3], timeout=10, what="every job to end")
    finally:
        worker.stop()
