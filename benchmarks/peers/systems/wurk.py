"""wurk: ``wurk worker -C benchmarks/peers/wurk.yml -r benchmarks.peers.wurk_jobs -c C``
from ``benchmarks/peers/.venv-wurk`` (wurk installed as a user installs it, no extras;
``Tools.wurk_bin``), with wurk's defaults (``wurk.yml`` only follows BENCH_QUIET
for per-job logging); several processes are one ``wurk swarm -n P``.

"wurk" writes through ``wurk.redis()``, "wurk_redispy" through a redis-py client (as the
Python peers' jobs do): the two job bodies of the headline. "wurk_pinned" and
"wurk_redispy_pinned" run the whole process under ``taskset -c <cpu>``, as
"sidekiq_pinned" runs Sidekiq: the both-pinned pair. (wurk's own ``--cpu-affinity``
would hold only its processor threads, leaving its other threads the other CPU: not the
same thing as Sidekiq's row, so not used here.)
"wurk_nometrics" is "wurk" with execution metrics off (``metrics: false``), to price them.
"wurk_async" is the async row's worker: ``--async-concurrency`` set to the row's
concurrency, its jobs INCRing through redis-py's asyncio client as arq's and SAQ's do."""

from __future__ import annotations

from . import LAST_CPU, Argv, System, Tools, probe, python_enqueue

CONFIG = "benchmarks/peers/wurk.yml"


def system(tools: Tools) -> System:
    return _system(tools, "wurk")


def redis_py_jobs(tools: Tools) -> System:
    return _system(tools, "wurk_redispy", redis_py=True)


def pinned(tools: Tools) -> System:
    return _system(tools, "wurk_pinned", pinned=True)


def redis_py_pinned(tools: Tools) -> System:
    return _system(tools, "wurk_redispy_pinned", pinned=True, redis_py=True)


def no_metrics(tools: Tools) -> System:
    """The "wurk" row with execution metrics off: what the (default-on) metrics cost."""
    return _system(tools, "wurk_nometrics", metrics=False)


def async_jobs(tools: Tools) -> System:
    return _system(tools, "wurk_async", async_row=True, redis_py=True)


def _system(tools: Tools, name: str, *, pinned: bool = False, redis_py: bool = False,
            async_row: bool = False, metrics: bool = True) -> System:
    wurk = str(tools.wurk_bin("wurk"))
    prefix = ["env", "BENCH_WURK_JOB_CLIENT=redis-py"] if redis_py else []
    if not metrics:
        prefix = [*(prefix or ["env"]), "BENCH_WURK_METRICS=false"]  # read by wurk.yml

    def workers(processes: int, concurrency: int) -> list[Argv]:
        command = ["worker"] if processes == 1 else ["swarm", "-n", str(processes)]
        threads = ["-c", "10", "--async-concurrency", str(concurrency)] if async_row \
            else ["-c", str(concurrency)]
        pin = ["taskset", "-c", LAST_CPU] if pinned else []
        sized = [*(prefix or ["env"]), f"BENCH_CONCURRENCY={concurrency}"] if async_row \
            else prefix
        return [[*sized, *pin, wurk, *command, "-C", CONFIG, "-r",
                 "benchmarks.peers.wurk_jobs", *threads]]

    missing = probe([wurk, "worker", "--help"], cwd=tools.root)
    body = "jobs INCR through redis-py" if redis_py else "jobs INCR through wurk.redis()"
    return System(
        name=name, enqueue=python_enqueue(tools.wurk_bin("python"), "wurk"),
        workers=workers, has_bulk=True,
        unavailable=None if tools.wurk_bin("python").exists() else
        f"{tools.wurk_bin('python')} missing: run ./scripts/test",
        no_worker="worker not available yet" if missing else None,
        notes=[f"{name}: " + (f"taskset -c {LAST_CPU}" if pinned else "defaults")
               + f" (reliable fetch, cpu_affinity auto), {body}"
               + ("" if metrics else ", execution metrics off")
               + (", 10 threads + async slots" if async_row else "")])
