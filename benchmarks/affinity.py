"""Does the default ``cpu_affinity`` (``auto``) cost jobs that release the GIL anything?

    python -m benchmarks.affinity [--runs 3] [--hash-jobs 400] [--incr-jobs 20000]

For each job kind — ``Bench::Hash`` (4 MiB of SHA-256 in C, the GIL released) and
``Bench::Incr`` (GIL-bound, one INCR) — one ``wurk worker -c 10`` drains a backlog with the
default (``auto``) and with ``--cpu-affinity none``, interleaved; prints jobs/s (median of
the runs), the ratio default/none, how many cores the worker used, and the load average.
A ratio near 1.0 for Hash says the guard kept parallel work unpinned.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil
import redis

from benchmarks._server import redis_url

ROOT = Path(__file__).resolve().parents[1]
COUNTER = "bench:affinity:done"
# The drain is timed from this many jobs done (the worker's boot and the guard's first
# measured second excluded) to the last.
WARM = 0.1


def drain(url: str, job: str, jobs: int, affinity: str | None) -> tuple[float, float]:
    """(jobs/s, cores used by the worker) over a drain of ``jobs`` queued ``job``s."""
    r = redis.Redis.from_url(url)
    r.flushdb()
    payload = '{"class":"%s","args":[],"jid":"%024x","queue":"default","retry":true}'
    r.lpush("queue:default", *[payload % (job, n) for n in range(jobs)])
    argv = [sys.executable, "-m", "wurk", "worker", "-r", "benchmarks.affinity_jobs",
            "-c", "10", *(["--cpu-affinity", affinity] if affinity else [])]
    env = {**os.environ, "REDIS_URL": url}
    worker = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    process = psutil.Process(worker.pid)
    try:
        while int(r.get(COUNTER) or 0) < jobs * WARM:
            time.sleep(0.005)
        start, cpu0, done0 = time.perf_counter(), _cpu(process), int(r.get(COUNTER) or 0)
        while int(r.get(COUNTER) or 0) < jobs:
            time.sleep(0.005)
        elapsed = time.perf_counter() - start
        return (jobs - done0) / elapsed, (_cpu(process) - cpu0) / elapsed
    finally:
        worker.terminate()
        worker.wait(30)
        r.close()


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hash-jobs", type=int, default=400)
    parser.add_argument("--incr-jobs", type=int, default=20000)
    options = parser.parse_args()
    kinds = (("Bench::Hash", options.hash_jobs), ("Bench::Incr", options.incr_jobs))
    with redis_url() as url:
        results: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for _ in range(options.runs):
            for job, jobs in kinds:
                for label, setting in (("default (auto)", None), ("none", "none")):
                    results.setdefault((job, label), []).append(
                        drain(url, job, jobs, setting))
        print(f"\ncpu_affinity: the default against none, 1 worker, -c 10, median of "
              f"{options.runs}; load average {os.getloadavg()[0]:.1f}")
        print(f"{'job':<14}{'affinity':<16}{'jobs/s':>9}{'cores':>7}{'vs none':>9}")
        for job, _ in kinds:
            base = statistics.median(r[0] for r in results[(job, "none")])
            for label in ("default (auto)", "none"):
                rows = results[(job, label)]
                rate = statistics.median(r[0] for r in rows)
                cores = statistics.median(r[1] for r in rows)
                print(f"{job:<14}{label:<16}{rate:>9,.0f}{cores:>7.2f}{rate / base:>8.2f}×")


if __name__ == "__main__":
    main()
