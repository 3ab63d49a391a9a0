"""A capsule's own server middleware in a real worker (a launcher in this process, its
threads and event loop as in production): a link of capsule ``single`` runs around its
jobs only, inside the application's links and outside the worker's time limits, sync and
async; the default capsule's jobs run through the application's chain alone."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.faults import InProcessWorker
from tests.helpers.server import Server
from tests.helpers.sets import retry_entry
from tests.helpers.wait import wait_until
from wurk.asyncjobs import SPARE_HELPERS, sync_server_links
from wurk.config import Capsule
from wurk.control.stopper import Stopper
from wurk.launcher import BUILT_IN

SINGLE = "capsule-single"
SLOW = "capsule-slow"
_lock = threading.Lock()
EVENTS: list[tuple[str, str]] = []  # (the job's tag, what happened), in the order it did


def note(tag: str, what: str) -> None:
    with _lock:
        EVENTS.append((tag, what))


def seen(tag: str) -> list[str]:
    with _lock:
        return [what for seen_tag, what in EVENTS if seen_tag == tag]


def tag_of(payload: dict[str, Any]) -> str:
    return str(payload["args"][0])


class AppLink:
    """The application's link, on the configuration's chain: every capsule's jobs."""

    def __call__(self, job: Any, payload: dict[str, Any], queue: str,
                 call_next: Callable[[], Any]) -> Any:
        note(tag_of(payload), "app>")
        try:
            return call_next()
        finally:
            note(tag_of(payload), "<app")


class SingleLink:
    """Capsule ``single``'s own link (a lock middleware, say); what passed through it."""

    def __call__(self, job: Any, payload: dict[str, Any], queue: str,
                 call_next: Callable[[], Any]) -> Any:
        note(tag_of(payload), "single>")
        try:
            return call_next()
        except BaseException as exc:
            note(tag_of(payload), f"raised {type(exc).__name__}")
            raise
        finally:
            note(tag_of(payload), "<single")


class AsyncSingleLink:
    """The same as an ``async def`` link."""

    async def __call__(self, job: Any, payload: dict[str, Any], queue: str,
                       call_next: Callable[[], Any]) -> Any:
        note(tag_of(payload), "single>")
        try:
            return await call_next()
        except BaseException as exc:
            note(tag_of(payload), f"raised {type(exc).__name__}")
            raise
        finally:
            note(tag_of(payload), "<single")


@wurk.job(name="CapsuleMiddleware::Sync")
def sync_job(tag: str) -> None:
    note(tag, "job")


@wurk.job(name="CapsuleMiddleware::Async")
async def async_job(tag: str) -> None:
    await asyncio.sleep(0)
    note(tag, "job")


@wurk.job(name="CapsuleMiddleware::Spin", timeout=1, retry=1)
def spin(tag: str) -> None:
    """Loops in Python (no I/O): only the time limit's exception stops it."""
    note(tag, "job")
    end = time.monotonic() + 30
    while time.monotonic() < end:
        pass
    note(tag, "done")


@wurk.job(name="CapsuleMiddleware::Nap", timeout=1, retry=1)
async def nap(tag: str) -> None:
    note(tag, "job")
    await asyncio.sleep(30)
    note(tag, "done")


def worker(url: str, link: Any, queue: str) -> InProcessWorker:
    """A worker with the application's link and a capsule serving ``queue`` with ``link``."""
    running = InProcessWorker(url, concurrency=2, control_interval=0.1,
                              server_middleware=[AppLink],
                              capsules=[Capsule(name="single", queues=[(queue, 0)],
                                                concurrency=1, server_middleware=[link])])
    return running.start()


@pytest.fixture
def pushes(redis_server: Server) -> Iterator[None]:
    wurk.configure(redis_url=redis_server.url)
    with _lock:
        EVENTS.clear()
    yield


