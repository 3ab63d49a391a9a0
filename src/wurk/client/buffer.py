"""Where reliable push keeps the jobs Redis did not take: in memory, or in a file per process.

1. ``Entry``: a job ready to send (``wurk.client.idempotent.Sendable``), when it was
   buffered, and the shard it was pushed to (``shards``: one writer keeps the pushes of
   every shard, and each goes to its own). A buffer hands its entries out oldest first and
   holds ``size`` at most: ``keep`` raises ``BufferFull`` rather than drop one.
2. ``MemoryBuffer``: in this process's memory, lost with it (Sidekiq Pro's kind).
3. ``DiskBuffer``: every change appended to a file of this process's own,
   ``push-<target>-<host>-<pid>-<nonce>.jobs`` in its directory (``<target>``: the start of
   its default shard's target id, for people), and fsync'd before ``keep`` returns.
   The file is made with the first job kept (a process that never loses Redis never
   writes one) and held with an exclusive ``flock`` while the process lives; the kernel
   lets go of it when the process ends, killed or not, which is how a successor knows the
   file is an orphan. Emptied (truncated) when everything in it was sent; deleted at a
   clean exit when empty, left for a successor otherwise.
4. The file is JSON lines: a header (with ``"targets"``: per shard of the writer's
   configuration, the ``id`` of the Redis, db and key prefix it pushes to — a hash, no
   password — and ``redis``, the URL without its password), ``{"+": jid, "t": buffered
   at, "at": epoch or null, "job": payload text}`` per job kept (with ``"s": shard`` for
   a shard but the default),
   ``{"-": [jids]}`` per jobs sent. A torn last line (a process killed mid-write: before
   its fsync, so before its push returned) is ignored, and cut off by whoever claims the
   file, before it appends its own records.
5. ``Orphan``: another process's file whose lock could be taken. Its pending jobs are sent
   by whoever claimed it (a successor's background flush, ``wurk push-buffer flush``) — only
   those kept for a target of its own (``OtherTarget`` for the rest: another application's,
   sharing the directory) — each sent one recorded in that file, and the file deleted once
   none is left. A file with no header, or a header whose ``targets`` is no such record, is
   ``Malformed``: renamed ``<name>.bad`` and not sent; one whose lines could not all be read
   is renamed so too once the rest is sent, not deleted. A file of before ``targets`` (an
   older wurk's) is read as then: its jobs go by shard name.
6. ``sweep_unfinished``: the ``.making`` file a process killed while making its file left
   behind (no job in it) is deleted by the next look for orphans.
7. ``survey(directory)``: what each file there holds and whether its owner lives, for
   ``wurk stats`` and ``wurk push-buffer status`` (read without Redis).
8. Fork: a child never sends its parent's jobs. ``reset_after_fork`` empties the child's
   copy and closes its copy of the parent's file (the lock stays with the parent's).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import os
import re
import secrets
import threading
import time
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import DEFAULT_SHARD
from ..errors import ConfigError
from ..runtime.identity import hostname
from .idempotent import Sendable

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock; the disk kind refuses to start
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "SUFFIX",
    "BufferFull",
    "DiskBuffer",
    "Entry",
    "FileReport",
    "ForeignFile",
    "LeftInFile",
    "Malformed",
    "MemoryBuffer",
    "Orphan",
    "OtherTarget",
    "Targets",
    "orphans",
    "peek_targets",
    "survey",
]

log = logging.getLogger("wurk")

SUFFIX = ".jobs"
# A file is made under this suffix, locked, then renamed to SUFFIX (``DiskBuffer._open``).
MAKING = ".making"
# One still under its making name this long after it was made, and held by no process, was
# left by a process killed between making and renaming it: a header at most, no job (jobs
# are written only after the rename). ``sweep_unfinished`` deletes it.
UNFINISHED_AFTER = 60.0
_HEADER = "wurk-push-buffer"
# What a malformed file is renamed to (after its name): no scan lists it again.
BAD = ".bad"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class BufferFull(Exception):
    """``keep`` found no room: the push is not kept (the caller raises)."""


class LeftInFile(Exception):
    """A buffer file (or some of its jobs) this process does not send: said, and the other
    files are sent. ``pushed``: the file's jobs that were sent before it was raised."""

    pushed = 0


class ForeignFile(LeftInFile):
    """A buffer file in a format this version does not write (its header's version): left
    whole for the wurk that wrote it, never half read and deleted."""


class OtherTarget(LeftInFile):
    """Jobs of a buffer file kept for a Redis (or key prefix) this configuration does not
    push to — another application's sharing the directory: left for a process that does."""


