"""Jobs for a ``wurk worker`` process on a cluster (tests/integration/test_cluster_fetch.py):
each records its queue; ``CLUSTER_JOBS_SLEEP`` seconds of sleep first, set in the worker
process only, so a test's own worker runs them at once."""

from __future__ import annotations

import os
import threading
import time

import wurk

ran: list[str] = []
_lock = threading.Lock()
SLEEP_ENV = "CLUSTER_JOBS_SLEEP"


@wurk.job(name="ClusterJobs::Record")
def record() -> None:
    time.sleep(float(os.environ.get(SLEEP_ENV, "0")))
    with _lock:
        ran.append(str(wurk.current_job()["queue"]))  # type: ignore[index]
