"""What the limits cost per call: a concurrent and a window limiter, and a unique push
against a plain one, side by side in one run.

    python -m benchmarks.limits [--calls 5000] [--runs 3]

Each line is one operation: µs per call (median of the runs, wall clock, this process) and
Redis round trips per call (the requests the client wrote, counted at the socket). Limiters
are measured inside a job — on the connection a processor lends its jobs, as they run in a
worker — and outside one (a client-pool connection per attempt), never over their limit.
Baselines in the same run: one ``PING`` on the same connection, and a plain push. Uses
REDIS_URL when set, else starts a private server.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import redis
import redis.connection

import wurk
from benchmarks._server import redis_url
from benchmarks._trips import RoundTrips
from wurk.connections.lending import lend_from


@wurk.job(name="Bench::Plain")
def plain_job(n: int) -> None: ...


@wurk.job(name="Bench::Unique", unique_for=600)
def unique_job(n: int) -> None: ...


def timed(operation: Callable[[int], object], calls: int, trips: RoundTrips) -> tuple[float, float]:
    """(µs per call, round trips per call) of ``calls`` calls, after a warm-up."""
    for n in range(50):
        operation(-1 - n)
    trips.count = 0
    with trips.counting():
        start = time.perf_counter()
        for n in range(calls):
            operation(n)
        elapsed = time.perf_counter() - start
    return elapsed / calls * 1e6, trips.count / calls


def operations(config: wurk.Config) -> dict[str, Callable[[int], object]]:
    concurrent = wurk.limiter.concurrent("bench-erp", 1_000_000)
    window = wurk.limiter.window("bench-search", 1_000_000_000, 60)

    def ping(_: int) -> object:
        with wurk.redis() as conn:
            return conn.call("PING")

    def in_limit(limiter: wurk.limiter.Limiter) -> Callable[[int], object]:
        def call(_: int) -> object:
            with limiter.within_limit():
                return None
        return call

    duplicate = unique_job.perform_async(10**9)
    assert duplicate is not None
    return {
        "PING (one round trip)": ping,
        "concurrent, in a job": in_limit(concurrent),
        "window, in a job": in_limit(window),
        "concurrent, outside a job": in_limit(concurrent),
        "window, outside a job": in_limit(window),
        "plain push": plain_job.perform_async,
        "unique push": unique_job.perform_async,
        "unique push, refused": lambda _: unique_job.perform_async(10**9),
    }


def run_once(config: wurk.Config, calls: int, trips: RoundTrips) -> dict[str, tuple[float, float]]:
    results: dict[str, tuple[float, float]] = {}
    for name, operation in operations(config).items():
        if "in a job" in name or name.startswith("PING"):
            with lend_from(config.pool("processor", size=1)):  # as a processor thread
                results[name] = timed(operation, calls, trips)
        else:
            results[name] = timed(operation, calls, trips)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    with redis_url() as url:
        config = wurk.configure(redis_url=url)
        raw = redis.Redis.from_url(url)
        trips = RoundTrips()
        runs = []
        for _ in range(options.runs):
            raw.flushall()
            runs.append(run_once(config, options.calls, trips))
        raw.flushall()
        print(f"limits, {options.calls} calls per operation, median of {options.runs} runs")
        print(f"{'operation':<28}{'µs/call':>10}{'round trips':>13}{'vs baseline':>13}")
        baselines = {"PING (one round trip)": None}
        base_ping = statistics.median(run["PING (one round trip)"][0] for run in runs)
        base_push = statistics.median(run["plain push"][0] for run in runs)
        for name in runs[0]:
            micros = statistics.median(run[name][0] for run in runs)
            per_call = statistics.median(run[name][1] for run in runs)
            base = base_push if "push" in name else base_ping
            ratio = "" if name in baselines or name == "plain push" else f"{micros / base:.2f}x"
            print(f"{name:<28}{micros:>10.1f}{per_call:>13.2f}{ratio:>13}")
        config.close()


if __name__ == "__main__":
    main()
