"""The no-op job of benchmarks/throughput.py: one INCR through ``wurk.redis()``, so the
work is visible and costs what a job's own Redis command costs."""

from __future__ import annotations

import wurk


@wurk.job(name="BenchIncr")
def bench_incr() -> None:
    with wurk.redis() as conn:
        conn.call("INCR", "bench:count")
