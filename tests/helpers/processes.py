"""Child processes a test saw, signalled safely after they may have died.

A pid is only a number: once its process died and was reaped, the system may give it to
any new process or thread — another test's worker among them, where a signal to a
thread's id stops the whole process. So a test keeps the ``psutil.Process`` it saw and
asks or signals through it: psutil refuses a process whose pid now belongs to another.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import psutil

__all__ = ["kill_seen", "pid_runs", "running"]


def running(process: psutil.Process) -> bool:
    """Whether the process seen still runs (not a zombie, its pid not given to another)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def pid_runs(pid: int) -> bool:
    """Whether a process runs under ``pid`` (not a zombie). Asked in one step: a zombie seen
    by one call may be reaped before the next (``pid_exists`` then ``Process``) asks."""
    try:
        return running(psutil.Process(pid))
    except psutil.Error:  # no process has that pid
        return False


def kill_seen(processes: Iterable[psutil.Process]) -> None:
    """SIGKILL each process seen that still runs; those gone (or whose pid is another's
    now) are left alone."""
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()
