"""``View``: what the app refreshes and acts through — a tab, or a screen opened from one.

1. Reading: ``params()`` (on the UI thread) says what the next read needs — a page, a
   filter; ``read(config, params)`` (in a worker thread: it touches no widget) reads Redis
   through ``wurk.tui.reads``; ``shown(found, params)`` (on the UI thread) puts it on screen.
   A result read for other params than the current ones is dropped (another read follows).
2. Acting: ``acts`` are the action keys it offers; ``targets(act)`` what the cursor or the
   selection names; ``question`` the confirmation's text; ``perform`` (worker thread) calls
   the dashboard's action through ``wurk.tui.operations``.
3. Paging (``h``/``l``, ``g``/``G``) and filtering (``/``) for the views that list pages.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from textual.screen import Screen

from ..config import Config
from .operations import Act
from .sheet import Sheet

__all__ = ["LAST_PAGE", "View"]

# ``G`` asks for this page; every reader clamps it to the last one there is.
LAST_PAGE = 10**9


class View:
    """The reading and acting side of a tab or a detail screen."""

    caption = ""  # what a person calls it: "Retries", "queue default"
    acts: tuple[Act, ...] = ()
    pageable = False
    filterable = False
    page = 1
    pages = 1
    substr = ""

    # -- reading ------------------------------------------------------------------------------
    def params(self) -> Hashable:
        return None

    def read(self, config: Config, params: Any) -> Any:
        return None

    def shown(self, found: Any, params: Any) -> None:
        """Show what ``read`` returned (None: nothing read this time)."""

    def due(self) -> bool:
        """Whether a refresh tick should read this view again (Metrics: once a minute)."""
        return True

    # -- acting -------------------------------------------------------------------------------
    def act_for(self, key: str) -> Act | None:
        return next((act for act in self.acts if act.key == key), None)

    def resolve(self, act: Act, targets: Sequence[str]) -> Act:
        """The action ``act``'s key means for these targets (``P``: pause, or unpause a
        paused one)."""
        return act

    def sheet(self) -> Sheet | None:
        return None

    def targets(self, act: Act) -> list[str]:
        found = self.sheet()
        return [] if found is None else found.chosen()

    def question(self, act: Act, targets: Sequence[str]) -> str:
        return f"{act.verb} {len(targets)}?"

    def everything(self, act: Act) -> str | None:
        """The confirmation's "all" choice for ``act`` ("All 1,234 in Retries"), if any."""
        return None

    def perform(self, config: Config, act: Act, targets: Sequence[str],
                everything: bool) -> str:
        raise NotImplementedError

    def after(self, act: Act) -> None:
        """What the view does once ``act`` is done (clear the selection, close a screen)."""
        found = self.sheet()
        if found is not None:
            found.unselect()

    # -- moving -------------------------------------------------------------------------------
    def turn(self, page: int) -> bool:
        """Go to ``page`` (clamped when read); whether it is another page."""
        if not self.pageable:
            return False
        wanted = max(1, page)
        if wanted == self.page:
            return False
        self.page = wanted
        found = self.sheet()
        if found is not None:
            found.unselect()
        return True

    def filter(self, text: str) -> None:
        self.substr = text.strip()[:100]
        self.page = 1

    def open(self) -> Screen[Any] | None:
        """The screen Enter opens for the row under the cursor, if any."""
        return None
