"""Past one Redis: drain throughput and Redis CPU per job per node with 1, 2 and 3 primaries,
side by side in one run.

    python -m benchmarks.scaling [--jobs 20000] [--runs 3] [--primaries 1,2,3]
                                 [--workers 2] [--concurrency 10]

Each primary is a Redis server of its own (the embedded Valkey binary, or
``WURK_TEST_SERVER``), used as a shard (``docs/scaling.md``): ``--jobs`` one-``INCR`` jobs are
pushed spread evenly over the primaries (a ``shard_router`` by argument), then ``--workers``
``wurk worker`` processes, each serving every primary (a capsule of ``--concurrency``
threads bound to each shard), drain them. Per layout it prints, medians of the runs
(interleaved, so the machine's noise hits every layout alike):

- jobs/s, from the first job done to the last;
- each node's own CPU (``INFO cpu``, user + system) per job it served, in µs, and the
  fleet's Redis CPU per job (every node's CPU over every job);
- the workers' CPU per job;
- the projection the Redis CPU figures imply: one node saturates at 10⁶ / (its µs per
  job) jobs/s, so N such nodes carry N times that — with enough worker CPU beside them,
  which a 2-core machine does not have (there the workers' CPU is the ceiling).

The load average before and after is printed: figures taken while other work loads the
machine must say so.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import redis

import wurk
from benchmarks.scaling_jobs import scale_incr

ROOT = Path(__file__).resolve().parents[1]
COUNTER = "bench:count"
QUIET = "skip_default_job_logging: true\nheartbeat_interval: 1\n"


@dataclass
class Run:
    rate: float  # jobs/s
    node_cpu_us: list[float]  # each node's CPU per job it served
    fleet_cpu_us: float  # every node's CPU over every job
    worker_cpu_us: float


@contextmanager
def servers(count: int) -> Iterator[list[str]]:
    sys.path.insert(0, str(ROOT))
    from tests.helpers.server import start_server

    started = [start_server(Path(tempfile.mkdtemp(prefix=f"wurk-scale-{n}-")),
                            extra=["--maxmemory-policy", "noeviction"])
               for n in range(count)]
    try:
        yield [server.url for server in started]
    finally:
        for server in started:
            server.stop()


def _settings(urls: Sequence[str], concurrency: int) -> str:
    """A worker's file: the default capsule on the first primary, one capsule per other."""
    lines = [QUIET, f"concurrency: {concurrency}\n"]
    if len(urls) > 1:
        lines.append("shards:\n" + "".join(f"  p{i}: {url}\n" for i, url in
                                            enumerate(urls[1:], 1)))
        lines.append("capsules:\n" + "".join(
            f"  p{i}: {{shard: p{i}, concurrency: {concurrency}, queues: [default]}}\n"
            for i in range(1, len(urls))))
    return "".join(lines)


def _cpu(client: redis.Redis) -> float:
    info: dict[str, Any] = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def drain(urls: Sequence[str], jobs: int, workers: int, concurrency: int) -> Run:
    clients = [redis.Redis.from_url(url) for url in urls]
    for client in clients:
        client.flushall()
    count = len(urls)
    config = wurk.configure(redis_url=urls[0],
                            shards={f"p{i}": url for i, url in enumerate(urls[1:], 1)},
                            shard_router=lambda job, queue, args: (
                                None if args[0] % count == 0 else f"p{args[0] % count}"))
    scale_incr.perform_bulk([[n] for n in range(jobs)])
    served = [int(client.llen("queue:default")) for client in clients]
    config.close()
    return measured(settings=_settings(urls, concurrency), module="benchmarks.scaling_jobs",
                    url=urls[0], workers=workers, nodes=clients, served=served, total=jobs,
                    done=lambda: sum(int(client.get(COUNTER) or 0) for client in clients))


