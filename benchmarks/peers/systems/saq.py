"""SAQ: ``saq benchmarks.peers.saq_jobs.settings``; its ``concurrency`` comes from
``BENCH_CONCURRENCY``, read by the settings module. Async jobs only: the async row."""

from __future__ import annotations

from . import Argv, System, Tools, peers_missing, python_enqueue

SETTINGS = "benchmarks.peers.saq_jobs.settings"


def system(tools: Tools) -> System:
    saq = str(tools.peer_bin("saq"))

    def workers(processes: int, concurrency: int) -> list[Argv]:
        return [["env", f"BENCH_CONCURRENCY={concurrency}", saq, SETTINGS]
                for _ in range(processes)]

    return System(name="saq", enqueue=python_enqueue(tools.peer_bin("python"), "saq"),
                  workers=workers, has_bulk=False,
                  unavailable=peers_missing(tools, "saq"),
                  notes=["saq: async jobs only"])
