"""The JSON API behind every page, under ``/api``, and Sidekiq's ``/stats`` endpoints.

1. ``ENDPOINTS`` is the one list of the API: the routes and the OpenAPI schema
   (``openapi.py``) are both made from it, so the documentation cannot drift from the code.
2. Each GET answers with the same data its page shows (``data.py``); each POST does what the
   page's button does (``actions.py``) and answers ``{"action": …, "count": n}``. POSTs take
   a JSON object and need the CSRF token in ``X-CSRF-Token`` (``GET /api/csrf`` gives it and
   sets its cookie).
3. ``/stats`` and ``/stats/queues`` keep Sidekiq's shape for scripts written against it.
4. Every answer is a ``Document``: a value stored in Redis that cannot be read is ``null``,
   its raw text under the top-level ``"invalid"`` object (``wurk.api.values.to_json``) —
   never a 500, never a number JSON does not have (``Infinity``, ``NaN``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from .. import stored as values
from . import actions, data
from . import limiters as limits_tab
from . import metrics as metrics_tab
from .context import dashboard
from .guard import SCOPE_CSRF
from .security import CSRF_FIELD, CSRF_HEADER
from .views import chosen_identity, form_list, form_value, perform, wants_all

__all__ = ["ENDPOINTS", "Document", "Endpoint", "routes"]

Handler = Callable[[Request], Awaitable[Response]]
Field = tuple[str, str, str]  # (name, JSON type, description)


@dataclass(frozen=True)
class Endpoint:
    """One API operation: its route and its documentation."""

    method: str
    path: str
    handler: Handler
    summary: str
    query: tuple[Field, ...] = ()
    body: tuple[Field, ...] = ()
    tag: str = "dashboard"


class Document(JSONResponse):
    """A JSON answer whose unreadable stored values are ``null`` plus their raw text."""

    def render(self, content: Any) -> bytes:
        return json.dumps(values.to_json(content), ensure_ascii=False, allow_nan=False,
                          separators=(",", ":")).encode("utf-8")


# -- reading ----------------------------------------------------------------------------------
async def stats(request: Request) -> Response:
    dash = dashboard(request)
    return Document(await dash.run(data.stats_snapshot, dash.config))


async def queue_sizes(request: Request) -> Response:
    dash = dashboard(request)
    found = await dash.run(data.queues, dash.config)
    return Document({queue["name"]: queue["size"] for queue in found})


async def overview(request: Request) -> Response:
    dash = dashboard(request)
    days = data.history_days(request.query_params.get("days"))
    return Document(await dash.run(data.overview, dash.config, days))


async def busy(request: Request) -> Response:
    dash = dashboard(request)
    only = request.query_params.get("only")
    count = data.page_number(request.query_params.get("count") or str(data.BUSY_JOBS_DEFAULT))
    return Document(await dash.run(data.busy, dash.config, only=only, count=count))


async def queues(request: Request) -> Response:
    dash = dashboard(request)
    return Document({"queues": await dash.run(data.queues, dash.config)})


async def queue(request: Request) -> Response:
    dash = dashboard(request)
    page = data.page_number(request.query_params.get("page"))
    oldest_first = request.query_params.get("direction") == "asc"
    found = await dash.run(data.queue_page, dash.config, request.path_params["name"], page,
                           oldest_first=oldest_first)
    if found is None:
        raise HTTPException(404, "There is no such queue.")
    return Document(found)


async def job_set(request: Request, kind: data.SetKind) -> Response:
    dash = dashboard(request)
    page = data.page_number(request.query_params.get("page"))
    substr = request.query_params.get("substr", "").strip()
    return Document(await dash.run(data.set_page, dash.config, kind, page, substr))


async def job_entry(request: Request, kind: data.SetKind) -> Response:
    dash = dashboard(request)
    found = await dash.run(data.entry_page, dash.config, kind, request.path_params["key"])
    if found is None:
        raise HTTPException(404, f"No such entry in {kind.title}: it has run, moved or "
                                 "been deleted.")
    return Document(found)


async def csrf(request: Request) -> Response:
    return Document({"token": request.scope[SCOPE_CSRF], "header": CSRF_HEADER,
                         "field": CSRF_FIELD})


async def limits(request: Request) -> Response:
    return Document(await limits_tab.read(request))


async def metrics(request: Request) -> Response:
    return Document(await metrics_tab.read_overview(request))


async def metrics_job(request: Request) -> Response:
    if not request.path_params["name"]:  # /api/metrics/ is the list, as /metrics/ is
        return await metrics(request)
    return Document(await metrics_tab.read_job(request))


# -- acting -----------------------------------------------------------------------------------
def done(action: str, count: int) -> Response:
    return Document({"action": action, "count": count})


async def busy_action(request: Request) -> Response:
    action = form_value(request, "action")
    return done(action, await perform(dashboard(request), actions.process_action, action,
                                      chosen_identity(request)))


async def queue_action(request: Request) -> Response:
    action = form_value(request, "action")
    return done(action, await perform(dashboard(request), actions.queue_action,
                                      request.path_params["name"], action))


async def queue_delete(request: Request) -> Response:
    """By ``key`` (as listed); ``job`` (the stored text) still works for older scripts."""
    name, key = request.path_params["name"], form_value(request, "key")
    if key:
        count = await perform(dashboard(request), actions.delete_queue_job, name, key)
    else:
        if not form_value(request, "job"):
            raise HTTPException(400, "The request is missing the field “key” (or “job”).")
        count = await perform(dashboard(request), actions.delete_queue_text, name,
                              form_value(request, "job"))
    return done("delete", count)


async def job_set_action(request: Request, kind: data.SetKind) -> Response:
    dash, action = dashboard(request), form_value(request, "action")
    if wants_all(request):
        return done(action, await perform(dash, actions.set_bulk, kind, action))
    keys = form_list(request, "keys")
    return done(action, await perform(dash, actions.set_action, kind, action, keys))


async def job_entry_action(request: Request, kind: data.SetKind) -> Response:
    action = form_value(request, "action")
    return done(action, await perform(dashboard(request), actions.set_action, kind, action,
                                      [request.path_params["key"]]))


# -- the list ---------------------------------------------------------------------------------
PAGE: Field = ("page", "integer", "page number, from 1 (25 entries a page)")
PERIOD: Field = ("period", "string", " | ".join(metrics_tab.PERIODS) + " (default "
                 f"{metrics_tab.DEFAULT_PERIOD}; by the minute up to 8h, by ten minutes "
                 "beyond)")
ACTION_BODY = ("action", "string", "the action")


def set_endpoints(kind: data.SetKind) -> list[Endpoint]:
    base = f"/api/{kind.name}"
    one, bulk = " | ".join(kind.actions), " | ".join(kind.bulk)
    return [
        Endpoint("GET", base, partial(job_set, kind=kind),
                 f"{kind.title}: one page, or the entries containing a text",
                 (PAGE, ("substr", "string", "only entries whose JSON contains this text"))),
        Endpoint("POST", base, partial(job_set_action, kind=kind),
                 f"{kind.title}: act on the listed entries, or on all",
                 body=(("action", "string", f"{one} (with keys); {bulk} (with all)"),
                       ("keys", "array", "entry keys as listed (<score>-<sha1>)"),
                       ("all", "boolean", "act on every entry"))),
        Endpoint("GET", base + "/{key}", partial(job_entry, kind=kind),
                 f"{kind.title}: one entry, with its error, backtrace and stored result"),
        Endpoint("POST", base + "/{key}", partial(job_entry_action, kind=kind),
                 f"{kind.title}: act on one entry", body=(("action", "string", one),)),
    ]


ENDPOINTS: list[Endpoint] = [
    Endpoint("GET", "/stats", stats, "The live numbers (Sidekiq's /stats shape)", tag="stats"),
    Endpoint("GET", "/stats/queues", queue_sizes, "Queue sizes by name", tag="stats"),
    Endpoint("GET", "/api/csrf", csrf, "The CSRF token POSTs must send (sets its cookie)"),
    Endpoint("GET", "/api/dashboard", overview, "Numbers, history, Redis info and queues",
             (("days", "integer", "days of history, 1 to 180 (default 30)"),)),
    Endpoint("GET", "/api/busy", busy, "Processes and the jobs they are running",
             (("only", "string", "processes | jobs"),
              ("count", "integer", "running jobs listed at most (default 100)"))),
    Endpoint("POST", "/api/busy", busy_action, "Quiet or stop one process, or all",
             body=(("action", "string", "quiet | stop"),
                   ("identity", "string", "the process; every non-embedded one if absent"))),
    Endpoint("GET", "/api/queues", queues, "Every queue: size, latency, paused"),
    Endpoint("POST", "/api/queues/{name}/delete", queue_delete, "Delete one job of a queue",
             body=(("key", "string", "the job's key as listed (<index>-<sha1>)"),
                   ("job", "string", "or: the job exactly as stored (its 'raw' text)"))),
    Endpoint("GET", "/api/queues/{name}", queue, "One page of a queue's jobs",
             (PAGE, ("direction", "string", "desc (newest first, default) | asc"))),
    Endpoint("POST", "/api/queues/{name}", queue_action, "Pause, unpause or clear a queue",
             body=(("action", "string", "pause | unpause | clear"),)),
    *[endpoint for kind in data.SET_KINDS.values() for endpoint in set_endpoints(kind)],
    Endpoint("GET", "/api/limits", limits,
             "Rate limiters: type, size, current use and stats; and expired jobs",
             (PAGE, ("substr", "string", "only limiters whose name contains this text"))),
    Endpoint("GET", "/api/metrics", metrics,
             "Execution metrics: every job's executions, failures, total and mean ms over a "
             "period; the busiest jobs per bucket",
             (PERIOD, ("substr", "string", "only jobs whose name contains this text"),
              ("sort", "string", " | ".join(metrics_tab.SORTS) + " (default processed)"),
              ("direction", "string", "desc (default) | asc"))),
    Endpoint("GET", "/api/metrics/{name}", metrics_job,
             "One job's execution metrics: totals, counts and ms per bucket, latency "
             "histogram (periods up to 8h)", (PERIOD,)),
]


# Path parameters that may hold "/" (a queue name; the path arrives decoded).
WHOLE_PATH_PARAMETERS = {"{name}": "{name:path}"}


def routed_path(path: str) -> str:
    for documented, routed in WHOLE_PATH_PARAMETERS.items():
        path = path.replace(documented, routed)
    return path


def routes() -> list[BaseRoute]:
    return [Route(routed_path(e.path), e.handler, methods=[e.method]) for e in ENDPOINTS]


def describe(endpoint: Endpoint) -> dict[str, Any]:
    """For the documentation page."""
    return {"method": endpoint.method, "path": endpoint.path, "summary": endpoint.summary,
            "query": endpoint.query, "body": endpoint.body}
