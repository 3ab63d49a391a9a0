"""``wurk.runtime.malloc``: a worker process's malloc arenas, counted by glibc itself."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.libc import glibc
from wurk.runtime import malloc

pytestmark = pytest.mark.skipif(not glibc(), reason="the arena limit is glibc's")

# Twelve threads allocate at once, as a worker's processors do; then glibc's malloc_stats
# prints one "Arena N:" block per arena on stderr.
THREADS_ALLOCATE = textwrap.dedent("""
    import ctypes, sys, threading
    from wurk.runtime.malloc import limit_arenas
    print(limit_arenas() if sys.argv[1] == "limit" else "left", flush=True)
    start = threading.Barrier(12)
    def allocate():
        start.wait()
        kept = [bytearray(4096) for _ in range(2000)]  # past Python's small-object pools
        start.wait()
    threads = [threading.Thread(target=allocate) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ctypes.CDLL(None).malloc_stats()
""")


def _arenas(mode: str, **env: str) -> tuple[str, int]:
    """Run the threads in a fresh interpreter; ``MALLOC_ARENA_MAX`` only when given here
    (one set where the tests run would change what glibc does by default)."""
    environment = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    done = subprocess.run([sys.executable, "-c", THREADS_ALLOCATE, mode], capture_output=True,
                          text=True, timeout=60, env={**environment, **env}, check=True)
    arenas = sum(line.startswith("Arena ") for line in done.stderr.splitlines())
    return done.stdout.strip(), arenas


def test_a_worker_process_keeps_two_arenas_however_many_threads_allocate() -> None:
    said, arenas = _arenas("limit")
    assert said == "True" and 1 <= arenas <= malloc.WORKER_ARENAS
    # What the limit changes: glibc's own default gives these threads arenas of their own.
    assert _arenas("default")[1] > malloc.WORKER_ARENAS


def test_the_users_malloc_arena_max_is_left_as_set() -> None:
    said, arenas = _arenas("limit", MALLOC_ARENA_MAX="4")
    assert said == "False"
    assert malloc.WORKER_ARENAS < arenas <= 4
