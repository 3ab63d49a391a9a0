"""Enqueue side of the comparison, run under a system's own interpreter:

    python -m benchmarks.peers.push SYSTEM single|bulk|paced --jobs N [--rate R]

Imports ``benchmarks.peers.<SYSTEM>_jobs`` under its real module name (so every system
records the job's import path, never ``__main__``) and prints one JSON line of timings.
"""

from __future__ import annotations

import importlib
import sys

from benchmarks.peers import shared


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m benchmarks.peers.push SYSTEM MODE --jobs N")
    jobs = importlib.import_module(f"benchmarks.peers.{sys.argv[1]}_jobs")
    shared.enqueue_main(jobs, sys.argv[2:])


if __name__ == "__main__":
    main()
