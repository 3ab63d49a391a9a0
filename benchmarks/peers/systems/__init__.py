"""The systems under comparison, one adapter module each.

1. ``Tools``: where the interpreters are (the peers' venv, the project's venv), and
   whether workers log every job (their default) or not.
2. ``System``: what the harness needs from an adapter — the command that pushes jobs, the
   commands that start the worker processes, whether bulk push exists, why it cannot run.
3. ``build``: the adapters by name, in the table's order.

An adapter only describes commands; the jobs themselves live in ``benchmarks/peers/
<name>_jobs.py`` (or ``sidekiq_jobs.rb``) and run in the system's own interpreter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# How long a probe command (``--help``, ``ruby -e 1``) may take before it counts as broken.
PROBE_TIMEOUT = 30.0
# The one CPU the pinned rows run on (wurk's and Sidekiq's alike, under taskset).
LAST_CPU = str(max(os.sched_getaffinity(0)))

Argv = list[str]


@dataclass(frozen=True)
class Tools:
    root: Path          # the repository: every command runs from here
    peers_dir: Path     # benchmarks/peers: its .venv (and .venv-arq) come from setup.sh
    project_venv: Path  # the project's .venv (wurk installed editable)
    job_logs: bool = False  # False: per-job log lines off wherever a system can turn them off

    def peer_bin(self, name: str, venv: str = ".venv") -> Path:
        return self.peers_dir / venv / "bin" / name

    def project_bin(self, name: str) -> Path:
        return self.project_venv / "bin" / name

    def wurk_bin(self, name: str) -> Path:
        """wurk as a user installs it (``pip install wurk``: no extras, no test tools), from
        ``.venv-wurk`` (setup.sh); the project's .venv where that is missing. The project's
        venv holds the test suite's packages, and redis-py imports the OpenTelemetry SDK
        whenever it is installed: that would count ~3 MB of RSS no user of wurk pays."""
        own = self.peers_dir / ".venv-wurk" / "bin" / name
        return own if own.exists() else self.project_bin(name)


@dataclass(frozen=True)
class System:
    name: str
    # (mode, jobs, rate, max_seconds) -> argv printing {"seconds": ..., "jobs": ...};
    # mode is single|bulk|paced; max_seconds bounds single mode
    enqueue: Callable[[str, int, float, float], Argv]
    # (processes, concurrency) -> one argv per OS process to start
    workers: Callable[[int, int], list[Argv]]
    has_bulk: bool
    unavailable: str | None = None  # why this system cannot run here at all, or None
    no_worker: str | None = None    # why its worker cannot run (enqueue still measured)
    notes: list[str] = field(default_factory=list)


def python_enqueue(python: Path, name: str) -> Callable[[str, int, float, float], Argv]:
    def argv(mode: str, jobs: int, rate: float, max_seconds: float) -> Argv:
        return [str(python), "-m", "benchmarks.peers.push", name, mode, "--jobs", str(jobs),
                "--rate", str(rate), "--max-seconds", str(max_seconds)]
    return argv


def copies(argv: Callable[[int], Argv]) -> Callable[[int, int], list[Argv]]:
    """Workers for systems scaled by starting the same command once per process."""
    def workers(processes: int, concurrency: int) -> list[Argv]:
        return [argv(concurrency) for _ in range(processes)]
    return workers


def probe(argv: Argv, *, cwd: Path) -> str | None:
    """None when ``argv`` runs and exits 0, else one line saying why not."""
    if not Path(argv[0]).exists() and shutil.which(argv[0]) is None:
        return f"{argv[0]} not found"
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, timeout=PROBE_TIMEOUT,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{' '.join(argv)}: {exc}"
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
        return f"{' '.join(argv)} exited {done.returncode}: {lines[-1] if lines else ''}"
    return None


def peers_missing(tools: Tools, script: str, venv: str = ".venv") -> str | None:
    if not tools.peer_bin(script, venv).exists():
        return f"{tools.peer_bin(script, venv)} missing: run benchmarks/peers/setup.sh"
    return None


ORDER = ("wurk", "wurk_redispy", "sidekiq", "wurk_pinned", "wurk_redispy_pinned",
         "sidekiq_pinned", "wurk_nometrics", "sidekiq_nojit", "sidekiq_tuned",
         "sidekiq_nojit_tuned", "dramatiq", "huey", "celery", "arq", "rq_simple", "rq_fork",
         "bare", "bare_redispy")
# The async row (``--async-row``): async jobs awaiting 50 ms at one concurrency.
ASYNC_ORDER = ("wurk_async", "arq", "saq", "bare_async", "body_async")


def build(name: str, tools: Tools) -> System:
    """The adapter ``name`` (of ``ORDER`` or ``ASYNC_ORDER``), probed for availability."""
    from . import arq, bare, celery, dramatiq, huey, rq, saq, sidekiq, wurk

    makers: dict[str, Callable[[Tools], System]] = {
        "wurk": wurk.system, "wurk_redispy": wurk.redis_py_jobs,
        "wurk_pinned": wurk.pinned, "wurk_redispy_pinned": wurk.redis_py_pinned,
        "wurk_async": wurk.async_jobs, "wurk_nometrics": wurk.no_metrics, "saq": saq.system,
        "sidekiq": sidekiq.system,
        "sidekiq_pinned": sidekiq.pinned, "sidekiq_nojit": sidekiq.nojit,
        "sidekiq_tuned": sidekiq.tuned, "sidekiq_nojit_tuned": sidekiq.nojit_tuned,
        "dramatiq": dramatiq.system,
        "huey": huey.system, "celery": celery.system, "arq": arq.system,
        "rq_simple": rq.simple, "rq_fork": rq.fork,
        "bare": bare.system, "bare_redispy": bare.redis_py_jobs,
        "bare_async": bare.async_jobs, "body_async": bare.async_body,
    }
    if name not in makers:
        raise ValueError(f"unknown system {name!r}: choose from "
                         f"{', '.join(dict.fromkeys(ORDER + ASYNC_ORDER))}")
    return makers[name](tools)
