"""Run queued jobs in the test process: the worker's own fetch, runner and middleware (the
limits' link, as a worker installs it), no threads."""

from __future__ import annotations

import threading

import redis

import wurk
from wurk import payload as P
from wurk.config import Capsule
from wurk.fetch.basic import BasicFetch
from wurk.launcher import install_built_ins
from wurk.metrics.counters import Counters
from wurk.processor import JobRunner
from wurk.runtime.busy import Busy


class Drain:
    """Fetches and runs every job queued on ``queues``, one at a time, in this thread."""

    def __init__(self, config: wurk.Config, *queues: str) -> None:
        self.config = config
        self.queues = queues or ("default",)
        self.counters = Counters()
        install_built_ins(config)  # as a worker does when it is built
        self.runner = JobRunner(config, counters=self.counters, busy=Busy())
        capsule = Capsule(queues=[(q, 0) for q in self.queues])
        self.fetcher = BasicFetch(config, capsule, config.pool("drain", size=2))
        self.raw = redis.Redis.from_url(config.pool("drain").url)

    def __call__(self) -> int:
        """Run until the queues are empty; returns how many jobs ran."""
        ran = 0
        while any(self.raw.llen(self.config.keys.queue(q)) for q in self.queues):
            unit = self.fetcher.fetch(0.05)
            if unit is not None:
                self.runner.run(unit)
                ran += 1
        return ran

    def close(self) -> None:
        self.fetcher.flush()
        self.raw.close()


class AsyncDrain(Drain):
    """``Drain`` for ``async def`` jobs on the path a worker's lane runs them: each one a
    task on the runner's event loop, through the async walk of the server chain
    (``JobRunner._execute_async``), acknowledged when it returns True. (``Drain`` runs an
    async job through the sync walk, its coroutine awaited on the loop: not the lane's path.)
    A sync job is run as ``Drain`` runs it."""

    def __init__(self, config: wurk.Config, *queues: str) -> None:
        super().__init__(config, *queues)
        self.stopping = threading.Event()  # what ``interrupted()`` reads in its jobs

    def __call__(self) -> int:
        ran = 0
        while any(self.raw.llen(self.config.keys.queue(q)) for q in self.queues):
            ran += self.run_one()
        return ran

    def run_one(self) -> int:
        """Fetch and run one job, if one comes within 50 ms; how many ran (0 or 1)."""
        unit = self.fetcher.fetch(0.05)
        if unit is None:
            return 0
        job = P.validate(P.loads(unit.raw))
        definition = self.runner.jobs.get(job[P.CLASS])
        if definition is None or not definition.is_async:  # as a worker's processor runs it
            self.runner.run(unit)
            return 1
        run = self.runner._execute_async(unit, job, definition, self.stopping)
        if self.runner.loop.submit(run).result(timeout=30):
            unit.fetcher.acknowledge(unit)
        return 1

    def close(self) -> None:
        super().close()
        self.runner.close()
