"""What a swarm child runs after ``fork``, and how it talks back to its parent.

1. ``NoticePipe``: one pipe from every child to the parent. A child writes one line per
   notice — ``recycle`` (it has run ``max_jobs`` jobs) or ``boot-error <error>`` — in a single
   write shorter than ``PIPE_BUF``, so lines from different children never interleave.
2. ``OrphanGuard``: the parent's pid, read in the parent before the fork (race-free even if
   the parent dies at once), compared with ``getppid()`` every child tick.
3. ``run_child`` is the child's whole life and never returns (``os._exit``, so none of the
   parent's exit hooks run here; wurk's own — a reliable writer's last flush, an outbox
   relay's last pass — run first, ``hooks.run_exit_hooks``): own signal handlers in place
   before the signals blocked across the fork are let through; Redis pools reset; ``fork``
   hooks; a launcher (quiet from the start if the swarm is quiet); then the signal loop.
   TERM or INT stops it as a worker stops (``wurk.runtime.signals.stop_watched``): a second
   one, a second or more later, hurries the stop. An orphaned child stops fetching, pushes
   its in-flight jobs back and exits within a few seconds: nobody would stop it.
4. Exit codes: 0 stopped, ``EXIT_BOOT_FAILED`` could not boot, ``EXIT_CRASHED`` its own loop
   broke.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import sys
from dataclasses import dataclass
from typing import NoReturn

from .. import payload as P
from ..config import Config
from ..launcher import Launcher
from ..runtime import hooks
from ..runtime.collector import tune_collector
from ..runtime.malloc import limit_arenas
from ..runtime.signals import HANDLED, STOP_SIGNALS, SignalPipe, act_on, stop_watched
from ..sharding import ShardedLauncher, launcher_for

__all__ = [
    "EXIT_BOOT_FAILED",
    "EXIT_CRASHED",
    "FORK_SIGNALS",
    "ChildSpec",
    "Notice",
    "NoticePipe",
    "OrphanGuard",
    "run_child",
]

log = logging.getLogger("wurk")

EXIT_BOOT_FAILED = 78  # EX_CONFIG: the app cannot start in a child
EXIT_CRASHED = 70  # EX_SOFTWARE: the child's own loop failed

# Blocked in the forking thread across fork(): a signal sent to a new child before it has
# its own handlers waits, instead of running the parent's handler in the child.
FORK_SIGNALS = frozenset(getattr(signal, f"SIG{name}") for name in HANDLED)

# How often a child looks at its parent and its job count; bounds how long an orphan runs.
CHILD_TICK = 0.5
# An orphan's drain: a job this close to done finishes, the rest go back at once. With the
# 3 s interrupt grace and one tick of detection the child is gone within 5 s.
ORPHAN_STOP_TIMEOUT = 0.5
# Longest notice line: one write of at most PIPE_BUF bytes is atomic.
NOTICE_MAX = select.PIPE_BUF


@dataclass(frozen=True)
class Notice:
    pid: int
    kind: str
    text: str


class NoticePipe:
    """Children write notices; the parent reads them without blocking."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._partial = b""

    def send(self, kind: str, text: str = "") -> bool:
        """One line from this process; False when it could not be written (advisory)."""
        line = f"{os.getpid()} {kind} {' '.join(text.split())}".encode()
        try:
            os.write(self._write, line[: NOTICE_MAX - 1] + b"\n")
        except OSError:  # a full pipe or a dead parent: nobody would read it anyway
            return False
        return True

    def receive(self) -> list[Notice]:
        data = self._partial + self._read_available()
        *lines, self._partial = data.split(b"\n")
        return [notice for notice in map(_parse, lines) if notice is not None]

    def _read_available(self) -> bytes:
        chunks = []
        while True:
            try:
                chunk = os.read(self._read, 65536)
            except (BlockingIOError, OSError):
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def close_reader(self) -> None:
        """In a child: only the parent reads."""
        with contextlib.suppress(OSError):
            os.close(self._read)

    def close(self) -> None:
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)


def _parse(line: bytes) -> Notice | None:
    pid, _, rest = line.decode("utf-8", "replace").partition(" ")
    kind, _, text = rest.partition(" ")
    if not pid.isdigit() or not kind:
        return None
    return Notice(int(pid), kind, text)


