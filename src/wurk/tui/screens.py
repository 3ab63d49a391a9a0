"""The screens ``wurk top`` opens over its tabs.

1. ``ConfirmScreen``: every action asks first — what it will do to what, in words — and is
   answered ``y`` (or Enter), ``a`` (all of them, where the action offers it) or ``n``
   (or Escape).
2. ``HelpScreen``: every key, the ones of the tab in view first; ``?`` or Escape closes it.
3. ``Masthead`` and ``TotalsLine``: the top two lines of every screen — which Redis, whether
   read-only, when last refreshed or why not; processed, failed, busy, enqueued and the sets.
4. Detail screens, each a ``View`` the app refreshes and acts through like a tab:
   ``EntryScreen`` (a job of a set: its fields, error and backtrace; that set's actions),
   ``QueueScreen`` (a queue's jobs, paged; delete), ``BatchScreen`` and ``LoopScreen``.
   Escape goes back.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Static

from ..config import Config
from ..stored import Invalid
from ..web.data import SET_KINDS
from . import operations, reads
from . import text as T
from .operations import Act
from .sheet import Column, Row, Sheet
from .view import LAST_PAGE, View

__all__ = ["ACT_BINDINGS", "ACT_KEYS", "BatchScreen", "ConfirmScreen", "DetailScreen",
           "EntryScreen", "HelpScreen", "LoopScreen", "Masthead", "QueueScreen", "TotalsLine"]

# What a detail screen shows of a stored payload, in characters.
RAW_LIMIT = 4_000
ARGS_LIMIT = 2_000
JIDS_SHOWN = 50
# The action keys (upper case: kiq's "Shift means I mean it"), on every screen that acts;
# the app decides which the view in sight offers (``TopApp.check_action``).
ACT_KEYS = {"R": "Retry", "E": "Enqueue", "K": "Kill", "D": "Delete", "P": "Pause",
            "Q": "Quiet", "T": "Stop", "I": "Invalidate"}
ACT_BINDINGS = [Binding(key, f"app.act('{key}')", verb) for key, verb in ACT_KEYS.items()]


class Masthead(Static):
    """Which Redis, read-only or not, and how fresh the numbers are."""


class TotalsLine(Static):
    """The cluster's numbers, on every screen."""


class ConfirmScreen(ModalScreen[str | None]):
    """A question; dismissed with ``"one"``, ``"all"`` or None."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("y,enter", "answer('one')", "Yes"),
                Binding("a", "answer('all')", "All", show=False),
                Binding("n,escape", "answer('')", "No")]

    def __init__(self, question: str, everything: str | None = None) -> None:
        super().__init__()
        self.words = question
        self.everything_label = everything

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Static(Text(self.words, end=""), id="question")
            choices = Text("y", style="bold", end="")
            choices.append(" yes   ")
            if self.everything_label:
                choices.append("a", style="bold")
                choices.append(f" {self.everything_label}   ")
            choices.append("n", style="bold")
            choices.append(" no")
            yield Static(choices, id="choices")

    def action_answer(self, answer: str) -> None:
        if answer == "all" and not self.everything_label:
            return
        self.dismiss(answer or None)


class HelpScreen(ModalScreen[None]):
    """The keys, in sections."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "app.pop_screen", "Close")]

    def __init__(self, sections: Sequence[tuple[str, Sequence[tuple[str, str]]]]) -> None:
        super().__init__()
        self.sections = sections

    def compose(self) -> ComposeResult:
        page = Text(end="")
        for title, keys in self.sections:
            page.append(f"{title}\n", style="bold underline")
            for key, what in keys:
                page.append(f"  {key:<14}", style="bold")
                page.append(f"{what}\n")
            page.append("\n")
        page.append("? or Escape closes this help.", style="dim")
        with VerticalScroll(id="help"):
            yield Static(page)


