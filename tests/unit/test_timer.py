"""TimerLoop: waits before the first tick, ticks on its interval, stops at once, survives
a raising tick — on a thread of its own and on a shared one (``Timers``), where each loop
keeps its own interval and a slow tick starves no other loop."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from wurk.runtime.timer import TimerLoop, Timers

FAST = 0.05

MakeLoop = Callable[..., TimerLoop]


@pytest.fixture(params=["own thread", "shared thread"])
def make(request: pytest.FixtureRequest) -> Iterator[MakeLoop]:
    """Loops on their own threads, or all on one ``Timers`` (stopped after the test)."""
    host = Timers("t-host") if request.param == "shared thread" else None

    def build(*args: Any, **kwargs: Any) -> TimerLoop:
        return TimerLoop(*args, host=host, **kwargs)

    yield build
    if host is not None:
        assert host.stop(2)


def test_first_tick_comes_one_interval_after_start(make: MakeLoop) -> None:
    ticked = threading.Event()
    started = time.monotonic()
    times: list[float] = []

    def tick() -> None:
        times.append(time.monotonic() - started)
        ticked.set()

    loop = make("t-first", tick, 0.2)
    loop.start()
    assert ticked.wait(2)
    assert loop.stop(1)
    assert times[0] >= 0.19


def test_ticks_repeat_on_the_interval(make: MakeLoop) -> None:
    count = 0
    enough = threading.Event()

    def tick() -> None:
        nonlocal count
        count += 1
        if count == 5:
            enough.set()

    loop = make("t-repeat", tick, FAST)
    started = time.monotonic()
    loop.start()
    assert enough.wait(3)
    elapsed = time.monotonic() - started
    assert loop.stop(1)
    # five ticks need five waits of 50 ms: never sooner, and not much later on a busy box
    assert 5 * FAST * 0.9 <= elapsed < 2.5


def test_stop_interrupts_a_long_wait_promptly(make: MakeLoop) -> None:
    loop = make("t-stop", lambda: None, 30.0)
    loop.start()
    assert loop.is_alive()
    started = time.monotonic()
    assert loop.stop(2)
    assert time.monotonic() - started < 0.5
    assert not loop.is_alive()


def test_thread_is_named_and_a_daemon() -> None:
    seen: list[threading.Thread] = []
    done = threading.Event()

    def tick() -> None:
        seen.append(threading.current_thread())
        done.set()

    loop = TimerLoop("wurk-test-named", tick, FAST)
    loop.start()
    assert done.wait(2)
    loop.stop(1)
    assert seen[0].name == "wurk-test-named" and seen[0].daemon


def test_a_raising_tick_is_reported_and_the_loop_goes_on(make: MakeLoop) -> None:
    errors: list[Exception] = []
    calls = 0
    later = threading.Event()

    def tick() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("boom")
        later.set()

    loop = make("t-raise", tick, FAST, on_error=errors.append)
    loop.start()
    assert later.wait(2)
    loop.stop(1)
    assert [str(e) for e in errors] == ["boom"]


def test_a_raising_error_callback_does_not_end_the_loop(make: MakeLoop) -> None:
    calls = 0
    enough = threading.Event()

    def tick() -> None:
        nonlocal calls
        calls += 1
        if calls >= 3:
            enough.set()
        raise ValueError("tick")

    def on_error(exc: Exception) -> None:
        raise RuntimeError("callback")

    loop = make("t-callback", tick, FAST, on_error=on_error)
    loop.start()
    assert enough.wait(2)
    assert loop.is_alive()
    loop.stop(1)


def test_interval_function_is_asked_before_every_wait(make: MakeLoop) -> None:
    asked = 0
    enough = threading.Event()

    def interval() -> float:
        nonlocal asked
        asked += 1
        if asked >= 4:
            enough.set()
        return 0.01

    loop = make("t-fn", lambda: None, interval, first_wait=0)
    loop.start()
    assert enough.wait(2)
    loop.stop(1)


def test_first_wait_overrides_the_interval_for_the_first_tick(make: MakeLoop) -> None:
    ticked = threading.Event()
    loop = make("t-firstwait", ticked.set, 30.0, first_wait=0)
    loop.start()
    assert ticked.wait(1)
    assert loop.stop(1)


def test_a_raising_interval_function_is_reported_and_the_loop_stops_on_request(
    make: MakeLoop,
) -> None:
    errors: list[Exception] = []
    reported = threading.Event()

    def interval() -> float:
        raise OSError("no interval")

    def on_error(exc: Exception) -> None:
        errors.append(exc)
        reported.set()

    loop = make("t-badinterval", lambda: None, interval, first_wait=0, on_error=on_error)
    loop.start()
    assert reported.wait(1)
    assert loop.is_alive()
    assert loop.stop(1)
    assert isinstance(errors[0], OSError)


def test_start_twice_is_refused(make: MakeLoop) -> None:
    loop = make("t-twice", lambda: None, 30.0)
    loop.start()
    with pytest.raises(RuntimeError, match="already started"):
        loop.start()
    loop.stop(1)


def test_stop_before_start_and_from_the_tick_itself(make: MakeLoop) -> None:
    assert make("t-never", lambda: None, 1.0).stop(0.1)
    results: list[bool] = []
    done = threading.Event()
    holder: list[TimerLoop] = []

    def tick() -> None:
        results.append(holder[0].stop(1))  # must not deadlock joining itself
        done.set()

    loop = make("t-self", tick, FAST)
    holder.append(loop)
    loop.start()
    assert done.wait(2)
    assert results == [True]
    assert loop.stop(1)


# -- many loops on one thread -----------------------------------------------------------------
def ticks_of(host: Timers, name: str, interval: float, times: list[float],
             block: threading.Event | None = None, **kwargs: Any) -> TimerLoop:
    def tick() -> None:
        times.append(time.monotonic())
        if block is not None:
            block.wait(10)

    return TimerLoop(name, tick, interval, host=host, **kwargs)


def test_loops_sharing_a_thread_keep_their_own_intervals() -> None:
    host = Timers("t-shared")
    fast: list[float] = []
    slow: list[float] = []
    threads: set[str] = set()
    loops = [ticks_of(host, "t-fast", 0.05, fast), ticks_of(host, "t-slow", 0.3, slow),
             TimerLoop("t-where", lambda: threads.add(threading.current_thread().name), 0.1,
                       host=host)]
    for loop in loops:
        loop.start()
    time.sleep(1.3)
    assert host.stop(2)
    assert threads == {"t-shared"}
    assert [t.name for t in threading.enumerate() if t.name == "t-shared"] == []
    # About 26 and 4 ticks: never faster than the interval, and each one ticking on its own.
    assert 8 <= len(fast) <= 27 and 2 <= len(slow) <= 5
    assert all(b - a >= 0.05 * 0.9 for a, b in itertools.pairwise(fast))
    assert all(b - a >= 0.3 * 0.9 for a, b in itertools.pairwise(slow))


def test_a_slow_tick_delays_the_others_but_starves_none() -> None:
    """While one loop's tick is held for 1.5 s the others wait; once it ends, every loop
    that came due meanwhile ticks before the quick loop ticks twice (the one due first
    runs next), and the held loop itself ticks again on its interval."""
    host = Timers("t-starve")
    held = threading.Event()
    slow: list[float] = []
    quick: list[float] = []
    rare: list[float] = []
    order: list[str] = []
    blocking = ticks_of(host, "t-block", 0.2, slow, block=held, first_wait=0.0)
    loops = [blocking, TimerLoop("t-quick", lambda: (quick.append(time.monotonic()),
                                                     order.append("quick")), 0.01, host=host),
             TimerLoop("t-rare", lambda: (rare.append(time.monotonic()),
                                          order.append("rare")), 0.5, host=host)]
    for loop in loops:
        loop.start()
    time.sleep(1.5)
    assert (len(slow), quick, rare) == (1, [], [])  # the thread is held by t-block
    released = time.monotonic()
    held.set()
    deadline = time.monotonic() + 5
    while (len(slow) < 3 or not rare) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert host.stop(2)
    assert rare and rare[0] - released < 0.5, "the overdue loop runs as soon as the thread is free"
    assert order[:2].count("rare") == 1, "not behind a run of quick ticks"
    assert len(slow) >= 3 and slow[1] - released >= 0.2 * 0.9


def test_stopping_a_hosted_loop_waits_for_its_own_tick_only() -> None:
    host = Timers("t-stops")
    held = threading.Event()
    busy: list[float] = []
    blocking = ticks_of(host, "t-busy", 30.0, busy, block=held, first_wait=0.0)
    idle = TimerLoop("t-idle", lambda: None, 30.0, host=host)
    blocking.start()
    idle.start()
    while not busy:
        time.sleep(0.01)
    started = time.monotonic()
    assert idle.stop(2)  # not ticking: no need to wait for t-busy's tick
    assert time.monotonic() - started < 0.5
    assert not idle.is_alive() and blocking.is_alive()
    assert not blocking.stop(0.2)  # its own tick is still held
    held.set()
    assert blocking.stop(2) and not blocking.is_alive()
    assert host.stop(2) and not host.is_alive()


def test_a_stopped_host_refuses_new_loops_and_stops_the_ones_it_had() -> None:
    host = Timers("t-closed")
    left = TimerLoop("t-left", lambda: None, 30.0, host=host)
    left.start()
    assert host.stop(2)
    assert left.stopping and not left.is_alive()
    with pytest.raises(RuntimeError, match="t-closed is stopped"):
        TimerLoop("t-late", lambda: None, 1.0, host=host).start()
