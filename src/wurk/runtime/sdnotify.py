"""systemd's notify protocol (``Type=notify``, ``WatchdogSec=``), with the standard library.

1. ``Notifier.from_environment()`` reads ``NOTIFY_SOCKET`` (a path, or an abstract socket
   name starting with ``@``), ``WATCHDOG_USEC`` and ``WATCHDOG_PID`` when it is made, never
   at import. No ``NOTIFY_SOCKET``: a disabled notifier whose every call returns at once —
   no socket is made, nothing is parsed, nothing is logged.
2. ``send`` writes one datagram of ``FIELD=value`` lines (``READY=1``, ``STOPPING=1``,
   ``WATCHDOG=1``, ``STATUS=…``) to that socket; it never raises. The first failure is
   logged once, as a warning naming the socket and the error; later ones are silent (a
   watchdog would repeat it every tick). A send waits ``SEND_TIMEOUT`` at most.
3. The watchdog: ``WATCHDOG_USEC`` µs is systemd's deadline, so ``watchdog_interval`` is
   half of it, in seconds; None when unset, when ``WATCHDOG_PID`` names another process,
   or when the value is no positive whole number (one warning says so, and no ping is
   sent). Who pings is the caller's choice: a duty on a thread whose stalling should
   count as the process's (a worker's poller, a swarm's supervise loop), never a thread of
   its own here.
4. ``Reporter``: what a process tells systemd, from one status function — ``READY=1`` once
   booted, ``STOPPING=1`` when its stop begins, and on each ``tick`` a ``WATCHDOG=1`` when
   one is due and its ``STATUS=`` line when that changed. ``duty`` schedules the ticks on a
   worker's ``Timers`` (its poller thread); a swarm's parent calls ``tick`` from its
   supervise loop. A wedged poller or loop sends no ping, and systemd restarts the service.
5. ``forget_environment`` removes the three variables from this process's environment: a
   swarm child must not talk to systemd (``NotifyAccess=main`` ignores all but the main
   pid), nor hand the socket on to what it starts.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping

from .timer import TimerLoop, Timers

__all__ = ["NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC", "Notifier", "Reporter",
           "forget_environment"]

log = logging.getLogger("wurk")

NOTIFY_SOCKET = "NOTIFY_SOCKET"
WATCHDOG_USEC = "WATCHDOG_USEC"
WATCHDOG_PID = "WATCHDOG_PID"
# A send to a socket whose reader is stuck must not hold up the thread that sends (a
# worker's poller): past this it fails, and the failure is logged once.
SEND_TIMEOUT = 1.0
# How often a duty says a changed status when no watchdog asks for more.
STATUS_INTERVAL = 5.0
# A ping is due this share of the interval after the last: a tick a little early (a
# scheduler's jitter) still pings, so pings never drift past the interval.
PING_DUE = 0.9


class Notifier:
    """Datagrams to systemd's notify socket; a no-op when there is none."""

    def __init__(self, address: str | None = None, *,
                 watchdog_interval: float | None = None) -> None:
        self.address = address or None  # as systemd gave it (``@`` for an abstract one)
        self.watchdog_interval = watchdog_interval if self.address is not None else None
        self._target = None if self.address is None else (
            "\0" + self.address[1:] if self.address.startswith("@") else self.address)
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()
        self._failed = False
        self._closed = False

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None,
                         pid: int | None = None) -> Notifier:
        """The notifier systemd's variables describe (``os.environ`` and this pid unless
        given)."""
        environ = os.environ if environ is None else environ
        address = environ.get(NOTIFY_SOCKET) or None
        if address is None:
            return cls()
        return cls(address, watchdog_interval=_watchdog_interval(
            environ, os.getpid() if pid is None else pid))

    @property
    def enabled(self) -> bool:
        return self._target is not None

    def send(self, *fields: str) -> bool:
        """One datagram of ``fields`` (``"READY=1"``…); True when it was sent."""
        if self._target is None or not fields:
            return False
        data = "\n".join(fields).encode("utf-8", "replace")
        try:
            with self._lock:
                if self._closed:
                    return False
                if self._socket is None:
                    self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                    self._socket.settimeout(SEND_TIMEOUT)
                self._socket.sendto(data, self._target)
        except OSError as exc:
            if not self._failed:
                self._failed = True
                log.warning("systemd notify: cannot send to NOTIFY_SOCKET %r: %s; this "
                            "process runs on, but systemd may not hear that it is ready, "
                            "stopping or alive", self.address, exc)
            return False
        return True

    def ready(self, status: str) -> bool:
        return self.send("READY=1", f"STATUS={_line(status)}")

    def stopping(self, status: str) -> bool:
        return self.send("STOPPING=1", f"STATUS={_line(status)}")

    def status(self, status: str) -> bool:
        return self.send(f"STATUS={_line(status)}")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._socket is not None:
                self._socket.close()
                self._socket = None


