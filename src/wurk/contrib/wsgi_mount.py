"""The dashboard (an ASGI app) served inside a WSGI framework's own request handling.

1. ``WsgiDashboard(config)`` runs the dashboard through ``a2wsgi`` on an event loop thread
   of its own, made on first request (a2wsgi's daemon thread: it serves requests for the
   life of the process and holds nothing a shutdown must flush). Django's view and Flask's
   route call it after their framework decided who may look, so its own authorisation
   hook lets everyone through.
2. ``environ_for`` builds the WSGI environ of one request: the host's headers, the body
   already read, ``SCRIPT_NAME`` the mount prefix, ``PATH_INFO`` the path below it, so
   every link the dashboard writes starts with the prefix.
3. ``respond`` returns the status, the headers and the body: read whole for a page or a
   JSON answer, as an iterator for the live stream.
4. The live stream (``/stats/stream``) answers 204 unless ``live=True``: a WSGI server
   gives each open stream a worker thread for minutes, so one browser tab per sync worker
   would stall the site. A 204 tells the browser's ``EventSource`` not to reconnect; the
   numbers are then current as of each page load.
"""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..config import Config, default_config

__all__ = ["WsgiDashboard", "environ_for"]

STREAM_PATH = "/stats/stream"
Headers = list[tuple[str, str]]


def environ_for(meta: Mapping[str, Any], *, script_name: str, path_info: str, body: bytes,
                scheme: str) -> dict[str, Any]:
    """A WSGI environ for the dashboard, from the host request's CGI-style ``meta``."""
    environ: dict[str, Any] = {key: value for key, value in meta.items()
                               if isinstance(value, str) and not key.startswith("wsgi.")}
    environ.update({
        "SCRIPT_NAME": script_name.rstrip("/"),
        "PATH_INFO": path_info if path_info.startswith("/") else f"/{path_info}",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scheme,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    })
    environ.setdefault("SERVER_NAME", "localhost")
    environ.setdefault("SERVER_PORT", "443" if scheme == "https" else "80")
    environ.setdefault("SERVER_PROTOCOL", "HTTP/1.1")
    return environ


class WsgiDashboard:
    """The dashboard for ``config`` as a WSGI callable, built on first use."""

    def __init__(self, config: Config | None = None, *, live: bool = False,
                 hosts_checked: bool = False) -> None:
        self._config = config
        self.live = live
        # The framework validated the Host already (Django's ALLOWED_HOSTS): the dashboard
        # answers to whatever host it let through, instead of loopback names only.
        self._hosts_checked = hosts_checked
        self._app: Any = None
        self._lock = threading.Lock()

    def _wsgi(self) -> Any:
        with self._lock:
            if self._app is None:
                try:
                    from a2wsgi import ASGIMiddleware
                except ImportError as exc:  # pragma: no cover - depends on what is installed
                    raise ImportError("the dashboard in a WSGI framework needs a2wsgi, part "
                                      "of wurk's django and flask extras") from exc
                from ..web import create_app

                config = self._config if self._config is not None else default_config()
                allowed = ["*"] if self._hosts_checked else []
                self._app = ASGIMiddleware(create_app(  # type: ignore[arg-type]
                    config, allowed_hosts=allowed))
            return self._app

    def respond(self, environ: dict[str, Any]) -> tuple[int, Headers, Iterable[bytes]]:
        if environ["PATH_INFO"] == STREAM_PATH and not self.live:
            return 204, [("Cache-Control", "no-store")], [b""]
        started: dict[str, Any] = {}

        def start_response(status: str, headers: Headers, exc_info: Any = None) -> Any:
            started["status"], started["headers"] = status, headers
            return lambda data: None

        chunks = iter(self._wsgi()(environ, start_response))
        first = next(chunks, b"")
        status = int(str(started.get("status", "500")).split()[0])
        headers: Headers = list(started.get("headers", []))
        if not _is_stream(headers):  # a page or a JSON answer: read whole, ends the app's task
            return status, headers, [first + b"".join(chunks)]
        return status, headers, _rest(first, chunks)


def _is_stream(headers: Headers) -> bool:
    return any(name.lower() == "content-type" and value.startswith("text/event-stream")
               for name, value in headers)


def _rest(first: bytes, chunks: Iterator[bytes]) -> Iterator[bytes]:
    try:
        yield first
        yield from chunks
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
