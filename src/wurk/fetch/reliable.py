"""Reliable fetch: a job never leaves Redis until it finished.

1. A fetch moves the job atomically from its queue into a private list of this process
   (``queue:<q>|<host>|<pid>|<nonce>|<capsule>``), so a crash, ``kill -9`` or lost machine
   leaves it in Redis for the reaper.
2. Fetching ahead (``prefetch``, default 8): out of a backlog a processor moves several jobs
   into its private list in one round trip — never more than its share of the queue
   (``LLEN / concurrency``), so a short queue is spread over the processors. The jobs wait
   in the processor's own buffer, held in the private list like the running one; a processor
   that stops gives back those it did not start.
3. The ACK (``LREM`` by the exact stored bytes, and ``DEL`` of the job's poison counter
   unless the fetch saw it had none) rides the next fetch's round trip: a finished job costs
   no round trip of its own. While jobs fetched ahead are waiting, there is no next round
   trip soon: the ACK is written at once and its reply read with the next fetch's, so a
   finished job never lingers in the private list to run again after a crash. A processor
   that stops fetching flushes its pending ACKs first, or the finished job would sit in the
   private list, escape the shutdown requeue, and run again after a reap.
4. One script tries the queues in order (strict or weighted); only when all are empty does
   the processor block with ``BLMOVE`` on one queue — processors of a capsule take turns
   over the queues, so an idle worker picks up a job on any queue
   within milliseconds. With one queue and ``prefetch: 1`` the fetch is the ``BLMOVE``.
5. Requeue (fetched after quiet, fetched ahead and not started, or unfinished at the
   deadline) moves each job from the private list to its queue's tail in one script, only
   if it is still in the private list: a job already given back is not pushed twice.
6. ``private_list_layout="pro"`` writes Sidekiq Pro's ``queue:sq|<identity>|<queue>`` names
   instead and registers them in ``super_processes`` so a Pro process never mistakes them
   for orphans.
7. ``Claims``: which entries of this process's private lists a processor holds (running, or
   finished with the ACK not yet through). An entry nobody holds is a stray — a move whose
   reply a cut connection lost, or the job of a processor that died or could not book its
   failure — and the reaper gives it back (``wurk.fetch.reaper``), so a live process never sits on
   a job. An ACK that Redis refused for now (loading, busy…) stays pending and rides the
   next round trip.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Any

import redis

from .. import stored
from ..config import Capsule, Config
from ..connections.lease import Lease
from ..connections.pool import RedisPool
from ..connections.replies import refusal, reply_code
from ..errors import RedisUnavailable
from ..reporting import report_error
from ..runtime.identity import Identity
from ..scripts import Script
from .basic import QueueOrder, UnitOfWork

__all__ = ["Claims", "ReliableFetch", "private_list_name"]

log = logging.getLogger("wurk")

_FETCH_AHEAD = Script("fetch_ahead.lua", prelude=("poison_counter.lua",))
_REQUEUE = Script("requeue.lua")


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
        self.hold_all(key, [unit])

    def hold_all(self, key: str, units: list[UnitOfWork]) -> None:
        """``hold`` of each of ``units`` (the jobs of one fetch), under one lock."""
        with self._lock:
            for unit in units:
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
        self.lease = Lease(pool)
        self.order = QueueOrder(capsule)
        self.slot = slot
        self.prefetch = config.prefetch
        self._share = capsule.concurrency
        self._paused = paused
        self._private = {q: private_list_name(config, identity, q, capsule_index)
                         for q in capsule.queue_names}
        self._ahead: deque[UnitOfWork] = deque()  # fetched, in the private list, not started
        self._pending: list[UnitOfWork] = []  # ACKs to send with the next round trip
        self._sent: list[UnitOfWork] = []  # ACKs written, their replies not read yet
        self._last_order: list[str] = []
        self._refused: frozenset[str] = frozenset()  # queues passed over: not lists
        self._idle = threading.Event()
        self.claims = claims if claims is not None else Claims()
        self._out: UnitOfWork | None = None  # the unit handed out last

    @property
    def private_lists(self) -> dict[str, str]:
        """Queue name → this fetcher's private list for it."""
        return dict(self._private)

    # -- fetching ---------------------------------------------------------------------------
    def fetch(self, timeout: float) -> UnitOfWork | None:
        unit, queues = self._ready()
        if unit is not None:
            return unit
        if not queues:
            self.flush_acks()
            self._idle.wait(timeout)  # every queue paused: wait, don't spin on Redis
            return None
        return self._fetch_from(queues, timeout)

    def _ready(self) -> tuple[UnitOfWork | None, list[str]]:
        """The oldest job fetched ahead, if any; else the queues to ask, none paused (the
        last unit handed out and still unsettled is let go of first)."""
        self.let_go_of_last()
        paused = self._paused()
        if self._ahead:
            if not paused:  # the usual case, once per job: the oldest fetched ahead
                self._out = self._ahead.popleft()
                return self._out, []
            waiting = self._next_ahead(paused)
            if waiting is not None:
                return waiting, []
        return None, self.order(paused)

    def let_go_of_last(self) -> None:
        """The unit handed out last, if it is neither settled nor handed off, is let go of
        (its processor is past it)."""
        out = self._out
        if out is not None and not out.settled:
            self._let_go_of_unsettled()
        self._out = None

    def poll(self) -> tuple[UnitOfWork | None, bool]:
        """A job without blocking (``wurk.fetch.keyspaces``): one fetched ahead, or one
        round trip trying the queues in order, with the pending ACKs. The flag says whether
        a queue was asked (False: every queue paused; the pending ACKs are sent all the
        same, as ``fetch`` sends them, or a finished job would wait for the unpause)."""
        unit, queues = self._ready()
        if unit is not None:
            return unit, True
        if not queues:
            self.flush_acks()
            return None, False
        return self._round_trip(self._take(queues), None), True

    def wait(self, timeout: float) -> UnitOfWork | None:
        """Block up to ``timeout`` on this fetcher's first queue not paused (``poll`` found
        every queue empty)."""
        queues = self.order(self._paused())
        if not queues:
            return None
        queue = self._turn(queues)
        if queue is None:
            self._idle.wait(timeout)
            return None
        return self._move_reply(self.lease.call(*self._blocking_move(queue, timeout)), queue)

    @property
    def has_ahead(self) -> bool:
        """Jobs fetched ahead wait in this fetcher's buffer."""
        return bool(self._ahead)

    @property
    def acks_pending(self) -> bool:
        """ACKs not yet sent or not yet read."""
        return bool(self._pending or self._sent)

    def _fetch_from(self, queues: list[str], timeout: float) -> UnitOfWork | None:
        """A job of ``queues`` (in the order to try them, none paused), blocking up to
        ``timeout`` when they are all empty."""
        if len(queues) == 1 and self.prefetch == 1 and not self._refused:
            return self._round_trip(self._blocking_move(queues[0], timeout), queues[0])
        unit = self._round_trip(self._take(queues), None)
        if unit is not None:
            return unit
        waiting_on = self._turn(queues)
        if waiting_on is None:
            self._idle.wait(timeout)  # every queue refused the move: wait, don't spin
            return None
        return self._move_reply(self.lease.call(*self._blocking_move(waiting_on, timeout)),
                                waiting_on)

    def _next_ahead(self, paused: frozenset[str]) -> UnitOfWork | None:
        """The oldest job fetched ahead; those of a queue paused since go back first."""
        if paused and any(unit.queue in paused for unit in self._ahead):
            back = [unit for unit in self._ahead if unit.queue in paused]
            self._ahead = deque(unit for unit in self._ahead if unit.queue not in paused)
            self._give_back(back)
            if not self._ahead:
                return None
        unit = self._ahead.popleft()
        self._out = unit
        return unit

    def _round_trip(self, command: tuple[Any, ...], queue: str | None) -> UnitOfWork | None:
        """Pending ACKs and ``command`` in one round trip."""
        reply = self._with_acks([command])[0]
        if isinstance(reply, redis.exceptions.NoScriptError):  # first use, or SCRIPT FLUSH
            self.lease.call(*_FETCH_AHEAD.load())
            reply = self.lease.call(*command)
        if isinstance(reply, Exception):
            unavailable = refusal(reply, self.pool.url)
            if unavailable is not None:
                raise unavailable from reply
            if queue is not None and reply_code(reply) == "WRONGTYPE":
                # The lone queue's BLMOVE: its key or private list is no list. Passed over as
                # the script passes it over; the script asks it until it is a list again.
                self._last_order = [queue]
                self._passed_over(frozenset((queue,)))
                return None
            raise reply
        if queue is not None:
            return self._move_reply(reply, queue)
        if reply is None:
            if self._refused:  # every queue asked answered: none refuses any more
                self._refused -= frozenset(self._last_order)
            return None
        if not reply[0]:
            self._passed_over(frozenset(self._last_order[int(i) - 1] for i in reply[1]))
            return None
        queue = self._last_order[int(reply[0]) - 1]
        units = [UnitOfWork(queue, raw, self, counted=False) for raw in reply[2:]]
        self.claims.hold_all(self._private[queue], units)  # one lock for the lot
        units[0].counted = bool(reply[1])
        self._ahead.extend(units[1:])
        self._out = units[0]
        return units[0]

    def _with_acks(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Send the pending ACKs, then ``commands``; read every reply (those of ACKs written
        earlier too) and return the replies to ``commands``."""
        acks = [*self._sent, *self._pending]
        try:
            replies = self.lease.pipeline([*self._ack_commands(self._pending), *commands])
        except BaseException:
            # Outcome unknown, and the lease dropped the connection with the replies unread
            # (cut, protocol error, interrupt): every ACK is sent again next time.
            self._pending, self._sent = acks, []
            raise
        self._pending, self._sent = acks, []
        cut = len(replies) - len(commands)
        self._acks_sent(replies[:cut])
        return replies[cut:]

    def _blocking_move(self, queue: str, timeout: float) -> tuple[Any, ...]:
        return ("BLMOVE", self.keys.queue(queue), self._private[queue], "RIGHT", "LEFT",
                timeout)

    def _take(self, queues: list[str]) -> tuple[Any, ...]:
        self._last_order = queues
        keys: list[str] = []
        for queue in queues:
            keys += [self.keys.queue(queue), self._private[queue]]
        return _FETCH_AHEAD.evalsha(keys, [self.prefetch, self._share, self.keys.poison_prefix])

    def _turn(self, queues: list[str]) -> str | None:
        """The queue this processor blocks on: processors take turns over the queues (None:
        every one of them is passed over)."""
        names = [name for name in self.order.names if name in queues and name not in self._refused]
        return names[self.slot % len(names)] if names else None

    def _passed_over(self, queues: frozenset[str]) -> None:
        """Queues whose key or private list holds another type than a list: passed over, and
        not waited on, until a fetch finds them lists again; each warned about when it
        starts."""
        for queue in sorted(queues - self._refused):
            log.warning("fetch: %s or its in-flight list holds another Redis type than a list "
                        "(written by something else); the queue is passed over",
                        self.keys.queue(queue))
        self._refused = (self._refused - frozenset(self._last_order)) | queues

    def _move_reply(self, raw: Any, queue: str) -> UnitOfWork | None:
        return None if raw is None else self._hold(raw, queue)

    def _hold(self, raw: bytes, queue: str, *, counted: bool = True) -> UnitOfWork:
        unit = UnitOfWork(queue, raw, self, counted=counted)
        self.claims.hold(self._private[queue], unit)
        self._out = unit
        return unit

    def _let_go_of_unsettled(self) -> None:
        """The last unit was neither acknowledged nor requeued (booking its failure failed,
        or its processor died): its entry is no longer held, so the reaper gives it back."""
        unit, self._out = self._out, None
        if unit is not None:
            self.let_go(unit)

    def let_go(self, unit: UnitOfWork) -> None:
        if unit.settled:
            return
        unit.settled = True
        self.claims.release(unit, abandoned=True)
        log.warning("a job from %s (jid %s) was left unacknowledged; it goes back to its "
                    "queue", unit.queue, unit.jid)

    # -- acknowledging ----------------------------------------------------------------------
    def acknowledge(self, unit: UnitOfWork) -> None:
        unit.settled = True
        pending = self._pending
        pending.append(unit)
        if not self._ahead:
            return  # the next fetch is a round trip: the ACK rides that
        if len(pending) == 1 and not (unit.counted and unit.jid):
            # The usual case, once per job: this one ACK alone, an LREM, written now.
            try:
                self.lease.send_one(("LREM", self._private[unit.queue], 1, unit.raw))
            except BaseException as exc:  # the connection was dropped, replies unread
                self._pending, self._sent = [*self._sent, unit], []
                if not isinstance(exc, RedisUnavailable):
                    raise
                return  # sent again with the next round trip
            self._pending = []
            self._sent.append(unit)
            return
        self._send_pending()

    def _send_pending(self) -> None:
        """Jobs fetched ahead come first: write the pending ACKs now, read the replies with
        the next round trip."""
        sending = self._pending
        try:
            self.lease.send(self._ack_commands(sending))
        except BaseException as exc:  # the connection was dropped, replies unread
            self._pending, self._sent = [*self._sent, *sending], []
            if not isinstance(exc, RedisUnavailable):
                raise
            return  # sent again with the next round trip
        self._pending = []
        self._sent += sending

    def hand_off(self, unit: UnitOfWork) -> None:
        if self._out is unit:
            self._out = None  # settled by whoever runs it: not ours to let go of

    def ack_commands(self, units: Sequence[UnitOfWork]) -> list[tuple[Any, ...]]:
        """The ACKs of jobs that ran elsewhere (async jobs), for the acknowledging thread's
        round trip; this processor's own pending ACKs are not touched, so any thread may
        call it (and ``settle_acks`` with the replies)."""
        for unit in units:
            unit.settled = True
        return self._ack_commands(units)

    def settle_acks(self, units: Sequence[UnitOfWork], replies: Sequence[Any]
                    ) -> list[UnitOfWork]:
        return self._settle(units, replies)

    def _ack_commands(self, units: Sequence[UnitOfWork]) -> list[tuple[Any, ...]]:
        commands: list[tuple[Any, ...]] = []
        for unit in units:
            commands.append(("LREM", self._private[unit.queue], 1, unit.raw))
            if unit.counted and unit.jid:  # never the bare prefix: that key is nobody's
                commands.append(("DEL", self.keys.poison_counter(unit.jid)))
        return commands

    def _acks_sent(self, replies: Sequence[Any]) -> None:
        self._pending = self._settle(self._pending, replies)

    def _settle(self, units: Sequence[UnitOfWork], replies: Sequence[Any]) -> list[UnitOfWork]:
        """Units whose ``LREM`` went through are done; those refused for now are returned,
        to be sent again."""
        answers = iter(replies)
        kept: list[UnitOfWork] = []
        for unit in units:
            reply = next(answers)
            if unit.counted and unit.jid:
                next(answers)  # the poison counter's DEL: nothing depends on it
            if isinstance(reply, Exception) and refusal(reply, self.pool.url) is not None:
                kept.append(unit)
                continue
            if isinstance(reply, Exception):
                log.warning("an ACK was refused by Redis: %s", reply)
            self.claims.release(unit)
        return kept

    def flush_acks(self) -> None:
        if self._pending or self._sent:
            self._with_acks([])
            if self._pending:
                raise RedisUnavailable(f"{len(self._pending)} ACK(s) refused for now")

    # -- giving jobs back ---------------------------------------------------------------------
    def requeue(self, units: Sequence[UnitOfWork]) -> None:
        """Back to the tail of their queues (next to run) and out of the private list."""
        if not units:
            return
        keys: list[str] = []
        jobs: list[bytes] = []
        for unit in reversed(units):  # the first of ``units`` pushed last: next to run
            keys += [self._private[unit.queue], self.keys.queue(unit.queue)]
            jobs.append(unit.raw)
        _moved, refused = self.pool.run(
            lambda r: r.register_script(_REQUEUE.text)(keys=keys, args=jobs))
        for unit in units:
            unit.settled = True
            self.claims.release(unit)
        _warn_kept(refused)

    def give_back(self, unit: UnitOfWork) -> None:
        """``unit`` was fetched after quiet and never started: it goes back with the jobs
        fetched ahead at ``flush``, in one script, first in line. If Redis refuses, it stays
        in the private list uncounted, as they do (it never ran: no poison pill)."""
        if self._out is unit:
            self._out = None
        self._ahead.appendleft(unit)

    def _give_back(self, units: list[UnitOfWork]) -> None:
        """Jobs fetched ahead and not started go back to their queues. If Redis refuses,
        they are let go of: the reaper returns them, uncounted (they never ran)."""
        try:
            self.requeue(units)
        except BaseException:
            for unit in units:
                unit.settled = True
                self.claims.release(unit)
            raise

    def flush(self) -> None:
        """The processor stops fetching: give back the jobs fetched ahead, send the pending
        ACKs, give the connection back.

        Whatever it still holds is let go of, so a live process's reaper returns it."""
        self._idle.set()
        ahead, self._ahead = list(self._ahead), deque()
        try:
            self._give_back(ahead)
        except (RedisUnavailable, redis.RedisError) as exc:
            report_error(self.config, exc, {"context": "giving back jobs fetched ahead",
                                            "jobs": len(ahead)})
        try:
            self.flush_acks()
        except (RedisUnavailable, redis.RedisError) as exc:
            report_error(self.config, exc, {"context": "flushing ACKs",
                                            "jobs": len(self._pending)})
        finally:
            self.lease.release()
            self._let_go_of_unsettled()
            for unit in self._pending:
                self.claims.release(unit)
            self._pending = []


def _warn_kept(refused: Sequence[bytes | str]) -> None:
    """The queue keys ``requeue.lua`` found holding another Redis type, each with the
    in-flight list its jobs stay in (the reaper returns them once the key is mended)."""
    pairs = [tuple(stored.shown(name, 300) for name in refused[i:i + 2])
             for i in range(0, len(refused), 2)]
    for queue, private in dict.fromkeys(pairs):
        log.warning("fetch: %s holds another Redis type than a list (written by something "
                    "else); the jobs given back to it stay in %s until it is mended", queue,
                    private)

