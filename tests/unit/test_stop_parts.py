"""Time limits and cancels, part by part, on a clock the test moves (``wurk.control``).

A processor thread keeps one target for all its jobs and each job's body is a new run of
it: what is meant for one run — a time limit, a cancel, a stuck report — must never reach
the next, and the limits of runs that ended must not pile up in the time-limit heap. The
threads here are real; time is a ``ManualClock`` and the time-limit thread's steps are
taken by the test (``Deadlines.tick``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.wait import wait_until
from wurk.config import Config
from wurk.control.deadlines import SWEEP_AT, Deadlines
from wurk.control.running import (
    CANCEL,
    STUCK_AFTER,
    TIMEOUT,
    AsyncTarget,
    Running,
    SyncTarget,
    Target,
)
from wurk.control.stopper import Stopper
from wurk.control.stops import CancelRaised, Guard, TimeoutRaised, set_guard
from wurk.control.worker import WorkerStops
from wurk.errors import JobCancelled, JobTimeout
from wurk.runtime.busy import Busy
from wurk.runtime.clock import ManualClock
from wurk.runtime.timer import Timers

PATIENCE = 20.0


class JobThread:
    """A processor-like thread: its own guard, jobs handed to it one at a time through the
    ``Stopper``, each job's body waiting until the test releases it (or a stop lands)."""

    def __init__(self, stopper: Stopper, guard: Guard | None = None) -> None:
        self.stopper = stopper
        self.guard = guard or Guard()
        self.jobs: list[tuple[str, dict[str, Any]]] = []
        self.outcomes: list[str] = []
        self.release = threading.Event()
        self.in_body = threading.Event()
        self._work = threading.Condition()
        self._stopping = False
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.thread.start()

    def run(self, jid: str, **options: Any) -> None:
        with self._work:
            self.release.clear()
            self.in_body.clear()
            self.jobs.append((jid, options))
            self._work.notify()

    def finish(self) -> str:
        """Let the current body return; what its job ended with."""
        count = len(self.outcomes)
        self.release.set()
        wait_until(lambda: len(self.outcomes) > count, PATIENCE, "the job to end")
        return self.outcomes[-1]

    def stop(self) -> None:
        with self._work:
            self._stopping = True
            self._work.notify()
        self.release.set()
        self.thread.join(PATIENCE)

    def _main(self) -> None:
        self.guard.ident = threading.get_ident()
        self.guard.thread_id = "t1"
        set_guard(self.guard)
        while True:
            with self._work:
                while not self.jobs and not self._stopping:
                    self._work.wait(PATIENCE)
                if self._stopping:
                    return
                jid, options = self.jobs.pop(0)
            payload = {"jid": jid, "class": "Spin", "args": [], **options}
            self.guard.enter()
            try:
                self.stopper(None, payload, "default", self._body)
                self.outcomes.append("done")
            except (JobTimeout, JobCancelled) as exc:
                self.outcomes.append(type(exc).__name__)
            finally:
                self.guard.leave()

    def _body(self) -> None:
        self.in_body.set()
        while not self.release.is_set():  # Python bytecode: where a stop is raised
            self.release.wait(0.001)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def parts(clock: ManualClock) -> tuple[Running, Deadlines, Stopper]:
    running = Running(clock=clock.monotonic)
    deadlines = Deadlines(clock=clock)
    return running, deadlines, Stopper(Config(), running, deadlines)


@pytest.fixture
def worker(parts: tuple[Running, Deadlines, Stopper]) -> Iterator[JobThread]:
    thread = JobThread(parts[2])
    yield thread
    thread.stop()