# -- detail screens -----------------------------------------------------------------------------
class DetailScreen(Screen[None], View):
    """A screen opened from a tab; the app refreshes and acts through it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        *ACT_BINDINGS, Binding("escape", "back", "Back"),
        Binding("h", "turn(-1)", "Page", key_display="h/l"),
        Binding("l", "turn(1)", "Next page", show=False),
        Binding("g", "edge(0)", "First page", show=False),
        Binding("G", "edge(1)", "Last page", show=False),
        Binding("x", "select", "Select", show=False),
        Binding("A", "select_all", "Select all", show=False),
        Binding("j", "row(1)", "Down", show=False),
        Binding("k", "row(-1)", "Up", show=False)]

    def on_mount(self) -> None:
        # Drawn at once from what the app holds (its masthead and totals) with a title saying
        # the screen's own read is under way, then read now, not at the next tick.
        self.query_one("#detail-title", Static).update(Text("Reading…", style="dim", end=""))
        opened = getattr(self.app, "opened", None)
        if opened is not None:
            opened(self)

    def compose(self) -> ComposeResult:
        yield Masthead(classes="masthead")
        yield TotalsLine(classes="line")
        yield Static(id="detail-title", classes="title")
        yield from self.body()
        yield Footer(compact=True)

    def body(self) -> ComposeResult:
        with VerticalScroll(id="detail-scroll"):
            yield Static(id="detail-body")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("turn", "edge"):
            return self.pageable
        if action in ("select", "select_all"):
            found = self.sheet()
            return found is not None and found.selectable
        if action == "row":
            return self.sheet() is not None
        return True

    def action_row(self, step: int) -> None:
        found = self.sheet()
        if found is not None:
            if step > 0:
                found.action_cursor_down()
            else:
                found.action_cursor_up()

    def action_turn(self, step: int) -> None:
        if (step > 0 and self.page >= self.pages) or not self.turn(self.page + step):
            return
        self._reread()

    def action_edge(self, last: int) -> None:
        """``g``: the first page; ``G``: the last (clamped when read)."""
        if self.turn(LAST_PAGE if last else 1):
            self._reread()

    def _reread(self) -> None:
        refresh = getattr(self.app, "request_refresh", None)
        if refresh is not None:
            refresh(force=True)

    def action_select(self) -> None:
        found = self.sheet()
        if found is not None:
            found.toggle()

    def action_select_all(self) -> None:
        found = self.sheet()
        if found is not None:
            found.toggle(everything=True)

    def action_back(self) -> None:
        """Escape: clear the selection, else go back to the tab."""
        found = self.sheet()
        if found is not None and found.selected:
            found.unselect()
        else:
            self.app.pop_screen()

    def put(self, title: Text, lines: Sequence[Text]) -> None:
        self.query_one("#detail-title", Static).update(title)
        if self.query("#detail-body"):
            page = Text("\n", end="").join(lines)
            self.query_one("#detail-body", Static).update(page)


def field(name: str, value: Text | str) -> Text:
    line = Text(f"{name:<13}", style="bold", end="")
    line.append_text(value if isinstance(value, Text) else T.cell(value))
    return line


def when(at: float | Invalid | None) -> Text:
    """A time as UTC and how long ago."""
    if at is None or isinstance(at, Invalid):
        return T.ago(at)
    shown = Text(dt.datetime.fromtimestamp(at, dt.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S UTC  "), end="")
    shown.append_text(T.ago(at))
    return shown


def block(title: str, found: Any) -> list[Text]:
    return [Text(title, style="bold", end=""), *(Text(f"  {line}", end="")
                                                 for line in T.lines(found))]


class EntryScreen(DetailScreen):
    """One job of the retry, scheduled or dead set."""

    def __init__(self, kind: str, key: str) -> None:
        super().__init__()
        self.kind, self.key = kind, key
        found = SET_KINDS[kind]
        self.caption = found.title
        self.acts = operations.set_acts(found.actions)
        self.gone = False
        self.found: dict[str, Any] = {}

    def read(self, config: Config, params: Any) -> dict[str, Any] | None:
        return reads.entry(config, self.kind, self.key)

    def shown(self, found: dict[str, Any] | None, params: Any) -> None:
        kind = SET_KINDS[self.kind]
        if found is None:
            self.gone = True
            self.put(Text(f"{kind.title}: this job is gone", style="bold", end=""), [
                T.label(f"It is no longer in {kind.title}: it has run, moved or been "
                        "deleted. Escape goes back.")])
            return
        self.gone, self.found = False, found
        title = Text(f"{kind.title}: ", style="bold", end="")
        title.append_text(T.cell(found["display_class"], 120, style="bold"))
        lines = [field("Job", T.cell(found["display_class"])),
                 field("Arguments", T.brief(found["display_args"], ARGS_LIMIT)),
                 field("Queue", T.cell(found["queue"])), field("JID", T.cell(found["jid"])),
                 field(kind.time_label, when(found["at_epoch"])),
                 field("Created", when(found["created_at"])),
                 field("Enqueued", when(found["enqueued_at"]))]
        if found["failed_at"] is not None:
            lines.append(field("Failed", when(found["failed_at"])))
        if found["retried_at"] is not None:
            lines.append(field("Retried", when(found["retried_at"])))
        if found["retry_count"] is not None:
            lines.append(field("Retry count", T.count(found["retry_count"])))
        if found["tags"]:
            lines.append(field("Tags", T.brief(found["tags"])))
        if found["bid"]:
            lines.append(field("Batch", T.cell(found["bid"])))
        if found.get("parse_error"):
            lines.append(field("Not a job", T.cell(found["parse_error"])))
        if found["error_class"] is not None or found["error_message"] is not None:
            lines.append(Text(""))
            lines.append(field("Error", T.cell(found["error_class"] or "")))
            lines += block("Message", found["error_message"] or "")
        backtrace = found["error_backtrace"]
        if isinstance(backtrace, Invalid):
            lines += [Text(""), T.cell(f"Backtrace not shown: {backtrace.expected}.",
                                       style="yellow")]
        elif backtrace:
            lines += [Text(""), *block("Backtrace", backtrace)]
        lines += [Text(""), *block("Stored as", T.plain(found["raw"], RAW_LIMIT))]
        self.put(title, lines)

    def targets(self, act: Act) -> list[str]:
        return [] if self.gone else [self.key]

    def question(self, act: Act, targets: Sequence[str]) -> str:
        job = T.plain(self.found.get("display_class", "?"), 60)
        return f"{act.verb} this job ({job}, jid {T.plain(self.found.get('jid'), 30)})?"

    def perform(self, config: Config, act: Act, targets: Sequence[str],
                everything: bool) -> str:
        return operations.on_set(config, self.kind, act, targets, False)

    def after(self, act: Act) -> None:
        self.app.pop_screen()


QUEUE_JOB_COLUMNS = [Column("job", "Job", 16, flex=2), Column("args", "Args", 16, flex=3),
                     Column("enqueued", "Enqueued", 10), Column("jid", "JID", 12, flex=1)]


class QueueScreen(DetailScreen):
    """A queue's jobs, newest first, a page at a time."""

    pageable = True
    acts = (operations.DELETE_JOB,)

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name_ = name
        self.caption = f"queue {T.plain(name, 60)}"
        self.table = Sheet(QUEUE_JOB_COLUMNS, selectable=True, id="queue-jobs")
        self.total: Any = 0

    def body(self) -> ComposeResult:
        yield self.table

    def sheet(self) -> Sheet:
        return self.table

    def params(self) -> Hashable:
        return self.page

    def read(self, config: Config, params: Any) -> dict[str, Any] | None:
        return reads.queue_page(config, self.name_, int(params))

    def shown(self, found: dict[str, Any] | None, params: Any) -> None:
        if found is None:
            self.put(T.label("That is not a queue's name.", "bold red"), [])
            return
        self.page, self.pages, self.total = found["page"], found["pages"], found["size"]
        title = T.joined(Text("Queue ", style="bold", end=""), T.cell(self.name_, 80),
                            "  size ", T.count(found["size"]), "  latency ",
                            T.duration(found["latency"]),
                            "  paused" if found["paused"] else "",
                            f"  page {found['page']:,} of {found['pages']:,}")
        self.put(title, [])
        # Keyed by the job's digest (and partition), not its place: a push shifts every
        # place, and the cursor and the selection stay on the jobs they were on.
        self.sheet().show([Row(job["key"], [
            T.cell(job["display_class"]), T.cell(T.brief(job["display_args"])),
            T.ago(job["enqueued_at"]), T.cell(job["jid"])],
            anchor=str(job["key"]).partition("-")[2]) for job in found["jobs"]])

    def question(self, act: Act, targets: Sequence[str]) -> str:
        jobs = "this job" if len(targets) == 1 else f"these {len(targets)} jobs"
        return f"Delete {jobs} from queue {T.plain(self.name_, 60)}?"

    def perform(self, config: Config, act: Act, targets: Sequence[str],
                everything: bool) -> str:
        return operations.on_queue_job(config, self.name_, targets)


