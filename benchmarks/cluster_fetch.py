"""Redis Cluster: how soon an idle worker takes a job, and what idling costs the cluster.

    python -m benchmarks.cluster_fetch [--probes 60] [--runs 3] [--concurrency 12,2]
                                       [--fetch-timeout 1.0]

A real cluster of 3 primaries (Debian's ``redis-server --cluster-enabled yes``, no
replicas); a worker in this process serving six queues (two keyspaces on each primary) in
strict order, ``fetch_timeout`` 1 s (the default; ``--fetch-timeout``). Per
``--concurrency`` it prints, medians of the runs:

- the latency from a push to the job's start, one job at a time into an idle worker, each
  to the next of the six queues, after a random pause of 0.1–0.4 s (so the processors are
  back blocking): median, 95th percentile and max, in ms;
- the commands per second the idle worker sends the cluster (every primary's
  ``total_commands_processed`` over 3 s with no job), heartbeats and pollers included;
- the processor threads it runs.

With at least as many processors as queues, every queue has a processor blocked on it
(``wurk.fetch.keyspaces``); with fewer, a job on a queue nobody blocks on waits for the
next pass, up to ``fetch_timeout``. The load average before and after is printed.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

from tests.helpers.cluster import Cluster

import wurk
from wurk.inprocess import InProcessWorker

QUEUES = ["default", "critical", "mail", "reports", "exports", "low"]
started: dict[str, float] = {}
_seen = threading.Condition()


@wurk.job(name="Bench::FetchProbe")
def probe(token: str) -> None:
    with _seen:
        started[token] = time.monotonic()
        _seen.notify_all()


def _commands(cluster: Cluster) -> int:
    total = 0
    for node in cluster.primaries():
        direct = node.client()
        total += int(direct.info("stats")["total_commands_processed"])
        direct.close()
    return total


def one_run(cluster: Cluster, concurrency: int, probes: int, fetch_timeout: float
            ) -> tuple[list[float], float, int]:
    cluster.flush()
    started.clear()
    os.environ["REDIS_URL"] = cluster.url
    config = wurk.configure(queues=QUEUES, concurrency=concurrency, fetch_timeout=fetch_timeout,
                            skip_default_job_logging=True)
    before = set(threading.enumerate())
    worker = InProcessWorker(config).start()
    latencies: list[float] = []
    try:
        threads = sum(1 for t in set(threading.enumerate()) - before
                      if t.name.startswith("wurk-default-"))
        time.sleep(2.0)  # every launcher up, every processor blocking
        first = _commands(cluster)
        time.sleep(3.0)
        idle_rate = (_commands(cluster) - first) / 3.0
        for index in range(probes):
            time.sleep(random.uniform(0.1, 0.4))
            token = f"p{index}"
            pushed = time.monotonic()
            probe.set(queue=QUEUES[index % len(QUEUES)]).perform_async(token)
            with _seen:
                if not _seen.wait_for(lambda token=token: token in started,
                                      timeout=30):
                    raise RuntimeError(f"probe {token} never started")
            latencies.append((started[token] - pushed) * 1000)
    finally:
        worker.stop()
        config.close()
    return latencies, idle_rate, threads


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=60)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", default="12,2")
    parser.add_argument("--fetch-timeout", type=float, default=1.0)
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    cluster = Cluster.start(Path(tempfile.mkdtemp(prefix="wurk-cluster-fetch-")),
                            primaries=3, replicas=0)
    results: dict[int, list[tuple[float, float, float, float, int]]] = {c: [] for c in levels}
    try:
        for _ in range(args.runs):
            for concurrency in levels:  # interleaved: the machine's noise hits each alike
                latencies, idle, threads = one_run(cluster, concurrency, args.probes,
                                                   args.fetch_timeout)
                ordered = sorted(latencies)
                results[concurrency].append((
                    statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))],
                    ordered[-1], idle, threads))
    finally:
        cluster.stop()
    print(f"fetch_timeout {args.fetch_timeout} s")
    print("| concurrency | processor threads | median ms | p95 ms | max ms | idle commands/s |")
    print("|---|---|---|---|---|---|")
    for concurrency, rows in results.items():
        columns = list(zip(*rows, strict=True))
        print(f"| {concurrency} | {int(statistics.median(columns[4]))} "
              f"| {statistics.median(columns[0]):.1f} | {statistics.median(columns[1]):.1f} "
              f"| {statistics.median(columns[2]):.1f} | {statistics.median(columns[3]):.0f} |")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
