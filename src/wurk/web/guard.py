"""The ASGI middleware every dashboard request passes through, outermost in the app.

1. Which host: a request whose ``Host`` is not one the dashboard answers to (``HostNames``:
   loopback plus ``web_allowed_hosts``) is refused first, with 400 — the defence against a
   page that rebinds its own name to the dashboard's address.
2. Who may look: HTTP basic auth when configured (401 with a challenge), then the
   ``authorize(request)`` hook (403). Both run for every request, assets included.
3. What may change: a POST is refused in read-only mode, when it does not come from the
   dashboard's own origin, or when it lacks the CSRF token (all 403). The body (small: a
   form or a JSON object at most 100 levels deep, else 400) is read and parsed here, so no
   handler, extensions' included, can forget the check; handlers get it from the scope.
4. WebSocket connections (an extension's) pass the same host, auth and hook checks, must
   come from the dashboard's own origin, and are refused in read-only mode: a socket can
   act as a POST can.
5. Every response gets the security headers and, for a browser that has none yet, the CSRF
   cookie; pages are not cached; a redirect never names the ``Host`` the client sent.
6. An exception is logged with its traceback and answered by a page that says nothing about
   it: exception text can carry paths or connection details.
"""

from __future__ import annotations

import html
import inspect
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

import anyio.to_thread
from starlette.requests import HTTPConnection, Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket

from .. import payload as P
from ..config import Config
from ..errors import RedisUnavailable
from ..reporting import report_error
from . import i18n, security

__all__ = ["Authorize", "Guard", "assets", "route_path"]

# Called with the ``Request`` (or, for an extension's WebSocket, the ``WebSocket``).
Authorize = Callable[[Request], "bool | Awaitable[bool]"]

# Forms and JSON actions carry a few keys at most; a larger body is not ours.
MAX_BODY_BYTES = 1 << 20
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
FORM_TYPE = "application/x-www-form-urlencoded"
# Asset URLs change with the version, so a day in the browser's own cache is safe.
STATIC_CACHE = b"private, max-age=86400"
SCOPE_CSRF = "wurk.csrf"
SCOPE_FORM = "wurk.form"
SCOPE_ROOT = "wurk.root"
SCOPE_ASSET = "wurk.asset"  # set by ``assets`` when routing reaches a static-files mount
# WebSocket close code for "policy violation": before the handshake is accepted, servers
# answer it with HTTP 403.
WS_REFUSED = 1008
WS_FAILED = 1011  # "internal error"
HOST_REFUSED = i18n.N_("Refused: this dashboard does not answer to that host name. Add it "
                       "to web_allowed_hosts (wurk web --allowed-host NAME) if it is yours.")


def preference(request: Request) -> bool:
    """Whether ``request`` only sets the viewer's own preference (the language,
    ``POST /change_locale``): read-only mode refuses actions on jobs, not this."""
    return request.method == "POST" and route_path(request.scope) == i18n.CHANGE_PATH


def route_path(scope: Scope) -> str:
    """The path below the prefix the dashboard is mounted at (routing inside the app, into
    ``/static`` or an extension, moves ``root_path`` on; the guard noted where it began)."""
    path: str = scope["path"]
    root: str = scope.get(SCOPE_ROOT, scope.get("root_path", ""))
    return path[len(root):] or "/" if root and path.startswith(root) else path


