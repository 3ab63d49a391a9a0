"""wurk: ``wurk worker -C benchmarks/peers/wurk.yml -r benchmarks.peers.wurk_jobs -c C``,
one OS process per worker (the swarm can replace the copies), from the project's own
.venv. ``wurk.yml`` asks for reliable fetch and follows BENCH_QUIET for per-job logging."""

from __future__ import annotations

from . import Argv, System, Tools, copies, probe, python_enqueue

CONFIG = "benchmarks/peers/wurk.yml"


def system(tools: Tools) -> System:
    wurk = str(tools.project_bin("wurk"))

    def worker(concurrency: int) -> Argv:
        return [wurk, "worker", "-C", CONFIG, "-r", "benchmarks.peers.wurk_jobs",
                "-c", str(concurrency)]

    missing = probe([wurk, "worker", "--help"], cwd=tools.root)
    return System(
        name="wurk", enqueue=python_enqueue(tools.project_bin("python"), "wurk"),
        workers=copies(worker), has_bulk=True,
        unavailable=None if tools.project_bin("python").exists() else
        f"{tools.project_bin('python')} missing: run ./scripts/test",
        no_worker="worker not available yet" if missing else None,
        notes=["wurk: reliable fetch"])
