"""The rolling-restart state machine: one slot at a time, replacement first, never blocking.

1. ``enqueue(pids)`` queues children to replace (USR1 queues them all; a child over the memory
   limit or past ``max_jobs`` queues itself). A pid already queued or being replaced is not
   queued twice, so a recycle never overlaps a restart of the same child. The replacement
   being brought up is queued like any child: it works while its predecessor drains, and a
   ``max_jobs`` it reaches then (said once) or a memory limit is served once this step ends.
2. ``advance()`` moves the current replacement one phase per supervise tick:
   ``SPAWN`` fork the replacement (a failed fork waits a backoff and tries again) →
   ``BOOT`` wait until its first heartbeat (bounded by ``heartbeat_wait``) → TERM the old
   child → ``DRAIN`` wait for it to exit (bounded by ``drain_timeout``, then SIGKILL).
   The old child keeps working until its replacement is up, so capacity never drops.
3. ``claim_exit(pid)`` tells the supervisor whether a dead child was this machine's business:
   an old child it retired, or a replacement that died booting (tried again after a backoff).
4. ``abort()`` forgets everything (TERM wins over a restart in progress); ``retiring()``
   names the old child already sent TERM, which the swarm's stop must not send a second
   one (a worker takes a second TERM as "stop now").
"""

from __future__ import annotations

import enum
import logging
import signal
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .respawn import RespawnSchedule

__all__ = ["Claim", "Phase", "RestartHooks", "RollingRestart"]

log = logging.getLogger("wurk")


class Phase(enum.Enum):
    SPAWN = "spawn"
    BOOT = "boot"
    DRAIN = "drain"


class Claim(enum.Enum):
    """What a child's exit meant to the restart machine."""

    NONE = "none"          # not its business: the supervisor handles it as a crash
    RETIRED = "retired"    # an old child it replaced: the slot is already served
    RETRYING = "retrying"  # its replacement died booting: the old child still serves the slot


@dataclass(frozen=True)
class RestartHooks:
    """What the machine may do to the world; the supervisor provides them."""

    spawn: Callable[[int], int]          # fork a child for a slot, return its pid
    kill: Callable[[int, int], None]     # send a signal to a pid
    seen: Callable[[int], bool]          # has this pid written its first heartbeat?
    slot_of: Callable[[int], int | None]  # the slot of a live child, None when it is gone
    now: Callable[[], float]


@dataclass
class _Step:
    old: int
    slot: int
    phase: Phase
    due: float  # SPAWN: when to fork; BOOT: heartbeat deadline; DRAIN: SIGKILL deadline
    replacement: int | None = None
    killed: bool = False


class RollingRestart:
    """Replaces queued children one at a time; owned by the supervise loop's thread."""

    def __init__(self, hooks: RestartHooks, *, heartbeat_wait: float, drain_timeout: float,
                 backoff: RespawnSchedule) -> None:
        self.hooks = hooks
        self.heartbeat_wait = heartbeat_wait
        self.drain_timeout = drain_timeout
        self.backoff = backoff
        self._queue: deque[int] = deque()
        self._current: _Step | None = None

    # -- what is going on ---------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self._current is not None or bool(self._queue)

    @property
    def current(self) -> _Step | None:
        return self._current

    def retiring(self) -> int | None:
        """The old child this machine has sent TERM already (draining), if any."""
        step = self._current
        return step.old if step is not None and step.phase is Phase.DRAIN else None

    def involves(self, pid: int) -> bool:
        """Whether ``pid`` is queued or being replaced: asking again changes nothing."""
        step = self._current
        return pid in self._queue or (step is not None and pid == step.old)

    # -- requests ---------------------------------------------------------------------------
    def enqueue(self, pids: Iterable[int]) -> None:
        """Queue ``pids`` for replacement after what is queued. The current step's
        replacement is queued too, not dropped: its request (a ``max_jobs`` reached, which
        it says once) waits for this step's end rather than being lost for its life."""
        for pid in pids:
            if not self.involves(pid):
                self._queue.append(pid)

    def abort(self) -> None:
        self._queue.clear()
        self._current = None
        self.backoff.clear()

    # -- one tick ---------------------------------------------------------------------------
    def advance(self) -> None:
        step = self._current or self._next()
        if step is None:
            return
        if step.phase is Phase.SPAWN:
            self._spawn(step)
        elif step.phase is Phase.BOOT:
            self._await_boot(step)
        else:
            self._await_drain(step)

    def _next(self) -> _Step | None:
        while self._queue:
            old = self._queue.popleft()
            slot = self.hooks.slot_of(old)
            if slot is not None:  # a child that died while queued was respawned as a crash
                self._current = _Step(old, slot, Phase.SPAWN, self.hooks.now())
                return self._current
        return None

    def _spawn(self, step: _Step) -> None:
        if self.hooks.now() < step.due:
            return
        try:
            step.replacement = self.hooks.spawn(step.slot)
        except OSError as exc:  # EAGAIN, ENOMEM: try again later, keep the old child working
            delay = self.backoff.fail(step.slot)
            step.due = self.hooks.now() + delay
            log.warning("swarm: forking a replacement for slot %d failed (%s); trying again "
                        "in %.1f s", step.slot, exc, delay)
            return
        step.phase, step.due = Phase.BOOT, self.hooks.now() + self.heartbeat_wait
        log.info("swarm: replacing child %d of slot %d with %d", step.old, step.slot,
                 step.replacement)

    def _await_boot(self, step: _Step) -> None:
        if step.replacement is not None and self.hooks.seen(step.replacement):
            self.backoff.reset(step.slot)
        elif self.hooks.now() < step.due:
            return
        else:
            log.warning("swarm: replacement %d of slot %d sent no heartbeat within %.0f s; "
                        "stopping child %d anyway", step.replacement, step.slot,
                        self.heartbeat_wait, step.old)
        self.hooks.kill(step.old, signal.SIGTERM)
        step.phase, step.due = Phase.DRAIN, self.hooks.now() + self.drain_timeout

    def _await_drain(self, step: _Step) -> None:
        if step.killed or self.hooks.now() < step.due:
            return
        log.warning("swarm: child %d did not exit within %.0f s of TERM; killing it",
                    step.old, self.drain_timeout)
        self.hooks.kill(step.old, signal.SIGKILL)
        step.killed = True

    # -- exits ------------------------------------------------------------------------------
    def claim_exit(self, pid: int) -> Claim:
        step = self._current
        if step is None:
            return Claim.NONE
        if pid == step.old:
            self._current = None
            # Died before its replacement was forked: nobody serves the slot, a crash.
            return Claim.NONE if step.replacement is None else Claim.RETIRED
        if pid == step.replacement and step.phase is Phase.BOOT:
            delay = self.backoff.fail(step.slot)
            step.replacement, step.phase = None, Phase.SPAWN
            step.due = self.hooks.now() + delay
            log.warning("swarm: replacement %d of slot %d died booting; trying again in "
                        "%.1f s", pid, step.slot, delay)
            return Claim.RETRYING
        return Claim.NONE
