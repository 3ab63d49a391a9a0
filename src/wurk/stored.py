"""Reading what is stored in Redis: decoded, checked, made safe to show.

Everything read from Redis was written by someone else — Ruby Sidekiq, an older wurk, a person
at ``redis-cli``, an attacker. This module is the one place stored bytes become text and
values; a value that is not what it should be costs one cell of one page, never the page.

1. ``text(value)``: the one decoder of stored text (bytes as UTF-8, bad bytes replaced; None
   as ``""``); ``utf8(value)`` is the strict form, None for bytes that are not UTF-8.
2. ``printable(text)``: control characters, line and paragraph separators and the bidi
   overrides written as ``\\n``, ``\\x00``, ``\\u202e``… — so a value a payload carries (a
   job class with a newline, a NUL, an ANSI escape) can neither start a forged log line nor
   repaint a terminal, and what it was stays readable. ``cut(text, limit)``: at most
   ``limit`` characters, an ellipsis marking the cut; ``shown(value, limit)``: all three.
3. ``Invalid`` stands where a value could not be read: it carries what was stored (control
   characters escaped, cut to ``RAW_LIMIT``) and what was expected. Readers return
   ``T | Invalid``, and ``None`` for a value that is simply not there.
4. The readers: ``epoch`` (a time in any form Sidekiq wrote, from 1970 to 9999), ``count`` (a
   Redis counter or size field: 0 to 2⁶³−1), ``integer`` (a JSON integer in Redis's range),
   ``json_object`` (a JSON object nested at most 100 deep), ``backtrace`` (a stored
   backtrace, inflated to at most ``payload.BACKTRACE_MAX_BYTES``), ``latency``.
5. Output is bounded: ``to_json`` cuts a string past ``JSON_TEXT_LIMIT`` characters.
6. Reading Redis itself, with caps (``checked``, ``replies``, ``hash_fields``, ``members``):
   an error reply — a key of the wrong Redis type — becomes ``Invalid`` in place of the
   value, and a collection is read only up to a cap (``FIELD_CAP`` fields or members), so a
   key holding a million fields costs a page no more than ten thousand would. What is cut
   says so (``Capped``).
7. ``to_json`` makes a document safe for JSON output: every ``Invalid``, NaN or infinity
   becomes ``null`` and its raw text goes into the top-level ``"invalid"`` object, keyed by
   the JSON Pointer (RFC 6901) of where it stood — never a 500, never ``Infinity``.
   ``valid_total`` sums what is valid of a column.

A new reader of stored values (a dashboard tab, a CLI command) reads through these, returns
the values as they come (``Invalid`` included) and leaves showing them to the edge: the
dashboard's templates render ``Invalid`` as a marked cell, ``to_json`` as above. The
inspection API re-exports the readers as ``wurk.api.values``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from redis.exceptions import ResponseError

from . import payload as P

__all__ = ["FIELD_CAP", "RAW_LIMIT", "UNPRINTABLE_CHARS", "Capped", "Invalid", "backtrace",
           "checked", "count", "cut", "epoch", "hash_fields", "integer", "invalid",
           "json_object", "latency", "members", "printable", "replies", "shown",
           "split_invalid", "text", "to_json", "utf8", "valid_total"]

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


def text(value: Any) -> str:
    """Stored text as ``str``: bytes decoded as UTF-8 (a bad byte becomes U+FFFD), None as
    ``""``, anything else through ``str``."""
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else str(value)


def utf8(value: bytes | str) -> str | None:
    """Stored text as ``str``, or None when its bytes are not UTF-8: for a name that must be
    exactly what its writer wrote (a process identity), never a guess."""
    if isinstance(value, str):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return None


def shown(value: Any, limit: int) -> str:
    """A stored value as one safe line of at most ``limit`` characters."""
    return cut(printable(text(value)), limit)


T = TypeVar("T")

# Enough of a bad value to recognise it; a 1 MiB one is not printed whole.
RAW_LIMIT = 120
# Redis integers (INCRBY, HSET counters) are signed 64-bit: nothing Redis counted is larger.
REDIS_INT_MAX = 2**63 - 1
# Times a person can be shown: 1970-01-01 up to the last second of year 9999 (Python's
# datetime ends there; a later "time" is a unit mistake or an attack).
EPOCH_MAX = 253_402_300_800.0
# A count as Redis writes it: optional minus, at most 19 digits (anything longer overflows).
_COUNT_TEXT = re.compile(r"-?[0-9]{1,19}")


@dataclass(frozen=True, slots=True)
class Invalid:
    """A stored value that is not what it should be."""

    raw: str  # what was stored, printable and cut to RAW_LIMIT characters
    expected: str  # what it should have been: "a time", "a count", …

    def __str__(self) -> str:
        return f"invalid ({self.raw})"


def invalid(value: Any, expected: str) -> Invalid:
    """An ``Invalid`` for ``value``, whatever its type."""
    return Invalid(raw=cut(printable(_as_text(value)[: RAW_LIMIT + 1]), RAW_LIMIT),
                   expected=expected)


def _as_text(value: Any) -> str:
    if isinstance(value, Invalid):
        return value.raw
    if isinstance(value, (bytes, bytearray)):
        return bytes(value[: 4 * (RAW_LIMIT + 1)]).decode("utf-8", "replace")
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return repr(value)
    try:
        return str(value) if isinstance(value, int) else P.dumps(value)
    except (ValueError, TypeError, RecursionError):  # a 5 000-digit int, NaN in a list
        return repr(type(value))


# -- readers ----------------------------------------------------------------------------------
def epoch(value: Any) -> float | Invalid | None:
    """Epoch seconds from a stored time (float s, integer ms, text, ISO dates); ``None`` when
    absent; ``Invalid`` when unreadable or outside 1970..9999."""
    if value is None or isinstance(value, Invalid):
        return value
    try:
        seconds = P.read_time(value)
    except (OverflowError, ValueError):  # defensive: read_time promises None
        seconds = None
    if seconds is None or not 0 <= seconds < EPOCH_MAX:
        return invalid(value, "a time")
    return seconds


def count(value: Any, *, missing: int = 0) -> int | Invalid:
    """A Redis counter or size (``bytes``, text or int): 0 to 2⁶³−1; ``missing`` if absent."""
    if value is None:
        return missing
    if isinstance(value, Invalid):
        return value
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, (bytes, str)):
        text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
        if _COUNT_TEXT.fullmatch(text.strip()):
            number = int(text)
    if number is None or not 0 <= number <= REDIS_INT_MAX:
        return invalid(value, "a count")
    return number


def count_or_zero(value: Any) -> int:
    """``count``, with what is no count (text, another number, absent) read as 0: for an
    order or a tally that a stray value must not stop."""
    found = count(value)
    return 0 if isinstance(found, Invalid) else found


def integer(value: Any) -> int | Invalid | None:
    """A JSON integer (a pid, a retry count) within Redis's range; ``None`` when absent."""
    if value is None or isinstance(value, Invalid):
        return value
    if isinstance(value, int) and not isinstance(value, bool) \
            and -REDIS_INT_MAX - 1 <= value <= REDIS_INT_MAX:
        return value
    return invalid(value, "a whole number")


