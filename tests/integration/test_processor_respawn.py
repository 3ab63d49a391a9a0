"""A processor that dies at start is replaced after a growing wait, reported once per burst,
and the burst shows in the heartbeat's fields."""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
import types
import urllib.error
import urllib.request

import pytest
import redis

import wurk
from tests.helpers.server import Server, free_port
from tests.helpers.wait import wait_until
from wurk import manager as manager_module
from wurk import processor as processor_module
from wurk.config import Capsule
from wurk.errors import RedisUnavailable
from wurk.fetch.basic import BasicFetch, Fetcher, UnitOfWork
from wurk.manager import FIRST_RESPAWN_WAIT, Manager, capsule_pool
from wurk.metrics.counters import Counters
from wurk.processor import JobRunner
from wurk.runtime.busy import Busy


class FailingPinning:
    """Stands in for ``wurk.runtime.affinity.Pinning``: its ``enter`` fails while ``failing``,
    and records when each try came."""

    def __init__(self) -> None:
        self.failing = True
        self.tries: list[float] = []
        self.failures = 0
        self._lock = threading.Lock()

    def enter(self, *, scout: bool = False) -> None:
        with self._lock:
            self.tries.append(time.monotonic())
            if self.failing:
                self.failures += 1
                raise OSError("sched_setaffinity: Invalid argument")

    def leave(self) -> None:
        return None


