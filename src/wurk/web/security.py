"""The checks and headers that make the dashboard safe to put on a network.

1. ``SECURITY_HEADERS``: a Content-Security-Policy allowing scripts, styles, images and
   connections from the dashboard's own origin only — no inline script or style at all, so
   markup injected through job data could not run even if escaping failed — plus
   ``nosniff``, no framing, no referrer leaving the site.
2. CSRF (beside the same-origin check: a POST needs both): a random token in a
   ``SameSite=Strict`` cookie that every POST must repeat in a form field or header ("double
   submit"). It needs no server secret, so
   several dashboard processes behind one balancer accept each other's forms.
3. Same origin: a POST must say ``Sec-Fetch-Site: same-origin`` (every current browser sends
   it) or, from an older browser, carry an ``Origin`` whose host is the request's ``Host``.
   A client that sends neither is not a browser, so it cannot be tricked into a cross-site
   request; it still needs the token.
4. HTTP basic auth, compared in constant time.
5. Host names (DNS rebinding): a page elsewhere can point its own name at 127.0.0.1; the
   browser then treats the dashboard as that page's own origin — same-origin checks and
   the CSRF cookie included — and only the ``Host`` header still tells. ``HostNames``
   answers whether a ``Host`` is one the dashboard was told it is reached by: the loopback
   names, always, plus ``web_allowed_hosts`` (``.example.com`` for it and its subdomains;
   ``*`` for any host, as Django's ``ALLOWED_HOSTS``; in ``wurk.hosts``, which the
   configuration checks its setting with). ``local_location`` keeps a redirect from ever
   naming the request's ``Host``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
from urllib.parse import urlsplit

from starlette.datastructures import Headers

from ..hosts import HostNames, local_location

__all__ = [
    "CSP",
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "CSRF_HEADER",
    "SECURITY_HEADERS",
    "HostNames",
    "basic_credentials",
    "content_security_policy",
    "credentials_match",
    "csrf_cookie",
    "local_location",
    "new_token",
    "same_origin",
    "token_matches",
]

CSRF_COOKIE = "wurk_csrf"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
# 32 random bytes: guessing is hopeless, and the token still fits a header comfortably.
TOKEN_BYTES = 32



def content_security_policy(*form_targets: str) -> str:
    """The dashboard's CSP; ``form_targets`` (origins, ``https://host``) are where a form of
    the page may also lead: a browser checks ``form-action`` on the redirects after a
    submission too (the profile page's "Open in Firefox Profiler" ends at the profiler)."""
    return "; ".join([
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "font-src 'self'",
        " ".join(["form-action 'self'", *form_targets]),
        "frame-ancestors 'none'",
        "base-uri 'none'",
    ])


CSP = content_security_policy()

SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
)


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def token_matches(cookie: str | None, submitted: str | None) -> bool:
    """True when the POST repeats the cookie's token exactly."""
    if not cookie or not submitted:
        return False
    return hmac.compare_digest(cookie.encode(), submitted.encode())


def csrf_cookie(token: str, *, path: str, secure: bool) -> bytes:
    """The ``Set-Cookie`` value: unreadable by scripts, never sent cross-site."""
    flags = f"{CSRF_COOKIE}={token}; Path={path or '/'}; HttpOnly; SameSite=Strict"
    return (flags + ("; Secure" if secure else "")).encode("latin-1")


def same_origin(headers: Headers) -> bool:
    """Whether a state-changing request comes from the dashboard's own pages."""
    site = headers.get("sec-fetch-site")
    if site is not None:
        return site == "same-origin"
    origin = headers.get("origin")
    if origin is None:
        return True  # not a browser: see the module's point 3
    host = urlsplit(origin).netloc
    return bool(host) and host == headers.get("host")


def basic_credentials(header: str | None) -> tuple[str, str] | None:
    """``(user, password)`` from an ``Authorization: Basic …`` header, or None."""
    if not header:
        return None
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, colon, password = decoded.partition(":")
    return (user, password) if colon else None


def credentials_match(given: tuple[str, str] | None, user: str, password: str) -> bool:
    """Constant-time comparison of both parts (no early exit on a wrong user name)."""
    if given is None:
        return False
    user_ok = hmac.compare_digest(given[0].encode(), user.encode())
    password_ok = hmac.compare_digest(given[1].encode(), password.encode())
    return user_ok and password_ok

