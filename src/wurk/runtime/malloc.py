"""How many malloc arenas a worker process keeps (glibc only).

glibc gives a thread that allocates while another holds the arena an arena of its own, up
to eight per core, and an arena, once made, keeps the pages it touched. A worker's dozen
threads (processors, heartbeat, poller) end up with a dozen partly used heaps: after a
20,000-job drain, 1.8 MB more peak memory than with two arenas, measured with the peer
benchmark's worker. The arenas hold only what Python's own allocator does not serve from
its pools (objects over 512 bytes: payloads, replies, log buffers), and the threads running
Python take turns on the GIL anyway, so two arenas cost no measured throughput; a job that
allocates heavily in C with the GIL released (numpy, compression) may want more, which
``MALLOC_ARENA_MAX`` in the environment sets and this module then leaves alone.

Only a process the worker owns is tuned (``wurk worker``, a swarm's children, the
framework commands), never an application that embeds a worker: its allocator is the
application's business.
"""

from __future__ import annotations

import os
import sys

__all__ = ["WORKER_ARENAS", "limit_arenas"]

# glibc's mallopt parameter for the arena limit (malloc.h: M_ARENA_MAX).
_M_ARENA_MAX = -8
WORKER_ARENAS = 2


def _glibc() -> bool:
    """glibc names its version here; musl does not (and its mallopt does nothing)."""
    try:
        return sys.platform.startswith("linux") and bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (ValueError, OSError):
        return False


def limit_arenas(arenas: int = WORKER_ARENAS) -> bool:
    """Cap this process's malloc arenas at ``arenas``, before its threads start; False when
    left alone: not glibc, or ``MALLOC_ARENA_MAX`` is set (glibc read it at start)."""
    if not _glibc() or "MALLOC_ARENA_MAX" in os.environ:
        return False
    import ctypes  # here, not at import: only the worker's own process pays for it

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, arenas))
