"""The scheduler: moves due jobs from ``retry`` and ``schedule`` to their queues.

1. ``enqueue_due`` makes one pass over ``retry`` then ``schedule``. By default
   (``scheduler="atomic"``) a Lua script moves up to ``ATOMIC_BATCH`` due jobs per call
   straight into their queue lists, so a job is never in neither place, and client middleware
   does not run again; ``scheduler="client"`` is Sidekiq OSS's way: every due job is pushed
   through the client one at a time, so client middleware runs again. Payloads whose queue
   the script cannot read take the one-at-a-time path too.
2. The one-at-a-time path is lossless: a script moves the due member into the set's claims
   (``scripts/scheduled_claim.lua``), the client pushes it, and only then is the claim
   released; a push that fails puts the member back. A process that dies in between leaves
   its claim, and any scheduler hands the member out again once the claim is older than
   ``CLAIM_LEASE``: the job may be pushed twice, never lost.
3. A payload that cannot be pushed at all goes to the dead set (not JSON: stored as the raw
   bytes; invalid: with the error recorded); it never blocks the set. A push that fails
   (a client middleware that raises, a queue key of another type) puts its member back and
   the pass goes on past it, through the rest of that set and the other set; the pass then
   raises the first such error. Only Redis being unavailable ends a pass at once.
4. ``Scheduler.start`` runs the passes on a ``TimerLoop`` (in a worker, on its poller
   thread, ``wurk.runtime.timer.Timers``) with Sidekiq's timing: an initial wait, one process
   prune, then a randomised wait per cycle scaled by the number of live processes, so the
   cluster as a whole polls about once per ``average_scheduled_poll_interval``.
5. A failing cycle is reported once per outage, the loop goes on with a capped backoff
   (``wurk.runtime.outage``), and the outage's length is logged when a cycle works again.

Scripts are registered with redis-py (``EVALSHA``, reloaded on ``NOSCRIPT``).
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Any

import redis

from . import payload as P
from . import scripts, stored
from .client.core import Client
from .client.locks import coming_back
from .config import Config, via
from .connections.pool import RedisPool
from .errors import (
    ConfigError,
    InvalidArguments,
    InvalidPayload,
    RedisUnavailable,
    UnparseablePayload,
)
from .morgue import Morgue
from .options import SHARD
from .reporting import report_error
from .retry import JobRetry
from .runtime.clock import SYSTEM, Clock
from .runtime.duty import Duty
from .runtime.pruning import prune_processes
from .runtime.timer import Timers

__all__ = ["ATOMIC_BATCH", "CLAIM_LEASE", "INITIAL_JITTER", "LARGE_CLUSTER", "Scheduler"]

log = logging.getLogger("wurk")

# Members one script call moves at most (Sidekiq Pro's number): bounds how long one call
# holds Redis, while a backlog still drains at a hundred jobs per round trip.
ATOMIC_BATCH = 100
# A claim older than this was abandoned by a scheduler that died before it pushed the job:
# far longer than a push takes (one round trip under ``socket_timeout``, plus middleware).
CLAIM_LEASE = 60.0
# Random extra on top of the initial wait, so processes started together (a deploy) do not
# poll in step. Sidekiq adds up to 5 s. When the initial wait is 0 (tests, or a fixed
# ``poll_interval_average``) the extra is capped at one average poll interval instead: it
# still spreads the first polls over one period, and a fast test setup stays fast.
INITIAL_JITTER = 5.0
# From this many processes on, each waits uniformly in [0, 2·avg] rather than
# [avg/2, 3·avg/2]: the cluster-wide rate stays the same with a wider spread (Sidekiq 8.0.10).
LARGE_CLUSTER = 10
SCHEDULER_THREAD = "wurk-scheduler"
# Errors that say Redis itself is out of reach: the rest of a pass would fail alike.
_UNREACHABLE = (RedisUnavailable, redis.ConnectionError, redis.TimeoutError)


@dataclass
class _Pass:
    """One pass over one set. ``skip``: members whose push failed in this pass and were put
    back; with their due times unchanged they are the set's lowest due members, so the rest
    of the pass reads past them (a member added meanwhile below one of them is only passed
    over until the next pass). ``error``: the first failure, raised when the pass ends."""

    skip: int = 0
    error: Exception | None = None


class Scheduler:
    """Owns the scheduler thread and the two scripts."""

    def __init__(self, config: Config, *, pool: RedisPool | None = None,
                 client: Client | None = None, claim_lease: float = CLAIM_LEASE,
                 timers: Timers | None = None, clock: Clock = SYSTEM) -> None:
        self.config = config
        self.claim_lease = claim_lease
        self.pool = pool if pool is not None else config.pool("internal")
        self.client = client if client is not None else Client(config, pool=self.pool)
        self._move = self.pool.client.register_script(scripts.source("scheduled_move.lua"))
        self._claim = self.pool.client.register_script(scripts.source("scheduled_claim.lua"))
        self._morgue = Morgue(config, self.pool)
        self._retry = JobRetry(config, self._morgue, self.pool)
        # A failed pass waits its turn: never sooner than the poll interval.
        self._duty = Duty(config, SCHEDULER_THREAD, self._cycle, self.poll_interval,
                          component="scheduler", first_wait=self.initial_wait,
                          retry_early=False, host=timers, clock=clock)
        self._pruned = False

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self._duty.start()

    def stop(self, timeout: float) -> None:
        """Stop polling; a pass in progress ends after its current batch."""
        self._duty.stop(timeout)

    def is_alive(self) -> bool:
        return self._duty.is_alive()

    # -- one pass ---------------------------------------------------------------------------
    def enqueue_due(self) -> int:
        """Move every due job of ``retry`` then ``schedule``; returns how many were pushed.

        A set whose pass fails holds up neither set: both are gone through, then the first
        failure is raised (the duty reports it). Redis out of reach ends the pass at once."""
        keys = self.config.keys
        total, failure = 0, None
        for key in (keys.retry, keys.schedule):
            try:
                total += self._drain(key)
            except _UNREACHABLE:
                raise
            except Exception as exc:
                if failure is None:
                    failure = exc
        if failure is not None:
            raise failure
        return total

    def _drain(self, key: str) -> int:
        atomic = self.config.scheduler == "atomic"
        step = self._atomic_step if atomic else self._client_step
        this_pass = _Pass()
        # The atomic path claims nothing unless a member is skipped: look for abandoned
        # claims first (in client mode every claim looks for them).
        total = self._take_over_abandoned(key, this_pass) if atomic else 0
        while not self._duty.stopping:
            moved, more = step(key, this_pass)
            total += moved
            if not more:
                break
        if this_pass.error is not None:
            raise this_pass.error
        return total

    def _atomic_step(self, key: str, this_pass: _Pass) -> tuple[int, bool]:
        """(jobs moved, whether to call again)."""
        # Due is judged on Redis's clock, in the script; enqueued_at is this process's
        # time, as a push writes it.
        stamp = P.dumps(P.write_time(self.config.timestamp_format, time.time()))
        keys = [key, self.config.keys.queues]
        args: list[str | int] = [stamp, ATOMIC_BATCH, self.config.keys.queue_prefix,
                                 this_pass.skip]
        moved, skipped = self.pool.run(lambda redis: self._move(keys, args, client=redis))
        if skipped:
            pushed = self._claim_and_push(key, this_pass)
            return int(moved) + (pushed or 0), True
        return int(moved), int(moved) >= ATOMIC_BATCH

    def _client_step(self, key: str, this_pass: _Pass) -> tuple[int, bool]:
        pushed = self._claim_and_push(key, this_pass)
        return pushed or 0, pushed is not None

    # -- the one-at-a-time path -------------------------------------------------------------
    def _take_over_abandoned(self, key: str, this_pass: _Pass) -> int:
        total = 0
        while not self._duty.stopping:
            pushed = self._claim_and_push(key, this_pass, abandoned_only=True)
            if pushed is None:
                break
            total += pushed
        return total

    def _claim_and_push(self, key: str, this_pass: _Pass, *,
                        abandoned_only: bool = False) -> int | None:
        """Claim the lowest due member the pass has not put back (or one whose claim was
        abandoned) and push it: 1 pushed, 0 dead, stopped by middleware or put back after a
        failed push (``this_pass`` keeps the error), None when nothing was due."""
        claims = self.config.keys.claims_of(key)
        args: list[str | float] = [self.claim_lease, 1 if abandoned_only else 0,
                                   this_pass.skip]
        found = self.pool.run(lambda redis: self._claim([key, claims], args, client=redis))
        if not found:
            return None
        raw, score, abandoned = found[0], float(found[1]), int(found[2])
        if abandoned:
            log.warning("scheduler: a due job claimed over %.0f s ago by a scheduler that "
                        "stopped before pushing it is pushed now (it may have been pushed "
                        "once already)", self.claim_lease)
        try:
            pushed = self._dispatch(raw)
        except Exception as exc:
            self._put_back(key, claims, raw, score)
            if isinstance(exc, _UNREACHABLE):
                raise
            if not abandoned:  # back at its due time: among the lowest, read past from now
                this_pass.skip += 1
            if this_pass.error is None:
                this_pass.error = self._named(exc, key, raw)
            return 0
        # Pushed (or buried): the claim goes. Should this fail, the job is pushed again once
        # the lease ends: a duplicate, never a loss.
        self.pool.run(lambda redis: redis.zrem(claims, raw), idempotent=True)
        return pushed

    def _named(self, exc: Exception, key: str, raw: bytes | str) -> Exception:
        """The error a failed push is reported with: a WRONGTYPE names the key and the set."""
        if not (isinstance(exc, redis.ResponseError) and str(exc).startswith("WRONGTYPE")):
            return exc
        named = redis.ResponseError(
            f"WRONGTYPE: a due job of {key} cannot be pushed: its queue's key "
            f"({self._queue_key_of(raw)}) or {self.config.keys.queues} holds another "
            f"Redis type (written by hand?); the job stays in {key} until the key is "
            "deleted or mended")
        named.__cause__ = exc
        return named

    def _queue_key_of(self, raw: bytes | str) -> str:
        try:
            queue = P.loads(raw).get(P.QUEUE)
        except UnparseablePayload:
            queue = None
        return self.config.keys.queue(stored.shown(queue, 100)) if isinstance(queue, str) \
            else "its queue"

    def _dispatch(self, raw: bytes | str) -> int:
        """Push a popped member, or bury it when it cannot be pushed at all."""
        try:
            job = P.loads(raw)
        except UnparseablePayload as exc:
            self._bury_unparseable(raw, exc)
            return 0
        job.pop(P.AT, None)  # an old ActiveJob leftover would schedule it again
        # Never written by wurk (a push reads and drops it): a foreign one would send the job
        # to another shard, or none; it is in this shard's set, and the atomic mode moves it
        # to this shard's queue too.
        job.pop(SHARD, None)
        try:
            # The job itself coming due: no unique lock refuses it, as none stops the script
            # of the atomic mode (a later push's lock would have dropped a due retry).
            # Pushed to this shard whatever the router says of it now: ``via`` beat it when
            # the job was pushed (or its class's own shard option did), and its retries are
            # booked here (docs/scaling.md).
            with coming_back(str(job.get(P.JID))), via(self.client.config):
                return 0 if self.client.push(job) is None else 1
        except InvalidPayload as exc:
            self._retry.kill_invalid(job, exc)
            return 0
        except InvalidArguments as exc:  # a client middleware made them so
            self._retry.kill_invalid(job, InvalidPayload(str(exc), field=P.ARGS))
            return 0
        except ConfigError as exc:  # a field this configuration cannot honour (encrypt
            # with no encryption set up): every pass would fail alike, put back as the
            # lowest due member, and no later due job would move
            self._retry.kill_invalid(job, InvalidPayload(str(exc)))
            return 0

    def _put_back(self, key: str, claims: str, raw: bytes | str, score: float) -> None:
        """The push failed after the claim: the exact member goes back to its set in one
        step. Should that fail too, the claim stays and the job is pushed after the lease."""
        member: dict[Any, float] = {raw: score}

        def put_back(redis: Any) -> None:
            pipe = redis.pipeline(transaction=True)
            pipe.zadd(key, member)
            pipe.zrem(claims, raw)
            pipe.execute()

        try:
            self.pool.run(put_back)
        except Exception as exc:
            log.warning("scheduler: a due job could not be pushed nor put back in %s (%s); "
                        "it stays claimed and is pushed again within %.0f s", key, exc,
                        self.claim_lease)

    def _bury_unparseable(self, raw: bytes | str, exc: UnparseablePayload) -> None:
        self._morgue.bury(raw)
        report_error(self.config, exc, {"context": "scheduler: unparseable payload moved to "
                                        "the dead set"})

    # -- timing ----------------------------------------------------------------------
    def initial_wait(self) -> float:
        """The wait before the first cycle: ``scheduler_initial_wait`` (skipped when
        ``poll_interval_average`` is set) plus a random spread."""
        config = self.config
        fixed = config.poll_interval_average is not None
        base = 0.0 if fixed else config.scheduler_initial_wait
        jitter = INITIAL_JITTER
        if base == 0:
            average = config.poll_interval_average if fixed else None
            jitter = min(jitter, average if average is not None
                         else config.average_scheduled_poll_interval)
        return base + random.uniform(0, jitter)

    def poll_interval(self) -> float:
        """This cycle's wait: about ``processes × average`` so the cluster polls about once
        per average, randomised so processes do not poll in step; longer while Redis fails."""
        count = self._process_count()
        average = self.config.poll_interval_average
        if average is None:
            average = count * self.config.average_scheduled_poll_interval
        if count < LARGE_CLUSTER:
            interval = random.uniform(average / 2, average * 3 / 2)
        else:
            interval = random.uniform(0, average * 2)
        return interval  # while Redis fails, the duty waits longer (its backoff)

    def _process_count(self) -> int:
        key = self.config.keys.processes
        try:
            count = int(self.pool.run(lambda redis: redis.scard(key), idempotent=True))
        except Exception as exc:  # the cycle reports the outage; here, assume one process
            log.debug("scheduler: cannot count processes (%s); assuming 1", exc)
            return 1
        return max(count, 1)

    # -- the loop ---------------------------------------------------------------------------
    def _cycle(self) -> None:
        if not self._pruned:
            self._pruned = True  # Sidekiq tries once per process start
            prune_processes(self.config, self.pool)
        self.enqueue_due()
