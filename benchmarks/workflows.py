"""What a workflow step costs a worker, against the same job pushed plainly.

    python -m benchmarks.workflows [--jobs 2000] [--rounds 3]

One thread in this process runs queued jobs with the worker's own fetch, runner and
built-in middleware (``tests.helpers.runner.Drain``): no threads, no other load, so the
process CPU from the first fetch to the empty queue is the worker's cost of the jobs. The
pushes happen before the clock starts. Each job returns a small int. Variants, ``--jobs``
jobs each:

- ``plain``: ``perform_bulk``, nothing kept;
- ``result_ttl``: the same with its result stored (what every step pays for its result);
- ``group``: one workflow of ``--jobs`` independent steps;
- ``chain``: one workflow of ``--jobs`` steps, each taking the one before's result;
- ``fan-out``: one step that fans out ``--jobs`` children, and a fan-in over their results;
- ``nested``: one workflow of ``--jobs``/10 nested workflows of 10 independent steps each
  (what a nested workflow's end adds to its steps).

Per job: the worker's CPU (µs), the server's CPU (µs, ``INFO cpu``) and the commands it
ran (``INFO commandstats``, those a script ran included, INFO left out), the median of
``--rounds`` runs. One private server (``REDIS_URL`` if set), flushed before each run.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import redis

from benchmarks._server import redis_url


def server_cpu(client: redis.Redis) -> float:
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def server_commands(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def variants(jobs: int) -> dict[str, Callable[[], None]]:
    import wurk
    from wurk.workflow import Workflow, fan_out

    @wurk.job(name="bench.value")
    def value(n: int) -> int:
        return n + 1

    @wurk.job(name="bench.spread")
    def spread(count: int) -> int:
        fan_out(value, [[n] for n in range(count)])
        return count

    @wurk.job(name="bench.gather")
    def gather(values: list[int]) -> int:
        return len(values)

    def group() -> None:
        wf = Workflow("group")
        for n in range(jobs):
            wf.step(value, n)
        wf.start()

    def chain() -> None:
        wf = Workflow("chain")
        step = wf.step(value, 0)
        for _ in range(jobs - 1):
            step = wf.step(value, step)
        wf.start()

    def fan() -> None:
        wf = Workflow("fan")
        wf.step(gather, wf.step(spread, jobs).children)
        wf.start()

    def nested() -> None:
        wf = Workflow("nested")
        for start in range(0, jobs, 10):
            inner = Workflow("inner")
            for n in range(start, min(start + 10, jobs)):
                inner.step(value, n)
            wf.step(inner)
        wf.start()

    return {"plain": lambda: value.perform_bulk([[n] for n in range(jobs)]) and None,
            "result_ttl": lambda: value.set(result_ttl=600).perform_bulk(
                [[n] for n in range(jobs)]) and None,
            "group": group, "chain": chain, "fan-out": fan, "nested": nested}


def run(url: str, jobs: int, rounds: int) -> dict[str, dict[str, float]]:
    from tests.helpers.runner import Drain

    import wurk

    client = redis.Redis.from_url(url)
    config = wurk.configure(redis_url=url, skip_default_job_logging=True)
    drain = Drain(config)
    pushes = variants(jobs)
    found: dict[str, list[tuple[float, float, float]]] = {name: [] for name in pushes}
    pushes["plain"]()  # warm-up: imports, connections, scripts loaded
    drain()
    for _ in range(rounds):
        for name, push in pushes.items():
            client.flushall()
            push()
            cpu, server, commands = time.process_time(), server_cpu(client), \
                server_commands(client)
            drain()
            found[name].append(((time.process_time() - cpu) / jobs * 1e6,
                                (server_cpu(client) - server) / jobs * 1e6,
                                (server_commands(client) - commands) / jobs))
    drain.close()
    config.close()
    client.close()
    return {name: {"worker_us": statistics.median(r[0] for r in runs),
                   "redis_us": statistics.median(r[1] for r in runs),
                   "cmds": statistics.median(r[2] for r in runs)}
            for name, runs in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    with redis_url() as url:
        figures = run(url, options.jobs, options.rounds)
    print(f"{options.jobs} jobs a run, median of {options.rounds}; per job:")
    print(f"{'variant':<12}{'worker CPU µs':>15}{'Redis CPU µs':>15}{'commands':>10}")
    for name, row in figures.items():
        print(f"{name:<12}{row['worker_us']:>15.0f}{row['redis_us']:>15.0f}"
              f"{row['cmds']:>10.1f}")


if __name__ == "__main__":
    main()
