"""``Sheet``: the table every tab shows, fitted to the terminal and refreshed in place.

1. Each column has a width that fits an 80-column terminal; the flexible ones (a job's
   name, its arguments, an error) share what a wider terminal has left by their weights, so
   the columns a person needs stay on screen at 80 columns and the text gets room at 200;
   a resize fits them again.
2. ``show(rows)`` refreshes without flicker: when the same rows come back it rewrites only
   the cells that changed; when rows come and go it rebuilds the table in the same frame and
   puts the cursor back on the row it was on (or where that row was), keeping the scroll.
3. Rows are named by what an action needs (an entry's key, a queue's name, a process's
   identity): ``current()`` is the row under the cursor, ``chosen()`` the selected rows
   (``x`` toggles one, ``A`` all of the page) or else the cursor's; a selected row a
   refresh moves off the page stays selected, by the name it had when selected. A stored name of any
   length is kept whole for the action but names its row by a short digest. Two rows
   named alike (two stored names that are not UTF-8 and read as the same text, or parts
   joined into one name) each get a key of their own: a table never holds a key twice.
4. Every cell is a ``rich.text.Text`` made by ``wurk.tui.text``: never markup, escaped, cut.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual import events
from textual.coordinate import Coordinate
from textual.widgets import DataTable

__all__ = ["Column", "Row", "Sheet"]

ROW_KEY_LIMIT = 200
MARK = "✓"


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int  # at 80 columns
    flex: int = 0  # its share of the width a wider terminal has left


@dataclass(frozen=True)
class Row:
    ident: str  # what an action on this row names (kept whole)
    cells: Sequence[Text]
    # What stays the same while the row moves, when the ident does not (a queued job's
    # ident holds its place in the list, which each push shifts): keys the row instead.
    anchor: str | None = None


def _row_key(ident: str) -> str:
    if len(ident) <= ROW_KEY_LIMIT:
        return ident
    return "#" + hashlib.sha1(ident.encode("utf-8", "replace"),
                              usedforsecurity=False).hexdigest()


def _row_keys(rows: Sequence[Row]) -> list[str]:
    """Each row's key, a repeated one numbered (``name#2``): ``DataTable`` refuses a key
    it holds already, and the rows after it would not be shown."""
    keys: list[str] = []
    taken: set[str] = set()
    repeats: dict[str, int] = {}
    for row in rows:
        key = base = _row_key(row.ident if row.anchor is None else row.anchor)
        while key in taken:
            repeats[base] = repeats.get(base, 1) + 1
            key = f"{base}#{repeats[base]}"
        taken.add(key)
        keys.append(key)
    return keys


class Sheet(DataTable[Text]):
    """A row-cursor table of stored values."""

    DEFAULT_CSS = """
    Sheet { height: 1fr; }
    """

    def __init__(self, columns: Sequence[Column], *, selectable: bool = False,
                 id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True, cell_padding=1)
        self.selectable = selectable
        self.specs = ([Column("sel", "", 1)] if selectable else []) + list(columns)
        self.rows_shown: list[Row] = []
        self.keys_shown: list[str] = []  # their row keys (a digest is computed once a read)
        self.idents: dict[str, str] = {}
        self.selected: set[str] = set()  # row keys
        # What each selected row named when it was selected: a refresh that moves a selected
        # entry off the page (newer entries before it) keeps it selected, by its stored name.
        self.picked: dict[str, str] = {}
        self.rebuilds = 0  # times rows came or went (the table rebuilt in one frame)
        self._fitted_to = -1

    # -- columns ------------------------------------------------------------------------------
    def widths(self, total: int) -> list[int]:
        padding = 2 * self.cell_padding
        used = sum(spec.width + padding for spec in self.specs) + 2  # 2: the scrollbar
        spare = max(0, total - used)
        shares = sum(spec.flex for spec in self.specs) or 1
        return [spec.width + spare * spec.flex // shares for spec in self.specs]

    def on_resize(self, event: events.Resize) -> None:
        if event.size.width != self._fitted_to:
            self._fit(event.size.width)

    def _fit(self, width: int) -> None:
        self._fitted_to = width
        self.clear(columns=True)
        for spec, size in zip(self.specs, self.widths(width), strict=True):
            self.add_column(spec.label, width=size, key=spec.key)
        rows, self.rows_shown, self.keys_shown = self.rows_shown, [], []
        self.show(rows)

    # -- rows ---------------------------------------------------------------------------------
    def _cells(self, key: str, row: Row) -> list[Text]:
        cells = list(row.cells)
        if self.selectable:
            cells.insert(0, Text(MARK if key in self.selected else "", style="bold green"))
        return cells

    def show(self, rows: Sequence[Row]) -> None:
        """Put ``rows`` on screen, changing only what changed."""
        if not self.columns:
            self.rows_shown, self.keys_shown = list(rows), []
            return
        keys = _row_keys(rows)
        old = self.keys_shown
        self.idents = {key: row.ident for key, row in zip(keys, rows, strict=True)}
        if keys == old and len(keys) == self.row_count:
            for key, row in zip(keys, rows, strict=True):
                for spec, value in zip(self.specs, self._cells(key, row), strict=True):
                    if self.get_cell(key, spec.key) != value:
                        self.update_cell(key, spec.key, value)
            self.rows_shown, self.keys_shown = list(rows), keys
            return
        here = self.current_key()
        at, scrolled = self.cursor_row, self.scroll_y
        self.rebuilds += 1
        self.clear()
        for key, row in zip(keys, rows, strict=True):
            self.add_row(*self._cells(key, row), key=key)
        self.rows_shown, self.keys_shown = list(rows), keys
        if keys:
            target = keys.index(here) if here in keys else min(at, len(keys) - 1)
            self.scroll_to(y=scrolled, animate=False, immediate=True)
            self.move_cursor(row=max(target, 0), animate=False)

    def current_key(self) -> str | None:
        if not self.row_count or self.cursor_row < 0:
            return None
        try:
            return str(self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0)).row_key.value)
        except Exception:  # no row there (the table is being rebuilt)
            return None

    def current(self) -> str | None:
        """The ident of the row under the cursor."""
        key = self.current_key()
        return None if key is None else self.idents.get(key)

    def chosen(self) -> list[str]:
        """The selected rows' idents in row order, or else the cursor's."""
        if self.selected:
            shown = [key for key in self.idents if key in self.selected]
            away = [key for key in self.picked if key in self.selected and key not in shown]
            return [self.idents[key] for key in shown] + [self.picked[key] for key in away]
        here = self.current()
        return [] if here is None else [here]

    def toggle(self, *, everything: bool = False) -> None:
        """Select or unselect the cursor's row; with ``everything``, all rows (or none)."""
        if not self.selectable:
            return
        if everything:
            self.selected = set() if self.selected else set(self.idents)
            self.picked = {key: self.idents[key] for key in self.selected}
        else:
            key = self.current_key()
            if key is not None and key in self.idents:
                self.selected ^= {key}
                if key in self.selected:
                    self.picked[key] = self.idents[key]
                else:
                    self.picked.pop(key, None)
        self.show(self.rows_shown)

    def unselect(self) -> None:
        self.selected = set()
        self.picked = {}
        self.show(self.rows_shown)
