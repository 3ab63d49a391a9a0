"""The loop's watch decides on a clock the test holds: ``tick(now)`` on the loop's side,
``look(now, current, where)`` on the watch thread's."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from wurk.runtime.loopwatch import REPEAT_FAILURE, TICK, LoopWatch, where_thread_is


@pytest.fixture
def tasks() -> Iterator[tuple[asyncio.Task[Any], asyncio.Task[Any]]]:
    """Two real tasks (never run): the watch only compares and names them."""
    loop = asyncio.new_event_loop()

    async def idle() -> None:
        await asyncio.sleep(0)

    first, second = loop.create_task(idle(), name="one"), loop.create_task(idle(), name="two")
    yield first, second
    for task in (first, second):
        task.cancel()
    loop.run_until_complete(asyncio.gather(first, second, return_exceptions=True))
    loop.close()


def here() -> str:
    return "jobs.py:12 in deliver"


def describe(task: asyncio.Task[Any]) -> str | None:
    return "Hooks::Deliver (jid abc)" if task.get_name() == "one" else None


def test_a_task_running_at_two_looks_a_limit_apart_with_no_tick_between_is_named_once(
    tasks: tuple[asyncio.Task[Any], asyncio.Task[Any]]
) -> None:
    one, _ = tasks
    watch = LoopWatch(0.1, describe)
    due = watch.tick(100.0)
    assert due == 100.0 + TICK
    assert watch.look(due + 0.01, one, here) is None  # first seen: no time held yet
    assert watch.look(due + 0.06, one, here) is None  # 50 ms: under the limit
    warning = watch.look(due + 0.12, one, here)
    assert warning == ("async job Hooks::Deliver (jid abc) has held the event loop for "
                       "110 ms at jobs.py:12 in deliver; every other async job waits. Move "
                       "blocking calls off the loop (await asyncio.to_thread(...)) or make "
                       "the job a plain def")
    assert watch.look(due + 0.5, one, here) is None  # once a job


def test_nothing_is_named_while_the_tick_is_not_overdue(
    tasks: tuple[asyncio.Task[Any], asyncio.Task[Any]]
) -> None:
    """Before the tick is due the loop may have turned many times: the same task at two
    looks proves nothing."""
    one, _ = tasks
    watch = LoopWatch(0.01, describe)
    due = watch.tick(100.0)
    for now in (100.0, due - 0.02, due - 0.001):
        assert watch.look(now, one, here) is None


def test_a_tick_between_two_looks_means_the_loop_turned(
    tasks: tuple[asyncio.Task[Any], asyncio.Task[Any]]
) -> None:
    one, _ = tasks
    watch = LoopWatch(0.1, describe)
    due = watch.tick(100.0)
    assert watch.look(due + 0.01, one, here) is None
    due = watch.tick(due + 0.05)  # a turn began: the task's step then was another step
    assert watch.look(due + 0.01, one, here) is None
    assert watch.look(due + 0.08, one, here) is None
    assert watch.look(due + 0.12, one, here) is not None  # held since due + 0.01


def test_another_task_or_none_at_the_second_look_starts_over(
    tasks: tuple[asyncio.Task[Any], asyncio.Task[Any]]
) -> None:
    one, two = tasks
    watch = LoopWatch(0.1, describe)
    due = watch.tick(100.0)
    assert watch.look(due + 0.01, one, here) is None
    assert watch.look(due + 0.2, two, here) is None  # two just came: seen from here
    assert watch.look(due + 0.25, None, here) is None  # in no task (a callback, the select)
    assert watch.look(due + 0.3, two, here) is None
    warning = watch.look(due + 0.4, two, here)
    assert warning is not None and warning.startswith(
        "a task on the event loop (two running tasks.<locals>.idle, not a "
        "job's own) has held the event loop for 100 ms at jobs.py:12 in deliver")


def test_without_a_limit_the_watch_keeps_the_lag_only(
    tasks: tuple[asyncio.Task[Any], asyncio.Task[Any]]
) -> None:
    one, _ = tasks
    for limit in (None, 0.0):
        watch = LoopWatch(limit, describe)
        assert watch.limit is None
        due = watch.tick(100.0)
        assert watch.look(due + 1, one, here) is None
        assert watch.look(due + 9, one, here) is None


def test_the_lag_is_the_worst_lateness_of_the_tick_since_it_was_taken() -> None:
    watch = LoopWatch(0.1)
    assert watch.take_lag() == 0.0  # never ticked
    due = watch.tick(10.0)
    due = watch.tick(due + 0.002)
    due = watch.tick(due + 0.3)
    due = watch.tick(due + 0.01)
    assert watch.take_lag() == pytest.approx(0.3)
    assert watch.take_lag() == 0.0
    watch.tick(due - 0.001)  # early (the loop's timer resolution): no lag, never negative
    assert watch.take_lag() == 0.0


def test_where_names_the_innermost_line_outside_the_libraries() -> None:
    """A thread blocked in ``time.sleep`` inside ``threading``'s frames: the line named is
    this file's, where it called the sleep."""
    started, done = threading.Event(), threading.Event()

    def blocked_here() -> None:
        started.set()
        while not done.is_set():
            time.sleep(0.01)

    thread = threading.Thread(target=blocked_here)
    thread.start()
    try:
        started.wait(5)
        where = where_thread_is(thread.ident)
        assert where is not None
        assert where.startswith("tests/unit/test_loopwatch.py:"), where
        assert where.endswith(" in blocked_here")
    finally:
        done.set()
        thread.join(5)
    assert where_thread_is(None) is None


