"""Reliable fetch: a job never leaves Redis until it finished (``wire-format.md`` §10.3).

1. A fetch moves the job atomically from its queue into a private list of this process
   (``queue:<q>|<host>|<pid>|<nonce>|<capsule>``), so a crash, ``kill -9`` or lost machine
   leaves it in Redis for the reaper.
2. The ACK (``LREM`` by the exact stored bytes, and ``DEL`` of the job's poison counter)
   rides the next fetch's round trip: a finished job costs no round trip of its own. A
   processor that stops fetching flushes its pending ACK first, or the finished job would sit
   in the private list, escape the shutdown requeue, and run again after a reap.
3. One queue: ``BLMOVE``. Several: one script tries them in order (strict or weighted), and
   only when all are empty does the processor block with ``BLMOVE`` on one queue — processors
   of a capsule take turns over the queues (``decisions.md`` 14), so an idle worker picks up a
   job on any queue within milliseconds.
4. Requeue (fetched after quiet, or unfinished at the deadline) is ``RPUSH`` to the queue's
   tail plus ``LREM`` from the private list, in one ``MULTI``.
5. ``private_list_layout="pro"`` writes Sidekiq Pro's ``queue:sq|<identity>|<queue>`` names
   instead and registers them in ``super_processes`` so a Pro process never mistakes them
   for orphans (§10.2).
6. ``Claims``: which entries of this process's private lists a processor holds (running, or
   finished with the ACK not yet through). An entry nobody holds is a stray — a move whose
   reply a cut connection lost, or the job of a processor that died or could not book its
   failure — and the reaper gives it back (``wurk.reaper``), so a live process never sits on
   a job. An ACK that Redis refused for now (loading, busy…) stays pending and rides the
   next round trip.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import redis

from .config import Capsule, Config
from .connection import RedisPool, refusal
from .errors import RedisUnavailable
from .fetch import QueueOrder, UnitOfWork
from .heartbeat import Identity
from .reporting import report_error
from .scripts import Script

__all__ = ["Claims", "ReliableFetch", "private_list_name"]

log = logging.getLogger("wurk")

_FETCH_FIRST = Script("fetch_first.lua")


def private_list_name(config: Config, identity: Identity, queue: str, capsule_index: int) -> str:
    keys = config.keys
    if config.private_list_layout == "pro":
        return keys.private_pro(str(identity), queue)
    return keys.private(queue, identity.hostname, identity.pid, identity.nonce, capsule_index)


class Claims:
    """The private-list entries this process's processors hold, shared by its fetchers.

    Kept per unit, so letting go of one twice (acknowledged, then requeued at the deadline)
    cannot drop another processor's claim on identical bytes. ``abandoned`` remembers the
    entries let go of without an ACK (the processor died, or could not book the job's
    failure): the reaper counts their return towards the poison limit, as a job that keeps
    taking its processor down is a poison pill too.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._units: dict[int, tuple[str, UnitOfWork]] = {}  # id(unit) → (list, unit)
        self._abandoned: Counter[tuple[str, bytes]] = Counter()

    def hold(self, key: str, unit: UnitOfWork) -> None:
        with self._lock:
            self._units[id(unit)] = (key, unit)

    def release(self, unit: UnitOfWork, *, abandoned: bool = False) -> None:
        with self._lock:
            entry = self._units.pop(id(unit), None)
            if entry is not None and abandoned:
                self._abandoned[entry[0], unit.raw] += 1

    def held(self, key: str) -> Counter[bytes]:
        """Entries of ``key`` held right now."""
        with self._lock:
            return Counter(unit.raw for k, unit in self._units.values() if k == key)

    def abandoned(self, key: str, raw: bytes) -> bool:
        with self._lock:
            return self._abandoned.get((key, raw), 0) > 0

    def forget_abandoned(self, key: str, raw: bytes) -> None:
        """The abandoned entry went back to its queue."""
        with self._lock:
            self._abandoned[key, raw] -= 1
            if self._abandoned[key, raw] <= 0:
                del self._abandoned[key, raw]


