"""Text from Redis made safe to print on one line.

1. ``printable(text)``: control characters, line and paragraph separators and the bidi
   overrides written as ``\\n``, ``\\x00``, ``\\u202e``… — so a value a payload carries (a
   job class with a newline, a NUL, an ANSI escape) can neither start a forged log line nor
   repaint a terminal, and what it was stays readable.
2. ``cut(text, limit)``: at most ``limit`` characters, an ellipsis marking the cut.

The log formats (``wurk.log``) and the checked values of the inspection model
(``wurk.api.values``) both use them.
"""

from __future__ import annotations

import re

__all__ = ["UNPRINTABLE_CHARS", "cut", "printable"]

# C0 controls but tab, DEL, C1 controls, the Unicode line/paragraph separators (terminals and
# editors break lines there) and the bidi embeddings/overrides/isolates (they reorder what a
# reader sees after them).
UNPRINTABLE_CHARS = "\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_UNPRINTABLE = re.compile(f"[{UNPRINTABLE_CHARS}]")
_NAMED = {"\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every character that could break or disguise a line escaped."""
    return _UNPRINTABLE.sub(_escape, text)


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the last one an ellipsis when it was cut."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"
