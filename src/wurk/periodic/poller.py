"""The leader's periodic poller: the configuration's loops become the cluster's, and each
tick is pushed exactly once.

1. Runs in every worker process as a ``TimerLoop`` (on the worker's poller thread), and
   acts only while this process leads (``wurk.periodic.leader``). At each new term, and every
   ``SYNC_INTERVAL`` after, it writes its loops to Redis and prunes the ones it does not
   register (``periodic_sync.lua``).
2. Each look reads Redis's ``TIME`` and every loop's ``lf``/``nf``/``paused`` in one round
   trip, asks ``wurk.periodic.loops.plan`` what is due, and pushes a due tick with
   ``periodic_fire.lua``: fenced by the leader's token, and the loop's last fired tick is
   checked and set in the same step as the push — so a tick is pushed once across
   leadership changes, restarts and two processes that both believe they lead.
3. It sleeps until the earliest next tick (at most ``periodic_poll_interval``), so a tick
   fires within milliseconds of its time. A tick fired late, ticks passed over and loops
   pruned are logged as warnings naming the loop.
4. The payload is the job's own options under the loop's, through the client middleware
   (``Client.prepare``); its jid is a digest of the loop and the tick (``tick_jid``).
5. A failing look is reported once per outage and retried with a capped backoff; one
   loop's failure (its job not registered, a raising middleware) does not stop the others.
6. On Redis Cluster the queue is in another keyspace than the loop, so a run is marked,
   pushed once and settled in three scripts (``wurk.periodic.cluster``); each look first
   completes a run a lost leader left pending. One Redis keeps the single script above.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .. import payload as P
from .. import scripts, stored
from ..client.core import Client
from ..config import Config
from ..connections.pool import RedisPool
from ..errors import JobNotRegistered
from ..job import Registry, registry
from ..reporting import report_error
from ..runtime.duty import Duty
from ..runtime.timer import Timers
from .cluster import ClusterRuns, Pending, read_pending
from .loops import CLOCK_SLACK, HISTORY_LIMIT, Due, Loop, epoch_field, plan, tick_jid

__all__ = ["LoopState", "PeriodicPoller"]

log = logging.getLogger("wurk")

PERIODIC_THREAD = "wurk-periodic"
# The leader writes its loops again this often within a term: a loop deleted by hand comes
# back, one a stale process wrote is pruned.
SYNC_INTERVAL = 60.0
# How often a follower looks whether it has become the leader: a local check, no Redis.
FOLLOWER_LOOK = 1.0
# Woken this long after a tick's second, so Redis's clock has surely reached it.
WAKE_MARGIN = 0.005
# A tick pushed more than this late is worth a warning (a slow look, a leader change).
LATE_WARNING = 10.0


class Term(Protocol):
    """What the poller needs of the election (``wurk.periodic.leader.Leadership``)."""

    identity: str

    def term(self) -> int | None: ...

    def lost(self) -> None: ...


@dataclass(frozen=True)
class LoopState:
    """A loop's marks as read from Redis, checked (a value that is not an epoch is None)."""

    exists: bool
    lf: int | None
    nf: int | None
    paused: bool
    pending: Pending | str | None = None  # Redis Cluster: a run marked, not yet settled
    raw: tuple[Any, Any] = (None, None)  # lf and nf as stored, to name them when unusable


