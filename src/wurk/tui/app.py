"""``TopApp``: the terminal UI that ``wurk top`` runs.

1. Screens: the tabs (``wurk.tui.panes``) under a masthead naming the Redis it reads (and
   ``READ-ONLY``) and a line of the cluster's numbers; Enter opens a row's own screen
   (``wurk.tui.screens``); ``?`` shows every key.
2. Refreshing: every ``interval`` seconds (and at once after an action, a page turn, a
   filter, a tab change) one worker thread reads the numbers and the view in sight, and the
   screen is updated in place (``Sheet.show``): no flicker, the cursor stays on its row.
   Only the tab in view is read; a read still running when the next tick comes is not
   doubled. Redis unreachable: the masthead says so, the last numbers stay, the next tick
   tries again. A read that fails otherwise is named there too; the UI carries on.
3. Acting: an action key asks a ``ConfirmScreen`` first, then calls the dashboard's action
   in a worker thread (``wurk.tui.operations``), says what was done, and refreshes.
   Read-only: no action key is offered or obeyed.
4. Keyboard: kiq's keys — ←/→ tabs (or 1–9), j/k rows, h/l pages (g/G first and last),
   x select, A select all, / filter, upper case to act (R retry, D delete, K kill,
   E enqueue, P pause, Q quiet, T stop, I invalidate), r refresh, q quit.
5. Log records of wurk's loggers (a key of the wrong type, read as absent) become
   notifications while the UI runs, never text written over the screen.
"""

from __future__ import annotations

import collections
import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import redis
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, TabbedContent
from textual.worker import Worker, WorkerState

from ..config import Config
from ..errors import RedisUnavailable, WurkError
from . import reads
from . import text as T
from .operations import Act, Refused
from .panes import SPARK_SAMPLES, MetricsPane, Pane, panes
from .reads import Totals
from .screens import (
    ACT_BINDINGS,
    ACT_KEYS,
    ConfirmScreen,
    DetailScreen,
    HelpScreen,
    Masthead,
    TotalsLine,
)
from .view import LAST_PAGE, View

__all__ = ["DEFAULT_INTERVAL", "TopApp", "TopScreen"]

log = logging.getLogger("wurk.tui")

DEFAULT_INTERVAL = 2.0
NOTICE_LIMIT = 300
# The newest warnings kept (``TopApp.logged``): one a hostile record earns at every refresh
# must not grow the list for as long as the app runs.
NOTICES_KEPT = 200
# How long a notification stays on screen; the same warning is not shown again meanwhile.
NOTICE_SECONDS = 8.0

CSS = """
Screen { layout: vertical; }
.masthead { height: 1; background: $primary-background; color: $text; }
.line { height: auto; max-height: 2; }
.title { height: auto; max-height: 2; padding: 0 1; }
TotalsLine { padding: 0 1; }
TabPane { padding: 0; }
TabbedContent { height: 1fr; }
TabbedContent ContentSwitcher { height: 1fr; }
TabPane > .line { padding: 0 1; }
Sparkline { height: 2; margin: 0 1; }
.spark-label { height: 1; padding: 0 1; }
#processed-spark > .sparkline--max-color { color: $success; }
#processed-spark > .sparkline--min-color { color: $success 40%; }
#failed-spark > .sparkline--max-color { color: $error; }
#failed-spark > .sparkline--min-color { color: $error 40%; }
Input.filter { dock: bottom; display: none; }
Input.filter.-open { display: block; }
#processes { height: 2fr; }
#jobs { height: 3fr; }
#detail-scroll { height: 1fr; padding: 0 1; }
ConfirmScreen, HelpScreen { align: center middle; }
#confirm { width: 70; max-width: 95%; height: auto; border: thick $warning;
           background: $surface; padding: 1 2; }
#choices { margin-top: 1; }
#help { width: 90; max-width: 95%; height: 90%; border: round $primary;
        background: $surface; padding: 0 1; }
"""


@dataclass(frozen=True)
class Loaded:
    """What one refresh read, or why it could not."""

    view: View | None
    params: Any
    totals: Totals | None
    found: Any
    problem: str | None


@dataclass(frozen=True)
class Done:
    """What one action did, or why it did not."""

    view: View
    act: Act
    message: str
    ok: bool


