"""What wurk's async path adds on the event loop's thread to one async job, without Redis.

    python -m benchmarks.async_overhead [--jobs 20000] [--concurrency 100] [--rounds 7]
                                        [--loop uvloop|asyncio]

Feeds the runner's async path (``JobRunner._execute_async``: the busy map, the log context,
the built-in server chain a worker installs with its time-limit and cancel link innermost,
the success count) from memory, ``--concurrency`` jobs at once, each job awaiting
``asyncio.sleep(0)``; beside it the same job run bare in a task of its own, and the runner
with an empty chain. Prints the best round of each in CPU µs per job, then each planned
link's own cost (its plan and its leave, called in a loop). A drain on a shared machine
swings by tens of µs a job from run to run (``--async-row``); this resolves one. What it
leaves out: the fetch, the hand-over between threads, the ACK, and the cold caches of a
job whose objects were last touched 50 ms earlier, all of which the drain has.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import wurk
from wurk import payload as P
from wurk.asyncjobs import loop_factory
from wurk.config import Config
from wurk.control.worker import WorkerStops
from wurk.fetch.basic import UnitOfWork
from wurk.job import registry
from wurk.launcher import install_built_ins
from wurk.metrics.counters import Counters
from wurk.processor import JobRunner
from wurk.runtime.busy import Busy
from wurk.runtime.timer import Timers

NAME = "BenchAsyncOverhead"
RAW = P.dumps({"class": NAME, "args": [], "jid": "0123456789abcdef01234567",
               "queue": "default", "retry": True, "created_at": 1700000000.123,
               "enqueued_at": 1700000000.125})


@wurk.job(name=NAME)
async def noop() -> None:
    """The job: one turn of the loop, so what is measured is the path around it."""
    await asyncio.sleep(0)


def runner(chain: bool) -> JobRunner:
    """A runner as a worker makes it, with its built-in chain and stop, or no chain."""
    config = Config(redis_url="redis://127.0.0.1:1/0", skip_default_job_logging=True)
    busy = Busy()
    if chain:
        install_built_ins(config)
        WorkerStops(config, "bench:1:overhead", busy, Timers("bench")).install()
    config.freeze()
    return JobRunner(config, counters=Counters(), busy=busy)


async def per_job(jobs: int, concurrency: int, start: Callable[[], Awaitable[Any]]) -> float:
    """CPU µs a job for ``jobs`` runs of ``start()``, ``concurrency`` at once, a task each."""
    places = asyncio.Semaphore(concurrency)
    loop = asyncio.get_running_loop()

    async def one() -> None:
        try:
            await start()
        finally:
            places.release()

    running: set[asyncio.Task[None]] = set()  # the loop keeps only weak references
    gc.collect()
    began = time.process_time()
    for _ in range(jobs):
        await places.acquire()
        task = loop.create_task(one())
        running.add(task)
        task.add_done_callback(running.discard)
    for _ in range(concurrency):  # the last ones end
        await places.acquire()
    return (time.process_time() - began) / jobs * 1e6


def through(job_runner: JobRunner) -> Callable[[], Awaitable[Any]]:
    definition = registry.lookup(NAME)
    payload = P.validate(P.loads(RAW))
    stopping = threading.Event()

    def start() -> Awaitable[Any]:
        unit = UnitOfWork("default", RAW, None)  # type: ignore[arg-type]  # no fetcher: no ACK
        return job_runner._execute_async(unit, dict(payload), definition, stopping)

    return start


async def plan_costs(job_runner: JobRunner, jobs: int) -> list[tuple[str, float | None]]:
    """Each link of a plain job's walk: its plan and leave, µs a call (best of 5), run in a
    task as a job's would be; None for a link awaited rather than planned."""
    walks = job_runner.server_middleware._async_links
    if walks is None:
        return []
    walk = walks.plain[0] if walks.skips is not None else walks.full[0]
    payload = P.validate(P.loads(RAW))
    job = registry.lookup(NAME).instantiate(payload)
    costs: list[tuple[str, float | None]] = []
    for link, plan in zip(walk.links, walk.plans, strict=True):
        name = type(getattr(link, "__self__", link)).__name__
        if plan is None:
            costs.append((name, None))
            continue

        async def calls(plan: Callable[..., Any] = plan) -> float:
            began = time.process_time()
            for _ in range(jobs):
                leave = plan(job, payload, "default")
                if leave is not None:
                    leave(None, None)
            return (time.process_time() - began) / jobs * 1e6

        costs.append((name, min([await asyncio.create_task(calls()) for _ in range(5)])))
    return costs


async def measure(options: argparse.Namespace) -> None:
    full, empty = runner(chain=True), runner(chain=False)
    rows: dict[str, Callable[[], Awaitable[Any]]] = {
        "bare task (the job alone)": noop, "runner, no chain": through(empty),
        "runner, built-in chain": through(full)}
    gc.freeze()  # as a worker does at start (``wurk.runtime.collector``)
    gc.set_threshold(10_000)
    best = {name: float("inf") for name in rows}
    for _ in range(options.rounds):  # alternating, so a slow moment hits every row alike
        for name, start in rows.items():
            best[name] = min(best[name], await per_job(options.jobs, options.concurrency, start))
    print(f"{options.jobs:,} async jobs, {options.concurrency} at once, each awaiting "
          f"sleep(0); best of {options.rounds}; CPU µs a job on the loop's thread")
    for name, value in best.items():
        print(f"  {name:28s} {value:6.1f}")
    print(f"  {'the runner adds':28s} {best['runner, no chain'] - best[next(iter(rows))]:6.1f}")
    print(f"  {'the chain adds':28s} "
          f"{best['runner, built-in chain'] - best['runner, no chain']:6.1f}")
    print("a plain job's links (plan and leave, called in a loop):")
    for name, cost in await plan_costs(full, options.jobs):
        print(f"  {name:28s} " + ("awaited" if cost is None else f"{cost:6.2f}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--loop", choices=("auto", "uvloop", "asyncio"), default="auto")
    options = parser.parse_args()
    name, make = loop_factory(options.loop)
    print(f"event loop: {name}")
    loop = make()
    try:
        loop.run_until_complete(measure(options))
    finally:
        loop.close()


if __name__ == "__main__":
    main()
