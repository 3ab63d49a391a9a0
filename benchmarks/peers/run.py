"""wurk side by side with its peers, on one private Redis.

    python -m benchmarks.peers.run [--runs 3] [--jobs 20000] [--only sidekiq,dramatiq]
                                   [--scaling] [--async-row [--async-concurrency 100,1000]]
                                   [--json out.json]

Run it with the peers' interpreter (``benchmarks/peers/.venv/bin/python``, made by
``setup.sh``); wurk runs from the project's ``.venv``. Per system and run:

1. enqueue rate: N jobs pushed in bulk (where the system has it; then flushed), then N
   pushed one call each, timed inside the pushing process;
2. drain: a worker (1 process, concurrency 10) started on those N jobs; the counter they
   INCR is polled until it reaches N. Throughput is shown from the first job seen done
   ("drain/s", boot excluded) and from the worker's start ("+boot/s"); worker CPU per job
   (the process tree, user + system), Redis commands per job (``INFO commandstats``; the
   job's own INCR included, the harness's polls left out), the server's CPU per job (``INFO
   cpu``) and peak RSS (the tree, every 50 ms); the 1-minute load average as it ended;
3. latency: on the same worker, 2,000 jobs pushed at 200/s, each carrying its push time;
   the job RPUSHes (start - push), and p50/p99 come from that list.

Runs are interleaved across systems; every figure is the median over runs. ``--scaling``
instead drains with 1, 2, 4 processes × concurrency 10, 50; ``--async-row`` drains N async
jobs each awaiting 50 ms then INCRing through redis-py's asyncio client, at equal
concurrency (100 and 1,000: wurk's async slots, arq's ``max_jobs``, SAQ's ``concurrency``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from . import harness, shared
from .harness import Drain, Latency, PrivateRedis, WorkerTree
from .systems import ASYNC_ORDER, ORDER, System, Tools, build

ROOT = Path(__file__).resolve().parents[2]
# The workload: one worker process, ten jobs at a time.
PROCESSES, CONCURRENCY = 1, 10
# Latency workload: 2,000 jobs at a steady 200/s (10 s per run).
LATENCY_JOBS, LATENCY_RATE = 2000, 200.0
# Latency is only measured where the drain ran this much faster than the paced rate: a
# system that cannot keep up only shows its backlog growing ("overloaded").
HEADROOM = 1.25
# A drain slower than this is stopped and its rate taken over what it did (unless it is
# about to end): RQ's fork per job (~30/s) would otherwise take 10 minutes per run.
DRAIN_CAP = 15.0
# Single pushes stop after this long: the slowest pushers (arq, ~1,000/s here) would spend
# half a minute on 20,000, and a drain capped anyway needs no more jobs than that.
ENQUEUE_BUDGET = 10.0
SCALING_PROCESSES = (1, 2, 4)
SCALING_CONCURRENCY = (10, 50)
# The async row: each system at each of these concurrencies, its jobs awaiting
# shared.WAIT_SECONDS; the cap a concurrency implies is concurrency / WAIT_SECONDS jobs/s.
ASYNC_CONCURRENCY = (100, 1000)


@dataclass
class Row:
    """One system's figures from one run; None where a figure does not apply."""

    single: float | None = None
    bulk: float | None = None
    drain: Drain | None = None
    latency: Latency | None = None
    rss_mb: float | None = None
    load: float | None = None  # the 1-minute load average when the drain ended
    threads: int | None = None  # peak OS threads of the worker's tree (the async row)


