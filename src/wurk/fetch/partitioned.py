"""Reliable fetch over a capsule with partitioned queues (``wurk.partitions``).

1. Plain queues are fetched as ``ReliableFetch`` fetches them; a partitioned queue by its
   script (``scripts/partition_fetch.lua``), which takes round-robin across the partitions
   with work and never past a partition's in-flight limit, into the same in-flight list
   (``queue:<q>|…``) — so the reaper, the shutdown's return of in-flight lists and the
   stray return treat its jobs like any other's.
2. The queues are tried in the capsule's order; a run of plain queues in one script, each
   partitioned queue in its own.
3. No blocking pop can wait on a partition that is at its limit: when nothing was found,
   the fetcher blocks on a plain queue of the capsule if it has one, else sleeps, for a
   backoff that starts at ``POLL_MIN`` and doubles up to ``POLL_MAX`` while nothing comes —
   a plain queue's job still wakes a processor blocked on it at once.
4. The ACK and the requeue of a partitioned job are scripts that count it out of flight only
   if it was still in the in-flight list. A script Redis no longer knows (``SCRIPT FLUSH``)
   makes its ACK wait for the next round trip, with the script loaded again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import redis

from .. import partitions
from ..config import Capsule, Config
from ..connections.pool import RedisPool
from ..connections.replies import refusal
from ..runtime.identity import Identity
from .basic import UnitOfWork
from .reliable import Claims, ReliableFetch

__all__ = ["POLL_MAX", "POLL_MIN", "PartitionedFetch"]

log = logging.getLogger("wurk")

POLL_MIN = 0.005
POLL_MAX = 0.2
# Jobs of the plain list one fetch routes to their partitions, and partitions it visits.
ROUTE = 100
VISIT = 1000


class PartitionedFetch(ReliableFetch):
    """``ReliableFetch`` for a capsule that serves at least one partitioned queue."""

    def __init__(self, config: Config, capsule: Capsule, pool: RedisPool, *,
                 identity: Identity, capsule_index: int, slot: int,
                 paused: Callable[[], frozenset[str]] = frozenset,
                 claims: Claims | None = None) -> None:
        super().__init__(config, capsule, pool, identity=identity, capsule_index=capsule_index,
                         slot=slot, paused=paused, claims=claims)
        self.limits = {q: config.partitions[q] for q in capsule.queue_names
                       if q in config.partitions}
        self.rates = {q: config.partition_rates.get(q, 0) for q in self.limits}
        self._poll = POLL_MIN
        self._ack_loaded = False
        self._passed: dict[str, set[str]] = {}  # queue → its keys passed over (warned)

    def _fetch_from(self, queues: list[str], timeout: float) -> UnitOfWork | None:
        plain: list[str] = []
        for group in self._groups(queues):
            if group[0] in self.limits:
                unit = self._take_partitioned(group[0])
            else:
                plain += group
                unit = self._round_trip(self._take(group), None)
            if unit is not None:
                self._poll = POLL_MIN
                return unit
        wait = max(0.001, min(timeout, self._poll))
        self._poll = min(POLL_MAX, self._poll * 2)
        waiting_on = self._turn(plain) if plain else None  # None: all passed over
        if waiting_on is not None:
            return self._move_reply(self.lease.call(*self._blocking_move(waiting_on, wait)),
                                    waiting_on)
        self.flush_acks()
        self._idle.wait(wait)
        return None

    def _groups(self, queues: list[str]) -> list[list[str]]:
        """Runs of plain queues, and each partitioned queue alone, in order."""
        groups: list[list[str]] = []
        for queue in queues:
            if queue in self.limits or not groups or groups[-1][0] in self.limits:
                groups.append([queue])
            else:
                groups[-1].append(queue)
        return groups

    def _take_partitioned(self, queue: str) -> UnitOfWork | None:
        if not self._ack_loaded:  # once per fetcher: its first ACK finds the script there
            self.lease.call(*partitions.ACK.load())
            self._ack_loaded = True
        keys = self.keys
        command = partitions.FETCH.evalsha(
            [keys.queue(queue), self._private[queue], keys.partition_ring(queue),
             keys.partition_running(queue), keys.partition_holders(queue),
             keys.partition_rates(queue)],
            [keys.partition_prefix(queue), self.limits[queue], self.prefetch, ROUTE, VISIT,
             self.rates[queue], keys.queue_prefix, queue, self._share])
        reply = self._with_acks([command])[0]
        if isinstance(reply, redis.exceptions.NoScriptError):  # first use, or SCRIPT FLUSH
            self.lease.call(*partitions.FETCH.load())
            reply = self.lease.call(*command)
        if isinstance(reply, Exception):
            unavailable = refusal(reply, self.pool.url)
            if unavailable is not None:
                raise unavailable from reply
            raise reply
        taken, restarted, dropped, passed = reply
        self._warn_passed(queue, {_text(key) for key in passed})
        partitions.warn_restarted(queue, restarted)
        partitions.warn_dropped(self.keys, queue, dropped)
        if keys.partition_ring(queue) in (_text(key) for key in restarted):
            # A ring of another type, deleted by the script: rebuilt from the partitions'
            # lists, so their jobs are fetched — at once when this fetch took none.
            found = self.pool.run(lambda r: partitions.rebuild_ring(r, keys, queue),
                                  idempotent=True)
            if not taken and found:
                return self._take_partitioned(queue)
        if not taken:
            return None
        units = [UnitOfWork(queue, raw, self, partition=_text(name))
                 for raw, name in zip(taken[0::2], taken[1::2], strict=True)]
        self.claims.hold_all(self._private[queue], units)
        self._ahead.extend(units[1:])
        self._out = units[0]
        return units[0]

    def _warn_passed(self, queue: str, keys: set[str]) -> None:
        """The queue's plain list or this fetcher's in-flight list holds another Redis type
        (written by something else): warned about once, when the fetch starts passing it
        over, until it is a list again."""
        for key in sorted(keys - self._passed.get(queue, set())):
            if key == self.keys.queue(queue):
                log.warning("fetch: %s holds another Redis type than a list (written by "
                            "something else); its jobs are not routed to the partitions of "
                            "%s until it is mended, the partitions are served", key, queue)
            else:
                log.warning("fetch: the in-flight list %s holds another Redis type than a "
                            "list (written by something else); the partitioned queue %s is "
                            "passed over until it is mended", key, queue)
        self._passed[queue] = keys

    # -- acknowledging ----------------------------------------------------------------------
    def acknowledge(self, unit: UnitOfWork) -> None:
        if unit.partition is None:
            super().acknowledge(unit)
            return
        unit.settled = True
        self._pending.append(unit)
        if self._ahead:  # no round trip soon: written now, its reply read with the next
            self._send_pending()

    def _ack_commands(self, units: Sequence[UnitOfWork]) -> list[tuple[Any, ...]]:
        commands: list[tuple[Any, ...]] = []
        for unit in units:
            if unit.partition is None:
                commands += super()._ack_commands([unit])
                continue
            commands.append(partitions.ACK.evalsha(
                [self._private[unit.queue], self.keys.partition_running(unit.queue)],
                [unit.raw, unit.partition]))
            if unit.counted and unit.jid:
                commands.append(("DEL", self.keys.poison_counter(unit.jid)))
        return commands

    def _settle(self, units: Sequence[UnitOfWork], replies: Sequence[Any]) -> list[UnitOfWork]:
        if any(isinstance(reply, redis.exceptions.NoScriptError) for reply in replies):
            # The ACK did not run: load the script, and send the ACK again next time. On the
            # pool: an async job's ACK is settled on another thread than the lease's.
            self.pool.run(_load_ack)
            replies = [redis.exceptions.ResponseError("TRYAGAIN the ACK script was not loaded")
                       if isinstance(reply, redis.exceptions.NoScriptError) else reply
                       for reply in replies]
        return super()._settle(units, replies)

    # -- giving jobs back -------------------------------------------------------------------
    def requeue(self, units: Sequence[UnitOfWork]) -> None:
        plain = [unit for unit in units if unit.partition is None]
        parted = [unit for unit in units if unit.partition is not None]
        super().requeue(plain)
        by_queue: dict[str, list[UnitOfWork]] = {}
        for unit in reversed(parted):  # the first of ``units`` pushed last: next to run
            by_queue.setdefault(unit.queue, []).append(unit)
        for queue, given in by_queue.items():
            keys = [self.keys.partition_ring(queue), self.keys.partition_running(queue),
                    *(self._private[queue] for _ in given)]
            args: list[object] = [self.keys.partition_prefix(queue)]
            for unit in given:
                args += [unit.raw, unit.partition or partitions.DEFAULT_PARTITION]
            reply = self.pool.run(partial(_requeue, keys=keys, args=args))
            if isinstance(reply, Exception):
                raise reply
        for unit in parted:
            unit.settled = True
            self.claims.release(unit)


def _load_ack(r: Any) -> Any:
    return r.execute_command(*partitions.ACK.load())


def _requeue(r: Any, keys: list[str], args: list[object]) -> Any:
    return partitions.REQUEUE.call_many(r, [(keys, args)])[0]


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
