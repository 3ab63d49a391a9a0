"""Reading queues and sorted sets page by page while other processes change them.

1. ``list_entries`` walks a queue list newest first in ``LRANGE`` windows. Producers push at
   the head and consumers pop at the tail while it runs, so a page is not found again by its
   index: each window is checked to begin right after the last entry already yielded (the
   anchor), and when it does not (jobs were pushed or removed meanwhile) the anchor is found
   again and the page after it read in one script (``scripts/list_after.lua``), so a
   consumer cannot take it between the two. Each window also reads the entry after the page,
   so a page removed from the middle (each job deleted as it is yielded) is read on from
   there.
2. ``zset_entries`` walks a sorted set highest score first. The cursor is the last yielded
   ``(score, member)``; the next page is the members after it in the set's own order
   (equal scores are ordered by member bytes), found by rank in one script
   (``scripts/zset_after.lua``) whether the cursor is still there, gone or moved — so entries
   added or removed elsewhere cannot shift it (the bug Sidekiq 8.1.2 fixed in
   ``SortedSet#each``), and thousands of members sharing one score are read a page at a
   time.
3. ``scan_entries`` filters a sorted set by a substring with ``ZSCAN MATCH``, glob characters
   in the text escaped.
4. ``clear_entries`` empties a list or sorted set in one step (its entries moved to a key of
   the call's own, ``Keys.clearing``), then releases the unique jobs' locks a page at a
   time from there and deletes it.

Guarantee for both walks: an entry present from the start to the end of the iteration is
yielded exactly once. Entries added or removed meanwhile may or may not appear. Memory is one
page.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterator
from typing import Any

from .. import payload as P
from .. import scripts
from ..config import Config
from ..connections.pool import RedisPool
from ..keys import glob_escape
from ..results.store import record_deleted
from ..unique import CLEAR_PAGE, MARK, release_stored

__all__ = ["CLEARING_TTL", "PAGE_SIZE", "SCAN_COUNT", "clear_entries",
           "list_entries", "scan_entries", "zset_after", "zset_entries"]

# Sidekiq's API pages are 50 entries: small enough that one page costs Redis nothing,
# large enough that a 100 000-entry walk is 2 000 round trips.
PAGE_SIZE = 50
# ZSCAN/SSCAN COUNT hint: the work Redis does per call; larger means fewer round trips.
SCAN_COUNT = 500

ZEntry = tuple[bytes, float]
# The next page of a queue list wherever the list moved it (``_relocated_page``).
_LIST_AFTER = scripts.Script("list_after.lua")
# The entries of a sorted set after a cursor, by rank (``zset_after``).
_AFTER = scripts.Script("zset_after.lua")
# A clear's entries moved out of their key (``clear_entries``), and how long they may stay
# there when the clear is cut short before it deletes them.
_CLEAR = scripts.Script("api_clear.lua")
CLEARING_TTL = 3600


# -- lists ------------------------------------------------------------------------------------
def list_entries(pool: RedisPool, key: str, page_size: int = PAGE_SIZE) -> Iterator[bytes]:
    """Every entry of the list ``key``, head (newest) first; see the module's guarantee."""
    _check_page_size(page_size)
    window = _lrange(pool, key, 0, page_size + 1)
    page, following = window[:page_size], _at(window, page_size)
    last_index = len(page) - 1
    while page:
        yield from page
        found = _next_list_page(pool, key, page, last_index, page_size, following)
        if found is None:
            return
        last_index, page, following = found


def _lrange(pool: RedisPool, key: str, start: int, count: int) -> list[bytes]:
    def read(r: Any) -> list[bytes]:
        return list(r.lrange(key, start, start + count - 1))

    return pool.run(read, idempotent=True)


def _at(window: list[bytes], index: int) -> bytes | None:
    return window[index] if index < len(window) else None


def _next_list_page(pool: RedisPool, key: str, previous: list[bytes], anchor_index: int,
                    size: int, following: bytes | None
                    ) -> tuple[int, list[bytes], bytes | None] | None:
    """The page after ``previous``, the index of its last entry and the entry after it (read
    with it, not yielded); None at the end. ``following`` is the entry that came after
    ``previous`` when it was read."""
    # The common case, nothing pushed or removed ahead of the walk: one LRANGE (atomic) from
    # where the last page ended, checked to begin right after its last entry.
    count = size + 2
    window = _lrange(pool, key, anchor_index, count)
    offset = _find(window, previous[-1])
    if offset is not None:
        rest = window[offset + 1 : offset + 1 + size]
        if rest:
            return anchor_index + offset + len(rest), rest, _at(window, offset + 1 + size)
        if len(window) < count:
            return None  # the list ends at the anchor
    return _relocated_page(pool, key, previous, size, following)


