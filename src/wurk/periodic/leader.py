"""Leader election: one process per Redis leads, with a fencing token that only grows.

1. ``Leadership.start`` campaigns at once, then the leader renews every
   ``leader_renew_interval`` (15 s) and holds ``dear-leader`` for twice that; a follower
   tries again every ``leader_check_interval`` (60 s) or as soon as the holder's key runs
   out, whichever is sooner, so a killed leader is replaced within the key's life.
   Campaign and renewal are one Lua script (``leader_campaign.lua``) on Redis's clock.
2. Each new term increments ``leader-token``; ``token`` is that value while leading (the
   fencing token: the periodic scripts refuse a write whose token is not the newest).
3. Leadership lapses locally when a renewal has not succeeded within the key's life,
   counted from before the renewal was sent, so this process never believes it leads
   longer than Redis does.
4. ``on_change(leading)`` runs on every change (the launcher fires the ``leader`` /
   ``follower`` lifecycle events and updates the process title); it runs on this loop's
   thread, so hooks must be quick.
5. ``stop`` steps down (a compare-and-delete, ``leader_resign.lua``); the launcher calls it
   on quiet and on shutdown. A campaign still on its way when ``stop`` stopped waiting
   for it steps down again once it is answered: it never leads after the stop. With
   ``leader=False`` (``WURK_LEADER=false``) nothing runs.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable

from .. import scripts, stored
from ..config import Config
from ..connections.pool import RedisPool
from ..reporting import report_error
from ..runtime.clock import SYSTEM, Clock
from ..runtime.duty import Duty
from ..runtime.timer import Timers

__all__ = ["Leadership"]

log = logging.getLogger("wurk")

LEADER_THREAD = "wurk-leader"
# A follower wakes this long after the holder's key should have expired: the key is gone
# by then even if the two clocks disagree by a few milliseconds.
EXPIRY_MARGIN = 0.05
# A holder's key living longer than this many of our terms (and at least LONG_HOLD_MIN
# seconds: a Ruby leader's own term) was not set by an election: it is warned about.
LONG_HOLD_TERMS = 10
LONG_HOLD_MIN = 600


class Leadership:
    """This process's side of the election (``config.is_leader()`` reads it)."""

    def __init__(self, config: Config, identity: str, *,
                 on_change: Callable[[bool], None] | None = None,
                 pool: RedisPool | None = None, timers: Timers | None = None,
                 clock: Clock = SYSTEM) -> None:
        self.config = config
        self.identity = identity
        self._clock = clock
        self.pool = pool if pool is not None else config.pool("internal")
        client = self.pool.client
        self._campaign = client.register_script(
            scripts.Script("leader_campaign.lua", prelude=("owned.lua",)).text)
        self._resign = client.register_script(scripts.source("leader_resign.lua"))
        self._on_change = on_change
        # (token, monotonic time the term lapses at): one attribute, so a reader on another
        # thread sees a whole term or none.
        self._term: tuple[int, float] | None = None
        self._announced = False
        self._holder_left: float | None = None  # seconds left on another holder's key
        self._warned_holder: str | None = None
        self._change_lock = threading.Lock()
        self._started = False
        self._duty = Duty(config, LEADER_THREAD, self._turn, self._next_wait, first_wait=0.0,
                          component="leader election", on_failure=self._turn_failed,
                          wake_by=self._until_lapse, host=timers, clock=clock)

    @property
    def ttl(self) -> int:
        """Seconds ``dear-leader`` lives after each renewal: two renewal intervals."""
        return max(1, math.ceil(2 * self.config.leader_renew_interval))

    # -- what other code asks ---------------------------------------------------------------
    def is_leader(self) -> bool:
        term = self._term
        return term is not None and self._clock.monotonic() < term[1]

    @property
    def token(self) -> int | None:
        """The fencing token of the current term, while this process leads."""
        term = self._term
        return term[0] if term is not None and self._clock.monotonic() < term[1] else None

    def term(self) -> int | None:
        return self.token

    def lost(self) -> None:
        """A fenced write was refused: another process leads. Believe it at once."""
        self._term = None
        self._announce(False)

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        if not self.config.leader:
            log.info("leader election: this process does not campaign (leader=false)")
            return
        self._started = True
        self._duty.start()

    def is_alive(self) -> bool:
        return self._duty.is_alive()

    def stop(self, timeout: float) -> None:
        """Stop campaigning and step down (the key is deleted only if it names us)."""
        self._duty.stop(timeout)
        self._term = None
        if self._started:  # even after a local lapse the key may still name us
            self._step_down()
        self._announce(False)

    def _step_down(self) -> None:
        try:
            self.pool.run(lambda r: self._resign(keys=[self.config.keys.leader],
                                                 args=[self.identity], client=r))
        except Exception as exc:
            report_error(self.config, exc, {"context": "leader election: stepping down"})
        else:
            log.debug("leader election: stepped down")

    # -- the loop ---------------------------------------------------------------------------
    def _turn(self) -> None:
        if self._term is not None and not self.is_leader():
            self._lapse()
        sent = self._clock.monotonic()
        held = self.token
        keys = self.config.keys
        reply = self.pool.run(lambda r: self._campaign(
            keys=[keys.leader, keys.leader_token],
            args=[self.identity, self.ttl, "" if held is None else held], client=r))
        leading = int(reply[0]) == 1
        replaced = reply[2:] if leading else reply[3:]
        for key, kind in zip(replaced[0::2], replaced[1::2], strict=True):
            log.warning("leader election: %s held a %s, not wurk's; deleted",
                        stored.shown(key, 200), stored.shown(kind, 20))
        if self._duty.stopping:
            # ``stop`` gave up waiting for this turn (a slow Redis) and has stepped down
            # already: a term won now would outlive it, the key naming a process that no
            # longer polls for its whole life.
            if leading:
                self._step_down()
            return
        if leading:
            self._lead(int(reply[1]), sent)
        else:
            self._follow(stored.shown(reply[1], 200), int(reply[2]))

    def _lead(self, token: int, sent: float) -> None:
        previous = self._term
        self._term = (token, sent + self.ttl)
        self._holder_left = None
        if previous is None or previous[0] != token:
            log.info("leader election: this process leads (term %d)", token)
        self._announce(True)

    def _follow(self, holder: str, pttl_ms: int) -> None:
        if self._term is not None:
            log.warning("leader election: lost leadership to %s", holder)
        self._term = None
        self._announce(False)
        if self._warned_holder != holder:
            if pttl_ms == -1:
                self._warned_holder = holder
                log.warning("leader election: dear-leader is held by %s with no expiry, so "
                            "it never lapses; delete the key if that process is gone", holder)
            elif pttl_ms > max(LONG_HOLD_TERMS * self.ttl, LONG_HOLD_MIN) * 1000:
                self._warned_holder = holder
                log.warning("leader election: dear-leader is held by %s for another %d s, "
                            "far longer than an elected leader holds it (%d s), so no other "
                            "process leads until then; delete the key if that process is "
                            "gone", holder, pttl_ms // 1000, self.ttl)
        self._holder_left = pttl_ms / 1000 if pttl_ms >= 0 else (0.0 if pttl_ms == -2 else None)

    def _lapse(self) -> None:
        log.warning("leader election: leadership lapsed (not renewed within %d s)", self.ttl)
        self._term = None
        self._announce(False)

    def _turn_failed(self, exc: Exception) -> None:
        if self._term is not None and not self.is_leader():
            self._lapse()

    def _next_wait(self) -> float:
        """The renewal while leading, else the next look (while Redis fails, the duty's
        backoff instead)."""
        config = self.config
        if self._term is not None:
            return config.leader_renew_interval
        wait = config.leader_check_interval
        if self._holder_left is not None:
            wait = min(wait, self._holder_left + EXPIRY_MARGIN)
        return wait

    def _until_lapse(self) -> float | None:
        """Seconds until the current term lapses (the duty wakes then, to say so)."""
        term = self._term
        return None if term is None else max(0.0, term[1] - self._clock.monotonic())

    def _announce(self, leading: bool) -> None:
        with self._change_lock:
            if self._announced == leading:
                return
            self._announced = leading
        if not leading:
            log.info("leader election: this process follows")
        if self._on_change is not None:
            try:
                self._on_change(leading)
            except Exception as exc:
                report_error(self.config, exc, {"context": "leader election: on change"})
