"""wurk: ``wurk worker -C benchmarks/peers/wurk.yml -r benchmarks.peers.wurk_jobs -c C``
from the project's own .venv; several processes are one ``wurk swarm -n P`` (its children
spread over the CPUs when pinned). ``wurk.yml`` asks for reliable fetch and
``cpu_affinity: auto`` and follows BENCH_QUIET for per-job logging.

"wurk_os" is the same with ``cpu_affinity`` off (wurk's default: the OS places threads).
"wurk_redispy" is "wurk" with the jobs writing through a redis-py client, as the Python peers'
jobs do, instead of ``wurk.redis()`` (``wurk_jobs.py``)."""

from __future__ import annotations

from . import Argv, System, Tools, probe, python_enqueue

CONFIG = "benchmarks/peers/wurk.yml"


def system(tools: Tools) -> System:
    return _system(tools, "wurk", pinned=True)


def unpinned(tools: Tools) -> System:
    return _system(tools, "wurk_os", pinned=False)


def redis_py_jobs(tools: Tools) -> System:
    return _system(tools, "wurk_redispy", pinned=True, redis_py=True)


def _system(tools: Tools, name: str, *, pinned: bool, redis_py: bool = False) -> System:
    wurk = str(tools.project_bin("wurk"))
    prefix = ["env", "BENCH_WURK_JOB_CLIENT=redis-py"] if redis_py else []

    def workers(processes: int, concurrency: int) -> list[Argv]:
        command = ["worker"] if processes == 1 else ["swarm", "-n", str(processes)]
        return [[*prefix, wurk, *command, "-C", CONFIG, "-r", "benchmarks.peers.wurk_jobs",
                 "-c", str(concurrency), *([] if pinned else ["--cpu-affinity", "none"])]]

    missing = probe([wurk, "worker", "--help"], cwd=tools.root)
    return System(
        name=name, enqueue=python_enqueue(tools.project_bin("python"), "wurk"),
        workers=workers, has_bulk=True,
        unavailable=None if tools.project_bin("python").exists() else
        f"{tools.project_bin('python')} missing: run ./scripts/test",
        no_worker="worker not available yet" if missing else None,
        notes=[f"{name}: reliable fetch, " + ("processor threads on one CPU (cpu_affinity "
                                               "auto)" if pinned else "threads placed by the OS")
               + (", jobs INCR through redis-py" if redis_py else ", jobs INCR through "
                  "wurk.redis()")])