def test_a_thread_keeps_one_target_for_all_its_jobs(
        parts: tuple[Running, Deadlines, Stopper], worker: JobThread) -> None:
    running, deadlines, _ = parts
    runs = []
    for jid in ("a1", "a2", "a3"):
        worker.run(jid)
        assert worker.in_body.wait(PATIENCE)
        [target] = running.targets()
        assert isinstance(target, SyncTarget) and target.jid == jid
        runs.append(target.run)
        assert worker.finish() == "done"
        assert running.targets() == []  # between jobs nothing is running
    assert len(set(runs)) == 3 and 0 not in runs
    assert worker.guard.target is not None and len(running._threads) == 1
    assert deadlines.pending() == 0  # no limit: nothing armed


def test_a_time_limit_stops_its_run_and_never_the_next(
        clock: ManualClock, parts: tuple[Running, Deadlines, Stopper],
        worker: JobThread) -> None:
    _, deadlines, _ = parts
    worker.run("b1", timeout=5)
    assert worker.in_body.wait(PATIENCE)
    assert worker.finish() == "done"  # it ended within its limit
    worker.run("b2")  # no limit of its own; the same target, a new run
    assert worker.in_body.wait(PATIENCE)
    clock.advance(5)
    assert deadlines.tick() == 0  # b1's limit came due, but b1's run is over
    assert not worker.release.is_set() and worker.guard.stopped_with is None
    assert worker.finish() == "done"

    worker.run("b3", timeout=5)
    assert worker.in_body.wait(PATIENCE)
    clock.advance(5)
    assert deadlines.tick() == 1
    wait_until(lambda: len(worker.outcomes) == 3, PATIENCE, "b3 to stop")
    assert worker.outcomes[-1] == "JobTimeout"


def test_the_limit_is_measured_from_the_body_inside_every_middleware(
        clock: ManualClock) -> None:
    """time-limits-and-cancel.md: "The limit is measured from when the job's body starts,
    inside every middleware." An application's middleware spends 10 s of the clock (twice
    the limit) before and after the job, and the worker installs its stop as it does at
    start: a body within its 5 s finishes; one past them is stopped."""
    spent = 10.0

    class Slow:
        def __call__(self, job: Any, payload: Any, queue: str, call_next: Any) -> Any:
            clock.advance(spent)
            try:
                return call_next()
            finally:
                clock.advance(spent)

    config = Config(server_middleware=[Slow])
    stops = WorkerStops(config, "host:1:abc", Busy(), Timers("t", clock=clock))
    stops.install()  # the worker's own step: its stop at the end of the chain
    deadlines = stops.deadlines
    worker = JobThread(lambda job, payload, queue, body:  # type: ignore[arg-type]
                       config.server_middleware.invoke(job, payload, queue, body))
    try:
        worker.run("m1", timeout=5)
        assert worker.in_body.wait(PATIENCE)
        assert deadlines.tick() == 0  # 10 s spent before the body: nothing due
        clock.advance(4.5)
        assert deadlines.tick() == 0
        assert worker.finish() == "done"  # 4.5 s of body, 20 s of middleware
        worker.run("m2", timeout=5)
        assert worker.in_body.wait(PATIENCE)
        assert deadlines.tick() == 0
        clock.advance(5)
        assert deadlines.tick() == 1
        wait_until(lambda: len(worker.outcomes) == 2, PATIENCE, "m2 to stop")
        assert worker.outcomes[-1] == "JobTimeout"
    finally:
        worker.stop()