class PeriodicPoller:
    """Owns the periodic thread and its scripts."""

    def __init__(self, config: Config, leadership: Term, *, pool: RedisPool | None = None,
                 client: Client | None = None, jobs: Registry = registry,
                 loops: Sequence[Loop] | None = None, timers: Timers | None = None) -> None:
        self.config = config
        self.leadership = leadership
        self.loops = list(loops if loops is not None else config.periodic.loops())
        self.pool = pool if pool is not None else config.pool("internal")
        self.client = client if client is not None else Client(config, pool=self.pool)
        self.jobs = jobs
        fence = scripts.source("periodic_fence.lua")
        register = self.pool.client.register_script
        self._fire = register(fence + scripts.source("periodic_fire.lua"))
        self._advance = register(fence + scripts.source("periodic_advance.lua"))
        self._sync = register(fence + scripts.source("periodic_sync.lua"))
        # On Redis Cluster a run is marked, pushed into its queue's keyspace, then settled.
        self._runs = ClusterRuns(config, self.client, self._script) if config.is_cluster \
            else None
        self._duty = Duty(config, PERIODIC_THREAD, self.look, self._next_wait, first_wait=0.0,
                          component="periodic", host=timers)
        self._synced: tuple[int, float] | None = None  # (token, monotonic time of the sync)
        self._next_due: float | None = None  # Redis epoch of the earliest next tick
        self._clock: tuple[float, float] = (0.0, 0.0)  # (Redis time, monotonic) of a read
        self._failing: set[str] = set()  # loops whose last try raised (reported once)
        self._distrusted: dict[tuple[str, str], str] = {}  # (lid, field) -> value warned of

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        if self.config.leader:
            self._duty.start()

    def stop(self, timeout: float) -> None:
        """Stop; a look in progress finishes its current loop's push first."""
        self._duty.stop(timeout)

    def is_alive(self) -> bool:
        return self._duty.is_alive()

    # -- one look ---------------------------------------------------------------------------
    def look(self) -> None:
        """Sync if due, then fire what is due; does nothing unless this process leads."""
        token = self.leadership.term()
        if token is None:
            self._synced = None
            self._next_due = None
            return
        now = self._redis_time()
        if self._sync_due(token) and not self.sync(token, now):
            return
        states = self.read_states()
        upcoming: list[float] = []
        for loop, state in zip(self.loops, states, strict=True):
            if self._duty.stopping or self.leadership.term() != token:
                return
            next_fire = self._handle(loop, state, token, now)
            if next_fire is not None:
                upcoming.append(next_fire)
        self._next_due = min(upcoming, default=None)

    def _sync_due(self, token: int) -> bool:
        synced = self._synced
        return synced is None or synced[0] != token or \
            time.monotonic() - synced[1] >= SYNC_INTERVAL

    def sync(self, token: int, now: float) -> bool:
        """Write this process's loops, prune the others; False when the fence refused."""
        args: list[Any] = [self.leadership.identity, token, self.config.keys.loop_prefix,
                           self.config.keys.loop_history_prefix]
        for loop in self.loops:
            args += [loop.lid, loop.cron, loop.job, loop.options_json, loop.tz,
                     loop.schedule.next_after(now)]
        reply = self._script(self._sync, [self.config.keys.periodic], args)
        if stored.text(reply[0]) != "synced":
            self._refused(stored.text(reply[0]))
            return False
        self._synced = (token, time.monotonic())
        pruned = [stored.text(lid) for lid in reply[2]]
        if pruned:
            log.warning("periodic: pruned %d loop(s) this configuration does not register: "
                        "%s", len(pruned), ", ".join(pruned[:10]))
        if int(reply[1]):
            log.info("periodic: registered %d new loop(s)", int(reply[1]))
        return True

    def read_states(self) -> list[LoopState]:
        keys = self.config.keys

        def read(r: Any) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for loop in self.loops:
                pipe.exists(keys.loop(loop.lid))
                pipe.hmget(keys.loop(loop.lid), "lf", "nf", "paused")
            return list(pipe.execute(raise_on_error=False))

        def read_pending_runs(r: Any) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for loop in self.loops:
                pipe.hmget(keys.loop_pending(loop.lid), "tick", "jid", "queue", "payload")
            return list(pipe.execute(raise_on_error=False))

        replies = self.pool.run(read, idempotent=True)
        pending: list[Any] = [None] * len(self.loops)
        if self._runs is not None:
            pending = self.pool.run(read_pending_runs, idempotent=True)
        states = []
        for loop, exists, fields, run in zip(self.loops, replies[0::2], replies[1::2], pending,
                                             strict=True):
            found = read_pending(loop, run) if isinstance(run, list) else None
            if isinstance(fields, Exception):  # not a hash: the next sync replaces it
                self._synced = None
                states.append(LoopState(False, None, None, False, found))
                continue
            lf, nf, paused = fields
            states.append(LoopState(exists == 1, epoch_field(lf), epoch_field(nf),
                                    stored.text(paused) == "1" if paused is not None else False,
                                    found, (lf, nf)))
        return states

    def _believed(self, loop: Loop, state: LoopState, now: float
                  ) -> tuple[int | None, int | None]:
        """The loop's (lf, nf) that can be marks of its ticks; each that cannot (not an
        epoch, an lf past Redis's time, an nf past the loop's next tick) is None, and named
        in a warning once: the loop starts again from now."""
        lf, nf = state.lf, state.nf
        raw_lf, raw_nf = state.raw
        if raw_lf is not None and (lf is None or lf > now + CLOCK_SLACK):
            self._distrust(loop, "lf", raw_lf, "no tick it fired")
            lf = None
        if raw_nf is not None and (nf is None or nf > loop.schedule.next_after(now)):
            self._distrust(loop, "nf", raw_nf, "no next tick of its schedule")
            nf = None
        return lf, nf

    def _distrust(self, loop: Loop, field: str, raw: Any, what: str) -> None:
        shown = stored.shown(raw, 60)
        if self._distrusted.get((loop.lid, field)) == shown:
            return
        self._distrusted[(loop.lid, field)] = shown
        log.warning("periodic: %s %s holds %r, %s; disregarded (loop %s goes on from now)",
                    self.config.keys.loop(loop.lid), field, shown, what, loop.describe())

    def _handle(self, loop: Loop, state: LoopState, token: int, now: float) -> float | None:
        """Act on one loop; its next tick (None when it must wait for a sync)."""
        if not state.exists:
            self._synced = None  # deleted by hand or pruned by another: write it back
            return None
        lf, nf = self._believed(loop, state, now)
        due = plan(loop.schedule, nf=nf, lf=lf, paused=state.paused, now=now,
                   catch_up=self.config.periodic_catch_up)
        if due is None and state.pending is None:
            return nf
        try:
            if state.pending is not None and self._runs is not None:
                # A run marked by a leader lost before it pushed or settled: finished first.
                self._runs.complete(loop, state.pending)
            if due is None:
                self._failing.discard(loop.lid)
                return nf
            self._act(loop, due, token, now)
        except Exception as exc:
            # The tick is tried again at the next look, until it is past catching up; the
            # failure is reported once, not at every try.
            if loop.lid not in self._failing:
                self._failing.add(loop.lid)
                report_error(self.config, exc, {"context": f"periodic loop {loop.describe()}",
                                                "lid": loop.lid})
            else:
                log.debug("periodic: loop %s still failing: %s", loop.lid, exc)
            retry = now + self.config.periodic_poll_interval
            return retry if due is None else min(due.next_fire, retry)
        self._failing.discard(loop.lid)
        return due.next_fire

    def _act(self, loop: Loop, due: Due, token: int, now: float) -> None:
        if due.fire is None:
            self._move_on(loop, due.next_fire, token)
        elif self.push(loop, due.fire, due.next_fire, token) and now - due.fire > LATE_WARNING:
            log.warning("periodic: loop %s pushed its %s tick %.0f s late", loop.describe(),
                        loop.schedule.local(due.fire).isoformat(), now - due.fire)
        if due.missed:
            more = "more than " if due.more_missed else ""
            log.warning("periodic: loop %s (%s) missed %s%d tick(s) while no process could "
                        "push them; they are not run late", loop.describe(), loop.lid, more,
                        due.missed)

    def push(self, loop: Loop, tick: int, next_fire: int, token: int) -> bool:
        """Push ``tick``'s job once; True when this call pushed it."""
        try:
            defaults = self.jobs.lookup(loop.job).options
        except JobNotRegistered:
            defaults = {}
            log.warning("periodic: loop %s: job %r is not registered in this process; "
                        "pushed with the loop's options only", loop.describe(), loop.job)
        item = loop.item(defaults)
        item[P.JID] = tick_jid(loop.lid, tick)
        job = self.client.prepare(item)
        if job is None:
            log.info("periodic: a client middleware stopped loop %s's %s tick",
                     loop.describe(), loop.schedule.local(tick).isoformat())
            self._move_on(loop, next_fire, token)
            return False
        if self._runs is not None:  # Redis Cluster: the queue is in another keyspace
            outcome, reply = self._runs.fire(loop, job, tick, next_fire,
                                             self.leadership.identity, token)
            if outcome == "fired":
                return True
            self._not_fired(loop, outcome, reply, tick)
            return False
        keys = self.config.keys
        queue = str(job[P.QUEUE])
        reply = self._script(
            self._fire,
            [keys.loop(loop.lid), keys.queues, keys.queue(queue), keys.loop_history(loop.lid)],
            [self.leadership.identity, token, tick, next_fire, self.config.periodic_catch_up,
             queue, P.dumps(job), job[P.JID], HISTORY_LIMIT])
        outcome = stored.text(reply[0])
        if outcome == "fired":
            log.debug("periodic: pushed %s for loop %s (tick %d)", job[P.JID], loop.lid, tick)
            return True
        self._not_fired(loop, outcome, reply, tick)
        return False

    def _not_fired(self, loop: Loop, outcome: str, reply: Sequence[Any], tick: int) -> None:
        if outcome in ("not-leader", "stale-token"):
            self._refused(outcome)
        elif outcome == "gone":
            self._synced = None
        elif outcome == "wrong-type":
            log.error("periodic: loop %s not pushed: %s holds another type of value",
                      loop.describe(), stored.text(reply[1]))
        elif outcome == "late":
            log.warning("periodic: loop %s: tick %d is older than periodic_catch_up by "
                        "Redis's clock; not pushed", loop.describe(), tick)
        else:  # done (another leader pushed it), paused, early
            log.debug("periodic: loop %s tick %d: %s", loop.lid, tick, outcome)

    def _move_on(self, loop: Loop, next_fire: int, token: int) -> None:
        reply = self._script(self._advance, [self.config.keys.loop(loop.lid)], [
            self.leadership.identity, token, next_fire])
        outcome = stored.text(reply[0])
        if outcome in ("not-leader", "stale-token"):
            self._refused(outcome)
        elif outcome == "gone":
            self._synced = None

    def _refused(self, outcome: str) -> None:
        log.warning("periodic: Redis refused a write (%s): another process leads now",
                    outcome)
        self._synced = None
        self.leadership.lost()

    def _script(self, script: Any, extra_keys: list[str], args: list[Any]) -> Any:
        keys = [self.config.keys.leader, self.config.keys.leader_token, *extra_keys]
        return self.pool.run(lambda r: script(keys=keys, args=args, client=r))

    def _redis_time(self) -> float:
        seconds, micros = self.pool.run(lambda r: r.time(), idempotent=True)
        now = float(seconds) + float(micros) / 1_000_000
        self._clock = (now, time.monotonic())
        return now

    # -- timing -----------------------------------------------------------------------------
    def _next_wait(self) -> float:
        poll = self.config.periodic_poll_interval
        if self.leadership.term() is None:
            return min(FOLLOWER_LOOK, poll)
        if self._next_due is None:
            return poll
        redis_then, local_then = self._clock
        redis_now = redis_then + (time.monotonic() - local_then)
        return min(poll, max(0.0, self._next_due - redis_now) + WAKE_MARGIN)

