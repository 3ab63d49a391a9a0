"""The ``HOST[:PORT][,HOST[:PORT]...]`` list of a URL naming several servers: the sentinels
of a ``redis+sentinel://`` URL, the seed nodes of a ``redis+cluster://`` one. IPv6 hosts are
written in brackets (``[::1]:26379``)."""

from __future__ import annotations

import re
from urllib.parse import unquote

from ..errors import ConfigError

__all__ = ["CUT_SHORT", "credentials", "cut_short", "host_list"]

_BRACKETED = re.compile(r"^\[([^\]]+)\](?::(\d+))?$")  # [::1]:26379
_PLAIN = re.compile(r"^([^:\[\]]+)(?::(\d+))?$")  # host:26379
# Why a URL whose password holds a '/', '?' or '#' as it is was refused (a base64 password
# often holds a '/'): the message quotes no part of the URL, since any may be the password's.
CUT_SHORT = ("a '/', '?' or '#' in its user name or password ends the hosts' part before "
             "the '@': percent-encode it there (%2F, %3F, %23, and '@' as %40)")


def host_list(text: str, *, url: str, member: str, form: str,
              default_port: int) -> tuple[tuple[str, int], ...]:
    """``(host, port)`` of each item of ``text``; a ``ConfigError`` naming the item, the
    ``url`` kind (e.g. "Sentinel URL"), what an item is (``member``) and the ``form``."""
    found: list[tuple[str, int]] = []
    for item in text.split(","):
        match = _BRACKETED.match(item.strip()) or _PLAIN.match(item.strip())
        if match is None:
            raise ConfigError(f"{url}: {item!r} is not HOST or HOST:PORT of a {member}: "
                              f"{form}")
        port = int(match.group(2)) if match.group(2) else default_port
        if not 0 < port < 65536:
            raise ConfigError(f"{url}: port {port} of {item!r} is not a TCP port: {form}")
        found.append((match.group(1), port))
    return tuple(found)


def cut_short(netloc: str, rest: str) -> bool:
    """Whether ``rest``, what a URL holds past ``netloc`` where a '@' has no place, holds the
    '@' that ends a user name or password while ``netloc`` holds none: a '/', '?' or '#'
    left as it is in the password ended ``netloc`` early. Taken as it reads, the URL's
    hosts, port or path would be pieces of the password, quoted in errors and logs."""
    return "@" not in netloc and "@" in rest


def credentials(netloc: str) -> tuple[str, str | None, str | None]:
    """``netloc`` (``[[USER]:PASSWORD@]HOSTS``) split into its hosts, user and password."""
    userinfo, at, hosts = netloc.rpartition("@")
    if not at:
        return hosts, None, None
    user, colon, secret = userinfo.partition(":")
    return hosts, unquote(user) or None, unquote(secret) if colon else None
