"""Tabs added by other packages.

1. ``Extension``: a name (its URL segment and template prefix), a tab label, Starlette
   routes, and optionally a template directory and a static directory. Pass them to
   ``create_app(extensions=[...])``.
2. Its routes are mounted at ``/<name>``; its templates are found as ``"<name>/file.html"``
   and may extend the dashboard's ``layout.html``; its static files are served at
   ``/<name>/static/``; its JSON endpoints (``api``) at ``/api/<name>/…``, listed in the
   API's documentation with the dashboard's own. Handlers use ``wurk.web.render(request,
   template, context)`` for a page, ``dashboard(request).run(fn, ...)`` for Redis work
   (through the dashboard's own pool), and read stored values through ``wurk.api.values`` so
   one bad value shows as invalid instead of failing the page.
3. Its requests pass the same guard as the dashboard's: host names and auth for every one,
   read-only, origin and CSRF token for POSTs; WebSockets are guarded as POSTs are.
4. An exception in an extension is reported (error handlers, or the log) and the viewer sees
   "Extension render error (see server logs)" — never the exception's text, which can carry
   paths or connection details.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio.to_thread
from starlette.exceptions import HTTPException
from starlette.responses import HTMLResponse
from starlette.routing import BaseRoute, Mount, Route, Router
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..config import Config
from ..errors import ConfigError
from ..reporting import report_error
from .guard import assets

__all__ = ["RESERVED_NAMES", "Extension", "mount"]

NAME_PATTERN = re.compile(r"[a-z][a-z0-9_-]{0,39}")
# Paths of the dashboard's own pages, and of its own API (``/api/<name>`` is an
# extension's).
RESERVED_NAMES = frozenset({"api", "static", "stats", "busy", "queues", "retries",
                            "scheduled", "morgue", "dashboard", "csrf", "openapi"})
RENDER_ERROR = "Extension render error (see server logs)"


class ApiRoute(Protocol):
    """A JSON endpoint of an extension: ``wurk.web.Endpoint`` is one (its summary and
    fields also go into the OpenAPI schema)."""

    @property
    def method(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def handler(self) -> Any: ...


@dataclass(frozen=True)
class Extension:
    """A tab of the dashboard provided by another package."""

    name: str
    tab: str
    routes: Sequence[BaseRoute]
    templates: str | Path | None = None
    static: str | Path | None = None
    api: Sequence[ApiRoute] = ()  # paths relative to /api/<name>

    def __post_init__(self) -> None:
        if not NAME_PATTERN.fullmatch(self.name) or self.name in RESERVED_NAMES:
            raise ConfigError(
                f"dashboard extension name {self.name!r} must be lowercase letters, digits, "
                f"'-' or '_' (starting with a letter) and not one of: "
                f"{', '.join(sorted(RESERVED_NAMES))}"
            )
        for label, folder in (("templates", self.templates), ("static", self.static)):
            if folder is not None and not Path(folder).is_dir():
                raise ConfigError(f"dashboard extension {self.name!r}: {label} directory "
                                  f"{str(folder)!r} does not exist")


def mount(extension: Extension, config: Config) -> list[Mount]:
    """The extension's routes (and static files) under ``/<name>``, its JSON endpoints under
    ``/api/<name>``, errors contained."""
    routes = list(extension.routes)
    if extension.static is not None:
        routes.insert(0, Mount("/static", assets(StaticFiles(directory=extension.static))))
    mounts = [Mount(f"/{extension.name}",
                    app=Contained(Router(routes), extension.name, config))]
    if extension.api:
        endpoints = [Route(e.path, e.handler, methods=[e.method]) for e in extension.api]
        mounts.insert(0, Mount(f"/api/{extension.name}",
                               app=Contained(Router(endpoints), extension.name, config)))
    return mounts


class Contained:
    """Runs an extension's app; an exception becomes a fixed 500 page and a report."""

    def __init__(self, app: ASGIApp, name: str, config: Config) -> None:
        self.app, self.name, self.config = app, name, config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except HTTPException:
            raise  # a 404 or 400 is an answer, not a failure
        except Exception as exc:
            context = {"context": "web-extension-render", "extension": self.name}
            await anyio.to_thread.run_sync(report_error, self.config, exc, context)
            if started:
                raise
            await HTMLResponse(RENDER_ERROR, 500)(scope, receive, send)
