"""Jobs for ``benchmarks/partitions.py``, loaded by the worker with ``-r``: each counts
itself (one INCR), whichever queue it came from."""

from __future__ import annotations

import wurk

COUNTER = "bench:partitions:done"


@wurk.job(name="Bench::PartIncr")
def part_incr() -> None:
    with wurk.redis() as conn:
        conn.call("INCR", COUNTER)