@pytest.mark.parametrize("link", [SingleLink, AsyncSingleLink()], ids=["sync-link", "async-link"])
@pytest.mark.parametrize("job", [sync_job, async_job], ids=["sync-job", "async-job"])
def test_a_capsules_link_runs_around_its_jobs_only_inside_the_applications(
        redis_server: Server, pushes: None, job: Any, link: Any) -> None:
    running = worker(redis_server.url, link, SINGLE)
    try:
        job.set(queue=SINGLE).perform_async("in-single")
        job.perform_async("in-default")
        wait_until(lambda: "<app" in seen("in-single") and "<app" in seen("in-default"),
                   what="both jobs through their chains")
    finally:
        running.stop()
    assert seen("in-single") == ["app>", "single>", "job", "<single", "<app"]
    assert seen("in-default") == ["app>", "job", "<app"]


def test_a_capsules_chain_is_made_once_the_application_links_then_its_own_then_the_stop(
        redis_server: Server, pushes: None) -> None:
    running = worker(redis_server.url, SingleLink, SINGLE)
    try:
        chains = {m.capsule.name: m.runner.server_middleware for m in running.launcher.managers}
        kinds = [type(link) if isinstance(link, (Stopper, *BUILT_IN)) else link
                 for link in chains["single"]]
        built_in = [kind for kind in BUILT_IN if kind in kinds]
        assert kinds == [*built_in, AppLink, SingleLink, Stopper]
        # The default capsule's is the configuration's own chain: no copy, no extra link.
        assert chains["default"] is running.config.server_middleware
        assert SingleLink not in list(chains["default"])
        with pytest.raises(RuntimeError, match="frozen"):
            chains["single"].add(AppLink)
    finally:
        running.stop()


@pytest.mark.parametrize("job", [spin, nap], ids=["sync", "async"])
def test_a_job_past_its_limit_in_a_capsule_with_links_fails_with_job_timeout(
        redis_server: Server, r: redis.Redis, pushes: None, job: Any) -> None:
    """The time limit stays the innermost link: the capsule's link sees ``JobTimeout`` come
    out of the job, and the job is retried with it."""
    running = worker(redis_server.url, SingleLink, SLOW)
    try:
        jid = job.set(queue=SLOW).perform_async("slow")
        wait_until(lambda: retry_entry(r, jid) is not None, timeout=20, what="the retry")
    finally:
        running.stop()
    failed = retry_entry(r, jid)
    assert failed is not None and failed["error_class"] == "wurk.JobTimeout"
    assert seen("slow") == ["app>", "single>", "job", "raised JobTimeout", "<single", "<app"]


def test_inline_runs_use_the_configurations_chain_not_a_capsules(
        redis_server: Server, pushes: None) -> None:
    config = wurk.configure(redis_url=redis_server.url, server_middleware=[AppLink])
    config.capsule("single", queues=[SINGLE], concurrency=1, server_middleware=[SingleLink])
    sync_job.set(queue=SINGLE).perform_inline("inline")
    assert seen("inline") == ["app>", "job", "<app"]


def test_a_worker_reserves_helper_threads_for_each_capsules_sync_links(
        redis_server: Server, pushes: None) -> None:
    """A sync link around an async job holds a helper thread for the job's run: the loop
    has one per slot for each sync link of the slot's capsule's chain."""
    plain = InProcessWorker(redis_server.url, concurrency=1, async_concurrency=3,
                            capsules=[Capsule(name="single", queues=[(SINGLE, 0)],
                                              concurrency=1, async_concurrency=5)])
    linked = InProcessWorker(redis_server.url, concurrency=1, async_concurrency=3,
                             capsules=[Capsule(name="single", queues=[(SINGLE, 0)],
                                               concurrency=1, async_concurrency=5,
                                               server_middleware=[SingleLink, AppLink])])
    counts = []
    for running in (plain, linked):
        running.start()
        try:
            counts.append(running.launcher.runner.loop._helpers)
        finally:
            running.stop()
    held = sync_server_links(plain.config.server_middleware)  # the built-in links' own
    assert counts == [(3 + 5) * max(1, held) + SPARE_HELPERS,
                      3 * max(1, held) + 5 * (held + 2) + SPARE_HELPERS]