class Malformed(LeftInFile):
    """A buffer file no wurk wrote as it is (no header, or a header whose record of its Redis
    is no such record): moved aside (``BAD``), never sent blindly nor deleted."""


_VERSION = 1


@dataclass(frozen=True)
class Entry:
    job: Sendable
    buffered_at: float
    shard: str = DEFAULT_SHARD  # the shard it was pushed to, where it is sent


def _taken(entries: Iterable[Entry], limit: int, skip: Collection[str]) -> list[Entry]:
    """The first ``limit`` of ``entries`` of no shard in ``skip`` (its Redis cannot be
    reached now: the others' jobs are not held up behind them)."""
    return list(itertools.islice((e for e in entries if e.shard not in skip), limit))


# -- memory ---------------------------------------------------------------------------------
class MemoryBuffer:
    """Pending pushes in this process's memory, oldest first."""

    kind = "memory"

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._pending: dict[str, Entry] = {}

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def where(self) -> str:
        return "memory"

    def oldest(self) -> float | None:
        with self._lock:
            first = next(iter(self._pending.values()), None)
        return first.buffered_at if first is not None else None

    def keep(self, entries: list[Entry]) -> None:
        with self._lock:
            self._room(entries)
            for entry in entries:
                self._pending[entry.job.jid] = entry

    def _room(self, entries: list[Entry]) -> None:
        new = sum(1 for entry in entries if entry.job.jid not in self._pending)
        if len(self._pending) + new > self.size:
            raise BufferFull(f"{len(self._pending)} jobs wait already, at most {self.size} "
                             f"(reliable_push_size)")

    def take(self, limit: int, skip: Collection[str] = ()) -> list[Entry]:
        """The oldest ``limit`` entries of no shard in ``skip``, left in place until
        ``done``."""
        with self._lock:
            return _taken(self._pending.values(), limit, skip)

    def done(self, jids: Iterable[str]) -> None:
        with self._lock:
            for jid in jids:
                self._pending.pop(jid, None)

    def reset_after_fork(self) -> None:
        self._lock = threading.Lock()
        self._pending = {}

    def close(self) -> int:
        """At exit: the jobs still waiting (lost with this kind)."""
        return len(self._pending)


# -- disk -----------------------------------------------------------------------------------
def _need_flock() -> Any:
    if fcntl is None:  # pragma: no cover - Windows
        raise ConfigError("reliable_push='disk' needs POSIX file locks (fcntl.flock), which "
                          "this platform lacks; use reliable_push='memory'")
    return fcntl


def _kept(entry: Entry) -> dict[str, Any]:
    """A kept job's line; its shard named when it is not the default (a file of the default
    shard's jobs reads as before shards were kept)."""
    record = {"+": entry.job.jid, "t": entry.buffered_at, "at": entry.job.at,
              "job": entry.job.text}
    if entry.shard != DEFAULT_SHARD:
        record["s"] = entry.shard
    return record


def _line(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _append(fd: int, data: bytes) -> None:
    """Append ``data`` and fsync; on a failure (a disk full part way) cut the file back to
    where it ended, so the next line is not appended to a torn one and lost with it."""
    end = os.fstat(fd).st_size
    try:
        _write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, end)
        raise


def _fsync_directory(directory: Path) -> None:
    """Make a file's creation or removal durable (its name lives in the directory)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass
class _Parsed:
    header: dict[str, Any]
    # jid -> (payload text, t, at, shard)
    pending: dict[str, tuple[str, float, float | None, str]]
    bad_lines: int = 0


def _number(value: Any) -> float | None:
    """A JSON number as a float (an int no float holds: infinity); None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _parse(data: bytes) -> _Parsed:
    """A buffer file's contents: its header and the jobs kept and not yet sent."""
    parsed = _Parsed({}, {})
    # After the last newline: nothing, or a line cut by a crash — never fsync'd whole, so
    # its push never returned its jid: not a promise, and dropped.
    lines = data.split(b"\n")[:-1]
    for number, raw in enumerate(lines):
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than Python parses
            parsed.bad_lines += 1
            continue
        if not isinstance(record, dict):
            parsed.bad_lines += 1
        elif number == 0 and record.get(_HEADER) is not None:
            parsed.header = record
        elif isinstance(record.get("+"), str) and isinstance(record.get("job"), str):
            at, t = _number(record.get("at")), _number(record.get("t"))
            if at is None and record.get("at") is not None:
                at = math.nan  # not a number ("tomorrow"): no time, not "push it now"
            # An ``at`` that is no finite time is kept as it is, for the sender to refuse.
            # A shard that is no name is kept as its text: no shard has it, so the job stays.
            shard = record.get("s", DEFAULT_SHARD)
            parsed.pending[record["+"]] = (
                record["job"], t if t is not None and math.isfinite(t) else 0.0, at,
                shard if isinstance(shard, str) else json.dumps(shard)[:100])
        elif isinstance(record.get("-"), list):
            for jid in record["-"]:
                parsed.pending.pop(str(jid), None)
        else:
            parsed.bad_lines += 1
    return parsed


