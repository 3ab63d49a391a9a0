"""A disk push buffer's file is never seen unlocked by a process looking for orphans.

A flush (this process's, or a successor's) claims any buffer file whose lock it can take.
A new file made under its final name and locked a moment later could be claimed in that
moment, and its owner's lock then failed (``BlockingIOError`` out of a push: seen once in a
full suite run). Files are made under another name, locked, then renamed."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from wurk.client.buffer import (
    UNFINISHED_AFTER,
    DiskBuffer,
    Entry,
    Orphan,
    orphans,
    sweep_unfinished,
)
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


# A process whose write of a kept job stops part way (a disk full, EFBIG) and that pushes
# again once there is room, then dies: the file must hold the later job.
TORN_WRITE = """
import os, resource, signal, sys, time
from pathlib import Path
from wurk.client.buffer import DiskBuffer, Entry
from wurk.client.idempotent import Sendable
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead
buffer = DiskBuffer(Path(sys.argv[1]), size=10)
def keep(jid, text):
    buffer.keep([Entry(Sendable(jid, text, "default", None), time.time())])
keep("a" * 24, "{}")
assert buffer.path is not None
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(buffer.path) + 40, hard))
try:
    keep("b" * 24, '{"big":"' + "x" * 200 + '"}')
except OSError:
    pass  # the push raised: it returned no jid, so it is no promise
else:
    raise SystemExit("the write past the limit did not fail")
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
keep("c" * 24, "{}")  # returned: a promise
os._exit(0)  # dies without closing: the file is left for a successor
"""


def test_a_write_that_failed_part_way_costs_no_later_kept_job(tmp_path: Path) -> None:
    """A kept job's line written only in part (the disk full, then room again) stayed in
    the file, and the next job's line was appended to it: one line that was no JSON, so a
    successor skipped it, and that job — whose push had returned its jid — was lost."""
    done = subprocess.run([sys.executable, "-c", TORN_WRITE, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (path,) = orphans(tmp_path)
    orphan = Orphan.claim(path)
    assert orphan is not None
    try:
        assert [jid for jid, *_ in orphan.take(10)] == ["a" * 24, "c" * 24]
    finally:
        orphan.release()


def test_a_file_left_half_made_by_a_killed_process_is_swept_and_no_other(tmp_path: Path) -> None:
    """A process killed between making its buffer file (``.making``) and renaming it left
    the file for ever. Swept now: unlocked and older than ``UNFINISHED_AFTER``; a file still
    being made (recent, or locked by its maker) and the buffer files stay."""
    directory = tmp_path / "buf"
    directory.mkdir()
    now = time.time()
    left = directory / "push-h-1-aa.making"
    left.write_text('{"wurk-push-buffer": 1}\n')
    os.utime(left, (now - UNFINISHED_AFTER - 1, now - UNFINISHED_AFTER - 1))
    fresh = directory / "push-h-2-bb.making"
    fresh.write_text("")
    held = directory / "push-h-3-cc.making"
    held.write_text("")
    os.utime(held, (now - UNFINISHED_AFTER - 1, now - UNFINISHED_AFTER - 1))
    kept = directory / "push-h-4-dd.jobs"
    kept.write_text("")
    os.utime(kept, (now - 3600, now - 3600))
    fd = os.open(held, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # its maker, at work
        assert sweep_unfinished(directory, now) == 1
    finally:
        os.close(fd)
    assert sorted(p.name for p in directory.iterdir()) == [
        "push-h-2-bb.making", "push-h-3-cc.making", "push-h-4-dd.jobs"]
    assert sweep_unfinished(tmp_path / "none", now) == 0
