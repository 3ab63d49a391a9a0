"""A capsule's processors: started, watched, replaced, quieted and stopped together.

1. ``start`` makes ``concurrency`` named processor threads, each with its own fetcher, and
   the capsule's async lane (``wurk.asyncjobs``) where they hand ``async def`` jobs.
2. A processor that dies of an internal error is replaced (unless stopping). Deaths in a
   burst (each within ``BURST_GAP`` of the last) are replaced after a doubling wait, and
   reported once per burst: the first death in full, the end of the burst with its count.
   ``health()`` gives the heartbeat the deaths so far and whether a burst is on;
   ``stalled`` says when none of the capsule's processors is alive (the health check's 503).
3. ``quiet`` stops fetching; running jobs finish.
4. ``stop(deadline)`` quiets, waits for running jobs (sync and async) until the deadline,
   then — the order matters — puts every unfinished job back on its queue, and only then
   interrupts the job threads, cancels the async jobs and gives them ``shutdown_grace``
   seconds. It is worse to lose a job than to run it twice. ``stop_all`` stops a process's
   managers so: their interrupted threads share one grace, not one each in turn.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .asyncjobs import AsyncLane
from .config import Capsule, Config
from .connections.pool import RedisPool
from .fetch.basic import Fetcher, UnitOfWork
from .processor import JobRunner, Processor
from .reporting import report_error
from .runtime.affinity import Pinning
from .runtime.outage import Outage

__all__ = ["Manager", "capsule_pool", "stop_all"]

log = logging.getLogger("wurk")

# How often stop() looks whether the processors are idle yet.
IDLE_CHECK_INTERVAL = 0.1
# Processor deaths closer together than this are one burst: the replacement waits, doubling
# from FIRST_RESPAWN_WAIT up to MAX_RESPAWN_WAIT, so a processor failing at start (a pinning
# or a connection that cannot be had) does not spin a core and flood the log.
BURST_GAP = 10.0
FIRST_RESPAWN_WAIT = 0.1
MAX_RESPAWN_WAIT = 30.0

FetcherFactory = Callable[[Capsule, int], Fetcher]


def capsule_pool(config: Config, capsule: Capsule) -> RedisPool:
    """The capsule's pool. Each processor may hold two of its connections: one to fetch
    (it may block there), one lent to the jobs it runs (``wurk.redis()``); a few more serve
    requeues at shutdown. Connections are opened on first use only."""
    return config.pool(f"capsule-{capsule.name}", size=2 * capsule.concurrency + 2)


class Manager:
    """Owns the processor threads of one capsule."""

    def __init__(self, config: Config, capsule: Capsule, runner: JobRunner,
                 make_fetcher: FetcherFactory, *, index: int = 0,
                 visible: Callable[[float], bool] | None = None, lend: bool = True) -> None:
        self.config = config
        self._lends = lend  # False: the runner lends each job its own connection
        self.capsule = capsule
        self.runner = runner
        self.index = index
        self._make_fetcher = make_fetcher
        self._visible = visible  # the heartbeat's say on whether processors may fetch
        self._lock = threading.Lock()
        self._processors: set[Processor] = set()
        self._stopping = False
        self._started = False
        self._serial = 0
        self._all_done = threading.Condition(self._lock)
        # One outage for all the capsule's processors: two log lines, not two per thread.
        self._outage = Outage(config, f"fetch (capsule {capsule.name})")
        self._pinning: Pinning | None = None
        self.lane = AsyncLane(config, capsule, runner.loop, capsule_pool(config, capsule))
        self._respawn = threading.Event()  # set when stopping: a waiting respawn gives up
        self.deaths = 0
        self._burst = 0
        self._last_death = -BURST_GAP

    @property
    def outage(self) -> Outage:
        """The capsule's fetch outage (the health check and the metrics read it)."""
        return self._outage

    @property
    def processors(self) -> list[Processor]:
        with self._lock:
            return list(self._processors)

    @property
    def working(self) -> bool:
        """A processor alive or an async job in the lane: what a stop waits for."""
        return bool(self.processors) or len(self.lane) > 0

    def start(self, pinning: Pinning | None = None) -> None:
        """Start the processors; ``pinning`` (``wurk.runtime.affinity``) places their threads."""
        self._pinning = pinning
        self.lane.pinning = pinning
        for _ in range(self.capsule.concurrency):
            self._spawn()
        with self._lock:
            self._started = True

    @property
    def stalled(self) -> bool:
        """Started, not stopping, and no processor alive: nothing of this capsule fetches
        (its processors died and their replacements wait, or cannot be made)."""
        with self._lock:
            return self._started and not self._stopping and not self._processors

    def _spawn(self) -> None:
        with self._lock:
            if self._stopping:
                return
            self._serial += 1
            slot = self._serial
            processor = Processor(
                name=f"wurk-{self.capsule.name}-{slot}",
                fetcher=self._make_fetcher(self.capsule, slot),
                runner=self.runner,
                fetch_timeout=self.config.fetch_timeout,
                on_exit=self._processor_exited,
                outage=self._outage,
                visible=self._visible,
                pinning=self._pinning,
                lend=capsule_pool(self.config, self.capsule) if self._lends else None,
                lane=self.lane,
            )
            self._processors.add(processor)
        try:
            processor.start()
        except BaseException:
            with self._lock:  # never started: no thread of it to wait for at the stop
                self._processors.discard(processor)
                self._all_done.notify_all()
            raise

    def _processor_exited(self, processor: Processor, error: BaseException | None) -> None:
        with self._lock:
            stopping = self._stopping
        if stopping and error is not None:
            # No replacement to report it with: said here, before the processor counts as
            # gone, so a stop waiting for it returns with the death reported.
            self._report_stopped_death(processor, error)
        with self._lock:
            self._processors.discard(processor)
            replace = not self._stopping
            self._all_done.notify_all()
        if not replace:
            if error is not None and not stopping:  # the stop began meanwhile
                self._report_stopped_death(processor, error)
            return
        wait = self._died(processor, error) if error is not None else 0.0
        # In the dying thread, which ends right after: the wait gives up when stop begins.
        # A replacement that cannot be made (its fetcher, or its thread) is a death too.
        while not (wait and self._respawn.wait(wait)):
            try:
                self._spawn()
                return
            except Exception as exc:
                wait = self._died(processor, exc, "its replacement could not be made")

    def _report_stopped_death(self, processor: Processor, error: BaseException) -> None:
        report_error(self.config, error, {
            "context": f"processor {processor.name} died while its capsule stopped"})

    def _died(self, processor: Processor, error: BaseException,
              what: str = "died") -> float:
        """Count the death, report it once per burst; the wait before the replacement."""
        now = time.monotonic()
        with self._lock:
            self._end_burst(now)
            self.deaths += 1
            self._burst += 1
            self._last_death = now
            burst = self._burst
        if burst == 1:
            report_error(self.config, error, {
                "context": f"processor {processor.name} {what}; it is replaced (further deaths "
                           "in a row are replaced after a growing wait and counted in the "
                           "heartbeat)"})
            return 0.0
        return float(min(MAX_RESPAWN_WAIT, FIRST_RESPAWN_WAIT * 2.0 ** (burst - 2)))

    def health(self) -> dict[str, int]:
        """For the heartbeat: processor deaths so far, and 1 while a burst of them is on."""
        with self._lock:
            self._end_burst(time.monotonic())
            return {"deaths": self.deaths, "bursting": int(self._burst > 1)}

    def _end_burst(self, now: float) -> None:
        """A burst is over once ``BURST_GAP`` passed without a death: its count is logged
        (the one line besides its first death's report). Called with the lock held."""
        if not self._burst or now - self._last_death <= BURST_GAP:
            return
        if self._burst > 1:
            log.warning("capsule %s: %d processor deaths in a row, each replaced; the last "
                        "replacement has lived %.0f s", self.capsule.name, self._burst,
                        now - self._last_death)
        self._burst = 0

    def quiet(self) -> None:
        with self._lock:
            self._stopping = True
            processors = list(self._processors)
        self._respawn.set()
        for processor in processors:
            processor.stop_fetching()
        # Async jobs handed over and still waiting for a slot go back, first in line, as a
        # processor's job does when quiet comes while it waits for a place in the lane;
        # then the running ones are told (one ending must not start a job waiting).
        self._requeue(self.lane.take_waiting())
        self.lane.stopping.set()

    def stop(self, deadline: float) -> None:
        """Quiet, wait until ``deadline`` (monotonic), then requeue and interrupt."""
        stop_all([self], deadline)

    def give_back(self, deadline: float) -> bool:
        """``stop``'s first half: quiet, wait until ``deadline``, then put the unfinished
        jobs back and interrupt their threads; True when some were (``finish`` waits for
        them), False when all ended in time (the stop is over)."""
        self.quiet()
        if self._wait_idle(deadline) and self.lane.wait_idle(deadline):
            self.lane.close()
            return False
        busy = self.processors
        # Before the requeue: a job ending now is not ACKed. Only those still running are
        # requeued; one that ended since the look was settled by its end.
        in_lane = self.lane.give_back(self.lane.unfinished())
        # A processor still handing its job to the lane holds it as its current one too:
        # it goes back once (a basic fetch would push it twice, and it would run twice).
        handed = {id(unit) for unit in in_lane}
        current = [unit for unit in (p.current for p in busy)
                   if unit is not None and id(unit) not in handed]
        self._requeue(current + in_lane)
        for processor in busy:
            processor.interrupt()
        self.lane.cancel_all()
        return True

    def finish(self, grace: float) -> None:
        """``stop``'s second half: wait until ``grace`` (monotonic) for the interrupted
        threads and cancelled async jobs, then name any still running."""
        self._wait_idle(grace)
        self.lane.wait_idle(grace)
        self.lane.close()
        stuck = [p.name for p in self.processors]
        if stuck:
            log.warning("abandoning threads still running after the grace: %s "
                        "(their jobs are back on their queues)", ", ".join(stuck))

    def _wait_idle(self, deadline: float) -> bool:
        with self._lock:
            while self._processors:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._all_done.wait(min(remaining, IDLE_CHECK_INTERVAL))
            return True

    def _requeue(self, units: list[UnitOfWork]) -> None:
        if not units:
            return
        log.info("pushing %d unfinished job(s) back to their queues", len(units))
        by_fetcher: dict[int, tuple[Fetcher, list[UnitOfWork]]] = {}
        for unit in units:
            by_fetcher.setdefault(id(unit.fetcher), (unit.fetcher, []))[1].append(unit)
        for fetcher, group in by_fetcher.values():
            try:
                fetcher.requeue(group)
            except Exception as exc:
                report_error(self.config, exc, {"context": "requeue at shutdown",
                                                "jobs": [u.raw.decode("utf-8", "replace")
                                                         for u in group]})


def stop_all(managers: list[Manager], deadline: float) -> None:
    """Stop ``managers`` under one deadline and one grace: each waits for its jobs until
    ``deadline``, and each one's unfinished jobs go back and are interrupted; then the
    interrupted threads of all of them share one ``shutdown_grace``. (One manager's grace
    after another's made a stop last ``timeout`` plus a grace per capsule, past what a
    supervisor is told to allow.)"""
    interrupted = [manager for manager in managers if manager.give_back(deadline)]
    if not interrupted:
        return
    grace = time.monotonic() + interrupted[0].config.shutdown_grace
    for manager in interrupted:
        manager.finish(grace)
