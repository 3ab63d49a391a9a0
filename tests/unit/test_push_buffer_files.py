"""A disk push buffer's file is never seen unlocked by a process looking for orphans.

A flush (this process's, or a successor's) claims any buffer file whose lock it can take.
A new file made under its final name and locked a moment later could be claimed in that
moment, and its owner's lock then failed (``BlockingIOError`` out of a push: seen once in a
full suite run). Files are made under another name, locked, then renamed."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from wurk.client.buffer import DiskBuffer, Entry, Orphan, orphans
from wurk.client.idempotent import Sendable

FILES = 300


def test_a_new_buffer_file_is_never_claimed_from_its_owner(tmp_path: Path) -> None:
    stop = threading.Event()
    claimed: list[Path] = []

    def look_for_orphans() -> None:  # what a flush does, as fast as it can
        while not stop.is_set():
            for path in orphans(tmp_path):
                orphan = Orphan.claim(path)
                if orphan is not None:
                    claimed.append(path)
                    orphan.release()

    looker = threading.Thread(target=look_for_orphans, daemon=True)
    looker.start()
    buffers = []
    try:
        for n in range(FILES):
            buffer = DiskBuffer(tmp_path, size=10)
            buffer.keep([Entry(Sendable(f"{n:024d}", "{}", "default", None), time.time())])
            buffers.append(buffer)
    finally:
        stop.set()
        looker.join(10)
    assert claimed == []  # every file was its owner's, locked, from the moment it was listed
    assert len(orphans(tmp_path)) == FILES
    for buffer in buffers:
        buffer.close()