# A writer's targets, as its file's header records them: shard name -> {"id": the target's
# identity (a hash: no password, no address), "redis": the Redis described, no password}.
Targets = dict[str, dict[str, str]]


def _targets(header: dict[str, Any]) -> Targets | None:
    """The targets a header records; None for a file of before they were recorded;
    ``ValueError`` when it records something else than targets."""
    if "targets" not in header:
        return None
    targets = header["targets"]
    if not isinstance(targets, dict) or not all(
            isinstance(name, str) and isinstance(target, dict)
            and isinstance(target.get("id"), str) and isinstance(target.get("redis", ""), str)
            for name, target in targets.items()):
        raise ValueError(f"its header's record of its Redis is no such record: "
                         f"{json.dumps(targets)[:200]}")
    return targets


def peek_targets(path: Path) -> Targets | None:
    """The targets ``path``'s header records, read without its lock (a header is written
    once, before the file has its name); None when there are none or it cannot be read (the
    claim, under the lock, says why)."""
    try:
        with path.open("rb") as file:
            first = file.readline(1 << 16)
        header = json.loads(first)
        return _targets(header) if isinstance(header, dict) and _HEADER in header else None
    except (OSError, ValueError, RecursionError):
        return None


def _move_aside(path: Path) -> Path:
    """Rename a malformed file out of the scans' way (``BAD``), never over another."""
    aside = path.with_name(path.name + BAD)
    while aside.exists():
        aside = path.with_name(f"{path.name}.{secrets.token_hex(3)}{BAD}")
    os.rename(path, aside)
    _fsync_directory(path.parent)
    return aside


class DiskBuffer:
    """Pending pushes in a file of this process's own, fsync'd before ``keep`` returns."""

    kind = "disk"

    def __init__(self, directory: Path, size: int, targets: Targets | None = None) -> None:
        _need_flock()
        self.directory = directory
        self.size = size
        # Where this process's pushes go, recorded in its file's header: only a process
        # pushing there sends them once it is dead (``docs/reliable-push.md``).
        self.targets = targets
        self._lock = threading.Lock()
        self._pending: dict[str, Entry] = {}
        self._fd: int | None = None
        self.path: Path | None = None
        self._header_size = 0

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def where(self) -> str:
        return str(self.path or self.directory)

    def oldest(self) -> float | None:
        with self._lock:
            first = next(iter(self._pending.values()), None)
        return first.buffered_at if first is not None else None

    def keep(self, entries: list[Entry]) -> None:
        with self._lock:
            new = sum(1 for entry in entries if entry.job.jid not in self._pending)
            if len(self._pending) + new > self.size:
                raise BufferFull(f"{len(self._pending)} jobs wait already in {self.where}, "
                                 f"at most {self.size} (reliable_push_size)")
            fd = self._open()
            # fsync'd before the push returns its jid: the job is the file's now
            _append(fd, b"".join(_line(_kept(e)) for e in entries))
            for entry in entries:
                self._pending[entry.job.jid] = entry

    def take(self, limit: int, skip: Collection[str] = ()) -> list[Entry]:
        with self._lock:
            return _taken(self._pending.values(), limit, skip)

    def done(self, jids: Iterable[str]) -> None:
        """Record ``jids`` as sent (fsync'd before their records in Redis may be forgotten);
        the file is emptied once nothing in it waits."""
        with self._lock:
            gone = [jid for jid in jids if self._pending.pop(jid, None) is not None]
            if not gone or self._fd is None:
                return
            if self._pending:
                _append(self._fd, _line({"-": gone}))
            else:
                os.ftruncate(self._fd, self._header_size)
                os.fsync(self._fd)

    def _open(self) -> int:
        """This process's file, made and locked on first use."""
        if self._fd is not None:
            return self._fd
        lock = _need_flock()
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        own = (self.targets or {}).get(DEFAULT_SHARD, {}).get("id")
        mark = f"{_UNSAFE.sub('_', own[:8])}-" if own else ""  # for people: the header decides
        name = (f"push-{mark}{_UNSAFE.sub('_', hostname())}-{os.getpid()}-"
                f"{secrets.token_hex(4)}")
        path = self.directory / f"{name}{SUFFIX}"
        # Made under a name no scan lists, locked, then renamed: a file with the buffer's
        # suffix is never seen unlocked, so another process's flush (or this one's) cannot
        # take it for an orphan in the moment between its creation and its lock.
        making = self.directory / f"{name}{MAKING}"
        fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        try:
            lock.flock(fd, lock.LOCK_EX | lock.LOCK_NB)
            fields: dict[str, Any] = {_HEADER: _VERSION, "host": hostname(),
                                      "pid": os.getpid(), "created": time.time()}
            if self.targets is not None:
                fields["targets"] = self.targets
            header = _line(fields)
            _write_all(fd, header)
            os.fsync(fd)
            os.rename(making, path)
        except BaseException:
            os.close(fd)
            making.unlink(missing_ok=True)
            raise
        _fsync_directory(self.directory)
        self._fd, self.path, self._header_size = fd, path, len(header)
        return fd

    def reset_after_fork(self) -> None:
        """In a forked child: forget the parent's jobs and its file (closing the child's
        copy of the descriptor leaves the parent's lock in place)."""
        fd = self._fd
        self._lock = threading.Lock()
        self._pending = {}
        self._fd, self.path, self._header_size = None, None, 0
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> int:
        """At exit: delete the file when nothing waits in it; else leave it for a successor
        (the lock goes with the descriptor). Returns the jobs left."""
        with self._lock:
            left = len(self._pending)
            fd, path = self._fd, self.path
            self._fd = None
            if fd is None or path is None:
                return left
            if not left:
                path.unlink(missing_ok=True)
                _fsync_directory(self.directory)
            os.close(fd)
            return left


