"""The worker's interrupt link: a job that raised ``wurk.Interrupted`` is pushed again.

A built-in server middleware (``wurk.launcher.BUILT_IN``), just inside the execution metrics
and outside the batch link. When the job raises ``Interrupted`` (an iterable job stopping
between items for the worker's stop or its ``max_iteration_runtime``), the payload goes back
to the end of its queue through the client — same jid, client middleware applied, the
encrypted argument still sealed (the opener restores the envelope on its way out, and the
client never seals an envelope twice) — and the execution ends as handled: the metrics count
it as processed, the batch link counts nothing, no retry is booked.

If the push fails (Redis gone at that instant), the error goes on as the job's failure: its
retry is booked (the cursor was flushed before the raise, so the retry goes on from it), or,
when Redis refuses that too, the job is not acknowledged and comes back from its queue.

The link also hands the worker's configuration to an iterable job (``IterableJob.config``),
so its state is read and written on the worker's Redis.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from .. import payload as P
from ..asyncjobs import bookkeeping
from ..client.default import default_client
from ..client.locks import coming_back
from ..config import Config, via
from ..errors import Interrupted
from ..middleware import Later, Leave
from .job import IterableJob

__all__ = ["InterruptHandler"]

log = logging.getLogger("wurk")


class InterruptHandler:
    """Server middleware: ``Interrupted`` → the same job pushed again, this run handled."""

    # Only an iterable job is ever interrupted so (``wurk.middleware``).
    wurk_job_types: tuple[type, ...] = (IterableJob,)

    def __init__(self, config: Config) -> None:
        self.config = config

    def __call__(self, job: Any, payload: P.Payload, queue: str,
                 call_next: Callable[[], Any]) -> Any:
        if isinstance(job, IterableJob):
            job.config = self.config
        try:
            return call_next()
        except Interrupted:
            self.push_again(payload, queue)
            return None

    async def acall(self, job: Any, payload: P.Payload, queue: str,
                    call_next: Callable[[], Any]) -> Any:
        if isinstance(job, IterableJob):
            job.config = self.config
        try:
            return await call_next()
        except Interrupted:
            await bookkeeping(self.push_again, payload, queue)
            return None

    def wurk_plan(self, job: Any, payload: P.Payload, queue: str) -> Leave:
        """``acall`` without its frame on the job's await chain (``wurk.middleware``)."""
        if isinstance(job, IterableJob):
            job.config = self.config
        return functools.partial(self._after, payload, queue)

    def _after(self, payload: P.Payload, queue: str, result: Any,
               error: BaseException | None) -> Any:
        if error is None:
            return result
        if isinstance(error, Interrupted):
            return Later(self._pushed_again(payload, queue))
        raise error

    async def _pushed_again(self, payload: P.Payload, queue: str) -> None:
        await bookkeeping(self.push_again, payload, queue)

    def push_again(self, payload: P.Payload, queue: str) -> None:
        # The same job going on: no unique lock refuses it, not even a later push's (its
        # own released at its start, or expired), which would end it half done.
        # To the shard it ran from, where its state is, whatever the router says of it now.
        with coming_back(str(payload.get(P.JID))), via(self.config):
            jid = default_client(self.config).push(dict(payload))
        if jid is None:
            log.warning("interrupted, and a client middleware stopped its push again: the job "
                        "ends here (its state stays in %s)",
                        self.config.keys.iteration(str(payload.get(P.JID))))
            return
        log.info("interrupted: pushed again to queue %s", payload.get(P.QUEUE, queue))
