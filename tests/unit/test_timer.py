"""TimerLoop: waits before the first tick, ticks on its interval, stops at once, survives
a raising tick."""

from __future__ import annotations

import threading
import time

import pytest

from wurk.timer import TimerLoop

FAST = 0.05


def test_first_tick_comes_one_interval_after_start() -> None:
    ticked = threading.Event()
    started = time.monotonic()
    times: list[float] = []

    def tick() -> None:
        times.append(time.monotonic() - started)
        ticked.set()

    loop = TimerLoop("t-first", tick, 0.2)
    loop.start()
    assert ticked.wait(2)
    assert loop.stop(1)
    assert times[0] >= 0.19


def test_ticks_repeat_on_the_interval() -> None:
    count = 0
    enough = threading.Event()

    def tick() -> None:
        nonlocal count
        count += 1
        if count == 5:
            enough.set()

    loop = TimerLoop("t-repeat", tick, FAST)
    started = time.monotonic()
    loop.start()
    assert enough.wait(3)
    elapsed = time.monotonic() - started
    assert loop.stop(1)
    # five ticks need five waits of 50 ms: never sooner, and not much later on a busy box
    assert 5 * FAST * 0.9 <= elapsed < 2.5


def test_stop_interrupts_a_long_wait_promptly() -> None:
    loop = TimerLoop("t-stop", lambda: None, 30.0)
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


def test_a_raising_tick_is_reported_and_the_loop_goes_on() -> None:
    errors: list[Exception] = []
    calls = 0
    later = threading.Event()

    def tick() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("boom")
        later.set()

    loop = TimerLoop("t-raise", tick, FAST, on_error=errors.append)
    loop.start()
    assert later.wait(2)
    loop.stop(1)
    assert [str(e) for e in errors] == ["boom"]


def test_a_raising_error_callback_does_not_end_the_loop() -> None:
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

    loop = TimerLoop("t-callback", tick, FAST, on_error=on_error)
    loop.start()
    assert enough.wait(2)
    assert loop.is_alive()
    loop.stop(1)


def test_interval_function_is_asked_before_every_wait() -> None:
    asked = 0
    enough = threading.Event()

    def interval() -> float:
        nonlocal asked
        asked += 1
        if asked >= 4:
            enough.set()
        return 0.01

    loop = TimerLoop("t-fn", lambda: None, interval, first_wait=0)
    loop.start()
    assert enough.wait(2)
    loop.stop(1)


def test_first_wait_overrides_the_interval_for_the_first_tick() -> None:
    ticked = threading.Event()
    loop = TimerLoop("t-firstwait", ticked.set, 30.0, first_wait=0)
    loop.start()
    assert ticked.wait(1)
    assert loop.stop(1)


def test_a_raising_interval_function_is_reported_and_the_loop_stops_on_request() -> None:
    errors: list[Exception] = []
    reported = threading.Event()

    def interval() -> float:
        raise OSError("no interval")

    def on_error(exc: Exception) -> None:
        errors.append(exc)
        reported.set()

    loop = TimerLoop("t-badinterval", lambda: None, interval, first_wait=0, on_error=on_error)
    loop.start()
    assert reported.wait(1)
    assert loop.is_alive()
    assert loop.stop(1)
    assert isinstance(errors[0], OSError)


def test_start_twice_is_refused() -> None:
    loop = TimerLoop("t-twice", lambda: None, 30.0)
    loop.start()
    with pytest.raises(RuntimeError, match="already started"):
        loop.start()
    loop.stop(1)


def test_stop_before_start_and_from_the_tick_itself() -> None:
    assert TimerLoop("t-never", lambda: None, 1.0).stop(0.1)
    results: list[bool] = []
    done = threading.Event()
    holder: list[TimerLoop] = []

    def tick() -> None:
        results.append(holder[0].stop(1))  # must not deadlock joining itself
        done.set()

    loop = TimerLoop("t-self", tick, FAST)
    holder.append(loop)
    loop.start()
    assert done.wait(2)
    assert results == [True]
    assert loop.stop(1)