# -- another process's file -----------------------------------------------------------------
class Orphan:
    """A buffer file whose owner is gone, claimed (locked) by this process to send its jobs."""

    def __init__(self, path: Path, fd: int, parsed: _Parsed, targets: Targets | None
                 ) -> None:
        self.path = path
        self._fd = fd
        self.header = parsed.header
        self.pending = parsed.pending
        # Per shard of the file, the Redis its jobs were pushed to; None for a file of
        # before files recorded it.
        self.targets = targets
        self.bad_lines = parsed.bad_lines

    @classmethod
    def claim(cls, path: Path) -> Orphan | None:
        """The file at ``path`` locked for this process, or None when its owner still holds
        it (alive), another process claimed it, or it is gone."""
        lock = _need_flock()
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND)
        except FileNotFoundError:
            return None
        try:
            lock.flock(fd, lock.LOCK_EX | lock.LOCK_NB)
            if os.stat(path).st_ino != os.fstat(fd).st_ino:
                raise FileNotFoundError(path)  # emptied and deleted by a claimer before us
            data = _read(fd)
            parsed = _parse(data)
        except (BlockingIOError, FileNotFoundError):
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        version = parsed.header.get(_HEADER, _VERSION)
        if version != _VERSION:
            os.close(fd)
            raise ForeignFile(f"written by push buffer format version {version!r}, which this "
                              f"wurk does not read (it writes version {_VERSION}); left as it "
                              "is for the wurk that wrote it")
        try:
            if not parsed.header:
                raise ValueError("it has no header: no wurk wrote it as it is")
            targets = _targets(parsed.header)
        except ValueError as exc:  # whose jobs they are is not known: none is sent
            try:
                aside = _move_aside(path)
            finally:
                os.close(fd)
            raise Malformed(f"{exc}; none of its jobs was sent, and it was moved aside to "
                            f"{aside} (delete it, or repair it and rename it back)") from None
        # A torn last line (its writer killed mid-write) is cut off before this claimer
        # appends: a "sent" record written after the fragment would read back as part of one
        # unreadable line, and the jobs it names be sent again by the next claimer.
        whole = data.rfind(b"\n") + 1
        if whole < len(data):
            try:
                os.ftruncate(fd, whole)
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                raise
        if parsed.bad_lines:
            log.warning("push buffer %s: %d line(s) could not be read and were skipped",
                        path, parsed.bad_lines)
        return cls(path, fd, parsed, targets)

    def take(self, limit: int, skip: Collection[str] = ()
             ) -> list[tuple[str, str, float, float | None, str]]:
        """The oldest ``limit`` jobs of no shard in ``skip``: (jid, payload text, buffered at,
        at, shard)."""
        return list(itertools.islice(
            ((jid, text, t, at, shard) for jid, (text, t, at, shard) in self.pending.items()
             if shard not in skip), limit))

    def done(self, jids: Iterable[str]) -> None:
        gone = [jid for jid in jids if self.pending.pop(jid, None) is not None]
        if gone:
            _append(self._fd, _line({"-": gone}))

    def release(self) -> None:
        """Delete the file when every job in it was sent — move it aside (``BAD``), with a
        warning, when some lines could not be read: what they held is not known, so not
        deleted; unlock it either way."""
        try:
            if not self.pending and self.bad_lines:
                aside = _move_aside(self.path)
                log.warning("push buffer %s: every job that could be read was sent; its %d "
                            "line(s) that could not be read are kept in %s (delete it once "
                            "looked at)", self.path, self.bad_lines, aside)
            elif not self.pending:
                self.path.unlink(missing_ok=True)
                _fsync_directory(self.path.parent)
        finally:  # a directory that refuses the unlink (read-only) must not keep the lock
            os.close(self._fd)


