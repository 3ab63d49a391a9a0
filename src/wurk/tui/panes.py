"""The tabs of ``wurk top``, in kiq's order: Home, Busy, Queues, Scheduled, Retries, Dead,
Metrics, then Batches and Periodic.

1. ``HomePane``: processed and failed per second with a live sparkline of each, the Redis
   server (version, uptime, clients, memory), every queue's size and latency, largest first.
2. ``BusyPane``: the processes (threads in use, memory, queues, leader, quiet) and the jobs
   they run, with how long each has run and, for an iterable job, its iteration state;
   ``Q`` quiets and ``T`` stops the selected processes (or the one under the cursor).
3. ``QueuesPane``: size, latency, paused; ``P`` pauses or unpauses, ``D`` clears; Enter lists
   the queue's jobs.
4. ``SetPane``: the scheduled, retry and dead sets, 25 a page by rank (``h``/``l``,
   ``g``/``G``), ``/`` filters by substring; Enter shows a job with its error and backtrace;
   ``R`` retry, ``E`` enqueue now, ``K`` kill, ``D`` delete — the selected jobs (``x``,
   ``A``), the cursor's, or (a choice of the confirmation) every job of the set.
5. ``MetricsPane``: every job's executions, failures, mean time and p50/p95 over a period
   (``p`` changes it), read once a minute; ``/`` filters by name.
6. ``BatchesPane``: live batches and their progress, paged, ``/`` searches tags; Enter
   shows one; ``D`` delete, ``I`` invalidate, ``R`` send its dead jobs back.
7. ``PeriodicPane``: the cron loops, next and last runs; ``E`` pushes one now, ``P``
   pauses or unpauses; Enter shows its recent pushes.
Every cell comes from ``wurk.tui.text``: escaped, cut, an unreadable value marked invalid.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Input, Sparkline, Static, TabPane

from ..config import Config
from ..stored import Invalid
from ..web.data import SET_KINDS
from ..web.metrics import PERIODS
from . import operations, reads
from . import text as T
from .iteration import summary
from .operations import Act
from .reads import Totals
from .screens import (
    BatchScreen,
    EntryScreen,
    LoopScreen,
    QueueScreen,
    batch_question,
    loop_question,
)
from .sheet import Column, Row, Sheet
from .view import View

__all__ = ["BatchesPane", "BusyPane", "HomePane", "MetricsPane", "Pane", "PeriodicPane",
           "QueuesPane", "SetPane", "panes"]

METRICS_EVERY = 60.0  # seconds: workers write execution metrics once a minute
# Rate samples the Home tab's sparklines show (at the default 2 s: four minutes).
SPARK_SAMPLES = 120


def quoted(value: Any, limit: int = 60) -> str:
    return f"“{T.plain(value, limit)}”"


class Pane(TabPane, View):
    """A tab: a ``TabPane`` that is a ``View``."""

    key = ""

    def __init__(self) -> None:
        TabPane.__init__(self, self.caption, id=self.key)
        self.table = self.make_table()

    def make_table(self) -> Sheet:
        """The tab's table (the one its actions and Enter act on)."""
        raise NotImplementedError

    def show_totals(self, totals: Totals, rates: Sequence[tuple[float, float]]) -> None:
        """The numbers every refresh reads, for the tabs made of them (Home, Queues)."""


def queue_rows(totals: Totals, *, largest_first: bool) -> list[Row]:
    found = list(totals.queues)
    if largest_first:
        found.sort(key=lambda s: (-(s.size if isinstance(s.size, int) else 0), s.name))
    return [Row(s.name, [T.cell(s.name), T.count(s.size), T.duration(s.latency),
                         T.label("paused", "bold yellow") if s.paused else T.label("")])
            for s in found]


QUEUE_COLUMNS = [Column("name", "Queue", 30, flex=3), Column("size", "Size", 12),
                 Column("latency", "Latency", 12), Column("state", "State", 8)]