class BatchScreen(DetailScreen):
    """One batch: counts, callbacks, children, its failed and dead jobs."""

    acts = (operations.BATCH_DELETE, operations.INVALIDATE, operations.RETRY_DEAD)

    def __init__(self, bid: str) -> None:
        super().__init__()
        self.bid = bid
        self.caption = f"batch {T.plain(bid, 40)}"
        self.gone = False

    def read(self, config: Config, params: Any) -> dict[str, Any] | None:
        return reads.batch(config, self.bid)

    def shown(self, found: dict[str, Any] | None, params: Any) -> None:
        if found is None:
            self.gone = True
            self.put(Text("This batch is gone: it expired or was deleted.", style="bold",
                          end=""), [])
            return
        self.gone = False
        title = Text("Batch ", style="bold", end="")
        title.append_text(T.cell(self.bid, 60, style="bold"))
        lines = [field("Description", T.cell(found["description"] or "")),
                 field("Progress", Text(f"{found['percent']}% done", end="")),
                 field("Total", T.count(found["total"])),
                 field("Pending", T.count(found["pending"])),
                 field("Failures", T.count(found["failures"])),
                 field("Created", when(found["created_at"])),
                 field("Complete", when(found["complete_at"]) if found["complete"]
                       else T.label("not yet")),
                 field("Succeeded", when(found["success_at"]) if found["success"]
                       else T.label("not yet")),
                 field("Invalidated", T.label("yes" if found["invalidated"] else "no")),
                 field("Parent", T.cell(found["parent_bid"] or "")),
                 field("Children", T.count(found["child_count"])),
                 field("Tags", T.cell(", ".join(str(t) for t in found["tags"] or []))),
                 field("Expires", when(found["expires_at"]))]
        for name, jids, total in (("Failed jobs", found["failed"], found["failed_count"]),
                                  ("Dead jobs", found["dead_jobs"], found["dead_count"])):
            lines.append(Text(""))
            lines.append(field(name, T.count(total)))
            lines += [Text(f"  {T.plain(jid, 60)}", end="") for jid in jids[:JIDS_SHOWN]]
        if found["callbacks"]:
            lines += [Text(""), Text("Callbacks", style="bold", end="")]
            lines += [Text(f"  {T.plain(event, 20)}: {T.plain(target, 100)}", end="")
                      for event, target, _ in found["callbacks"]]
        if found["problems"]:
            lines += [Text(""), Text("Problems", style="bold red", end="")]
            lines += [T.cell(problem) for problem in found["problems"]]
        self.put(title, lines)

    def targets(self, act: Act) -> list[str]:
        return [] if self.gone else [self.bid]

    def question(self, act: Act, targets: Sequence[str]) -> str:
        return batch_question(act, self.bid)

    def perform(self, config: Config, act: Act, targets: Sequence[str],
                everything: bool) -> str:
        return operations.on_batch(config, self.bid, act)

    def after(self, act: Act) -> None:
        if act is operations.BATCH_DELETE:
            self.app.pop_screen()