def test_middleware_added_after_the_worker_installs_its_stop_runs_outside_the_limit(
        clock: ManualClock) -> None:
    """The same promise for a link added once the worker was built (its ``Stopper`` already
    at the tail): ``add``, ``insert_after`` the stop itself and a re-``add`` of a link all
    land outside it, so their 10 s of the clock count against no job's 5 s limit."""
    spent = 10.0

    def slow(job: Any, payload: Any, queue: str, call_next: Any) -> Any:
        clock.advance(spent)
        try:
            return call_next()
        finally:
            clock.advance(spent)

    def also_slow(job: Any, payload: Any, queue: str, call_next: Any) -> Any:
        return slow(job, payload, queue, call_next)

    config = Config()
    stops = WorkerStops(config, "host:1:abc", Busy(), Timers("t", clock=clock))
    stops.install()
    chain = config.server_middleware
    (stop,) = list(chain)
    chain.add(slow)
    chain.insert_after(stop, also_slow)
    chain.add(slow)  # moved to the end: still outside the stop
    assert list(chain) == [also_slow, slow, stop]
    stops.install()  # a second build keeps the one stop where it is
    assert list(chain)[-1] is stop and len(chain) == 3
    worker = JobThread(lambda job, payload, queue, body:  # type: ignore[arg-type]
                       chain.invoke(job, payload, queue, body))
    try:
        worker.run("late1", timeout=5)
        assert worker.in_body.wait(PATIENCE)
        assert stops.deadlines.tick() == 0  # 20 s of links before the body: nothing due
        clock.advance(4.5)
        assert worker.finish() == "done"
    finally:
        worker.stop()


def test_a_cancel_reaches_the_run_of_its_jid_only(
        parts: tuple[Running, Deadlines, Stopper], worker: JobThread) -> None:
    running = parts[0]
    worker.run("c1")
    assert worker.in_body.wait(PATIENCE)
    assert running.cancel("other") == []
    assert worker.finish() == "done"
    worker.run("c2")
    assert worker.in_body.wait(PATIENCE)
    [target] = running.targets()
    run = target.run
    # A cancel found its target in run ``run``; the run ended and the next began before
    # it was sent: the stop names the run and is refused.
    assert worker.finish() == "done"
    worker.run("c3")
    assert worker.in_body.wait(PATIENCE)
    assert not target.stop(CANCEL, run) and worker.guard.stopped_with is None
    run = target.run
    assert running.cancel("c3") == [(target, run)] and target.reason == CANCEL
    wait_until(lambda: len(worker.outcomes) == 3, PATIENCE, "c3 to stop")
    assert worker.outcomes[-1] == "JobCancelled"
    worker.run("c3")  # fetched again after the cancel: refused before its body
    wait_until(lambda: len(worker.outcomes) == 4, PATIENCE, "the refusal")
    assert worker.outcomes[-1] == "JobCancelled" and not worker.in_body.is_set()


def test_a_job_that_does_not_stop_is_reported_stuck_once(
        clock: ManualClock, parts: tuple[Running, Deadlines, Stopper],
        caplog: pytest.LogCaptureFixture) -> None:
    running, _, _ = parts
    stuck: list[str] = []
    deadlines = Deadlines(clock=clock, on_stuck=lambda target: stuck.append(target.jid))
    target = _Recording()
    running.add(target)
    assert target.stop(CANCEL, target.run)
    deadlines.told(target, target.run)
    clock.advance(STUCK_AFTER)
    with caplog.at_level(logging.WARNING, logger="wurk"):
        assert deadlines.tick() == 1
    assert stuck == ["r1"] and target.stuck and "is stuck" in caplog.text
    assert running.targets() == [target]
    # a told run that ended before its check is not stuck; nor is the next run
    target.begin("r2")
    assert target.stop(CANCEL, target.run)
    deadlines.told(target, target.run)
    target.end()
    clock.advance(STUCK_AFTER)
    assert deadlines.tick() == 0 and stuck == ["r1"] and not target.stuck


def test_the_limits_of_ended_runs_do_not_pile_up(clock: ManualClock) -> None:
    deadlines = Deadlines(clock=clock)
    live = [_Recording(limit=300) for _ in range(50)]
    for target in live:
        deadlines.arm(target, target.run)
    ended = _Recording(limit=300)
    for i in range(20_000):  # a fast worker, a 300 s limit on every job
        ended.begin(f"e{i}")
        deadlines.arm(ended, ended.run)
        ended.end()
    assert deadlines.pending() <= max(SWEEP_AT, 2 * len(live)) + 1
    clock.advance(300)
    assert deadlines.tick() == len(live)  # the live runs' limits were kept
    assert all(target.told == [(TIMEOUT, target.run)] for target in live)
    assert ended.told == []


