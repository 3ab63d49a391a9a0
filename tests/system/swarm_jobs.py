"""Jobs and hooks the swarm and embedded-mode system tests load next to ``worker_jobs``.

Hooks that break a child on purpose are switched on by environment variables the test sets
for the swarm it starts (they are read when the module is imported, in the swarm's parent).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import wurk
from tests.system.worker_jobs import r

MB = 1024 * 1024
_hoard: list[bytes] = []


@wurk.job(name="Swarm::Pid")
def record_pid(key: str) -> None:
    r().rpush(key, os.getpid())


@wurk.job(name="Swarm::NotifySocket")
def record_notify_socket(key: str) -> None:
    """What a child sees of systemd's notify socket (nothing: the parent alone speaks)."""
    r().rpush(key, os.environ.get("NOTIFY_SOCKET", "-"))


@wurk.job(name="Swarm::Hog")
def hog(megabytes: int, key: str) -> None:
    """Hold ``megabytes`` of touched memory for the rest of the process's life."""
    _hoard.append(b"\x01" * (megabytes * MB))
    r().rpush(key, os.getpid())


def _fail_to_boot() -> None:
    raise RuntimeError("boot failed on purpose")


def _hang_on_shutdown() -> None:
    time.sleep(60)


def _slow_boot_when_marked() -> None:
    marker = os.environ.get("SWARM_TEST_SLOW_BOOT_MARKER")
    if marker and Path(marker).exists():
        time.sleep(60)


_config = wurk.default_config()
# Every child says it forked: the ``fork`` lifecycle event runs in each (test_swarm reads it).
_config.on("fork", lambda: r().rpush("sys:forked", os.getpid()))
if os.environ.get("SWARM_TEST_BOOT_FAIL"):
    _config.on("startup", _fail_to_boot)
if os.environ.get("SWARM_TEST_HANG_ON_SHUTDOWN"):
    _config.on("shutdown", _hang_on_shutdown)
if os.environ.get("SWARM_TEST_SLOW_BOOT_MARKER"):
    _config.on("startup", _slow_boot_when_marked)
