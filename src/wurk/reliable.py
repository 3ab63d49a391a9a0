"""Reliable fetch: a job never leaves Redis until it finished (``wire-format.md`` §10.3).

1. A fetch moves jobs atomically from their queue into a private list of this process
   (``queue:<q>|<host>|<pid>|<nonce>|<capsule>``), so a crash, ``kill -9`` or lost machine
   leaves them in Redis for the reaper.
2. A capsule's processors share a ``Feed``. One idle processor at a time fetches, in one
   round trip, a job for itself and for every processor waiting behind it; the others wait on
   the feed, not on Redis. Under load a round trip feeds several jobs; at rest every processor
   blocks with ``BLMOVE`` on one queue, taking turns over the queues (``decisions.md`` 14), so
   a new job on any queue is picked up within milliseconds.
3. The ACK (``LREM`` by the exact stored bytes, and ``DEL`` of the job's poison counter)
   rides the capsule's next fetch: a finished job costs no round trip of its own. A
   processor that stops fetching flushes the pending ACKs first, and gives back jobs fetched
   ahead for processors that will not run them.
4. Requeue (fetched after quiet, or unfinished at the deadline) is ``RPUSH`` to the queue's
   tail plus ``LREM`` from the private list, in one ``MULTI``.
5. ``private_list_layout="pro"`` writes Sidekiq Pro's ``queue:sq|<identity>|<queue>`` names
   instead (registered in ``super_processes`` by the launcher, §10.2).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from .config import Capsule, Config
from .connection import Lease, RedisPool
from .errors import RedisUnavailable
from .fetch import QueueOrder, UnitOfWork
from .heartbeat import Identity
from .reporting import report_error
from .scripts import Script

__all__ = ["Feed", "ReliableFetch", "private_list_name"]

log = logging.getLogger("wurk")

_FETCH_MANY = Script("fetch_many.lua")


def private_list_name(config: Config, identity: Identity, queue: str, capsule_index: int) -> str:
    keys = config.keys
    if config.private_list_layout == "pro":
        return keys.private_pro(str(identity), queue)
    return keys.private(queue, identity.hostname, identity.pid, identity.nonce, capsule_index)


class Feed:
    """What a capsule's reliable fetchers share: jobs fetched ahead, pending ACKs, and who is
    fetching for the others right now."""

    def __init__(self, capsule: Capsule) -> None:
        self.capsule = capsule
        self.cond = threading.Condition()
        self.ready: collections.deque[UnitOfWork] = collections.deque()
        self.acks: list[UnitOfWork] = []
        self.waiting = 0
        self.fetching = False

    def take_acks(self) -> list[UnitOfWork]:
        acks, self.acks = self.acks, []
        return acks

    def take_ready(self) -> list[UnitOfWork]:
        ready = list(self.ready)
        self.ready.clear()
        return ready


class ReliableFetch:
    """One processor's fetcher; shares its capsule's ``Feed`` with the other processors."""

    def __init__(self, config: Config, capsule: Capsule, pool: RedisPool, *,
                 identity: Identity, capsule_index: int, slot: int, feed: Feed | None = None,
                 paused: Callable[[], frozenset[str]] = frozenset) -> None:
        self.config = config
        self.keys = config.keys
        self.pool = pool
        self.lease: Lease = pool.lease()
        self.order = QueueOrder(capsule)
        self.slot = slot
        self.feed = feed if feed is not None else Feed(capsule)
        self._paused = paused
        self._private = {q: private_list_name(config, identity, q, capsule_index)
                         for q in capsule.queue_names}
        self._idle = threading.Event()

    @property
    def private_lists(self) -> dict[str, str]:
        """Queue name → this capsule's private list for it."""
        return dict(self._private)

    # -- fetching ---------------------------------------------------------------------------
    def fetch(self, timeout: float) -> UnitOfWork | None:
        queues = self.order(self._paused())
        if not queues:
            self.flush_acks()
            self._idle.wait(timeout)  # every queue paused: wait, don't spin on Redis
            return None
        claim = self._claim(timeout)
        if isinstance(claim, UnitOfWork) or claim is None:
            return claim
        want, acks = claim
        units = self._fetch_many(queues, want, acks)
        if units:
            return units[0]
        waiting_on = self._turn(queues)
        return self._blocking_move(waiting_on, timeout)

    def _claim(self, timeout: float) -> UnitOfWork | tuple[int, list[UnitOfWork]] | None:
        """A job fetched ahead by another processor; or the right to fetch for ``want``
        processors (with the pending ACKs to send); or None when ``timeout`` passed."""
        feed = self.feed
        deadline = time.monotonic() + timeout
        with feed.cond:
            feed.waiting += 1
            try:
                while True:
                    if feed.ready:
                        return feed.ready.popleft()
                    if not feed.fetching:
                        feed.fetching = True
                        return max(1, feed.waiting), feed.take_acks()
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or not feed.cond.wait(remaining):
                        return None
            finally:
                feed.waiting -= 1

    def _fetch_many(self, queues: list[str], want: int,
                    acks: list[UnitOfWork]) -> list[UnitOfWork]:
        """One round trip: the ACKs, then up to ``want`` jobs; extras go to the feed."""
        units: list[UnitOfWork] = []
        try:
            keys: list[str] = []
            for queue in queues:
                keys += [self.keys.queue(queue), self._private[queue]]
            command = _FETCH_MANY.evalsha(keys, [want])
            reply = self._send(acks, command)
            if isinstance(reply, redis.exceptions.NoScriptError):  # first use, SCRIPT FLUSH
                self.lease.call(*_FETCH_MANY.load())
                reply = self.lease.call(*command)
            if isinstance(reply, Exception):
                raise reply
            units = [UnitOfWork(queues[int(reply[i]) - 1], reply[i + 1], self)
                     for i in range(0, len(reply), 2)]
        finally:
            with self.feed.cond:
                self.feed.fetching = False
                self.feed.ready.extend(units[1:])
                # Wake one waiter per job fetched ahead — or one to fetch next — rather than
                # every waiter: each wake-up costs a thread switch.
                self.feed.cond.notify(max(1, len(units) - 1))
        return units

    def _blocking_move(self, queue: str, timeout: float) -> UnitOfWork | None:
        with self.feed.cond:
            acks = self.feed.take_acks()
        command = ("BLMOVE", self.keys.queue(queue), self._private[queue], "RIGHT", "LEFT",
                   timeout)
        raw = self._send(acks, command)
        if isinstance(raw, Exception):
            raise raw
        return None if raw is None else UnitOfWork(queue, raw, self)

    def _send(self, acks: list[UnitOfWork], command: tuple[Any, ...]) -> Any:
        """``acks`` and ``command`` in one round trip; the ACKs come back if it fails."""
        try:
            replies = self.lease.pipeline([*self._ack_commands(acks), command])
        except BaseException:
            self._restore_acks(acks)
            raise
        self._check_acks(replies[:-1])
        return replies[-1]

    def _turn(self, queues: list[str]) -> str:
        """The queue this processor blocks on: processors take turns over the queues."""
        names = [name for name in self.order.names if name in queues]
        return names[self.slot % len(names)]

    # -- acknowledging ----------------------------------------------------------------------
    def acknowledge(self, unit: UnitOfWork) -> None:
        with self.feed.cond:
            self.feed.acks.append(unit)

    def _ack_commands(self, units: Sequence[UnitOfWork]) -> list[tuple[Any, ...]]:
        commands: list[tuple[Any, ...]] = []
        for unit in units:
            commands.append(("LREM", self._private[unit.queue], 1, unit.raw))
            if unit.jid:  # never the bare prefix: that key is nobody's
                commands.append(("DEL", self.keys.poison_counter(unit.jid)))
        return commands

    @staticmethod
    def _check_acks(replies: Sequence[Any]) -> None:
        for reply in replies:
            if isinstance(reply, Exception):
                log.warning("an ACK was refused by Redis: %s", reply)

    def _restore_acks(self, acks: list[UnitOfWork]) -> None:
        if acks:
            with self.feed.cond:
                self.feed.acks[:0] = acks

    def flush_acks(self) -> None:
        with self.feed.cond:
            acks = self.feed.take_acks()
        if not acks:
            return
        try:
            self._check_acks(self.lease.pipeline(self._ack_commands(acks)))
        except BaseException:
            self._restore_acks(acks)
            raise

    # -- giving jobs back ---------------------------------------------------------------------
    def requeue(self, units: Sequence[UnitOfWork]) -> None:
        """Back to the tail of their queues (next to run) and out of the private list."""
        if not units:
            return

        def send(r: Any) -> None:
            pipe = r.pipeline(transaction=True)
            for unit in units:
                pipe.rpush(self.keys.queue(unit.queue), unit.raw)
                pipe.lrem(self._private[unit.queue], 1, unit.raw)
            pipe.execute()

        self.pool.run(send)

    def flush(self) -> None:
        """The processor stops fetching: send pending ACKs, return jobs fetched ahead (no
        processor of this capsule will run them now), give the connection back."""
        self._idle.set()
        with self.feed.cond:
            ahead = self.feed.take_ready()
        try:
            self.flush_acks()
            self.requeue(ahead)
        except RedisUnavailable as exc:
            report_error(self.config, exc, {"context": "flushing the fetcher"})
        finally:
            self.lease.release()