def measured(*, settings: str, module: str, url: str, workers: int,
             nodes: Sequence[redis.Redis], served: Sequence[int], total: int,
             done: Callable[[], int]) -> Run:
    """``workers`` worker processes of ``module`` with ``settings`` drain ``total`` queued
    jobs: the rate from the first job done (``done()``) to the last, each node's CPU per job
    it served, the worker processes' CPU; the nodes' clients are closed. Also
    ``benchmarks.cluster``'s."""
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as file:
        file.write(settings)
    env = {**os.environ, "REDIS_URL": url}
    processes = [subprocess.Popen(
        [sys.executable, "-m", "wurk", "worker", "-r", module,
         "-C", file.name, "--log-format", "plain"], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(workers)]
    watched = [psutil.Process(process.pid) for process in processes]
    try:
        started = None
        while True:
            finished_jobs = done()
            if finished_jobs and started is None:
                started = time.perf_counter()
                cpu_start = [_cpu(client) for client in nodes]
                worker_start = sum(sum(p.cpu_times()[:2]) for p in watched)
            if finished_jobs >= total:
                finished = time.perf_counter()
                cpu_end = [_cpu(client) for client in nodes]
                worker_end = sum(sum(p.cpu_times()[:2]) for p in watched)
                break
            if any(process.poll() is not None for process in processes):
                raise RuntimeError("a worker exited early")
            time.sleep(0.002)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)
        os.unlink(file.name)
        for client in nodes:
            client.close()
    assert started is not None
    spent = [end - start for start, end in zip(cpu_start, cpu_end, strict=True)]
    return Run(rate=total / (finished - started),
               node_cpu_us=[cpu / max(n, 1) * 1e6 for cpu, n in zip(spent, served,
                                                                     strict=True)],
               fleet_cpu_us=sum(spent) / total * 1e6,
               worker_cpu_us=(worker_end - worker_start) / total * 1e6)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--primaries", default="1,2,3")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=10)
    options = parser.parse_args(argv)
    layouts = [int(n) for n in options.primaries.split(",") if n]
    load_before = os.getloadavg()
    results: dict[int, list[Run]] = {n: [] for n in layouts}
    with servers(max(layouts)) as urls:
        for _ in range(options.runs):
            for count in layouts:
                results[count].append(drain(urls[:count], options.jobs, options.workers,
                                            options.concurrency))
    load_after = os.getloadavg()
    print(f"drain {options.jobs} jobs spread over the primaries, {options.workers} worker "
          f"processes each serving every primary ({options.concurrency} threads a primary), "
          f"median of {options.runs} runs; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after, on {os.cpu_count()} CPUs")
    report(results, "node", "nodes")


def report(results: dict[int, list[Run]], node: str, nodes_: str) -> None:
    """The table of medians per layout, and what one ``node`` (a server, a primary) would
    serve at the median Redis CPU a job; also ``benchmarks.cluster``'s."""
    print(f"{'primaries':<11}{'jobs/s':>9}{'Redis CPU µs/job, each node':>30}"
          f"{'fleet µs/job':>14}{'worker µs/job':>15}{'one node saturates at':>24}")
    for count, runs in results.items():
        rate = statistics.median(run.rate for run in runs)
        nodes = [statistics.median(run.node_cpu_us[i] for run in runs) for i in range(count)]
        fleet = statistics.median(run.fleet_cpu_us for run in runs)
        worker = statistics.median(run.worker_cpu_us for run in runs)
        saturates = 1e6 / statistics.median(nodes)
        print(f"{count:<11}{rate:>9,.0f}{' / '.join(f'{n:.1f}' for n in nodes):>30}"
              f"{fleet:>14.1f}{worker:>15.0f}{saturates:>18,.0f} jobs/s")
    per_node = statistics.median(statistics.median(run.node_cpu_us) for runs in
                                 results.values() for run in runs)
    print(f"projection: at {per_node:.1f} µs of Redis CPU a job, one {node} saturates at "
          f"{1e6 / per_node:,.0f} jobs/s; " + ", ".join(
              f"{n} {nodes_} {n * 1e6 / per_node:,.0f}" for n in (2, 3, 6, 10)) +
          " jobs/s, given the worker CPU to match")


if __name__ == "__main__":
    main()
