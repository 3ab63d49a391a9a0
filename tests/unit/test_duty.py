"""The periodic-duty helper: a tick with outage accounting, and the wait it asks for — driven
by calling ``run()`` and reading ``next_wait()``, and on a ``ManualClock``, never by sleeping."""

from __future__ import annotations

import logging
import threading

import pytest

import wurk
from tests.helpers.wait import step, wait_until
from wurk.runtime.clock import ManualClock
from wurk.runtime.duty import Duty
from wurk.runtime.outage import MAX_WAIT
from wurk.runtime.timer import Timers


class Flaky:
    """A tick that fails while ``down`` is set."""

    def __init__(self) -> None:
        self.down = False
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        if self.down:
            raise wurk.RedisUnavailable("redis://x: Connection refused")


@pytest.fixture
def config() -> wurk.Config:
    return wurk.Config(redis_url="redis://127.0.0.1:1/0")


def test_healthy_the_wait_is_the_interval(config: wurk.Config) -> None:
    duty = Duty(config, "d", Flaky(), 7.0, component="d")
    assert duty.run() and not duty.failing
    assert duty.next_wait() == 7.0


def test_an_outage_is_reported_once_and_its_end_logged(
        config: wurk.Config, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="wurk")
    tick = Flaky()
    duty = Duty(config, "d", tick, 7.0, component="the sampler")
    tick.down = True
    assert [duty.run() for _ in range(5)] == [False] * 5
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "the sampler" in errors[0].getMessage()
    tick.down = False
    assert duty.run() and not duty.failing
    back = [r.getMessage() for r in caplog.records if "Redis is back" in r.getMessage()]
    assert len(back) == 1 and "(5 failed tries)" in back[0]
    assert duty.outage.count == 1


def test_retry_early_duties_wait_their_backoff_instead_of_the_interval(
        config: wurk.Config) -> None:
    tick = Flaky()
    duty = Duty(config, "d", tick, 60.0, component="d", retry_early=True)
    tick.down = True
    for _ in range(10):
        duty.run()
        assert duty.next_wait() == duty.backoff.wait <= MAX_WAIT


def test_other_duties_never_come_round_sooner_than_their_interval(config: wurk.Config) -> None:
    tick = Flaky()
    asked: list[int] = []

    def interval() -> float:
        asked.append(1)
        return 0.5

    duty = Duty(config, "d", tick, interval, component="d", retry_early=False)
    tick.down = True
    waits = []
    for _ in range(12):
        duty.run()
        waits.append(duty.next_wait())
        assert waits[-1] == max(0.5, duty.backoff.wait)
    assert min(waits) >= 0.5 and len(asked) == 12
    assert max(waits) > 0.5  # the backoff's ceiling passes the interval: it waits longer


def test_wake_by_caps_the_wait_healthy_or_failing(config: wurk.Config) -> None:
    tick = Flaky()
    duty = Duty(config, "d", tick, 60.0, component="d", wake_by=lambda: 0.25)
    duty.run()
    assert duty.next_wait() == 0.25
    tick.down = True
    for _ in range(8):
        duty.run()
    assert duty.next_wait() == min(duty.backoff.wait, 0.25)


def test_a_failure_hook_sees_each_failure(config: wurk.Config) -> None:
    seen: list[Exception] = []
    tick = Flaky()
    tick.down = True
    duty = Duty(config, "d", tick, 1.0, component="d", on_failure=seen.append)
    duty.run()
    duty.run()
    assert [type(e) for e in seen] == [wurk.RedisUnavailable] * 2


@pytest.mark.parametrize("shared", [False, True])
def test_on_a_manual_clock_ticks_come_when_time_is_advanced(
        config: wurk.Config, shared: bool) -> None:
    clock = ManualClock()
    host = Timers("t-duty-host", clock=clock) if shared else None
    ticked = threading.Semaphore(0)
    calls: list[float] = []

    def tick() -> None:
        calls.append(clock.monotonic())
        ticked.release()

    duty = Duty(config, "t-duty", tick, 10.0, component="d", host=host, clock=clock)
    start = clock.monotonic()
    duty.start()
    wait_until(lambda: clock.waiting() >= 1, what="the duty to wait")
    assert calls == []  # no time has passed: no tick
    for n in range(1, 4):
        step(clock, 10.0)  # once the duty waits again: its deadline counts from its tick
        assert ticked.acquire(timeout=10), f"tick {n}"
    assert calls == [start + 10.0, start + 20.0, start + 30.0]
    assert duty.stop(5)
    if host is not None:
        assert host.stop(5)