def test_a_stop_that_cannot_be_sent_yet_is_tried_again(clock: ManualClock) -> None:
    deadlines = Deadlines(clock=clock)
    target = _Recording(limit=1)
    target.refuse = True  # e.g. the shutdown's interrupt is pending in its thread
    deadlines.arm(target, target.run)
    clock.advance(1)
    assert deadlines.tick() == 1 and target.told == []
    target.refuse = False
    clock.advance(0.05)
    assert deadlines.tick() == 1 and target.told == [(TIMEOUT, target.run)]
    target.end()  # and once its run ends, nothing more is tried
    clock.advance(10)
    assert deadlines.tick() == 0


def test_an_async_job_is_stopped_through_its_own_target(
        clock: ManualClock, parts: tuple[Running, Deadlines, Stopper]) -> None:
    running, deadlines, stopper = parts
    seen: list[Any] = []

    async def body() -> None:
        seen.extend(running.targets())
        await asyncio.sleep(PATIENCE)

    async def job(jid: str, **options: Any) -> Any:
        payload = {"jid": jid, "class": "Nap", "args": [], **options}
        return await stopper.acall(None, payload, "default", body)

    async def main() -> None:
        task = asyncio.create_task(job("n1", timeout=2))
        await asyncio.sleep(0)
        clock.advance(2)
        await asyncio.to_thread(deadlines.tick)
        with pytest.raises(JobTimeout):
            await task
        assert running.targets() == [] and seen[0].run == 0  # ended: no stop reaches it
        task = asyncio.create_task(job("n2"))
        await asyncio.sleep(0)
        assert [(t, r) for t, r in running.cancel("n2")] == [(seen[1], 1)]
        with pytest.raises(JobCancelled):
            await task

    asyncio.run(main())


class _Recording(Target):
    """A target whose stops are recorded, not raised: the time-limit heap's view of a
    processor thread's target, run after run."""

    _runs = iter(range(1, 1 << 30))

    def __init__(self, limit: float | None = None) -> None:
        self.limit = limit
        self.cooperative = False
        self.refuse = False
        self.told: list[tuple[str, int]] = []
        self._now = 0
        self._reason: str | None = None
        self.begin("r1")

    @property
    def run(self) -> int:
        return self._now

    @property
    def reason(self) -> str | None:
        return self._reason

    @property
    def busy_id(self) -> str:
        return "t1"

    def begin(self, jid: str) -> None:
        self.jid = jid
        self._now = next(self._runs)
        self._reason = None

    def end(self) -> None:
        self._now = 0

    def _tell(self, reason: str, run: int) -> bool:
        if self.refuse or run != self._now:
            return False
        self._reason = reason
        self.told.append((reason, run))
        return True

    def force(self, run: int) -> bool:
        if self.refuse or run != self._now or self._reason is None:
            return False
        self.told.append((self._reason, run))
        return True


def test_the_raised_classes_match_the_reasons() -> None:
    guard = Guard()
    target = SyncTarget(guard)
    guard.stopped_with = TimeoutRaised
    assert target.reason == TIMEOUT
    guard.stopped_with = CancelRaised
    assert target.reason == CANCEL


def test_a_stop_landing_after_an_async_job_ended_does_not_cancel_its_task(
        parts: tuple[Running, Deadlines, Stopper], caplog: pytest.LogCaptureFixture) -> None:
    """The stop is told from another thread and lands on the loop later: if the job left
    its body meanwhile, the task goes on (it acknowledges the job next), and the job is not
    said to have caught its stop."""
    running, _, stopper = parts
    finished: list[str] = []

    async def body() -> str:
        return "ran"

    async def job_then_ack() -> None:
        payload = {"jid": "n3", "class": "Nap", "args": []}
        plan = stopper.wurk_plan(None, payload, "default")
        assert plan is not None
        [target] = running.targets()
        assert target.stop(CANCEL, target.run)  # told: the cancel is on its way to the loop
        finished.append(plan(await body(), None))  # the job ends before it lands
        await asyncio.sleep(0)  # the cancel lands here
        await asyncio.sleep(0)
        finished.append("acknowledged")

    with caplog.at_level(logging.WARNING, logger="wurk"):
        asyncio.run(job_then_ack())
    assert finished == ["ran", "acknowledged"]
    assert "caught the error" not in caplog.text