def test_the_watch_thread_names_a_task_blocking_a_real_loop(
    caplog: pytest.LogCaptureFixture
) -> None:
    """The watch's own thread, on a real loop: a task that sleeps in ``time.sleep`` for
    0.5 s while the limit is 0.1 s is named, with its line, while it still blocks."""
    from wurk.asyncjobs import EventLoop

    watch = LoopWatch(0.1, lambda task: "Sys::Blocker (jid j1)"
                      if task.get_name() == "blocker" else None)
    loop = EventLoop(2, watch)
    caplog.set_level(logging.WARNING, logger="wurk")
    named_while_blocking: list[bool] = []

    async def blocker() -> None:
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            time.sleep(0.01)
        named_while_blocking.append(any("has held the event loop" in r.getMessage()
                                        for r in caplog.records))

    try:
        running = loop.get()
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0.2), running).result(5)  # ticking
        future = asyncio.run_coroutine_threadsafe(_named(blocker(), "blocker"), running)
        future.result(10)
    finally:
        loop.close()
    warnings = [r.getMessage() for r in caplog.records if "has held" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].startswith("async job Sys::Blocker (jid j1) has held the event loop for ")
    assert " in blocker; every other async job waits" in warnings[0]
    assert named_while_blocking == [True]
    assert loop.take_lag() >= 0.3


async def _named(coro: Any, name: str) -> None:
    await asyncio.get_running_loop().create_task(coro, name=name)


def test_a_failure_to_name_a_job_is_logged_and_the_watch_goes_on(
    caplog: pytest.LogCaptureFixture
) -> None:
    """``describe`` raising (a bug, a payload it cannot read) is a warning; the watch goes
    on and names the next job that blocks."""
    from wurk.asyncjobs import EventLoop

    calls: list[str] = []

    def describe_badly(task: asyncio.Task[Any]) -> str | None:
        calls.append(task.get_name())
        if len(calls) == 1:
            raise ValueError("unreadable")
        return "Sys::Second (jid j2)"

    loop = EventLoop(2, LoopWatch(0.1, describe_badly))
    caplog.set_level(logging.WARNING, logger="wurk")

    async def blocker() -> None:
        time.sleep(0.35)

    try:
        running = loop.get()
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0.2), running).result(5)
        for name in ("first", "second"):
            asyncio.run_coroutine_threadsafe(_named(blocker(), name), running).result(10)
            asyncio.run_coroutine_threadsafe(asyncio.sleep(0.1), running).result(5)
    finally:
        loop.close()
    messages = [r.getMessage() for r in caplog.records]
    assert "the event loop's watch could not look: ValueError: unreadable" in messages
    assert any(m.startswith("async job Sys::Second (jid j2) has held") for m in messages)


def test_a_limit_of_zero_starts_no_watch_thread() -> None:
    """``loop_lag_warning: 0`` turns the watch off (docs/configuration.md): the loop runs
    without the ``wurk-loop-watch`` thread, and with a limit it has one."""
    from wurk.asyncjobs import EventLoop

    def watchers() -> int:
        return sum(t.name == "wurk-loop-watch" for t in threading.enumerate())

    before = watchers()
    for limit, expected in ((0.0, 0), (0.1, 1)):
        loop = EventLoop(2, LoopWatch(limit))
        try:
            asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop.get()).result(5)
            assert watchers() - before == expected
        finally:
            loop.close()
        assert watchers() == before  # joined at close


def test_a_payload_named_in_a_warning_is_cut_short() -> None:
    """The class and jid the watch names come from Redis: at most ``NAME_SHOWN`` characters
    of each go into the line."""
    from wurk.config import Config
    from wurk.log import short_id
    from wurk.metrics.counters import Counters
    from wurk.processor import NAME_SHOWN, JobRunner
    from wurk.runtime.busy import Busy

    busy = Busy()
    runner = JobRunner(Config(), counters=Counters(), busy=busy)

    async def main() -> str | None:
        task = asyncio.current_task()
        assert task is not None
        busy.add(short_id(id(task)), "q", json.dumps(
            {"class": "X" * 100_000, "jid": "j" * 100_000, "args": []}).encode())
        return runner.describe_task(task)

    described = asyncio.run(main())
    assert described == f"{'X' * NAME_SHOWN} (jid {'j' * NAME_SHOWN})"