def _read(fd: int) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def _files(directory: Path) -> Iterator[Path]:
    try:
        names = sorted(os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        if name.endswith(SUFFIX):
            yield directory / name


def orphans(directory: Path, own: Path | None = None) -> list[Path]:
    """The buffer files in ``directory`` but this process's own (whether their owners live
    is known only by trying their locks: ``Orphan.claim``)."""
    return [path for path in _files(directory) if path != own]


def sweep_unfinished(directory: Path, now: float | None = None) -> int:
    """Delete the files a process killed while making its buffer file left (``MAKING``,
    older than ``UNFINISHED_AFTER`` and locked by no process); how many. The age keeps a file
    being made now — in the moment before its maker locks it — from being taken for one."""
    lock = _need_flock()
    at = time.time() if now is None else now
    removed = 0
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    for name in names:
        if not name.endswith(MAKING):
            continue
        path = directory / name
        try:
            if at - os.stat(path).st_mtime < UNFINISHED_AFTER:
                continue
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue  # gone meanwhile, or not ours to read: left
        try:
            lock.flock(fd, lock.LOCK_EX | lock.LOCK_NB)
            path.unlink(missing_ok=True)
            removed += 1
        except OSError:  # held (BlockingIOError): its maker is at work; or not removable
            continue
        finally:
            os.close(fd)
    return removed


@dataclass(frozen=True)
class FileReport:
    path: Path
    held: bool  # its owner (or a process sending its jobs) holds it: alive
    pending: int
    oldest: float | None
    pid: int | None
    host: str | None
    # A file of another format version (another wurk's): what it is; its jobs are not read
    # (``pending`` 0, ``oldest`` None) and no flush touches it.
    foreign: str | None = None
    # The Redis its jobs go to (per shard, no password); None for a file of before files
    # recorded it.
    redis: dict[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "held": self.held, "pending": self.pending,
                "oldest": self.oldest, "pid": self.pid, "host": self.host,
                "foreign": self.foreign, "redis": self.redis}


def survey(directory: Path) -> list[FileReport]:
    """What each buffer file in ``directory`` holds, and whether a process holds it."""
    reports = []
    lock = _need_flock()
    for path in _files(directory):
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("push buffer %s cannot be read (%s); passed over", path, exc)
            continue
        try:
            try:
                lock.flock(fd, lock.LOCK_SH | lock.LOCK_NB)
                held = False
            except BlockingIOError:
                held = True
            parsed = _parse(_read(fd))
        except OSError as exc:  # a directory named like a buffer file, an I/O error
            log.warning("push buffer %s cannot be read (%s); passed over", path, exc)
            continue
        finally:
            os.close(fd)  # a shared lock taken here goes with it
        pid = parsed.header.get("pid")
        host = parsed.header.get("host")
        version = parsed.header.get(_HEADER, _VERSION)
        if version != _VERSION:  # its lines mean what another wurk says: none read as ours
            reports.append(FileReport(path, held, 0, None, None, None,
                                      foreign=f"push buffer format version {str(version)[:40]!r}"))
            continue
        times = [t for _, t, _, _ in parsed.pending.values()]
        try:
            targets = _targets(parsed.header)
        except ValueError:
            targets = None
        reports.append(FileReport(path, held, len(parsed.pending), min(times, default=None),
                                  pid if isinstance(pid, int) else None,
                                  host if isinstance(host, str) else None,
                                  redis=None if targets is None else {
                                      name: target.get("redis", "?")
                                      for name, target in targets.items()}))
    return reports
