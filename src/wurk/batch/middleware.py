"""Where batches attach to the push and to the worker (installed on every ``Config``).

1. ``BatchClientMiddleware``: a push made inside a jobs block gets the block's ``bid``; the
   client's last step then writes it with the script that registers it
   (``accounting.write``).
2. ``BatchServerMiddleware``: the outermost link, so it sees what every inner link decided.
   A batch job that returned counts as a success — so does one the limits link dropped as
   expired (a workflow step it dropped counts as dead: ``payload.DEAD_UNRUN``), or skipped; one a
   rate limiter rescheduled counts as nothing (it has not run); one that raised counts as a
   failure once its retry is booked (a shutdown interrupting it counts as nothing: it runs
   again; nor does an iterable job's ``Interrupted``: it is pushed again and goes on from
   its cursor). One ``wurk.cancel`` stopped counts as dead: it will not run again, and the
   batch still completes.
3. ``BatchDeathHandler``: a batch job that died — retries exhausted, ``retry: false``,
   killed from the dashboard, a poison pill, a payload no retry can fix — counts as dead.
4. Counting survives a Redis restart or failover: a count is idempotent per jid, so it is
   sent again for a few seconds; a success that still cannot be counted fails the
   execution, which then runs again rather than being lost to its batch.
5. With ``statsd`` set, the batch events this process makes (``accounting.on_transition``)
   go to StatsD: ``batch.created`` where a batch is created, ``batch.complete``,
   ``batch.success`` and ``batch.duration`` where the count that completes it is made.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import payload as P
from ..asyncjobs import bookkeeping
from ..connections.lending import redis as lent_redis
from ..errors import Interrupted, JobCancelled, RedisUnavailable, is_shutdown
from ..limiter.reschedule import over_limit_classes
from ..metrics.statsd import sink_for
from ..middleware import AWAIT, Leave
from ..reporting import report_error
from . import accounting
from . import block as blocks

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["BatchClientMiddleware", "BatchDeathHandler", "BatchServerMiddleware", "install",
           "install_client", "to_statsd"]

log = logging.getLogger("wurk")

# Waits between the attempts to count while Redis cannot be reached: about 3.5 s in all,
# enough for a restart or a failover, not enough to hold a processor for long.
COUNT_RETRIES = (0.1, 0.25, 0.5, 1.0, 1.5)


class BatchClientMiddleware:
    """Client middleware: pushes inside a jobs block join its batch."""

    def __call__(self, job: Any, payload: P.Payload, queue: str,
                 call_next: Callable[[], Any]) -> Any:
        block = blocks.current()
        if block is not None:
            payload[P.BID] = block.bid
        return call_next()


def count(config: Config, bid: str, jid: str, outcome: accounting.Outcome) -> bool:
    """Count one attempt's end, sent again while Redis is unreachable; raises the last
    ``RedisUnavailable`` when it never got through."""
    for wait in COUNT_RETRIES:
        try:
            with lent_redis(config) as conn:
                return accounting.record(conn, config, bid, jid, outcome)
        except RedisUnavailable:
            time.sleep(wait)  # a restart or a failover: the count is safe to send again
    with lent_redis(config) as conn:
        return accounting.record(conn, config, bid, jid, outcome)


def _uncounted(config: Config, exc: BaseException) -> bool:
    """An end that is no outcome: the shutdown (the job runs again), a rate limiter's
    refusal (rescheduled, it has not run) or an interruption (pushed again, it goes on from
    its cursor): none of them may complete the batch."""
    return is_shutdown(exc) or isinstance(exc, (Interrupted, *over_limit_classes(config)))


class BatchServerMiddleware:
    """Server middleware: counts each attempt of a batch job."""

    # A batch's job, or a batch callback (which reads the worker's configuration,
    # ``worker_config``): any other job's walk leaves the link out (``wurk.middleware``).
    wurk_keys = frozenset({P.BID})
    wurk_job_types: tuple[type, ...] = (blocks.ReadsWorkerConfig,)

    def __init__(self, config: Config) -> None:
        self.config = config

    def __call__(self, job: Any, payload: P.Payload, queue: str,
                 call_next: Callable[[], Any]) -> Any:
        bid, jid = payload.get(P.BID), payload.get(P.JID)
        token = blocks.WORKER_CONFIG.set(self.config)
        try:
            if not isinstance(bid, str) or not bid or not isinstance(jid, str) or not jid:
                return call_next()
            return self._counted(bid, jid, payload, call_next)
        finally:
            blocks.WORKER_CONFIG.reset(token)

    def _counted(self, bid: str, jid: str, payload: P.Payload,
                 call_next: Callable[[], Any]) -> Any:
        overrated = payload.get(P.OVERRATED)
        try:
            result = call_next()
        except Exception as exc:
            if isinstance(exc, JobCancelled):
                count(self.config, bid, jid, "death")  # it will not run again
            elif not _uncounted(self.config, exc):
                self._count_failure(bid, jid, payload)
            raise
        if payload.get(P.OVERRATED) != overrated:
            return result  # rescheduled by a rate limiter: it has not run yet
        count(self.config, bid, jid, "death" if payload.pop(P.DEAD_UNRUN, False) else "success")
        return result

    async def acall(self, job: Any, payload: P.Payload, queue: str,
                    call_next: Callable[[], Any]) -> Any:
        """The same around an async job, on its loop; the counts on a bookkeeping thread (a sync
        link there would hold a helper thread for the job's whole run)."""
        bid, jid = payload.get(P.BID), payload.get(P.JID)
        token = blocks.WORKER_CONFIG.set(self.config)
        try:
            if not isinstance(bid, str) or not bid or not isinstance(jid, str) or not jid:
                return await call_next()
            return await self._acounted(bid, jid, payload, call_next)
        finally:
            blocks.WORKER_CONFIG.reset(token)

    def wurk_plan(self, job: Any, payload: P.Payload, queue: str) -> Leave | object:
        """A batch job: ``acall``. Any other: the worker's configuration set for the job's
        run (what a batch opened inside it is made with), without a frame of its own."""
        bid, jid = payload.get(P.BID), payload.get(P.JID)
        if isinstance(bid, str) and bid and isinstance(jid, str) and jid:
            return AWAIT
        return functools.partial(_reset, blocks.WORKER_CONFIG.set(self.config))

    async def _acounted(self, bid: str, jid: str, payload: P.Payload,
                        call_next: Callable[[], Any]) -> Any:
        overrated = payload.get(P.OVERRATED)
        try:
            result = await call_next()
        except Exception as exc:
            if isinstance(exc, JobCancelled):
                await bookkeeping(count, self.config, bid, jid, "death")
            elif not _uncounted(self.config, exc):
                await bookkeeping(self._count_failure, bid, jid, payload)
            raise
        if payload.get(P.OVERRATED) == overrated:
            outcome = "death" if payload.pop(P.DEAD_UNRUN, False) else "success"
            await bookkeeping(count, self.config, bid, jid, outcome)
        return result

    def _count_failure(self, bid: str, jid: str, payload: P.Payload) -> None:
        try:
            count(self.config, bid, jid, "failure")
        except Exception as exc:  # the retry is booked anyway; complete waits for it
            report_error(self.config, exc, {"context": "counting a batch job's failure",
                                            "job": payload})


def _reset(token: contextvars.Token[Any], result: Any, error: BaseException | None) -> Any:
    blocks.WORKER_CONFIG.reset(token)
    if error is not None:
        raise error
    return result


class BatchDeathHandler:
    """Death handler: a batch job that died counts as dead (``death`` fires once)."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def __call__(self, job: dict[str, Any], exc: BaseException) -> None:
        if not isinstance(job, dict):
            return
        bid, jid = job.get(P.BID), job.get(P.JID)
        if isinstance(bid, str) and bid and isinstance(jid, str) and jid:
            count(self.config, bid, jid, "death")


def to_statsd(transition: accounting.Transition) -> None:
    """A batch event to StatsD, when its configuration sends there (UDP: a StatsD that is
    down loses the metric, never the job). A success's duration is tagged with the ``tags``
    of its success callbacks' options (Sidekiq Pro 8.0.2)."""
    config = transition.config
    if config.statsd is None:
        return
    tags: list[str] = []
    if transition.event == "success" and transition.duration_ms is not None:
        tags = success_tags(config, transition.bid)
    sink_for(config).batch(transition.event, transition.duration_ms, tags)


def success_tags(config: Config, bid: str) -> list[str]:
    """The ``tags`` (a list of strings) of the batch's success callbacks' options, in
    order, each once; a ``tags`` that is no list of strings is left out, as is what Redis
    cannot be asked for now (the metric goes untagged rather than not at all)."""
    key = config.keys.batch(bid)
    try:
        raw = config.pool("internal").run(lambda r: r.hget(key, "callbacks"), idempotent=True)
    except Exception as exc:
        log.debug("batch %s: success callback tags not read: %s", bid, exc)
        return []
    tags: list[str] = []
    for event, _, options in accounting.decode_callbacks(raw):
        found = options.get("tags") if event == "success" else None
        if isinstance(found, list):
            tags += [tag for tag in found if isinstance(tag, str) and tag not in tags]
    return tags


def install_client(config: Config) -> None:
    """Make pushes inside a jobs block join its batch (once per configuration; a worker's
    frozen configuration got it when the worker started), and its batch events reach
    StatsD when it is set."""
    if config.statsd is not None:
        accounting.on_transition(to_statsd)
    client = config.client_middleware
    if not any(isinstance(link, BatchClientMiddleware) for link in client) and \
            not config.frozen:
        client.add(BatchClientMiddleware())


def install(config: Config) -> None:
    """Make ``config``'s worker (and pushes) keep batch accounting, once: the launcher calls
    it before the worker starts, the testing modes before a job runs. The callback and
    empty-batch jobs are registered by importing this package."""
    install_client(config)
    if config.frozen:
        return
    server = config.server_middleware
    if not any(isinstance(link, BatchServerMiddleware) for link in server):
        server.prepend(BatchServerMiddleware(config))
    if not any(isinstance(h, BatchDeathHandler) for h in config.death_handlers):
        config.death_handlers.append(BatchDeathHandler(config))
