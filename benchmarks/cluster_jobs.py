"""The job of benchmarks/cluster.py: one INCR through ``wurk.redis()``, which inside a job is
the processor's own connection to its queue's keyspace, so the count carries that keyspace's
hash tag and each primary counts the jobs drained from it."""

from __future__ import annotations

import wurk


@wurk.job(name="ClusterIncr")
def cluster_incr(n: int) -> None:
    queue = (wurk.current_job() or {}).get("queue", "default")
    with wurk.redis() as conn:
        conn.call("INCR", f"{{{queue}}}:bench:count")
