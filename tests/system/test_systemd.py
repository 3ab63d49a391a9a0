"""A real ``wurk worker`` under systemd's notify protocol: the test plays systemd, binding
the notify socket the worker is told of (``NOTIFY_SOCKET``) and reading what it sends."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis

import wurk
from tests.helpers.sdnotify import NotifySocket, unreachable
from tests.system import worker_jobs as jobs
from tests.system.conftest import Worker, wait_for

StartWorker = Callable[..., Worker]


@pytest.fixture
def notify() -> Iterator[NotifySocket]:
    with NotifySocket() as sock:
        yield sock


def test_worker_says_ready_after_boot_and_stopping_before_it_exits(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker, notify: NotifySocket
) -> None:
    worker = start_worker("-c", "2", env=notify.env)
    ready = notify.first("READY=1")
    assert ready.pid == worker.process.pid
    assert any(field.startswith("STATUS=processing") for field in ready.fields), ready
    assert r.smembers("processes")  # its first heartbeat came before READY=1
    jobs.gated.perform_async("sys:sd")  # keeps the stop waiting until the test opens it
    wait_for(lambda: r.llen("sys:sd:started") == 1, message="job started")
    worker.signal("TERM")
    stopping = notify.first("STOPPING=1")
    assert worker.process.poll() is None  # told while the stop waits for the job
    assert stopping.pid == worker.process.pid and stopping.at > ready.at
    r.rpush("sys:sd:gate", "1")
    assert worker.wait(15) == 0
    notify.read_for(0.3)
    assert len(notify.with_field("READY=1")) == 1
    assert notify.with_field("WATCHDOG=1") == []  # no WATCHDOG_USEC, no pings
    assert "cannot send" not in worker.output()


def test_worker_pings_the_watchdog_at_half_its_interval(
    config: wurk.Config, start_worker: StartWorker, notify: NotifySocket
) -> None:
    # 0.4 s: a ping every 0.2 s. Two within 10 s holds on any machine that runs at all.
    worker = start_worker(env={**notify.env, "WATCHDOG_USEC": "400000"})
    notify.wait_for(lambda got: sum(d.has("WATCHDOG=1") for d in got) >= 2, timeout=10,
                    what="two watchdog pings")
    assert {d.pid for d in notify.with_field("WATCHDOG=1")} == {worker.process.pid}
    worker.signal("TERM")
    assert worker.wait(15) == 0


def test_a_bad_watchdog_usec_is_refused_with_one_warning(
    config: wurk.Config, start_worker: StartWorker, notify: NotifySocket
) -> None:
    worker = start_worker(env={**notify.env, "WATCHDOG_USEC": "soon"})
    notify.first("READY=1")
    notify.read_for(0.5)
    assert notify.with_field("WATCHDOG=1") == []
    worker.signal("TERM")
    assert worker.wait(15) == 0
    assert worker.output().count("WATCHDOG_USEC='soon' is not a positive whole number") == 1


def test_an_abstract_notify_socket_works(
    config: wurk.Config, start_worker: StartWorker
) -> None:
    with NotifySocket(abstract=True) as notify:
        assert notify.address.startswith("@")
        worker = start_worker(env=notify.env)
        assert notify.first("READY=1").pid == worker.process.pid
        worker.signal("TERM")
        notify.first("STOPPING=1")
        assert worker.wait(15) == 0


def test_an_unreachable_notify_socket_warns_once_and_the_worker_runs(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    address = unreachable()
    # With a watchdog every 0.2 s the send fails again and again: said once all the same.
    worker = start_worker(env={"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "400000"})
    jobs.incr.perform_async("sys:sd:count")
    wait_for(lambda: r.get("sys:sd:count") == "1", message="the job ran")
    wait_for(lambda: "cannot send to NOTIFY_SOCKET" in worker.output(), message="warning")
    jobs.incr.perform_async("sys:sd:count")
    wait_for(lambda: r.get("sys:sd:count") == "2", message="the second job ran")
    worker.signal("TERM")
    assert worker.wait(15) == 0
    output = worker.output()
    assert output.count("cannot send to NOTIFY_SOCKET") == 1, output
    assert address in output