# -- Home ---------------------------------------------------------------------------------------
class HomePane(Pane):
    caption, key = "Home", "home"

    def make_table(self) -> Sheet:
        return Sheet(QUEUE_COLUMNS, id="home-queues")

    def compose(self) -> ComposeResult:
        yield Static(id="rates", classes="line")
        yield Static(T.label("processed/s"), classes="spark-label")
        yield Sparkline([0.0] * SPARK_SAMPLES, id="processed-spark", summary_function=max)
        yield Static(T.label("failed/s"), classes="spark-label")
        yield Sparkline([0.0] * SPARK_SAMPLES, id="failed-spark", summary_function=max)
        yield Static(id="redis", classes="line")
        yield self.table

    def sheet(self) -> Sheet:
        return self.table

    def read(self, config: Config, params: Any) -> dict[str, Any]:
        return reads.home(config)

    def shown(self, found: dict[str, Any] | None, params: Any) -> None:
        if found is None:
            return
        server = "Valkey" if found.get("valkey_version") else "Redis"
        version = found.get("valkey_version") or found.get("redis_version") or "?"
        self.query_one("#redis", Static).update(T.joined(
            f"{server} ", T.cell(version, 20), " · up ",
            T.cell(found.get("uptime_in_days", "?"), 12), "d · ",
            T.cell(found.get("connected_clients", "?"), 12), " clients · ",
            T.cell(found.get("used_memory_human", "?"), 12), " used, peak ",
            T.cell(found.get("used_memory_peak_human", "?"), 12), " · ",
            T.cell(found.get("maxmemory_policy", "?"), 30)))

    def show_totals(self, totals: Totals, rates: Sequence[tuple[float, float]]) -> None:
        processed = Text(end="")
        failed = Text(end="")
        if rates:
            processed = T.rate(rates[-1][0])
            processed.stylize("bold green")
            failed = T.rate(rates[-1][1])
            failed.stylize("bold red")
        self.query_one("#rates", Static).update(T.joined(
            "Processed ", processed or T.label("-"), "   Failed ", failed or T.label("-"),
            f"   per second, the last {len(rates)} refreshes below" if rates
            else "   per second, from the next refresh on"))
        # Zeros before the first readings, as kiq starts: the graph's floor is 0 from the
        # start, and a steady rate draws as a level, not as the floor.
        padding = [0.0] * (SPARK_SAMPLES - len(rates))
        self.query_one("#processed-spark", Sparkline).data = padding + [p for p, _ in rates]
        self.query_one("#failed-spark", Sparkline).data = padding + [f for _, f in rates]
        self.sheet().show(queue_rows(totals, largest_first=True))

    def open(self) -> Screen[Any] | None:
        here = self.sheet().current()
        return None if here is None else QueueScreen(here)


# -- Busy ---------------------------------------------------------------------------------------
PROCESS_COLUMNS = [Column("name", "Process", 18, flex=2), Column("started", "Started", 10),
                   Column("rss", "RSS", 8), Column("busy", "Busy", 7),
                   Column("queues", "Queues", 11, flex=2), Column("state", "State", 8, flex=1)]
JOB_COLUMNS = [Column("process", "Process", 11, flex=1), Column("job", "Job", 14, flex=2),
               Column("args", "Args", 9, flex=2), Column("queue", "Queue", 8),
               Column("running", "Running", 7), Column("iteration", "Iteration", 13, flex=2)]


