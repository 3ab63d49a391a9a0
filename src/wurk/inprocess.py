"""Running wurk inside another program: a threads-only worker, or a hosted swarm.

1. ``InProcessWorker(config)``: a worker's launcher inside the host's process (a web server),
   threads only, no signal handlers of its own; ``start()`` / ``quiet()`` / ``stop()``.
   The host calls ``stop()`` from its graceful-shutdown hook. ``embed(config)`` is the
   one-line form returning a started one.
2. The drain is registered for the interpreter's exit before anything starts, so a boot
   that fails half-way still drains what did start; ``stop()`` removes it. It runs among
   ``threading``'s exit hooks, ahead of ``concurrent.futures``' join of every pool thread
   (which has no timeout, and comes before ``atexit``'s hooks): an async job's helper
   thread — a sync server link around it, ``asyncio.to_thread`` — would otherwise hold the
   exit for the job's whole length, past ``timeout``. ``atexit`` keeps it too, for an exit
   that started before the worker did. The worker belongs to the
   process that started it: in a forked child it is not ``running`` (its threads stayed in
   the parent), and the hook, ``quiet()`` and ``stop()`` do nothing there but warn (a stop
   would push the parent's running jobs back and remove the parent's process record).
3. Remote quiet and stop (the dashboard's buttons) are refused: the host owns its shutdown.
4. ``async_beat=False`` (Sidekiq 7's embedded option): no heartbeat thread. ``start()``
   writes the first beat, so the processors may fetch at once; after that the host calls
   ``heartbeat()`` from its own timer, every ``heartbeat_interval``. Each call is one whole
   tick of the heartbeat thread's (``Launcher.beat``): stats flushed, work map, process
   record with its TTL, one remote signal popped and obeyed. A host that stops calling it
   is, for everyone else, a dead process: the record expires after ``heartbeat_ttl`` and a
   reaper pushes its jobs in flight back (at-least-once); its own processors stop fetching
   before that (``Heartbeat.wait_visible``). ``heartbeat()`` on a worker whose thread beats
   is one beat more; before ``start()``, after ``stop()`` and in a forked child it does
   nothing and returns False.
5. ``boot_swarm(config, settings)``: a swarm whose supervisor runs on a background thread of
   the host: at-exit drain registered before the first fork; at exit it asks the
   supervisor to drain and waits timeout + grace + 1 s for it; it drains by itself only when
   no supervisor is alive, and leaves a wedged one alone (the children then exit through
   their orphan guard when the host is gone).
"""

from __future__ import annotations

import atexit
import concurrent.futures.thread  # noqa: F401  (its exit hook registered before ours: see _arm)
import logging
import os
import threading
from types import TracebackType
from typing import TYPE_CHECKING

from . import log as wurk_log
from .config import Config, default_config
from .errors import SwarmError
from .runtime.signals import dump_threads, remote_signal

if TYPE_CHECKING:
    from .launcher import Launcher
    from .sharding import ShardedLauncher
    from .swarm.settings import SwarmSettings

__all__ = ["Embedded", "InProcessWorker", "SwarmHost", "boot_swarm", "embed"]

log = logging.getLogger("wurk")

# What the exit hook waits for the supervisor thread beyond the swarm's own drain budget:
# one supervise tick to notice the request, plus slack for the last reap.
DRAIN_JOIN_SLACK = 1.0


# Workers whose drain is due at the interpreter's exit (started, not stopped), and whether
# the hook running them is in ``threading``'s exit list yet.
_armed: dict[int, InProcessWorker] = {}
_armed_lock = threading.Lock()
_hooked = False


def _arm(worker: InProcessWorker) -> None:
    """Drain ``worker`` at exit, before the thread pools are joined. ``threading``'s exit
    hooks run last registered first, and ``concurrent.futures.thread`` (imported above)
    registered its join when it was loaded: ours comes before it."""
    global _hooked
    atexit.register(worker._at_exit)  # an exit already under way (too late for threading's)
    with _armed_lock:
        _armed[id(worker)] = worker
        register = getattr(threading, "_register_atexit", None)
        if _hooked or register is None:
            return
        try:
            register(_drain_armed)
        except RuntimeError:  # the interpreter is shutting down: atexit's hook is there
            return
        _hooked = True


def _disarm(worker: InProcessWorker) -> None:
    atexit.unregister(worker._at_exit)
    with _armed_lock:
        _armed.pop(id(worker), None)


def _drain_armed() -> None:
    with _armed_lock:
        workers = list(_armed.values())
    for worker in workers:
        try:
            worker._at_exit()
        except Exception:  # the others still drain
            log.exception("in-process worker: the drain at exit failed")


def _setup_logging(config: Config) -> None:
    """Give wurk a handler only when the host has configured no logging at all."""
    if not logging.getLogger("wurk").handlers and not logging.getLogger().handlers:
        wurk_log.setup(fmt=config.log_format, level=config.log_level)


