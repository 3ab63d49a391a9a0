"""The drain rate of a partitioned queue with 1, 10 and 1,000 busy partitions against a
plain queue, in one run (docs/partitions.md, docs/benchmarks.md).

    python -m benchmarks.partitions [--runs 3] [--jobs 20000] [--limit 10]

Each case queues ``--jobs`` jobs (one INCR each), spread evenly over its partitions, then one
``wurk worker -c 10`` drains them: the plain queue by reliable fetch (a script taking up to
``prefetch`` jobs a round trip), the partitioned one by its fetch script (round-robin, one job
per partition per round trip, ``--limit`` in flight per partition — 10, the worker's
concurrency, so the limit itself never holds the drain back). Prints jobs/s, the median of
``--runs`` interleaved runs, timed from 10 % of the jobs done (the worker's boot excluded)
to the last, and the ratio to the plain queue.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

import wurk
from benchmarks._server import redis_url
from benchmarks.partitions_jobs import COUNTER, part_incr

ROOT = Path(__file__).resolve().parents[1]
PLAIN, PARTED = "bench-plain", "bench-parted"
WARM = 0.1
CASES = (("plain queue", 0), ("1 partition", 1), ("10 partitions", 10),
         ("1,000 partitions", 1000))


def fill(config: wurk.Config, jobs: int, partitions: int) -> None:
    if not partitions:
        part_incr.set(queue=PLAIN).perform_bulk([[] for _ in range(jobs)])
        return
    for p in range(partitions):
        share = jobs // partitions + (1 if p < jobs % partitions else 0)
        part_incr.set(queue=PARTED, partition=f"t{p}").perform_bulk(
            [[] for _ in range(share)])


def drain(url: str, settings: Path, jobs: int, partitions: int, limit: int) -> float:
    """jobs/s over the drain of ``jobs`` queued jobs."""
    r = redis.Redis.from_url(url)
    r.flushdb()
    config = wurk.configure(redis_url=url, partitions={PARTED: limit})
    fill(config, jobs, partitions)
    queue = PARTED if partitions else PLAIN
    argv = [sys.executable, "-m", "wurk", "worker", "-r", "benchmarks.partitions_jobs",
            "-c", "10", "-q", queue, "-C", str(settings)]
    worker = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "REDIS_URL": url},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while int(r.get(COUNTER) or 0) < jobs * WARM:
            time.sleep(0.005)
        start, done0 = time.perf_counter(), int(r.get(COUNTER) or 0)
        while int(r.get(COUNTER) or 0) < jobs:
            if worker.poll() is not None:
                raise RuntimeError("the worker exited before the drain ended")
            time.sleep(0.005)
        return (jobs - done0) / (time.perf_counter() - start)
    finally:
        worker.terminate()
        worker.wait(30)
        r.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--limit", type=int, default=10)
    options = parser.parse_args()
    settings = Path(tempfile.mkdtemp(prefix="wurk-bench-")) / "wurk.yml"
    settings.write_text(f"partitions:\n  {PARTED}: {options.limit}\n"
                        "skip_default_job_logging: true\n")
    rates: dict[str, list[float]] = {label: [] for label, _ in CASES}
    with redis_url() as url:
        for _ in range(options.runs):
            for label, partitions in CASES:
                rates[label].append(drain(url, settings, options.jobs, partitions,
                                          options.limit))
    print(f"\nDrain of {options.jobs:,} jobs (one INCR each), 1 worker -c 10, limit "
          f"{options.limit} per partition, median of {options.runs}; load average "
          f"{os.getloadavg()[0]:.1f}")
    base = statistics.median(rates["plain queue"])
    print(f"{'case':<18}{'jobs/s':>9}{'vs plain':>10}   runs")
    for label, _ in CASES:
        rate = statistics.median(rates[label])
        runs = ", ".join(f"{x:,.0f}" for x in rates[label])
        print(f"{label:<18}{rate:>9,.0f}{rate / base:>9.2f}×   {runs}")


if __name__ == "__main__":
    main()
