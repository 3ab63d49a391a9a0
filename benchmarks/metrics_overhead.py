"""What execution metrics add to one job's own path, in process, without Redis.

    python -m benchmarks.metrics_overhead [--jobs 200000] [--rounds 7]

Runs a no-op job through ``JobRunner``'s execution path (lookup, instantiate, server
middleware, perform, the stats counters) with the links every worker installs (limits,
batches) and with the metrics middleware ahead of them as well, alternately, and prints
the best round of each in µs per job and the difference. A drain on a shared machine cannot
resolve a few µs; this can. Compare the difference with a worker's CPU per job from
``benchmarks.throughput`` or the peers table.
"""

from __future__ import annotations

import argparse
import time

import wurk
from wurk.batch.middleware import install as install_batches
from wurk.config import Config
from wurk.limiter.middleware import install as install_limits
from wurk.metrics import ExecutionMetrics, ExecutionTracker
from wurk.metrics.counters import Counters
from wurk.processor import JobGuard, JobRunner
from wurk.runtime.busy import Busy


def runner(with_metrics: bool) -> JobRunner:
    config = Config(redis_url="redis://127.0.0.1:1/0", skip_default_job_logging=True)
    install_limits(config)  # as the launcher does: the chain a worker's jobs go through
    install_batches(config)
    if with_metrics:
        config.server_middleware.prepend(ExecutionMetrics(ExecutionTracker()))
    return JobRunner(config, counters=Counters(), busy=Busy())


def noop() -> None:
    """The job: nothing, so what is measured is the path around it."""


def per_job_us(run: JobRunner, jobs: int) -> float:
    payload = {"class": "Bench::Noop", "args": [], "jid": "0" * 24, "queue": "default"}
    guard = JobGuard()
    started = time.process_time()
    for _ in range(jobs):
        run._perform_logged(dict(payload), "default", guard, b"")
    return (time.process_time() - started) / jobs * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    wurk.job(name="Bench::Noop")(noop)
    off, on = runner(False), runner(True)
    best = {"off": float("inf"), "on": float("inf")}
    for _ in range(options.rounds):
        best["off"] = min(best["off"], per_job_us(off, options.jobs))
        best["on"] = min(best["on"], per_job_us(on, options.jobs))
    print(f"job path, best of {options.rounds} rounds of {options.jobs:,} jobs (CPU time): "
          f"metrics off {best['off']:.2f} µs, on {best['on']:.2f} µs, "
          f"+{best['on'] - best['off']:.2f} µs per job")


if __name__ == "__main__":
    main()