class Refused(Exception):
    """A request the guard answers itself; ``message`` is fixed text, safe to show."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


class Guard:
    """Authentication, the POST checks, security headers and the last-resort error page."""

    def __init__(self, app: ASGIApp, *, config: Config, basic: tuple[str, str] | None,
                 authorize: Authorize | None, read_only: bool,
                 hosts: security.HostNames) -> None:
        self.app = app
        self.config = config
        self.basic = basic
        self.authorize = authorize
        self.read_only = read_only
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._socket(scope, receive, send)
            return
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        cookie = request.cookies.get(security.CSRF_COOKIE)
        # A shard's dashboard is mounted inside this one's: its guard keeps the token the
        # enclosing guard chose, which alone sets the cookie (at its own root), so a visit
        # has one token, whichever page it starts on.
        enclosing = scope.get(SCOPE_CSRF)
        scope[SCOPE_CSRF] = enclosing or cookie or security.new_token()
        scope[SCOPE_ROOT] = scope.get("root_path", "")
        sender = HeaderSender(send, scope, fresh_token=cookie is None and enclosing is None)
        try:
            receive = await self._admit(request, receive)
            await self.app(scope, receive, sender)
        except Refused as refused:
            await refusal(scope, refused)(scope, receive, sender)
        except Exception as exc:
            await self._failed(scope, receive, sender, exc)

    # -- admission --------------------------------------------------------------------------
    async def _admit(self, request: Request, receive: Receive) -> Receive:
        """Raise ``Refused`` unless the request may go on; POSTs get their body replayed."""
        self._check_host(request)
        self._check_basic(request)
        await self._check_authorize(request)
        if request.method in SAFE_METHODS:
            return receive
        if self.read_only and not preference(request):
            raise Refused(403, i18n.N_("The dashboard is read-only: actions are switched off."))
        if not security.same_origin(request.headers):
            raise Refused(403, i18n.N_("Refused: the request did not come from the "
                                       "dashboard's own pages."))
        body = await read_body(receive)
        form = parse_form(request, body)
        submitted = request.headers.get(security.CSRF_HEADER) or form.get(security.CSRF_FIELD)
        if not isinstance(submitted, str):  # a JSON number or object, a repeated field
            submitted = None
        if not security.token_matches(request.cookies.get(security.CSRF_COOKIE), submitted):
            raise Refused(403, i18n.N_("Refused: the form was stale or not sent by the "
                                       "dashboard (missing or wrong CSRF token). Reload the "
                                       "page and try again."))
        request.scope[SCOPE_FORM] = form
        return replay(body, receive)

    def _check_host(self, connection: HTTPConnection) -> None:
        if not self.hosts.allows(connection.headers.get("host")):
            raise Refused(400, HOST_REFUSED)

    async def _socket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """An extension's WebSocket: admitted as a page is, and as an action is."""
        socket = WebSocket(scope, receive, send)
        scope[SCOPE_ROOT] = scope.get("root_path", "")
        try:
            self._check_host(socket)
            self._check_basic(socket)
            await self._check_authorize(socket)
            if self.read_only:
                raise Refused(403, "read-only")
            if not security.same_origin(socket.headers):
                raise Refused(403, "cross-origin")
        except Refused:
            await send({"type": "websocket.close", "code": WS_REFUSED})
            return
        except Exception as exc:  # the authorize hook failed: closed, reported, not shown
            context = {"context": "web", "path": scope.get("path")}
            await anyio.to_thread.run_sync(report_error, self.config, exc, context)
            await send({"type": "websocket.close", "code": WS_FAILED})
            return
        await self.app(scope, receive, send)

    def _check_basic(self, request: HTTPConnection) -> None:
        if self.basic is None:
            return
        given = security.basic_credentials(request.headers.get("authorization"))
        if not security.credentials_match(given, *self.basic):
            raise Refused(401, i18n.N_("Sign in to see the dashboard."),
                          {"www-authenticate": 'Basic realm="wurk", charset="UTF-8"'})

    async def _check_authorize(self, request: HTTPConnection) -> None:
        if self.authorize is None:
            return
        allowed = self.authorize(request)  # type: ignore[arg-type]  # a WebSocket, at times
        if inspect.isawaitable(allowed):
            allowed = await allowed
        if allowed is not True:
            raise Refused(403, i18n.N_("You are not allowed to see the dashboard."))

    # -- failure ----------------------------------------------------------------------------
    async def _failed(self, scope: Scope, receive: Receive, send: HeaderSender,
                      exc: Exception) -> None:
        context = {"context": "web", "method": scope.get("method"), "path": scope.get("path")}
        await anyio.to_thread.run_sync(report_error, self.config, exc, context)
        if send.started:
            raise exc  # a response is under way: the server closes the connection
        if isinstance(exc, RedisUnavailable):
            refused = Refused(503, i18n.N_("Redis cannot be reached right now (details in "
                                           "the server log)."))
        else:
            refused = Refused(500, i18n.N_("Something went wrong (details in the server "
                                           "log)."))
        await refusal(scope, refused)(scope, receive, send)


