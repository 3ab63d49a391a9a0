"""Periodic runs on Redis Cluster: marked in the default keyspace, pushed once into the queue's.

On one Redis ``periodic_fire.lua`` checks and sets a loop's last fired tick and pushes the
job in one step. On a cluster the loop (``loops:<lid>``, its history, the leader's keys) is in
the ``default`` keyspace and the job's queue in its own, another slot: no script spans both.
So a run is three steps, each one script on one node:

1. **mark** (``periodic_mark.lua``, default keyspace, fenced by the leader's token as the
   one-Redis fire is, with its checks): ``lf`` is set to the tick and the run is recorded
   as pending (``wurk:loop-pending:<lid>``: tick, jid, queue, final payload).
2. **push once** (``periodic_push_once.lua``, the queue's keyspace): the run's key
   ``wurk:periodic-run:<jid>`` is set NX with the push, in one step; a run whose key is
   there is not pushed again. The jid is a digest of the loop and the tick (``tick_jid``),
   so every try of one run names one key.
3. **settle** (``periodic_settle.lua``, default keyspace): the pending record goes, and the
   run enters the loop's history — written by the one call that deletes the record.

A leader lost between 1 and 2 (killed, cut off, its connection broken) leaves the pending
record: the next look of any leader (``complete``, before anything else of that loop)
pushes the stored payload — the run is not lost. Lost between 2 and 3, the record is there
too: the push is tried again, the run's key refuses it, and the record is settled — the run
is not pushed twice. A loop with a pending run marks no newer tick until it is completed.
A pending run older than ``periodic_catch_up`` is given up with a warning, as a tick that
old is never pushed on one Redis; its record and the run's key live ``catch_up`` + one hour,
so the key outlives every try of its run.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import payload as P
from .. import scripts, stored
from ..client.core import Client
from ..config import Config
from ..connections import cluster
from ..errors import ConfigError
from .loops import HISTORY_LIMIT, Loop, epoch_field, tick_jid

__all__ = ["ClusterRuns", "Pending", "read_pending"]

log = logging.getLogger("wurk")

# How much longer than catch-up a pending record and a run's key live: clocks of two
# primaries may differ, and a run is only ever tried within catch-up of its tick.
KEY_MARGIN = 3600


@dataclass(frozen=True)
class Pending:
    """A run marked but not known to be pushed, as read from Redis and checked."""

    tick: int
    jid: str
    queue: str
    payload: str


def read_pending(loop: Loop, fields: Sequence[Any]) -> Pending | str | None:
    """The pending run in ``fields`` (HMGET tick, jid, queue, payload); None when there is
    none; the raw jid (to clear it) with a warning when the record is not one of this
    loop's runs — it is read from Redis, so untrusted."""
    raw_tick, raw_jid, raw_queue, raw_payload = (stored.text(v) if v is not None else None
                                                 for v in fields)
    if raw_tick is None and raw_jid is None:
        return None
    tick = epoch_field(raw_tick)
    problem = None
    if tick is None or raw_jid != tick_jid(loop.lid, tick):
        problem = "its jid is not the digest of this loop and its tick"
    elif raw_queue is None or not cluster.KEYSPACE.fullmatch(raw_queue):
        problem = f"its queue {raw_queue!r} cannot be a keyspace"
    else:
        try:
            job = json.loads(raw_payload or "")
        except ValueError:
            job = None
        if not isinstance(job, dict) or job.get(P.JID) != raw_jid or \
                job.get(P.QUEUE) != raw_queue:
            problem = "its payload is not that run's job"
    if problem is not None:
        log.warning("periodic: loop %s: the pending run recorded in Redis is not valid (%s); "
                    "cleared", loop.describe(), problem)
        return raw_jid or ""
    assert tick is not None and raw_jid is not None and raw_queue is not None
    return Pending(tick, raw_jid, raw_queue, str(raw_payload))


class ClusterRuns:
    """The three steps of a run on a cluster, for the leader's poller."""

    def __init__(self, config: Config, client: Client,
                 fenced: Callable[[Any, list[str], list[Any]], Any]) -> None:
        self.config = config
        self.client = client
        self._fenced = fenced  # runs a fenced script in the default keyspace
        fence = scripts.source("periodic_fence.lua")
        register = config.pool("internal").client.register_script
        self._mark = register(fence + scripts.source("periodic_mark.lua"))
        self._push_once = register(scripts.source("periodic_push_once.lua"))
        self._settle = register(scripts.source("periodic_settle.lua"))

    @property
    def life(self) -> int:
        """Seconds a pending record and a run's key live."""
        return max(1, math.ceil(self.config.periodic_catch_up)) + KEY_MARGIN

    def fire(self, loop: Loop, job: P.Payload, tick: int, next_fire: int, identity: str,
             token: int) -> tuple[str, Sequence[Any]]:
        """Mark ``job``'s run, push it, settle it: the outcome as ``periodic_fire.lua``
        names it (``fired`` when this call pushed it) and the mark's reply."""
        queue = str(job[P.QUEUE])
        self.client.keyspace_of(job)  # a name that can be a keyspace; the cluster's index
        payload = P.dumps(job)
        keys = self.config.keys
        reply = self._fenced(self._mark, [keys.loop(loop.lid), keys.loop_pending(loop.lid)],
                             [identity, token, tick, next_fire, self.config.periodic_catch_up,
                              queue, payload, job[P.JID], self.life])
        outcome = stored.text(reply[0])
        if outcome != "marked":
            return outcome, reply
        # The fault point the crash-window test stops at: marked, not yet pushed.
        pushed = self.complete(loop, Pending(tick, str(job[P.JID]), queue, payload))
        return ("fired" if pushed else "done"), reply

    def complete(self, loop: Loop, pending: Pending | str) -> bool:
        """Push a marked run once and settle it; True when this call pushed it. A record
        that is no valid run (``read_pending`` gave its jid) is cleared."""
        if isinstance(pending, str):
            self._settle_run(loop, pending, 0, pushed=False)
            return False
        target = self.config.shard(pending.queue)
        reply = target.pool("internal").run(lambda r: self._push_once(
            keys=[target.keys.periodic_run(pending.jid), target.keys.queues,
                  target.keys.queue(pending.queue)],
            args=[pending.queue, pending.payload, pending.tick,
                  self.config.periodic_catch_up, self.life], client=r),
            idempotent=True)  # a second try of one run pushes nothing
        outcome = stored.text(reply[0])
        if outcome == "wrong-type":
            raise ConfigError(f"periodic loop {loop.describe()}: not pushed: "
                              f"{stored.text(reply[1])} holds another type of value")
        if outcome == "late":
            log.warning("periodic: loop %s: its %s run was marked but not pushed within "
                        "periodic_catch_up; given up, not pushed late", loop.describe(),
                        loop.schedule.local(pending.tick).isoformat())
        # The fault point the crash-window test stops at: pushed, not yet settled.
        self._settle_run(loop, pending.jid, pending.tick, pushed=outcome != "late")
        if outcome == "pushed":
            log.debug("periodic: pushed %s for loop %s (tick %d)", pending.jid, loop.lid,
                      pending.tick)
        return outcome == "pushed"

    def _settle_run(self, loop: Loop, jid: str, tick: int, *, pushed: bool) -> None:
        keys = self.config.keys
        self.config.pool("internal").run(lambda r: self._settle(
            keys=[keys.loop_pending(loop.lid), keys.loop_history(loop.lid)],
            args=[jid, tick, HISTORY_LIMIT, "1" if pushed else "0"], client=r),
            idempotent=True)  # compare-and-delete: a second try changes nothing