class OrphanGuard:
    """Tells a child that the parent which forked it is gone."""

    def __init__(self, parent_pid: int) -> None:
        self.parent_pid = parent_pid

    def orphaned(self) -> bool:
        return os.getppid() != self.parent_pid


@dataclass(frozen=True)
class ChildSpec:
    """What the parent tells a child at fork time."""

    slot: int
    parent_pid: int
    notices: NoticePipe
    quiet: bool = False
    max_jobs: int = 0


def run_child(config: Config, spec: ChildSpec) -> NoReturn:
    """Run a child to its end and exit the process with its status; never returns."""
    code = EXIT_CRASHED
    try:
        code = _Child(config, spec).run()
    except BaseException:
        log.exception("swarm child of slot %d failed", spec.slot)
    finally:
        try:  # what atexit would have run of wurk's: its kept pushes are sent or said lost
            hooks.run_exit_hooks()
        finally:
            _flush_output()
            os._exit(code)


def _flush_output() -> None:
    for handler in logging.getLogger("wurk").handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


class _Child:
    """One child process: boot a launcher, then obey signals until stopped or orphaned."""

    def __init__(self, config: Config, spec: ChildSpec) -> None:
        self.config = config
        self.spec = spec
        self.guard = OrphanGuard(spec.parent_pid)
        self._announced = False

    def run(self) -> int:
        pipe = _own_signals()
        try:
            launcher = self._boot(pipe)
        except Exception as exc:
            log.exception("swarm child of slot %d could not boot", self.spec.slot)
            self.spec.notices.send("boot-error",
                                   f"{P.error_class_name(exc)}: {P.error_message(exc)}")
            return EXIT_BOOT_FAILED
        return self._serve(launcher, pipe)

    def _boot(self, pipe: SignalPipe) -> Launcher | ShardedLauncher:
        limit_arenas()  # this process is the worker's: before its threads start
        self.config.reset_pools()
        launcher = launcher_for(self.config, on_remote_signal=pipe.push,
                                title=f"swarm child {self.spec.slot}", slot=self.spec.slot)
        launcher.fire("fork", reverse=False, raise_errors=True)
        if self.spec.quiet:
            launcher.quiet()  # before start: a child of a quiet swarm never fetches
        tune_collector(self.config.gc_threshold)  # the application is loaded, no job has run
        launcher.start()
        return launcher

    def _serve(self, launcher: Launcher | ShardedLauncher, pipe: SignalPipe) -> int:
        while True:
            for name in pipe.wait(CHILD_TICK):
                if name in STOP_SIGNALS:
                    # No hint in each child's line: the parent's says it once for the swarm.
                    stop_watched(launcher, pipe, hint="")
                    return 0
                self._on_signal(launcher, name)
            if self.guard.orphaned():
                log.warning("swarm: parent %d is gone; pushing in-flight jobs back and "
                            "exiting", self.spec.parent_pid)
                launcher.stop(timeout=ORPHAN_STOP_TIMEOUT)
                return 0
            self._check_max_jobs(launcher)

    def _on_signal(self, launcher: Launcher | ShardedLauncher, name: str) -> None:
        if name == "USR1":  # said here rather than by act_on: the parent is known
            log.warning("USR1 restarts a swarm: send it to the parent, pid %d",
                        self.spec.parent_pid)
            return
        act_on(launcher, name)

    def _check_max_jobs(self, launcher: Launcher | ShardedLauncher) -> None:
        limit = self.spec.max_jobs
        if not limit or self._announced or launcher.counters.total_processed < limit:
            return
        # Keep working: the parent replaces this child replacement-first (docs/swarm.md).
        self._announced = self.spec.notices.send("recycle", f"after {limit} jobs")
        if self._announced:
            log.info("swarm: ran %d jobs (max_jobs %d); asking to be replaced",
                     launcher.counters.total_processed, limit)


def _own_signals() -> SignalPipe:
    """Replace every inherited handler, then let the signals blocked across fork through."""
    with contextlib.suppress(ValueError):
        # A web host's event loop may have set a wakeup fd; it is the parent's, not ours.
        signal.set_wakeup_fd(-1)
    pipe = SignalPipe()
    pipe.install()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORK_SIGNALS)
    return pipe
