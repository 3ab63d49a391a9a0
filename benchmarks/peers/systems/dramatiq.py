"""Dramatiq: ``dramatiq benchmarks.peers.dramatiq_jobs --processes P --threads C`` — its
own supervisor starts the P worker processes, so one command serves every P."""

from __future__ import annotations

from . import Argv, System, Tools, peers_missing, python_enqueue


def system(tools: Tools) -> System:
    dramatiq = str(tools.peer_bin("dramatiq"))

    def workers(processes: int, concurrency: int) -> list[Argv]:
        return [[dramatiq, "benchmarks.peers.dramatiq_jobs",
                 "--processes", str(processes), "--threads", str(concurrency)]]

    return System(name="dramatiq",
                  enqueue=python_enqueue(tools.peer_bin("python"), "dramatiq"),
                  workers=workers, has_bulk=False,
                  unavailable=peers_missing(tools, "dramatiq"))
