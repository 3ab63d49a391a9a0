"""Finding Redis, and saying which one a process uses.

1. ``resolve_url``: ``REDIS_URL`` (already folded into the configuration when it was
   built), else the configured URL, else the embedded server of the home found
   (``wurk.connections.home``; the server's code, ``wurk.connections.server``, is imported
   only when it is the answer: a worker on a configured Redis keeps none of it), started
   if none runs there — unless starting is not allowed (read-only commands), which is an
   error naming the way out rather than an empty new server.
2. What a person must know is said on stderr, once per process: that a server was started,
   and where; that ``REDIS_URL`` wins over an embedded server that exists here (not when
   that URL is the embedded server's own, as the demo's worker is given). Which server
   a process uses is logged once per server on logger ``wurk`` at INFO.
3. ``describe_url`` hides the passwords of a URL for logs and errors.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
from pathlib import Path
from types import ModuleType
from urllib.parse import unquote_plus, urlsplit

from ..errors import EmbeddedServerError
from . import cluster, sentinel
from .home import PORT_FILE, find_home

__all__ = ["describe_url", "resolve_url", "where"]

log = logging.getLogger("wurk")

# The names the embedded server's URL may use: it listens on 127.0.0.1 only.
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost"})

NO_SERVER_HINT = "start one with `wurk server start` or set REDIS_URL"


def describe_url(url: str) -> str:
    """The URL without its passwords, for logs and errors: the one before ``@`` and any
    option naming one (redis-py takes ``?password=…``, and hands ``ssl_password`` and the
    like to the connection); every other part as written (an IPv6 host keeps its
    brackets, ``unix:///path`` its slashes)."""
    if sentinel.is_sentinel(url):
        return sentinel.describe(url)
    if cluster.is_cluster(url):
        return cluster.describe(url)
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        userinfo, _, hosts = netloc.rpartition("@")
        netloc = f"{userinfo.partition(':')[0]}:***@{hosts}"
    scheme = url[: len(parts.scheme) + 1] if parts.scheme else ""  # as written, with ':'
    slashes = "//" if url[len(scheme):].startswith("//") else ""
    query = "&".join(_without_secret(field) for field in parts.query.split("&"))
    return (f"{scheme}{slashes}{netloc}{parts.path}" + (f"?{query}" if query else "")
            + (f"#{parts.fragment}" if parts.fragment else ""))


def _without_secret(field: str) -> str:
    """One ``NAME=VALUE`` of a URL's query, its value hidden when the name is a password's."""
    name, equals, _ = field.partition("=")
    return f"{name}=***" if equals and "password" in unquote_plus(name).lower() else field


def resolve_url(redis_url: str | None, home: str, *, start: bool = True) -> str:
    """``redis_url`` when set (``REDIS_URL`` or the configuration), else the URL of the
    embedded server of ``find_home(home)``, started if none runs there and ``start``."""
    if redis_url:
        _announce(f"Redis: {describe_url(redis_url)}")
        _note_unused_embedded(redis_url, home)
        return redis_url
    embedded = _embedded_module()
    place = find_home(home)
    if not start:
        found = embedded.EmbeddedServer(place).status()
        if not found.running:
            why = f": {found.reason}" if found.reason else ""
            raise EmbeddedServerError(f"no wurk server here (none runs at {place}{why}); "
                                      f"{NO_SERVER_HINT}")
        url = str(found.url)
    else:
        status = embedded.EmbeddedServer(place).start()
        url = str(status.url)
        if status.started:
            _notice(f"started the embedded server at {place} (port {status.port}, pid "
                    f"{status.pid}); it keeps running for your app, worker and dashboard, "
                    "and `wurk server stop` stops it")
    _announce(f"Redis: {where(url, place)}")
    return url


def where(url: str, home: str | os.PathLike[str] | None = None) -> str:
    """How to name the server at ``url`` to a person: ``embedded at DIR, port N`` or the
    URL without its password."""
    if home is None:
        return describe_url(url)
    return f"embedded at {home}, port {urlsplit(url).port}"


def _embedded_module() -> ModuleType:
    try:
        return importlib.import_module("wurk.connections.server")
    except ImportError as exc:  # pragma: no cover - the module ships with the package
        raise EmbeddedServerError(f"the embedded server module failed to load: {exc}") from exc


def _note_unused_embedded(redis_url: str, home: str) -> None:
    """An embedded server that was used here holds jobs this process will not see: say so,
    so that a forgotten ``REDIS_URL`` is not mistaken for lost jobs."""
    place = find_home(home)
    if not place.is_dir() or not (place / PORT_FILE).is_file():
        return
    if _is_server_of(redis_url, place):  # that URL is the embedded server (the demo's worker)
        return
    source = "REDIS_URL is set" if os.environ.get("REDIS_URL") == redis_url \
        else "a Redis URL is configured"
    _notice(f"{source}, so this process uses {describe_url(redis_url)}, not the embedded "
            f"server at {place}")


def _is_server_of(redis_url: str, place: Path) -> bool:
    """Whether ``redis_url`` is the loopback port the embedded server of ``place`` records."""
    parts = urlsplit(redis_url)
    try:
        recorded = int((place / PORT_FILE).read_text(encoding="utf-8").strip())
        port = parts.port
    except (OSError, ValueError):
        return False
    return parts.hostname in LOOPBACK_NAMES and port == recorded


# Each pool resolves the URL; saying where Redis is once per process is enough.
_announced: set[str] = set()
_noticed: set[str] = set()


def _announce(line: str) -> None:
    if line not in _announced:
        _announced.add(line)
        log.info("%s", line)


def _notice(text: str) -> None:
    """One line on stderr, once per process, whatever logging is configured: these are
    things a person at the terminal must see, and a push script configures no logging."""
    if text in _noticed:
        return
    _noticed.add(text)
    with contextlib.suppress(OSError, ValueError):  # no stderr (a daemon), or it is closed
        print(f"wurk: {text}", file=sys.stderr, flush=True)
