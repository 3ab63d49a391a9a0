"""systemd's notify protocol (``wurk.runtime.sdnotify``) against a real datagram socket the
test binds: what is read from the environment, what is sent, how failures are said, and
that the watchdog pings from its host thread only."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator

import pytest

from tests.helpers.sdnotify import NotifySocket, unreachable
from wurk.runtime.sdnotify import Notifier, Reporter
from wurk.runtime.timer import TimerLoop, Timers


@pytest.fixture
def notify() -> Iterator[NotifySocket]:
    with NotifySocket() as sock:
        yield sock


def test_without_a_notify_socket_nothing_is_made_or_sent(
        caplog: pytest.LogCaptureFixture) -> None:
    notifier = Notifier.from_environment({"WATCHDOG_USEC": "nonsense"})
    assert not notifier.enabled and notifier.watchdog_interval is None
    assert not notifier.send("READY=1")
    timers = Timers("test-sd-none")
    reporter = Reporter(notifier, lambda: "up")
    reporter.ready()
    assert reporter.duty(timers) is None
    assert not timers.is_alive()  # no duty, so no thread
    assert caplog.records == []  # the watchdog's value is not even looked at


def test_the_watchdog_interval_is_half_of_watchdog_usec_for_its_own_pid(
        notify: NotifySocket) -> None:
    env = {**notify.env, "WATCHDOG_USEC": "400000"}
    assert Notifier.from_environment(env).watchdog_interval == pytest.approx(0.2)
    own = {**env, "WATCHDOG_PID": str(os.getpid())}
    assert Notifier.from_environment(own).watchdog_interval == pytest.approx(0.2)
    other = {**env, "WATCHDOG_PID": str(os.getpid() + 1)}
    assert Notifier.from_environment(other).watchdog_interval is None
    assert Notifier.from_environment(notify.env).watchdog_interval is None


@pytest.mark.parametrize("value", ["soon", "0", "-5", "1.5"])
def test_a_bad_watchdog_usec_is_refused_with_one_warning(
        notify: NotifySocket, value: str, caplog: pytest.LogCaptureFixture) -> None:
    notifier = Notifier.from_environment({**notify.env, "WATCHDOG_USEC": value})
    assert notifier.watchdog_interval is None and notifier.enabled
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"WATCHDOG_USEC={value!r}" in warnings[0]


def test_datagrams_carry_one_field_a_line(notify: NotifySocket) -> None:
    notifier = Notifier.from_environment(notify.env)
    reporter = Reporter(notifier, lambda: "two\nlines")
    reporter.ready()
    reporter.stopping("going")
    notify.wait_for(lambda got: len(got) == 2)
    ready, stopping = notify.received
    assert ready.fields == ("READY=1", "STATUS=two lines") and ready.pid == os.getpid()
    assert stopping.fields == ("STOPPING=1", "STATUS=going")
    notifier.close()


def test_an_abstract_socket_name_is_reached(caplog: pytest.LogCaptureFixture) -> None:
    with NotifySocket(abstract=True) as notify:
        notifier = Notifier.from_environment(notify.env)
        assert notifier.send("READY=1")
        assert notify.first("READY=1").pid == os.getpid()
        notifier.close()
    assert caplog.records == []


def test_a_failing_socket_is_said_once_and_never_raises(
        caplog: pytest.LogCaptureFixture) -> None:
    address = unreachable()
    notifier = Notifier.from_environment({"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "1000"})
    for _ in range(5):
        assert not notifier.watchdog()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert address in warnings[0] and "No such file or directory" in warnings[0]
    notifier.close()


def test_a_status_is_sent_again_only_when_it_changed(notify: NotifySocket) -> None:
    status = ["processing: 0 of 2 busy"]
    reporter = Reporter(Notifier.from_environment(notify.env), lambda: status[0])
    reporter.ready()
    reporter.tick()  # unchanged, and no watchdog: nothing sent
    status[0] = "processing: 1 of 2 busy"
    reporter.tick()
    notify.read_for(0.2)
    assert [d.fields for d in notify.received] == [
        ("READY=1", "STATUS=processing: 0 of 2 busy"), ("STATUS=processing: 1 of 2 busy",)]


def test_the_watchdog_stops_while_its_thread_is_wedged(notify: NotifySocket) -> None:
    """The pings run on the host thread's schedule: a duty that never returns holds them."""
    timers = Timers("test-sd-wedge")
    notifier = Notifier(notify.address, watchdog_interval=0.05)
    try:
        Reporter(notifier, lambda: "up").duty(timers)
        notify.wait_for(lambda got: sum(d.has("WATCHDOG=1") for d in got) >= 2, timeout=10)
        wedged, release = threading.Event(), threading.Event()

        def wedge() -> None:
            wedged.set()
            release.wait(30)

        TimerLoop("test-wedge", wedge, 0.01, host=timers).start()
        assert wedged.wait(10)
        notify.read_for(0.1)  # whatever was sent before the wedge
        before = len(notify.with_field("WATCHDOG=1"))
        notify.read_for(0.5)  # ten intervals
        assert len(notify.with_field("WATCHDOG=1")) == before
        release.set()
        notify.wait_for(lambda got: sum(d.has("WATCHDOG=1") for d in got) > before,
                        timeout=10, what="pings again")
    finally:
        timers.stop(timeout=5)
        notifier.close()
