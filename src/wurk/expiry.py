"""Expiring jobs: a job not started by its deadline is acknowledged without running.

1. ``expires_in`` (seconds or a ``timedelta``, on the job or per push) becomes the payload's
   ``expires_at`` at push time, counted from the scheduled time for a scheduled job (a job
   due in 2 h that expires in 1 h is dropped if not started 3 h after the push). Absolute
   times are refused: a datetime, or a number of seconds that is surely a timestamp.
2. ``expired(job)``: whether its deadline passed (a payload from Sidekiq Pro without
   ``expires_at`` counts from its ``created_at``). The deadline is absolute: a retry that
   comes due after it is dropped too. A job that started in time runs to its end.
3. ``drop(config, job)``: an expired job is counted (``stat:expired``, Sidekiq Pro's
   ``jobs.expired``), logged and handed to every ``on_expired`` callback — the event other
   features (a batch counting the job as done) listen to. The execution then counts as a
   success, never a failure or a retry.

The deadline is written and read with the local clocks of the pushing and the working
process, as Sidekiq's scheduled times are.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import payload as P
from . import stored
from .connections.lending import redis as lent_redis
from .options import check_expiry_fields, expires_in_seconds
from .reporting import Callbacks, Registration, report_error
from .stored import Invalid

if TYPE_CHECKING:
    from .config import Config

__all__ = ["Registration", "check_fields", "deadline", "drop", "expired", "expired_count",
           "on_expired", "seconds"]

log = logging.getLogger("wurk")

ExpiredCallback = Callable[[dict[str, Any]], None]
_callbacks: Callbacks[dict[str, Any]] = Callbacks()


def on_expired(callback: ExpiredCallback) -> Registration:
    """Call ``callback(payload)`` for every job this process drops as expired; the returned
    handle's ``remove()`` unregisters it."""
    return _callbacks.add(callback)


# -- pushing ----------------------------------------------------------------------------------
# The checks live with the other job options (``wurk.options``); named here too.
seconds = expires_in_seconds
check_fields = check_expiry_fields


# -- working ----------------------------------------------------------------------------------
def deadline(job: P.Payload) -> float | None:
    """Epoch seconds after which ``job`` must not start; None when it never expires. A
    deadline field that cannot be read is a warning naming it: the job runs as if it had
    none (dropping a job for a field nobody can read would lose it)."""
    raw_at = job.get(P.EXPIRES_AT)
    at = P.read_time(raw_at)
    if at is not None:
        return at
    expires_in = job.get(P.EXPIRES_IN)
    if raw_at is not None:
        _unreadable(job, P.EXPIRES_AT, raw_at)
    if expires_in is None:
        return None
    if isinstance(expires_in, bool) or not isinstance(expires_in, (int, float)) \
            or not math.isfinite(expires_in):
        _unreadable(job, P.EXPIRES_IN, expires_in)
        return None
    created = P.read_time(job.get(P.CREATED_AT))
    if created is None:
        _unreadable(job, P.CREATED_AT, job.get(P.CREATED_AT))
        return None
    return created + expires_in


def _unreadable(job: P.Payload, name: str, value: Any) -> None:
    log.warning("job %s: %s=%.80r cannot be read as a time: it runs as if it had no "
                "deadline", job.get(P.JID), name, value)


def expired(job: P.Payload, now: float | None = None) -> bool:
    limit = deadline(job)
    return limit is not None and (time.time() if now is None else now) > limit


def drop(config: Config, job: P.Payload) -> None:
    """Count, log and announce an expired job; the caller acknowledges it unrun."""
    log.info("expired: not started by its deadline; acknowledged without running")
    try:
        with lent_redis(config) as conn:
            conn.call("INCR", config.keys.expired)
    except Exception as exc:  # a lost count must not turn the drop into a failure
        report_error(config, exc, {"context": "counting an expired job", "job": job})
    _callbacks.notify(config, job, {"context": "on_expired callback", "job": job})


def expired_count(config: Config) -> int | Invalid:
    """Jobs dropped as expired, by every process on this Redis; ``Invalid`` when what is
    stored is no count (written by hand, say), rather than a 0 that hides it."""
    key = config.keys.expired
    return stored.count(config.pool("api").run(lambda r: r.get(key), idempotent=True))
