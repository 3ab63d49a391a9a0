"""A capsule's processors: started, watched, replaced, quieted and stopped together.

1. ``start`` makes ``concurrency`` named processor threads, each with its own fetcher.
2. A processor that dies of an internal error is reported and replaced (unless stopping).
3. ``quiet`` stops fetching; running jobs finish.
4. ``stop(deadline)`` quiets, waits for running jobs until the deadline, then — the order
   matters — puts every unfinished job back on its queue, and only then interrupts the job
   threads and gives them ``shutdown_grace`` seconds. It is worse to lose
   a job than to run it twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .affinity import Pinning
from .config import Capsule, Config
from .fetch import Fetcher, UnitOfWork
from .outage import Outage
from .pool import RedisPool
from .processor import JobRunner, Processor
from .reporting import report_error

__all__ = ["Manager", "capsule_pool"]

log = logging.getLogger("wurk")

# How often stop() looks whether the processors are idle yet.
IDLE_CHECK_INTERVAL = 0.1

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
                 visible: Callable[[float], bool] | None = None) -> None:
        self.config = config
        self.capsule = capsule
        self.runner = runner
        self.index = index
        self._make_fetcher = make_fetcher
        self._visible = visible  # the heartbeat's say on whether processors may fetch
        self._lock = threading.Lock()
        self._processors: set[Processor] = set()
        self._stopping = False
        self._serial = 0
        self._all_done = threading.Condition(self._lock)
        # One outage for all the capsule's processors: two log lines, not two per thread.
        self._outage = Outage(config, f"fetch (capsule {capsule.name})")
        self._pinning: Pinning | None = None

    @property
    def outage(self) -> Outage:
        """The capsule's fetch outage (the health check and the metrics read it)."""
        return self._outage

    @property
    def processors(self) -> list[Processor]:
        with self._lock:
            return list(self._processors)

    def start(self, pinning: Pinning | None = None) -> None:
        """Start the processors; ``pinning`` (``wurk.affinity``) places their threads."""
        self._pinning = pinning
        for _ in range(self.capsule.concurrency):
            self._spawn()

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
                lend=capsule_pool(self.config, self.capsule),
            )
            self._processors.add(processor)
        processor.start()

    def _processor_exited(self, processor: Processor, error: BaseException | None) -> None:
        with self._lock:
            self._processors.discard(processor)
            replace = not self._stopping
            self._all_done.notify_all()
        if error is not None and replace:
            report_error(self.config, error, {"context": f"processor {processor.name} died"})
        if replace:
            self._spawn()

    def quiet(self) -> None:
        with self._lock:
            self._stopping = True
            processors = list(self._processors)
        for processor in processors:
            processor.stop_fetching()

    def stop(self, deadline: float) -> None:
        """Quiet, wait until ``deadline`` (monotonic), then requeue and interrupt."""
        self.quiet()
        if self._wait_idle(deadline):
            return
        busy = self.processors
        self._requeue([p.current for p in busy if p.current is not None])
        for processor in busy:
            processor.interrupt()
        self._wait_idle(time.monotonic() + self.config.shutdown_grace)
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
