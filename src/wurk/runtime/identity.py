"""Who this process is: ``<hostname>:<pid>:<nonce>``, and what lets a reaper judge its pid.

1. The nonce is made once per process image, so a forked child keeps its parent's nonce and a
   swarm parent knows each child's identity.
2. ``Identity`` also carries the process's start time, the machine's boot id and the pid
   namespace's inode, written to the heartbeat's ``info`` JSON: a reaper may judge a pid only
   when both match its own (containers sharing one hostname each have their own pids, and a
   pid means nothing in another namespace).

A leaf: the heartbeat writes it, reliable fetch names its in-flight lists with it, the
reaper and the swarm read it.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

__all__ = ["Identity", "boot_id", "hostname", "pid_namespace", "process_nonce"]

_nonce: str | None = None


def process_nonce() -> str:
    """6 random bytes as hex, made once per process image (inherited across fork)."""
    global _nonce
    if _nonce is None:
        _nonce = secrets.token_hex(6)
    return _nonce


def hostname() -> str:
    return os.environ.get("DYNO") or socket.gethostname()


_BOOT_ID = "/proc/sys/kernel/random/boot_id"
_PID_NAMESPACE = "/proc/self/ns/pid"


def boot_id() -> str | None:
    """This boot of the kernel (Linux), or None where it cannot be read."""
    try:
        with open(_BOOT_ID, encoding="ascii") as source:
            return source.read().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def pid_namespace() -> int | None:
    """The inode of this process's pid namespace (Linux), or None where it cannot be read:
    two processes see the same pids only when it and the boot id are the same."""
    try:
        return os.stat(_PID_NAMESPACE).st_ino
    except OSError:
        return None


@dataclass(frozen=True)
class Identity:
    hostname: str
    pid: int
    nonce: str
    started_at: float = field(default_factory=time.time)
    boot_id: str | None = None
    pid_namespace: int | None = None

    @classmethod
    def current(cls) -> Identity:
        # The process's own start time, so a reaper on this host can tell a reused pid from
        # the owner; the boot id and pid namespace, so it judges pids only where they mean
        # the same process.
        return cls(hostname(), os.getpid(), process_nonce(), psutil.Process().create_time(),
                   boot_id(), pid_namespace())

    def shares_pids_with(self, info: dict[str, Any]) -> bool:
        """Whether the process whose ``info`` JSON this is sees the same pids as this one:
        same boot, same pid namespace, both recorded. Anything else (another container
        under the same hostname, a process of another program) proves nothing."""
        if self.boot_id is None or self.pid_namespace is None:
            return False
        return (info.get("boot_id") == self.boot_id
                and info.get("pid_namespace") == self.pid_namespace)

    def __str__(self) -> str:
        return f"{self.hostname}:{self.pid}:{self.nonce}"
