"""What a stored result costs, and how soon a waiter hears it: wurk against arq and SAQ.

    python -m benchmarks.results [--jobs 5000] [--samples 200] [--rounds 3]

1. **Cost per job** (wurk): one ``wurk worker`` process (concurrency 10) drains ``--jobs``
   jobs that INCR a counter and return a small int, pushed in bulk, alternately without
   and with ``result_ttl`` (the same warm worker, ``--rounds`` each, interleaved). Per job:
   the worker process's user + system CPU from the push to the last INCR, the server's CPU
   (``INFO cpu``) and the commands it served (``INFO commandstats``, INFO itself left out).
2. **Latency, job end → waiter wakes**: the job returns ``time.time()`` as it ends; the
   waiter, in another process, pushes one job, waits for its result and subtracts that
   from the moment it has it; ``--samples`` jobs one after another, after a warm-up job.
   wurk: ``await handle.aresult(timeout=...)`` and the sync ``handle.result(timeout=...)``
   (pub/sub); arq: ``await job.result(timeout=...)`` (polls every 0.5 s by default); SAQ:
   ``await job.refresh(until_complete=...)`` (pub/sub; a wait that times out although
   the job completed is counted as missed, not timed). arq and SAQ run from
   ``benchmarks/peers/.venv-arq`` and ``benchmarks/peers/.venv`` (``setup.sh``); a peer
   whose venv is missing is skipped, saying so.

Every figure is the median of ``--rounds`` runs (latency rounds interleaved across
systems); p50 / p99 are of each run's samples. One private server (``REDIS_URL`` if set),
flushed before each run.
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import redis

from benchmarks._server import ROOT, redis_url

PEERS = ROOT / "benchmarks" / "peers"
PROJECT_PYTHON = sys.executable
WORKER_BOOT = 30.0
HOME = tempfile.mkdtemp(prefix="wurk-bench-home-")  # no .wurk of the checkout is found
STOP_GRACE = 15.0


# -- processes -----------------------------------------------------------------------------------
def environment(url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(BENCH_REDIS_URL=url, REDIS_URL=url, PYTHONPATH=str(ROOT),
               WURK_HOME=HOME)
    return env


@contextmanager
def worker(argv: list[str], url: str) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(argv, cwd=ROOT, env=environment(url),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_GRACE)


def tree_cpu(process: psutil.Process) -> float:
    total = 0.0
    for member in [process, *process.children(recursive=True)]:
        try:
            times = member.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def wurk_worker_argv() -> list[str]:
    return [PROJECT_PYTHON, "-m", "wurk", "worker", "-r", "benchmarks.results_jobs",
            "-c", "10"]


def wait_ready(client: redis.Redis) -> None:
    deadline = time.monotonic() + WORKER_BOOT
    while not client.scard("processes"):
        if time.monotonic() > deadline:
            raise SystemExit("the wurk worker did not start")
        time.sleep(0.05)


# -- 1. cost per job ---------------------------------------------------------------------------
def server_cpu(client: redis.Redis) -> float:
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def server_commands(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def cost(url: str, jobs: int, rounds: int) -> dict[str, dict[str, float]]:
    import wurk
    from benchmarks.results_jobs import COUNTER, count

    client = redis.Redis.from_url(url)
    client.flushall()
    config = wurk.configure(redis_url=url)
    found: dict[str, list[tuple[float, float, float]]] = {"off": [], "on": []}
    with worker(wurk_worker_argv(), url) as process:
        wait_ready(client)
        tree = psutil.Process(process.pid)
        count.perform_bulk([[0]] * 500)  # warm-up: imports, connections, the JIT-less paths
        while int(client.get(COUNTER) or 0) < 500:
            time.sleep(0.01)
        for _ in range(rounds):
            for variant in ("off", "on"):
                client.delete(COUNTER)
                setter = count.set(result_ttl=60) if variant == "on" else count.set()
                cpu, server, commands = tree_cpu(tree), server_cpu(client), \
                    server_commands(client)
                setter.perform_bulk([[n] for n in range(jobs)])
                while int(client.get(COUNTER) or 0) < jobs:
                    time.sleep(0.01)
                found[variant].append(((tree_cpu(tree) - cpu) / jobs * 1e6,
                                       (server_cpu(client) - server) / jobs * 1e6,
                                       (server_commands(client) - commands) / jobs))
                client.delete(*(client.keys("wurk:result:*") or ["-"]))
    config.close()
    client.close()
    return {variant: {"worker_us": statistics.median(r[0] for r in runs),
                      "redis_us": statistics.median(r[1] for r in runs),
                      "cmds": statistics.median(r[2] for r in runs)}
            for variant, runs in found.items()}


# -- 2. latency ---------------------------------------------------------------------------------
def measure_wurk(samples: int, mode: str) -> list[float]:
    """The waiter's side for wurk, in this (the project's) venv."""
    import asyncio

    from benchmarks.results_jobs import stamp

    if mode == "sync":
        warm = stamp.perform_async()
        assert warm is not None
        warm.result(timeout=30)
        found = []
        for _ in range(samples):
            handle = stamp.perform_async()
            assert handle is not None
            ended = handle.result(timeout=10)
            found.append((time.time() - ended) * 1000)
        return found

    async def run() -> list[float]:
        warm = await stamp.aperform_async()
        assert warm is not None
        await warm.aresult(timeout=30)
        found = []
        for _ in range(samples):
            handle = await stamp.aperform_async()
            assert handle is not None
            ended = await handle.aresult(timeout=10)
            found.append((time.time() - ended) * 1000)
        return found

    return asyncio.run(run())


SYSTEMS: dict[str, tuple[Path, list[str], list[str]]] = {
    # name: (python, worker argv after python, waiter argv after python)
    "wurk async": (Path(PROJECT_PYTHON), wurk_worker_argv()[1:],
                   ["-m", "benchmarks.results", "--waiter", "async"]),
    "wurk sync": (Path(PROJECT_PYTHON), wurk_worker_argv()[1:],
                  ["-m", "benchmarks.results", "--waiter", "sync"]),
    "arq": (PEERS / ".venv-arq" / "bin" / "python",
            ["-m", "arq", "benchmarks.peers.arq_results.WorkerSettings"],
            ["-m", "benchmarks.peers.arq_results"]),
    "saq": (PEERS / ".venv" / "bin" / "python",
            ["-m", "saq", "benchmarks.peers.saq_results.settings"],
            ["-m", "benchmarks.peers.saq_results"]),
}


def latency_run(name: str, url: str, samples: int) -> tuple[list[float], int]:
    python, worker_args, waiter_args = SYSTEMS[name]
    client = redis.Redis.from_url(url)
    client.flushall()
    client.close()
    with worker([str(python), *worker_args], url):
        done = subprocess.run([str(python), *waiter_args, str(samples)], cwd=ROOT,
                              env=environment(url), capture_output=True, text=True,
                              timeout=60 + samples * 2)
    if done.returncode != 0:
        raise SystemExit(f"{name}'s waiter failed:\n{done.stderr[-2000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return list(found["ms"]), int(found["missed"])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def latency(url: str, samples: int, rounds: int) -> dict[str, dict[str, float]]:
    names = [n for n, (python, _, _) in SYSTEMS.items() if python.exists()]
    for missing in SYSTEMS.keys() - set(names):
        print(f"skipped {missing}: no {SYSTEMS[missing][0]} (run benchmarks/peers/setup.sh)")
    runs: dict[str, list[tuple[float, float, int]]] = {n: [] for n in names}
    for round_ in range(rounds):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        for name in order:
            found, missed = latency_run(name, url, samples)
            runs[name].append((percentile(found, 0.5), percentile(found, 0.99), missed))
    return {name: {"p50": statistics.median(r[0] for r in found),
                   "p99": statistics.median(r[1] for r in found),
                   "missed": sum(r[2] for r in found)}
            for name, found in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--waiter", choices=("async", "sync"), help=argparse.SUPPRESS)
    parser.add_argument("count", nargs="?", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.waiter:  # the waiter process of a latency run
        print(json.dumps({"ms": measure_wurk(options.count, options.waiter), "missed": 0}))
        return
    with redis_url() as url:
        print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
        costs = cost(url, options.jobs, options.rounds)
        print(f"\ncost of a stored result, {options.jobs:,} jobs a round, median of "
              f"{options.rounds}:")
        print(f"{'':14}{'worker CPU µs/job':>18}{'Redis CPU µs/job':>18}{'cmds/job':>10}")
        for variant, label in (("off", "no result"), ("on", "result_ttl")):
            c = costs[variant]
            print(f"{label:14}{c['worker_us']:18.0f}{c['redis_us']:18.1f}{c['cmds']:10.2f}")
        print(f"{'difference':14}{costs['on']['worker_us'] - costs['off']['worker_us']:18.0f}"
              f"{costs['on']['redis_us'] - costs['off']['redis_us']:18.1f}"
              f"{costs['on']['cmds'] - costs['off']['cmds']:10.2f}")
        found = latency(url, options.samples, options.rounds)
        print(f"\nlatency, job end → waiter wakes, {options.samples} jobs one after another, "
              f"median of {options.rounds} runs:")
        print(f"{'':14}{'p50 ms':>10}{'p99 ms':>10}{'missed':>8}")
        for name, figures in found.items():
            print(f"{name:14}{figures['p50']:10.2f}{figures['p99']:10.2f}"
                  f"{figures['missed']:8.0f}")
        print("missed: waits that timed out (5 s) although the job completed, all runs")
        print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
