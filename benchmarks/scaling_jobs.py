"""The job of benchmarks/scaling.py: one INCR through ``wurk.redis()``, which inside a job is
the processor's own connection, so each shard counts the jobs drained from it."""

from __future__ import annotations

import wurk


@wurk.job(name="ScaleIncr")
def scale_incr(n: int) -> None:
    with wurk.redis() as conn:
        conn.call("INCR", "bench:count")
