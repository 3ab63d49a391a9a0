"""What the terminal shows of a value read from Redis: one safe line, styled, never markup.

1. ``cell(value)``: any stored value as a ``rich.text.Text`` — never parsed as markup (a
   job argument ``[bold]`` shows as typed), control characters, line separators and bidi
   overrides escaped (``wurk.stored.printable``: a class name holding ``\\x1b[2J`` cannot
   clear the screen), cut to ``CELL_LIMIT`` characters; an ``Invalid`` shows in red as
   ``invalid (<raw text>)``, as on the dashboard.
2. ``brief(value)``: a JSON value (a job's arguments) written as JSON but stopped after
   ``limit`` characters, so a 10 MB argument costs what a short one does.
3. Numbers as people say them: ``count``, ``duration``, ``ago``, ``kilobytes``, ``rate``,
   ``milliseconds`` — each passes an ``Invalid`` through as in 1.
4. ``lines(text)``: multi-line text (a backtrace, a payload) as escaped lines, each cut,
   at most ``LINE_CAP`` of them.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from typing import Any

from rich.text import Text

from ..cli.tables import duration as spoken_duration
from ..stored import Invalid, cut, printable, text

__all__ = ["CELL_LIMIT", "INVALID_STYLE", "LINE_CAP", "ago", "brief", "cell", "count",
           "duration", "joined", "kilobytes", "label", "lines", "milliseconds", "plain", "rate"]

# A cell never carries more than this: wider than any terminal, far below what an attacker
# can store (a 10 MB job name costs a row what a short one does).
CELL_LIMIT = 240
# Lines of a backtrace or payload a detail screen shows, and characters per line.
LINE_CAP = 500
LINE_LIMIT = 1_000
INVALID_STYLE = "bold red"


def plain(value: Any, limit: int = CELL_LIMIT) -> str:
    """A stored value as one escaped line of at most ``limit`` characters."""
    if isinstance(value, Invalid):
        return cut(str(value), limit)
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value[: 4 * (limit + 1)])
    found = text(value)
    return cut(printable(found[: limit + 1]).replace("\t", " "), limit)


def cell(value: Any, limit: int = CELL_LIMIT, *, style: str = "") -> Text:
    """A stored value as a cell: escaped, cut, an ``Invalid`` in red."""
    if isinstance(value, Invalid):
        return Text(plain(value, limit), style=INVALID_STYLE, end="")
    return Text(plain(value, limit), style=style, end="")


def label(words: str, style: str = "dim") -> Text:
    """Fixed text of ours (never stored data), styled."""
    return Text(words, style=style, end="")


def joined(*parts: Text | str) -> Text:
    """One line of our fixed words (``str``, dimmed) and values (``Text``)."""
    line = Text(end="")
    for part in parts:
        line.append_text(part if isinstance(part, Text) else label(part))
    return line


def brief(value: Any, limit: int = CELL_LIMIT) -> str:
    """``value`` written as JSON, stopped (with an ellipsis) once ``limit`` characters are
    written: a huge argument is never serialised whole."""
    parts: list[str] = []
    budget = [limit + 1]

    def put(piece: str) -> bool:
        parts.append(piece[: budget[0]])
        budget[0] -= len(piece)
        return budget[0] > 0

    def walk(item: Any, depth: int) -> bool:
        if isinstance(item, str):
            return put(json.dumps(item[: budget[0]], ensure_ascii=False))
        if isinstance(item, bool) or item is None:
            return put(json.dumps(item))
        if isinstance(item, int):
            return put(str(item) if item.bit_length() < 200 else "<a very long number>")
        if isinstance(item, float):
            return put(repr(item) if math.isfinite(item) else "<not a number>")
        if depth > 20:
            return put("…")
        if isinstance(item, (list, tuple)):
            if not put("["):
                return False
            for index, inner in enumerate(item):
                if (index and not put(", ")) or not walk(inner, depth + 1):
                    return False
            return put("]")
        if isinstance(item, dict):
            if not put("{"):
                return False
            for index, (key, inner) in enumerate(item.items()):
                if (index and not put(", ")) or not walk(str(key), depth + 1) \
                        or not put(": ") or not walk(inner, depth + 1):
                    return False
            return put("}")
        return put(str(item)[: budget[0]])

    walk(value, 0)
    return plain("".join(parts), limit)


def count(value: int | Invalid | None) -> Text:
    """``1234567`` → ``1,234,567``."""
    if value is None:
        return label("-")
    if isinstance(value, Invalid):
        return cell(value)
    return Text(f"{value:,}", end="")


def duration(seconds: float | Invalid | None) -> Text:
    """``0.25`` → ``250ms``, ``75`` → ``1m 15s``, ``90000`` → ``1d 1h``."""
    if seconds is None:
        return label("-")
    if isinstance(seconds, Invalid):
        return cell(seconds)
    if not math.isfinite(seconds):
        return cell(repr(seconds), style=INVALID_STYLE)
    return Text(spoken_duration(seconds), end="")


def ago(at: float | Invalid | None, now: float | None = None) -> Text:
    """``in 5m 00s`` for a future time, ``3.0s ago`` for a past one, ``-`` when unknown."""
    if at is None:
        return label("-")
    if isinstance(at, Invalid):
        return cell(at)
    delta = at - (time.time() if now is None else now)
    words = f"in {spoken_duration(delta)}" if delta > 0 else f"{spoken_duration(delta)} ago"
    return Text(words, end="")


def kilobytes(kb: int | Invalid | None) -> Text:
    """``30496`` → ``29.8 MB``."""
    if kb is None:
        return label("-")
    if isinstance(kb, Invalid):
        return cell(kb)
    if kb < 1024:
        return Text(f"{kb} KB", end="")
    if kb < 1024 * 1024:
        return Text(f"{kb / 1024:.1f} MB", end="")
    return Text(f"{kb / 1024 / 1024:.2f} GB", end="")


def milliseconds(ms: float | Invalid | None) -> Text:
    """A mean time in ms, as the Metrics page shows it."""
    if ms is None:
        return label("-")
    if isinstance(ms, Invalid):
        return cell(ms)
    return Text(f"{ms:,.1f}ms" if ms < 1000 else spoken_duration(ms / 1000), end="")


def rate(per_second: float | None) -> Text:
    """Jobs per second; ``-`` before there are two readings to compare."""
    if per_second is None:
        return label("-")
    return Text(f"{per_second:,.1f}/s", end="")


def lines(found: Any, *, cap: int = LINE_CAP) -> list[str]:
    """Multi-line stored text (a string, or the lines of a backtrace) as escaped lines."""
    if isinstance(found, Invalid):
        return [str(found)]
    source: Iterable[Any] = found if isinstance(found, list) else \
        text(found)[: cap * LINE_LIMIT].split("\n")
    shown: list[str] = []
    for number, line in enumerate(source):
        if number >= cap:
            shown.append(f"… (more than {cap} lines; the rest is not shown)")
            break
        shown.append(plain(line, LINE_LIMIT))
    return shown