class BusyPane(Pane):
    caption, key = "Busy", "busy"
    acts = (operations.QUIET, operations.STOP)

    def make_table(self) -> Sheet:
        return Sheet(PROCESS_COLUMNS, selectable=True, id="processes")

    def compose(self) -> ComposeResult:
        yield Static(id="busy-summary", classes="line")
        yield self.table
        yield Static(id="jobs-summary", classes="line")
        yield Sheet(JOB_COLUMNS, id="jobs")

    def sheet(self) -> Sheet:
        return self.table

    def read(self, config: Config, params: Any) -> reads.Busy:
        return reads.busy(config)

    def shown(self, found: reads.Busy | None, params: Any) -> None:
        if found is None:
            return
        busy, now = found.found, time.time()
        sums = busy["totals"]
        threads = sums["threads"]
        used = f" ({100 * sums['busy'] // threads}%)" if threads else ""
        self.query_one("#busy-summary", Static).update(T.joined(
            "Processes ", T.count(sums["processes"]), "  Threads ", T.count(threads),
            "  Busy ", T.count(sums["busy"]), used, "  RSS ", T.kilobytes(sums["rss_kb"])))
        self.sheet().show([self._process(p) for p in busy["processes"]])
        names = {p["identity"]: f"{T.plain(p['hostname'], 60)}:{T.plain(p['pid'], 20)}"
                 for p in busy["processes"]}
        jobs = [self._job(work, found, now, names) for work in busy["jobs"]]
        more = f" (the {len(jobs)} longest running)" if len(jobs) < busy["jobs_total"] else ""
        self.query_one("#jobs-summary", Static).update(T.joined(
            "Running jobs ", T.count(busy["jobs_total"]), more))
        self.query_one("#jobs", Sheet).show(jobs)

    @staticmethod
    def _process(p: dict[str, Any]) -> Row:
        name = f"{T.plain(p['hostname'], 60)}:{T.plain(p['pid'], 20)}"
        if p["tag"]:
            name += f" {T.plain(p['tag'], 40)}"
        states = [word for word, on in (("leader", p["leader"]), ("quiet", p["quiet"]),
                                        ("embedded", p["embedded"])) if on]
        invalid = isinstance(p["busy"], Invalid) or isinstance(p["concurrency"], Invalid)
        busy = Text(f"{T.plain(p['busy'], 20)}/{T.plain(p['concurrency'], 20)}",
                    style=T.INVALID_STYLE if invalid else "", end="")
        return Row(p["identity"], [T.cell(name), T.ago(p["started_at"]),
                                   T.kilobytes(p["rss_kb"]), busy,
                                   T.cell(", ".join(p["queues"][:50])),
                                   T.label(" ".join(states), "bold yellow")])

    @staticmethod
    def _job(work: dict[str, Any], found: reads.Busy, now: float,
             names: dict[str, str]) -> Row:
        job = work["job"]
        run_at = work["run_at"]
        running = T.cell(run_at) if isinstance(run_at, Invalid) else \
            T.duration(None if run_at is None else max(now - run_at, 0.0))
        state = found.iterations.get(job["jid"])
        return Row(f"{work['process']}|{work['thread']}", [
            T.cell(names.get(work["process"], work["process"])), T.cell(job["display_class"]),
            T.cell(T.brief(job["display_args"])), T.cell(work["queue"]), running,
            T.cell(summary(state)) if state is not None else T.label("")])

    def question(self, act: Act, targets: Sequence[str]) -> str:
        names = ", ".join(T.plain(identity, 60) for identity in targets[:3])
        more = f" and {len(targets) - 3} more" if len(targets) > 3 else ""
        what = "stop fetching jobs and finish the ones it runs" \
            if act is operations.QUIET else \
            "shut down within its timeout (unfinished jobs go back to their queues)"
        return f"{act.verb} {names}{more}? Each will {what}."

    def perform(self, config: Config, act: Act, targets: Sequence[str],
                everything: bool) -> str:
        return operations.on_processes(config, act, targets)


# -- Queues -------------------------------------------------------------------------------------
class QueuesPane(Pane):
    caption, key = "Queues", "queues"
    acts = (operations.PAUSE, operations.CLEAR)

    def __init__(self) -> None:
        super().__init__()
        self.paused: dict[str, bool] = {}
        self.queue_sizes: dict[str, int | Invalid] = {}

    def make_table(self) -> Sheet:
        return Sheet(QUEUE_COLUMNS, id="queue-list")

    def compose(self) -> ComposeResult:
        yield Static(id="queues-summary", classes="line")
        yield self.table

    def sheet(self) -> Sheet:
        return self.table

    def show_totals(self, totals: Totals, rates: Sequence[tuple[float, float]]) -> None:
        self.paused = {s.name: s.paused for s in totals.queues}
        self.queue_sizes = {s.name: s.size for s in totals.queues}
        self.query_one("#queues-summary", Static).update(T.joined(
            "Queues ", T.count(len(totals.queues)), "  Enqueued ", T.count(totals.enqueued),
            "  Paused ", T.count(sum(self.paused.values()))))
        self.sheet().show(queue_rows(totals, largest_first=False))

    def resolve(self, act: Act, targets: Sequence[str]) -> Act:
        if act.key == "P" and targets and self.paused.get(targets[0]):
            return operations.UNPAUSE
        return act

    def targets(self, act: Act) -> list[str]:
        here = self.sheet().current()
        return [] if here is None else [here]

    def question(self, act: Act, targets: Sequence[str]) -> str:
        name = quoted(targets[0])
        if act is operations.CLEAR:
            size = self.queue_sizes.get(targets[0])
            jobs = f"all {T.plain(size)} jobs" if isinstance(size, int) else "every job"
            return f"Delete {jobs} in queue {name}? This cannot be undone."
        if act is operations.UNPAUSE:
            return f"Unpause queue {name}? Workers fetch its jobs again."
        return f"Pause queue {name}? Workers leave its jobs waiting until it is unpaused."

    def perform(self, config: Config, act: Act, targets: Sequence[str],
                everything: bool) -> str:
        return operations.on_queue(config, targets[0], act)

    def open(self) -> Screen[Any] | None:
        here = self.sheet().current()
        return None if here is None else QueueScreen(here)


