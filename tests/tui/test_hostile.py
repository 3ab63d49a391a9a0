"""``wurk top`` over the hostile data the dashboard's property test writes
(``tests/web/test_hostile_families.py``): every key family it reads, made hostile in each
way (a value of the wrong Redis type, JSON nested past any limit, numbers no float holds,
NaN, 10 MB strings, control characters, more entries than any read takes), over a world
with one of everything. For each kind every view is read and shown — each tab, each period
of the Metrics tab, the last page of each set, the screen each list's first row opens —
none fails, each costs bounded time, and no text it would put on screen holds a control
character. With control characters the pilot also walks every tab and a job's screen, and
the terminal's text is checked as a person would see it.

One app is driven through every kind of a group (its start costs what a dozen views do)."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import wurk

pytest.importorskip("textual", reason="wurk top needs the tui extra: pip install 'wurk[tui]'")

from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import Static

from tests.tui.drive import drive, press, refresh, sheet_rows, shown, tab
from tests.tui.world import LEADER, World, process
from tests.web.test_hostile_families import BIG_SOURCE, FAMILIES, HOSTILE, build_world, now
from wurk.api import RetrySet
from wurk.keys import Keys
from wurk.tui import TopApp
from wurk.tui.app import TopScreen
from wurk.tui.panes import (
    BatchesPane,
    HomePane,
    MetricsPane,
    Pane,
    PeriodicPane,
    QueuesPane,
    SetPane,
)
from wurk.tui.screens import BatchScreen, DetailScreen, EntryScreen, LoopScreen, QueueScreen
from wurk.tui.view import LAST_PAGE, View
from wurk.web.metrics import PERIODS

# Families wurk top never reads, and why; every other family of the dashboard's test is
# made hostile here (a test below keeps the two lists honest).
NOT_READ = {
    "expired": "the Limits tab's count; wurk top has no Limits tab",
    "stat_recovered": "reliability counters no tab shows",
    "stat_poisoned": "reliability counters no tab shows",
    "leader_token": "the election's own fencing token",
    "history": "the History tab's samples; wurk top draws its own sparkline",
    "limiter_list": "no Limits tab", "limiter": "no Limits tab",
    "limiter_stats": "no Limits tab", "limiter_concurrent": "no Limits tab",
    "limiter_window": "no Limits tab", "limiter_leaky": "no Limits tab",
    "limiter_points": "no Limits tab",
}
READ = [family for family in FAMILIES if family.member not in NOT_READ]
TABS = ["home", "busy", "queues", "scheduled", "retries", "morgue", "metrics", "batches",
        "periodic"]
# One app a group (and one xdist worker each): each of the two kinds that write hundreds of
# megabytes alone (together they held one worker a minute while the others idled), and the
# rest.
GROUPS = {"10 MB": ["10 MB"], "many entries": ["many entries"],
          "small": sorted(set(HOSTILE) - {"10 MB", "many entries"})}
# What may never reach the screen: C0 controls but newline, DEL, C1 controls, the line
# separators and bidi overrides (wurk.stored.printable escapes them all).
UNPRINTABLE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# Processor seconds one view may take to read and show, however hostile the data (wall
# time on a loaded 2-core machine says little; an unbounded read misses this by far).
VIEW_CPU_SECONDS = 5.0


def test_the_families_read_here_are_the_dashboards_but_those_said_not_to_be() -> None:
    members = {family.member for family in FAMILIES}
    assert set(NOT_READ) <= members, set(NOT_READ) - members
    assert len(READ) + len(NOT_READ) == len(FAMILIES)


@pytest.fixture
def raw(redis_server: object) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    yield client
    client.close()


def make_hostile(raw: redis.Redis, kind: str) -> None:
    at = now()
    build_world(raw, at)
    keys = Keys()
    for family in READ:
        HOSTILE[kind](raw, family, family.key(keys, at))
    raw.delete(BIG_SOURCE)


def clean(where: str, texts: list[str]) -> None:
    for found in texts:
        bad = UNPRINTABLE.search(found)
        assert bad is None, (where, repr(found[max(bad.start() - 40, 0):bad.end() + 40]))


def pane_texts(pane: Pane) -> list[str]:
    """What the tab would draw: its lines and every cell of its tables."""
    texts = [str(static.content) for static in pane.query(Static)]
    for sheet in [pane.table, *pane.query("Sheet")]:
        texts += [str(cell) for row in sheet.rows_shown for cell in row.cells]  # type: ignore[attr-defined]
    return texts


def read_and_show(app: TopApp, view: View, where: str) -> None:
    """One refresh of ``view`` as the app does it (read, then shown), timed."""
    started = time.process_time()
    params = view.params()
    view.shown(view.read(app.config, params), params)
    took = time.process_time() - started
    assert took < VIEW_CPU_SECONDS, f"{where} took {took:.1f}s of processor time"


def detail(pane: Pane) -> DetailScreen | None:
    """The screen Enter opens on the list's first row."""
    rows = pane.table.rows_shown
    if not rows:
        return None
    ident = rows[0].ident
    if isinstance(pane, SetPane):
        return EntryScreen(pane.kind, ident)
    if isinstance(pane, (HomePane, QueuesPane)):
        return QueueScreen(ident)
    if isinstance(pane, BatchesPane):
        return BatchScreen(ident)
    if isinstance(pane, PeriodicPane):
        return LoopScreen(ident)
    return None


