"""What a batch costs: pushing and finishing one job inside a batch against a plain job, and
the drain rate of a 10,000-job batch against 10,000 plain jobs, side by side in one run.

    python -m benchmarks.batches [--jobs 10000] [--pushes 2000] [--runs 3] [--concurrency 10]

1. Push: ``perform_async`` one at a time, inside a jobs block (without and with
   ``autoflush=AUTOFLUSH``) and outside one. Finish: what
   the worker adds when a job ends — nothing for a plain job (its ACK rides the next
   fetch's round trip), the accounting script for a batch job (``batch_job.lua``). Round
   trips are the requests written to Redis by redis-py and by wurk's own connections
   (``benchmarks._trips``); µs are the median per job.
2. Drain: the same jobs through an in-process worker (``wurk.embed``), from the first push
   until every job was acknowledged (queue and in-flight list empty) — for the batch, and
   its success recorded — with the round trips per job it took (the polling's left out).
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


def drained(config: wurk.Config, r: redis.Redis) -> bool:
    """Every job acknowledged: the queue empty and no in-flight (private) list left (Redis
    deletes an empty list). The ACK is the last write of a job's run, batch job or plain,
    and goes out with the processor's next fetch at the latest — unlike ``stat:processed``,
    which the heartbeat flushes once per ``heartbeat_interval`` (1 s here): waiting on it
    added up to that delay to the plain run alone."""
    pipe = r.pipeline(transaction=False)
    pipe.llen(config.keys.queue("default"))
    pipe.keys(config.keys.private_pattern)
    waiting, private = pipe.execute()
    return waiting == 0 and not private


def drain(settings: dict[str, Any], r: redis.Redis, jobs: int, batched: bool
          ) -> tuple[float, float]:
    """(jobs per second, round trips per job) from the first push until every job was
    acknowledged — for the batch, and its success recorded. The trips are the push's, the
    worker's (its heartbeat's too), not the polling's. Each run on a configuration of its
    own: a worker freezes the one it is built on, and one built on a frozen configuration
    warns and installs nothing."""
    r.flushall()
    config = wurk.configure(**settings)
    worker = wurk.embed(config)
    trips = RoundTrips()
    polls = 0
    key = ""

    def done() -> bool:
        nonlocal polls
        polls += 1
        if not drained(config, r):
            return False
        polls += batched
        return not batched or bool(r.hexists(key, "success_at"))

    try:
        with trips.counting():
            started = time.perf_counter()
            args = [[n] for n in range(jobs)]
            if batched:
                batch = wurk.Batch(description="drain")
                with batch.jobs():
                    noop.perform_bulk(args)
                key = f"b-{batch.bid}"
            else:
                noop.perform_bulk(args)
            while not done():
                time.sleep(0.002)
            elapsed = time.perf_counter() - started
    finally:
        worker.stop()
    return jobs / elapsed, (trips.count - polls) / jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--pushes", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=10)
    options = parser.parse_args()
    with redis_url() as url:
        settings: dict[str, Any] = dict(
            redis_url=url, concurrency=options.concurrency, skip_default_job_logging=True,
            heartbeat_interval=1, fetch_timeout=0.5, shutdown_grace=1, timeout=2)
        config = wurk.configure(**settings)
        r = redis.Redis.from_url(url)
        try:
            costs(config, r, options.pushes, options.runs)
            plain, batched = [], []
            for _ in range(options.runs):
                plain.append(drain(settings, r, options.jobs, batched=False))
                batched.append(drain(settings, r, options.jobs, batched=True))
            p = statistics.median(rate for rate, _ in plain)
            print(f"\ndrain, {options.jobs} jobs, c={options.concurrency}, in-process "
                  f"worker, median of {options.runs} runs")
            print(f"{'':<8}{'jobs/s':>10}{'trips/job':>11}{'vs plain':>10}")
            for name, samples in (("plain", plain), ("batch", batched)):
                rate = statistics.median(s[0] for s in samples)
                rt = statistics.median(s[1] for s in samples)
                print(f"{name:<8}{rate:>10,.0f}{rt:>11.3f}{rate / p:>9.2f}x")
        finally:
            r.flushall()


if __name__ == "__main__":
    main()
