"""arq: ``arq benchmarks.peers.arq_jobs.WorkerSettings``; ``max_jobs`` (its concurrency)
comes from ``BENCH_CONCURRENCY``, read by the settings class. arq lives in its own venv
(``.venv-arq``): it requires redis-py < 6, the current kombu (Celery) ≥ 6.4."""

from __future__ import annotations

from collections.abc import Callable

from . import Argv, System, Tools, peers_missing, python_enqueue

SETTINGS = "benchmarks.peers.arq_jobs.WorkerSettings"
VENV = ".venv-arq"


def workers(arq: str) -> Callable[[int, int], list[Argv]]:
    def argvs(processes: int, concurrency: int) -> list[Argv]:
        # env(1) carries the concurrency: arq takes max_jobs only from its settings class.
        return [["env", f"BENCH_CONCURRENCY={concurrency}", arq, SETTINGS]
                for _ in range(processes)]
    return argvs


def system(tools: Tools) -> System:
    return System(name="arq", enqueue=python_enqueue(tools.peer_bin("python", VENV), "arq"),
                  workers=workers(str(tools.peer_bin("arq", VENV))), has_bulk=False,
                  unavailable=peers_missing(tools, "arq", VENV),
                  notes=["arq: default 0.5 s poll"])
