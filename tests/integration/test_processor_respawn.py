"""A processor that dies at start is replaced after a growing wait, reported once per burst,
and the burst shows in the heartbeat's fields."""

from __future__ import annotations

import logging
import threading
import time

import pytest

import wurk
from wurk import manager as manager_module
from wurk.config import Capsule
from wurk.fetch.basic import BasicFetch, Fetcher
from wurk.manager import Manager, capsule_pool
from wurk.metrics.counters import Counters
from wurk.processor import Busy, JobRunner


class FailingPinning:
    """Stands in for ``wurk.runtime.affinity.Pinning``: its ``enter`` fails while ``failing``."""

    def __init__(self) -> None:
        self.failing = True
        self.calls = 0
        self._lock = threading.Lock()

    def enter(self, *, scout: bool = False) -> None:
        with self._lock:
            self.calls += 1
        if self.failing:
            raise OSError("sched_setaffinity: Invalid argument")

    def leave(self) -> None:
        return None


def test_a_processor_dying_at_start_backs_off_and_reports_once(
    config: wurk.Config, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(manager_module, "BURST_GAP", 0.6)
    reported: list[BaseException] = []
    config.error_handlers.append(lambda exc, context: reported.append(exc))
    capsule = Capsule(queues=[("respawn", 0)], concurrency=1)

    def make_fetcher(capsule: Capsule, slot: int) -> Fetcher:
        return BasicFetch(config, capsule, capsule_pool(config, capsule))

    runner = JobRunner(config, counters=Counters(), busy=Busy())
    manager = Manager(config, capsule, runner, make_fetcher)
    pinning = FailingPinning()
    manager.start(pinning)  # type: ignore[arg-type]
    time.sleep(1.0)
    tries = pinning.calls
    health = manager.health()
    # A tight loop makes thousands of tries a second; the doubling wait (0.1, 0.2, 0.4 s…)
    # allows a handful.
    assert 2 <= tries <= 6, tries
    assert len(reported) == 1, "one report per burst, not one per death"
    assert health["deaths"] == tries and health["bursting"] == 1
    pinning.failing = False
    deadline = time.monotonic() + 5
    while len(manager.processors) != 1 or manager.health()["bursting"]:
        assert time.monotonic() < deadline, "the burst never ended"
        time.sleep(0.05)
    assert any("processor deaths in a row" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING)
    manager.stop(time.monotonic() + 2)
    runner.close()
    assert not manager.processors
