"""The jobs ``benchmarks.results`` runs in a ``wurk worker`` process (``-r``)."""

from __future__ import annotations

import time

import wurk

COUNTER = "bench:results:count"


@wurk.job(name="Bench::Count", retry=False)
def count(n: int) -> int:
    """The cost row: one INCR, returning a small value (kept when pushed with result_ttl)."""
    with wurk.redis() as conn:
        conn.call("INCR", COUNTER)
    return n


@wurk.job(name="Bench::Stamp", result_ttl=600, retry=False)
async def stamp() -> float:
    """The latency row: returns the moment it ends, for the waiter to subtract."""
    return time.time()