class ReliableFetch:
    """One processor's fetcher: moves jobs into private lists, ACKs with the next fetch."""

    def __init__(self, config: Config, capsule: Capsule, pool: RedisPool, *,
                 identity: Identity, capsule_index: int, slot: int,
                 paused: Callable[[], frozenset[str]] = frozenset,
                 claims: Claims | None = None) -> None:
        self.config = config
        self.keys = config.keys
        self.pool = pool
        self.lease = pool.lease()
        self.order = QueueOrder(capsule)
        self.slot = slot
        self._paused = paused
        self._private = {q: private_list_name(config, identity, q, capsule_index)
                         for q in capsule.queue_names}
        self._pending: list[UnitOfWork] = []
        self._last_order: list[str] = []
        self._idle = threading.Event()
        self.claims = claims if claims is not None else Claims()
        self._out: UnitOfWork | None = None  # the unit handed out last

    @property
    def private_lists(self) -> dict[str, str]:
        """Queue name → this fetcher's private list for it."""
        return dict(self._private)

    # -- fetching ---------------------------------------------------------------------------
    def fetch(self, timeout: float) -> UnitOfWork | None:
        self._let_go_of_unsettled()
        queues = self.order(self._paused())
        if not queues:
            self.flush_acks()
            self._idle.wait(timeout)  # every queue paused: wait, don't spin on Redis
            return None
        if len(queues) == 1:
            return self._with_acks(self._blocking_move(queues[0], timeout), queues[0])
        unit = self._with_acks(self._first_move(queues), None)
        if unit is not None:
            return unit
        waiting_on = self._turn(queues)
        return self._move_reply(self.lease.call(*self._blocking_move(waiting_on, timeout)),
                                waiting_on)

    def _with_acks(self, command: tuple[Any, ...], queue: str | None) -> UnitOfWork | None:
        """Send pending ACKs and ``command`` in one round trip."""
        acks = self._ack_commands()
        replies = self.lease.pipeline([*acks, command])
        self._acks_sent(replies[:-1])
        reply = replies[-1]
        if isinstance(reply, redis.exceptions.NoScriptError):  # first use, or SCRIPT FLUSH
            self.lease.call(*_FETCH_FIRST.load())
            reply = self.lease.call(*command)
        if isinstance(reply, Exception):
            unavailable = refusal(reply, self.pool.url)
            if unavailable is not None:
                raise unavailable from reply
            raise reply
        if queue is not None:
            return self._move_reply(reply, queue)
        if reply is None:
            return None
        index, raw = reply
        return self._move_reply(raw, self._last_order[int(index) - 1])

    def _blocking_move(self, queue: str, timeout: float) -> tuple[Any, ...]:
        return ("BLMOVE", self.keys.queue(queue), self._private[queue], "RIGHT", "LEFT",
                timeout)

    def _first_move(self, queues: list[str]) -> tuple[Any, ...]:
        self._last_order = queues
        keys: list[str] = []
        for queue in queues:
            keys += [self.keys.queue(queue), self._private[queue]]
        return _FETCH_FIRST.evalsha(keys, [])

    def _turn(self, queues: list[str]) -> str:
        """The queue this processor blocks on: processors take turns over the queues."""
        names = [name for name in self.order.names if name in queues]
        return names[self.slot % len(names)]

    def _move_reply(self, raw: Any, queue: str) -> UnitOfWork | None:
        if raw is None:
            return None
        unit = UnitOfWork(queue, raw, self)
        self.claims.hold(self._private[queue], unit)
        self._out = unit
        return unit

    def _let_go_of_unsettled(self) -> None:
        """The last unit was neither acknowledged nor requeued (booking its failure failed,
        or its processor died): its entry is no longer held, so the reaper gives it back."""
        unit, self._out = self._out, None
        if unit is not None and not unit.settled:
            unit.settled = True
            self.claims.release(unit, abandoned=True)
            log.warning("a job from %s was left unacknowledged; it goes back to its queue",
                        unit.queue)

    # -- acknowledging ----------------------------------------------------------------------
    def acknowledge(self, unit: UnitOfWork) -> None:
        unit.settled = True
        self._pending.append(unit)

    def _ack_commands(self) -> list[tuple[Any, ...]]:
        commands: list[tuple[Any, ...]] = []
        for unit in self._pending:
            commands.append(("LREM", self._private[unit.queue], 1, unit.raw))
            if unit.jid:  # never the bare prefix: that key is nobody's
                commands.append(("DEL", self.keys.poison_counter(unit.jid)))
        return commands

    def _acks_sent(self, replies: Sequence[Any]) -> None:
        """Units whose ``LREM`` went through are done; one refused for now stays pending."""
        answers = iter(replies)
        kept: list[UnitOfWork] = []
        for unit in self._pending:
            reply = next(answers)
            if unit.jid:
                next(answers)  # the poison counter's DEL: nothing depends on it
            if isinstance(reply, Exception) and refusal(reply, self.pool.url) is not None:
                kept.append(unit)
                continue
            if isinstance(reply, Exception):
                log.warning("an ACK was refused by Redis: %s", reply)
            self.claims.release(unit)
        self._pending = kept

    def flush_acks(self) -> None:
        if self._pending:
            self._acks_sent(self.lease.pipeline(self._ack_commands()))
            if self._pending:
                raise RedisUnavailable(f"{len(self._pending)} ACK(s) refused for now")

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
        for unit in units:
            unit.settled = True
            self.claims.release(unit)

    def flush(self) -> None:
        """The processor stops fetching: send the pending ACK, give the connection back.

        Whatever it still holds is let go of, so a live process's reaper returns it."""
        self._idle.set()
        try:
            self.flush_acks()
        except RedisUnavailable as exc:
            report_error(self.config, exc, {"context": "flushing ACKs",
                                            "jobs": len(self._pending)})
        finally:
            self.lease.release()
            self._let_go_of_unsettled()
            for unit in self._pending:
                self.claims.release(unit)
            self._pending = []