class Reporter:
    """What one process tells systemd through ``notifier``: ``status()`` is its one line."""

    def __init__(self, notifier: Notifier, status: Callable[[], str], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.notifier = notifier
        self._status = status
        self._clock = clock
        self._said = ""
        self._pinged = -float("inf")
        self._ready = False

    @property
    def told_ready(self) -> bool:
        return self._ready

    def ready(self) -> None:
        """``READY=1`` with the status, once."""
        if self._ready or not self.notifier.enabled:
            return
        self._ready = True
        self._said = self._status()
        self.notifier.ready(self._said)

    def stopping(self, status: str | None = None) -> None:
        """``STOPPING=1`` with ``status`` (else the status function's)."""
        if not self.notifier.enabled:
            return
        self._said = self._status() if status is None else status
        self.notifier.stopping(self._said)

    def tick(self) -> None:
        """A watchdog ping when one is due, and the status when it changed."""
        if not self.notifier.enabled:
            return
        fields = []
        interval = self.notifier.watchdog_interval
        now = self._clock()
        if interval is not None and now - self._pinged >= interval * PING_DUE:
            self._pinged = now
            fields.append("WATCHDOG=1")
        status = self._status()
        if status != self._said:
            self._said = status
            fields.append(f"STATUS={_line(status)}")
        self.notifier.send(*fields)

    def duty(self, timers: Timers) -> TimerLoop | None:
        """``tick`` as a duty on ``timers``, started; stopped with them. None, and nothing
        scheduled, without a notify socket."""
        if not self.notifier.enabled:
            return None
        interval = self.notifier.watchdog_interval
        loop = TimerLoop("wurk-systemd", self.tick,
                         STATUS_INTERVAL if interval is None else min(interval,
                                                                      STATUS_INTERVAL),
                         host=timers)
        loop.start()
        return loop


def _line(text: str) -> str:
    """A field's value is one line: a newline would start another field."""
    return " ".join(text.split())


def _watchdog_interval(environ: Mapping[str, str], pid: int) -> float | None:
    """Half of ``WATCHDOG_USEC``, in seconds, when the watchdog is this process's; else
    None (a bad value warns once, here)."""
    raw = environ.get(WATCHDOG_USEC)
    if raw is None or raw == "":
        return None
    owner = environ.get(WATCHDOG_PID)
    if owner and owner.strip() != str(pid):
        return None  # another process's (systemd names the main pid; we are not it)
    try:
        usec = int(raw.strip())
    except ValueError:
        usec = 0
    if usec <= 0:
        log.warning("systemd notify: WATCHDOG_USEC=%r is not a positive whole number of "
                    "microseconds; no watchdog pings are sent (with WatchdogSec= set, "
                    "systemd will stop this service when its deadline passes)", raw)
        return None
    return usec / 2_000_000


def forget_environment() -> None:
    """Remove systemd's notify variables from this process (a swarm child)."""
    for name in (NOTIFY_SOCKET, WATCHDOG_USEC, WATCHDOG_PID):
        os.environ.pop(name, None)
