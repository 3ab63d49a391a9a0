"""Tabs added by other packages.

1. ``Extension``: a name (its URL segment and template prefix), a tab label, Starlette
   routes, and optionally a template directory, a static directory and a directory of
   gettext catalogs (``locales``: ``<locales>/<code>/LC_MESSAGES/<name>.po``, which
   translate its texts and its tab's label in the dashboard's languages). Pass them to
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
5. ``job_rows``: rows an extension adds to a job's info table (a job set entry's page, a
   running job on the Busy page), as Sidekiq's ``custom_job_info_rows``. It gets a
   read-only copy of the record the page shows (``frozen``) and returns ``(label, text)``
   pairs, shown escaped unless a ``markupsafe.Markup``. One that raises or answers something
   else is one row naming the extension and what went wrong, and one report per page
   (``job_info_rows``); the page itself renders. ``tab=None``: an extension with no tab.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol, TypeAlias

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

__all__ = ["RESERVED_NAMES", "Extension", "InfoRow", "JobRows", "frozen", "job_info_rows",
           "mount"]

NAME_PATTERN = re.compile(r"[a-z][a-z0-9_-]{0,39}")
# Paths of the dashboard's own pages, and of its own API (``/api/<name>`` is an
# extension's).
RESERVED_NAMES = frozenset({"api", "static", "stats", "busy", "queues", "retries",
                            "scheduled", "morgue", "dashboard", "csrf", "openapi"})
RENDER_ERROR = "Extension render error (see server logs)"
JOB_ROWS_CONTEXT = "web-extension-job-rows"
SHAPE = "an iterable of (label, text) pairs of strings"

# An extension's rows for one job: the job's record (read-only) in, (label, text) pairs out;
# text is shown escaped unless it is a ``markupsafe.Markup``.
JobRows: TypeAlias = Callable[[Mapping[str, Any]], Iterable[tuple[str, str]]]


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
    """A tab of the dashboard provided by another package, and rows it adds to a job's
    info table (``job_rows``); ``tab=None`` for an extension without a tab."""

    name: str
    tab: str | None
    routes: Sequence[BaseRoute] = ()
    templates: str | Path | None = None
    static: str | Path | None = None
    api: Sequence[ApiRoute] = ()  # paths relative to /api/<name>
    job_rows: JobRows | None = None
    # Its catalogs: <locales>/<code>/LC_MESSAGES/<name>.po, one a dashboard language.
    locales: str | Path | None = None

    def __post_init__(self) -> None:
        if not NAME_PATTERN.fullmatch(self.name) or self.name in RESERVED_NAMES:
            raise ConfigError(
                f"dashboard extension name {self.name!r} must be lowercase letters, digits, "
                f"'-' or '_' (starting with a letter) and not one of: "
                f"{', '.join(sorted(RESERVED_NAMES))}"
            )
        if self.job_rows is not None and not callable(self.job_rows):
            raise ConfigError(f"dashboard extension {self.name!r}: job_rows must be a "
                              f"function of the job, not {self.job_rows!r}")
        for label, folder in (("templates", self.templates), ("static", self.static),
                              ("locales", self.locales)):
            if folder is not None and not Path(folder).is_dir():
                raise ConfigError(f"dashboard extension {self.name!r}: {label} directory "
                                  f"{str(folder)!r} does not exist")


@dataclass(frozen=True)
class InfoRow:
    """One row an extension adds to a job's info table; ``failed``: its error row."""

    label: str
    value: str
    failed: bool = False


class JobRowsError(TypeError):
    """An extension's ``job_rows`` answered something that is no list of rows."""


def frozen(value: Any) -> Any:
    """A read-only deep copy of a JSON-ready value: mappings as ``MappingProxyType``, lists
    as tuples (anything else is immutable already: text, numbers, ``Invalid``)."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: frozen(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(frozen(item) for item in value)
    return value


def job_info_rows(extensions: Sequence[Extension], records: Sequence[Mapping[str, Any]],
                  config: Config) -> list[list[InfoRow]]:
    """Each record's rows from every extension that adds some, in the extensions' order.
    An extension that raises, or answers anything but ``(label, text)`` pairs of strings,
    gives that record one error row instead (its class, or what was wrong: never the
    exception's text) and is reported once for all the records. Blocks as long as the
    renderers do: the caller runs it on a worker thread."""
    adding = [extension for extension in extensions if extension.job_rows is not None]
    found: list[list[InfoRow]] = [[] for _ in records]
    failed: set[str] = set()
    for record, rows in zip(records, found, strict=True):
        # One read-only copy for every extension: none can change what another sees.
        shown = frozen(record)
        for extension in adding:
            try:
                rows.extend(_rows_of(extension, shown))
            except Exception as exc:
                rows.append(InfoRow(extension.name, _failure(exc), failed=True))
                if extension.name not in failed:
                    failed.add(extension.name)
                    report_error(config, exc, {"context": JOB_ROWS_CONTEXT,
                                               "extension": extension.name})
    return found


def _rows_of(extension: Extension, record: Mapping[str, Any]) -> list[InfoRow]:
    assert extension.job_rows is not None
    answer: Any = extension.job_rows(record)
    if isinstance(answer, (str, bytes, Mapping)) or not isinstance(answer, Iterable):
        raise JobRowsError(f"job_rows answered {type(answer).__name__}, not {SHAPE}")
    rows = []
    for number, pair in enumerate(answer, 1):
        if not (isinstance(pair, tuple) and len(pair) == 2
                and all(isinstance(part, str) for part in pair)):
            raise JobRowsError(f"job_rows' row {number} is {_shape(pair)}, not a (label, "
                               "text) pair of strings")
        rows.append(InfoRow(pair[0], pair[1]))
    return rows


def _shape(value: Any) -> str:
    if isinstance(value, tuple):
        return f"({', '.join(type(part).__name__ for part in value)})"
    return f"a {type(value).__name__}"


def _failure(exc: Exception) -> str:
    """What the viewer sees of a failure: our own words, or the exception's class only."""
    if isinstance(exc, JobRowsError):
        return f"Extension job rows not shown: {exc} (see server logs)"
    return f"Extension job rows failed: {type(exc).__name__} (see server logs)"


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