@dataclass
class Bench:
    tools: Tools
    server: PrivateRedis
    env: dict[str, str]
    logs: Path
    jobs: int
    cap: float

    def push(self, system: System, mode: str) -> harness.Pushed:
        return harness.run_enqueue(system, mode, self.jobs, root=ROOT, env=self.env,
                                   budget=ENQUEUE_BUDGET)

    def start(self, system: System, processes: int, concurrency: int) -> WorkerTree:
        log = self.logs / f"{system.name}-p{processes}-c{concurrency}.log"
        return WorkerTree(system.workers(processes, concurrency), root=ROOT, env=self.env,
                          log=log)

    def bulk_rate(self, system: System) -> float | None:
        """Jobs/s of a bulk push of N where the system has one (flushed after)."""
        self.server.reset()
        bulk = None
        if system.has_bulk:
            bulk = self.push(system, "bulk").rate
            self.server.reset()
        return bulk

    def measure(self, system: System) -> Row:
        row = Row(bulk=self.bulk_rate(system))
        pushed = self.push(system, "single")  # these are the jobs the worker drains
        row.single = pushed.rate
        if system.no_worker:
            return row
        self.server.client.config_resetstat()
        tree = self.start(system, PROCESSES, CONCURRENCY)
        try:
            row.drain = harness.drain(self.server, tree, pushed.jobs, cap=self.cap)
            row.load = os.getloadavg()[0]
        finally:
            tree.stop()
        row.rss_mb = tree.peak_rss / 2**20
        if row.drain.steady >= LATENCY_RATE * HEADROOM:
            self.latency(system, row)
        return row

    def latency(self, system: System, row: Row) -> None:
        """On a fresh worker and an empty server (a capped drain leaves a backlog); peak
        RSS is the larger of the two workers'."""
        self.server.reset()
        tree = self.start(system, PROCESSES, CONCURRENCY)
        try:
            row.latency = harness.latency(self.server, system, root=ROOT, env=self.env,
                                          jobs=LATENCY_JOBS, rate=LATENCY_RATE)
        finally:
            tree.stop()
        row.rss_mb = max(row.rss_mb or 0.0, tree.peak_rss / 2**20)

    def waits(self, system: System, concurrency: int) -> Row:
        """The async row: N waiting jobs queued, then one worker drains them, ``concurrency``
        at once."""
        self.server.reset()
        harness.run_enqueue(system, "waits", self.jobs, root=ROOT, env=self.env)
        self.server.client.config_resetstat()
        tree = self.start(system, PROCESSES, concurrency)
        row = Row()
        try:
            row.drain = harness.drain(self.server, tree, self.jobs, cap=self.cap)
            row.load = os.getloadavg()[0]
        finally:
            tree.stop()
        row.rss_mb = tree.peak_rss / 2**20
        row.threads = tree.peak_threads
        return row

    def scale(self, system: System, processes: int, concurrency: int) -> Drain:
        self.server.reset()
        pushed = self.push(system, "bulk" if system.has_bulk else "single")
        self.server.client.config_resetstat()
        tree = self.start(system, processes, concurrency)
        try:
            return harness.drain(self.server, tree, pushed.jobs, cap=self.cap)
        finally:
            tree.stop()