# -- Scheduled, Retries, Dead -------------------------------------------------------------------
class SetPane(Pane):
    """One of the job sets, a page at a time."""

    pageable = filterable = True

    def __init__(self, kind: str) -> None:
        found = SET_KINDS[kind]
        self.kind, self.key, self.caption = kind, kind, found.title
        self.acts = operations.set_acts(found.actions)
        self.total = 0
        self.names: dict[str, str] = {}  # each row's job as a question names it
        super().__init__()

    def make_table(self) -> Sheet:
        kind = SET_KINDS[self.kind]
        columns = [Column("when", kind.time_label, 11), Column("queue", "Queue", 8),
                   Column("job", "Job", 14, flex=2), Column("args", "Args", 8, flex=2)]
        if self.kind != "scheduled":
            columns.append(Column("error", "Error", 12, flex=3))
        return Sheet(columns, selectable=True, id=f"{self.kind}-list")

    def compose(self) -> ComposeResult:
        yield Static(id=f"{self.kind}-summary", classes="line")
        yield self.table
        yield Input(placeholder="Filter: class, jid, args, error… (Enter applies, Escape "
                                "clears)", id=f"{self.kind}-filter", classes="filter")

    def sheet(self) -> Sheet:
        return self.table

    def params(self) -> Hashable:
        return (self.page, self.substr)

    def read(self, config: Config, params: Any) -> dict[str, Any]:
        page, substr = params
        return reads.set_page(config, self.kind, page, substr)

    def shown(self, found: dict[str, Any] | None, params: Any) -> None:
        if found is None:
            return
        self.page, self.pages, self.total = found["page"], found["pages"], found["size"]
        self.query_one(f"#{self.kind}-summary", Static).update(T.joined(
            f"{self.caption} ", T.count(found["size"]),
            f" matching {quoted(self.substr, 30)}" if self.substr else "",
            " (the first ones only: narrow it down)" if found["truncated"] else "",
            f"  page {found['page']:,} of {found['pages']:,}"))
        self.names = {entry["key"]: f"{T.plain(entry['display_class'], 60)} "
                                    f"(jid {T.plain(entry['jid'], 40)})"
                      for entry in found["entries"]}
        self.sheet().show([self._row(entry) for entry in found["entries"]])

    def _row(self, entry: dict[str, Any]) -> Row:
        cells = [T.ago(entry["at_epoch"]), T.cell(entry["queue"]),
                 T.cell(entry["display_class"]), T.cell(T.brief(entry["display_args"]))]
        if self.kind != "scheduled":
            error = f"{T.plain(entry['error_class'] or '', 80)}: " \
                    f"{T.plain(entry['error_message'] or '', 160)}" \
                if entry["error_class"] or entry["error_message"] else ""
            cells.append(T.cell(error))
        return Row(entry["key"], cells)

    def question(self, act: Act, targets: Sequence[str]) -> str:
        if len(targets) == 1 and not self.sheet().selected:
            # named, so a person can check what the answer acts on
            what = f"{self.names.get(targets[0], 'the job')} under the cursor"
        else:
            what = f"the {len(targets)} selected jobs" if len(targets) > 1 else "the selected job"
        return f"{act.verb} {what} in {self.caption}?"

    def everything(self, act: Act) -> str | None:
        if not act.bulk or self.substr or not self.total:
            return None
        return f"all {self.total:,} in {self.caption}"

    def perform(self, config: Config, act: Act, targets: Sequence[str],
                everything: bool) -> str:
        return operations.on_set(config, self.kind, act, targets, everything)

    def open(self) -> Screen[Any] | None:
        here = self.sheet().current()
        return None if here is None else EntryScreen(self.kind, here)


