"""Drain throughput: N no-op jobs (one INCR each) drained by one ``wurk worker`` process
with concurrency 10, next to the floor — a bare redis-py loop doing the same Redis work
(BRPOP a payload, parse it, INCR) — in the same run.

    python -m benchmarks.throughput [--jobs 20000] [--runs 3] [--fetch basic] [--concurrency 10]
                                    [--metrics-off] [--quiet] [--bare] [--redis-py]

Prints jobs/s, worker CPU µs per job and peak RSS, medians of the runs. ``--metrics-off``
adds, for each fetch, a column with execution metrics and the history sampler off
(``metrics: false``, ``retain_history: 0``), run alternately with the default (on) in the
same run, so the cost of metrics shows as a ratio; the machine's load average is printed.
``--quiet`` turns the per-job log lines off in every column.

``--bare`` adds a column for ``benchmarks/bare_worker.py``: threads shaped as wurk's (one
CPU, a Lua fetch of eight into a private list, an ACK per job written without waiting, a
buffered ``done`` line) and nothing else — what wurk's per-job CPU above it buys is
middleware, retries, metrics, the heartbeat's busy map, payload checks and shutdown
handling. ``--redis-py`` makes every job body INCR through a redis-py client instead of
``wurk.redis()`` (the bare worker's body alike).
"""

from __future__ import annotations

import argparse
import contextlib
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
from benchmarks._server import redis_url
from benchmarks.throughput_jobs import bench_incr

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Result:
    rate: float
    cpu_us: float
    rss_mb: float


METRICS_OFF = "metrics: false\nretain_history: 0\n"
QUIET = "skip_default_job_logging: true\n"


def drain_with_wurk(r: redis.Redis, url: str, jobs: int, fetch: str, concurrency: int,
                    settings: str = "", *, redis_py: bool = False) -> Result:
    command = [sys.executable, "-m", "wurk", "worker", "-r", "benchmarks.throughput_jobs",
               "-c", str(concurrency), "--fetch", fetch, "--log-format", "plain"]
    if settings:
        with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as file:
            file.write(settings)
        try:
            return _drain(r, url, jobs, [*command, "-C", file.name], redis_py=redis_py)
        finally:
            os.unlink(file.name)
    return _drain(r, url, jobs, command, redis_py=redis_py)


def drain_bare(r: redis.Redis, url: str, jobs: int, concurrency: int, *,
               redis_py: bool = False) -> Result:
    """The same jobs drained by ``bare_worker``: the least a worker of wurk's shape does."""
    command = [sys.executable, "-m", "benchmarks.bare_worker", "--jobs", str(jobs),
               "--concurrency", str(concurrency), *(["--redis-py"] if redis_py else [])]
    return _drain(r, url, jobs, command, redis_py=redis_py)


def _drain(r: redis.Redis, url: str, jobs: int, command: list[str], *,
           redis_py: bool) -> Result:
    r.flushall()
    wurk.configure(redis_url=url)
    bench_incr.perform_bulk([[] for _ in range(jobs)])
    env = {**os.environ, "REDIS_URL": url}
    if redis_py:
        env.update(BENCH_JOB_CLIENT="redis-py", BENCH_REDIS_URL=url)
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
    parser.add_argument("--metrics-off", action="store_true",
                        help="also drain with metrics off, alternately, for the ratio")
    parser.add_argument("--quiet", action="store_true", help="no per-job log lines")
    parser.add_argument("--bare", action="store_true",
                        help="also drain with benchmarks/bare_worker.py, the least a worker "
                             "of wurk's shape does")
    parser.add_argument("--redis-py", action="store_true",
                        help="job bodies INCR through a redis-py client, not wurk.redis()")
    options = parser.parse_args()
    base = QUIET if options.quiet else ""
    variants = [(fetch, fetch, base) for fetch in options.fetch.split(",") if fetch]
    if options.metrics_off:
        variants = [v for fetch, _, _ in variants
                    for v in ((fetch, fetch, base), (f"{fetch}-off", fetch, base + METRICS_OFF))]
    load_before = os.getloadavg()
    servers = contextlib.ExitStack()
    url = servers.enter_context(redis_url())
    r = redis.Redis.from_url(url)
    results: dict[str, list[Result]] = {name: [] for name, _, _ in variants}
    if options.bare:
        results["bare"] = []
    results["floor"] = []
    try:
        for _ in range(options.runs):  # interleaved so machine noise hits every column alike
            for name, fetch, settings in variants:
                results[name].append(drain_with_wurk(r, url, options.jobs, fetch,
                                                     options.concurrency, settings,
                                                     redis_py=options.redis_py))
            if options.bare:
                results["bare"].append(drain_bare(r, url, options.jobs, options.concurrency,
                                                  redis_py=options.redis_py))
            results["floor"].append(drain_floor(r, options.jobs))
    finally:
        r.flushall()
        servers.close()
    floor_rate = statistics.median(x.rate for x in results["floor"])
    load_after = os.getloadavg()
    print(f"drain {options.jobs} jobs, concurrency {options.concurrency}, "
          f"median of {options.runs} runs; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after, on {os.cpu_count()} CPUs; job body: INCR through "
          f"{'a redis-py client' if options.redis_py else 'wurk.redis()'}")
    print(f"{'':<14}{'jobs/s':>10}{'vs floor':>10}{'CPU µs/job':>12}{'peak RSS MB':>13}")
    for name, runs in results.items():
        rate = statistics.median(x.rate for x in runs)
        cpu = statistics.median(x.cpu_us for x in runs)
        rss = statistics.median(x.rss_mb for x in runs)
        print(f"{name:<14}{rate:>10,.0f}{rate / floor_rate:>9.2f}x{cpu:>12,.0f}{rss:>13.1f}")
    if options.bare:
        bare_cpu = statistics.median(x.cpu_us for x in results["bare"])
        for name, _, _ in variants:
            cpu = statistics.median(x.cpu_us for x in results[name])
            print(f"{name}: {cpu - bare_cpu:+,.0f} µs of worker CPU a job above the bare "
                  f"worker's {bare_cpu:,.0f}")
    for name, _, _ in variants:
        if name.endswith("-off"):
            on = statistics.median(x.rate for x in results[name[:-4]])
            off = statistics.median(x.rate for x in results[name])
            on_cpu = statistics.median(x.cpu_us for x in results[name[:-4]])
            off_cpu = statistics.median(x.cpu_us for x in results[name])
            print(f"metrics on costs {(1 - on / off) * 100:+.1f} % of {name[:-4]} drain "
                  f"throughput ({on:,.0f} on / {off:,.0f} off jobs/s; runs on "
                  f"{[round(x.rate) for x in results[name[:-4]]]}, off "
                  f"{[round(x.rate) for x in results[name]]}) and "
                  f"{(on_cpu / off_cpu - 1) * 100:+.1f} % worker CPU per job")


if __name__ == "__main__":
    main()