def test_a_processor_dying_at_start_backs_off_and_reports_once(
    config: wurk.Config, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(manager_module, "BURST_GAP", 1.0)
    reported: list[BaseException] = []
    config.error_handlers.append(lambda exc, context: reported.append(exc))
    capsule = Capsule(queues=[("respawn", 0)], concurrency=1)

    def make_fetcher(capsule: Capsule, slot: int) -> Fetcher:
        return BasicFetch(config, capsule, capsule_pool(config, capsule))

    runner = JobRunner(config, counters=Counters(), busy=Busy())
    manager = Manager(config, capsule, runner, make_fetcher)
    pinning = FailingPinning()
    manager.start(pinning)  # type: ignore[arg-type]
    wait_until(lambda: len(pinning.tries) >= 4, what="four tries")
    health = manager.health()
    assert len(reported) == 1, "one report per burst, not one per death"
    assert health["bursting"] == 1
    pinning.failing = False  # the next try lives
    # A tight loop makes thousands of tries a second; the wait before each replacement
    # doubles: none after the first death, then 0.1 s, then 0.2 s.
    gaps = [later - earlier for earlier, later in itertools.pairwise(pinning.tries[:4])]
    assert gaps[1] >= FIRST_RESPAWN_WAIT * 0.9 and gaps[2] >= 2 * FIRST_RESPAWN_WAIT * 0.9
    wait_until(lambda: len(manager.processors) == 1 and not manager.health()["bursting"],
               what="the burst to end")
    assert manager.health()["deaths"] == pinning.failures
    assert any("processor deaths in a row" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING)
    manager.stop(time.monotonic() + 10)
    runner.close()
    assert not manager.processors


def test_the_wait_before_a_replacement_doubles_from_a_tenth_of_a_second_to_30_s(
    config: wurk.Config
) -> None:
    """docs/worker.md: "Deaths in a row, each within 10 s of the last … are replaced after a
    wait doubling from 0.1 s to 30 s" — the first death of a burst is replaced at once, and
    a burst over (10 s without a death) starts again from there."""
    reported: list[BaseException] = []
    config.error_handlers.append(lambda exc, context: reported.append(exc))
    capsule = Capsule(queues=[("respawn", 0)], concurrency=1)
    runner = JobRunner(config, counters=Counters(), busy=Busy())
    manager = Manager(config, capsule, runner,
                      lambda capsule, slot: BasicFetch(config, capsule,
                                                       capsule_pool(config, capsule)))
    dead = types.SimpleNamespace(name="wurk-respawn-1")  # the processor that died
    waits = [manager._died(dead, OSError("broken"))  # type: ignore[arg-type]
             for _ in range(14)]
    assert manager_module.BURST_GAP == 10.0
    assert waits[0] == 0.0 and waits[1] == FIRST_RESPAWN_WAIT == 0.1
    assert all(later == min(30.0, 2 * earlier)
               for earlier, later in itertools.pairwise(waits[1:]))
    assert max(waits) == manager_module.MAX_RESPAWN_WAIT == 30.0 and waits[-1] == 30.0
    assert len(reported) == 1  # the burst's first death, in full
    manager._last_death -= manager_module.BURST_GAP + 1  # 11 s without a death: over
    assert manager._died(dead, OSError("broken")) == 0.0  # type: ignore[arg-type]
    runner.close()


class DiesOnce(FailingPinning):
    """A pinning whose first ``enter`` fails: the first processor dies at once."""

    def enter(self, *, scout: bool = False) -> None:
        if self.failures == 0:
            self.failures += 1
            raise OSError("sched_setaffinity: Invalid argument")


@pytest.mark.parametrize("failing", ["fetcher", "thread"])
def test_a_replacement_that_cannot_be_made_is_reported_and_tried_again(
    config: wurk.Config, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """The replacement is made in the dying thread: its fetcher failing to be made, or its
    thread failing to start ("can't start new thread"), ended that thread with the error
    uncounted and unreported, and the capsule ran a processor short for good; a thread never
    started was even kept as a processor, which the stop then waited for until its deadline."""
    reported: list[BaseException] = []
    config.error_handlers.append(lambda exc, context: reported.append(exc))
    capsule = Capsule(queues=[("respawn", 0)], concurrency=1)
    made = itertools.count()

    def make_fetcher(capsule: Capsule, slot: int) -> Fetcher:
        if failing == "fetcher" and next(made) == 1:  # the first replacement's
            raise OSError("no fetcher for you")
        return BasicFetch(config, capsule, capsule_pool(config, capsule))

    started = itertools.count()
    real_start = manager_module.Processor.start

    def start(self: manager_module.Processor) -> None:
        if failing == "thread" and next(started) == 1:
            raise RuntimeError("can't start new thread")
        real_start(self)

    monkeypatch.setattr(manager_module.Processor, "start", start)
    runner = JobRunner(config, counters=Counters(), busy=Busy())
    manager = Manager(config, capsule, runner, make_fetcher)
    manager.start(DiesOnce())  # type: ignore[arg-type]
    wait_until(lambda: len(manager.processors) == 1
               and all(p.thread.is_alive() for p in manager.processors),
               what="a replacement that runs")
    # Counted as a death of the burst the first one began (reported once, as every burst).
    assert manager.health()["deaths"] == 2, "the failed replacement was not counted"
    assert len(reported) == 1
    stopping = time.monotonic()
    manager.stop(time.monotonic() + 10)
    runner.close()
    assert time.monotonic() - stopping < 5, "the stop waited for a thread never started"
    assert not manager.processors


class QuietThenFetch:
    """A fetcher whose fetch returns a job only once quiet has come, and whose requeue
    fails (Redis gone at that moment)."""

    def __init__(self, quiet: threading.Event) -> None:
        self.quiet = quiet

    def fetch(self, timeout: float) -> UnitOfWork | None:
        if not self.quiet.wait(timeout):
            return None
        return UnitOfWork("respawn", b'{"class":"X","args":[],"jid":"j1"}', self)  # type: ignore[arg-type]

    def requeue(self, units: object) -> None:
        raise RedisUnavailable("Redis is gone")

    def give_back(self, unit: UnitOfWork) -> None:
        self.requeue([unit])  # as basic fetch gives back a job fetched after quiet

    def flush(self) -> None:
        return None


def test_a_processor_dying_while_its_manager_stops_is_reported(config: wurk.Config) -> None:
    """A processor that died while quiet or stop was under way went unreported: its error
    was dropped with its replacement (none is made then). With basic fetch, a job fetched
    after quiet whose requeue failed was lost without a word."""
    reported: list[tuple[BaseException, dict[str, object]]] = []
    config.error_handlers.append(lambda exc, context: reported.append((exc, context)))
    capsule = Capsule(queues=[("respawn", 0)], concurrency=1)
    quiet = threading.Event()
    runner = JobRunner(config, counters=Counters(), busy=Busy())
    manager = Manager(config, capsule, runner,
                      lambda capsule, slot: QuietThenFetch(quiet))  # type: ignore[arg-type,return-value]
    manager.start()
    wait_until(lambda: len(manager.processors) == 1, what="the processor")
    manager.quiet()
    quiet.set()  # the fetch under way returns a job, after quiet: its requeue fails
    manager.stop(time.monotonic() + 10)
    runner.close()
    assert [exc for exc, _ in reported if isinstance(exc, RedisUnavailable)], \
        "the processor's death while stopping was not reported"


def test_the_process_record_carries_processor_deaths_and_respawning(
    redis_server: Server, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/worker.md: "The process record carries `processor_deaths` (since start) and
    `respawning` (1 while a burst is on)." — read from the record in Redis, as the dashboard
    and `wurk top` read it: three deaths in a row show as 3 and 1, and once the burst is
    over the count stays and `respawning` is back to 0."""
    monkeypatch.setattr(manager_module, "BURST_GAP", 2.0)  # ample for a beat every 0.1 s
    real_loop = processor_module.Processor._loop
    dying = threading.Event()
    dying.set()
    deaths = itertools.count(1)

    def loop(self: processor_module.Processor) -> None:
        if dying.is_set() and next(deaths) >= 3:
            dying.clear()  # the third death is the last: its replacement lives
            raise RuntimeError("processor broken at start (third time)")
        if dying.is_set():
            raise RuntimeError("processor broken at start")
        real_loop(self)

    monkeypatch.setattr(processor_module.Processor, "_loop", loop)
    config = wurk.Config(redis_url=redis_server.url, heartbeat_interval=0.1,
                         fetch_timeout=0.2, timeout=1, shutdown_grace=0.5,
                         scheduler_initial_wait=0, concurrency=1, queues=["respawn-record"])
    worker = wurk.InProcessWorker(config)

    def record() -> dict[str, str]:
        return r.hgetall(str(worker.identity))  # type: ignore[return-value]

    worker.start()
    try:
        wait_until(lambda: record().get("processor_deaths") == "3"
                   and record().get("respawning") == "1", 10,
                   "the record to show the burst: 3 deaths, respawning")
        wait_until(lambda: record().get("respawning") == "0", 10,
                   "the record to show the burst over")
        assert record()["processor_deaths"] == "3"
    finally:
        worker.stop()


def test_the_health_check_says_so_while_a_capsule_has_no_processor_alive(
    redis_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/metrics.md: the health check answers 200 while the heartbeat lands "and every
    capsule fetches". Processors that die as they start (a pinning refused, a thread the
    pids limit will not give) left the capsule with none alive, their replacements waiting,
    while the heartbeat thread beat on: the probe answered 200 "ok" for a worker that could
    run no job. It answers 503 "processors dead" naming the capsule, and 200 once one lives."""
    real_loop = processor_module.Processor._loop
    dying = threading.Event()
    dying.set()

    def loop(self: processor_module.Processor) -> None:
        if dying.is_set():
            raise RuntimeError("processor broken at start")
        real_loop(self)

    monkeypatch.setattr(processor_module.Processor, "_loop", loop)
    monkeypatch.setattr(manager_module, "MAX_RESPAWN_WAIT", 0.4)  # back soon once one lives
    port = free_port()
    config = wurk.Config(redis_url=redis_server.url, heartbeat_interval=0.1,
                         fetch_timeout=0.2, timeout=1, shutdown_grace=0.5,
                         scheduler_initial_wait=0, concurrency=1, queues=["respawn-health"],
                         health_port=port)
    worker = wurk.InProcessWorker(config)

    def health() -> tuple[int, dict[str, object]]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as refused:
            return refused.code, json.loads(refused.read())

    worker.start()
    try:
        def says(code: int, status: str) -> bool:  # one reading: two could disagree
            answer = health()
            return answer[0] == code and answer[1]["status"] == status

        wait_until(lambda: says(503, "processors dead"),
                   what="the health check to say the capsule's processors are dead")
        assert health()[1]["capsules"] == ["default"]
        dying.clear()
        wait_until(lambda: says(200, "ok"), what="the health check to be ok once a processor lives")
    finally:
        worker.stop()