@pytest.mark.parametrize("path", ["acall", "plan"])
def test_a_stop_and_the_shutdown_cancelling_one_async_job_end_it_as_the_shutdowns(
        parts: tuple[Running, Deadlines, Stopper], path: str) -> None:
    """The shutdown's deadline cancels a task a cancel has also reached: the job was given
    back to its queue, so it must end as the shutdown's cancellation, not as the cancel's
    error, which the runner would book as a failure (a retry beside the job given back: it
    would run twice). Either order of the two cancels; the stop's alone is its error."""
    running, _, stopper = parts

    async def body() -> str:
        await asyncio.sleep(PATIENCE)
        return "ran"

    async def job(payload: dict[str, Any]) -> Any:
        if path == "acall":
            return await stopper.acall(None, payload, "default", body)
        plan = stopper.wurk_plan(None, payload, "default")
        assert plan is not None
        try:
            result = await body()
        except BaseException as exc:
            return plan(None, exc)
        return plan(result, None)

    async def main(shutdown: str | None, jid: str) -> BaseException | Any:
        payload = {"jid": jid, "class": "Nap", "args": []}
        task = asyncio.create_task(job(payload))
        await asyncio.sleep(0)  # in its body
        if shutdown == "first":
            task.cancel()
        assert [t.jid for t, _ in running.cancel(jid)] == [jid]  # lands on the next turn
        if shutdown == "after":
            await asyncio.sleep(0)  # the cancel's cancellation is pending on the task
            task.cancel()
        [outcome] = await asyncio.gather(task, return_exceptions=True)
        assert running.targets() == []
        return outcome

    assert isinstance(asyncio.run(main("first", "n5")), asyncio.CancelledError)
    assert isinstance(asyncio.run(main("after", "n6")), asyncio.CancelledError)
    assert isinstance(asyncio.run(main(None, "n7")), JobCancelled)


def test_an_async_job_that_swallows_its_cancellation_is_said_to(
        parts: tuple[Running, Deadlines, Stopper], caplog: pytest.LogCaptureFixture) -> None:
    running, _, stopper = parts

    async def stubborn() -> str:
        with contextlib.suppress(asyncio.CancelledError):  # swallowed: it returns anyway
            await asyncio.sleep(PATIENCE)
        return "ran"

    async def main() -> Any:
        payload = {"jid": "n4", "class": "Nap", "args": []}
        task = asyncio.create_task(stopper.acall(None, payload, "default", stubborn))
        await asyncio.sleep(0)
        assert [t.jid for t, _ in running.cancel("n4")] == ["n4"]
        return await task

    with caplog.at_level(logging.WARNING, logger="wurk"):
        assert asyncio.run(main()) == "ran"
    assert "job n4 was told to stop (cancel) but caught the error and returned" in caplog.text