def json_object(raw: bytes | str | None) -> dict[str, Any] | Invalid | None:
    """A stored JSON object (no NaN, at most 100 levels deep); ``None`` when absent."""
    if raw is None:
        return None
    try:
        value = P.loads_json(raw)
    except ValueError:
        return invalid(raw, "a JSON object")
    return value if isinstance(value, dict) else invalid(raw, "a JSON object")


def backtrace(value: Any) -> list[str] | Invalid | None:
    """A stored backtrace's lines; ``Invalid`` (saying why) when it cannot be read."""
    if value is None:
        return None
    try:
        return P.read_backtrace(value)
    except ValueError as exc:
        return invalid(value, str(exc))


def latency(since: float | Invalid | None, now: float) -> float | Invalid:
    """Seconds from ``since`` to ``now`` (0.0 when unknown); ``Invalid`` passes through."""
    if since is None:
        return 0.0
    if isinstance(since, Invalid):
        return since
    return now - since


def valid_total(values: Iterable[int | Invalid]) -> int:
    """The sum of the valid values (an invalid cell does not take the total with it)."""
    return sum(value for value in values if not isinstance(value, Invalid))


# -- reading Redis ------------------------------------------------------------------------------
# Fields of one hash, or members of one set, that one read takes at most: far more than any
# sensible record holds (a limiter's metadata, a minute's metrics of a few thousand jobs), far
# less than an attacker's million.
FIELD_CAP = 10_000
# Entries one SCAN step asks for.
SCAN_STEP = 1_000


