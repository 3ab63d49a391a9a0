"""A worker's periodic duties share one thread; the heartbeat keeps its own, so a duty's
slow tick (a reaper sweep held for seconds) never delays a beat, and starves no other duty."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.wait import wait_until
from wurk import payload as P
from wurk.launcher import POLLER_THREAD, Launcher

HEARTBEAT = 0.25
# Beats watched while the sweep is held: a heartbeat on the held thread would write none.
BEATS = 6
# A beat comes one interval after the last one ended; on a loaded 2-core machine a thread
# can wait for its turn, though not for seconds. A beat held up by the sweep never comes.
BEAT_SLACK = 1.75


@pytest.fixture
def launcher(redis_server: Any) -> Iterator[tuple[Launcher, dict[str, Any]]]:
    hook: dict[str, Any] = {"entered": threading.Event(), "release": threading.Event()}

    def on_recover(text: str, pill: dict[str, Any] | None) -> None:
        hook["thread"] = threading.current_thread().name
        hook["entered"].set()
        hook["release"].wait(10)  # a sweep held up, as a slow hook or a slow Redis would

    config = wurk.Config(heartbeat_interval=HEARTBEAT, reaper_interval=0.3,
                         poll_interval_average=0.2, scheduler_initial_wait=0,
                         fetch_timeout=0.5, timeout=1, shutdown_grace=1, concurrency=2,
                         on_recover=on_recover)
    # Threads another test of this process left (a processor made alone starts an event loop
    # of its own on first use) are not this worker's.
    hook["before"] = set(threading.enumerate())
    worker = Launcher(config)
    worker.start()
    yield worker, hook
    hook["release"].set()
    worker.stop(timeout=1)
    config.close()


def beats(r: redis.Redis, name: str, count: int) -> list[float]:
    """The first ``count`` distinct ``beat`` times the process record shows from now."""
    seen: list[float] = []

    def another() -> bool:
        beat = r.hget(name, "beat")
        if beat is not None and (not seen or float(beat) != seen[-1]):
            seen.append(float(beat))
        return len(seen) >= count

    wait_until(another, what=f"{count} beats")
    return seen


def test_a_held_reaper_sweep_delays_no_heartbeat_and_starves_no_duty(
    launcher: tuple[Launcher, dict[str, Any]], r: redis.Redis
) -> None:
    worker, hook = launcher
    me = worker.identity
    # A dead process's in-flight job: the next periodic sweep recovers it and calls the hook.
    dead = worker.config.keys.private("default", me.hostname, 999_999, "0123456789ab", 0)
    r.lpush(dead, P.dumps({"class": "Gone", "args": [], "queue": "default", "jid": "a" * 24}))
    assert hook["entered"].wait(10), "the reaper's periodic sweep"
    assert hook["thread"] == POLLER_THREAD  # the sweep runs on the shared thread
    due = {"class": "Later", "args": [], "queue": "parked", "jid": "b" * 24}
    r.zadd("schedule", {json.dumps(due): time.time() + 0.5})
    during = beats(r, str(me), BEATS)
    assert not hook["release"].is_set()  # every one of them while the sweep was held
    hook["release"].set()
    gaps = [b - a for a, b in itertools.pairwise(during)]
    print(f"\n{BEATS} beats while the sweep was held, longest gap {max(gaps):.2f} s "
          f"(interval {HEARTBEAT} s)")
    assert max(gaps) <= HEARTBEAT + BEAT_SLACK
    # The duties that came due meanwhile run once the thread is free: the scheduler moves
    # the job that fell due; every duty is still on the schedule.
    wait_until(lambda: r.llen("queue:parked") == 1, what="the scheduler, after the sweep")
    assert not r.exists(dead)
    assert worker.timers.is_alive() and worker.reaper is not None
    assert worker.scheduler.is_alive() and worker.leadership.is_alive()


def test_an_idle_worker_runs_three_threads_beside_its_processors(
    launcher: tuple[Launcher, dict[str, Any]]
) -> None:
    """The processors, the heartbeat and the one poller thread (the test's own main thread
    stands for the worker's, which waits on its signals)."""
    worker, hook = launcher
    processors = {p.name for m in worker.managers for p in m.processors}

    def threads() -> set[str]:
        return {t.name for t in threading.enumerate()
                if t.name.startswith("wurk-") and t not in hook["before"]}

    seen: list[set[str]] = [set()]

    def only_those() -> bool:
        seen[0] = threads() - processors
        return seen[0] == {"wurk-heartbeat", POLLER_THREAD}

    try:
        wait_until(only_those, what="the heartbeat and poller threads, and no other")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen beside the processors: {sorted(seen[0])}") \
            from None
    assert len(processors) == 2 and processors <= threads()


def test_processors_take_no_job_until_the_heartbeat_record_is_written(
        config: wurk.Config, r: redis.Redis) -> None:
    """worker.md: processors take no job until the heartbeat record is written (a reaper
    would otherwise take a job held by a process it cannot see)."""
    from wurk.config import Capsule
    from wurk.fetch.reliable import ReliableFetch
    from wurk.heartbeat import Heartbeat
    from wurk.manager import Manager, capsule_pool
    from wurk.metrics.counters import Counters
    from wurk.processor import JobRunner
    from wurk.runtime.busy import Busy
    from wurk.runtime.identity import Identity

    ran: list[int] = []
    wurk.job(name="Threads::Unseen")(ran.append)
    config.fetch_timeout = 0.2
    identity = Identity.current()
    heartbeat = Heartbeat(config, identity, busy=Busy(), counters=Counters(),
                          info={"concurrency": 1})
    capsule = Capsule(queues=["default"], concurrency=1)
    # worker.md: each capsule has one pool of 2 x concurrency + 2 connections.
    assert capsule_pool(config, Capsule(name="x", concurrency=7)).size == 16
    runner = JobRunner(config, counters=Counters(), busy=Busy())
    manager = Manager(config, capsule, runner,
                      lambda capsule, slot: ReliableFetch(
                          config, capsule, capsule_pool(config, capsule), identity=identity,
                          capsule_index=0, slot=slot),
                      visible=heartbeat.wait_visible)
    wurk.push({"class": "Threads::Unseen", "args": [1]})
    manager.start()
    try:
        time.sleep(0.6)  # three fetch timeouts: no record, so no fetch
        assert ran == [] and r.llen("queue:default") == 1
        assert not r.exists(str(identity))
        assert heartbeat.beat()
        wait_until(lambda: ran == [1], what="the job, once the record is written")
    finally:
        manager.stop(time.monotonic() + 2)
        runner.close()
        heartbeat.clear()
        wurk.registry.unregister("Threads::Unseen")


def test_quiet_stops_the_processors_fetching_before_it_waits_on_other_duties(
        launcher: tuple[Launcher, dict[str, Any]]) -> None:
    """Quiet's first step is to stop fetching everywhere (launcher.py, signals.md). It waited
    first on the scheduler, the periodic poller and the leader election to stop (up to
    ``shutdown_grace`` each, when a tick is under way), while every processor went on
    taking new jobs."""
    worker, _ = launcher
    assert any(manager.processors for manager in worker.managers)
    fetching_meanwhile: list[bool] = []
    real_stop = worker.scheduler.stop

    def held_stop(timeout: float) -> None:  # a pass under way, as a slow Redis makes one
        pause = threading.Event()
        while any(manager.processors for manager in worker.managers) \
                and time.monotonic() < held_until:
            pause.wait(0.01)
        fetching_meanwhile.append(any(manager.processors for manager in worker.managers))
        real_stop(timeout)

    held_until = time.monotonic() + 5  # the processors end within fetch_timeout (0.5 s)
    worker.scheduler.stop = held_stop  # type: ignore[method-assign]
    worker.quiet()
    assert fetching_meanwhile == [False], \
        "processors were still fetching while quiet waited on the scheduler's stop"


def test_a_beat_held_up_past_its_stop_writes_no_record_after_it(
        config: wurk.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """worker.md: a stopped process removes its record. A beat still waiting on Redis when
    the stop gave up on it (a slow server, an outage ending) used to write the record again
    after the stop had removed it: a process gone, shown alive for ``heartbeat_ttl``."""
    from wurk.heartbeat import Heartbeat
    from wurk.metrics.counters import Counters
    from wurk.runtime.busy import Busy
    from wurk.runtime.identity import Identity

    counters = Counters()
    heartbeat = Heartbeat(config, Identity.current(), busy=Busy(), counters=counters,
                          info={"concurrency": 1})
    name = heartbeat.name
    assert heartbeat.beat() and r.exists(name) and r.sismember("processes", name)
    held, go = threading.Event(), threading.Event()
    flush = counters.flush

    def held_up(*args: Any) -> None:  # the beat's first call to Redis, answered late
        held.set()
        go.wait(10)
        flush(*args)

    monkeypatch.setattr(counters, "flush", held_up)
    late = threading.Thread(target=heartbeat.beat, name="late-beat")
    late.start()
    assert held.wait(10)
    heartbeat.stop(timeout=0.1)
    monkeypatch.setattr(counters, "flush", flush)  # the stop's own last flush goes through
    heartbeat.clear()
    assert not r.exists(name)
    go.set()
    late.join(10)
    assert not late.is_alive()
    assert not r.exists(name) and not r.sismember("processes", name)
