"""Rate limiters shared by every process on one Redis, usable anywhere — in jobs or not.

::

    ERP = wurk.limiter.concurrent("erp", 50, wait_timeout=5, lock_timeout=30)
    with ERP.within_limit():
        erp.call()

1. Constructors: ``concurrent``, ``bucket``, ``window``, ``leaky``, ``points``,
   ``unlimited`` (``kinds.py``). Creating one does no I/O; names may be built per call.
2. ``within_limit()`` for ``with`` and ``async with``; over the limit after
   ``wait_timeout`` it raises ``OverLimit`` (``.limiter``, ``.retry_after``, ``.next_drip``).
3. Inside a job, ``OverLimit`` (and the classes in ``config.limiter_errors``, e.g. an HTTP
   429 error) reschedules the job with a backoff instead of failing it
   (``reschedule.py``), up to ``reschedule`` times; then it is an ordinary failure.
4. ``limiters(config)`` / ``describe``: what the dashboard's Limits tab shows (``inspect.py``).

Every rule runs in Lua with Redis's clock (``wurk/scripts/limiter_*.lua``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ..errors import OverLimit
from .base import Block, Handle, Limiter, Policy
from .kinds import Bucket, Concurrent, Leaky, Points, Unlimited, Window

__all__ = [
    "Block",
    "Bucket",
    "Concurrent",
    "Handle",
    "Leaky",
    "Limiter",
    "OverLimit",
    "Points",
    "Policy",
    "Unlimited",
    "Window",
    "bucket",
    "concurrent",
    "leaky",
    "points",
    "unlimited",
    "window",
]

Interval = str | float | timedelta


def concurrent(name: str, size: int, *, wait_timeout: float | timedelta = 5.0,
               lock_timeout: float | timedelta = 30.0, **options: Any) -> Concurrent:
    """At most ``size`` blocks at once; a holder's slot is reclaimed ``lock_timeout`` after
    it was taken if the holder vanished (a block that runs longer loses exclusivity)."""
    return Concurrent(name, size, wait_timeout=wait_timeout, lock_timeout=lock_timeout,
                      **options)


def bucket(name: str, size: int, interval: Interval = "second", *,
           wait_timeout: float | timedelta = 5.0, **options: Any) -> Bucket:
    """At most ``size`` uses per ``"second"``/``"minute"``/``"hour"``/``"day"`` (resetting at
    each boundary)."""
    return Bucket(name, size, interval, wait_timeout=wait_timeout, **options)


def window(name: str, size: int, interval: Interval = "second", *,
           wait_timeout: float | timedelta = 5.0, **options: Any) -> Window:
    """At most ``size`` uses in any sliding ``interval`` (a unit or seconds)."""
    return Window(name, size, interval, wait_timeout=wait_timeout, **options)


def leaky(name: str, size: int, drain_period: Interval, *,
          wait_timeout: float | timedelta = 5.0, **options: Any) -> Leaky:
    """A burst of ``size``, then one use per ``drain_period / size``."""
    return Leaky(name, size, drain_period, wait_timeout=wait_timeout, **options)


def points(name: str, capacity: float, refill_per_second: float, **options: Any) -> Points:
    """``capacity`` points refilled at ``refill_per_second``; ``within_limit(used=estimate)``
    then ``handle.points_used(actual)``."""
    return Points(name, capacity, refill_per_second, **options)


def unlimited(*anything: Any, **options: Any) -> Unlimited:
    """A limiter that never limits (for tests, or a limit that applies only sometimes)."""
    return Unlimited(*anything, **options)
