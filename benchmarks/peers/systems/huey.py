"""Huey: ``huey_consumer benchmarks.peers.huey_jobs.huey -w C -k thread`` (``-q`` turns
its per-task log lines off)."""

from __future__ import annotations

from . import Argv, System, Tools, copies, peers_missing, python_enqueue


def system(tools: Tools) -> System:
    consumer = str(tools.peer_bin("huey_consumer"))

    def worker(concurrency: int) -> Argv:
        return [consumer, "benchmarks.peers.huey_jobs.huey", "-w", str(concurrency),
                "-k", "thread", *([] if tools.job_logs else ["-q"])]

    return System(name="huey", enqueue=python_enqueue(tools.peer_bin("python"), "huey"),
                  workers=copies(worker), has_bulk=False,
                  unavailable=peers_missing(tools, "huey_consumer"))
