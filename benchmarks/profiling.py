"""What profiling a job costs it: a CPU-bound job through wurk's profiler middleware, profiled
and not, in the same run, with the other samplers considered beside it.

    python -m benchmarks.profiling [--jobs 30] [--rounds 3]

Each round runs the job ``--jobs`` times in each mode, the modes taking turns job by job,
and takes each mode's median job time (wall clock); the figures are the medians of
``--rounds`` rounds. Two jobs: ``mixed`` (JSON,
sorting, a loop: little time in calls) and ``calls`` (a recursive Fibonacci: nearly all
time in Python calls, the worst case for a profiler that hooks calls). Modes:

1. ``none``: the job through ``JobProfiler`` without ``profile`` (one dict lookup);
2. ``wurk``: with ``profile``: pyinstrument sampling every 1 ms, the speedscope rendering,
   the gzip and the ``MULTI`` to Redis — everything a profiled job pays;
3. ``pyinstrument``: pyinstrument alone (no render, no store);
4. ``yappi``: yappi's tracing profiler (wall clock), stats read after each job;
5. ``py-spy``: py-spy sampling this whole process at 1,000 Hz from outside (``--pid``),
   attached for a while and compared with the job unsampled just before and after it
   (it samples the whole process, so it cannot be interleaved job by job); needs ptrace
   (root or CAP_SYS_PTRACE) and is skipped where it cannot attach.

A sampler that is not installed is reported as missing. Needs a Redis: ``REDIS_URL`` or a
private server (``benchmarks._server``). Never part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import wurk
from benchmarks._server import redis_url
from wurk.profiling.middleware import JobProfiler

Job = Callable[[], Any]
# py-spy is given this long to attach before jobs are timed, and to write its file at stop.
SPY_SETTLE = 1.0
SPY_STOP_TIMEOUT = 10.0


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def calls() -> int:
    return sum(fib(18) for _ in range(20))


def mixed() -> int:
    rows = [{"id": n, "name": f"item {n}", "tags": ["a", "b", str(n % 7)]} for n in range(3000)]
    back = json.loads(json.dumps(rows))
    back.sort(key=lambda row: (row["tags"][2], -row["id"]))
    return sum(len(row["name"]) * (row["id"] % 13) for row in back)


def timed(run: Callable[[], Any], jobs: int) -> float:
    """The median seconds of one job over ``jobs`` runs."""
    times = []
    for _ in range(jobs):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def through_wurk(link: JobProfiler, job: Job, profiled: bool) -> Callable[[], Any]:
    counter = iter(range(10**9))

    def run() -> Any:
        payload: dict[str, Any] = {"class": "Bench::Profiled", "args": [],
                                   "jid": f"{next(counter):024x}", "queue": "default"}
        if profiled:
            payload["profile"] = "bench"
        return link(None, payload, "default", job)
    return run


def pyinstrument_alone(job: Job) -> Callable[[], Any] | None:
    try:
        from pyinstrument import Profiler
    except ImportError:
        return None

    def run() -> Any:
        profiler = Profiler(interval=0.001, async_mode="disabled")
        profiler.start()
        try:
            return job()
        finally:
            profiler.stop()
    return run


def yappi_tracing(job: Job) -> Callable[[], Any] | None:
    try:
        import yappi
    except ImportError:
        return None
    yappi.set_clock_type("wall")

    def run() -> Any:
        yappi.clear_stats()
        yappi.start()
        try:
            return job()
        finally:
            yappi.stop()
            yappi.get_func_stats()
    return run


def modes(link: JobProfiler, job: Job) -> dict[str, Callable[[], Any] | None]:
    return {"none": through_wurk(link, job, False), "wurk": through_wurk(link, job, True),
            "pyinstrument": pyinstrument_alone(job), "yappi": yappi_tracing(job)}


def py_spy_round(job: Job, jobs: int) -> tuple[float, float] | None:
    """(unsampled, sampled) median job time with py-spy on this process, or None."""
    binary = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(binary):
        return None
    before = timed(job, jobs)
    with tempfile.TemporaryDirectory() as folder:
        spy = subprocess.Popen([binary, "record", "--pid", str(os.getpid()), "--rate", "1000",
                                "--format", "speedscope", "-o", f"{folder}/out.json"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(SPY_SETTLE)
            if spy.poll() is not None:
                return None  # it could not attach (no ptrace here)
            sampled = timed(job, jobs)
        finally:
            spy.send_signal(signal.SIGINT)
            try:
                spy.wait(SPY_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()
    return (before + timed(job, jobs)) / 2, sampled  # unsampled: just before and just after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    with redis_url() as url:
        config = wurk.Config(redis_url=url)
        link = JobProfiler(config)
        for name, job in (("mixed", mixed), ("calls", calls)):
            report(name, job, link, options.jobs, options.rounds)
        config.close()


def interleaved(runs: dict[str, Callable[[], Any]], jobs: int) -> dict[str, float]:
    """The median seconds of one job in each mode, the modes taking turns job by job, so a
    machine's load changing meanwhile weighs on each alike."""
    times: dict[str, list[float]] = {mode: [] for mode in runs}
    for _ in range(jobs):
        for mode, run in runs.items():
            started = time.perf_counter()
            run()
            times[mode].append(time.perf_counter() - started)
    return {mode: statistics.median(found) for mode, found in times.items()}


def report(name: str, job: Job, link: JobProfiler, jobs: int, rounds: int) -> None:
    runs = {mode: run for mode, run in modes(link, job).items() if run is not None}
    found: dict[str, list[float]] = {mode: [] for mode in runs}
    spy: list[tuple[float, float]] = []
    for _ in range(rounds):
        for mode, median in interleaved(runs, jobs).items():
            found[mode].append(median)
        measured = py_spy_round(job, jobs)
        if measured is not None:
            spy.append(measured)
    base = statistics.median(found["none"])
    print(f"{name}: median of {rounds} rounds of {jobs} jobs")
    for mode, times in found.items():
        per_job = statistics.median(times)
        print(f"  {mode:13} {per_job * 1e3:8.2f} ms/job  ×{per_job / base:.2f}")
    for mode in ("pyinstrument", "yappi"):
        if mode not in found:
            print(f"  {mode:13} not installed")
    if spy:
        plain = statistics.median(p for p, _ in spy)
        sampled = statistics.median(s for _, s in spy)
        print(f"  {'py-spy':13} {sampled * 1e3:8.2f} ms/job  ×{sampled / plain:.2f} "
              f"(against {plain * 1e3:.2f} ms unsampled around it)")
    else:
        print(f"  {'py-spy':13} not installed, or it cannot attach here")


if __name__ == "__main__":
    main()