def _relocated_page(pool: RedisPool, key: str, previous: list[bytes], size: int,
                    following: bytes | None) -> tuple[int, list[bytes], bytes | None] | None:
    """The page after ``previous`` found wherever the list moved it, in one step
    (``scripts/list_after.lua``: where the walk stopped, the entries after it)."""
    args: list[object] = [size, 0 if following is None else 1, following or b"", *previous]

    def read(r: Any) -> Any:
        reply = _LIST_AFTER.call_many(r, [([key], args)])[0]
        if isinstance(reply, Exception):
            raise reply
        return reply

    found = pool.run(read, idempotent=True)  # replayed safely: it reads only
    if not found:
        return None
    start, window = int(found[0]), [bytes(entry) for entry in found[1]]
    page = window[:size]
    if not page:
        return None  # the list ends where the walk stopped
    return start + len(page) - 1, page, _at(window, size)


def _find(window: list[bytes], anchor: bytes) -> int | None:
    try:
        return window.index(anchor)
    except ValueError:
        return None


# -- sorted sets ------------------------------------------------------------------------------
def zset_entries(pool: RedisPool, key: str, page_size: int = PAGE_SIZE) -> Iterator[ZEntry]:
    """Every ``(member, score)`` of ``key``, highest score first; see the module's guarantee."""
    _check_page_size(page_size)

    def first(r: Any) -> list[ZEntry]:
        return _pairs(r.zrange(key, "+inf", "-inf", desc=True, byscore=True, withscores=True,
                               offset=0, num=page_size))

    page = pool.run(first, idempotent=True)
    while page:
        yield from page
        page = _zset_after(pool, key, page[-1], page_size)


def _zset_after(pool: RedisPool, key: str, cursor: ZEntry, size: int) -> list[ZEntry]:
    """The ``size`` entries after ``cursor`` going down, found by rank in one script
    (``scripts/zset_after.lua``) whether the cursor is still there, gone or moved."""
    return zset_after(pool, key, cursor, size, descending=True)


def zset_after(pool: RedisPool, key: str, cursor: ZEntry, size: int, *,
               descending: bool) -> list[ZEntry]:
    """Up to ``size`` entries after ``cursor`` in the set's order (score, then member
    bytes; reversed when ``descending``), by rank: never every member sharing its score."""
    member, score = cursor
    args: list[object] = [P.score(score), member, size, "desc" if descending else "asc"]

    def read(r: Any) -> Any:
        reply = _AFTER.call_many(r, [([key], args)])[0]
        if isinstance(reply, Exception):
            raise reply
        return reply

    flat = pool.run(read, idempotent=True)  # replayed safely: the set is left as it was
    return [(bytes(flat[i]), float(flat[i + 1])) for i in range(0, len(flat), 2)]


def _pairs(rows: Any) -> list[ZEntry]:
    return [(bytes(m), float(s)) for m, s in rows]


def scan_entries(pool: RedisPool, key: str, text: str,
                 count: int = SCAN_COUNT) -> Iterator[ZEntry]:
    """Members of ``key`` containing ``text`` (``ZSCAN`` order: present ones at least once)."""
    pattern = f"*{glob_escape(text)}*"
    cursor = 0
    while True:
        def step(r: Any, at: int = cursor) -> tuple[int, Any]:
            next_cursor, rows = r.zscan(key, at, match=pattern, count=count)
            return int(next_cursor), rows

        cursor, rows = pool.run(step, idempotent=True)
        yield from _pairs(rows)
        if cursor == 0:
            return


def clear_entries(config: Config, pool: RedisPool, key: str, kind: str,
                  queue: str | None = None, *, deleted_from: str | None = None) -> int:
    """Empty the list or sorted set ``key`` (``kind``: ``list`` or ``zset``; a queue's name
    leaves the queues set in the same step) and release its unique jobs' locks; returns how
    many entries it had. With ``deleted_from``, the jobs among them that keep their result
    have it say they were deleted from there (``record_deleted``), read from the moved key
    after the move as the locks are. The move is one step, never replayed (a broken
    connection raises ``RedisUnavailable`` whether or not it was applied); what a push adds
    after it stays."""
    moved = config.keys.clearing(secrets.token_hex(8))
    keys = [key, moved] if queue is None else [key, moved, config.keys.queues]
    args: list[object] = [kind, CLEARING_TTL] if queue is None else [kind, CLEARING_TTL, queue]
    def move(r: Any) -> int:
        reply = _CLEAR.call_many(r, [(keys, args)])[0]
        if isinstance(reply, Exception):
            raise reply
        return int(reply)

    count = pool.run(move)
    if not count:
        return 0
    # release_stored skips what is no unique job (a cheap test first): a page at a time.
    entries: Iterator[bytes] = (list_entries(pool, moved, CLEAR_PAGE) if kind == "list" else
                                (member for member, _ in scan_entries(pool, moved, MARK)))
    while page := list(itertools.islice(entries, CLEAR_PAGE)):
        release_stored(config, page)
        if deleted_from is not None and kind == "list":
            record_deleted(config, page, deleted_from)
    if deleted_from is not None and kind == "zset":
        kept = (member for member, _ in scan_entries(pool, moved, f'"{P.RESULT_TTL}"'))
        while page := list(itertools.islice(kept, CLEAR_PAGE)):
            record_deleted(config, page, deleted_from)
    pool.run(lambda r: r.unlink(moved), idempotent=True)
    return count


def _check_page_size(size: int) -> None:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"page_size must be a whole number of at least 1, not {size!r}")