def every_view(app: TopApp, kind: str) -> None:
    """Each tab read and shown (hidden ones too), each period, each set's last page, each
    row's own screen (its text caught as it is put, the screen never mounted)."""
    top = app.screen
    assert isinstance(top, TopScreen)
    for pane in top.panes():
        where = f"{kind}: {pane.caption}"
        read_and_show(app, pane, where)
        if isinstance(pane, MetricsPane):
            for period in PERIODS:  # the minute keys to 8h, then the ten-minute ones
                pane.period = period
                read_and_show(app, pane, f"{where} {period}")
            pane.period = "1h"
        if isinstance(pane, SetPane):
            pane.page = LAST_PAGE
            read_and_show(app, pane, f"{where}, last page")
            pane.page = 1
        clean(where, pane_texts(pane))
        screen = detail(pane)
        if screen is not None:
            put: list[str] = []

            def keep(title: Text, lines: Any, put: list[str] = put) -> None:
                put.extend([str(title), *(str(line) for line in lines)])

            screen.put = keep  # type: ignore[method-assign]
            read_and_show(app, screen, f"{where}: {type(screen).__name__}")
            sheet = screen.sheet()
            if sheet is not None:
                put += [str(cell) for row in sheet.rows_shown for cell in row.cells]
            clean(f"{where}: {type(screen).__name__}", put)


async def walk_the_tabs(app: TopApp, pilot: Pilot[None]) -> None:
    """The pilot shows every tab and a job's screen; the terminal's text is escaped."""
    for name in [*TABS, "retries"]:
        await tab(app, pilot, name)
        assert app.problem is None, (name, app.problem)
        clean(name, [shown(app)])
    await press(app, pilot, "enter")
    assert isinstance(app.screen, EntryScreen)
    clean("a retry's screen", [shown(app)])
    await press(app, pilot, "escape")


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_every_family_made_hostile_is_shown_without_an_error(
        group: str, config: wurk.Config, raw: redis.Redis) -> None:
    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        for kind in GROUPS[group]:
            make_hostile(raw, kind)
            await refresh(app, pilot)  # the numbers and the tab in view, the app's way
            assert app.problem is None, (kind, app.problem)
            assert app.is_running
            clean(kind, [shown(app)])
            every_view(app, kind)
            if kind == "control characters":
                await walk_the_tabs(app, pilot)

    drive(config, scenario, size=(120, 40))


def test_markup_and_control_characters_in_a_job_show_as_typed_escaped(
        config: wurk.Config) -> None:
    sneaky = "[bold red]Evil[/]\x1b[2J\x00\u202eJob"
    RetrySet(config).schedule(time.time() + 60, {
        "class": sneaky, "args": ["[link=http://x]y[/link]"], "jid": "a" * 24,
        "queue": "default", "error_class": "E\r\nFAKE LINE", "error_message": "m\x07"})

    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "retries")
        screen = shown(app)
        assert "[bold red]Evil[/]\\x1b[2J\\x00\\u202eJob" in screen
        assert '["[link=http://x]y[/link]"]' in screen
        assert "E\\r\\nFAKE LINE: m\\x07" in screen
        await press(app, pilot, "enter")
        screen = shown(app)
        assert "Retries: [bold red]Evil[/]\\x1b[2J\\x00\\u202eJob" in screen
        assert UNPRINTABLE.search(screen) is None

    drive(config, scenario, size=(200, 40))


def test_running_jobs_whose_names_read_alike_are_each_listed(
        config: wurk.Config, world: World, raw: redis.Redis) -> None:
    # Two threads whose names are not UTF-8 read as the same text ("t\ufffd"), and a
    # process and thread joined into the name another pair makes: the table's row keys.
    work = json.dumps({"queue": "default", "run_at": time.time() - 5,
                       "payload": json.dumps({"class": "Twin", "args": [], "jid": "d" * 24})})
    raw.hset(f"{LEADER}:work", mapping={b"t\xff": work, b"t\xfe": work, "x|y": work})
    process(raw, f"{LEADER}|x", tag="twin", quiet=False, jobs=[])
    raw.hset(f"{LEADER}|x:work", "y", work)

    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "busy")
        assert app.problem is None
        jobs = [row[1] for row in sheet_rows(app, "#jobs")]
        assert sorted(jobs) == ["Export::Csv", "Mail::Deliver", *["Twin"] * 4,
                                "Video::Encode"]

    drive(config, scenario, size=(200, 50))
