"""TimerLoop: waits before the first tick, ticks on its interval, stops at once, survives
a raising tick — on a thread of its own and on a shared one (``Timers``), where each loop
keeps its own interval and a slow tick starves no other loop. Timing is checked on a
``ManualClock``: the test moves time by exact steps and asserts which ticks came when."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.helpers.wait import step, wait_until
from wurk.runtime.clock import ManualClock
from wurk.runtime.timer import TimerLoop, Timers

FAST = 0.05

MakeLoop = Callable[..., TimerLoop]


@pytest.fixture(params=["own thread", "shared thread"])
def clock(request: pytest.FixtureRequest) -> Iterator[tuple[ManualClock, MakeLoop]]:
    """A manual clock, and loops on it: on their own threads, or all on one ``Timers``."""
    manual = ManualClock()
    host = Timers("t-host", clock=manual) if request.param == "shared thread" else None

    def build(*args: Any, **kwargs: Any) -> TimerLoop:
        return TimerLoop(*args, host=host, clock=manual, **kwargs)

    yield manual, build
    if host is not None:
        assert host.stop(10)


@pytest.fixture(params=["own thread", "shared thread"])
def make(request: pytest.FixtureRequest) -> Iterator[MakeLoop]:
    """Loops on the real clock, for what does not depend on time."""
    host = Timers("t-host") if request.param == "shared thread" else None

    def build(*args: Any, **kwargs: Any) -> TimerLoop:
        return TimerLoop(*args, host=host, **kwargs)

    yield build
    if host is not None:
        assert host.stop(10)


class Ticks:
    """A tick that records the clock's time and lets the test wait for the n-th."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.times: list[float] = []
        self._each = threading.Semaphore(0)

    def __call__(self) -> None:
        self.times.append(self.clock.monotonic())
        self._each.release()

    def next(self) -> None:
        assert self._each.acquire(timeout=10), f"no tick after {self.times}"


def test_first_tick_comes_one_interval_after_start(
        clock: tuple[ManualClock, MakeLoop]) -> None:
    manual, make = clock
    ticks = Ticks(manual)
    started = manual.monotonic()
    loop = make("t-first", ticks, 20.0)
    loop.start()
    step(manual, 19.0)  # not yet due: a tick now would be stamped 19 s after the start
    step(manual, 1.0)
    ticks.next()
    assert loop.stop(10)
    assert ticks.times == [started + 20.0]


def test_ticks_repeat_on_the_interval(clock: tuple[ManualClock, MakeLoop]) -> None:
    manual, make = clock
    ticks = Ticks(manual)
    started = manual.monotonic()
    loop = make("t-repeat", ticks, 10.0)
    loop.start()
    for _ in range(5):
        step(manual, 10.0)
        ticks.next()
    assert loop.stop(10)
    assert ticks.times == [started + 10.0 * n for n in range(1, 6)]


def test_stop_interrupts_a_long_wait(clock: tuple[ManualClock, MakeLoop]) -> None:
    manual, make = clock
    loop = make("t-stop", lambda: None, 30.0)
    loop.start()
    assert loop.is_alive()
    wait_until(lambda: manual.waiting() >= 1, what="the loop to wait")
    # The clock never moves: only the stop can end this wait.
    assert loop.stop(10)
    assert not loop.is_alive()


def test_thread_is_named_and_a_daemon() -> None:
    seen: list[threading.Thread] = []
    done = threading.Event()

    def tick() -> None:
        seen.append(threading.current_thread())
        done.set()

    loop = TimerLoop("wurk-test-named", tick, FAST)
    loop.start()
    assert done.wait(10)
    loop.stop(10)
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
    assert later.wait(10)
    loop.stop(10)
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
    assert enough.wait(10)
    assert loop.is_alive()
    loop.stop(10)


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
    assert enough.wait(10)
    loop.stop(10)


def test_first_wait_overrides_the_interval_for_the_first_tick(
        clock: tuple[ManualClock, MakeLoop]) -> None:
    manual, make = clock
    ticks = Ticks(manual)
    started = manual.monotonic()
    loop = make("t-firstwait", ticks, 30.0, first_wait=0)
    loop.start()
    ticks.next()  # the clock never moved: the first wait was 0, not the interval
    assert loop.stop(10)
    assert ticks.times == [started]


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
    assert reported.wait(10)
    assert loop.is_alive()
    assert loop.stop(10)
    assert isinstance(errors[0], OSError)


def test_start_twice_is_refused(make: MakeLoop) -> None:
    loop = make("t-twice", lambda: None, 30.0)
    loop.start()
    with pytest.raises(RuntimeError, match="already started"):
        loop.start()
    loop.stop(10)


def test_stop_before_start_and_from_the_tick_itself(make: MakeLoop) -> None:
    assert make("t-never", lambda: None, 1.0).stop(0.1)
    results: list[bool] = []
    done = threading.Event()
    holder: list[TimerLoop] = []

    def tick() -> None:
        results.append(holder[0].stop(10))  # must not deadlock joining itself
        done.set()

    loop = make("t-self", tick, FAST)
    holder.append(loop)
    loop.start()
    assert done.wait(10)
    assert results == [True]
    assert loop.stop(10)