class InProcessWorker:
    """A threads-only worker living inside the host's process."""

    def __init__(self, config: Config | None = None, *, async_beat: bool = True) -> None:
        self.config = config if config is not None else default_config()
        self.async_beat = async_beat  # False: the host calls heartbeat() (point 4)
        self.launcher: Launcher | ShardedLauncher | None = None
        self._lock = threading.Lock()
        self._pid = os.getpid()

    @property
    def identity(self) -> str | None:
        return None if self.launcher is None else str(self.launcher.identity)

    @property
    def running(self) -> bool:
        """False in a forked child too: the worker's threads stayed in the parent."""
        return self.launcher is not None and not self.launcher.stopping and self._owned()

    def _owned(self) -> bool:
        """Whether this process started the worker (a forked child did not)."""
        return os.getpid() == self._pid

    def start(self) -> InProcessWorker:
        """Start fetching and running jobs on this process's threads; returns ``self``."""
        # here: ``wurk`` imports this module while loading
        from .sharding import launcher_for

        with self._lock:
            if self.launcher is not None:
                raise RuntimeError("this in-process worker was already started")
            self._pid = os.getpid()  # made in a preloading master, started in a child
            self.launcher = launcher_for(self.config, embedded=True,
                                         on_remote_signal=self._remote_signal,
                                         async_beat=self.async_beat)
        _setup_logging(self.config)
        _arm(self)
        try:
            self.launcher.start()
        except BaseException:
            self.stop(timeout=0)
            with self._lock:  # what started is stopped: a later start() builds it anew
                self.launcher = None
            raise
        log.info("wurk: running embedded in process %d (threads only, no fork)", self._pid)
        return self

    def heartbeat(self) -> bool:
        """One heartbeat now, on the caller's thread (point 4): with ``async_beat=False``
        the host calls it every ``config.heartbeat_interval`` seconds. True when the record
        was written; False when Redis refused it (logged, as the thread's beats are), and,
        doing nothing, before ``start()``, after ``stop()`` or in a forked child."""
        launcher = self.launcher
        if launcher is None or not self._refuse_in_child("heartbeat"):
            return False
        return launcher.beat()

    def quiet(self) -> None:
        """Stop fetching; running jobs finish (one-way)."""
        if self.launcher is not None and self._refuse_in_child("quiet"):
            self.launcher.quiet()

    def stop(self, timeout: float | None = None) -> None:
        """Drain: running jobs get ``timeout`` (default ``config.timeout``) s, then go back."""
        launcher = self.launcher
        if launcher is None or not self._refuse_in_child("stop"):
            return
        _disarm(self)
        launcher.stop(timeout)

    def _refuse_in_child(self, what: str) -> bool:
        """True in the process that started the worker; in a forked child, a warning and
        False: its stop would push back the jobs the parent is running and remove the
        parent's process record."""
        if self._owned():
            return True
        log.warning("in-process worker: ignoring %s() in process %d, forked from %d that "
                    "runs this worker; start a worker in this process instead", what,
                    os.getpid(), self._pid)
        return False

    def _at_exit(self) -> None:
        if self._owned():  # a forked child does not own this worker
            self.stop()

    def _remote_signal(self, name: str) -> None:
        # Read from Redis: an entry that is no signal's name is warned of cut and escaped
        # (it was logged whole: ten megabytes in one line, or a newline forging a line).
        checked = remote_signal(name)
        if checked is None:
            return
        if checked == "TTIN":
            dump_threads()
        else:
            log.warning("in-process worker: ignoring remote %s; the host process owns quiet "
                        "and stop", checked)

    def __enter__(self) -> InProcessWorker:
        return self.start() if self.launcher is None else self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()



# The class's name before it was renamed so it could not be mistaken for the embedded server
# (``wurk.connections.server``); kept so code written against it keeps working.
Embedded = InProcessWorker


def embed(config: Config | None = None, *, async_beat: bool = True) -> InProcessWorker:
    """Start a threads-only worker in this process and return it (call ``.stop()`` at exit;
    with ``async_beat=False``, ``.heartbeat()`` from a timer of the host's)."""
    return InProcessWorker(config, async_beat=async_beat).start()


class SwarmHost:
    """A swarm whose supervisor runs on a background thread of a host process."""

    def __init__(self, config: Config | None = None,
                 settings: SwarmSettings | None = None) -> None:
        from .swarm.settings import SwarmSettings
        from .swarm.supervisor import Supervisor

        self.config = config if config is not None else default_config()
        self.settings = settings if settings is not None else SwarmSettings()
        self.supervisor = Supervisor(self.config, self.settings, hosted=True)
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def start(self) -> SwarmHost:
        _setup_logging(self.config)
        # Before the first fork: a boot that fails half-way leaves children to drain.
        atexit.register(self.stop)
        self.supervisor.boot()
        # Daemon: atexit hooks run only after non-daemon threads end, and this one ends
        # only when the exit hook asks it to.
        self._thread = threading.Thread(target=self._supervise, name="wurk-swarm-supervisor",
                                        daemon=True)
        self._thread.start()
        return self

    def _supervise(self) -> None:
        try:
            self.supervisor.supervise()
        except SwarmError as exc:
            log.error("wurk swarm stopped: %s", exc)
        except Exception:
            log.exception("wurk swarm supervisor thread died")

    def stop(self) -> None:
        """Drain every child; safe to call twice and from the exit hook."""
        if os.getpid() != self._pid:
            return
        atexit.unregister(self.stop)
        self.supervisor.request_stop()
        thread = self._thread
        if thread is not None:
            thread.join(self.config.timeout + self.settings.shutdown_grace + DRAIN_JOIN_SLACK)
            if thread.is_alive():
                log.error("wurk swarm: the supervisor is still draining; leaving it (children "
                          "exit on their own once this process is gone)")
                return
        self.supervisor.drain()  # nothing left after a supervisor that drained normally
        self.supervisor.close()


def boot_swarm(config: Config | None = None,
               settings: SwarmSettings | None = None) -> SwarmHost:
    """Fork a swarm from this (web) process and supervise it on a background thread."""
    return SwarmHost(config, settings).start()