def test_a_cancel_arriving_as_a_job_starts_is_never_missed(
        parts: tuple[Running, Deadlines, Stopper]) -> None:
    """The cancel lands after the job's start looked for one, before its body opened (the
    cancel's look then finds no body open): the job is refused all the same, sync and
    async."""
    running, _, stopper = parts

    class Racing(Guard):
        def open_body(self) -> int:
            running.cancel("s1")
            return super().open_body()

    worker = JobThread(stopper, Racing())
    try:
        worker.run("s1")
        wait_until(lambda: worker.outcomes, PATIENCE, "s1 to end")
        assert worker.outcomes == ["JobCancelled"] and not worker.in_body.is_set()
    finally:
        worker.stop()

    ran: list[str] = []
    add = running.add

    def racing_add(target: Any) -> None:
        running.cancel("a1")  # the same moment for an async job: before it is findable
        add(target)

    async def job() -> None:
        payload = {"jid": "a1", "class": "Nap", "args": []}
        with pytest.raises(JobCancelled):
            stopper.wurk_plan(None, payload, "default")
            ran.append("a1")
        assert running.targets() == []

    running.add = racing_add  # type: ignore[method-assign]
    asyncio.run(job())
    assert ran == []


def test_a_cancel_is_remembered_for_five_minutes(clock: ManualClock,
                                                 parts: tuple[Running, Deadlines, Stopper]
                                                 ) -> None:
    """docs: every process remembers a cancelled jid for five minutes, so a job it fetches
    meanwhile is refused before its body runs; after that it is forgotten."""
    running = parts[0]
    running.cancel("j" * 24)
    clock.advance(299.0)
    assert running.was_cancelled("j" * 24)
    clock.advance(1.5)
    assert not running.was_cancelled("j" * 24)


