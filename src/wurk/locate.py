"""Finding Redis, and naming it in logs without its password.

1. ``resolve_url``: ``REDIS_URL`` (already folded into the configuration when it was built),
   else the configured URL, else the embedded server wurk starts for you
   (``wurk.embedded_server``), which is imported only when it is the answer.
2. Which server a process uses is logged once per process and server, so every wurk command
   says where its jobs go.
3. ``describe_url`` hides the password of a URL for logs and errors.
"""

from __future__ import annotations

import importlib
import logging
from urllib.parse import urlsplit, urlunsplit

from .errors import EmbeddedServerError

__all__ = ["describe_url", "resolve_url"]

log = logging.getLogger("wurk")


def describe_url(url: str) -> str:
    """The URL without its password, for logs."""
    parts = urlsplit(url)
    if parts.password:
        host = parts.hostname or ""
        netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
        parts = parts._replace(netloc=netloc)
    return urlunsplit(parts)


def resolve_url(redis_url: str | None, home: str) -> str:
    """``redis_url`` when set (``REDIS_URL`` or the configuration), else the embedded
    server of ``home``, started if none runs there."""
    if redis_url:
        _announce(f"Redis: {describe_url(redis_url)}")
        return redis_url
    try:
        embedded = importlib.import_module("wurk.embedded_server")
    except ImportError as exc:  # pragma: no cover - the module ships with the package
        raise EmbeddedServerError(f"the embedded server module failed to load: {exc}") from exc
    url = str(embedded.ensure_running(home))
    _announce(f"Redis: embedded at {embedded.shown_home(home)}, port {urlsplit(url).port}")
    return url


# Each pool resolves the URL; saying where Redis is once per process is enough.
_announced: set[str] = set()


def _announce(line: str) -> None:
    if line not in _announced:
        _announced.add(line)
        log.info("%s", line)
