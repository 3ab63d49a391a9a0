"""``wurk top`` driven by Textual's headless pilot against the real test server (a test
module imports this after ``pytest.importorskip("textual")``).

``drive(config, scenario)`` runs the app headless at a terminal size and awaits
``scenario(app, pilot)``; ``settle`` waits until no read or action is in flight (each runs
in a worker thread), ``shown(app)`` is the screen's text as a terminal would show it. The
refresh tick is an hour unless a test asks otherwise: a test refreshes when it means to
(``r``), so what it sees is what it did.
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Awaitable, Callable

from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import TabbedContent

import wurk
from wurk.cli.inspect import server_name
from wurk.tui import TopApp
from wurk.tui.screens import ConfirmScreen
from wurk.tui.sheet import Sheet

Scenario = Callable[[TopApp, Pilot[None]], Awaitable[None]]
SETTLE_SECONDS = 20.0


def drive(config: wurk.Config, scenario: Scenario, *, size: tuple[int, int] = (160, 45),
          read_only: bool = False, interval: float = 3600.0) -> TopApp:
    """Run the app headless around ``scenario``; returns it (stopped) for a last look."""
    app = TopApp(config, server=server_name(config), read_only=read_only,
                 interval=interval)
    app.animation_level = "none"  # a tab's underline glides for 0.3 s; the test need not wait

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await settle(app, pilot)
            await scenario(app, pilot)

    asyncio.run(main())
    return app


async def settle(app: TopApp, pilot: Pilot[None]) -> None:
    """Until nothing read or done is in flight, and the screen has caught up."""
    deadline = time.monotonic() + SETTLE_SECONDS
    await pilot.pause()
    while not app.settled:
        assert time.monotonic() < deadline, "the app never settled"
        await pilot.pause(0.02)
    await pilot.pause()


async def press(app: TopApp, pilot: Pilot[None], *keys: str) -> None:
    """Press ``keys`` one at a time, each followed by what it started."""
    for key in keys:
        await pilot.press(key)
        await settle(app, pilot)


async def type_filter(app: TopApp, pilot: Pilot[None], text: str) -> None:
    """``/``, ``text`` typed (no read starts while typing: one wait at the end), Enter."""
    await press(app, pilot, "slash")
    await pilot.press(*text)
    await press(app, pilot, "enter")


async def refresh(app: TopApp, pilot: Pilot[None]) -> None:
    await press(app, pilot, "r")


async def tab(app: TopApp, pilot: Pilot[None], name: str) -> None:
    """Show tab ``name`` (its id: home, busy, queues, scheduled, retries, morgue,
    metrics, batches, periodic), as a click on it would, and wait for its read."""
    app.screen.query_one(TabbedContent).active = name
    await settle(app, pilot)


async def confirm(app: TopApp, pilot: Pilot[None], key: str, answer: str = "y") -> str:
    """Press action ``key``, check a question came up, answer it; returns the question."""
    await pilot.press(key)
    await pilot.pause()
    assert isinstance(app.screen, ConfirmScreen), f"{key} asked nothing"
    question = app.screen.words
    await press(app, pilot, answer)
    return question


def shown(app: TopApp) -> str:
    """The screen as text, the way a terminal shows it."""
    console = Console(width=app.size.width, height=app.size.height, file=io.StringIO(),
                      record=True, force_terminal=True, color_system=None)
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text()


def sheet_rows(app: TopApp, selector: str) -> list[list[str]]:
    """The plain text of each row of a table on screen."""
    table = app.screen.query_one(selector, Sheet)
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]