def test_a_stuck_mark_never_lands_on_the_next_job_of_its_thread(clock: ManualClock) -> None:
    """The check finds a told run still going, and it ends — its thread already on its next
    job, under the same thread id in the work map — before the mark is made: the mark is
    the ended job's, and is dropped, not left on the next job's entry (the Busy page's
    "stuck", the ``wurk_jobs_stuck`` gauge)."""
    from wurk.control.worker import WorkerStops
    from wurk.runtime.busy import Busy
    from wurk.runtime.timer import Timers

    busy = Busy()
    stops = WorkerStops(Config(), "host:1:abc", busy, Timers("test", clock=clock))
    guard = Guard()  # no thread: nothing is raised, the stop is as if told and not taken
    guard.thread_id = "t1"
    target = SyncTarget(guard)
    stops.running.keep(target)
    run = target.begin("s1", None, False)
    busy.add("t1", "default", b'{"jid":"s1"}')
    guard.stopped_with = CancelRaised  # told (a cancel); inside C code, it did not stop
    stops.deadlines.told(target, run)

    class NextJobMeanwhile(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "is stuck" in record.getMessage():  # found stuck; not marked yet
                guard.close_body()
                busy.remove("t1")
                target.begin("s2", None, False)
                busy.add("t1", "default", b'{"jid":"s2"}')

    handler = NextJobMeanwhile()
    logging.getLogger("wurk").addHandler(handler)
    try:
        clock.advance(STUCK_AFTER)
        assert stops.deadlines.tick() == 1
    finally:
        logging.getLogger("wurk").removeHandler(handler)
    assert stops.stuck_total == 1  # reported (the warning) all the same
    assert busy.marked() == 0 and "stuck_at" not in busy.snapshot()["t1"]
    assert stops.stuck() == 0

    # A run still going when the check comes is marked, and its end clears the mark.
    run = target.run
    guard.stopped_with = TimeoutRaised
    stops.deadlines.told(target, run)
    clock.advance(STUCK_AFTER)
    assert stops.deadlines.tick() == 1
    assert busy.marked() == 1 and '"stopping":"timeout"' in busy.snapshot()["t1"]
    assert stops.stuck() == 1
    guard.close_body()
    busy.remove("t1")
    assert busy.marked() == 0 and stops.stuck() == 0


def test_a_stuck_mark_of_an_async_job_waits_for_no_end_and_is_dropped_after_it() -> None:
    """An async target's mark is made under the lock its end takes: made while the run
    lasts, dropped once it ended (its task id's entry is then gone for good)."""
    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(asyncio.sleep(0))
        target = AsyncTarget("a1", "k1", task, loop, limit=None)
        marks: list[str] = []
        assert target.while_running(target.run, lambda: marks.append("during"))
        run = target.run
        target.end()
        assert not target.while_running(run, lambda: marks.append("after"))
        assert marks == ["during"]
        loop.run_until_complete(task)
    finally:
        loop.close()


class Stubborn(JobThread):
    """A processor-like thread whose job body catches what its work raises and runs on, as
    a job with ``except Exception:`` around its work does (``swallow``): each catch is
    recorded, and ``looping`` is set again once it is back inside its ``try``."""

    def __init__(self, stopper: Stopper, swallow: type[BaseException] = Exception) -> None:
        self.swallow = swallow
        self.caught: list[str] = []
        self.looping = threading.Event()
        super().__init__(stopper)

    def _body(self) -> None:
        self.in_body.set()
        while True:  # the handler and this loop's jump are the only code outside the try
            try:
                self.looping.set()
                while not self.release.is_set():
                    self.release.wait(0.001)
                return
            except self.swallow as exc:
                self.looping.clear()
                self.caught.append(type(exc).__name__)


def _tell(stop: str, jid: str, clock: ManualClock, running: Running,
          deadlines: Deadlines) -> None:
    """Stop the job ``jid`` (started with a 5 s limit) by its limit or by a cancel."""
    if stop == TIMEOUT:
        clock.advance(5)
        assert deadlines.tick() == 1
    else:
        told = running.cancel(jid)
        assert [target.jid for target, _ in told] == [jid]
        for target, run in told:
            deadlines.told(target, run)


@pytest.mark.parametrize("stop", [TIMEOUT, CANCEL])
def test_a_sync_job_that_catches_its_stop_and_runs_on_is_stopped_again(
        clock: ManualClock, parts: tuple[Running, Deadlines, Stopper], stop: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """time-limits-and-cancel.md: a job that catches the stop and runs on is told again
    ``STUCK_AFTER`` seconds later with an error ``except Exception`` does not catch, and
    ends as the first stop would have ended it; its thread takes the next job."""
    running, deadlines, stopper = parts
    worker = Stubborn(stopper)
    try:
        worker.run("h1", timeout=5)
        assert worker.in_body.wait(PATIENCE)
        _tell(stop, "h1", clock, running, deadlines)
        wait_until(lambda: worker.caught and worker.looping.is_set(), PATIENCE,
                   "the body to catch its stop and run on")
        assert worker.caught == ["TimeoutRaised" if stop == TIMEOUT else "CancelRaised"]
        clock.advance(STUCK_AFTER - 0.1)
        assert deadlines.tick() == 0 and worker.outcomes == []
        with caplog.at_level(logging.WARNING, logger="wurk"):
            clock.advance(0.1)
            assert deadlines.tick() == 1
            wait_until(lambda: worker.outcomes, PATIENCE, "the job to end")
        assert worker.outcomes == ["JobTimeout" if stop == TIMEOUT else "JobCancelled"]
        assert len(worker.caught) == 1  # the second went through its ``except Exception``
        assert deadlines.forced_total == 1 and "told again" in caplog.text
        assert running.targets() == []
        clock.advance(60)
        assert deadlines.tick() == 0  # nothing more for the ended run
        worker.run("h2")  # the thread goes on with the next job
        assert worker.in_body.wait(PATIENCE)
        assert worker.finish() == "done"
    finally:
        worker.stop()


def test_a_sync_job_that_catches_every_stop_is_told_again_at_each_check_and_said(
        clock: ManualClock, parts: tuple[Running, Deadlines, Stopper],
        caplog: pytest.LogCaptureFixture) -> None:
    """A body that catches even a ``BaseException`` cannot be stopped (a thread cannot be
    killed): it is told again at each check, the wait doubling from ``STUCK_AFTER``, each
    one logged and counted; once it returns it counts as finished, as one that returns
    after catching the first stop does, and its run is no longer watched."""
    from wurk.control.deadlines import LONGEST_FORCE

    running, deadlines, stopper = parts
    worker = Stubborn(stopper, swallow=BaseException)
    try:
        worker.run("k1", timeout=5)
        assert worker.in_body.wait(PATIENCE)
        _tell(TIMEOUT, "k1", clock, running, deadlines)
        caught = 1
        wait = STUCK_AFTER
        with caplog.at_level(logging.WARNING, logger="wurk"):
            for forced in range(1, 8):
                wait_until(lambda n=caught: len(worker.caught) == n
                           and worker.looping.is_set(), PATIENCE,
                           "the body to catch it and run on")
                clock.advance(wait - 0.1)
                assert deadlines.tick() == 0
                clock.advance(0.1)
                assert deadlines.tick() == 1
                caught += 1
                assert deadlines.forced_total == forced
                wait = min(LONGEST_FORCE, 2 * wait)
            wait_until(lambda: len(worker.caught) == caught, PATIENCE, "the last catch")
            assert worker.outcomes == []
            assert worker.caught == ["TimeoutRaised"] + ["TimeoutForced"] * 7
            assert "job k1 did not stop" in caplog.text
            assert "job k1 still runs after being told to stop (timeout) 7 times" in \
                caplog.text
            assert wait == LONGEST_FORCE
            assert worker.finish() == "done"
        assert "job k1 was told to stop (timeout) but caught the error and returned" in \
            caplog.text
        clock.advance(LONGEST_FORCE)
        assert deadlines.tick() == 0 and deadlines.forced_total == 7
    finally:
        worker.stop()


@pytest.mark.parametrize("path", ["acall", "plan"])
@pytest.mark.parametrize("stop", [TIMEOUT, CANCEL, "shutdown"])
def test_an_async_job_that_swallows_its_cancellation_once_is_cancelled_again(
        clock: ManualClock, parts: tuple[Running, Deadlines, Stopper], stop: str,
        path: str) -> None:
    """Its task is cancelled again ``STUCK_AFTER`` seconds after the first, and the job ends
    as the stop's error — both cancellations taken back, so it is not mistaken for the
    worker's shutdown; one the shutdown cancels as well ends as the shutdown's (its job was
    given back to its queue)."""
    running, deadlines, stopper = parts
    caught: list[str] = []

    async def swallows_once() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            caught.append("first")
        await asyncio.sleep(60)
        return "ran"

    async def job(payload: dict[str, Any]) -> Any:
        if path == "acall":
            return await stopper.acall(None, payload, "default", swallows_once)
        plan = stopper.wurk_plan(None, payload, "default")
        assert plan is not None
        try:
            result = await swallows_once()
        except BaseException as exc:
            return plan(None, exc)
        return plan(result, None)

    async def main() -> BaseException | Any:
        payload = {"jid": "w1", "class": "Nap", "args": [], "timeout": 5}
        task = asyncio.create_task(job(payload))
        await asyncio.sleep(0)
        await asyncio.to_thread(_tell, CANCEL if stop == CANCEL else TIMEOUT, "w1", clock,
                                running, deadlines)
        async with asyncio.timeout(PATIENCE):
            while not caught:
                await asyncio.sleep(0.001)
        clock.advance(STUCK_AFTER)
        if stop == "shutdown":  # the worker's own, and the second, before the task steps
            assert deadlines.tick() == 1
            task.cancel()
        else:
            assert await asyncio.to_thread(deadlines.tick) == 1
        [outcome] = await asyncio.wait_for(asyncio.gather(task, return_exceptions=True),
                                           PATIENCE)
        assert running.targets() == []
        return outcome

    outcome = asyncio.run(main())
    assert caught == ["first"] and deadlines.forced_total == 1
    expected = {TIMEOUT: JobTimeout, CANCEL: JobCancelled,
                "shutdown": asyncio.CancelledError}[stop]
    assert isinstance(outcome, expected), outcome
