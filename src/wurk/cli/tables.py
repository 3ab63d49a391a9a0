"""Text a person reads at a glance: aligned tables, counts, durations, ages, sizes.

1. ``table`` — columns padded to their widest cell; numeric columns right-aligned; long
   cells cut with an ellipsis; control characters escaped (``wurk.stored.printable``).
2. ``count``, ``duration``, ``age``, ``kilobytes`` — numbers as people say them; a stored
   value that cannot be read (``wurk.api.values.Invalid``) shows as ``invalid (<raw>)``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..stored import Invalid, cut, printable

__all__ = ["age", "count", "duration", "kilobytes", "plural", "table"]

# A cell longer than this (an error message, a long argument list) is cut: one job per line
# matters more than the whole message, which --json gives in full.
MAX_CELL = 60
GAP = "  "
MINUTE, HOUR, DAY = 60, 3600, 86400


def table(headers: Sequence[str], rows: Sequence[Sequence[str | Invalid]],
          right: Sequence[int] = ()) -> str:
    """Rows under their headers; columns whose index is in ``right`` are right-aligned."""
    cells = [[_cut(str(c)) for c in row] for row in rows]
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]

    def line(row: Sequence[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        return GAP.join(parts).rstrip()

    return "\n".join([line(headers), *(line(row) for row in cells)])


def _cut(text: str) -> str:
    text = " ".join(text.split())  # newlines in a message would break the row
    # A stored name with a terminal escape must not repaint the screen: escaped, visibly.
    return cut(printable(text), MAX_CELL)


def count(n: int | Invalid) -> str:
    """``1234567`` → ``1,234,567``."""
    return str(n) if isinstance(n, Invalid) else f"{n:,}"


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 process``, ``2 processes``."""
    return f"{count(n)} {word if n == 1 else (words or word + 's')}"


def duration(seconds: float | Invalid) -> str:
    """``0.25`` → ``250ms``, ``75`` → ``1m 15s``, ``90000`` → ``1d 1h``."""
    if isinstance(seconds, Invalid):
        return str(seconds)
    s = abs(seconds)
    if s == 0:
        return "0s"
    if s < 1:
        return f"{s * 1000:.0f}ms"
    if s < MINUTE:
        return f"{s:.1f}s"
    whole = int(s)
    if s < HOUR:
        return f"{whole // MINUTE}m {whole % MINUTE:02d}s"
    if s < DAY:
        return f"{whole // HOUR}h {whole % HOUR // MINUTE:02d}m"
    return f"{whole // DAY}d {whole % DAY // HOUR}h"


def age(at: float | Invalid | None, now: float | None = None) -> str:
    """``in 5m 00s`` for a future time, ``3.0s ago`` for a past one, ``-`` when unknown."""
    if at is None:
        return "-"
    if isinstance(at, Invalid):
        return str(at)
    delta = at - (time.time() if now is None else now)
    return f"in {duration(delta)}" if delta > 0 else f"{duration(delta)} ago"


def kilobytes(kb: int | Invalid) -> str:
    """``30496`` → ``29.8 MB``."""
    if isinstance(kb, Invalid):
        return str(kb)
    if kb < 1024:
        return f"{kb} KB"
    if kb < 1024 * 1024:
        return f"{kb / 1024:.1f} MB"
    return f"{kb / 1024 / 1024:.2f} GB"
