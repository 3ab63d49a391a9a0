"""Ruby Sidekiq (Debian's ruby-sidekiq 6.4): ``ruby --yjit $(which sidekiq) -r
./benchmarks/peers/sidekiq_jobs.rb -c C -q default`` — basic fetch, YJIT when this Ruby
has it, the hiredis driver when ruby-hiredis is installed.

"sidekiq_nojit" is the same without YJIT: Ruby 3.1's YJIT maps and touches its whole code
area (256 MiB by default) at boot, so only the plain interpreter shows Sidekiq's own RSS.

"sidekiq_pinned" is the YJIT one under ``taskset`` on one CPU, as the wurk row pins its
processor threads: the comparison for what pinning alone gives."""

from __future__ import annotations

import os
import shutil

from . import Argv, System, Tools, copies, probe

JOBS = "./benchmarks/peers/sidekiq_jobs.rb"
PUSH = "benchmarks/peers/sidekiq_push.rb"


def ruby_flags(tools: Tools, notes: list[str], *, yjit: bool) -> list[str]:
    if not yjit:
        notes.append("sidekiq_nojit: plain Ruby interpreter")
        return []
    if probe(["ruby", "--yjit", "-e", "1"], cwd=tools.root) is None:
        notes.append("sidekiq: YJIT on")
        return ["--yjit"]
    notes.append("sidekiq: this Ruby has no YJIT; run without it")
    return []


def driver_note(tools: Tools) -> str:
    hiredis = probe(["ruby", "-e", "require 'hiredis'"], cwd=tools.root) is None
    return "sidekiq: hiredis driver" if hiredis else "sidekiq: redis-rb's Ruby driver"


def system(tools: Tools) -> System:
    return _system(tools, "sidekiq", yjit=True)


def nojit(tools: Tools) -> System:
    return _system(tools, "sidekiq_nojit", yjit=False)


def pinned(tools: Tools) -> System:
    return _system(tools, "sidekiq_pinned", yjit=True, pin=True)


def _system(tools: Tools, name: str, *, yjit: bool, pin: bool = False) -> System:
    sidekiq = shutil.which("sidekiq")
    if shutil.which("ruby") is None or sidekiq is None:
        return System(name=name, enqueue=lambda *_: [], workers=lambda *_: [],
                      has_bulk=True, unavailable="ruby-sidekiq not installed (setup.sh)")
    notes: list[str] = []
    flags = ruby_flags(tools, notes, yjit=yjit)
    if yjit:
        notes.append(driver_note(tools))

    prefix: list[str] = []
    if pin:
        if shutil.which("taskset") is None:
            return System(name=name, enqueue=lambda *_: [], workers=lambda *_: [],
                          has_bulk=True, unavailable="taskset (util-linux) not installed")
        prefix = ["taskset", "-c", str(max(os.sched_getaffinity(0)))]
        notes.append(f"{name}: taskset -c {prefix[-1]}")

    def worker(concurrency: int) -> Argv:
        return [*prefix, "ruby", *flags, sidekiq, "-r", JOBS, "-c", str(concurrency),
                "-q", "default"]

    def enqueue(mode: str, jobs: int, rate: float, max_seconds: float) -> Argv:
        return ["ruby", *flags, PUSH, mode, str(jobs), str(rate), str(max_seconds)]

    return System(name=name, enqueue=enqueue, workers=copies(worker), has_bulk=True,
                  notes=notes)
