"""Drain throughput: N no-op jobs (one INCR each) drained by one ``wurk worker`` process
with concurrency 10, next to the floor — a bare redis-py loop doing the same Redis work
(BRPOP a payload, parse it, INCR) — in the same run.

    python -m benchmarks.throughput [--jobs 20000] [--runs 3] [--fetch basic] [--concurrency 10]

Prints jobs/s, worker CPU µs per job and peak RSS, medians of the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import redis

import wurk
from benchmarks.throughput_jobs import bench_incr

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Result:
    rate: float
    cpu_us: float
    rss_mb: float


def drain_with_wurk(r: redis.Redis, url: str, jobs: int, fetch: str, concurrency: int) -> Result:
    r.flushall()
    wurk.configure(redis_url=url)
    bench_incr.perform_bulk([[] for _ in range(jobs)])
    env = {**os.environ, "REDIS_URL": url}
    command = [sys.executable, "-m", "wurk", "worker", "-r", "benchmarks.throughput_jobs",
               "-c", str(concurrency), "--fetch", fetch, "--log-format", "plain"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    watched = psutil.Process(process.pid)
    peak = 0
    started = None
    try:
        while True:
            peak = max(peak, watched.memory_info().rss)
            done = int(r.get("bench:count") or 0)
            if done and started is None:
                started, cpu_start = time.perf_counter(), watched.cpu_times()
            if done >= jobs:
                finished, cpu_end = time.perf_counter(), watched.cpu_times()
                break
            if process.poll() is not None:
                raise RuntimeError("the worker exited early")
            time.sleep(0.001)
    finally:
        process.terminate()
        process.wait(30)
    assert started is not None
    cpu = (cpu_end.user + cpu_end.system) - (cpu_start.user + cpu_start.system)
    return Result(jobs / (finished - started), cpu / jobs * 1e6, peak / 2**20)


def drain_floor(r: redis.Redis, jobs: int) -> Result:
    r.flushall()
    pipe = r.pipeline(transaction=False)
    for n in range(jobs):
        pipe.lpush("queue:default", json.dumps({"class": "BenchIncr", "args": [], "jid": str(n)}))
    pipe.execute()
    process = psutil.Process()
    cpu_start, start = process.cpu_times(), time.perf_counter()
    for _ in range(jobs):
        _, raw = r.brpop(["queue:default"], timeout=1)  # type: ignore[misc]
        json.loads(raw)
        r.incr("bench:count")
    elapsed, cpu_end = time.perf_counter() - start, process.cpu_times()
    cpu = (cpu_end.user + cpu_end.system) - (cpu_start.user + cpu_start.system)
    return Result(jobs / elapsed, cpu / jobs * 1e6, process.memory_info().rss / 2**20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--fetch", default="basic,reliable")
    options = parser.parse_args()
    url = os.environ.get("REDIS_URL")
    server = None
    if not url:
        sys.path.insert(0, str(ROOT))
        from tests.helpers.server import start_server

        server = start_server(Path(tempfile.mkdtemp(prefix="wurk-bench-")))
        url = server.url
    r = redis.Redis.from_url(url)
    fetches = [f for f in options.fetch.split(",") if f]
    results: dict[str, list[Result]] = {name: [] for name in [*fetches, "floor"]}
    try:
        for _ in range(options.runs):  # interleaved so machine noise hits every column alike
            for fetch in fetches:
                results[fetch].append(drain_with_wurk(r, url, options.jobs, fetch,
                                                      options.concurrency))
            results["floor"].append(drain_floor(r, options.jobs))
    finally:
        r.flushall()
        if server is not None:
            server.stop()
    floor_rate = statistics.median(x.rate for x in results["floor"])
    print(f"drain {options.jobs} jobs, concurrency {options.concurrency}, "
          f"median of {options.runs} runs")
    print(f"{'':<10}{'jobs/s':>10}{'vs floor':>10}{'CPU µs/job':>12}{'peak RSS MB':>13}")
    for name, runs in results.items():
        rate = statistics.median(x.rate for x in runs)
        cpu = statistics.median(x.cpu_us for x in runs)
        rss = statistics.median(x.rss_mb for x in runs)
        print(f"{name:<10}{rate:>10,.0f}{rate / floor_rate:>9.2f}x{cpu:>12,.0f}{rss:>13.1f}")


if __name__ == "__main__":
    main()
