"""The swarm supervisor: a parent that forks N worker children and keeps them running.

1. ``boot``: signal handlers first (a TERM during boot is queued, not fatal), the parent's
   Redis pools closed (children make their own), the process nonce made (children inherit
   it, so the parent knows each child's identity), then one child per slot.
2. ``supervise``: a tick every ``settings.tick`` seconds that never sleeps on anything else —
   read signals and children's notices; reap every exited child; look for first heartbeats;
   respawn slots whose backoff is due; advance the rolling restart; check memory.
3. Signals: TERM/INT stop (every child drains within timeout + grace, then SIGKILL); a
   second one, ``HURRY_AFTER`` or more after the first, hurries (TERM relayed again, so each
   child pushes its unfinished jobs back and exits; SIGKILL within the grace); TSTP quiets
   the swarm, globally and for good (children forked later boot quiet); USR1 starts a
   rolling restart; USR2 is relayed (log reopen); TTIN (or INFO) dumps threads everywhere.
4. A crashed child is respawned after its slot's backoff. A slot whose child cannot boot
   ``boot_attempts`` times in a row — it exits before its first heartbeat, or says it could
   not boot (``boot-error``, exit 78) though a heartbeat was seen — stops the swarm with
   that child's error (``SwarmError``) instead of respawning forever.
5. Recycling: a child over ``max_memory_mb`` of RSS, or announcing it ran ``max_jobs`` jobs,
   goes through the rolling restart — replacement first.
6. ``request_stop`` may be called from any thread (a web host's exit hook).
7. systemd (``Type=notify``; ``wurk.runtime.sdnotify``), for the swarm as one service: the
   parent says ``READY=1`` once every slot's child has written its first heartbeat,
   ``STOPPING=1`` when its stop begins, its status when it changes and ``WATCHDOG=1`` from
   the supervise loop; children never talk to systemd (their environment loses the
   socket's name at fork). Hosted, the host decides what systemd hears: nothing is sent.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import psutil

from ..config import Config
from ..connections.locate import resolve_url
from ..connections.pool import RedisPool
from ..errors import SwarmError
from ..runtime.identity import Identity, hostname, process_nonce
from ..runtime.proctitle import set_title
from ..runtime.sdnotify import Notifier, Reporter, forget_environment
from ..runtime.signals import (
    DUMP_SIGNALS,
    HURRY_AFTER,
    HURRY_HINT,
    STOP_SIGNALS,
    SignalPipe,
    dump_threads,
    reopen_logs,
)
from .child import EXIT_BOOT_FAILED, EXIT_CRASHED, FORK_SIGNALS, ChildSpec, NoticePipe, run_child
from .respawn import RespawnSchedule
from .restart import Claim, RestartHooks, RollingRestart
from .settings import SwarmSettings

__all__ = ["Child", "Supervisor", "describe_status"]

log = logging.getLogger("wurk")

# The parent's heartbeat probe must not stall the loop: a hung Redis costs at most this much
# per tick, and a failed probe only means "not seen yet".
PROBE_TIMEOUT = 0.5
# After SIGKILLing stragglers, how long to wait for the kernel to let them go before giving up
# on a child stuck in uninterruptible I/O.
KILL_REAP_WAIT = 5.0
MB = 1024 * 1024


@dataclass
class Child:
    """A live child as the parent sees it."""

    pid: int
    slot: int
    identity: str
    spawned_at: float
    seen: bool = False  # its first heartbeat is in Redis
    error: str | None = None  # what it announced when it could not boot
    # A pidfd (Linux): a signal sent through it reaches this child only, never a process
    # that got its pid after it was reaped. None where there is none: the pid is used.
    handle: int | None = None
    # Its slot's boot failures in a row when it was forked: seeing its heartbeat forgets
    # them, and a boot that fails after that heartbeat carries the count on from here.
    boot_failures_before: int = 0


def _handle_of(pid: int) -> int | None:
    """A pidfd for the child ``pid``, just forked; None where the system has none. A host
    that ignores SIGCHLD has the kernel reap its children the moment they exit, and their
    pids are free at once: signals by pid could then reach whatever got one since."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        handle: int = opener(pid)
    except OSError:  # gone already, or pidfds unsupported by this kernel
        return None
    return handle


