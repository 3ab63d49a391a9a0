"""Real Ruby Sidekiq beside wurk, for the live interop tests (``tests/interop``).

1. ``sidekiq_missing()``: why Ruby Sidekiq cannot run here (None when it can): the tests are
   then skipped with that reason, loudly; ``.ci/run`` installs Debian's ``ruby-sidekiq``.
2. ``ruby(script, *args)`` runs one of ``tests/interop/ruby/*.rb`` against ``REDIS_URL`` and
   returns what it printed; ``Processes`` starts ``sidekiq`` and ``rackup`` (and a wurk
   worker) and stops every one it started.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RUBY = ROOT / "tests" / "interop" / "ruby"
SIDEKIQ_SERIES = "6.4."


@functools.cache  # three test modules ask at collection: Ruby loads Sidekiq once
def sidekiq_missing() -> str | None:
    for tool in ("ruby", "sidekiq", "rackup"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not on PATH (apt-get install ruby-sidekiq; .ci/run does)"
    probe = subprocess.run(
        ["ruby", "-e", "require 'sidekiq'; require 'sidekiq/web'; require 'webrick'; "
                       "print Sidekiq::VERSION"],
        capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        return f"Ruby cannot load Sidekiq: {probe.stderr.strip()[-300:]}"
    if not probe.stdout.startswith(SIDEKIQ_SERIES):
        return f"Sidekiq {probe.stdout} is installed; these tests speak to {SIDEKIQ_SERIES}x"
    return None


def ruby(script: str, *args: str) -> Any:
    """Run ``tests/interop/ruby/<script>``; its standard output, parsed as JSON."""
    done = subprocess.run(["ruby", str(RUBY / script), *args], capture_output=True, text=True,
                          timeout=60, cwd=RUBY, env=os.environ.copy())
    if done.returncode != 0:
        raise AssertionError(f"{script} failed ({done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout)


class Processes:
    """Long-running processes of one test, each logging to a file; ``stop`` ends them all."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[tuple[subprocess.Popen[str], Path]] = []

    def start(self, name: str, argv: list[str], *, cwd: Path = ROOT,
              env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        log = self.directory / f"{name}.log"
        process = subprocess.Popen(argv, cwd=cwd, stdout=log.open("w"),
                                   stderr=subprocess.STDOUT, text=True,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        self.started.append((process, log))
        return process

    def wurk_worker(self, config: Path, *args: str) -> subprocess.Popen[str]:
        return self.start("wurk-worker", [sys.executable, "-m", "wurk", "worker", "-r",
                                          "tests.interop.wurk_jobs", "-C", str(config), *args])

    def output(self, name: str) -> str:
        return (self.directory / f"{name}.log").read_text()

    def stop(self) -> None:
        for process, _ in self.started:
            if process.poll() is None:
                process.terminate()
        for process, _ in self.started:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
