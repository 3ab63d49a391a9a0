"""The six kinds of limiter; each one's rule is one Lua script (``scripts/limiter_*.lua``).

1. ``Concurrent``: at most ``size`` blocks at once; each holder's slot is a lock that
   expires after ``lock_timeout``, so a crashed holder's slot is reclaimed. Waiters sleep on
   a wake-up list a release pushes to, bounded by the earliest lock's expiry.
2. ``Bucket``: at most ``size`` uses per wall-clock interval (resets at each boundary).
3. ``Window``: at most ``size`` uses in any sliding interval.
4. ``Leaky``: a burst of ``size``, then one use per ``drain_period / size``.
5. ``Points``: a budget of ``capacity`` points refilled continuously; a call spends its
   estimated cost up front (refused at once when short) and corrects it afterwards.
6. ``Unlimited``: never limits; takes any arguments (tests, conditional bypass).
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .. import scripts
from .base import (
    COMMON,
    SHORTEST,
    Backoff,
    Block,
    Handle,
    Limiter,
    Policy,
    _finite,
    _seconds,
    _whole,
    interval_seconds,
)

if TYPE_CHECKING:
    from ..config import Config
    from ..scripts import _Caller
    from ..stored import Invalid

__all__ = ["Bucket", "Concurrent", "Leaky", "Points", "Unlimited", "Window"]

# How often a concurrent limiter's waiter outside a job asks again: a release is noticed
# within this, at the cost of one script call per waiter per interval.
POLL_OUTSIDE_JOBS = 0.05

_CONCURRENT_ACQUIRE = scripts.Script("limiter_concurrent_acquire.lua", prelude=COMMON)
_CONCURRENT_RELEASE = scripts.Script("limiter_concurrent_release.lua", prelude=COMMON)
_BUCKET = scripts.Script("limiter_bucket.lua", prelude=COMMON)
_WINDOW = scripts.Script("limiter_window.lua", prelude=COMMON)
_LEAKY = scripts.Script("limiter_leaky.lua", prelude=COMMON)
_POINTS = scripts.Script("limiter_points.lua", prelude=COMMON)


def _fits(used: float, size: int, what: str) -> float:
    """``used`` as whole units no larger than ``size`` (a call that can never fit is a bug)."""
    _whole(used, "used")
    if used > size:
        raise ValueError(f"used={used} can never fit {what} of {size}")
    return used


class Concurrent(Limiter):
    """At most ``size`` blocks running at once, cluster-wide (size 1: a distributed mutex)."""

    kind = "concurrent"
    rule = ("size", "lock_timeout")

    def __init__(self, name: str, size: int, *, wait_timeout: float | timedelta = 5.0,
                 lock_timeout: float | timedelta = 30.0, **options: Any) -> None:
        super().__init__(name, wait_timeout=wait_timeout, **options)
        self.size = _whole(size, "size")
        self.lock_timeout = _seconds(lock_timeout, "lock_timeout", zero=False,
                                     shortest=SHORTEST)

    def options(self) -> dict[str, Any]:
        return {**super().options(), "size": self.size, "lock_timeout": self.lock_timeout}

    def _keys(self) -> tuple[str, str, str]:
        keys = self._config().keys
        return (keys.limiter_concurrent(self.name), keys.limiter_wakeups(self.name),
                keys.limiter_stats(self.name))

    def _check_used(self, used: float) -> float:
        if used != 1:
            raise ValueError("a concurrent limiter counts blocks, not units: leave used=1")
        return used

    def _attempt(self, conn: _Caller, handle: Handle, remaining_ms: int,
                 waited_ms: int) -> tuple[int, int]:
        held, wakeups, stats = self._keys()
        return self._script(conn, _CONCURRENT_ACQUIRE, [held, stats, wakeups], [
            self.size, int(self.lock_timeout * 1000), handle.token,
            max(self.ttl, math.ceil(self.lock_timeout)), remaining_ms, waited_ms])

    def _wait_on(self, conn: _Caller, pause: float) -> None:
        # Woken by a release; at the latest when the earliest lock expires (the script's
        # hint) or the wait's slice ends.
        conn.call("BLPOP", self._keys()[1], f"{max(pause, 0.01):.3f}")

    def _poll(self, pause: float) -> float:
        # Outside a processor no connection is held while waiting, so no release can wake
        # this waiter: it asks again this often.
        return min(pause, POLL_OUTSIDE_JOBS)

    def _retry_after(self, wait_ms: int) -> float | None:
        return None  # a slot frees when a holder finishes: nobody can know when

    def _release(self, conn: _Caller, handle: Handle) -> None:
        held, wakeups, stats = self._keys()
        self._warn_restarted(_CONCURRENT_RELEASE.call(conn, [held, wakeups, stats], [
            handle.token, int(self.lock_timeout * 1000), self.size,
            max(self.ttl, math.ceil(self.lock_timeout))]))


class Bucket(Limiter):
    """At most ``size`` uses per wall-clock ``interval``: the count resets at each boundary
    (epoch multiples of the interval, by Redis's clock), so bursts can straddle one."""

    kind = "bucket"
    rule = ("size", "interval")

    def __init__(self, name: str, size: int, interval: str | float | timedelta = "second", *,
                 wait_timeout: float | timedelta = 5.0, **options: Any) -> None:
        super().__init__(name, wait_timeout=wait_timeout, **options)
        self.size = _whole(size, "size")
        self.interval = interval_seconds(interval, "interval")
        if self.interval != int(self.interval):
            raise ValueError(f"a bucket's interval must be whole seconds, not {interval!r}")

    def options(self) -> dict[str, Any]:
        return {**super().options(), "size": self.size, "interval": int(self.interval)}

    def _check_used(self, used: float) -> float:
        return _fits(used, self.size, "a bucket")

    def _attempt(self, conn: _Caller, handle: Handle, remaining_ms: int,
                 waited_ms: int) -> tuple[int, int]:
        keys = self._config().keys
        return self._script(conn, _BUCKET, [keys.limiter_stats(self.name)], [
            keys.limiter_bucket_prefix(self.name), self.size, int(self.interval),
            int(handle.used), remaining_ms, waited_ms, self.ttl])


class Window(Limiter):
    """At most ``size`` uses in any sliding ``interval`` (a unit or seconds)."""

    kind = "window"
    rule = ("size", "interval")

    def __init__(self, name: str, size: int, interval: str | float | timedelta = "second", *,
                 wait_timeout: float | timedelta = 5.0, **options: Any) -> None:
        super().__init__(name, wait_timeout=wait_timeout, **options)
        self.size = _whole(size, "size")
        self.interval = interval_seconds(interval, "interval")

    def options(self) -> dict[str, Any]:
        return {**super().options(), "size": self.size, "interval": self.interval}

    def _check_used(self, used: float) -> float:
        return _fits(used, self.size, "a window")

    def _attempt(self, conn: _Caller, handle: Handle, remaining_ms: int,
                 waited_ms: int) -> tuple[int, int]:
        keys = self._config().keys
        return self._script(conn, _WINDOW, [
            keys.limiter_window(self.name), keys.limiter_stats(self.name)], [
            self.size, int(self.interval * 1000), int(handle.used), handle.token,
            remaining_ms, waited_ms, self.ttl])


class Leaky(Limiter):
    """A leaky bucket: a burst of up to ``size``, then one use per ``drain_period / size``
    (``drain_period`` a unit or seconds). ``OverLimit.next_drip`` says when the next fits."""

    kind = "leaky"
    rule = ("size", "drain_period")

    def __init__(self, name: str, size: int, drain_period: str | float | timedelta, *,
                 wait_timeout: float | timedelta = 5.0, **options: Any) -> None:
        super().__init__(name, wait_timeout=wait_timeout, **options)
        self.size = _whole(size, "size")
        self.drain_period = interval_seconds(drain_period, "drain_period")

    def options(self) -> dict[str, Any]:
        return {**super().options(), "size": self.size, "drain_period": self.drain_period}

    def _check_used(self, used: float) -> float:
        return _fits(used, self.size, "a leaky bucket")

    def _attempt(self, conn: _Caller, handle: Handle, remaining_ms: int,
                 waited_ms: int) -> tuple[int, int]:
        keys = self._config().keys
        return self._script(conn, _LEAKY, [
            keys.limiter_leaky(self.name), keys.limiter_stats(self.name)], [
            self.size, int(self.drain_period * 1000), int(handle.used), remaining_ms,
            waited_ms, self.ttl])


class Points(Limiter):
    """A budget of ``capacity`` points refilled at ``refill_per_second``. A call declares its
    estimated cost (``within_limit(used=estimate)``) and is refused at once when fewer
    points are left; ``handle.points_used(actual)`` corrects the budget afterwards."""

    kind = "points"
    rule = ("capacity", "refill_per_second")

    def __init__(self, name: str, capacity: float, refill_per_second: float, *,
                 policy: Policy = "raise", reschedule: int | None = None,
                 backoff: Backoff | None = None, ttl: float | timedelta = 90 * 86400,
                 config: Config | None = None) -> None:
        super().__init__(name, wait_timeout=0, policy=policy, reschedule=reschedule,
                         backoff=backoff, ttl=ttl, config=config)
        self.capacity = _finite(capacity, "capacity", zero=False)
        self.refill_per_second = _finite(refill_per_second, "refill_per_second", zero=False)

    def options(self) -> dict[str, Any]:
        return {"policy": self.policy, "capacity": self.capacity,
                "refill_per_second": self.refill_per_second}

    def _check_used(self, used: float) -> float:
        estimate = _finite(used, "used (the estimated points)", zero=False)
        if estimate > self.capacity:
            raise ValueError(f"an estimate of {used} points can never fit a capacity of "
                             f"{self.capacity:g}")
        return estimate

    def _call(self, conn: _Caller, amount: float, mode: str) -> tuple[int, int]:
        keys = self._config().keys
        return self._script(conn, _POINTS, [
            keys.limiter_points(self.name), keys.limiter_stats(self.name)], [
            repr(self.capacity), repr(self.refill_per_second / 1000), repr(float(amount)),
            mode, self.ttl])

    def _attempt(self, conn: _Caller, handle: Handle, remaining_ms: int,
                 waited_ms: int) -> tuple[int, int]:
        status, wait_ms = self._call(conn, handle.used, "spend")
        return status if status == 1 else -1, wait_ms

    def _correct(self, handle: Handle, actual: float) -> None:
        cost = _finite(actual, "points_used", zero=True)
        already = handle._reported if handle._reported is not None else handle.used
        handle._reported = cost
        if cost != already:
            with self._connection() as conn:
                self._call(conn, already - cost, "adjust")


class Unlimited(Limiter):
    """Never limits, talks to no Redis, and takes any arguments a limiter takes (a stand-in
    in tests, or where a limit applies only sometimes)."""

    kind = "unlimited"
    blocking = False

    def __init__(self, *anything: Any, **options: Any) -> None:
        super().__init__("unlimited")
        if anything and isinstance(anything[0], str):
            self.name = anything[0]  # shown as given; never used as a key

    def within_limit(self, *anything: Any, **options: Any) -> Block:
        return Block(self, 1)

    def _acquire(self, used: float) -> Handle:
        return Handle(self, used, "", 0.0)

    def _finish(self, handle: Handle) -> None:
        return None

    def stats(self) -> dict[str, int | Invalid]:
        return {}