def _close_handle(child: Child) -> None:
    if child.handle is not None:
        with contextlib.suppress(OSError):
            os.close(child.handle)
        child.handle = None


def describe_status(status: int | None) -> str:
    if status is None:
        return "exited (status unknown)"
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


class Supervisor:
    """Forks, watches and replaces the children of one swarm; one thread runs it."""

    def __init__(self, config: Config, settings: SwarmSettings, *, hosted: bool = False,
                 clock: Callable[[], float] = time.monotonic,
                 notifier: Notifier | None = None) -> None:
        """``notifier``: systemd's notify socket (``wurk swarm``); none, nothing is sent."""
        self.config = config
        self.settings = settings
        # Hosted in another program (a web server): it keeps its signal handlers and pools.
        self.hosted = hosted
        self.children: dict[int, Child] = {}
        self._clock = clock
        self._signals = SignalPipe()
        self._notices = NoticePipe()
        self._probe: RedisPool | None = None
        self._backoff = self._new_backoff()
        self._boot_failures: dict[int, int] = {}
        self._restart = RollingRestart(
            RestartHooks(spawn=self._spawn, kill=self._kill, seen=self._seen,
                         slot_of=self._slot_of, now=clock),
            heartbeat_wait=settings.heartbeat_wait,
            drain_timeout=config.timeout + settings.shutdown_grace,
            backoff=self._new_backoff(),
        )
        self._lock = threading.Lock()
        self._state = "new"  # new → booted → closed
        self._quiet = False
        self._stopping = False
        self._stop_began = math.inf
        self._hurried = False
        self._deadline = math.inf
        self._killed_at: float | None = None
        self._probe_failing = False
        self._last_memory_check = -math.inf
        self._notifier = notifier if notifier is not None else Notifier()
        self._systemd = Reporter(self._notifier, self._status, clock=clock)
        self.error: str | None = None

    def _new_backoff(self) -> RespawnSchedule:
        s = self.settings
        return RespawnSchedule(base=s.backoff_base, cap=s.backoff_max, reset_after=s.backoff_reset,
                       clock=self._clock)

    # -- the whole life ---------------------------------------------------------------------
    def run(self) -> None:
        """Boot, supervise until stopped; raises ``SwarmError`` if a child cannot boot."""
        try:
            self.boot()
            self.supervise()
        finally:
            self.close()

    def boot(self) -> None:
        if self._state != "new":
            raise RuntimeError("this swarm was already booted")
        self._state = "booted"
        if not self.hosted:
            self._signals.install()
            self.config.close()
        url = resolve_url(self.config.redis_url, self.config.home,
                          start=self.config.start_embedded)
        self._probe = RedisPool(url, size=1, name="wurk-swarm", socket_timeout=PROBE_TIMEOUT)
        process_nonce()
        log.info("swarm: forking %d children (pid %d supervises)", self.settings.count,
                 os.getpid())
        for slot in range(self.settings.count):
            self._respawn(slot)
        self._set_title()

    def supervise(self) -> None:
        while not self.finished:
            self.tick()
        if self.error is not None:
            raise SwarmError(self.error)
        log.info("swarm: every child has stopped")

    @property
    def finished(self) -> bool:
        return self._stopping and not self.children

    def close(self) -> None:
        with self._lock:
            if self._state == "closed":
                return
            self._state = "closed"
            self._signals.close()
            self._notices.close()
            self._notifier.close()
        if self._probe is not None:
            self._probe.close()

    def request_stop(self) -> None:
        """Ask the supervise loop to stop the swarm; safe from any thread."""
        with self._lock:
            if self._state != "closed":
                self._signals.push("TERM")

    def drain(self) -> None:
        """Stop every child from this thread; for when no supervise loop will (hosted)."""
        if not self.children:
            return
        self.stop()
        while not self.finished:
            self.tick()

    # -- one tick ---------------------------------------------------------------------------
    def tick(self) -> None:
        for name in self._signals.wait(self.settings.tick):
            self._on_signal(name)
        self._read_notices()
        self._reap()
        if self._stopping:
            self._enforce_deadline()
        else:
            self._watch_heartbeats()
            self._respawn_due()
            self._restart.advance()
            self._check_memory()
        self._tell_systemd()

    def _on_signal(self, name: str) -> None:
        if name in STOP_SIGNALS:
            self._on_stop_signal(name)
        elif name == "TSTP":
            self.quiet()
        elif name == "USR1":
            self.rolling_restart()
        elif name == "USR2":
            reopen_logs()
            self._relay(signal.SIGUSR2)
        elif name in DUMP_SIGNALS:  # each child dumps on TTIN, whichever came here
            dump_threads()
            self._relay(signal.SIGTTIN)

    def _on_stop_signal(self, name: str) -> None:
        if not self._stopping:
            self.stop()
        elif self._clock() - self._stop_began >= HURRY_AFTER:
            self.hurry()
        else:
            # A terminal's Ctrl-C reaches the whole process group, and a process manager may
            # pass it on too: the same request arriving twice, not a second one.
            log.debug("swarm: %s right after the first stop signal: taken as the same one",
                      name)

    # -- requests ---------------------------------------------------------------------------
    def stop(self) -> None:
        """Relay TERM, then wait up to timeout + grace before SIGKILL (non-blocking)."""
        if self._stopping:
            return
        self._stopping = True
        self._stop_began = self._clock()
        # Draining already (TERMed by the restart): another TERM would be its second, which
        # hurries it; it keeps its drain, under the swarm's deadline now.
        retiring = self._restart.retiring()
        self._restart.abort()
        self._backoff.clear()
        budget = self.config.timeout + self.settings.shutdown_grace
        self._deadline = self._stop_began + budget
        # Hosted, the host owns the signals: a second Ctrl-C is not ours to promise.
        hint = "" if self.hosted else f"; {HURRY_HINT}"
        log.info("swarm: stopping %d children (up to %.0f s)%s", len(self.children), budget,
                 hint)
        self._systemd.stopping(f"stopping: {len(self.children)} children get up to "
                               f"{budget:g} s")
        for pid in list(self.children):
            if pid != retiring:
                self._kill(pid, signal.SIGTERM)
        self._set_title()

    def hurry(self) -> None:
        """A stop in progress ends its wait now: TERM is relayed again, which each child
        takes as its second (its unfinished jobs go back to their queues, then it exits),
        and the SIGKILL deadline comes in to at most ``shutdown_grace`` from now."""
        if not self._stopping or self._hurried:
            return
        self._hurried = True
        self._deadline = min(self._deadline, self._clock() + self.settings.shutdown_grace)
        log.info("swarm: stopping now: %d children push their unfinished jobs back to their "
                 "queues and exit (killed in %.0f s at the latest)", len(self.children),
                 max(0.0, self._deadline - self._clock()))
        self._relay(signal.SIGTERM)

    def quiet(self) -> None:
        """Quiet every child, now and later: children forked from now on boot quiet."""
        if self._quiet:
            return
        self._quiet = True
        log.info("swarm: quiet; children stop fetching and every new child boots quiet")
        self._relay(signal.SIGTSTP)
        self._set_title()

    def rolling_restart(self) -> None:
        if self._stopping:
            return
        log.info("swarm: rolling restart of %d children, one at a time", len(self.children))
        self._restart.enqueue(sorted(self.children, key=lambda pid: self.children[pid].slot))

    # -- forking ----------------------------------------------------------------------------
    def _spawn(self, slot: int) -> int:
        """Fork a child for ``slot``; returns its pid (the child never returns from here)."""
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # or buffered output would be written by parent and child
        parent = os.getpid()
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, FORK_SIGNALS)
        try:
            pid = os.fork()
            if pid == 0:
                self._become_child(slot, parent)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        self._adopt(pid, slot)
        self._set_title()
        return pid

    def _adopt(self, pid: int, slot: int) -> Child:
        """The record of ``pid``, just forked for ``slot``."""
        identity = str(Identity(hostname(), pid, process_nonce()))
        child = self.children[pid] = Child(
            pid, slot, identity, self._clock(), handle=_handle_of(pid),
            boot_failures_before=self._boot_failures.get(slot, 0))
        return child

    def _become_child(self, slot: int, parent: int) -> NoReturn:
        try:
            # The parent's pipe goes first: a signal aimed at this child must not be read by
            # the parent's loop (the handlers are replaced before signals are unblocked).
            self._signals.close()
            self._notices.close_reader()
            forget_environment()  # only the main pid talks to systemd (NotifyAccess=main)
            for sibling in self.children.values():  # the parent's handles on its siblings
                _close_handle(sibling)
            if self._probe is not None:
                self._probe.reset_after_fork()
        except BaseException:
            os._exit(EXIT_CRASHED)
        run_child(self.config, ChildSpec(slot=slot, parent_pid=parent, notices=self._notices,
                                         quiet=self._quiet, max_jobs=self.settings.max_jobs))

    def _respawn(self, slot: int) -> None:
        try:
            self._spawn(slot)
        except OSError as exc:  # EAGAIN, ENOMEM: the slot stays pending, tried again later
            delay = self._backoff.fail(slot)
            log.warning("swarm: fork for slot %d failed (%s); trying again in %.1f s", slot,
                        exc, delay)
            return
        self._backoff.consume(slot)

    def _respawn_due(self) -> None:
        for slot in self._backoff.due():
            self._respawn(slot)

    def _kill(self, pid: int, signum: int) -> None:
        """Signal the child ``pid``; nothing for a pid that is no child of ours (any more):
        once reaped, its number may be anyone's."""
        child = self.children.get(pid)
        if child is None:
            return
        with contextlib.suppress(ProcessLookupError):  # already gone: the reaper sees it
            if child.handle is not None:
                signal.pidfd_send_signal(child.handle, signum)
            else:
                os.kill(pid, signum)

    def _relay(self, signum: int) -> None:
        for pid in list(self.children):
            self._kill(pid, signum)

    # -- children's ends --------------------------------------------------------------------
    def _reap(self) -> None:
        # Our own children by pid, never waitpid(-1): a web host may have children of its own.
        exited = False
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else (a host's SIGCHLD handler)
                done, status = pid, None
            if done:
                exited = True
                child = self.children.pop(pid)
                _close_handle(child)
                self._on_exit(child, status)
        if exited:
            self._set_title()

    def _on_exit(self, child: Child, status: int | None) -> None:
        how = describe_status(status)
        if self._stopping:
            log.info("swarm: child %d (slot %d) %s", child.pid, child.slot, how)
            return
        claim = self._restart.claim_exit(child.pid)
        if claim is Claim.RETIRED:
            log.info("swarm: child %d (slot %d) was replaced and %s", child.pid, child.slot,
                     how)
            return
        if self._could_not_boot(child, status) and self._boot_failed(child, how):
            return
        if claim is Claim.NONE:
            delay = self._backoff.fail(child.slot, self._clock() - child.spawned_at)
            log.warning("swarm: child %d (slot %d) %s; respawning slot %d in %.1f s",
                        child.pid, child.slot, how, child.slot, delay)

    def _could_not_boot(self, child: Child, status: int | None) -> bool:
        """Whether an exit was a boot's failure: before the first heartbeat, or by the
        child's own word — a boot that failed after its first beat, which this parent may
        have seen (its ``boot-error`` notice, its exit 78). Taken for a crash, such a slot
        was respawned for ever at the backoff's cap and the swarm never said why."""
        if child.error is None:
            self._read_notices(child)
        if not child.seen or child.error is not None:
            return True
        return status is not None and os.waitstatus_to_exitcode(status) == EXIT_BOOT_FAILED

    def _boot_failed(self, child: Child, how: str) -> bool:
        """Count a boot's failure; True when the swarm now stops."""
        reason = child.error or f"the child {how}"
        when = "while booting" if child.seen else "before its first heartbeat"
        count = max(self._boot_failures.get(child.slot, 0), child.boot_failures_before) + 1
        self._boot_failures[child.slot] = count
        log.warning("swarm: child %d (slot %d) %s %s (%d of %d): %s", child.pid, child.slot,
                    how, when, count, self.settings.boot_attempts, reason)
        if count < self.settings.boot_attempts:
            return False
        self.error = (f"a swarm child cannot boot: slot {child.slot} failed {count} times in "
                      f"a row {when}; last error: {reason}")
        log.error("swarm: %s; stopping the swarm", self.error)
        self.stop()
        return True

    def _enforce_deadline(self) -> None:
        if not self.children:
            return
        now = self._clock()
        if self._killed_at is None and now >= self._deadline:
            log.warning("swarm: %d children still running after the shutdown budget; "
                        "killing them", len(self.children))
            self._relay(signal.SIGKILL)
            self._killed_at = now
        elif self._killed_at is not None and now - self._killed_at > KILL_REAP_WAIT:
            log.error("swarm: children %s survive SIGKILL; giving up on them",
                      sorted(self.children))
            for child in self.children.values():
                _close_handle(child)
            self.children.clear()

    # -- what children tell us --------------------------------------------------------------
    def _read_notices(self, exited: Child | None = None) -> None:
        """Act on what children wrote; ``exited``, reaped just now, still gets its own (its
        ``boot-error``, written just before it exited)."""
        for notice in self._notices.receive():
            child = self.children.get(notice.pid)
            if child is None and exited is not None and notice.pid == exited.pid:
                child = exited
            if child is None:
                continue
            if notice.kind == "boot-error":
                child.error = notice.text
            elif notice.kind == "recycle" and not self._stopping and child is not exited:
                log.info("swarm: child %d (slot %d) asks to be replaced (%s)", child.pid,
                         child.slot, notice.text)
                self._restart.enqueue([child.pid])

    def _watch_heartbeats(self) -> None:
        unseen = [child for child in self.children.values() if not child.seen]
        if not unseen or self._probe is None:
            return
        keys = [self.config.keys.process(child.identity) for child in unseen]
        try:
            found = self._probe.run(lambda r: _exist(r, keys), idempotent=True)
        except Exception as exc:
            if not self._probe_failing:
                log.warning("swarm: cannot read children's heartbeats (%s); will retry", exc)
            self._probe_failing = True
            return
        self._probe_failing = False
        for child, exists in zip(unseen, found, strict=True):
            if exists:
                child.seen = True
                self._boot_failures.pop(child.slot, None)

    def _seen(self, pid: int) -> bool:
        child = self.children.get(pid)
        return child is not None and child.seen

    def _slot_of(self, pid: int) -> int | None:
        child = self.children.get(pid)
        return None if child is None else child.slot

    # -- systemd ---------------------------------------------------------------------------
    def _tell_systemd(self) -> None:
        """``READY=1`` once every slot's child has beaten; a watchdog ping when due."""
        if not self._notifier.enabled:
            return
        if not self._systemd.told_ready and not self._stopping and \
                len(self.children) >= self.settings.count and \
                all(child.seen for child in self.children.values()):
            self._systemd.ready()
        self._systemd.tick()

    def _status(self) -> str:
        state = "stopping" if self._stopping else "quiet" if self._quiet else "running"
        seen = sum(1 for child in self.children.values() if child.seen)
        return f"{state}: {seen} children up, {self.settings.count} wanted"

    # -- memory -----------------------------------------------------------------------------
    def _check_memory(self) -> None:
        limit = self.settings.max_memory_mb
        now = self._clock()
        if not limit or now - self._last_memory_check < self.settings.memory_check_interval:
            return
        self._last_memory_check = now
        for child in list(self.children.values()):
            if not child.seen or self._restart.involves(child.pid):
                continue  # still booting, or already being replaced
            rss = _rss_mb(child.pid)
            if rss is not None and rss >= limit:
                log.warning("swarm: child %d (slot %d) uses %.0f MB, over the %d MB limit; "
                            "replacing it", child.pid, child.slot, rss, limit)
                self._restart.enqueue([child.pid])

    # -- the process title ------------------------------------------------------------------
    def _set_title(self) -> None:
        if self.hosted:
            return  # the host's process, the host's title
        set_title("swarm", self.config.tag,
                  f"[{len(self.children)} of {self.settings.count} children]",
                  "quiet" if self._quiet else "", "stopping" if self._stopping else "")


def _exist(r: Any, keys: list[str]) -> list[Any]:
    pipe = r.pipeline(transaction=False)
    for key in keys:
        pipe.exists(key)
    return pipe.execute()  # type: ignore[no-any-return]


def _rss_mb(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).memory_info().rss) / MB
    except psutil.Error:
        return None
