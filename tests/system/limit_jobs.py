"""Jobs of the limits system tests, run by real ``wurk worker`` processes (``-r``).

Each records, on the connection its processor lends it, when it got in and when it left, so
the test can count how many ran at once from the jobs' own timestamps.
"""

from __future__ import annotations

import os
import time

import wurk

LOG = "limits:log"  # "start|end <jid> <pid> <epoch s>", in the order they happened
LOCK_TIMEOUT = 2.0
ERP = wurk.limiter.concurrent("erp", 3, wait_timeout=1, lock_timeout=LOCK_TIMEOUT,
                              reschedule=1000, backoff=lambda limiter, job, exc: 0.2)


def note(what: str) -> None:
    with wurk.redis() as conn:
        conn.call("RPUSH", LOG, f"{what} {wurk.current_jid()} {os.getpid()} {time.time():.6f}")


@wurk.job(name="Limits::Erp")
def erp_call(seconds: float) -> None:
    """Holds one of the three ERP slots for ``seconds``."""
    with ERP.within_limit():
        note("start")
        time.sleep(seconds)
        note("end")


@wurk.job(name="Limits::Unique", unique_for=60)
def unique_mark(key: int, seconds: float) -> None:
    note(f"run-{key}")
    time.sleep(seconds)
    note(f"done-{key}")
