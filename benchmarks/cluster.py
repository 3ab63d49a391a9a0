"""Redis Cluster: drain throughput and Redis CPU per job per node with 1, 2 and 3 primaries,
side by side in one run.

    python -m benchmarks.cluster [--jobs 20000] [--runs 3] [--primaries 1,2,3]
                                 [--workers 2] [--concurrency 12]

Each layout is a real cluster of Debian's ``redis-server --cluster-enabled yes`` (no
replicas: a replica's CPU is not the primary's), given to wurk as a ``redis+cluster://`` URL
(``docs/scaling.md``). Six queues are chosen so each primary serves the same number of their
keyspaces; ``--jobs`` one-``INCR`` jobs are pushed spread evenly over them, then
``--workers`` ``wurk worker`` processes, each serving the six queues (``--concurrency``
threads shared out over them), drain them. Per layout it prints, medians of the runs
(interleaved, so the machine's noise hits every layout alike):

- jobs/s, from the first job done to the last;
- each primary's own CPU (``INFO cpu``, user + system) per job it served, in µs, and the
  fleet's Redis CPU per job (every primary's CPU over every job);
- the workers' CPU per job;
- the projection the Redis CPU figures imply: one primary saturates at 10⁶ / (its µs per
  job) jobs/s, so N primaries carry N times that — with enough worker CPU beside them,
  which a 2-core machine does not have (there the workers' CPU is the ceiling).

The load average before and after is printed: figures taken while other work loads the
machine must say so.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.crc import key_slot

import wurk
from benchmarks.cluster_jobs import cluster_incr
from benchmarks.scaling import Run, measured, report

ROOT = Path(__file__).resolve().parents[1]
QUIET = "skip_default_job_logging: true\nheartbeat_interval: 1\n"
QUEUE_COUNT = 6


@dataclass
class Layout:
    url: str
    ports: list[int]  # the primaries
    queues: list[str]  # QUEUE_COUNT queues, as many on each primary
    owner: dict[str, int]  # queue -> its primary's port


@contextmanager
def cluster(primaries: int) -> Iterator[Layout]:
    sys.path.insert(0, str(ROOT))
    from tests.helpers.cluster import Cluster

    started = Cluster.start(Path(tempfile.mkdtemp(prefix=f"wurk-cluster-{primaries}-")),
                            primaries=primaries, replicas=0)
    try:
        ranges = started.slots()
        ports = sorted({port for _, _, port in ranges})

        def owner(queue: str) -> int:
            slot = key_slot(f"{{{queue}}}".encode())
            return next(port for start, end, port in ranges if start <= slot <= end)

        each = QUEUE_COUNT // len(ports)
        chosen: dict[int, list[str]] = {port: [] for port in ports}
        for n in range(1000):
            name = f"q{n}"
            if len(chosen[owner(name)]) < each:
                chosen[owner(name)].append(name)
            if all(len(names) == each for names in chosen.values()):
                break
        queues = [name for names in chosen.values() for name in names]
        yield Layout(started.url, ports, queues, {q: owner(q) for q in queues})
    finally:
        started.stop()


def _done(nodes: dict[int, redis.Redis], layout: Layout) -> int:
    return sum(int(nodes[layout.owner[q]].get(f"{{{q}}}:bench:count") or 0)
               for q in layout.queues)


def drain(layout: Layout, jobs: int, workers: int, concurrency: int) -> Run:
    nodes = {port: redis.Redis(port=port) for port in layout.ports}
    for client in nodes.values():
        client.flushall()
    previous = os.environ.get("REDIS_URL")
    os.environ["REDIS_URL"] = layout.url  # REDIS_URL wins over redis_url
    try:
        config = wurk.configure()
        per_queue = jobs // len(layout.queues)
        for queue in layout.queues:
            cluster_incr.set(queue=queue).perform_bulk([[n] for n in range(per_queue)])
        config.close()
    finally:
        if previous is None:
            os.environ.pop("REDIS_URL", None)
        else:
            os.environ["REDIS_URL"] = previous
    total = per_queue * len(layout.queues)
    served = {port: per_queue * sum(1 for q in layout.queues if layout.owner[q] == port)
              for port in layout.ports}
    settings = (QUIET + f"concurrency: {concurrency}\n"
                f"queues: [{', '.join(layout.queues)}]\n")
    return measured(settings=settings, module="benchmarks.cluster_jobs", url=layout.url,
                    workers=workers, nodes=[nodes[port] for port in layout.ports],
                    served=[served[port] for port in layout.ports], total=total,
                    done=lambda: _done(nodes, layout))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--primaries", default="1,2,3")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=12)
    options = parser.parse_args(argv)
    counts = [int(n) for n in options.primaries.split(",") if n]
    load_before = os.getloadavg()
    results: dict[int, list[Run]] = {n: [] for n in counts}
    with ExitStack() as stack:
        layouts = {n: stack.enter_context(cluster(n)) for n in counts}
        for _ in range(options.runs):
            for count in counts:
                results[count].append(drain(layouts[count], options.jobs, options.workers,
                                            options.concurrency))
    load_after = os.getloadavg()
    print(f"drain {options.jobs} jobs over {QUEUE_COUNT} queues spread evenly over the "
          f"primaries of a Redis Cluster, {options.workers} worker processes each serving "
          f"every queue ({options.concurrency} threads), median of {options.runs} runs; load "
          f"average {load_before[0]:.2f} before, {load_after[0]:.2f} after, on "
          f"{os.cpu_count()} CPUs")
    report(results, "primary", "primaries")


if __name__ == "__main__":
    main()
