"""The worker side of the limits — rate limiters, unique jobs, expiring jobs — in one link.

1. ``LimitsMiddleware``: a server middleware of every worker, ahead of the application's
   (its place among the built-in links: ``wurk.launcher.BUILT_IN``).
   For each job, in this order:

   - over a rate limit (``OverLimit`` or a class in ``config.limiter_errors``, raised by the
     job or any inner link): rescheduled with a backoff, counted in ``overrated``, and the
     execution is done, not failed; with ``policy="skip"`` the job is simply done. Past
     ``reschedule`` reschedules the error is an ordinary failure (``wurk.limiter``);
   - expired (``expires_at`` passed): acknowledged unrun, counted, ``on_expired`` told, its
     unique lock released (``wurk.expiry``); a workflow step is dead in its workflow, and
     its batch counts it dead (``wurk.workflow.middleware.expired_step``);
   - unique: the lock released before the job runs (``unique_until="start"``: once its own
     ``rate_limit`` let it in, so a run rescheduled over it keeps the lock) or after it
     succeeded (``"success"``) or was skipped by a limiter (``policy="skip"``: done); a
     failure, or a reschedule by a limiter, keeps it for the next run (``wurk.unique``).

   - a job with a ``rate_limit`` (a limiter given to its definition): every run inside
     ``limiter.within_limit()``, so over the limit it is rescheduled as above.

   A job that is none of these pays one call and three dict lookups.
2. Every worker puts it in place when it is built (``wurk.launcher.install_built_ins``,
   with the unique death handler), so ``wurk worker``, a swarm's children and the in-process
   worker need nothing switched on; code that runs jobs by other means (a test harness)
   calls that function itself.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import expiry, unique
from .. import payload as P
from ..asyncjobs import bookkeeping
from ..errors import OverLimit
from ..job import registry
from ..middleware import AWAIT, Later, Leave
from ..payload import EXPIRES_AT, EXPIRES_IN, UNIQUE_DIGEST
from ..workflow.middleware import expired_step
from .reschedule import over_limit_classes, reschedule

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["LimitsMiddleware"]

log = logging.getLogger("wurk")


class LimitsMiddleware:
    """Server middleware: the limits of one configuration."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def __call__(self, job: Any, payload: P.Payload, queue: str,
                 call_next: Callable[[], Any]) -> Any:
        try:
            limiter = _rate_limit(payload)
            # Names bound at import: this runs for every job, most of which need none of it.
            if UNIQUE_DIGEST in payload or EXPIRES_AT in payload or EXPIRES_IN in payload:
                return self._guarded(payload, call_next, limiter)
            if limiter is not None:  # the job's own limiter holds every run of it
                return _within(limiter, call_next)
            return call_next()
        except over_limit_classes(self.config) as exc:
            if isinstance(exc, OverLimit) and getattr(exc.limiter, "policy", None) == "skip":
                if UNIQUE_DIGEST in payload:  # done, never to run: nothing pending holds it
                    unique.release(self.config, payload)
                return None
            if not reschedule(self.config, payload, exc):
                raise
            return None

    def _guarded(self, payload: P.Payload, call_next: Callable[[], Any], limiter: Any) -> Any:
        if expiry.expired(payload):
            self._drop(payload)
            return None
        if P.UNIQUE_DIGEST not in payload:
            return call_next() if limiter is None else _within(limiter, call_next)
        if payload.get(P.UNIQUE_UNTIL) == "start":
            # Its start is once its own limiter let it in: a run over the limit is
            # rescheduled, still pending, and keeps its lock.
            started = functools.partial(self._started, payload, call_next)
            return started() if limiter is None else _within(limiter, started)
        result = call_next() if limiter is None else _within(limiter, call_next)
        unique.release(self.config, payload)
        return result

    def _started(self, payload: P.Payload, call_next: Callable[[], Any]) -> Any:
        unique.release(self.config, payload)
        return call_next()

    async def acall(self, job: Any, payload: P.Payload, queue: str,
                    call_next: Callable[[], Any]) -> Any:
        """The same around an async job, on its loop; the Redis steps on a bookkeeping thread.
        (A sync link there would hold a helper thread for the job's whole run.)"""
        try:
            limiter = _rate_limit(payload)
            if UNIQUE_DIGEST in payload or EXPIRES_AT in payload or EXPIRES_IN in payload:
                return await self._aguarded(payload, call_next, limiter)
            if limiter is not None:
                return await _awithin(limiter, call_next)
            return await call_next()
        except over_limit_classes(self.config) as exc:
            if isinstance(exc, OverLimit) and getattr(exc.limiter, "policy", None) == "skip":
                if UNIQUE_DIGEST in payload:  # as in ``__call__``
                    await bookkeeping(unique.release, self.config, payload)
                return None
            if not await bookkeeping(reschedule, self.config, payload, exc):
                raise
            return None

    async def _aguarded(self, payload: P.Payload, call_next: Callable[[], Any],
                        limiter: Any) -> Any:
        if expiry.expired(payload):
            await bookkeeping(self._drop, payload)
            return None
        if P.UNIQUE_DIGEST not in payload:
            return await (call_next() if limiter is None else _awithin(limiter, call_next))
        if payload.get(P.UNIQUE_UNTIL) == "start":  # as in ``_guarded``: once let in
            started = functools.partial(self._astarted, payload, call_next)
            return await (started() if limiter is None else _awithin(limiter, started))
        result = await (call_next() if limiter is None else _awithin(limiter, call_next))
        await bookkeeping(unique.release, self.config, payload)
        return result

    async def _astarted(self, payload: P.Payload, call_next: Callable[[], Any]) -> Any:
        await bookkeeping(unique.release, self.config, payload)
        return await call_next()

    def wurk_plan(self, job: Any, payload: P.Payload, queue: str) -> Leave | object:
        """A job with a limiter of its own, a unique lock or an expiry: ``acall``. Any other
        only needs the leave: an ``OverLimit`` of a limiter used inside its body."""
        if _rate_limit(payload) is not None or UNIQUE_DIGEST in payload \
                or EXPIRES_AT in payload or EXPIRES_IN in payload:
            return AWAIT
        return functools.partial(self._after, payload)

    def _after(self, payload: P.Payload, result: Any, error: BaseException | None) -> Any:
        if error is None:
            return result
        if isinstance(error, over_limit_classes(self.config)):
            if isinstance(error, OverLimit) and getattr(error.limiter, "policy", None) == "skip":
                return None
            return Later(self._rescheduled(payload, error))
        raise error

    async def _rescheduled(self, payload: P.Payload, error: BaseException) -> None:
        if not await bookkeeping(reschedule, self.config, payload, error):
            raise error

    def _drop(self, payload: P.Payload) -> None:
        expiry.drop(self.config, payload)
        unique.release(self.config, payload)
        expired_step(self.config, payload)  # a workflow step: dead, its policy applies


def _rate_limit(payload: P.Payload) -> Any:
    """The limiter of the job's definition (``rate_limit``), if this process registered it."""
    definition = registry.get(payload.get(P.CLASS))
    return definition.rate_limit if definition is not None else None


def _within(limiter: Any, call_next: Callable[[], Any]) -> Any:
    with limiter.within_limit():
        return call_next()


async def _awithin(limiter: Any, call_next: Callable[[], Any]) -> Any:
    async with limiter.within_limit():
        return await call_next()
