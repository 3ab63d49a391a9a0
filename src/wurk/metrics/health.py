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
3. A worker serving several shards (``sharded``) is healthy only while every shard's
   heartbeat and fetch are: each part it names is ``"<shard>: <part>"``, ``shards`` lists
   the shards at fault and ``beat_age`` is the oldest of the shards' last beats. A worker
   of one shard answers as ever (its part names alone, no ``shards``).
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
    """What makes a worker healthy, read from its parts (no Redis call of its own): each
    heartbeat's last beat, outage and capsule by the shard it serves (point 3)."""

    def __init__(self, *, beat_ages: Callable[[], Sequence[tuple[str, float | None]]],
                 interval: float, quiet: Callable[[], bool], stopping: Callable[[], bool],
                 outages: Callable[[], Sequence[tuple[str, Outage]]],
                 stalled: Callable[[], Sequence[tuple[str, str]]] = tuple,
                 sharded: bool = False) -> None:
        self._beat_ages = beat_ages
        self._stalled = stalled  # the capsules with no processor alive
        self._interval = interval
        self._quiet = quiet
        self._stopping = stopping
        self._outages = outages
        self._sharded = sharded

    def __call__(self) -> tuple[bool, dict[str, Any]]:
        ages = self._beat_ages()
        oldest = None if any(age is None for _, age in ages) \
            else max((age for _, age in ages if age is not None), default=None)
        report: dict[str, Any] = {"beat_age": None if oldest is None else round(oldest, 3)}
        cut = [(shard, outage.component) for shard, outage in self._outages() if outage.active]
        dead = [] if cut else list(self._stalled())
        stale = [(shard, "heartbeat") for shard, age in ages
                 if age is None or age > STALE_BEATS * self._interval]
        at_fault: list[tuple[str, str]] = []
        if self._stopping():
            status = "stopping"
        elif self._quiet():
            status = "quiet"
        elif cut:
            status, report["failing"], at_fault = "redis unreachable", self._names(cut), cut
        elif dead:
            status, report["capsules"], at_fault = "processors dead", self._names(dead), dead
        elif stale or not ages:
            status, at_fault = "heartbeat stale", stale
        else:
            status = "ok"
        if self._sharded and at_fault:
            report["shards"] = list(dict.fromkeys(shard for shard, _ in at_fault))
        report["status"] = status
        return status == "ok", report

    def _names(self, parts: Sequence[tuple[str, str]]) -> list[str]:
        if not self._sharded:
            return [name for _, name in parts]
        return [f"{shard}: {name}" for shard, name in parts]


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