def batch_question(act: Act, bid: str) -> str:
    name = T.plain(bid, 40)
    if act is operations.BATCH_DELETE:
        return f"Delete batch {name}? Its record and indexes go; its jobs stay where they are."
    if act is operations.INVALIDATE:
        return f"Invalidate batch {name}? Its jobs' valid_within_batch() becomes false."
    return f"Send the dead jobs of batch {name} back to their queues?"


class LoopScreen(DetailScreen):
    """One periodic loop and its recent pushes."""

    acts = (operations.PUSH_NOW, operations.PAUSE)

    def __init__(self, lid: str) -> None:
        super().__init__()
        self.lid = lid
        self.caption = f"loop {T.plain(lid, 40)}"
        self.gone = False
        self.paused = False
        self.klass = ""

    def read(self, config: Config, params: Any) -> dict[str, Any] | None:
        return reads.loop(config, self.lid)

    def shown(self, found: dict[str, Any] | None, params: Any) -> None:
        if found is None:
            self.gone = True
            self.put(Text("That loop is gone: the leader pruned it.", style="bold", end=""),
                     [])
            return
        self.gone, self.paused, self.klass = False, bool(found["paused"]), found["klass"]
        title = Text("Periodic ", style="bold", end="")
        title.append_text(T.cell(found["klass"], 80, style="bold"))
        lines = [field("Job", T.cell(found["klass"])),
                 field("Schedule", T.cell(f"{found['schedule']} {found['tz']}".strip())),
                 field("Queue", T.cell(found["queue"])),
                 field("Arguments", T.brief(found["args"], ARGS_LIMIT)),
                 field("State", T.label("paused", "bold yellow") if found["paused"]
                       else T.label("running")),
                 field("Next run", when(found["next_run"])),
                 field("Last run", when(found["last_run"])),
                 Text(""), Text("Recent pushes", style="bold", end="")]
        lines += [Text(f"  {T.plain(entry['jid'], 40)}  ", end="").append_text(
            when(entry["fired_at"])) for entry in found["history"]]
        if found["problems"]:
            lines += [Text(""), Text("Problems", style="bold red", end="")]
            lines += [T.cell(problem) for problem in found["problems"]]
        self.put(title, lines)

    def resolve(self, act: Act, targets: Sequence[str]) -> Act:
        return operations.UNPAUSE if act.key == "P" and self.paused else act

    def targets(self, act: Act) -> list[str]:
        return [] if self.gone else [self.lid]

    def question(self, act: Act, targets: Sequence[str]) -> str:
        return loop_question(act, self.klass)

    def perform(self, config: Config, act: Act, targets: Sequence[str],
                everything: bool) -> str:
        return operations.on_loop(config, self.lid, act)


def loop_question(act: Act, klass: str) -> str:
    name = T.plain(klass, 60)
    if act is operations.PUSH_NOW:
        return f"Push a {name} job now? The loop's own schedule is untouched."
    if act is operations.UNPAUSE:
        return f"Unpause the {name} loop? Its next tick pushes again."
    return f"Pause the {name} loop? Its ticks pass without a push until it is unpaused."
