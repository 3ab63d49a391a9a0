"""A capsule's processors on Redis Cluster: each fetch picks a queue, then takes from that
queue's keyspace (``docs/scaling.md``).

1. On a cluster every queue is a keyspace of its own, on the primary serving its slot, and
   served by a launcher of its own (``wurk.sharding``): heartbeat, reaper, scheduler,
   retries and dead set, in-flight lists. A capsule's processors are shared by its queues:
   each holds a ``KeyspaceFetch``, which holds one ``ReliableFetch`` per queue, made by that
   queue's launcher — its pool, its keys, its in-flight list, its claims.
2. ``KeyspaceFetch.fetch`` orders the capsule's queues as one Redis would (``QueueOrder``:
   strict, random or weighted), then asks them in that order, one round trip each
   (``ReliableFetch.poll``), and takes the first job found. Jobs fetched ahead come first,
   as on one Redis, so a processor holds jobs fetched ahead in one keyspace at a time. No
   command can wait on keys of several slots, so when every queue is empty the processor
   blocks (``BLMOVE``, up to ``fetch_timeout``) on one queue, the capsule's processors
   taking turns over the queues — what one Redis does too (``wurk.fetch.reliable`` point
   4). A job pushed to an idle worker is taken at once by the processor blocked on its
   queue; a queue no processor blocks on (fewer processors than queues) is seen at the next
   pass, within ``fetch_timeout``.
3. The unit fetched is the keyspace fetcher's own (``unit.fetcher``; ``unit.queue`` is its
   keyspace): its ACK, requeue, hand-off and let-go go to its keyspace. ``KeyspaceRunner``
   runs it with its keyspace's ``JobRunner`` (retries, dead set, busy map, counters, server
   middleware), its keyspace's async lane, and ``wurk.redis()`` lent from its keyspace's
   pool.
4. A keyspace whose process record is not fresh (``Heartbeat.wait_visible``) is not asked;
   one whose fetch fails is passed over for ``DOWN_WAIT`` seconds while the others go on.
   The error is raised (the processor's outage backoff) only when no keyspace answered.
5. ACKs ride their keyspace's next round trip; a keyspace the pass did not reach (a higher
   queue had a job) has its pending ACKs sent at once, and so has one whose queue is
   paused (``ReliableFetch.poll``), so a finished job never sits in an in-flight list
   waiting for its queue's turn or its unpause.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext, suppress
from dataclasses import dataclass
from typing import Any

import redis

from ..asyncjobs import AsyncLane
from ..config import Capsule
from ..connections.lending import lend_from
from ..connections.pool import RedisPool
from ..control.stops import JobGuard
from ..errors import RedisUnavailable
from ..processor import JobRunner
from .basic import QueueOrder, UnitOfWork
from .reliable import ReliableFetch

__all__ = ["DOWN_WAIT", "Keyspace", "KeyspaceFetch", "KeyspaceRunner"]

# How long a keyspace whose fetch failed is passed over before it is asked again.
DOWN_WAIT = 1.0


def _never() -> bool:
    return False


_NO_GUARD = JobGuard()


@dataclass(frozen=True)
class Keyspace:
    """What a processor needs of one queue's keyspace (point 3)."""

    runner: JobRunner  # the capsule's in that keyspace's launcher: it holds the chain
    lane: AsyncLane | None
    pool: RedisPool | None  # whose connection its jobs' ``wurk.redis()`` borrows
    visible: Callable[[float], bool]


