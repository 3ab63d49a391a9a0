"""A job over its rate limit is rescheduled, not failed (Sidekiq Enterprise's behaviour).

1. ``over_limit_classes(config)``: ``OverLimit`` plus ``config.limiter_errors`` (an HTTP 429
   error class, say): what the worker treats as "over a limit".
2. ``reschedule(config, job, exc)``: when the job has been rescheduled fewer than its
   limit's ``reschedule`` times (``config.limiter_reschedule``, 20, when the limiter does not
   say), ``job["overrated"]`` goes up by one and the job goes to the scheduled set to run
   after the backoff; the execution then counts as done, not failed. Past the limit it
   returns False and the error takes the ordinary retry path (``overrated`` is kept).
3. The backoff: the limiter's ``backoff(limiter, job, exc)``, else ``config.limiter_backoff``,
   else what the limiter knows — ``exc.retry_after`` (``next_drip``), when the next use
   fits — plus jitter of up to ``overrated`` × that wait (at least a second each), so jobs
   refused together do not all come back at one instant; else, when nothing says when room
   comes (a concurrent limiter, an error of ``limiter_errors`` without a ``retry_after``),
   ``300 × overrated`` s plus up to 300 s of jitter, so a backlog spreads out.

The job is stored as the chain holds it, so a link inside this one that decodes
something (an encrypted argument) must decode into a copy, not into the payload in place.
"""

from __future__ import annotations

import logging
import math
import random
import time
from typing import Any

from .. import payload as P
from ..config import Config
from ..connections.lending import redis as lent_redis
from ..errors import OverLimit
from ..reporting import report_error

__all__ = ["BACKOFF_JITTER", "BACKOFF_STEP", "MIN_SPREAD", "default_backoff", "informed_backoff",
           "known_wait", "over_limit_classes", "reschedule"]

log = logging.getLogger("wurk")

# Ruby wurk's default: 300 s per reschedule so far, plus up to 300 s at random.
BACKOFF_STEP = 300
BACKOFF_JITTER = 300
# A backoff hook's answer is capped here (a day): a bad hook must not park a job for years.
MAX_BACKOFF = 86400.0
# The least jitter a known wait gets, per reschedule so far: a limiter whose next use fits in
# milliseconds must not bring every refused job back in the same scheduler pass.
MIN_SPREAD = 1.0


def default_backoff(overrated: int) -> float:
    return float(BACKOFF_STEP * overrated + random.randrange(BACKOFF_JITTER) + 1)


def known_wait(exc: BaseException) -> float | None:
    """Seconds until the limit has room, as the error says (``OverLimit.retry_after``, or a
    ``retry_after`` attribute of an error of ``limiter_errors``); None when it cannot know."""
    value = getattr(exc, "retry_after", None)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    seconds = float(value)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def informed_backoff(wait: float, overrated: int) -> float:
    """``wait`` plus up to ``overrated`` × that wait (at least ``MIN_SPREAD`` s each) of
    jitter: the first jobs back find room, the rest spread over the next windows."""
    spread = max(wait, MIN_SPREAD) * max(overrated, 1)
    return min(wait + random.uniform(0.0, spread), MAX_BACKOFF)


def over_limit_classes(config: Config) -> tuple[type[BaseException], ...]:
    return (OverLimit, *config.limiter_errors)


def reschedule(config: Config, job: P.Payload, exc: BaseException) -> bool:
    """Put ``job`` back in the scheduled set after its backoff; False when it has been
    rescheduled as often as it may be (the caller lets the error through)."""
    limiter = exc.limiter if isinstance(exc, OverLimit) else None
    allowed = getattr(limiter, "reschedule", None)
    if allowed is None:
        allowed = config.limiter_reschedule
    count = job.get(P.OVERRATED)
    done = count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0
    if done >= allowed:
        return False
    job[P.OVERRATED] = done + 1
    delay = _backoff(config, limiter, job, exc)
    stored = {k: v for k, v in job.items() if k != P.ENQUEUED_AT}
    at = time.time() + delay
    with lent_redis(config) as conn:
        conn.call("ZADD", config.keys.schedule, P.score(at), P.dumps(stored))
    log.info("over the limit of %s: rescheduled in %.0f s (%d of %d)", _name(limiter, exc),
             delay, done + 1, allowed)
    return True


def _backoff(config: Config, limiter: Any, job: P.Payload, exc: BaseException) -> float:
    hook = getattr(limiter, "backoff", None) or config.limiter_backoff
    if hook is None:
        wait = known_wait(exc)
        if wait is not None:
            return informed_backoff(wait, int(job[P.OVERRATED]))
        return default_backoff(int(job[P.OVERRATED]))
    try:
        seconds = float(hook(limiter, job, exc))
    except Exception as failure:
        report_error(config, failure, {"context": "limiter backoff raised; using the default",
                                       "job": job})
        return default_backoff(int(job[P.OVERRATED]))
    if not math.isfinite(seconds) or seconds < 0:
        return default_backoff(int(job[P.OVERRATED]))
    return min(seconds, MAX_BACKOFF)


def _name(limiter: Any, exc: BaseException) -> str:
    if limiter is not None:
        return f"limiter {limiter.name!r}"
    return P.error_class_name(exc)
