"""The health check: a tiny HTTP listener for Kubernetes liveness and readiness probes.

1. ``HealthServer`` answers every ``GET`` (and ``HEAD``) with 200 and a small JSON while the
   probe says healthy, 503 with the reason otherwise; it binds 127.0.0.1 unless told
   another address (``health_host``, ``--health-host``), and refuses a ``Host`` that is a
   name other than a loopback or allowed one (``HostNames.allows_probe``). Its thread is
   owned by whoever starts it; ``stop`` shuts the listener and joins the thread.
2. ``WorkerHealth`` is the worker's probe: healthy while the heartbeat lands (the last one
   within ``STALE_BEATS`` intervals, no outage) and every capsule fetches (no fetch outage,
   a processor alive); 503 once the process is quiet or stopping, cut off from Redis, or a
   capsule's processors are all dead (a live heartbeat thread vouches for no job).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..hosts import HostNames, server_class
from ..runtime.outage import Outage

__all__ = ["STALE_BEATS", "HealthServer", "Probe", "WorkerHealth"]

log = logging.getLogger("wurk")

Probe = Callable[[], tuple[bool, dict[str, Any]]]
# A beat older than this many intervals means the heartbeat thread is stuck or failing.
STALE_BEATS = 3
# How long the listener waits between looks at its stop flag, and a slow client's reads.
POLL_INTERVAL = 0.25
CLIENT_TIMEOUT = 5.0


class WorkerHealth:
    """What makes a worker healthy, read from its parts (no Redis call of its own)."""

    def __init__(self, *, beat_age: Callable[[], float | None], interval: float,
                 quiet: Callable[[], bool], stopping: Callable[[], bool],
                 outages: Callable[[], Sequence[Outage]],
                 stalled: Callable[[], Sequence[str]] = tuple) -> None:
        self._beat_age = beat_age
        self._stalled = stalled  # the capsules with no processor alive
        self._interval = interval
        self._quiet = quiet
        self._stopping = stopping
        self._outages = outages

    def __call__(self) -> tuple[bool, dict[str, Any]]:
        age = self._beat_age()
        report: dict[str, Any] = {"beat_age": None if age is None else round(age, 3)}
        cut = [outage.component for outage in self._outages() if outage.active]
        dead = [] if cut else list(self._stalled())
        if self._stopping():
            status = "stopping"
        elif self._quiet():
            status = "quiet"
        elif cut:
            status, report["failing"] = "redis unreachable", cut
        elif dead:
            status, report["capsules"] = "processors dead", dead
        elif age is None or age > STALE_BEATS * self._interval:
            status = "heartbeat stale"
        else:
            status = "ok"
        report["status"] = status
        return status == "ok", report


class HealthServer:
    """``GET /`` → 200 or 503 with the probe's JSON, on its own thread. A request whose
    ``Host`` is a name other than a loopback or allowed one is refused (403): DNS
    rebinding cannot read it from a browser; a probe by IP address always gets through."""

    def __init__(self, host: str, port: int, probe: Probe,
                 hosts: HostNames | None = None) -> None:
        handler = _handler(probe, hosts if hosts is not None else HostNames())
        self._server = server_class(ThreadingHTTPServer, host)((host, port), handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> HealthServer:
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": POLL_INTERVAL},
                                        name="wurk-health", daemon=True)
        self._thread.start()
        log.info("health check on port %d", self.port)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout)
        self._server.server_close()


def _handler(probe: Probe, hosts: HostNames) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = CLIENT_TIMEOUT

        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def _answer(self, *, body: bool) -> None:
            if not hosts.allows_probe(self.headers.get("Host")):
                self.send_error(403, "Host not allowed (wurk web_allowed_hosts)")
                return
            try:
                healthy, report = probe()
            except Exception as exc:  # a probe that cannot tell is not healthy
                healthy, report = False, {"status": f"probe failed: {type(exc).__name__}"}
            report["time"] = round(time.time(), 3)
            text = json.dumps(report).encode()
            self.send_response(200 if healthy else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(text)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if body:
                self.wfile.write(text)

        def log_message(self, format: str, *args: Any) -> None:
            """Probes come every few seconds: not one log line each."""

    return Handler