def test_a_lasting_failure_to_look_is_logged_once_a_minute_with_its_count() -> None:
    """A fault that fails every look (20 a second at the default limit) gives one warning,
    then one a ``REPEAT_FAILURE`` seconds saying how often it came; another fault is logged
    at once; a huge text is cut short."""
    watch = LoopWatch(0.1)
    boom = RuntimeError("the loop is gone")
    first = watch.failed(100.0, boom)
    assert first == "the event loop's watch could not look: RuntimeError: the loop is gone"
    looks = [watch.failed(100.0 + n * 0.05, boom) for n in range(1, 1000)]  # 50 s of looks
    assert looks == [None] * 999
    assert watch.failed(100.0 + REPEAT_FAILURE - 0.01, boom) is None
    again = watch.failed(100.0 + REPEAT_FAILURE, boom)
    assert again is not None and again.endswith("(and 1000 more time(s) in the last 60 s)")
    other = watch.failed(100.0 + REPEAT_FAILURE + 1, ValueError("x" * 100_000))
    assert other is not None and other.startswith(
        "the event loop's watch could not look: ValueError: xxx")
    assert len(other) < 400
    back = watch.failed(100.0 + REPEAT_FAILURE + 2, boom)  # not the last one: logged at once
    assert back == first


async def _waits_for_ever(gate: asyncio.Event) -> None:
    await gate.wait()


async def deliver_stuck(gate: asyncio.Event) -> None:  # an async job stuck at an await
    await _waits_for_ever(gate)


async def _started(coro: Any, name: str) -> None:
    asyncio.get_running_loop().create_task(coro, name=name)
    await asyncio.sleep(0)  # it runs up to its first await


def test_ttin_logs_each_async_jobs_await_chain_named_by_its_class_and_jid(
    caplog: pytest.LogCaptureFixture
) -> None:
    """A thread dump shows the loop's thread idle in its selector: the job stuck at an
    await is on no thread's stack. TTIN logs each task's chain of awaits too, down to what
    it waits on, the job's task named as the watch names it."""
    from wurk.asyncjobs import EventLoop
    from wurk.runtime.signals import dump_threads

    loop = EventLoop(2, LoopWatch(None, describe))
    caplog.set_level(logging.WARNING, logger="wurk")
    try:
        running = loop.get()
        gate = asyncio.run_coroutine_threadsafe(_make_event(), running).result(5)
        for name in ("one", "helper"):
            asyncio.run_coroutine_threadsafe(
                _started(deliver_stuck(gate), name), running).result(5)
        dump_threads()
    finally:
        loop.close()
    messages = [r.getMessage() for r in caplog.records]
    job = [m for m in messages if m.startswith("async job Hooks::Deliver (jid abc), task one:")]
    assert len(job) == 1, messages
    lines = job[0].splitlines()
    assert [line.split(", in ")[-1] for line in lines if line.startswith("  File")] == \
        ["deliver_stuck", "_waits_for_ever", "wait"]  # outermost first, asyncio's Event last
    assert "await _waits_for_ever(gate)" in job[0]  # the source line, as a traceback has it
    assert lines[-1].startswith("  awaiting ")
    assert any(m.startswith("task helper running deliver_stuck (not a job's own):")
               for m in messages), messages


async def _make_event() -> asyncio.Event:
    return asyncio.Event()


def test_ttin_with_the_loop_held_names_the_holder_and_does_not_wait_for_it(
    caplog: pytest.LogCaptureFixture
) -> None:
    """A job blocking the loop (a sync call inside an async job) cannot let it answer: the
    dump gives up after its wait, names the job holding the loop, and the signal loop goes
    on (the thread dump above it shows the line)."""
    from wurk.asyncjobs import EventLoop
    from wurk.runtime.loopwatch import dump_tasks

    loop = EventLoop(2, LoopWatch(None, describe))
    caplog.set_level(logging.WARNING, logger="wurk")
    held, release = threading.Event(), threading.Event()

    async def blocker() -> None:
        held.set()
        release.wait(10)  # the blocking call

    try:
        running = loop.get()
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), running).result(5)
        future = asyncio.run_coroutine_threadsafe(_named(blocker(), "one"), running)
        assert held.wait(5)
        began = time.monotonic()
        dump_tasks(0.1)
        took = time.monotonic() - began
        release.set()
        future.result(5)
    finally:
        release.set()
        loop.close()
    assert took < 3.0  # the 0.1 s wait, not the blocked loop's (held until after this)
    messages = [r.getMessage() for r in caplog.records]
    assert ("the event loop did not list its tasks within 0.1 s: async job Hooks::Deliver "
            "(jid abc) holds it (the stack of its thread, wurk-asyncio, is above)") in messages
    assert not [m for m in messages if m.startswith("async job Hooks::Deliver (jid abc), task")]