# -- many loops on one thread -----------------------------------------------------------------
class Log:
    """(loop name, clock time) of every tick, in the order they ran."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.entries: list[tuple[str, float]] = []
        self.threads: set[str] = set()

    def tick(self, name: str, block: threading.Event | None = None) -> Callable[[], None]:
        def run() -> None:
            self.entries.append((name, self.clock.monotonic()))
            self.threads.add(threading.current_thread().name)
            if block is not None:
                block.wait(10)
        return run

    def of(self, name: str) -> list[float]:
        return [at for who, at in self.entries if who == name]

    def names(self) -> list[str]:
        return [who for who, _ in self.entries]


def test_loops_sharing_a_thread_keep_their_own_intervals() -> None:
    clock = ManualClock()
    start = clock.monotonic()
    host = Timers("t-shared", clock=clock)
    log = Log(clock)
    for name, interval in (("fast", 1.0), ("slow", 6.0), ("mid", 3.0)):
        TimerLoop(name, log.tick(name), interval, host=host).start()
    def due_by_now() -> int:  # every tick due so far, each loop on its own interval
        seconds = round(clock.monotonic() - start)
        return seconds + seconds // 6 + seconds // 3

    for _ in range(12):
        step(clock, 1.0)
        wait_until(lambda: len(log.entries) == due_by_now(), what="the ticks due")
    assert host.stop(10)
    assert log.threads == {"t-shared"}
    assert [t for t in threading.enumerate() if t.name == "t-shared"] == []
    # Each loop ticked on its own interval exactly, never faster, none skipped.
    assert log.of("fast") == [start + n for n in range(1, 13)]
    assert log.of("slow") == [start + 6.0, start + 12.0]
    assert log.of("mid") == [start + 3.0, start + 6.0, start + 9.0, start + 12.0]


def test_a_slow_tick_delays_the_others_but_starves_none() -> None:
    """While one loop's tick is held the others wait, however long; once it ends, every loop
    that came due meanwhile ticks before the quick loop ticks twice (the one due first runs
    next), and the held loop itself ticks again one interval after its tick ended."""
    clock = ManualClock()
    start = clock.monotonic()
    host = Timers("t-starve", clock=clock)
    held = threading.Event()
    log = Log(clock)
    TimerLoop("block", log.tick("block", held), 2.0, first_wait=0.0, host=host).start()
    TimerLoop("quick", log.tick("quick"), 0.01, host=host).start()
    TimerLoop("rare", log.tick("rare"), 5.0, host=host).start()
    wait_until(lambda: log.names() == ["block"], what="the blocking tick")
    clock.advance(15.0)  # every loop is overdue; the one thread is held by the blocking tick
    assert log.names() == ["block"]
    held.set()
    wait_until(lambda: len(log.entries) == 3, what="the overdue loops")
    # Time stood still: the overdue loops ran as soon as the thread was free, rare second.
    assert log.entries[1:] == [("quick", start + 15.0), ("rare", start + 15.0)]
    step(clock, 2.0)
    wait_until(lambda: len(log.of("block")) == 2, what="the held loop's next tick")
    assert log.of("block") == [start, start + 17.0]
    assert host.stop(10)


def test_stopping_a_hosted_loop_waits_for_its_own_tick_only() -> None:
    host = Timers("t-stops")
    held = threading.Event()
    log = Log(ManualClock())
    blocking = TimerLoop("t-busy", log.tick("busy", held), 30.0, first_wait=0.0, host=host)
    idle = TimerLoop("t-idle", lambda: None, 30.0, host=host)
    blocking.start()
    idle.start()
    wait_until(lambda: log.entries, what="the busy tick")
    # t-busy's tick is held for ten seconds: a stop that waited for it would time out.
    assert idle.stop(5)
    assert not idle.is_alive() and blocking.is_alive()
    assert not blocking.stop(0.2)  # its own tick is still held
    held.set()
    assert blocking.stop(10) and not blocking.is_alive()
    assert host.stop(10) and not host.is_alive()


def test_a_stopped_host_refuses_new_loops_and_stops_the_ones_it_had() -> None:
    host = Timers("t-closed")
    left = TimerLoop("t-left", lambda: None, 30.0, host=host)
    left.start()
    assert host.stop(10)
    assert left.stopping and not left.is_alive()
    with pytest.raises(RuntimeError, match="t-closed is stopped"):
        TimerLoop("t-late", lambda: None, 1.0, host=host).start()


def test_a_hosted_loop_stopped_while_it_starts_never_ticks() -> None:
    """A stop that returned True promises no tick will come. A stop from another thread
    while ``start`` puts the loop on the host's schedule (forced: it comes while the first
    wait is asked) must still keep the loop off it."""
    clock = ManualClock()
    host = Timers("t-racing", clock=clock)
    log = Log(clock)
    stopped: list[bool] = []

    def first_wait() -> float:
        stopper = threading.Thread(target=lambda: stopped.append(racing.stop(10)),
                                   name="t-stopper")
        stopper.start()
        stopper.join(10)
        return 0.0  # due at once, ahead of the witness below

    racing = TimerLoop("t-racing-loop", log.tick("racing"), 1.0, first_wait=first_wait,
                       host=host)
    racing.start()
    assert stopped == [True]
    TimerLoop("t-witness", log.tick("witness"), 30.0, first_wait=0.0, host=host).start()
    wait_until(lambda: log.of("witness"), what="the witness's tick")
    assert log.names() == ["witness"], "a loop stopped while it started ticked"
    assert not racing.is_alive()
    assert host.stop(10)