@dataclass(frozen=True, slots=True)
class Capped:
    """A collection read only in part: ``items`` (what was read) of ``total`` stored."""

    items: Any
    total: int

    @property
    def cut(self) -> bool:
        return len(self.items) < self.total


def _error(reply: Any, expected: str) -> Invalid | None:
    if isinstance(reply, Exception):
        message = str(reply)
        kind = "a key of the wrong type" if "WRONGTYPE" in message else message
        return Invalid(raw=cut(printable(kind), RAW_LIMIT), expected=expected)
    return None


def checked(reply: Any, expected: str) -> Any:
    """``reply`` itself, or ``Invalid`` when Redis answered with an error (a key of the wrong
    type): what the caller reads stands in one cell, not in the way of the page."""
    found = _error(reply, expected)
    return reply if found is None else found


def replies(pipe: Any) -> list[Any]:
    """A pipeline's replies, each error reply an ``Invalid`` in its place (the pipeline is
    run with ``raise_on_error=False``: one bad key must not take the others with it)."""
    return [checked(reply, "data of the right type") for reply in pipe.execute(
        raise_on_error=False)]


def _call(fn: Callable[[], T], expected: str) -> T | Invalid:
    try:
        return fn()
    except ResponseError as exc:
        return Invalid(raw=cut(printable(str(exc)), RAW_LIMIT), expected=expected)


def hash_fields(r: Any, key: str, *, cap: int = FIELD_CAP) -> Capped | Invalid:
    """A hash with open-ended fields (a minute's metrics, deploy marks), read whole when it
    is small and up to ``cap`` fields when it is not: ``Capped`` of a dict of raw bytes."""
    size = _call(lambda: int(r.hlen(key)), "a hash")
    if isinstance(size, Invalid):
        return size
    if size <= cap:
        found = _call(lambda: dict(r.hgetall(key)), "a hash")
        return found if isinstance(found, Invalid) else Capped(found, size)
    taken: dict[Any, Any] = {}
    cursor = 0
    while len(taken) < cap:
        cursor, page = r.hscan(key, cursor, count=SCAN_STEP)
        taken.update(page)
        if not cursor:
            break
    return Capped(dict(list(taken.items())[:cap]), size)


def members(r: Any, key: str, *, cap: int = FIELD_CAP) -> Capped | Invalid:
    """A set, up to ``cap`` members: ``Capped`` of a list of raw bytes."""
    size = _call(lambda: int(r.scard(key)), "a set")
    if isinstance(size, Invalid):
        return size
    if size <= cap:
        found = _call(lambda: list(r.smembers(key)), "a set")
        return found if isinstance(found, Invalid) else Capped(found, size)
    taken: set[Any] = set()
    cursor = 0
    while len(taken) < cap:
        cursor, page = r.sscan(key, cursor, count=SCAN_STEP)
        taken.update(page)
        if not cursor:
            break
    return Capped(list(taken)[:cap], size)


# -- JSON output ------------------------------------------------------------------------------
# A string in a JSON document for people (the dashboard's API, ``--json`` listings) is cut
# past this: a 10 MB job name or argument costs a document ten thousand characters.
JSON_TEXT_LIMIT = 10_000

def to_json(document: Any) -> Any:
    """``document`` with each bad value as ``null``; a dict gets the raw texts under
    ``"invalid"`` (JSON Pointer → raw text) when there are any."""
    clean, found = split_invalid(document)
    if found and isinstance(clean, dict):
        clean["invalid"] = found
    return clean


def split_invalid(document: Any) -> tuple[Any, dict[str, str]]:
    """``(clean document, {JSON Pointer: raw text})``."""
    found: dict[str, str] = {}
    return _clean(document, "", found), found


def _clean(value: Any, at: str, found: dict[str, str]) -> Any:
    if isinstance(value, Invalid):
        found[at] = value.raw
        return None
    if isinstance(value, float) and not math.isfinite(value):
        found[at] = repr(value)
        return None
    if isinstance(value, dict):
        return {cut(str(key), JSON_TEXT_LIMIT): _clean(item, f"{at}/{_pointer(str(key))}",
                                                      found)
                for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(item, f"{at}/{index}", found) for index, item in enumerate(value)]
    if isinstance(value, str):
        return value if len(value) <= JSON_TEXT_LIMIT else cut(value, JSON_TEXT_LIMIT)
    if value is None or isinstance(value, (int, float)):
        return value
    return str(value)


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
