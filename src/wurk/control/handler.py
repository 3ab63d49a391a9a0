"""The worker's side of ``wurk.cancel``: the link that ends a cancelled job as cancelled,
and the poller that brings this process its cancels.

1. ``CancelHandler`` (a built-in link, outside the batch and result links): a job that raised
   ``JobCancelled`` ends as cancelled — counted in ``wurk:stat:cancelled``, its unique lock
   released, acknowledged, never retried.
2. ``CancelPoller`` (a duty on the worker's timer thread): pops ``wurk:cancel:<identity>``
   every ``control_interval`` seconds and tells the jobs it names to stop (``Running``).
   While Redis cannot be reached it rides the outage as every duty does (``Duty``): one
   line when it starts, one when it ends, tries spaced by the backoff.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from .. import payload as P
from .. import scripts, unique
from ..asyncjobs import bookkeeping
from ..config import Config
from ..errors import JobCancelled
from ..iteration.control import JID_LIMIT, check_jid
from ..middleware import Later, Leave
from ..runtime.duty import Duty
from ..runtime.timer import Timers
from ..stored import printable, text
from .deadlines import Deadlines
from .running import Running

__all__ = ["POLL_BATCH", "CancelHandler", "CancelPoller"]

log = logging.getLogger("wurk")

# Cancels one poll takes at most.
POLL_BATCH = 100
_POP = scripts.Script("cancel_pop.lua", prelude=("owned.lua",))


class CancelHandler:
    """Server middleware (built-in, outside the batch and result links): a job that raised
    ``JobCancelled`` ends as cancelled — counted, acknowledged, never retried."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def __call__(self, job: Any, payload: P.Payload, queue: str,
                 call_next: Callable[[], Any]) -> Any:
        try:
            return call_next()
        except JobCancelled as exc:
            self._count(payload, exc)
            return None

    async def acall(self, job: Any, payload: P.Payload, queue: str,
                    call_next: Callable[[], Any]) -> Any:
        try:
            return await call_next()
        except JobCancelled as exc:
            await bookkeeping(self._count, payload, exc)
            return None

    def wurk_plan(self, job: Any, payload: P.Payload, queue: str) -> Leave:
        """``acall`` without its frame on the job's await chain (``wurk.middleware``)."""
        return functools.partial(self._after, payload)

    def _after(self, payload: P.Payload, result: Any, error: BaseException | None) -> Any:
        if error is None:
            return result
        if isinstance(error, JobCancelled):
            return Later(self._acount(payload, error))
        raise error

    async def _acount(self, payload: P.Payload, exc: JobCancelled) -> None:
        await bookkeeping(self._count, payload, exc)

    def _count(self, payload: P.Payload, exc: JobCancelled) -> None:
        log.info("cancelled: %s", exc)
        try:
            self.config.pool("internal").run(
                lambda r: r.incr(self.config.keys.stat_cancelled))
        except Exception as error:  # the count is lost, the job is still cancelled
            log.warning("could not count a cancelled job: %s", error)
        # It never runs again, as a job cancelled in its queue: its unique lock goes too
        # (the limits link inside releases it only on success; no death handler runs for a
        # cancelled job). Only if this jid still holds it; a failure is logged by release.
        if P.UNIQUE_DIGEST in payload:
            unique.release(self.config, payload)


class CancelPoller:
    """Pops this process's cancels every ``control_interval`` seconds and stops the jobs
    they name (a duty on the worker's timer thread)."""

    def __init__(self, config: Config, identity: str, running: Running,
                 deadlines: Deadlines, timers: Timers) -> None:
        self.config = config
        self.key = config.keys.cancels(identity)
        self.running = running
        self.deadlines = deadlines
        self.duty = Duty(config, "wurk-cancels", self.poll, config.control_interval,
                         component="cancel poller", host=timers)

    def start(self) -> None:
        self.duty.start()

    def stop(self, timeout: float) -> None:
        self.duty.stop(timeout)

    def poll(self) -> int:
        """One pop: how many cancels it brought."""
        # At most JID_LIMIT characters of UTF-8 (4 bytes each) plus one byte tell a jid
        # from what is too long to be one; the script sends no more of any entry.
        def pop(r: Any) -> Any:
            reply = _POP.call_many(r, [([self.key], [POLL_BATCH, 4 * JID_LIMIT + 1])])[0]
            if isinstance(reply, Exception):
                raise reply  # inside the pool's run: BUSY, LOADING… are an outage, as elsewhere
            return reply

        reply = self.config.pool("internal").run(pop)
        replaced, entries = reply[0], reply[1:]
        if replaced:
            log.warning("%s held a Redis %s, not the list of cancels wurk.cancel pushes: "
                        "deleted", self.key, text(replaced))
        for raw, length in zip(entries[0::2], entries[1::2], strict=True):
            jid = text(raw)
            try:  # what ``wurk.cancel`` would send: anything else is not kept in memory
                if int(length) > len(raw if isinstance(raw, bytes) else jid.encode()):
                    raise ValueError("cut short by the script: too long for a jid")
                check_jid(jid)
            except ValueError:
                log.warning("dropped a cancel from %s: not a jid (non-empty, at most %d "
                            "characters, no spaces or control characters), %d bytes: "
                            "%s", self.key, JID_LIMIT, int(length), printable(jid[:40]))
                continue
            for target, run in self.running.cancel(jid):
                self.deadlines.told(target, run)
        return len(entries) // 2
