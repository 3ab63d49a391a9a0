"""Opening a stored profile in the Firefox Profiler: the upload to its store service.

The store (the public one: ``https://api.profiler.firefox.com/compressed-store``, run by
Mozilla's ``profiler-server``) takes a gzip-compressed profile as the raw body of a ``POST``
whose ``Accept`` is ``application/vnd.firefox-profiler+json;version=1.0``, and answers 200
with a JWT whose payload's ``profileToken`` names the stored profile; the profiler shows it
at ``https://profiler.firefox.com/public/<token>/``. Sidekiq 8's dashboard does the same.

1. ``prepare``: the stored gzip, inflated within ``UPLOAD_LIMIT`` bytes and parsed, must be
   the Firefox Profiler's processed format (Ruby's Vernier writes it: ``meta`` and
   ``threads``); it is sent gzipped again, so the store gets exactly what was checked.
   Speedscope's format (wurk's own profiles) is refused with a sentence saying so: the
   Firefox Profiler does not import it.
2. ``upload``: the POST through ``urllib.request``, with a timeout; the answer read within
   ``REPLY_LIMIT`` bytes, and its token (the JWT's ``profileToken``, or a bare token, as a
   store of one's own may answer) checked against ``TOKEN`` before it goes into a URL.
3. ``view_url``: the view template with the token in place of ``{token}``.

What Redis holds and what the store answers are both untrusted: every failure is an
``UploadFailed`` whose message is fixed words (a host name, a status code), never another
exception and never text from either.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import http.client
import json
import re
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, urlsplit

from .._version import __version__
from .flame import TooLarge, Unreadable, inflate

__all__ = ["ACCEPT", "REPLY_LIMIT", "TOKEN", "UPLOAD_LIMIT", "NotImported", "UploadFailed",
           "prepare", "store_host", "upload", "view_origin", "view_url"]

# profiler-server's versioning: an upload without it is refused (400, 406).
ACCEPT = "application/vnd.firefox-profiler+json;version=1.0"
# JSON inflated and parsed at most, in a web process: parsed JSON takes several times its
# text in memory. The public store takes up to 150 MB compressed.
UPLOAD_LIMIT = 32 * 1024 * 1024
# The store's answer read at most: a JWT is a few hundred bytes.
REPLY_LIMIT = 64 * 1024
# A profile token as it may go into the view URL: profiler-server's are base32 (digits and
# lowercase letters); letters, digits, '-' and '_' of any store pass, nothing else.
TOKEN = re.compile(r"[A-Za-z0-9_-]{1,200}")
PLACEHOLDER = "{token}"
GZIP_LEVEL = 6


class UploadFailed(Exception):
    """The profile was not uploaded; the message says why, in fixed words."""

    status = 502  # the store failed us


class NotImported(UploadFailed):
    """The stored profile is not one the Firefox Profiler imports, or cannot be read."""

    status = 422


def prepare(data: bytes, limit: int = UPLOAD_LIMIT) -> bytes:
    """The gzip body to upload for stored ``data``; ``NotImported`` saying why not."""
    try:
        text = inflate(data, limit)
    except TooLarge:
        raise NotImported(f"the profile is over {limit // (1024 * 1024)} MB of JSON, too "
                          "large to upload from here: download it and load it in the "
                          "profiler (\"Load a profile from file\")") from None
    except Unreadable as exc:
        raise NotImported(str(exc)) from None
    try:
        document = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise NotImported("the stored profile is not JSON") from None
    if isinstance(document, dict) and isinstance(document.get("shared"), dict) \
            and isinstance(document.get("profiles"), list):
        raise NotImported("this profile is in speedscope's format (wurk's own profiles), "
                          "which the Firefox Profiler does not import: download it and "
                          "open it in speedscope")
    if not (isinstance(document, dict) and isinstance(document.get("meta"), dict)
            and isinstance(document.get("threads"), list)):
        raise NotImported("the stored profile is not in the Firefox Profiler's format "
                          "(an object with meta and threads)")
    return gzip.compress(text, compresslevel=GZIP_LEVEL, mtime=0)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def store_host(store_url: str) -> str:
    """The store's host (and port), as the page names where a click sends the profile."""
    parts = urlsplit(store_url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{parts.port}" if parts.port is not None else host


def view_origin(view_template: str) -> str:
    """``scheme://host[:port]`` of the view URL: the profile page's CSP lets its form be
    redirected there (``form-action``)."""
    parts = urlsplit(view_template.replace(PLACEHOLDER, "token"))
    return f"{parts.scheme.lower()}://{store_host(parts.geturl())}"


def view_url(view_template: str, token: str) -> str:
    if not TOKEN.fullmatch(token):
        raise UploadFailed("the store answered a token that cannot go into a URL")
    return view_template.replace(PLACEHOLDER, quote(token, safe=""))


def upload(body: bytes, store_url: str, timeout: float) -> str:
    """POST ``body`` (gzip JSON) to the store; the profile token it answered."""
    host = store_host(store_url)
    request = urllib.request.Request(store_url, data=body, method="POST", headers={
        "Accept": ACCEPT, "Content-Type": "application/octet-stream",
        "User-Agent": f"wurk/{__version__} job profiler"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            status = reply.status
            answer = reply.read(REPLY_LIMIT + 1)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 413:
            raise UploadFailed(f"the store at {host} refused the profile as too large "
                               "(HTTP 413)") from None
        raise UploadFailed(f"the store at {host} answered HTTP {exc.code}") from None
    except http.client.HTTPException:  # a status line that is no HTTP, an answer cut short
        raise UploadFailed(f"the store at {host} answered something that is not HTTP") \
            from None
    except TimeoutError:
        raise UploadFailed(f"the store at {host} did not answer within {timeout:g} s") \
            from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):
            raise UploadFailed(f"the store at {host} did not answer within {timeout:g} s") \
                from None
        raise UploadFailed(f"the store at {host} could not be reached "
                           f"({type(reason).__name__})") from None
    if not 200 <= status < 300:  # a redirect urllib did not follow, a 1xx
        raise UploadFailed(f"the store at {host} answered HTTP {status}")
    if len(answer) > REPLY_LIMIT:
        raise UploadFailed(f"the store at {host} answered more than a token")
    token = token_of(answer)
    if token is None:
        raise UploadFailed(f"the store at {host} answered something that is not a profile "
                           "token")
    return token


def token_of(answer: bytes) -> str | None:
    """The profile token in the store's answer: profiler-server's JWT (``header.payload.
    signature``, the payload's ``profileToken``; the signature is the store's to check), or
    a bare token; None for anything else."""
    try:
        text = answer.decode("ascii").strip()
    except UnicodeDecodeError:
        return None
    parts = text.split(".")
    if len(parts) == 3:
        try:
            payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        except (binascii.Error, ValueError, RecursionError):
            return None
        token = payload.get("profileToken") if isinstance(payload, dict) else None
        return token if isinstance(token, str) and TOKEN.fullmatch(token) else None
    return text if TOKEN.fullmatch(text) else None
