"""Jobs of the fair-queue system test, run by real ``wurk worker`` processes (``-r``).

Each run appends ``<tenant> <n> <start> <end>`` (epoch seconds, taken inside the job) to a
file of its worker process under ``$WURK_FAIR_LOG``, so the test counts from the jobs' own
timestamps how many of a partition ran at once.
"""

from __future__ import annotations

import os
import time

import wurk

QUEUE = "fair"
_files: dict[int, int] = {}


def _log() -> int:
    pid = os.getpid()
    if pid not in _files:
        path = os.path.join(os.environ["WURK_FAIR_LOG"], f"runs-{pid}.txt")
        _files[pid] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    return _files[pid]


@wurk.job(name="Fair::Work", queue=QUEUE, retry=False)
def fair_work(tenant: str, n: int, seconds: float) -> None:
    start = time.time()
    if seconds:
        time.sleep(seconds)
    os.write(_log(), f"{tenant} {n} {start:.6f} {time.time():.6f}\n".encode())


@wurk.job(name="Fair::Hold", queue=QUEUE)
def fair_hold(tenant: str, n: int, seconds: float) -> None:
    """Holds its slot ``seconds`` on its first run only, logging its start first (so a killed
    run is seen); a run again after its worker was killed ends at once."""
    os.write(_log(), f"start {tenant} {n} {time.time():.6f}\n".encode())
    marker = os.path.join(os.environ["WURK_FAIR_LOG"], f"held-{tenant}-{n}")
    if not os.path.exists(marker):
        open(marker, "w").close()
        time.sleep(seconds)
    os.write(_log(), f"{tenant} {n} {time.time():.6f} {time.time():.6f}\n".encode())
