"""What encryption costs: pushing and running an encrypted job against a plain one, in one run.

    python -m benchmarks.crypto [--jobs 5000] [--runs 3]

Each round pushes ``--jobs`` jobs one at a time (``perform_async``, a round trip each) and
then runs them in this process through the worker's own fetch, runner and built-in
middleware (no threads), once with ``encrypt=True`` and once without, alternating. The
last argument is a small dict, as a card or a token would be. Prints the CPU µs a push and
a run take (process time, so Redis's own work is not counted), the difference, and the
encrypted job's extra cost in %. Medians of the rounds. Uses REDIS_URL when set, else a
private server.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import redis

import wurk
from benchmarks._server import redis_url
from wurk.config import Capsule
from wurk.fetch.basic import BasicFetch
from wurk.launcher import install_built_ins
from wurk.metrics.counters import Counters
from wurk.processor import JobRunner
from wurk.runtime.busy import Busy

SECRET = {"number": "4111111111111111", "cvc": "123", "holder": "A. N. Other"}


@wurk.job(name="bench.crypto.sealed", encrypt=True)
def sealed(order: int, card: dict[str, str]) -> None: ...


@wurk.job(name="bench.crypto.plain")
def plain(order: int, card: dict[str, str]) -> None: ...


def push_all(job: wurk.JobFunction[..., None], jobs: int) -> float:
    """CPU seconds to push ``jobs`` jobs."""
    started = time.process_time()
    for order in range(jobs):
        job.perform_async(order, SECRET)
    return time.process_time() - started


def run_all(runner: JobRunner, fetcher: BasicFetch, jobs: int) -> float:
    """CPU seconds to fetch and run every queued job in this thread."""
    started = time.process_time()
    ran = 0
    while ran < jobs:
        unit = fetcher.fetch(0.5)
        if unit is not None:
            runner.run(unit)
            ran += 1
    return time.process_time() - started


def round_of(worker: tuple[JobRunner, BasicFetch], raw: redis.Redis, jobs: int,
             job: wurk.JobFunction[..., None]) -> tuple[float, float]:
    raw.flushdb()
    push = push_all(job, jobs)
    run = run_all(*worker, jobs)
    return push / jobs * 1e6, run / jobs * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    with redis_url() as url:
        config = wurk.configure(redis_url=url, metrics=False, retain_history=0,
                                skip_default_job_logging=True)
        keys = {1: os.urandom(32)}
        wurk.crypto.enable(active_version=1, key_for=keys.get, config=config)
        install_built_ins(config)
        raw = redis.Redis.from_url(url)
        worker = (JobRunner(config, counters=Counters(), busy=Busy()),
                  BasicFetch(config, Capsule(queues=[("default", 0)]),
                             config.pool("bench", size=2)))
        kinds: dict[str, wurk.JobFunction[..., None]] = {"plain": plain, "encrypted": sealed}
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in kinds}
        for _ in range(options.runs):
            for name, job in kinds.items():  # alternating, so drift hits both alike
                figures[name].append(round_of(worker, raw, options.jobs, job))
        report(figures, options)


def median(values: list[tuple[float, float]], pick: Callable[[tuple[float, float]], float]
           ) -> float:
    return statistics.median(pick(value) for value in values)


def report(figures: dict[str, list[tuple[float, float]]], options: argparse.Namespace) -> None:
    print(f"{options.jobs} jobs a round, {options.runs} rounds (medians), CPU µs per job")
    print(f"{'':10} {'push':>8} {'run':>8}")
    rows = {name: (median(v, lambda f: f[0]), median(v, lambda f: f[1]))
            for name, v in figures.items()}
    for name, (push, run) in rows.items():
        print(f"{name:10} {push:8.1f} {run:8.1f}")
    (plain_push, plain_run), (enc_push, enc_run) = rows["plain"], rows["encrypted"]
    print(f"{'extra':10} {enc_push - plain_push:8.1f} {enc_run - plain_run:8.1f}")
    print(f"{'extra %':10} {100 * (enc_push / plain_push - 1):7.1f}% "
          f"{100 * (enc_run / plain_run - 1):7.1f}%")


if __name__ == "__main__":
    main()
