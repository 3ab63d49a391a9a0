"""The host names the dashboard answers to (``wurk.web``'s defence against DNS rebinding).

1. ``HostNames``: the loopback names, always, plus the configured ones (``web_allowed_hosts``):
   ``jobs.example.com``, ``.example.com`` (it and every subdomain), ``10.0.0.5``, ``[::1]``,
   or ``*`` for any. The port of a ``Host`` header is not compared: a rebinding page reaches
   the dashboard's own port, and only the name is its own.
2. ``check_host_pattern``: one pattern checked, with the fix in the message (the
   configuration's validation uses it, so it needs nothing of the ``web`` extra).
3. ``local_location``: a redirect naming the request's own host, made relative.
4. ``HostNames.allows_probe``: the rule of the worker's health and metrics listeners, which
   a kubelet or a Prometheus server reaches by the pod's IP address: an IP literal is
   allowed too (a rebinding page can only send a name), any other name only when allowed.
5. ``server_class``: those listeners' server class for the address they bind (``::1`` and
   ``::`` need an IPv6 socket; the standard library's servers make IPv4 ones).
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
from collections.abc import Iterable
from typing import TypeVar, cast
from urllib.parse import urlsplit

__all__ = ["ANY_HOST", "LOOPBACK_HOSTS", "HostNames", "check_host_pattern", "host_name",
           "local_location", "server_class"]

Server = TypeVar("Server", bound=type)

# The names a browser on this machine uses for it: a rebinding page's own name is never one.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
ANY_HOST = "*"
# A host name or IPv4 address (letters, digits, '-', '.', '_'), or an IPv6 address in [].
_HOST_TEXT = re.compile(r"[a-z0-9_.-]+|\[[0-9a-f:.]+\]")


def host_name(header: str) -> str:
    """The host of a ``Host`` header without port or final dot, lowercased."""
    text = header.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        return text[: end + 1] if end > 0 else text
    return text.rsplit(":", 1)[0].rstrip(".") if text.count(":") <= 1 else text


def check_host_pattern(pattern: str) -> str:
    """``pattern`` as ``HostNames`` matches it; ``ValueError`` naming the fix otherwise."""
    text = pattern.strip().lower()
    if text == ANY_HOST:
        return text
    bare = text[1:] if text.startswith(".") else text
    if not bare or not _HOST_TEXT.fullmatch(bare):
        raise ValueError(f"{pattern!r} is not a host name: write it as a browser's address "
                         "bar shows it, without scheme, port or path (jobs.example.com, "
                         ".example.com for every subdomain, 10.0.0.5, [::1], or * for any)")
    return text


class HostNames:
    """The ``Host`` names the dashboard answers to."""

    def __init__(self, extra: Iterable[str] = ()) -> None:
        patterns = {check_host_pattern(p) for p in extra} | set(LOOPBACK_HOSTS)
        self.any = ANY_HOST in patterns
        self.exact = frozenset(p for p in patterns if not p.startswith("."))
        self.suffixes = tuple(p for p in patterns if p.startswith("."))

    def allows_probe(self, header: str | None) -> bool:
        """``allows``, and any IP address besides: probes and scrapers address a pod by IP."""
        if header is None or self.allows(header):
            return True
        name = host_name(header).strip("[]")
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True

    def allows(self, header: str | None) -> bool:
        """Whether a request with this ``Host`` may go on. No header at all is no browser's
        (every browser sends one), so it cannot be a rebinding page's either."""
        if self.any or header is None:
            return True
        name = host_name(header)
        return name in self.exact or any(name.endswith(s) or name == s[1:]
                                         for s in self.suffixes)


def local_location(location: str, host: str | None) -> str:
    """A ``Location`` naming the request's own host made relative (``/path?query``), so the
    ``Host`` a client sent is never written back into a redirect."""
    parts = urlsplit(location)
    if not parts.netloc or host is None or parts.netloc.lower() != host.strip().lower():
        return location
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def server_class(cls: Server, host: str) -> Server:
    """``cls`` (a ``socketserver`` server, whose sockets are IPv4) for ``host``, or its IPv6
    twin when ``host`` is an IPv6 address or a name whose first address is one. A name that
    does not resolve keeps ``cls``: its bind then fails naming the address."""
    try:
        family = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM,
                                    flags=socket.AI_PASSIVE)[0][0]
    except (OSError, UnicodeError):
        return cls
    return _six(cls) if family == socket.AF_INET6 else cls


@functools.cache
def _six(cls: Server) -> Server:
    return cast(Server, type(cls.__name__ + "6", (cls,), {"address_family": socket.AF_INET6}))
