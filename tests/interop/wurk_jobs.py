"""Jobs the wurk worker of the live interop test runs (loaded with ``-r``): each records what
it was given where the test reads it back, or fails the way the test needs."""

from __future__ import annotations

import time
from typing import Any

import wurk
from tests.helpers.job_redis import r
from wurk import payload as P

RAN = "interop:wurk-ran"
SLOW_STARTED = "interop:slow-started"


@wurk.job(name="Interop::Record")
def record(*args: Any) -> None:
    r().rpush(RAN, P.dumps({"jid": wurk.current_jid(), "args": list(args)}))


def _an_hour(count: int, exc: BaseException) -> float:
    return 3600.0  # stays in the retry set while Sidekiq reads it


@wurk.job(name="Interop::Fail", retry=3, retry_in=_an_hour)
def fail(n: int) -> None:
    raise ValueError(f"interop failure {n}")


@wurk.job(name="Interop::Die", retry=0)
def die(n: int) -> None:
    raise RuntimeError(f"interop death {n}")


@wurk.job(name="Interop::Slow")
def slow(seconds: float) -> None:
    """Busy for a while: what Sidekiq's Busy page shows running."""
    r().rpush(SLOW_STARTED, "1")
    time.sleep(seconds)