def describe(exc: BaseException) -> str:
    """A failed read or action, as one safe line: Redis out of reach (or refusing for now),
    Redis answering with an error (a password refused, a permission, out of memory), or
    wurk's own error, each named as what it is."""
    shown = T.plain(exc, 160)
    if isinstance(exc, redis.AuthenticationError):  # a ConnectionError to redis-py
        return f"Redis refused the credentials ({shown}); retrying"
    if isinstance(exc, (RedisUnavailable, redis.ConnectionError, redis.TimeoutError)):
        return f"Redis cannot be reached right now ({shown}); retrying"
    if isinstance(exc, redis.RedisError):
        return f"Redis refused ({shown}); retrying"
    if isinstance(exc, WurkError):
        return f"{shown}; retrying"
    return f"{type(exc).__name__}: {shown}"


class Notices(logging.Handler):
    """wurk's log records as notifications (thread-safe: ``App.notify`` is)."""

    def __init__(self, app: TopApp, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(logging.WARNING)
        self.app = app
        self._clock = clock
        # The messages on screen now, with when each was shown: one repeated at every
        # refresh (a hostile record) is shown again only once the last has gone.
        self._shown: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = T.plain(record.getMessage(), NOTICE_LIMIT)
        except Exception:  # a record whose arguments do not format: say that much
            message = T.plain(record.msg, NOTICE_LIMIT)
        self.app.logged.append(message)
        now = self._clock()
        if now - self._shown.get(message, -NOTICE_SECONDS) < NOTICE_SECONDS:
            return
        if len(self._shown) >= NOTICES_KEPT:  # only those still on screen are kept, and
            # never more than NOTICES_KEPT (a flood of different ones is shown as it comes)
            kept = {m: t for m, t in self._shown.items() if now - t < NOTICE_SECONDS}
            self._shown = kept if len(kept) < NOTICES_KEPT else {}
        self._shown[message] = now
        self.app.notify(message, severity="warning", markup=False, timeout=NOTICE_SECONDS)


class TopScreen(Screen[None]):
    """The tabs."""

    BINDINGS: ClassVar[list[BindingType]] = [
        *ACT_BINDINGS,
        Binding("left", "tab(-1)", "Tab", priority=True, key_display="←/→"),
        Binding("right", "tab(1)", "Tab", priority=True, show=False),
        *(Binding(str(n), f"go({n})", f"Tab {n}", show=False) for n in range(1, 10)),
        Binding("j", "row(1)", "Down", show=False),
        Binding("k", "row(-1)", "Up", show=False),
        Binding("h", "turn(-1)", "Page", key_display="h/l"),
        Binding("l", "turn(1)", "Next page", show=False),
        Binding("g", "turn(0)", "First page", show=False),
        Binding("G", "turn(2)", "Last page", show=False),
        Binding("x", "select", "Select", show=False),
        Binding("A", "select_all", "Select all", show=False),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("p", "period", "Period"),
        Binding("escape", "clear", "Clear", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.tabs = panes()
        self.active = self.tabs[0]

    def compose(self) -> ComposeResult:
        yield Masthead(classes="masthead")
        yield TotalsLine(classes="line")
        with TabbedContent(id="tabs"):
            yield from self.tabs
        yield Footer(compact=True)

    def panes(self) -> list[Pane]:
        return list(self.tabs)

    def pane(self) -> Pane:
        """The tab in view (kept as tabs change: bindings ask for it at every refresh)."""
        return self.active

    def focus_pane(self) -> None:
        found = self.pane().sheet()
        if found is not None:
            found.focus()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        """A tab shown (the first one too, at start, or a click): read it now. The pane is
        the one the switcher shows now, not the event's: under load a tab key's message can
        arrive after the next tab key has switched again, and must not step back."""
        shown = self.query_one(TabbedContent).active
        self.active = next((pane for pane in self.tabs if pane.key == shown), self.active)
        self.focus_pane()
        self.refresh_bindings()
        self.app.refresh_bindings()
        self._refresh(force=False)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        opened = self.pane().open()
        if opened is not None:
            self.app.push_screen(opened)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        typing = isinstance(self.focused, Input)
        if typing and action in ("tab", "go", "row", "turn", "select", "select_all",
                                 "filter", "period"):
            return False
        pane = self.active
        if action == "turn":
            return pane.pageable
        if action in ("select", "select_all"):
            return pane.table.selectable
        if action == "filter":
            return pane.filterable
        if action == "period":
            return isinstance(pane, MetricsPane)
        return True

    # -- moving -------------------------------------------------------------------------------
    def action_tab(self, step: int) -> None:
        index = self.tabs.index(self.active)
        self.show(self.tabs[(index + step) % len(self.tabs)])

    def action_go(self, number: int) -> None:
        if 1 <= number <= len(self.tabs):
            self.show(self.tabs[number - 1])

    def show(self, pane: Pane) -> None:
        """``pane``'s tab in sight and, at once, the one keys act on: Enter or an action key
        read right after the tab's key (a person typing fast, an app lagging behind its
        input) goes to the tab drawn, not to the one before (TabActivated comes later)."""
        self.query_one(TabbedContent).active = pane.key
        self.active = pane
        self.focus_pane()
        self.refresh_bindings()

    def action_row(self, step: int) -> None:
        table = self.focused
        if isinstance(table, DataTable):
            if step > 0:
                table.action_cursor_down()
            else:
                table.action_cursor_up()

    def action_turn(self, how: int) -> None:
        pane = self.pane()
        page = {-1: pane.page - 1, 1: pane.page + 1, 0: 1, 2: LAST_PAGE}[how]
        if how == 1 and pane.page >= pane.pages:
            return
        if pane.turn(page):
            self._refresh()

    def action_select(self) -> None:
        found = self.pane().sheet()
        if found is not None:
            found.toggle()

    def action_select_all(self) -> None:
        found = self.pane().sheet()
        if found is not None:
            found.toggle(everything=True)

    def action_filter(self) -> None:
        box = self.pane().query_one(Input)
        box.value = self.pane().substr
        box.add_class("-open")
        box.focus()

    def action_period(self) -> None:
        pane = self.pane()
        if isinstance(pane, MetricsPane):
            pane.cycle()
            self._refresh()

    def action_clear(self) -> None:
        pane = self.pane()
        found = pane.sheet()
        if found is not None and found.selected:
            found.unselect()
        elif pane.substr:
            pane.filter("")
            self._refresh()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.input.remove_class("-open")
        self.pane().filter(event.value)
        self.focus_pane()
        self._refresh()

    def on_key(self, event: Any) -> None:
        if event.key == "escape" and isinstance(self.focused, Input):
            event.stop()
            self.focused.remove_class("-open")
            self.focus_pane()

    def _refresh(self, force: bool = True) -> None:
        top = self.app
        if isinstance(top, TopApp):
            top.request_refresh(force=force)


class TopApp(App[None]):
    """``wurk top``: the dashboard's views and actions in a terminal."""

    CSS = CSS
    TITLE = "wurk top"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("q", "quit", "Quit"),
        Binding("r", "refresh", "Refresh", show=False),
    ]

    def __init__(self, config: Config, *, server: str, read_only: bool = False,
                 interval: float = DEFAULT_INTERVAL,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.config = config
        self.server = server
        self.read_only = read_only
        self.interval = interval
        self.clock = clock
        self.totals: Totals | None = None
        self.rates: collections.deque[tuple[float, float]] = collections.deque(
            maxlen=SPARK_SAMPLES)
        self.problem: str | None = None
        self.updated_at: float | None = None
        self.logged: collections.deque[str] = collections.deque(maxlen=NOTICES_KEPT)
        self.done: list[str] = []  # what each action said, for a person scrolling back
        self._loading = self._wanted = self._force = False
        self._acting = 0
        self._reading: View | None = None
        self._handler = Notices(self)
        self._saved: tuple[list[logging.Handler], bool] | None = None

    def get_default_screen(self) -> Screen[Any]:
        return TopScreen()

    # -- life ---------------------------------------------------------------------------------
    def on_mount(self) -> None:
        wurk_log = logging.getLogger("wurk")
        self._saved = (list(wurk_log.handlers), wurk_log.propagate)
        wurk_log.handlers = [self._handler]
        wurk_log.propagate = False
        self.draw_masthead()
        self.set_interval(self.interval, self.request_refresh)

    def on_unmount(self) -> None:
        if self._saved is not None:
            wurk_log = logging.getLogger("wurk")
            wurk_log.handlers, wurk_log.propagate = self._saved
            self._saved = None

    @property
    def settled(self) -> bool:
        """Nothing read or done is in flight (tests wait for this)."""
        return not (self._loading or self._wanted or self._acting)

    def view(self) -> View | None:
        """What is in sight: the top-most detail screen, or the tab shown."""
        for screen in reversed(self.screen_stack):
            if isinstance(screen, DetailScreen):
                return screen
            if isinstance(screen, TopScreen):
                return screen.pane() if screen.is_mounted else None
        return None

    def top(self) -> TopScreen | None:
        return next((s for s in self.screen_stack if isinstance(s, TopScreen)), None)

    # -- refreshing ---------------------------------------------------------------------------
    def request_refresh(self, force: bool = False) -> None:
        if self._loading and not force and self.view() is self._reading:
            return  # being read now (a tick, or the first tab's activation at start)
        self._wanted = True
        self._force = self._force or force
        if not self._loading:
            self._start()

    def opened(self, screen: Screen[Any]) -> None:
        """A detail screen just mounted: its masthead and totals as last read, then its read."""
        self.draw_masthead()
        if self.totals is not None:
            line = totals_line(self.totals)
            for widget in screen.query(TotalsLine):
                widget.update(line)
        self.request_refresh(force=True)

    def action_refresh(self) -> None:
        self.request_refresh(force=True)

    def _start(self) -> None:
        view = self.view()
        params = view.params() if view is not None else None
        due = view is not None and (self._force or view.due())
        self._loading, self._wanted, self._force = True, False, False
        self._reading = view
        self.run_worker(partial(self._read, view, params, due), thread=True, group="load",
                        exit_on_error=False)

    def _read(self, view: View | None, params: Any, due: bool) -> Loaded:
        """In a worker thread: the numbers, and the view's data when it is due."""
        try:
            totals = reads.totals(self.config)
            found = view.read(self.config, params) if view is not None and due else None
        except Exception as exc:  # Redis down, or a read that failed: say so, carry on
            if isinstance(exc, (redis.RedisError, WurkError)):
                return Loaded(view, params, None, None, describe(exc))
            log.debug("wurk top: a read failed", exc_info=True)
            return Loaded(view, params, None, None,
                          f"Could not show this view: {describe(exc)}")
        return Loaded(view, params, totals, found, None)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state not in (WorkerState.SUCCESS, WorkerState.ERROR,
                               WorkerState.CANCELLED):
            return
        worker = event.worker
        if worker.group == "load":
            self._loading = False
            result = worker.result if event.state == WorkerState.SUCCESS else None
            self._loaded(result if isinstance(result, Loaded) else
                         Loaded(None, None, None, None, describe(worker.error)
                                if worker.error else "the read was cancelled"))
            if self._wanted:
                self._start()
        elif worker.group == "act":
            self._acting -= 1
            done = worker.result if event.state == WorkerState.SUCCESS else None
            if isinstance(done, Done):
                self._finished(done)
            else:
                self.notify(describe(worker.error) if worker.error else "cancelled",
                            severity="error", markup=False)
            self.request_refresh(force=True)

    def _loaded(self, loaded: Loaded) -> None:
        try:
            self._show(loaded)
        except Exception as exc:  # a value shown wrongly must not end the UI
            log.debug("wurk top: showing a read failed", exc_info=True)
            self.problem = f"Could not show this view: {describe(exc)}"
        self.draw_masthead()

    def _show(self, loaded: Loaded) -> None:
        self.problem = loaded.problem
        if loaded.totals is None:
            return
        previous, self.totals = self.totals, loaded.totals
        self.updated_at = self.clock()
        if previous is not None:
            self.rates.append(rates(previous, loaded.totals))
        line = totals_line(loaded.totals)
        for screen in self.screen_stack:
            for widget in screen.query(TotalsLine):
                widget.update(line)
        top = self.top()
        if top is not None and top.is_mounted:
            for pane in top.panes():
                pane.show_totals(loaded.totals, list(self.rates))
        view = loaded.view
        if view is not None and _mounted(view) and view.params() == loaded.params:
            view.shown(loaded.found, loaded.params)

    def draw_masthead(self) -> None:
        line = Text(" wurk top", style="bold", end="")
        line.append("  Redis ", style="dim")
        line.append(T.plain(self.server, 120))
        if self.read_only:
            line.append("  READ-ONLY", style="bold yellow")
        if self.problem:
            line.append(f"  {self.problem}", style="bold red")
        elif self.updated_at is not None:
            stamp = dt.datetime.fromtimestamp(self.updated_at).strftime("%H:%M:%S")
            line.append(f"  updated {stamp}, every {self.interval:g}s", style="dim")
        for screen in self.screen_stack:
            for widget in screen.query(Masthead):
                widget.update(line)

    def on_screen_resume(self) -> None:
        self.draw_masthead()

    # -- acting -------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action != "act":
            return True
        if self.read_only or isinstance(self.screen, (ConfirmScreen, HelpScreen)):
            return False
        if isinstance(self.screen.focused, Input):
            return False
        view = self.view()
        return view is not None and view.act_for(str(parameters[0])) is not None

    def action_act(self, key: str) -> None:
        view = self.view()
        act = view.act_for(key) if view is not None and not self.read_only else None
        if view is None or act is None:
            return
        targets = view.targets(act)
        everything = view.everything(act)
        if not targets and not everything:
            self.notify("Nothing here to act on.", markup=False)
            return
        act = view.resolve(act, targets)
        question = view.question(act, targets) if targets else f"{act.verb} {everything}?"

        def answered(answer: str | None) -> None:
            if answer is None or (answer == "one" and not targets):
                return
            self._acting += 1
            self.run_worker(partial(self._perform, view, act, targets, answer == "all"),
                            thread=True, group="act", exit_on_error=False)

        self.push_screen(ConfirmScreen(question, everything), answered)

    def _perform(self, view: View, act: Act, targets: Sequence[str], everything: bool) -> Done:
        """In a worker thread: the dashboard's action."""
        try:
            return Done(view, act, view.perform(self.config, act, targets, everything), True)
        except Refused as exc:
            return Done(view, act, str(exc), False)
        except Exception as exc:
            if isinstance(exc, (redis.RedisError, WurkError)):
                # Unlike a read, an action is never tried again on its own: say so.
                return Done(view, act, f"{act.verb} failed: Redis cannot be reached "
                            f"({T.plain(exc, 160)}); not tried again", False)
            log.debug("wurk top: an action failed", exc_info=True)
            return Done(view, act, f"{act.verb} failed: {describe(exc)}", False)

    def _finished(self, done: Done) -> None:
        self.done.append(done.message)
        self.notify(done.message, severity="information" if done.ok else "error",
                    markup=False)
        if done.ok and _mounted(done.view):
            done.view.after(done.act)

    # -- help ---------------------------------------------------------------------------------
    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        view = self.view()
        sections: list[tuple[str, list[tuple[str, str]]]] = []
        if view is not None:
            here: list[tuple[str, str]] = [(act.key, f"{act.verb} (asks first)")
                                           for act in view.acts]
            if self.read_only and here:
                here = [("", "read-only: actions are off (wurk top --read-only)")]
            if view.pageable:
                here += [("h / l", "previous / next page"), ("g / G", "first / last page")]
            if view.filterable:
                here += [("/", "filter (Enter applies, Escape clears)")]
            if isinstance(view, MetricsPane):
                here += [("p", "next period: 1h 2h 4h 8h 24h 48h 72h")]
            if view.sheet() is not None and view.sheet().selectable:  # type: ignore[union-attr]
                here += [("x / A", "select the row / every row of the page")]
            sections.append((f"This view: {T.plain(view.caption, 40)}", here or
                             [("", "nothing to do here but look")]))
        sections.append(("Everywhere", [
            ("← / →, 1-9", "previous / next tab, tab by number"),
            ("↑ ↓, j / k", "move between rows"), ("Enter", "open the row"),
            ("Escape", "back, or clear the selection or filter"),
            ("r", f"refresh now (it refreshes every {self.interval:g}s)"),
            ("?", "this help"), ("q", "quit")]))
        sections.append(("Actions", [(key, verb) for key, verb in ACT_KEYS.items()] +
                         [("", "upper case: Shift means you mean it; each asks first")]))
        self.push_screen(HelpScreen(sections))


def _mounted(view: View) -> bool:
    return bool(getattr(view, "is_mounted", False))


def rates(before: Totals, after: Totals) -> tuple[float, float]:
    """Processed and failed per second between two readings (0 after a reset)."""
    seconds = max(after.read_at - before.read_at, 1e-3)

    def per_second(old: Any, new: Any) -> float:
        if isinstance(old, int) and isinstance(new, int) and new >= old:
            return (new - old) / seconds
        return 0.0

    return per_second(before.processed, after.processed), \
        per_second(before.failed, after.failed)


def totals_line(totals: Totals) -> Text:
    return T.joined("Processed ", T.count(totals.processed), "  Failed ",
                    T.count(totals.failed), "  Busy ", T.count(totals.busy), "  Enqueued ",
                    T.count(totals.enqueued), "  Scheduled ", T.count(totals.scheduled),
                    "  Retries ", T.count(totals.retries), "  Dead ", T.count(totals.dead),
                    "  Latency ", T.duration(totals.latency))
