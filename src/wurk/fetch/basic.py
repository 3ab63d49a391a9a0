"""Taking work off the queues: the ``Fetcher`` interface and Sidekiq's basic fetch.

1. ``QueueOrder`` turns a capsule's queues and weights into the order to try them in, per
   fetch: strict (declaration order), random, or weighted random.
2. ``UnitOfWork`` is one fetched job: its queue, the raw bytes as stored (kept for removal
   by value: re-encoding could change them), and how to acknowledge or requeue it. A
   processor that hands a job on (an async job, run on the event loop) tells its fetcher,
   and the job is acknowledged in batches from that lane's thread (``ack_commands``).
3. ``BasicFetch`` pops with ``BRPOP`` over every queue in order, with a server timeout so a
   stopping processor notices within a second. Acknowledging is a no-op (the job already left
   Redis): a crash loses the jobs in flight. Reliable fetch, which does not, has its own
   module and the same interface. A queue key holding another type than a list (written by
   something else) fails the whole ``BRPOP`` with ``WRONGTYPE``: the keys are then looked
   at, such a queue is passed over with one warning, and looked at again when a fetch finds
   nothing, or every ``RECHECK_FETCHES`` fetches, until it is a list again.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import redis

from ..config import Capsule, Config
from ..connections.lease import Lease
from ..connections.pool import RedisPool
from ..connections.replies import reply_code

__all__ = ["BasicFetch", "Fetcher", "QueueOrder", "UnitOfWork"]


class QueueOrder:
    """Which queues to try, in which order, for one fetch."""

    def __init__(self, capsule: Capsule) -> None:
        self.mode = capsule.mode
        self.names = capsule.queue_names
        # Weighted: each name appears max(weight, 1) times, so its chance to come first is
        # proportional to its weight; de-duplicating after the shuffle keeps every name once.
        self._expanded = [name for name, weight in capsule.queues for _ in range(max(weight, 1))]

    def __call__(self, paused: frozenset[str] = frozenset()) -> list[str]:
        if self.mode == "strict":
            order = self.names
        elif self.mode == "random":
            order = random.sample(self.names, len(self.names))
        else:
            shuffled = random.sample(self._expanded, len(self._expanded))
            order = list(dict.fromkeys(shuffled))
        if paused:
            return [name for name in order if name not in paused]
        return order


@dataclass(slots=True)
class UnitOfWork:
    """One fetched job and the way back for it."""

    queue: str
    raw: bytes  # exactly as stored: removal by value must match these bytes
    fetcher: Fetcher
    jid: str | None = None  # set once parsed, for the ACK's poison-counter reset
    # False when the fetch saw the job had no poison counter: its ACK need not reset one.
    counted: bool = True
    settled: bool = False  # acknowledged or requeued: its fetcher need not let go of it
    # Its partition, when it came from a partitioned queue (``wurk.partitions``).
    partition: str | None = None

    def acknowledge(self) -> None:
        self.fetcher.acknowledge(self)

    def requeue(self) -> None:
        self.fetcher.requeue([self])


class Fetcher(Protocol):
    """What a processor needs from a fetch strategy."""

    def fetch(self, timeout: float) -> UnitOfWork | None:
        """Block up to ``timeout`` seconds for a job; None when there was none."""

    def acknowledge(self, unit: UnitOfWork) -> None:
        """The job finished (or its failure was booked): forget it."""

    def requeue(self, units: Sequence[UnitOfWork]) -> None:
        """Put unfinished jobs back at the tail of their queues (next to run)."""

    def flush(self) -> None:
        """Send anything held back (e.g. a deferred ACK); called when a processor stops."""

    def give_back(self, unit: UnitOfWork) -> None:
        """``unit`` came after quiet, never started: back to the tail of its queue, first in
        line — ahead of any jobs fetched with it (with them, at ``flush``)."""

    def hand_off(self, unit: UnitOfWork) -> None:
        """``unit`` runs elsewhere now (an async job): it is settled there, not here."""

    def let_go(self, unit: UnitOfWork) -> None:
        """``unit`` ended elsewhere neither acknowledged nor requeued (an async job whose
        failure could not be booked, or that ended cancelled or with ``SystemExit``): give
        it up, as a processor gives up its own such job at its next fetch. Any thread."""

    def ack_commands(self, units: Sequence[UnitOfWork]) -> list[tuple[Any, ...]]:
        """The commands acknowledging ``units`` (jobs that ended elsewhere: async jobs), for
        any thread to send with other fetchers' in one round trip; their replies go to
        ``settle_acks``. Marks the units settled."""

    def settle_acks(self, units: Sequence[UnitOfWork], replies: Sequence[Any]
                    ) -> list[UnitOfWork]:
        """Book the replies to ``ack_commands(units)``; returns the units Redis refused for
        now, to try again."""


log = logging.getLogger("wurk")

# Fetches between two looks at the queues passed over for holding another type, while jobs
# keep coming (an idle fetch, one that found nothing, looks at them every time).
RECHECK_FETCHES = 100


class BasicFetch:
    """Sidekiq's default fetch: ``BRPOP`` across the capsule's queues."""

    def __init__(self, config: Config, capsule: Capsule, pool: RedisPool,
                 paused: Callable[[], frozenset[str]] = frozenset) -> None:
        self.config = config
        self.keys = config.keys
        self.pool = pool
        self.lease = Lease(pool)
        self.order = QueueOrder(capsule)
        self._paused = paused
        self._idle = threading.Event()
        self._refused: frozenset[str] = frozenset()  # queues holding another type
        self._since_look = 0

    def fetch(self, timeout: float) -> UnitOfWork | None:
        if self._refused:
            self._since_look += 1
            if self._since_look >= RECHECK_FETCHES:
                self._look_again()
        queues = [name for name in self.order(self._paused()) if name not in self._refused]
        if not queues:
            # Every queue is paused or passed over: wait instead of asking in a tight loop.
            self._idle.wait(timeout)
            if self._refused:
                self._look_again()
            return None
        keys = [self.keys.queue(name) for name in queues]
        try:
            reply = cast("list[bytes] | None", self.lease.call("BRPOP", *keys, timeout))
        except redis.ResponseError as exc:
            if reply_code(exc) != "WRONGTYPE":
                raise
            self._pass_over(queues)
            return None
        if reply is None:
            if self._refused:
                self._look_again()
            return None
        key, raw = reply  # bytes: the pool does not decode responses
        return UnitOfWork(self.keys.queue_name(key.decode()), raw, self)

    def _types(self, queues: Sequence[str]) -> dict[str, str]:
        replies = self.lease.pipeline([("TYPE", self.keys.queue(name)) for name in queues])
        return {name: (reply.decode() if isinstance(reply, bytes) else str(reply))
                for name, reply in zip(queues, replies, strict=True)}

    def _pass_over(self, queues: Sequence[str]) -> None:
        """``BRPOP`` met a key of another type: the queues holding one are passed over, each
        warned about once, until ``_look_again`` finds it a list (or gone)."""
        found = frozenset(name for name, kind in self._types(queues).items()
                          if kind not in ("list", "none"))
        for name in sorted(found - self._refused):
            log.warning("fetch: %s holds another Redis type than a list (written by something "
                        "else); the queue is passed over", self.keys.queue(name))
        self._refused |= found
        self._since_look = 0

    def _look_again(self) -> None:
        self._since_look = 0
        types = self._types(sorted(self._refused))
        for name, kind in types.items():
            if kind in ("list", "none"):
                log.info("fetch: %s is a list again; the queue is fetched from",
                         self.keys.queue(name))
        self._refused = frozenset(name for name, kind in types.items()
                                  if kind not in ("list", "none"))

    def acknowledge(self, unit: UnitOfWork) -> None:
        return None

    def hand_off(self, unit: UnitOfWork) -> None:
        return None

    def let_go(self, unit: UnitOfWork) -> None:
        return None  # it left Redis when it was popped: nothing holds it

    def ack_commands(self, units: Sequence[UnitOfWork]) -> list[tuple[Any, ...]]:
        return []  # the jobs left Redis when they were popped

    def settle_acks(self, units: Sequence[UnitOfWork], replies: Sequence[Any]
                    ) -> list[UnitOfWork]:
        return []

    def requeue(self, units: Sequence[UnitOfWork]) -> None:
        if not units:
            return

        def push_back(r: object) -> None:
            pipe = r.pipeline(transaction=False)  # type: ignore[attr-defined]
            for unit in units:
                pipe.rpush(self.keys.queue(unit.queue), unit.raw)
            pipe.execute()

        self.pool.run(push_back)

    def give_back(self, unit: UnitOfWork) -> None:
        self.requeue([unit])  # nothing was fetched with it

    def flush(self) -> None:
        self._idle.set()
        self.lease.release()

