"""Celery with the thread pool: ``celery -A benchmarks.peers.celery_jobs worker --pool
threads --concurrency C``; Redis broker, no result backend, default acks and prefetch."""

from __future__ import annotations

from . import Argv, System, Tools, copies, peers_missing, python_enqueue


def system(tools: Tools) -> System:
    celery = str(tools.peer_bin("celery"))

    def worker(concurrency: int) -> Argv:
        return [celery, "-A", "benchmarks.peers.celery_jobs", "worker", "--pool", "threads",
                "--concurrency", str(concurrency), "--loglevel", "WARNING"]

    return System(name="celery", enqueue=python_enqueue(tools.peer_bin("python"), "celery"),
                  workers=copies(worker), has_bulk=False,
                  unavailable=peers_missing(tools, "celery"))
