"""A 100,000-entry retry set pages in ``wurk top`` without being loaded whole: each page is
one ranked read of 25 entries, so the last page costs what the first does. The server's own
record says so: with the slow log keeping every command, each read of the set while the
pages turn names a range of at most a page, and the bytes it sent are a few pages' worth."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator

import pytest
import redis

import wurk

pytest.importorskip("textual", reason="wurk top needs the tui extra: pip install 'wurk[tui]'")

from textual.pilot import Pilot

from tests.tui.drive import drive, press, sheet_rows, shown, tab
from wurk.tui import TopApp

ENTRIES = 100_000
# Bytes the server may send while the UI turns three pages: a page of 25 entries with the
# numbers around it is a few kilobytes; the set whole is about 20 MB.
PAGES_BYTES = 1_000_000
PAGE = 25
# Commands that read entries of a sorted set (by rank, score or lexical range, or all).
RANGE_READS = {"zrange", "zrevrange", "zrangebyscore", "zrevrangebyscore", "zscan",
               "zrangestore", "zrandmember", "sort"}


def seed(r: redis.Redis) -> int:
    """The retry set, filled in pipelined ZADDs; returns its size in bytes, about."""
    now = time.time()
    size = 0
    pipe = r.pipeline(transaction=False)
    for start in range(0, ENTRIES, 5_000):
        chunk = {}
        for n in range(start, start + 5_000):
            member = json.dumps({"class": "Billing::Invoice", "args": [n, "customer-4711"],
                                 "queue": "default", "jid": f"{n:024x}", "retry_count": 3,
                                 "error_class": "Net::ReadTimeout",
                                 "error_message": "Net::ReadTimeout with #<TCPSocket>"})
            chunk[member] = now + 60 + n
            size += len(member)
        pipe.zadd("retry", chunk)
    pipe.execute()
    return size


def sent(r: redis.Redis) -> int:
    return int(r.info("stats")["total_net_output_bytes"])


@contextlib.contextmanager
def every_command_logged(r: redis.Redis) -> Iterator[list[list[str]]]:
    """The commands the server runs inside the block (its slow log, told to keep all)."""
    old = r.config_get("slowlog-*")
    commands: list[list[str]] = []
    r.config_set("slowlog-max-len", 10_000)
    r.slowlog_reset()
    r.config_set("slowlog-log-slower-than", 0)
    try:
        yield commands
    finally:
        r.config_set("slowlog-log-slower-than", old["slowlog-log-slower-than"])
        found = r.slowlog_get(10_000)
        r.config_set("slowlog-max-len", old["slowlog-max-len"])
        r.slowlog_reset()
        for entry in reversed(found):
            command = entry["command"]
            words = command.decode() if isinstance(command, bytes) else str(command)
            commands.append(words.split())


def ranks(command: list[str]) -> int:
    """How many entries a ranged read of the retry set asks for (a huge number: all)."""
    name = command[0].lower()
    if name in ("zrange", "zrevrange") and "byscore" not in (w.lower() for w in command):
        start, stop = int(command[2]), int(command[3])
        if start < 0 or stop < 0:
            return 10**9
        return stop - start + 1
    if name == "zscan":
        return 10**9  # a scan walks the set whole
    limit = [w.lower() for w in command].index("limit") if "limit" in \
        [w.lower() for w in command] else None
    return int(command[limit + 2]) if limit is not None else 10**9


def test_a_hundred_thousand_retries_page_without_being_loaded_whole(
        config: wurk.Config, r: redis.Redis) -> None:
    whole = seed(r)
    assert r.zcard("retry") == ENTRIES and whole > 15 * PAGES_BYTES

    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "retries")
        assert "Retries 100,000  page 1 of 4,000" in shown(app)
        before = sent(r)
        with every_command_logged(r) as commands:
            await press(app, pilot, "G")  # the last page
            assert "page 4,000 of 4,000" in shown(app)
            assert [row[4] for row in sheet_rows(app, "#retries-list")] == \
                [f'[{n}, "customer-4711"]' for n in range(ENTRIES - PAGE, ENTRIES)]
            await press(app, pilot, "h")
            assert "page 3,999 of 4,000" in shown(app)
            assert sheet_rows(app, "#retries-list")[0][4] == \
                f'[{ENTRIES - 2 * PAGE}, "customer-4711"]'
            await press(app, pilot, "g")
            assert sheet_rows(app, "#retries-list")[0][4] == '[0, "customer-4711"]'
        read = sent(r) - before
        assert read < PAGES_BYTES, f"{read:,} bytes read for three pages"
        of_the_set = [c for c in commands
                      if c[0].lower() in RANGE_READS and len(c) > 1 and c[1] == "retry"]
        # three page turns, each one ranked read of one page: the last page's is
        # ZRANGE retry 99975 99999, not the 99,975 entries before it
        assert [ranks(c) for c in of_the_set] == [PAGE] * 3, of_the_set
        assert of_the_set[0][2:4] == [str(ENTRIES - PAGE), str(ENTRIES - 1)], of_the_set
        # and little else: the numbers of the top lines, a few commands a page
        assert len(commands) < 3 * 40, commands

    drive(config, scenario)
