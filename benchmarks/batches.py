"""What a batch costs: pushing and finishing one job inside a batch against a plain job, and
the drain rate of a 10,000-job batch against 10,000 plain jobs, side by side in one run.

    python -m benchmarks.batches [--jobs 10000] [--pushes 2000] [--runs 3] [--concurrency 10]

1. Push: ``perform_async`` one at a time, inside a jobs block (without and with
   ``autoflush=AUTOFLUSH``) and outside one. Finish: what
   the worker adds when a job ends — nothing for a plain job (its ACK rides the next
   fetch's round trip), the accounting script for a batch job (``batch_job.lua``). Round
   trips are counted at redis-py's socket writes; µs are the median per job.
2. Drain: the same jobs through an in-process worker (``wurk.embed``), from the first push
   until the last job finished — for the batch, until its success was recorded.
Uses REDIS_URL when set, else starts a private server. Prints medians and ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import redis
import redis.connection

import wurk
from benchmarks._server import redis_url
from benchmarks._trips import RoundTrips
from wurk.batch import accounting


@wurk.job(name="BatchBench::noop")
def noop(n: int) -> None: ...


def push_plain(pushes: int) -> list[str]:
    return [str(noop.perform_async(n)) for n in range(pushes)]


# Jobs an autoflushing block holds before it writes them: one round trip per 100 pushes.
AUTOFLUSH = 100


def push_batched(pushes: int, autoflush: int | None = None) -> tuple[wurk.Batch, list[str]]:
    batch = wurk.Batch(description="bench", autoflush=autoflush)
    with batch.jobs():
        jids = [str(noop.perform_async(n)) for n in range(pushes)]
    return batch, jids


def finish_batched(config: wurk.Config, bid: str, jids: list[str]) -> None:
    with wurk.redis(config) as conn:
        for jid in jids:
            accounting.record(conn, config, bid, jid, "success")


def per_job(fn: Callable[[], Any], jobs: int, trips: RoundTrips) -> tuple[float, float, Any]:
    """(µs per job, round trips per job, fn's result)."""
    before = trips.count
    started = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - started
    return elapsed / jobs * 1e6, (trips.count - before) / jobs, result


def costs(config: wurk.Config, r: redis.Redis, pushes: int, runs: int) -> None:
    trips = RoundTrips()
    rows: dict[str, list[tuple[float, float]]] = {"push plain": [], "push in batch": [],
                                                  "push autoflush": [], "finish in batch": []}
    with trips.counting():
        for _ in range(runs):  # interleaved so drift hits both alike
            r.flushall()
            us, rt, _ = per_job(lambda: push_plain(pushes), pushes, trips)
            rows["push plain"].append((us, rt))
            us, rt, (batch, jids) = per_job(lambda: push_batched(pushes), pushes, trips)
            rows["push in batch"].append((us, rt))
            us, rt, _ = per_job(lambda: push_batched(pushes, AUTOFLUSH), pushes, trips)
            rows["push autoflush"].append((us, rt))
            us, rt, _ = per_job(lambda b=batch, j=jids: finish_batched(config, b.bid, j),
                                pushes, trips)
            rows["finish in batch"].append((us, rt))
    plain = statistics.median(us for us, _ in rows["push plain"])
    print(f"push and finish, {pushes} jobs one at a time, median of {runs} runs")
    print(f"{'step':<18}{'µs/job':>10}{'trips/job':>11}{'vs plain push':>15}")
    for name, samples in rows.items():
        us = statistics.median(s[0] for s in samples)
        rt = statistics.median(s[1] for s in samples)
        print(f"{name:<18}{us:>10.1f}{rt:>11.3f}{us / plain:>14.2f}x")
    print(f"{'finish plain':<18}{0.0:>10.1f}{0.0:>11.3f}   (the ACK rides the next fetch)")


def drain(config: wurk.Config, r: redis.Redis, jobs: int, batched: bool) -> float:
    """Jobs per second from the first push until every job finished."""
    r.flushall()
    worker = wurk.embed(config)
    try:
        started = time.perf_counter()
        args = [[n] for n in range(jobs)]
        if batched:
            batch = wurk.Batch(description="drain")
            with batch.jobs():
                noop.perform_bulk(args)
            key = f"b-{batch.bid}"
            while not r.hexists(key, "success_at"):
                time.sleep(0.002)
        else:
            noop.perform_bulk(args)
            while int(r.get("stat:processed") or 0) < jobs:
                time.sleep(0.002)
        elapsed = time.perf_counter() - started
    finally:
        worker.stop()
    return jobs / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--pushes", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=10)
    options = parser.parse_args()
    with redis_url() as url:
        config = wurk.configure(redis_url=url, concurrency=options.concurrency,
                                skip_default_job_logging=True, heartbeat_interval=1,
                                fetch_timeout=0.5, shutdown_grace=1, timeout=2)
        r = redis.Redis.from_url(url)
        try:
            costs(config, r, options.pushes, options.runs)
            plain_rates, batch_rates = [], []
            for _ in range(options.runs):
                plain_rates.append(drain(config, r, options.jobs, batched=False))
                batch_rates.append(drain(config, r, options.jobs, batched=True))
            p, b = statistics.median(plain_rates), statistics.median(batch_rates)
            print(f"\ndrain, {options.jobs} jobs, c={options.concurrency}, in-process "
                  f"worker, median of {options.runs} runs (jobs/s)")
            print(f"{'plain':<8}{p:>10,.0f}\n{'batch':<8}{b:>10,.0f}{b / p:>9.2f}x")
        finally:
            r.flushall()


if __name__ == "__main__":
    main()
