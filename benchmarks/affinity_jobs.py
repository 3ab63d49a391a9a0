"""Jobs for ``benchmarks/affinity.py``, loaded by the worker with ``-r``.

``Bench::Hash`` hashes 4 MiB in C with the GIL released (hashlib lets go of it above 2 KiB),
as numpy, compression and image work do: threads of one process run it on several cores at
once. ``Bench::Incr`` is GIL-bound: one Redis round trip. Both count themselves."""

from __future__ import annotations

import hashlib
import os

import wurk

COUNTER = "bench:affinity:done"
_DATA = os.urandom(4 << 20)


@wurk.job(name="Bench::Hash")
def bench_hash() -> None:
    hashlib.sha256(_DATA).digest()
    with wurk.redis() as conn:
        conn.call("INCR", COUNTER)


@wurk.job(name="Bench::Incr")
def bench_incr() -> None:
    with wurk.redis() as conn:
        conn.call("INCR", COUNTER)
