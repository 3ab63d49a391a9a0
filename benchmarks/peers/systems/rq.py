"""RQ, two ways: ``rq worker default`` forks a child per job ("rq_fork"); with
``--worker-class rq.worker.SimpleWorker`` jobs run in the worker itself ("rq_simple").
An RQ worker runs one job at a time, so concurrency does not apply; processes do.
``--quiet`` turns its per-job log lines off."""

from __future__ import annotations

from . import Argv, System, Tools, copies, peers_missing, python_enqueue

SIMPLE = "rq.worker.SimpleWorker"


def _system(tools: Tools, name: str, worker_class: str | None) -> System:
    rq = str(tools.peer_bin("rq"))
    extra = ["--worker-class", worker_class] if worker_class else []
    extra += [] if tools.job_logs else ["--quiet"]

    def worker(_concurrency: int) -> Argv:
        # The URL comes from RQ_REDIS_URL, which the harness sets.
        return [rq, "worker", *extra, "default"]

    return System(name=name, enqueue=python_enqueue(tools.peer_bin("python"), "rq"),
                  workers=copies(worker), has_bulk=True,
                  unavailable=peers_missing(tools, "rq"),
                  notes=[f"{name}: one job at a time per worker (concurrency n/a)"])


def simple(tools: Tools) -> System:
    return _system(tools, "rq_simple", SIMPLE)


def fork(tools: Tools) -> System:
    return _system(tools, "rq_fork", None)
