"""The heartbeat: who this process is, what it runs, that it is alive.

1. Who the process is (``Identity``, ``wurk.runtime.identity``) goes into its record's
   ``info`` JSON.
2. ``Heartbeat.beat`` does, every ``heartbeat_interval`` (10 s): flush stats (a stats key
   Redis refuses to count in is reported once, and the beat goes on); rewrite the work
   map under both names (``:work`` for Sidekiq 6.5+, ``:workers`` for 6.4: both dashboards);
   time a PING; in one MULTI refresh the process hash (``info`` JSON and the live fields,
   ``concurrency`` in both places) with a 60 s TTL and pop one remote signal; close the
   pooled connections idle longer than ``redis_idle_timeout`` (if set); then fire the
   ``beat`` lifecycle event (and ``heartbeat`` once, on the first beat; not again when a
   beat writes anew a record that expired in an outage).
3. The launcher calls ``beat`` once before the first fetch, so a process is visible (and its
   in-flight lists owned) before it holds any job, so no reaper grace is needed. ``wait_visible``
   holds the processors back until a beat has landed — when the first one failed, or after
   an outage long enough for the record to expire — since a reaper takes the jobs of a live
   process without a record for a dead one's.
   The later beats come from the heartbeat's own thread (``start``), or, for an in-process
   worker with ``async_beat=False``, from the host's timer calling ``beat`` (no thread): the
   same tick either way. Beats never overlap, and ``stop`` waits for one under way, whoever
   called it, so no beat writes the record again after ``clear`` removed it.
4. ``clear`` removes the record at exit, after a last stats flush.
5. A Redis error is reported once when the outage starts and logged once with its length at
   the end; while it lasts, beats are tried with the capped backoff (``wurk.runtime.outage``), so
   the record is back soon after Redis is. A beat that lands ends the wait of a worker that
   found no Redis at boot (``wurk.connections.unreached``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil
import redis

from . import payload as P
from .config import Config
from .connections.pool import RedisPool
from .metrics.counters import Counters
from .reporting import fire, report_error
from .runtime.busy import Busy
from .runtime.duty import Duty
from .runtime.identity import Identity
from .runtime.outage import Outage
from .stored import text

__all__ = ["Heartbeat"]

log = logging.getLogger("wurk")

# Sidekiq warns when Redis round trips stay this slow: jobs then wait on Redis, not CPU.
SLOW_RTT_US = 50_000
SLOW_RTT_READINGS = 5

class Heartbeat:
    """Writes this process's record; owned by the launcher, which starts and stops it."""

    def __init__(self, config: Config, identity: Identity, *, busy: Busy, counters: Counters,
                 info: dict[str, Any], pool: RedisPool | None = None,
                 on_signal: Callable[[str], None] | None = None,
                 on_beat: Callable[[], None] | None = None,
                 health: Callable[[], dict[str, Any]] | None = None) -> None:
        self.config = config
        self.identity = identity
        self.name = str(identity)
        self.busy = busy
        self.counters = counters
        self.pool = pool or config.pool("internal")
        self.quiet = False
        self._info_json = P.dumps(info)
        self._concurrency = int(info.get("concurrency", 0))
        self._on_signal = on_signal
        self._on_beat = on_beat
        self._health = health  # more live fields (event-loop lag, processor deaths)
        self._first = True
        self._rtts: list[int] = []
        # On a thread of its own: a beat must not wait behind another duty's slow tick. While
        # Redis fails, the backoff: the record must be back (and the processors fetching)
        # soon after Redis is.
        self._duty = Duty(config, "wurk-heartbeat", self._beat, lambda: config.heartbeat_interval,
                          component="heartbeat")
        self.outage = self._duty.outage
        # A stats key Redis will not count in (another type, no number): reported once, the
        # counts kept for a later flush; the beat goes on, or the record would expire under
        # a live worker and a reaper take its jobs in flight.
        self._stats_outage = Outage(config, "stats flush")
        self._process = psutil.Process()
        # Held through each beat, the thread's or a host's (``async_beat=False``): beats never
        # overlap, and ``stop`` waits for one under way.
        self._beating = threading.Lock()
        self._written = threading.Condition()
        self._written_at: float | None = None  # monotonic time the record was last written
        self._fresh_until = float("-inf")  # until when that record vouches for this process

    # -- thread -----------------------------------------------------------------------------
    def start(self) -> None:
        self._duty.start()

    def stop(self, timeout: float = 5.0) -> None:
        """No beat after this one returns; one under way (a host's too) gets ``timeout``."""
        self._duty.stop(timeout)  # from here every write of a late beat is refused
        if self._beating.acquire(timeout=timeout):  # a host's beat in progress ends first
            self._beating.release()
        else:
            log.warning("a heartbeat under way did not end within %.1f s", timeout)

    def is_alive(self) -> bool:
        return self._duty.is_alive()

    # -- visibility -------------------------------------------------------------------------
    def wait_visible(self, timeout: float) -> bool:
        """Whether this process's record is in Redis, recent enough to outlive the next beat,
        so its processors may take jobs; if not, wait up to ``timeout`` for a beat."""
        if time.monotonic() < self._fresh_until:  # the usual case, on every fetch: no lock
            return True
        with self._written:
            return self._written.wait_for(self._fresh, timeout)

    def _fresh(self) -> bool:
        return time.monotonic() < self._fresh_until

    def beat_age(self) -> float | None:
        """Seconds since the record was last written, None before the first beat."""
        written = self._written_at
        return None if written is None else time.monotonic() - written

    def _was_written(self) -> None:
        with self._written:
            self._written_at = written = time.monotonic()
            ttl = self.config.heartbeat_ttl
            # Written longer ago than this, the record may expire before the next beat lands.
            self._fresh_until = written + max(ttl - self.config.heartbeat_interval, ttl / 2)
            self._written.notify_all()

    # -- one beat ---------------------------------------------------------------------------
    def beat(self) -> bool:
        """One heartbeat, from any thread; returns False (after logging) when Redis refused
        it."""
        return self._duty.run()

    def _beat(self) -> None:
        with self._beating:
            try:
                self._still_beating()  # stopped: the record is gone, or going
                self._beat_once()
            except _Stopping:  # the stop came while this beat waited on Redis: the record goes
                return

    def _beat_once(self) -> None:
        try:
            self.counters.flush(self.pool, self.config.keys)
        except redis.ResponseError as exc:  # refused for good; not for now (RedisUnavailable)
            self._stats_outage.failed(exc)
        else:
            self._stats_outage.ended()
        self._write_work()
        rtt = self._ping()
        signal = self._write_process(rtt)
        self._was_written()
        if self.config.unreached.active:  # the first answer of a Redis absent at boot
            self.config.unreached.answered()
        self.config.close_idle_connections()  # redis_idle_timeout: pools nobody uses too
        fire(self.config, "beat")  # every beat, unlike "heartbeat"
        if self._on_beat is not None:
            self._on_beat()
        if signal and self._on_signal is not None:
            self._on_signal(signal)

    def _write_work(self) -> None:
        keys = self.config.keys
        work = self.busy.snapshot()
        ttl = self.config.heartbeat_ttl

        def send(r: Any) -> None:
            self._still_beating()
            pipe = r.pipeline(transaction=True)
            for key in (keys.work(self.name), keys.workers(self.name)):
                pipe.unlink(key)
                if work:
                    pipe.hset(key, mapping=work)
                    pipe.expire(key, ttl)
            pipe.execute()

        self.pool.run(send)

    def _ping(self) -> int:
        start = time.perf_counter()
        self.pool.run(lambda r: r.ping(), idempotent=True)
        rtt = int((time.perf_counter() - start) * 1_000_000)
        self._rtts = [*self._rtts[-(SLOW_RTT_READINGS - 1):], rtt]
        if len(self._rtts) == SLOW_RTT_READINGS and min(self._rtts) > SLOW_RTT_US:
            log.warning("Redis round trips are slow (last %d: %s µs); jobs wait on Redis",
                        SLOW_RTT_READINGS, self._rtts)
        return rtt

    def _write_process(self, rtt: int) -> str | None:
        keys = self.config.keys
        fields = {
            "info": self._info_json,
            "concurrency": self._concurrency,
            "busy": len(self.busy),
            "beat": repr(time.time()),
            "rtt_us": rtt,
            "quiet": "true" if self.quiet else "false",
            "rss": self._rss_kb(),
        }
        if self._health is not None:
            fields.update(self._health())

        def send(r: Any, pop: bool = True) -> list[Any]:
            self._still_beating()
            pipe = r.pipeline(transaction=True)
            pipe.sadd(keys.processes, self.name)
            pipe.hset(keys.process(self.name), mapping=fields)
            pipe.expire(keys.process(self.name), self.config.heartbeat_ttl)
            if pop:
                pipe.rpop(keys.signals(self.name))
            return pipe.execute(raise_on_error=False)  # type: ignore[no-any-return]

        replies = self.pool.run(send)
        if any(isinstance(reply, redis.ResponseError) for reply in replies):
            self._own_registry_keys(replies)
            popped = not isinstance(replies[3], redis.ResponseError)  # kept, not popped twice
            again = self.pool.run(lambda r: send(r, pop=not popped))
            for reply in again:
                if isinstance(reply, redis.ResponseError):
                    raise reply
            replies = [*again[:3], replies[3] if popped else again[3]]
        signal = replies[3]
        if self._first:  # once a process life, as Sidekiq's; a record written anew: ``beat``
            self._first = False
            fire(self.config, "heartbeat")
        # Anyone may have pushed it: bytes that are no UTF-8 read as a name no signal has.
        return signal.decode("utf-8", "replace") if isinstance(signal, bytes) else signal

    def _still_beating(self) -> None:
        """Raise ``_Stopping`` once the heartbeat is stopping: a beat that waited on Redis
        past its stop's timeout (an outage, a slow server) would otherwise write the record
        again after the stop removed it, and a process gone would show as alive for
        ``heartbeat_ttl``. Checked with the connection in hand, just before each write."""
        if self._duty.stopping:
            raise _Stopping

    def _own_registry_keys(self, replies: list[Any]) -> None:
        """A beat's registry key holding another Redis type than wurk keeps there (anyone may
        write one: ``processes``, this process's record or its signals list) failed that
        command at every beat — the record never written, or the process never listed, or a
        remote signal popped and lost. Such a key is deleted, with a warning naming it: the
        live processes put themselves back in ``processes`` at their next beat. Any other
        refusal is raised."""
        keys = self.config.keys
        owned = ((keys.processes, "set"), (keys.process(self.name), "hash"),
                 (keys.signals(self.name), "list"))
        found = self.pool.run(lambda r: [text(r.type(key)) for key, _ in owned])
        wrong = [(key, kind, held) for (key, kind), held in zip(owned, found, strict=True)
                 if held not in (kind, "none")]
        if not wrong:
            raise next(reply for reply in replies if isinstance(reply, redis.ResponseError))
        for key, kind, held in wrong:
            log.warning("heartbeat: %s held a %s, not the %s wurk keeps there (written by "
                        "something else); deleted", key, held, kind)
        self.pool.run(lambda r: r.delete(*(key for key, _, _ in wrong)))

    def _rss_kb(self) -> int:
        try:
            return int(self._process.memory_info().rss // 1024)
        except psutil.Error:
            return 0

    # -- exit -------------------------------------------------------------------------------
    def clear(self) -> None:
        """Last stats flush, then remove this process from the registry (best effort)."""
        keys = self.config.keys
        try:
            self.counters.flush(self.pool, keys)
        except Exception as exc:
            report_error(self.config, exc, {"context": "final stats flush"})

        def send(r: Any) -> None:
            pipe = r.pipeline(transaction=False)
            pipe.srem(keys.processes, self.name)
            pipe.unlink(keys.work(self.name), keys.workers(self.name), keys.process(self.name))
            pipe.execute()

        try:
            self.pool.run(send)
        except Exception as exc:
            report_error(self.config, exc, {"context": "removing the process record"})


class _Stopping(Exception):
    """A beat's write found the heartbeat stopping (``Heartbeat._still_beating``)."""
