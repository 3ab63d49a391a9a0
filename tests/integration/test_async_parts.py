"""Async jobs' parts on the test server: the async client, ``wurk.redis()``'s async form,
and middleware mixing sync and async links around both kinds of job."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.wait import wait_until
from wurk.asyncjobs import AsyncLane, EventLoop
from wurk.config import Capsule
from wurk.fetch.basic import BasicFetch, Fetcher, UnitOfWork
from wurk.fetch.reliable import Claims, ReliableFetch
from wurk.launcher import Launcher
from wurk.manager import Manager, capsule_pool
from wurk.metrics.counters import Counters
from wurk.processor import JobRunner
from wurk.runtime.busy import Busy
from wurk.runtime.identity import Identity

QUEUE = "asyncparts"
EVENTS: list[str] = []


@wurk.job(name="AsyncParts::Plain", queue=QUEUE)
def plain(tag: str) -> None:
    EVENTS.append(f"{tag}:body:{threading.current_thread().name}")


@wurk.job(name="AsyncParts::Waits", queue=QUEUE)
async def waits(tag: str) -> None:
    await asyncio.sleep(0.01)
    EVENTS.append(f"{tag}:body:{'loop' if asyncio.get_running_loop() else ''}")
    async with wurk.redis() as conn:
        await conn.call("RPUSH", "asyncparts:ran", wurk.current_jid() or "")


class SyncLink:
    def __call__(self, job: Any, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        tag = payload["args"][0]
        EVENTS.append(f"{tag}:sync-before")
        result = call_next()
        EVENTS.append(f"{tag}:sync-after")
        return result


class AsyncLink:
    async def __call__(self, job: Any, payload: dict[str, Any], queue: str,
                       call_next: Any) -> Any:
        tag = payload["args"][0]
        EVENTS.append(f"{tag}:async-before")
        await asyncio.sleep(0)
        result = await call_next()
        EVENTS.append(f"{tag}:async-after")
        return result


def run_all(config: wurk.Config, r: redis.Redis, expected: int) -> None:
    capsule = Capsule(queues=[(QUEUE, 0)], concurrency=2)
    claims = Claims()

    def make_fetcher(capsule: Capsule, slot: int) -> Fetcher:
        return ReliableFetch(config, capsule, capsule_pool(config, capsule),
                             identity=Identity.current(), capsule_index=0, slot=slot,
                             claims=claims)

    runner = JobRunner(config, counters=Counters(), busy=Busy())
    manager = Manager(config, capsule, runner, make_fetcher)
    manager.start()
    deadline = time.monotonic() + 20
    while sum(1 for e in EVENTS if ":body:" in e) < expected:
        assert time.monotonic() < deadline, EVENTS
        time.sleep(0.01)
    manager.stop(time.monotonic() + 5)
    runner.close()
    assert not [k for k in r.scan_iter(match=f"queue:{QUEUE}|*") if r.llen(k)], "ACKs missing"


@pytest.mark.parametrize("order", [(SyncLink, AsyncLink), (AsyncLink, SyncLink)])
def test_sync_and_async_middleware_wrap_both_kinds_of_job_in_order(
    config: wurk.Config, r: redis.Redis, order: tuple[type, type]
) -> None:
    EVENTS.clear()
    for link in order:
        config.server_middleware.add(link)
    plain.perform_async("p")
    waits.perform_async("a")
    run_all(config, r, 2)
    first, second = ("sync", "async") if order[0] is SyncLink else ("async", "sync")
    for tag in ("p", "a"):
        mine = [e.split(":", 1)[1] for e in EVENTS if e.startswith(f"{tag}:")]
        assert [m.split(":")[0] for m in mine] == [
            f"{first}-before", f"{second}-before", "body", f"{second}-after",
            f"{first}-after"], mine
    body = next(e for e in EVENTS if e.startswith("p:body:"))
    assert body.startswith("p:body:wurk-default-"), "a sync job keeps its processor thread"


def test_the_async_client_pushes_what_the_sync_one_does(config: wurk.Config,
                                                        r: redis.Redis) -> None:
    async def push_all() -> list[str | None]:
        return [await plain.aperform_async("x"),
                await plain.set(queue="other").aperform_async("y"),
                await plain.aperform_in(3600, "later"),
                *(await plain.aperform_bulk([["b1"], ["b2"]])),
                await wurk.apush({"class": "RubyJob", "args": [1], "queue": QUEUE})]

    jids = asyncio.run(push_all())
    sync_jid = plain.perform_async("x")
    queued = [json.loads(x) for x in r.lrange(f"queue:{QUEUE}", 0, -1)]
    by_jid = {job["jid"]: job for job in queued}
    assert set(jids[0:1] + jids[3:6]) <= set(by_jid)
    a, s = by_jid[jids[0]], by_jid[sync_jid]
    assert set(a) == set(s) and a["args"] == s["args"] == ["x"]
    assert a["class"] == "AsyncParts::Plain" and a["retry"] is True
    assert json.loads(r.lrange("queue:other", 0, -1)[0])["args"] == ["y"]
    (scheduled, at), = r.zrange("schedule", 0, -1, withscores=True)
    assert json.loads(scheduled)["args"] == ["later"] and at > time.time() + 3500
    assert by_jid[jids[5]]["class"] == "RubyJob"
    assert r.sismember("queues", QUEUE) and r.sismember("queues", "other")


def test_async_wurk_redis_gives_raw_replies_and_pipelines(config: wurk.Config) -> None:
    async def use() -> tuple[Any, Any, list[Any]]:
        async with wurk.redis() as conn:
            first = await conn.call("SET", "asyncparts:k", "v")
            got = await conn.call("GET", "asyncparts:k")
            replies = await conn.pipeline([("INCR", "asyncparts:n"), ("LPOP", "asyncparts:k"),
                                           ("INCR", "asyncparts:n")])
        return first, got, replies

    first, got, replies = asyncio.run(use())
    assert first == b"OK" and got == b"v"
    assert replies[0] == 1 and isinstance(replies[1], redis.ResponseError) and replies[2] == 2


def test_async_client_middleware_runs_in_both_kinds_of_push(config: wurk.Config,
                                                            r: redis.Redis) -> None:
    async def stamp(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        payload["stamped"] = True
        return await call_next()

    config.client_middleware.add(stamp)
    jid_sync = plain.perform_async("s")

    async def push() -> str | None:
        return await plain.aperform_async("a")

    jid_async = asyncio.run(push())
    jobs = {j["jid"]: j for j in map(json.loads, r.lrange(f"queue:{QUEUE}", 0, -1))}
    assert jobs[jid_sync]["stamped"] is True and jobs[jid_async]["stamped"] is True


@wurk.job(name="AsyncParts::Patient", queue=QUEUE)
async def patient() -> None:
    while not wurk.interrupted():  # a long async job saving its place at quiet
        await asyncio.sleep(0.01)
    EVENTS.append("patient:saw-quiet:body:")


def test_an_async_job_sees_quiet_through_interrupted(config: wurk.Config,
                                                     r: redis.Redis) -> None:
    EVENTS.clear()
    capsule = Capsule(queues=[(QUEUE, 0)], concurrency=1)

    def make_fetcher(capsule: Capsule, slot: int) -> Fetcher:
        return ReliableFetch(config, capsule, capsule_pool(config, capsule),
                             identity=Identity.current(), capsule_index=0, slot=slot)

    runner = JobRunner(config, counters=Counters(), busy=Busy())
    manager = Manager(config, capsule, runner, make_fetcher)
    manager.start()
    patient.perform_async()
    deadline = time.monotonic() + 10
    while not len(manager.lane):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    manager.stop(time.monotonic() + 5)  # quiet first: the job returns within the timeout
    runner.close()
    assert EVENTS == ["patient:saw-quiet:body:"]
    assert not [k for k in r.scan_iter(match=f"queue:{QUEUE}|*") if r.llen(k)]


def test_at_quiet_async_jobs_waiting_for_a_slot_go_back_to_their_queue(
        config: wurk.Config, r: redis.Redis) -> None:
    """One slot: one job runs, one waits in the lane for it, one in the processor's hands.
    Quiet sends both waiting ones back, unstarted; the running one sees quiet and ends."""
    EVENTS.clear()
    capsule = Capsule(queues=[(QUEUE, 0)], concurrency=1, async_concurrency=1)

    def make_fetcher(capsule: Capsule, slot: int) -> Fetcher:
        return ReliableFetch(config, capsule, capsule_pool(config, capsule),
                             identity=Identity.current(), capsule_index=0, slot=slot)

    runner = JobRunner(config, counters=Counters(), busy=Busy())
    manager = Manager(config, capsule, runner, make_fetcher)
    jids = [patient.perform_async() for _ in range(3)]
    manager.start()
    deadline = time.monotonic() + 10
    while len(manager.lane) < 2:  # the running one and the one waiting for its slot
        assert time.monotonic() < deadline
        time.sleep(0.01)
    manager.stop(time.monotonic() + 5)
    runner.close()
    assert EVENTS == ["patient:saw-quiet:body:"]
    back = [json.loads(raw)["jid"] for raw in r.lrange(f"queue:{QUEUE}", 0, -1)]
    assert len(back) == len(set(back)) == 2 and set(back) < set(jids)
    assert not [k for k in r.scan_iter(match=f"queue:{QUEUE}|*") if r.llen(k)]


def test_a_lone_async_middleware_wraps_a_sync_job(config: wurk.Config, r: redis.Redis) -> None:
    """A chain of one link takes a fast path; an async link must not slip through it."""
    EVENTS.clear()
    config.server_middleware.add(AsyncLink)
    plain.perform_async("one")
    run_all(config, r, 1)
    assert [e.split(":")[1] for e in EVENTS] == ["async-before", "body", "async-after"]


@wurk.job(name="AsyncParts::LoopKind", queue=QUEUE)
async def loop_kind(tag: str) -> None:
    loop = asyncio.get_running_loop()
    EVENTS.append(f"{tag}:body:{type(loop).__module__}.{type(loop).__name__}")


@pytest.mark.parametrize(("setting", "made"), [
    ("auto", "uvloop.Loop"), ("uvloop", "uvloop.Loop"),
    ("asyncio", "asyncio.unix_events._UnixSelectorEventLoop")])
def test_async_jobs_run_on_the_event_loop_the_setting_names(
        config: wurk.Config, r: redis.Redis, setting: str, made: str) -> None:
    """uvloop by default (installed with wurk on Linux and macOS), asyncio's own loop when
    ``event_loop: asyncio`` asks for it; the job goes through and is acknowledged either way."""
    EVENTS.clear()
    config.event_loop = setting  # type: ignore[assignment]
    loop_kind.perform_async("k")
    run_all(config, r, 1)
    assert [f"k:body:{made}"] == EVENTS


RELEASE = threading.Event()


@wurk.job(name="AsyncParts::Held", queue=QUEUE)
async def held() -> None:
    while not RELEASE.is_set():  # deaf to quiet: it ends when the test lets it
        await asyncio.sleep(0.005)
    EVENTS.append("held:body:")


class EndsAfterTheLook(AsyncLane):
    """The deadline looks at the jobs still running, and one of them ends before they are
    given back: the interleaving forced, not hoped for."""

    def unfinished(self) -> list[UnitOfWork]:
        units = super().unfinished()
        RELEASE.set()
        with self._changed:
            assert self._changed.wait_for(lambda: not self._running, 10)
        return units


def test_an_async_job_ending_as_the_deadline_looks_is_not_given_back(
        config: wurk.Config, r: redis.Redis) -> None:
    """It finished (and its ACK is on its way): pushed back, it would run a second time."""
    EVENTS.clear()
    RELEASE.clear()
    config.shutdown_grace = 0.2
    capsule = Capsule(queues=[(QUEUE, 0)], concurrency=1)

    def make_fetcher(capsule: Capsule, slot: int) -> Fetcher:
        return BasicFetch(config, capsule, capsule_pool(config, capsule))

    runner = JobRunner(config, counters=Counters(), busy=Busy())
    manager = Manager(config, capsule, runner, make_fetcher)
    manager.lane = EndsAfterTheLook(config, capsule, runner.loop, capsule_pool(config, capsule))
    held.perform_async()
    manager.start()
    deadline = time.monotonic() + 10
    while not len(manager.lane):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    manager.stop(time.monotonic())  # the deadline now: what runs is given back
    runner.close()
    assert EVENTS == ["held:body:"]
    assert r.llen(f"queue:{QUEUE}") == 0, "a finished job was pushed back to run again"


@wurk.job(name="AsyncParts::Long", queue=QUEUE)
async def long_one(tag: str) -> None:
    await asyncio.sleep(30)  # past any deadline here: the deadline cancels it
    EVENTS.append(f"{tag}:body:")


class HandsOverSlowly(AsyncLane):
    """The processor that hands the job over is still in that call when the deadline
    looks at what runs (forced: it goes on once the deadline cancels the lane's jobs), so
    the job is both its processor's current one and one in the lane."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.handed = threading.Event()
        self.go_on = threading.Event()

    def start(self, *args: Any, **kwargs: Any) -> None:
        super().start(*args, **kwargs)
        self.handed.set()
        assert self.go_on.wait(10)

    def cancel_all(self) -> None:
        self.go_on.set()
        super().cancel_all()


def test_an_async_job_held_by_its_processor_and_its_lane_goes_back_once(
        config: wurk.Config, r: redis.Redis) -> None:
    """Basic fetch pushes back whatever it is given: the same job given twice would be on
    its queue twice, and run twice."""
    EVENTS.clear()
    config.shutdown_grace = 0.2
    capsule = Capsule(queues=[(QUEUE, 0)], concurrency=1)

    def make_fetcher(capsule: Capsule, slot: int) -> Fetcher:
        return BasicFetch(config, capsule, capsule_pool(config, capsule))

    runner = JobRunner(config, counters=Counters(), busy=Busy())
    manager = Manager(config, capsule, runner, make_fetcher)
    lane = manager.lane = HandsOverSlowly(config, capsule, runner.loop,
                                          capsule_pool(config, capsule))
    jid = long_one.perform_async("only")
    manager.start()
    assert lane.handed.wait(10)
    manager.stop(time.monotonic())  # the deadline now
    runner.close()
    assert EVENTS == []
    assert [json.loads(raw)["jid"] for raw in r.lrange(f"queue:{QUEUE}", 0, -1)] == [jid]


def test_a_second_stop_signal_hurries_a_stop_waiting_for_async_jobs(
        config: wurk.Config, r: redis.Redis) -> None:
    """worker.md: a second Ctrl-C stops now, the unfinished jobs pushed back first. The
    processors end at quiet while an async job runs on: the stop's wait must still hear it,
    not sit out the whole timeout."""
    EVENTS.clear()
    config.queues = [QUEUE]
    config.concurrency = 1
    config.fetch_timeout = 0.2
    config.timeout = 60  # far past the test's patience: only the hurry can end the wait
    config.shutdown_grace = 0.5
    worker = Launcher(config)
    jid = long_one.perform_async("hurried")
    worker.start()
    manager = worker.managers[0]
    waiting = threading.Event()  # the stop waits for the async job, its processor gone
    wait_idle = manager.lane.wait_idle

    def waits_for_the_lane(deadline: float) -> bool:
        waiting.set()
        return wait_idle(deadline)

    class Hurry(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            if not manager.processors:
                waiting.set()
            return super().wait(timeout)

    manager.lane.wait_idle = waits_for_the_lane  # type: ignore[method-assign]
    worker._hurried = Hurry()
    stopping = threading.Thread(target=worker.stop, name="test-stop", daemon=True)
    try:
        wait_until(lambda: len(manager.lane), what="the async job running")
        stopping.start()
        wait_until(lambda: not manager.processors, what="the processor ending at quiet")
        wait_until(waiting.is_set, what="the stop waiting for the async job")
        worker.hurry()  # the second Ctrl-C
        wait_until(lambda: not stopping.is_alive(), what="the hurried stop ending")
    finally:
        if not stopping.is_alive() and not worker.stopping:
            worker.stop(timeout=0)
    assert EVENTS == []
    assert [json.loads(raw)["jid"] for raw in r.lrange(f"queue:{QUEUE}", 0, -1)] == [jid]


def test_closing_the_event_loop_as_a_job_stops_it_does_not_raise() -> None:
    """A job's ``loop.stop()`` (or a stray task's ``SystemExit``) lets the loop's thread see
    the close before the close's own wake reaches the loop: the thread ends and closes the
    loop first (forced here), and the close must still end quietly."""
    event_loop = EventLoop(kind="asyncio")
    loop = event_loop.get()
    assert asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(10) is None

    class StoppedAsItCloses(threading.Event):
        def set(self) -> None:
            super().set()
            loop.call_soon_threadsafe(loop.stop)  # a job's loop.stop(), just now
            deadline = time.monotonic() + 10
            while not loop.is_closed():  # the loop's thread sees the close and ends
                assert time.monotonic() < deadline
                time.sleep(0.005)

    event_loop._closing = StoppedAsItCloses()
    event_loop.close()
    assert loop.is_closed()


STUCK_HELPER = """
import asyncio, threading
from wurk.asyncjobs import EventLoop
started = threading.Event()
def blocking():  # a job's blocking call that never returns
    started.set()
    threading.Event().wait()
async def job():
    await asyncio.to_thread(blocking)
event_loop = EventLoop(kind="asyncio")
future = event_loop.submit(job())
assert started.wait(10)
future.cancel()  # the stop gives the job back and cancels its task
event_loop.close(timeout=0.5)
"""


def test_a_helper_thread_stuck_in_a_jobs_blocking_call_does_not_hold_the_exit() -> None:
    """``concurrent.futures`` joins every pool thread at interpreter exit, with no timeout:
    a helper stuck in an async job's ``asyncio.to_thread`` call kept the worker process from
    exiting after its bounded stop, for ever. The close abandons it, and says so."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", STUCK_HELPER], env=env, timeout=30,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "abandoning 1 helper thread(s) still running" in done.stderr


STUCK_LINK_HELPER = """
import asyncio, threading
from wurk.middleware import TemporaryLoop
started = threading.Event()
def blocking():  # an async client link's blocking call that never returns
    started.set()
    threading.Event().wait()
async def link():  # leaves its helper running, as one timing out a to_thread call does
    asyncio.ensure_future(asyncio.to_thread(blocking))
    await asyncio.sleep(0)
TemporaryLoop.JOIN_TIMEOUT = 0.5
with TemporaryLoop() as loop:  # what a sync push makes for an async client link
    loop.submit(link()).result(10)
    assert started.wait(10)
"""


def test_a_client_links_helper_thread_left_stuck_does_not_hold_the_exit() -> None:
    """A sync push's short-lived loop for an async client link: a helper it left in a
    blocking call kept the pushing process from exiting, for ever (``concurrent.futures``
    joins pool threads at exit). The loop's end lets it go."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", STUCK_LINK_HELPER], env=env, timeout=30,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


RUNNING = [0, 0]  # running now, the most at once


@wurk.job(name="AsyncParts::Counted", queue=QUEUE)
async def counted(tag: str) -> None:
    RUNNING[0] += 1  # all on the one loop thread: no lock needed
    RUNNING[1] = max(RUNNING)
    await asyncio.sleep(0.1)
    RUNNING[0] -= 1
    EVENTS.append(f"{tag}:body:")


def test_a_capsule_runs_at_most_async_concurrency_async_jobs_at_once_default_100(
        config: wurk.Config, r: redis.Redis) -> None:
    """async-jobs.md: each capsule runs at most ``async_concurrency`` async jobs at once
    (default 100)."""
    assert wurk.Config().async_concurrency == 100 and Capsule().async_concurrency == 100
    EVENTS.clear()
    RUNNING[:] = [0, 0]
    capsule = Capsule(queues=[(QUEUE, 0)], concurrency=2, async_concurrency=3)

    def make_fetcher(capsule: Capsule, slot: int) -> Fetcher:
        return ReliableFetch(config, capsule, capsule_pool(config, capsule),
                             identity=Identity.current(), capsule_index=0, slot=slot)

    counted.perform_bulk([[str(n)] for n in range(12)])
    runner = JobRunner(config, counters=Counters(), busy=Busy())
    manager = Manager(config, capsule, runner, make_fetcher)
    manager.start()
    deadline = time.monotonic() + 20
    while len(EVENTS) < 12:
        assert time.monotonic() < deadline, EVENTS
        time.sleep(0.01)
    manager.stop(time.monotonic() + 5)
    runner.close()
    assert RUNNING == [0, 3]


def test_async_wurk_redis_blocks_hold_at_most_50_connections_named_wurk_async(
        config: wurk.Config, r: redis.Redis) -> None:
    """async-jobs.md: connections come from the loop's pool (named ``wurk-async``), 50 held
    by blocks at most; a block past them waits its turn and goes on when one is given back."""
    async def main() -> tuple[int, int]:
        release = asyncio.Event()
        entered = [0]

        async def block() -> None:
            async with wurk.redis() as conn:
                await conn.call("PING")
                entered[0] += 1
                await release.wait()

        # Another test's pool may still be closing on this server: only new clients count.
        before = {c["id"] for c in r.client_list() if c.get("name") == "wurk-async"}
        tasks = [asyncio.create_task(block()) for _ in range(60)]
        while entered[0] < 50:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # the ten past the limit still wait
        held = (entered[0], len([c for c in r.client_list()
                                 if c.get("name") == "wurk-async" and c["id"] not in before]))
        release.set()
        await asyncio.gather(*tasks)
        assert entered[0] == 60
        await config.aclose()
        return held

    assert asyncio.run(main()) == (50, 50)


@wurk.job(name="AsyncParts::Numbered", queue=QUEUE)
async def numbered(n: int) -> None:
    while not RELEASE.is_set():  # deaf to quiet: it ends when the test lets it
        await asyncio.sleep(0.005)
    EVENTS.append(f"{n}:body:")


def test_an_async_job_given_back_at_quiet_for_want_of_a_slot_goes_back_first_in_line(
        config: wurk.Config, r: redis.Redis) -> None:
    """docs/reliability.md: what a processor fetched and did not start goes back at the
    head of the line. One slot: job 0 runs, 1 waits in the lane, 2 is in the processor's
    hands waiting for a place, 3–7 were fetched ahead with it. Quiet: 2 is given back
    ahead of 3–7 (pushed back alone at once, it ended behind them: 3–7, 2). (1 goes back
    from the lane at quiet, on the manager's thread: before or after them.)"""
    EVENTS.clear()
    RELEASE.clear()
    capsule = Capsule(queues=[(QUEUE, 0)], concurrency=1, async_concurrency=1)

    def make_fetcher(capsule: Capsule, slot: int) -> Fetcher:
        return ReliableFetch(config, capsule, capsule_pool(config, capsule),
                             identity=Identity.current(), capsule_index=0, slot=slot)

    runner = JobRunner(config, counters=Counters(), busy=Busy())
    manager = Manager(config, capsule, runner, make_fetcher)
    for n in range(20):
        numbered.perform_async(n)
    manager.start()
    try:
        def third_in_hand() -> bool:
            current = [p.current for p in manager.processors]
            return len(manager.lane) == 2 and current != [None] and \
                json.loads(current[0].raw)["args"] == [2]  # type: ignore[union-attr]

        wait_until(third_in_hand, what="job 2 waiting for a place in the lane")
        manager.quiet()
        wait_until(lambda: not manager.processors, what="the processor ending at quiet")
        back = [json.loads(raw)["args"][0] for raw in r.lrange(f"queue:{QUEUE}", 0, -1)]
    finally:
        RELEASE.set()
        manager.stop(time.monotonic() + 5)
        runner.close()
    next_up = [n for n in reversed(back) if n != 1]  # the tail runs next
    assert next_up[:6] == [2, 3, 4, 5, 6, 7], next_up
    assert sorted(back) == list(range(1, 20))
    assert EVENTS == ["0:body:"]
