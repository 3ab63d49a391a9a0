"""Pushes that record their jid in Redis, so that sending a job again never pushes it twice.

1. A reliable push (``wurk.client.reliable``) and the outbox relay (``wurk.client.outbox``)
   send a job that may already be in Redis: a push whose connection broke after the command
   left (Redis may have applied it), a buffered job its dead owner had sent, a relayed row
   whose deletion a crash did not commit. So they push with ``scripts/reliable_push.lua``,
   which writes the job and records its jid in ``wurk:push-sent`` in one step, and writes
   nothing for a jid recorded already: how a replay knows the jid was sent. A unique job
   refused as a duplicate is recorded the same way, so its replay (a relay that died
   before deleting the refused row) is not pushed after the holder's lock is gone.
2. A record lives until its pusher knows the push landed (it read the reply, and a disk
   buffer or an outbox recorded that): the pusher then forgets it (``ZREM``, sent with its
   next push, ``Forgets``). A record nobody forgets (its pusher died, or went idle) is
   dropped after ``RECORD_SECONDS`` (7 days); a job that waited longer than that in a buffer
   after a push whose reply was lost could be pushed twice.
3. ``Sendable`` is one job ready to send: its payload's exact text, its jid, queue and
   ``at``, and for a unique job its lock (the script takes it as ``unique_push.lua`` does).
   ``sendable(keys, job, at)`` makes one from a payload; ``from_text`` from stored text (a
   buffer's file, an outbox row).
4. ``send`` / ``asend`` write many in one round trip and say, per jid, whether it was
   pushed, was pushed already, or was refused (a unique job's duplicate).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from .. import payload as P
from .. import scripts, stored
from ..config import Config
from ..connections.pool import RedisPool
from ..errors import InvalidPayload
from ..keys import Keys
from . import locks
from .writers import check_replicated, replica_wait

__all__ = ["RECORD_SECONDS", "Forgets", "Outcome", "Sendable", "asend", "from_text", "send",
           "sendable"]

log = logging.getLogger("wurk")

_SCRIPT = scripts.Script("reliable_push.lua", prelude=("owned.lua",))
# The longest a jid's record is kept when its pusher never forgets it.
RECORD_SECONDS = 7 * 24 * 60 * 60


@dataclass(frozen=True)
class Sendable:
    """One job as a recording push sends it."""

    jid: str
    text: str  # the payload as stored, byte for byte what every try sends
    queue: str
    at: float | None
    lock: str | None = None  # unique:<digest> for a unique job
    unique_for: float = 0.0


def sendable(keys: Keys, job: P.Payload, at: float | None) -> Sendable:
    """``job`` (through the middleware, stamped) ready to send; a unique job's digest is
    stored in it first, so every try takes the same lock."""
    lock = None
    if job.get(P.UNIQUE_FOR) is not None:
        lock, _ = locks.lock_for(keys, job, at, time.time())
    return Sendable(str(job[P.JID]), P.dumps(job), str(job[P.QUEUE]), at, lock,
                    float(job.get(P.UNIQUE_FOR) or 0.0))


def from_text(keys: Keys, text: str, at: float | None) -> Sendable:
    """A stored payload (a buffer's line, an outbox row) ready to send again.
    ``InvalidPayload`` naming the field when it cannot be sent: not a JSON object, no jid,
    a ``unique_for`` or an ``at`` that is not a finite number, a unique job without a stored
    digest whose ``unique_context`` hook raises on it (written by hand or by another
    version: untrusted)."""
    job = P.loads(text)
    if not isinstance(job.get(P.JID), str) or not job[P.JID]:
        raise InvalidPayload(f"stored job has no jid: {text[:200]!r}", field=P.JID)
    if at is not None:
        at = P.finite_seconds(at, "a stored job's 'at'", "finite epoch seconds", field=P.AT)
    lock = None
    if job.get(P.UNIQUE_FOR) is not None:
        P.finite_seconds(job[P.UNIQUE_FOR], "'unique_for'", "a finite number of seconds",
                         field=P.UNIQUE_FOR)
        had_digest = isinstance(job.get(P.UNIQUE_DIGEST), str) and job[P.UNIQUE_DIGEST]
        try:
            lock, _ = locks.lock_for(keys, job, at, time.time())
        except InvalidPayload:
            raise
        except Exception as exc:  # the job's unique_context hook, on a payload it never saw
            raise InvalidPayload(
                f"stored job's lock cannot be named: the unique_context of "
                f"{str(job.get(P.CLASS))[:100]!r} raised {type(exc).__name__}: {exc}",
                field=P.UNIQUE_FOR) from exc
        if not had_digest:
            text = P.dumps(job)  # the digest is stored with the job, as the first try does
    return Sendable(str(job[P.JID]), text, str(job.get(P.QUEUE) or P.DEFAULT_QUEUE), at,
                    lock, float(job.get(P.UNIQUE_FOR) or 0.0))


@dataclass
class Outcome:
    """What a recording push did, per jid."""

    pushed: list[str] = field(default_factory=list)
    # Recorded as sent before (pushed, or refused as a duplicate): not pushed now.
    already: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # duplicate jid -> the lock's holder

    @property
    def landed(self) -> list[str]:
        """The jids now known to be in Redis (or refused there): safe to forget and drop."""
        return [*self.pushed, *self.already, *self.refused]


class Forgets:
    """The jids whose records a pusher may drop (their pushes are known to have landed),
    sent with its next push: a record costs no round trip of its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jids: list[str] = []

    def add(self, jids: Iterable[str]) -> None:
        with self._lock:
            self._jids.extend(jids)

    def take(self) -> list[str]:
        with self._lock:
            taken, self._jids = self._jids, []
            return taken

    def __len__(self) -> int:
        return len(self._jids)

    def clear(self) -> None:
        with self._lock:
            self._jids = []


def _commands(keys: Keys, jobs: Sequence[Sendable], forget: Sequence[str]
              ) -> list[tuple[Any, ...]]:
    commands: list[tuple[Any, ...]] = []
    if forget:
        commands.append(("ZREM", keys.push_sent, *forget))
    for job in jobs:
        target = keys.schedule if job.at is not None else keys.queue(job.queue)
        names = [keys.push_sent, keys.queues, target]
        ttl = ""
        if job.lock is not None:
            names.append(job.lock)
            # unique_for alone: the script adds a scheduled job's wait on Redis's clock
            ttl = str(max(1, math.ceil(job.unique_for * 1000)))
        commands.append(_SCRIPT.evalsha(names, [
            job.jid, job.text, job.queue if job.at is None else "",
            P.score(job.at) if job.at is not None else "", ttl, RECORD_SECONDS]))
    return commands


def _outcome(keys: Keys, jobs: Sequence[Sendable], replies: Sequence[Any]) -> Outcome:
    outcome = Outcome()
    for job, reply in zip(jobs, replies[len(replies) - len(jobs):], strict=True):
        if isinstance(reply, list):  # keys of another type the script replaced first
            reply, replaced = reply[0], reply[1:]
            for key, kind in zip(replaced[0::2], replaced[1::2], strict=True):
                _warn_replaced(keys, stored.text(key), stored.text(kind), job.jid)
        if reply == 0:
            outcome.pushed.append(job.jid)
        elif reply == 1:
            outcome.already.append(job.jid)
        else:  # the lock's holder: stored by anyone, so maybe no UTF-8
            outcome.refused[job.jid] = stored.shown(reply, 200)
    return outcome


def _warn_replaced(keys: Keys, key: str, kind: str, jid: str) -> None:
    if key == keys.push_sent:
        what = ("its records of pushed jids went with it: a push replayed now after a lost "
                "reply may run twice")
    else:
        what = f"it is now the lock of job {jid}"
    log.warning("recording push: %s held a %s, not what wurk keeps there; deleted (%s)",
                stored.shown(key, 200), stored.shown(kind, 40), what)


def send(config: Config, pool: RedisPool, jobs: Sequence[Sendable],
         forget: Sequence[str] = ()) -> Outcome:
    """Push ``jobs`` recording their jids, and drop the records of ``forget``, in one round
    trip (two more the first time a server lacks the script). Raises ``RedisUnavailable``
    as every push does; nothing is replayed here after a broken connection — a caller that
    sends again is safe, since recorded jids are not pushed twice."""
    commands = [*_commands(config.keys, jobs, forget), *replica_wait(config)]

    def run(_: redis.Redis) -> list[Any]:
        try:
            return pool.send_all(commands)
        except redis.exceptions.NoScriptError:
            pass  # a restarted or flushed server: no script call ran; the ZREM is idempotent
        pool.send_all([_SCRIPT.load()])
        return pool.send_all(commands)

    return _outcome(config.keys, jobs, _replicated(config, pool.run(run)))


async def asend(config: Config, jobs: Sequence[Sendable], forget: Sequence[str] = ()
                ) -> Outcome:
    """``send`` on the running loop's asyncio pool."""
    commands = [*_commands(config.keys, jobs, forget), *replica_wait(config)]
    pool = config.async_pool()

    async def run(_: Any) -> list[Any]:
        try:
            return await pool.send_all(commands)
        except redis.exceptions.NoScriptError:
            pass
        await pool.send_all([_SCRIPT.load()])
        return await pool.send_all(commands)

    return _outcome(config.keys, jobs, _replicated(config, await pool.run(run)))


def _replicated(config: Config, replies: list[Any]) -> list[Any]:
    """The replies without the WAIT that ends them when pushes wait for replicas
    (``push_replicas``), which raises ``RedisUnavailable`` when too few confirmed."""
    if not config.push_replicas:
        return replies
    check_replicated(config, replies[-1])
    return replies[:-1]