class KeyspaceFetch:
    """One processor's fetcher over a capsule's queues, each in its own keyspace."""

    def __init__(self, capsule: Capsule, fetchers: dict[str, ReliableFetch], *, slot: int,
                 visible: dict[str, Callable[[float], bool]]) -> None:
        self.order = QueueOrder(capsule)
        self.fetchers = fetchers
        self.slot = slot
        self._visible = visible
        self._down: dict[str, float] = {}  # queue -> monotonic time it is asked again
        self._idle = threading.Event()

    def fetch(self, timeout: float) -> UnitOfWork | None:
        order = self.order()
        ahead = [queue for queue in order if self.fetchers[queue].has_ahead]
        if ahead:  # jobs fetched ahead come first, as on one Redis: one keyspace holds any
            order = [*ahead, *(queue for queue in order if queue not in ahead)]
        asked: list[str] = []
        error: Exception | None = None
        now = time.monotonic()
        for index, queue in enumerate(order):
            fetcher = self.fetchers[queue]
            if self._down.get(queue, 0.0) > now or not self._visible[queue](0.0):
                continue
            try:
                unit, was_asked = fetcher.poll()
            except (RedisUnavailable, redis.RedisError) as exc:
                self._down[queue] = now + DOWN_WAIT
                error = error or exc
                continue
            if was_asked:
                asked.append(queue)
            if unit is not None:
                self._send_acks(order[index + 1:])
                return unit
        if not asked:
            if error is not None:
                raise error
            self._idle.wait(timeout)  # every queue paused, unseen or down: do not spin
            return None
        names = [name for name in self.order.names if name in asked]
        queue = names[self.slot % len(names)]
        try:
            return self.fetchers[queue].wait(timeout)
        except (RedisUnavailable, redis.RedisError):
            self._down[queue] = time.monotonic() + DOWN_WAIT
            raise

    def _send_acks(self, queues: Sequence[str]) -> None:
        """Pending ACKs of keyspaces this pass did not reach go now (point 5)."""
        for queue in queues:
            fetcher = self.fetchers[queue]
            if fetcher.acks_pending:
                # Refused: kept pending, sent with that keyspace's next round trip.
                with suppress(RedisUnavailable, redis.RedisError):
                    fetcher.flush_acks()

    # The units are their keyspace fetcher's: a processor never calls these with one of
    # ours, but a Fetcher answers them all.
    def acknowledge(self, unit: UnitOfWork) -> None:
        unit.fetcher.acknowledge(unit)

    def requeue(self, units: Sequence[UnitOfWork]) -> None:
        for unit in units:
            unit.fetcher.requeue([unit])

    def hand_off(self, unit: UnitOfWork) -> None:
        unit.fetcher.hand_off(unit)

    def give_back(self, unit: UnitOfWork) -> None:
        unit.fetcher.give_back(unit)  # its keyspace's fetcher gives it back at ``flush``

    def let_go(self, unit: UnitOfWork) -> None:
        unit.fetcher.let_go(unit)

    def ack_commands(self, units: Sequence[UnitOfWork]) -> list[tuple[Any, ...]]:
        raise TypeError("a cluster unit is acknowledged by its keyspace's fetcher")

    def settle_acks(self, units: Sequence[UnitOfWork], replies: Sequence[Any]
                    ) -> list[UnitOfWork]:
        raise TypeError("a cluster unit is acknowledged by its keyspace's fetcher")

    def flush(self) -> None:
        """The processor stops: every keyspace's fetcher gives back what it fetched ahead,
        sends its ACKs and its connection."""
        self._idle.set()
        errors: list[Exception] = []
        for fetcher in self.fetchers.values():
            try:
                fetcher.flush()
            except Exception as exc:  # the others still flush; the first is reported
                errors.append(exc)
        if errors:
            raise errors[0]


class KeyspaceRunner(JobRunner):
    """Runs each unit with its keyspace's runner, lane and lent connection (point 3)."""

    def __init__(self, home: JobRunner, keyspaces: dict[str, Keyspace]) -> None:
        super().__init__(home.config, counters=home.counters, busy=home.busy,
                         jobs=home.jobs, morgue=home.morgue, retry=home.retry, loop=home.loop)
        self.keyspaces = keyspaces

    def run(self, unit: UnitOfWork, guard: JobGuard = _NO_GUARD, *,
            lane: AsyncLane | None = None, stopping: Callable[[], bool] = _never) -> None:
        keyspace = self.keyspaces[unit.queue]
        lent = lend_from(keyspace.pool) if keyspace.pool is not None else nullcontext()
        with lent:
            keyspace.runner.run(unit, guard, lane=keyspace.lane, stopping=stopping)