def median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def fmt(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


COLUMNS = ("system", "drain/s", "+boot/s", "single/s", "bulk/s", "p50 ms", "p99 ms",
           "RSS MB", "CPU µs/job", "Redis µs", "cmds/job", "load")
WIDTHS = (20, 9, 9, 9, 9, 8, 9, 7, 11, 9, 9, 6)


def line(cells: list[str]) -> str:
    first, *rest = cells
    padded = (f"{c:>{w}}" for c, w in zip(rest, WIDTHS[1:], strict=True))
    return f"{first:<{WIDTHS[0]}}" + "".join(padded)


def field(rows: list[Row], pick: str) -> float | None:
    """Median over runs of one figure; ``pick`` is 'single' or 'drain.steady' etc."""
    values: list[float | None] = []
    for row in rows:
        value: object = row
        for part in pick.split("."):
            value = getattr(value, part) if value is not None else None
        values.append(value if isinstance(value, float | int) else None)
    return median(values)


FIELDS = ("drain.steady", "drain.with_boot", "single", "bulk", "latency.p50_ms",
          "latency.p99_ms", "rss_mb", "drain.cpu_us", "drain.redis_cpu_us", "drain.commands",
          "load")
DIGITS = (0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1)


def value_cells(rows: list[Row]) -> list[str]:
    capped = any(r.drain is not None and r.drain.capped for r in rows)
    short = any(r.latency is not None and r.latency.recorded < LATENCY_JOBS for r in rows)
    cells = [fmt(field(rows, f), d) for f, d in zip(FIELDS, DIGITS, strict=True)]
    if capped:
        cells[0] += "*"
        cells[1] += "*"
    if short:
        cells[5] = "≥" + cells[5]
    if all(r.drain is not None and r.latency is None for r in rows):
        cells[4:6] = ["—", "overload"]
    return cells


# Ratio columns: (field, True when higher is better). Ratios are oriented so that > 1
# always means wurk is better: wurk/peer for rates, peer/wurk for everything else.
RATIOS = (("drain.steady", True), ("single", True), ("bulk", True),
          ("latency.p99_ms", False), ("rss_mb", False), ("drain.cpu_us", False),
          ("drain.redis_cpu_us", False), ("drain.commands", False))


def ratio_cells(ours: list[Row], theirs: list[Row]) -> list[str]:
    cells = []
    for name, higher in RATIOS:
        a, b = field(ours, name), field(theirs, name)
        if a is None or b is None or min(a, b) <= 0:
            cells.append("—")
        else:
            cells.append(f"{(a / b if higher else b / a):.2f}×")
    return cells


def print_tables(systems: list[System], results: dict[str, list[Row]], runs: int,
                 jobs: int) -> None:
    print(f"\n{jobs:,} no-op jobs (each INCRs a counter), 1 worker process, concurrency 10; "
          f"latency: {LATENCY_JOBS:,} jobs at {LATENCY_RATE:.0f}/s; median of {runs} run(s)")
    print(line(list(COLUMNS)))
    for system in systems:
        cells = value_cells(results[system.name])
        tail = f"   {system.name}: {system.no_worker}" if system.no_worker else ""
        print(line([system.name, *cells]) + tail)
    print_ratios(systems, results)


# Like for like: each wurk row against the Sidekiq row run the same way.
PAIRS = (("wurk", "sidekiq"), ("wurk_redispy", "sidekiq"),
         ("wurk", "sidekiq_tuned"), ("wurk_redispy", "sidekiq_tuned"),
         ("wurk_pinned", "sidekiq_pinned"), ("wurk_redispy_pinned", "sidekiq_pinned"),
         ("wurk", "sidekiq_nojit"), ("wurk", "sidekiq_nojit_tuned"),
         ("wurk", "wurk_nometrics"),
         # The yardstick: how far wurk is from a bare worker of its shape, and how far that
         # bare worker itself would lead Sidekiq.
         ("wurk", "bare"), ("wurk_redispy", "bare_redispy"), ("bare", "sidekiq"),
         ("bare_redispy", "sidekiq"), ("bare", "sidekiq_nojit"))


def print_ratios(systems: list[System], results: dict[str, list[Row]]) -> None:
    ours = next((name for name in ("wurk", "wurk_async") if name in results), None)
    if ours is None:
        return
    print("\nratios (> 1 means wurk is better: wurk/peer for drain and enqueue rates,\n"
          "peer/wurk for p99 latency, RSS, worker CPU, Redis CPU and commands per job)")
    heads = ["row vs peer", "drain", "single", "bulk", "p99", "RSS", "CPU/job",
             "Redis/job", "cmds/job"]
    print(f"{heads[0]:<{WIDTHS[0] + 16}}" + "".join(f"{h:>10}" for h in heads[1:]))
    pairs = [(a, b) for a, b in PAIRS if a in results and b in results]
    pairs += [(ours, s.name) for s in systems
              if not s.name.startswith(("wurk", "bare"))
              and not any(b == s.name for _, b in pairs)]
    for mine, theirs in pairs:
        cells = ratio_cells(results[mine], results[theirs])
        print(f"{mine + ' vs ' + theirs:<{WIDTHS[0] + 16}}" + "".join(f"{c:>10}" for c in cells))


def print_notes(systems: list[System], server: PrivateRedis, options: argparse.Namespace,
                load: tuple[float, float]) -> None:
    print(f"\nserver: redis {server.version}, private, no persistence, flushed between runs; "
          f"load average (1 min) {load[0]:.1f} at start, {load[1]:.1f} at end")
    print(f"Single pushes stop after {ENQUEUE_BUDGET:.0f} s; the worker drains what was pushed. "
          f"* drain stopped at the {options.drain_cap:.0f} s cap\n  (one that would end within "
          f"{harness.FINISH_WITHIN:.0f}× the cap runs on); rate over the jobs done by then. "
          "≥: some latency jobs never ran\n  (counted at the 5 s grace).")
    print(f"overload: drain under {HEADROOM}× the paced rate, so latency was not measured. "
          "Latency jobs RPUSH (start - push) instead of INCR.")
    print("drain/s excludes the worker's boot, +boot/s includes it. Per-job log lines: "
          + ("each system's default" if options.job_logs else "off wherever a system can"))
    for system in systems:
        for note in system.notes:
            print(f"  {note}")


def comparison(bench: Bench, systems: list[System], runs: int) -> dict[str, list[Row]]:
    return interleaved(systems, runs, bench.measure)


def interleaved(systems: list[System], runs: int,
                measure: Callable[[System], Row]) -> dict[str, list[Row]]:
    """``runs`` rounds over every system, so drift over the session hits each alike; each
    round starts one system further on, so no system always follows the same one (what a
    run leaves behind — a warm cache, a Redis still freeing memory — falls on each)."""
    results: dict[str, list[Row]] = {s.name: [] for s in systems}
    for run in range(runs):
        shift = run % len(systems) if systems else 0
        for system in [*systems[shift:], *systems[:shift]]:
            started = time.monotonic()
            try:
                row = measure(system)
            except RuntimeError as exc:
                print(f"run {run + 1} {system.name}: FAILED: {exc}", file=sys.stderr)
                row = Row()
            results[system.name].append(row)
            print(f"run {run + 1}/{runs} {system.name}: {progress(row)} "
                  f"({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    return results


def progress(row: Row) -> str:
    drain = f"drain {row.drain.steady:,.0f}/s" if row.drain else "no drain"
    p99 = f"p99 {row.latency.p99_ms:.1f} ms" if row.latency else ""
    return (f"single {fmt(row.single)}/s, bulk {fmt(row.bulk)}/s, {drain} {p99} "
            f"load {fmt(row.load, 1)}")


def async_row(bench: Bench, systems: list[System], runs: int,
              concurrencies: tuple[int, ...]) -> dict[str, list[Row]]:
    """Each system at each concurrency, all of them interleaved as one set of rows."""
    variants: dict[str, tuple[System, int]] = {
        f"{s.name}@{c}": (s, c) for c in concurrencies for s in systems}
    rows = [replace(s, name=name) for name, (s, _) in variants.items()]
    results = interleaved(rows, runs, lambda row: bench.waits(*variants[row.name]))
    wait_ms = shared.WAIT_SECONDS * 1e3
    print(f"\nasync row: {bench.jobs:,} jobs each awaiting {wait_ms:.0f} ms then one INCR "
          "through redis-py's asyncio client, 1 worker process, equal concurrency (wurk "
          f"--async-concurrency, arq max_jobs, SAQ concurrency); median of {runs}; cap = "
          f"concurrency / {shared.WAIT_SECONDS} s")
    heads = ("jobs/s", "+boot/s", "% cap", "CPU µs/job", "top thr µs", "Redis µs", "cmds/job",
             "RSS MB", "threads", "load")
    print(f"{'system@concurrency':<{WIDTHS[0]}}" + "".join(f"{h:>11}" for h in heads))
    for name, (_, concurrency) in variants.items():
        got = results[name]
        rate = field(got, "drain.steady")
        cap = concurrency / shared.WAIT_SECONDS
        mark = "*" if any(r.drain is not None and r.drain.capped for r in got) else ""
        cells = [fmt(rate) + mark, fmt(field(got, "drain.with_boot")) + mark,
                 "—" if rate is None else f"{100 * rate / cap:.0f} %",
                 fmt(field(got, "drain.cpu_us")), fmt(field(got, "drain.top_thread_us")),
                 fmt(field(got, "drain.redis_cpu_us")), fmt(field(got, "drain.commands"), 1),
                 fmt(field(got, "rss_mb")),
                 fmt(field(got, "threads")), fmt(field(got, "load"), 1)]
        print(f"{name:<{WIDTHS[0]}}" + "".join(f"{c:>11}" for c in cells))
    print_async_ratios(variants, results)
    print("top thr: the busiest worker thread's CPU a job (an event loop's, for each system "
          "here): what one\n  process's rate is bound by, beside the whole process's CPU.")
    print("* drain stopped at the cap; rate over the jobs done by then. SAQ's clients get a "
          "redis-py pool of 2 × concurrency + 20 connections\n  (redis-py's default cap of "
          "100 makes SAQ fail from concurrency 100 up), and so does wurk's job client; arq's "
          "pool is unbounded.")
    return results


def print_async_ratios(variants: dict[str, tuple[System, int]],
                       results: dict[str, list[Row]]) -> None:
    """wurk against each peer at the same concurrency, > 1 meaning wurk is better."""
    picks = (("drain", "drain.steady", True), ("CPU/job", "drain.cpu_us", False),
             ("Redis/job", "drain.redis_cpu_us", False), ("RSS", "rss_mb", False),
             ("threads", "threads", False))
    print("\nratios (> 1 means wurk is better: wurk/peer for jobs/s, peer/wurk for the rest)")
    print(f"{'row vs peer':<{WIDTHS[0] + 16}}" + "".join(f"{h:>10}" for h, _, _ in picks))
    for name, (system, concurrency) in variants.items():
        ours = f"wurk_async@{concurrency}"
        if system.name == "wurk_async" or ours not in results:
            continue
        cells = []
        for _, pick, higher in picks:
            a, b = field(results[ours], pick), field(results[name], pick)
            if a is None or b is None or min(a, b) <= 0:
                cells.append("—")
            else:
                cells.append(f"{(a / b if higher else b / a):.2f}×")
        print(f"{ours + ' vs ' + name:<{WIDTHS[0] + 16}}" + "".join(f"{c:>10}" for c in cells))


def scaling(bench: Bench, systems: list[System], runs: int) -> None:
    for system in systems:
        if system.no_worker:
            print(f"\nscaling, {system.name}: {system.no_worker}")
            continue
        cells: dict[tuple[int, int], list[Drain]] = {}
        for _ in range(runs):
            for p in SCALING_PROCESSES:
                for c in SCALING_CONCURRENCY:
                    cells.setdefault((p, c), []).append(bench.scale(system, p, c))
        print_scaling(system, cells, runs, bench.jobs)


def print_scaling(system: System, cells: dict[tuple[int, int], list[Drain]], runs: int,
                  jobs: int) -> None:
    print(f"\nscaling, {system.name}: drain of {jobs:,} jobs, jobs/s (worker CPU µs/job), "
          f"median of {runs}; load average {os.getloadavg()[0]:.1f} at the end")
    print(f"{'processes':<10}" + "".join(f"{f'c={c}':>18}" for c in SCALING_CONCURRENCY))
    for p in SCALING_PROCESSES:
        row = []
        for c in SCALING_CONCURRENCY:
            drains = cells[(p, c)]
            rate = statistics.median(d.steady for d in drains)
            cpu = statistics.median(d.cpu_us for d in drains)
            mark = "*" if any(d.capped for d in drains) else ""
            row.append(f"{rate:,.0f}{mark} ({cpu:,.0f})")
        print(f"{p:<10}" + "".join(f"{cell:>18}" for cell in row))


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers.run",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--only", default=",".join(ORDER),
                        help=f"comma-separated, from: {', '.join(ORDER)}")
    parser.add_argument("--scaling", action="store_true",
                        help="the processes × concurrency table instead (default --only: "
                             "wurk,sidekiq)")
    parser.add_argument("--async-row", action="store_true",
                        help="the async row instead (default --only: "
                             f"{','.join(ASYNC_ORDER)})")
    parser.add_argument("--async-concurrency", default=",".join(map(str, ASYNC_CONCURRENCY)),
                        help="with --async-row: the concurrencies, comma-separated")
    parser.add_argument("--drain-cap", type=float, default=DRAIN_CAP,
                        help="seconds after which a drain is stopped and rated on what it did")
    parser.add_argument("--job-logs", action="store_true",
                        help="leave per-job log lines on (each system's default); by default "
                             "they are off wherever a system can turn them off")
    parser.add_argument("--json", type=Path, help="also write every run's raw figures here")
    options = parser.parse_args()
    if options.scaling and "--only" not in sys.argv:
        options.only = "wurk,sidekiq"
    if options.async_row and "--only" not in sys.argv:
        options.only = ",".join(ASYNC_ORDER)
    if options.runs < 1 or options.jobs < 100:
        parser.error("--runs must be ≥ 1 and --jobs ≥ 100")
    return options


def select(names: str, tools: Tools) -> list[System]:
    systems = []
    for name in names.split(","):
        try:
            system = build(name.strip(), tools)
        except ValueError as exc:
            raise SystemExit(f"--only: {exc}") from None
        if system.unavailable:
            print(f"{system.name}: skipped: {system.unavailable}", file=sys.stderr)
            continue
        systems.append(system)
    return systems


def main() -> None:
    options = parse()
    tools = Tools(root=ROOT, peers_dir=ROOT / "benchmarks/peers",
                  project_venv=ROOT / ".venv", job_logs=options.job_logs)
    systems = select(options.only, tools)
    logs = Path(tempfile.mkdtemp(prefix="wurk-peers-"))
    server = PrivateRedis(harness.server_binary(tools.project_venv), logs / "redis")
    env = harness.environment(server.url, job_logs=options.job_logs)
    bench = Bench(tools, server, env, logs, options.jobs, options.drain_cap)
    load_before = os.getloadavg()[0]
    try:
        if options.scaling:
            scaling(bench, systems, options.runs)
        elif options.async_row:
            concurrencies = tuple(int(c) for c in options.async_concurrency.split(","))
            results = async_row(bench, systems, options.runs, concurrencies)
            if options.json:
                options.json.write_text(json.dumps(
                    {k: [asdict(r) for r in v] for k, v in results.items()}, indent=1))
        else:
            results = comparison(bench, systems, options.runs)
            print_tables(systems, results, options.runs, options.jobs)
            print_notes(systems, server, options, (load_before, os.getloadavg()[0]))
            if options.json:
                options.json.write_text(json.dumps(
                    {k: [asdict(r) for r in v] for k, v in results.items()}, indent=1))
        print(f"\nworker logs: {logs}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