# -- Metrics ------------------------------------------------------------------------------------
METRIC_COLUMNS = [Column("name", "Job", 18, flex=1), Column("processed", "Runs", 9),
                  Column("failed", "Failed", 8), Column("mean", "Mean", 9),
                  Column("p50", "p50", 8), Column("p95", "p95", 8)]


class MetricsPane(Pane):
    caption, key = "Metrics", "metrics"
    filterable = True

    def __init__(self) -> None:
        super().__init__()
        self.period = "1h"
        self.read_at = -METRICS_EVERY
        self.last: Hashable = None

    def make_table(self) -> Sheet:
        return Sheet(METRIC_COLUMNS, id="metrics-list")

    def compose(self) -> ComposeResult:
        yield Static(id="metrics-summary", classes="line")
        yield self.table
        yield Input(placeholder="Filter: part of a job's name (Enter applies, Escape clears)",
                    id="metrics-filter", classes="filter")

    def sheet(self) -> Sheet:
        return self.table

    def params(self) -> Hashable:
        return (self.period, self.substr)

    def due(self) -> bool:
        return self.params() != self.last or \
            time.monotonic() - self.read_at >= METRICS_EVERY

    def cycle(self) -> None:
        names = list(PERIODS)
        self.period = names[(names.index(self.period) + 1) % len(names)]

    def read(self, config: Config, params: Any) -> reads.Metrics:
        period, substr = params
        return reads.metrics(config, period, substr)

    def shown(self, found: reads.Metrics | None, params: Any) -> None:
        if found is None:
            return
        self.last, self.read_at = params, time.monotonic()
        data = found.found
        note = "" if found.histograms else \
            "  p50/p95 need 8h or less: histograms are kept 8 hours"
        bad = f"  {data['invalid_count']:,} stored values unreadable (counted 0)" \
            if data["invalid_count"] else ""
        self.query_one("#metrics-summary", Static).update(T.joined(
            "Metrics over the last ", T.cell(self.period, style="bold"), "  jobs ",
            T.count(data["total_jobs"]),
            f"  matching {quoted(self.substr, 30)}" if self.substr else "", note, bad))
        rows = []
        for job in data["jobs"]:
            p50, p95 = found.percentiles.get(job["name"], (None, None))
            rows.append(Row(job["name"], [
                T.cell(job["name"]), T.count(job["processed"]), T.count(job["failed"]),
                T.milliseconds(job["average_ms"]), T.cell(p50 or "-"), T.cell(p95 or "-")]))
        self.sheet().show(rows)


# -- Batches ------------------------------------------------------------------------------------
BATCH_COLUMNS = [Column("bid", "Batch", 14), Column("description", "Description", 12, flex=1),
                 Column("created", "Created", 10), Column("done", "Done", 5),
                 Column("left", "Pending", 12), Column("failures", "Failed", 7)]