class HeaderSender:
    """Wraps ``send``: adds the security headers, the CSRF cookie, and no-store for pages."""

    def __init__(self, send: Send, scope: Scope, *, fresh_token: bool) -> None:
        self.send = send
        self.scope = scope
        self.fresh_token = fresh_token
        self.cookie_path = scope[SCOPE_ROOT] or "/"  # a mounted shard's guard moves the root on
        self.started = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            message = {**message, "headers": self._headers(list(message.get("headers", [])))}
        await self.send(message)

    def _headers(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        headers = [(name, self._location(value) if name.lower() == b"location" else value)
                   for name, value in headers]
        present = {name.lower() for name, _ in headers}
        headers += [(name, value) for name, value in security.SECURITY_HEADERS
                    if name not in present]
        if b"cache-control" not in present:  # routing has run: ``assets`` marked the scope
            headers.append((b"cache-control",
                            STATIC_CACHE if self.scope.get(SCOPE_ASSET) else b"no-store"))
        if self.fresh_token:
            cookie = security.csrf_cookie(self.scope[SCOPE_CSRF], path=self.cookie_path,
                                          secure=self.scope.get("scheme") == "https")
            headers.append((b"set-cookie", cookie))
        return headers


    def _location(self, value: bytes) -> bytes:
        """Starlette's own redirects (a missing trailing slash) are absolute URLs built from
        the request's ``Host``: made relative, so a client's ``Host`` never comes back."""
        host = dict(self.scope["headers"]).get(b"host")
        location = value.decode("latin-1")
        text = host.decode("latin-1") if host is not None else None
        return security.local_location(location, text).encode("latin-1")


def assets(app: ASGIApp) -> ASGIApp:
    """``app`` (a ``StaticFiles``) marking the request as an asset's: assets (their URLs carry
    the version) are cached; pages and data never are, whatever their path holds (a queue
    named ``static/x`` has a page at ``/queues/static/x``). Routing passes the one scope
    along, so the guard sees the mark when the response starts."""

    async def marked(scope: Scope, receive: Receive, send: Send) -> None:
        scope[SCOPE_ASSET] = True
        await app(scope, receive, send)

    return marked


async def read_body(receive: Receive) -> bytes:
    """The whole request body; ``Refused`` (413) past ``MAX_BODY_BYTES``."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Refused(400, i18n.N_("The request was cut short."))
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise Refused(413, i18n.N_("The request is too large for a dashboard action."))
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def parse_form(request: Request, body: bytes) -> dict[str, Any]:
    """A url-encoded form as ``{name: value}``, repeated names as lists; JSON as is."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json" and body:
        try:
            parsed = P.loads_json(body)  # no NaN, at most 100 levels: a 500 000-deep body
        except ValueError:               # would otherwise exhaust the parser's recursion
            raise Refused(400, "The request body is not valid JSON (or nests deeper than "
                               f"{P.MAX_NESTING} levels).") from None
        if not isinstance(parsed, dict):
            raise Refused(400, "The request body must be a JSON object.")
        return parsed
    if kind != FORM_TYPE:
        return {}
    form: dict[str, Any] = {}
    for name, value in parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True):
        form.setdefault(name, []).append(value)
    return {name: values[0] if len(values) == 1 else values for name, values in form.items()}


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the already-read body over once, then listens on."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def again() -> Message:
        return pending.pop() if pending else await receive()

    return again


def wants_json(scope: Scope) -> bool:
    """The JSON API, and Sidekiq's ``/stats`` endpoints: scripts read these, so an error
    there is JSON too, never an HTML page."""
    path = route_path(scope)
    return path.startswith(("/api", "/stats/")) or path == "/stats"


def refusal(scope: Scope, refused: Refused) -> Response:
    """JSON from the API (``wants_json``: in English, as the API's texts are), a small page
    elsewhere, in the viewer's language (``wurk.web.i18n``); the text is always ours."""
    if wants_json(scope):
        return JSONResponse({"error": refused.message}, refused.status, refused.headers)
    connection = HTTPConnection(scope)
    language = i18n.language(i18n.locale_of(connection.headers, connection.cookies))
    words = i18n.translations(language.code)
    root = html.escape(scope.get(SCOPE_ROOT, scope.get("root_path", "")))
    page = ERROR_PAGE.format(status=refused.status, lang=language.tag, dir=language.direction,
                             message=html.escape(words.gettext(refused.message), quote=False),
                             back=html.escape(words.gettext("Back to the dashboard"),
                                              quote=False),
                             root=root or "", css=f"{root}/static/wurk.css")
    return HTMLResponse(page, refused.status, refused.headers)


# Only fixed text is formatted in: the status code, our own messages and their translations
# (escaped), the locale's tag and direction, the escaped prefix.
ERROR_PAGE = """<!doctype html>
<html lang="{lang}" dir="{dir}"><head><meta charset="utf-8"><title>{status} · wurk</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="{css}"></head>
<body><main class="refused"><h1>{status}</h1><p>{message}</p>
<p><a href="{root}/">{back}</a></p></main></body></html>
"""
