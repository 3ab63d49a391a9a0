"""Reading limiters back for people: every limiter, its type, size, current use and stats.

1. ``limiters(config, ...)`` lists the names in ``lmtr-list`` (sorted, paged, filtered by a
   substring) and reads each one's metadata, stats and current use in two round trips.
2. Everything read is untrusted (written by Ruby, by hand, by an older version) and read
   through ``wurk.api.values``: a counter that is not one is an ``Invalid`` in its cell; a
   name that is not a limiter name is skipped and counted; an unknown type, options that are
   not a JSON object, keys of the wrong type become a ``problem`` on that limiter's row.
   Nothing here raises on stored data, so a page built from it always renders.
3. Current use is computed with Redis's clock (``TIME`` in the same round trip).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import partial
from typing import Any

from .. import stored as values
from ..config import Config
from ..stored import Invalid
from .base import KINDS, NAME_PATTERN, pairs, read_stats

__all__ = ["LIST_CAP", "TYPES", "average_wait", "limiters"]

TYPES = KINDS
# The most names one listing reads (SSCAN): dynamic limiters can number in the thousands,
# and a page needs only the sorted names, not unbounded memory.
LIST_CAP = 10_000
PAGE_SIZE = 25


def _number(value: Any) -> float | None:
    try:
        number = float(values.text(value))
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def average_wait(stats: Mapping[str, int | Invalid]) -> float | None:
    """Seconds a waiting call waited on average; None when none waited or it cannot be read."""
    waited, wait_ms = stats.get("waited"), stats.get("wait_ms")
    if isinstance(waited, int) and isinstance(wait_ms, int) and waited > 0:
        return wait_ms / waited / 1000
    return None


def _options(raw: Any) -> tuple[dict[str, Any], str | None]:
    found = values.json_object(raw)
    if isinstance(found, dict):
        return found, None
    return {}, "options are not a JSON object"


# A stored interval outside this range is no limiter's (one of 1e-300 s would make a
# bucket's start time infinite): the row shows a problem instead.
INTERVAL_RANGE = (1e-3, 1e12)


def _positive(options: Mapping[str, Any], name: str, *,
              within: tuple[float, float] = (0.0, math.inf)) -> float | None:
    value = options.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:  # JSON reads 1 and 400 zeros as an int no float holds: OverflowError
        number = float(value)
    except OverflowError:
        return None
    low, high = within
    return number if math.isfinite(number) and number > 0 and low <= number <= high \
        else None


def _sscan(key: str, cursor: int, r: Any) -> tuple[int, list[Any]]:
    next_cursor, members = r.sscan(key, cursor, count=500)
    return int(next_cursor), list(members)


def _names(config: Config, substr: str) -> tuple[list[str], int]:
    """Sorted valid names containing ``substr``, and how many stored names were not names."""
    pool, key = config.pool("api"), config.keys.limiter_list
    found: set[str] = set()
    skipped, cursor = 0, 0
    while len(found) + skipped < LIST_CAP:
        cursor, members = pool.run(partial(_sscan, key, cursor), idempotent=True)
        for member in members:
            name = values.text(member)
            if not NAME_PATTERN.fullmatch(name):
                skipped += 1
            elif substr in name:
                found.add(name)
        if cursor == 0:
            break
    return sorted(found), skipped


def limiters(config: Config, *, page: int = 1, substr: str = "") -> dict[str, Any]:
    """One page of limiters, each a JSON-ready dict (see ``_row``)."""
    names, skipped = _names(config, substr)
    pages = max(1, math.ceil(len(names) / PAGE_SIZE))
    page = min(max(page, 1), pages)
    shown = names[(page - 1) * PAGE_SIZE:page * PAGE_SIZE]
    rows = _read(config, shown) if shown else []
    return {"limiters": rows, "total": len(names), "page": page, "pages": pages,
            "page_size": PAGE_SIZE,
            "unreadable_names": skipped, "substr": substr, "capped": len(names) >= LIST_CAP}


def _read(config: Config, names: list[str]) -> list[dict[str, Any]]:
    keys, pool = config.keys, config.pool("api")

    def first(r: Any) -> list[Any]:
        pipe = r.pipeline(transaction=False)
        pipe.time()
        for name in names:
            pipe.hgetall(keys.limiter(name))
            pipe.hgetall(keys.limiter_stats(name))
        return list(pipe.execute(raise_on_error=False))

    replies = pool.run(first, idempotent=True)
    seconds, micros = replies[0] if isinstance(replies[0], (list, tuple)) else (0, 0)
    now_ms = int(seconds) * 1000 + int(micros) / 1000
    rows = []
    for index, name in enumerate(names):
        meta, stats = replies[1 + 2 * index], replies[2 + 2 * index]
        rows.append(_row(name, meta, stats))
    usage = pool.run(lambda r: _usage(r, config, rows, now_ms), idempotent=True)
    for row, used in zip(rows, usage, strict=True):
        _set_use(row, used, now_ms)
    return rows


def _row(name: str, meta: Any, stats: Any) -> dict[str, Any]:
    fields = pairs(meta) if not isinstance(meta, Exception) else {}
    kind = values.text(fields.get("type", ""))
    options, problem = _options(fields.get("options", b"{}"))
    if not fields:
        problem = "no metadata (expired, or written by another tool)"
    elif kind not in TYPES:
        problem = "unknown type"
        kind = "unknown"
    size = _positive(options, "capacity" if kind == "points" else "size")
    if problem is None and size is None:
        problem = "options lack a valid size"
    interval = _positive(options, {"leaky": "drain_period", "points": "refill_per_second"}
                         .get(kind, "interval"), within=INTERVAL_RANGE)
    if problem is None and kind in ("bucket", "window", "leaky", "points") and interval is None:
        problem = "options lack a valid interval"
    lock_timeout = _positive(options, "lock_timeout")
    counters = read_stats(stats if not isinstance(stats, Exception) else {})
    return {"name": name, "type": kind, "size": size, "interval": interval,
            "lock_timeout": lock_timeout, "use": None, "stats": counters,
            "average_wait": average_wait(counters), "problem": problem}


def _usage(r: Any, config: Config, rows: list[dict[str, Any]], now_ms: float) -> list[Any]:
    keys = config.keys
    pipe = r.pipeline(transaction=False)
    for row in rows:
        name, kind, interval = row["name"], row["type"], row["interval"]
        if row["problem"] is not None:
            pipe.exists(keys.limiter(name))  # a placeholder keeps replies in step
        elif kind == "concurrent":
            pipe.zcount(keys.limiter_concurrent(name), f"({now_ms}", "+inf")
        elif kind == "bucket":
            start = int(now_ms // 1000 // interval * interval)
            pipe.get(keys.limiter_bucket(name, start))
        elif kind == "window":
            pipe.zcount(keys.limiter_window(name), f"({now_ms - interval * 1000}", "+inf")
        elif kind == "leaky":
            pipe.hmget(keys.limiter_leaky(name), "level", "ts")
        else:
            pipe.hmget(keys.limiter_points(name), "points", "ts")
    return list(pipe.execute(raise_on_error=False))


def _set_use(row: dict[str, Any], reply: Any, now_ms: float) -> None:
    """The row's current use: slots held, uses this interval or window, the bucket's level,
    or the points left — each between 0 and its size."""
    if row["problem"] is not None or isinstance(reply, Exception):
        if isinstance(reply, Exception) and row["problem"] is None:
            row["problem"] = "its keys hold the wrong type of value"
        return
    kind, size = row["type"], row["size"]
    use: float | Invalid | None
    if kind in ("concurrent", "window", "bucket"):
        use = values.count(reply)
    else:
        use = _decayed(kind, reply, now_ms, size, row["interval"])
    if use is None:
        row["problem"] = "its current use is not a number"
    elif isinstance(use, Invalid):
        row["use"] = use  # shown as what was stored
    else:
        row["use"] = min(max(use, 0), size)


def _decayed(kind: str, reply: Any, now_ms: float, size: float,
             interval: float) -> float | None:
    """A leaky bucket's level drained to now, or a points budget refilled to now."""
    if not isinstance(reply, (list, tuple)) or len(reply) != 2:
        return None
    if reply[0] is None:
        return 0.0 if kind == "leaky" else size
    level, stamp = _number(reply[0]), _number(reply[1])
    if level is None or stamp is None:
        return None
    elapsed = max(0.0, now_ms / 1000 - stamp)
    if kind == "leaky":
        return round(max(0.0, level - elapsed * size / interval), 3)
    return round(min(size, level + elapsed * interval), 3)