class BatchesPane(Pane):
    caption, key = "Batches", "batches"
    pageable = filterable = True
    acts = (operations.BATCH_DELETE, operations.INVALIDATE, operations.RETRY_DEAD)

    def make_table(self) -> Sheet:
        return Sheet(BATCH_COLUMNS, id="batch-list")

    def compose(self) -> ComposeResult:
        yield Static(id="batches-summary", classes="line")
        yield self.table
        yield Input(placeholder="Tag: batches with a tag containing this (Enter applies, "
                                "Escape clears)", id="batches-filter", classes="filter")

    def sheet(self) -> Sheet:
        return self.table

    def params(self) -> Hashable:
        return (self.page, self.substr)

    def read(self, config: Config, params: Any) -> dict[str, Any]:
        page, tag = params
        return reads.batches(config, page, tag)

    def shown(self, found: dict[str, Any] | None, params: Any) -> None:
        if found is None:
            return
        self.page, self.pages = found["page"], found["pages"]
        self.query_one("#batches-summary", Static).update(T.joined(
            "Batches ", T.count(found["size"]),
            f" tagged {quoted(self.substr, 30)}" if self.substr else "",
            f"  page {found['page']:,} of {found['pages']:,}"))
        self.sheet().show([Row(b["bid"], [
            T.cell(b["bid"]), T.cell(b["description"] or ""), T.ago(b["created_at"]),
            T.cell(f"{b['percent']}%"),
            T.joined(T.count(b["pending"]), " of ", T.count(b["total"])),
            T.count(b["failures"])]) for b in found["batches"]])

    def targets(self, act: Act) -> list[str]:
        here = self.sheet().current()
        return [] if here is None else [here]

    def question(self, act: Act, targets: Sequence[str]) -> str:
        return batch_question(act, targets[0])

    def perform(self, config: Config, act: Act, targets: Sequence[str],
                everything: bool) -> str:
        return operations.on_batch(config, targets[0], act)

    def open(self) -> Screen[Any] | None:
        here = self.sheet().current()
        return None if here is None else BatchScreen(here)


# -- Periodic -----------------------------------------------------------------------------------
LOOP_COLUMNS = [Column("job", "Job", 14, flex=2), Column("cron", "Schedule", 13, flex=1),
                Column("next", "Next run", 10), Column("last", "Last run", 10),
                Column("queue", "Queue", 8), Column("state", "State", 9, flex=1)]


class PeriodicPane(Pane):
    caption, key = "Periodic", "periodic"
    acts = (operations.PUSH_NOW, operations.PAUSE)

    def __init__(self) -> None:
        super().__init__()
        self.loops: dict[str, dict[str, Any]] = {}

    def make_table(self) -> Sheet:
        return Sheet(LOOP_COLUMNS, id="loop-list")

    def compose(self) -> ComposeResult:
        yield Static(id="periodic-summary", classes="line")
        yield self.table

    def sheet(self) -> Sheet:
        return self.table

    def read(self, config: Config, params: Any) -> list[dict[str, Any]]:
        return reads.loops(config)

    def shown(self, found: list[dict[str, Any]] | None, params: Any) -> None:
        if found is None:
            return
        self.loops = {loop["lid"]: loop for loop in found}
        self.query_one("#periodic-summary", Static).update(T.joined(
            "Periodic loops ", T.count(len(found))))
        rows = []
        for loop in found:
            state = "paused" if loop["paused"] else ""
            if loop["problems"]:
                state = f"{state} {T.plain(loop['problems'][0], 80)}".strip()
            rows.append(Row(loop["lid"], [
                T.cell(loop["klass"]), T.cell(f"{loop['schedule']} {loop['tz']}".strip()),
                T.ago(loop["next_run"]), T.ago(loop["last_run"]), T.cell(loop["queue"]),
                T.cell(state, style="bold yellow")]))
        self.sheet().show(rows)

    def resolve(self, act: Act, targets: Sequence[str]) -> Act:
        if act.key == "P" and targets and self.loops.get(targets[0], {}).get("paused"):
            return operations.UNPAUSE
        return act

    def targets(self, act: Act) -> list[str]:
        here = self.sheet().current()
        return [] if here is None else [here]

    def question(self, act: Act, targets: Sequence[str]) -> str:
        return loop_question(act, self.loops.get(targets[0], {}).get("klass", "?"))

    def perform(self, config: Config, act: Act, targets: Sequence[str],
                everything: bool) -> str:
        return operations.on_loop(config, targets[0], act)

    def open(self) -> Screen[Any] | None:
        here = self.sheet().current()
        return None if here is None else LoopScreen(here)


def panes() -> list[Pane]:
    """The tabs, in kiq's order, then the two kiq does not have."""
    return [HomePane(), BusyPane(), QueuesPane(), SetPane("scheduled"), SetPane("retries"),
            SetPane("morgue"), MetricsPane(), BatchesPane(), PeriodicPane()]
