"""Ruby Sidekiq (Debian's ruby-sidekiq 6.4): ``ruby --yjit $(which sidekiq) -r
./benchmarks/peers/sidekiq_jobs.rb -c C -q default`` — basic fetch, YJIT when this Ruby
has it, otherwise as installed: redis-rb's Ruby driver, its deprecation warnings on.

"sidekiq_nojit" is the same without YJIT: Ruby 3.1's YJIT maps and touches its whole code
area (256 MiB by default) at boot, so only the plain interpreter shows Sidekiq's own RSS.

"sidekiq_pinned" is the YJIT one under ``taskset`` on one CPU, as the pinned wurk rows run:
the comparison for what pinning alone gives.

"sidekiq_tuned" is the YJIT one with the settings a Sidekiq user could add: the hiredis
driver (when ruby-hiredis is installed) and redis-rb's deprecation warnings off — the
fastest Sidekiq this machine runs, a row beside the defaults, not the headline.
"sidekiq_nojit_tuned" is those settings without YJIT: the hiredis driver makes plain-Ruby
Sidekiq's RSS smaller too, so it is the memory row for a tuned Sidekiq."""

from __future__ import annotations

import shutil

from . import LAST_CPU, Argv, System, Tools, copies, probe

JOBS = "./benchmarks/peers/sidekiq_jobs.rb"
PUSH = "benchmarks/peers/sidekiq_push.rb"


def ruby_flags(tools: Tools, notes: list[str], name: str, *, yjit: bool) -> list[str]:
    if not yjit:
        notes.append(f"{name}: plain Ruby interpreter")
        return []
    if probe(["ruby", "--yjit", "-e", "1"], cwd=tools.root) is None:
        notes.append(f"{name}: YJIT on")
        return ["--yjit"]
    notes.append(f"{name}: this Ruby has no YJIT; run without it")
    return []


def driver_note(tools: Tools, name: str, *, tuned: bool) -> str:
    if not tuned:
        return f"{name}: redis-rb's Ruby driver, deprecation warnings on (as installed)"
    hiredis = probe(["ruby", "-e", "require 'hiredis'"], cwd=tools.root) is None
    driver = "hiredis driver" if hiredis else "no ruby-hiredis: redis-rb's Ruby driver"
    return f"{name}: {driver}, deprecation warnings off"


def system(tools: Tools) -> System:
    return _system(tools, "sidekiq", yjit=True)


def nojit(tools: Tools) -> System:
    return _system(tools, "sidekiq_nojit", yjit=False)


def pinned(tools: Tools) -> System:
    return _system(tools, "sidekiq_pinned", yjit=True, pin=True)


def tuned(tools: Tools) -> System:
    return _system(tools, "sidekiq_tuned", yjit=True, tuned=True)


def nojit_tuned(tools: Tools) -> System:
    return _system(tools, "sidekiq_nojit_tuned", yjit=False, tuned=True)


def _system(tools: Tools, name: str, *, yjit: bool, pin: bool = False,
            tuned: bool = False) -> System:
    sidekiq = shutil.which("sidekiq")
    if shutil.which("ruby") is None or sidekiq is None:
        return System(name=name, enqueue=lambda *_: [], workers=lambda *_: [],
                      has_bulk=True, unavailable="ruby-sidekiq not installed (setup.sh)")
    notes: list[str] = []
    flags = ruby_flags(tools, notes, name, yjit=yjit)
    notes.append(driver_note(tools, name, tuned=tuned))
    # The enqueue side loads the same settings (sidekiq_push.rb requires sidekiq_jobs.rb).
    env = ["env", "BENCH_SIDEKIQ_TUNED=true"] if tuned else []

    prefix: list[str] = list(env)
    if pin:
        if shutil.which("taskset") is None:
            return System(name=name, enqueue=lambda *_: [], workers=lambda *_: [],
                          has_bulk=True, unavailable="taskset (util-linux) not installed")
        prefix += ["taskset", "-c", LAST_CPU]
        notes.append(f"{name}: taskset -c {LAST_CPU}")

    def worker(concurrency: int) -> Argv:
        return [*prefix, "ruby", *flags, sidekiq, "-r", JOBS, "-c", str(concurrency),
                "-q", "default"]

    def enqueue(mode: str, jobs: int, rate: float, max_seconds: float) -> Argv:
        return [*env, "ruby", *flags, PUSH, mode, str(jobs), str(rate), str(max_seconds)]

    return System(name=name, enqueue=enqueue, workers=copies(worker), has_bulk=True,
                  notes=notes)
