"""The HTML pages and their forms.

1. Pages (GET): dashboard (``HEAD /`` is the cheap health check: one ``PING``), busy, queues
   and a page per queue, and for each job set (retries, scheduled, dead) a list and a page
   per entry.
2. Forms (POST, already checked by the guard): each acts through ``actions`` and answers
   with a redirect (303) to the page to look at next, carrying a notice code; the page turns
   the code into fixed text, so nothing from the request is ever echoed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any
from urllib.parse import quote

import redis
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from ..api import PeriodicSet
from ..api.queues import queue_names
from ..config import Config
from ..connections.replies import reply_code
from ..iteration.control import JID_LIMIT, check_jid
from . import actions, charts, data, i18n
from .context import Dashboard, dashboard
from .extensions import InfoRow, job_info_rows
from .guard import SCOPE_FORM, SCOPE_ROOT
from .i18n import N_
from .templating import DIGEST_FIELD, NAMED, digest, form_name, queue_path, render, url

__all__ = ["chosen_identity", "form_list", "form_value", "name_of", "perform", "required",
           "routes", "same_target", "wants_all"]

log = logging.getLogger("wurk.web")

# An action that meets a key of another Redis type (a `paused` key that is a string, a queue
# key that is a hash, written by hand or by another program): what it could not do is named in
# the server log; the viewer gets this fixed text, never Redis's own.
WRONG_TYPE = N_("A Redis key this action writes holds a value of another type, so the "
                "action stopped there (the server log names the key); delete or repair that "
                "key and try again.")


# -- helpers shared with the JSON API ---------------------------------------------------------
def form_value(request: Request, name: str) -> str:
    """The one value of field ``name`` ("" when absent); a field sent more than once (or a
    JSON list) is a 400: which of ``action=kill&action=delete`` was meant cannot be told."""
    value = request.scope.get(SCOPE_FORM, {}).get(name, "")
    if isinstance(value, list):
        raise HTTPException(400, f"The form sends the field “{name}” more than once; send "
                                 "it once.")
    return str(value or "")


def required(request: Request, name: str) -> str:
    """``form_value``, and a 400 naming the field when it is absent or empty."""
    value = form_value(request, name)
    if not value:
        raise HTTPException(400, f"The form is missing the field “{name}”.")
    return value


# What the field "all" may say: the page's bulk form sends "1", JSON ``true`` arrives as
# "True". Anything else is refused rather than guessed at: "all=false" once meant "all".
ALL_YES = frozenset({"1", "true", "True", "on"})
ALL_NO = frozenset({"", "0", "false", "False", "off"})


def wants_all(request: Request) -> bool:
    """Whether a job set's action is for every entry (the field ``all``) rather than the
    selected ones; a 400 naming the field when it says neither yes nor no."""
    value = form_value(request, "all")
    if value in ALL_YES:
        return True
    if value in ALL_NO:
        return False
    raise HTTPException(400, "The field “all” must be true (1) or false (0).")


def chosen_identity(request: Request) -> str | None:
    """The process a Busy action is for: the field ``identity`` as sent, even when empty (a
    heartbeat stored under "" has a row and buttons of its own); None, every process, only
    when the field is absent (the "all" form) or JSON ``null``."""
    if request.scope.get(SCOPE_FORM, {}).get("identity") is None:
        return None
    return form_value(request, "identity")


def form_list(request: Request, name: str) -> list[str]:
    value = request.scope.get(SCOPE_FORM, {}).get(name, [])
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


async def perform(dash: Dashboard, fn: Any, *args: Any) -> int:
    """Run an action; an action the target does not offer is a 400 with fixed text, one that
    meets a key of the wrong Redis type a 409 (``WRONG_TYPE``)."""
    try:
        return int(await dash.run(fn, dash.config, *args))
    except actions.UnknownAction as exc:
        raise HTTPException(400, str(exc)) from None
    except redis.ResponseError as exc:
        if reply_code(exc) != "WRONGTYPE":
            raise
        log.warning("dashboard: %s refused by Redis: %s", getattr(fn, "__name__", fn), exc)
        raise HTTPException(409, WRONG_TYPE) from None


async def name_of(request: Request, kind: str) -> str:
    """The name a page or action of ``kind`` (``templating.NAMED``) is for: the path's, or the
    query's on the path ``named_path`` gives a name a browser would resolve away (``.`` or
    ``..``: ``/queue?name=..``), or the listed name whose digest the query gives (a queue's
    or loop's name too long for a link: ``/queue?sha1=<hex>``; none: 404)."""
    _, fallback, param = NAMED[kind]
    name = request.path_params.get(param)
    if name is None:
        name = request.query_params.get(param)
    wanted = request.query_params.get(DIGEST_FIELD)
    if name is None and wanted is not None and kind in LISTED:
        dash = dashboard(request)
        found = await dash.run(by_digest, LISTED[kind], dash.config, wanted)
        if found is None:
            raise HTTPException(404, f"No {kind} listed has that name's digest: it is gone.")
        return found
    if name is None:
        raise HTTPException(400, f"Name the {kind}: {fallback}?{param}=NAME.")
    return str(name)


# Where a name linked by its digest is looked for: the names the kind's list page shows.
LISTED: dict[str, Callable[[Config], Iterable[str]]] = {
    "queue": queue_names, "loop": lambda config: PeriodicSet(config).lids()}


def by_digest(names: Callable[[Config], Iterable[str]], config: Config,
              wanted: str) -> str | None:
    return next((name for name in names(config) if digest(name) == wanted), None)


def same_target(request: Request, field: str, target: str, what: str) -> None:
    """A form names the queue or loop of its row (``field``): sent anywhere else, it is
    refused, so an action never lands on another than the row's."""
    if request.scope.get(SCOPE_FORM, {}).get(field) is not None \
            and form_value(request, field) not in (target, form_name(target, what)):
        raise HTTPException(400, f"This form was for another {what} than the one it was "
                                 "sent to; nothing was done.")


def redirect(request: Request, path: str, **notice: Any) -> Response:
    return RedirectResponse(url(request.scope.get(SCOPE_ROOT, ""), path, **notice), 303)


# A filter carried back in a redirect is cut here: a Location header stays small.
BACK_FILTER_LIMIT = 2000


def back_to(request: Request, *fields: str) -> dict[str, str]:
    """Where the list's form was when it was sent (its hidden ``page`` and ``substr`` or
    ``direction`` fields), to redirect back there as Sidekiq's dashboard does: a page past
    the first, the filter, the order; anything else is left out."""
    back: dict[str, str] = {}
    page = data.page_number(form_value(request, "page"))
    if page > 1:
        back["page"] = str(page)
    if "substr" in fields:
        back["substr"] = form_value(request, "substr").strip()[:BACK_FILTER_LIMIT]
    if "direction" in fields and form_value(request, "direction") == "asc":
        back["direction"] = "asc"
    return back


# -- the dashboard ----------------------------------------------------------------------------
async def home(request: Request) -> Response:
    dash = dashboard(request)
    if request.method == "HEAD":
        await dash.run(data.ping, dash.config)
        return Response(status_code=200)
    days = data.history_days(request.query_params.get("days"))
    overview = await dash.run(data.overview, dash.config, days)
    past = overview["history"]
    chart = charts.line_chart([day[5:] for day in past["days"]],
                              [("processed", "Processed", charts.plotted(past["processed"])),
                               ("failed", "Failed", charts.plotted(past["failed"]))])
    return render(request, "dashboard.html", {
        "o": overview, "days": days, "chart": chart, "day_choices": (7, 30, 90, 180),
        "stream_interval": dash.stream_interval})


# -- processes --------------------------------------------------------------------------------
async def busy(request: Request) -> Response:
    dash = dashboard(request)
    only = request.query_params.get("only")
    only = only if only in ("jobs", "processes") else None
    count = data.page_number(request.query_params.get("count") or str(data.BUSY_JOBS_DEFAULT))
    found = await dash.run(data.busy, dash.config, only=only, count=count)
    works = found.get("jobs", [])
    for work, rows in zip(works, await info_rows(dash, [w["job"] for w in works]),
                          strict=True):
        work["info_rows"] = rows
    return render(request, "busy.html", {"b": found, "only": only})


async def busy_action(request: Request) -> Response:
    action = form_value(request, "action")
    if action == "cancel":  # a running job's row
        try:
            jid = check_jid(required(request, "jid"))
        except ValueError:
            raise HTTPException(400, f"That is not a jid: at most {JID_LIMIT} printable "
                                     "characters, no spaces.") from None
        count = await perform(dashboard(request), actions.cancel_jobs, [jid])
        return redirect(request, "/busy", notice=action, count=count)
    count = await perform(dashboard(request), actions.process_action, action,
                          chosen_identity(request))
    return redirect(request, "/busy", notice=action, count=count)


# -- queues -----------------------------------------------------------------------------------
async def queues(request: Request) -> Response:
    dash = dashboard(request)
    found = await dash.run(data.queues, dash.config)
    return render(request, "queues.html", {"queues": found, "queue_path": queue_path})


async def queue(request: Request) -> Response:
    dash = dashboard(request)
    name = await name_of(request, "queue")
    page = data.page_number(request.query_params.get("page"))
    oldest_first = request.query_params.get("direction") == "asc"
    found = await dash.run(data.queue_page, dash.config, name, page, oldest_first=oldest_first)
    if found is None:
        raise HTTPException(404, N_("There is no such queue."))
    return render(request, "queue.html", {"q": found, "queue_path": queue_path(name),
                                          "delete_path": queue_path(name, "/delete")})


async def queue_action(request: Request) -> Response:
    name, action = await name_of(request, "queue"), form_value(request, "action")
    same_target(request, "queue", name, "queue")
    count = await perform(dashboard(request), actions.queue_action, name, action)
    return redirect(request, "/queues", notice=action, count=count)


async def queue_delete(request: Request) -> Response:
    name = await name_of(request, "queue")
    same_target(request, "queue", name, "queue")
    count = await perform(dashboard(request), actions.delete_queue_job, name,
                          required(request, "key"))
    return redirect(request, queue_path(name), notice="delete" if count else "gone",
                    count=count, **back_to(request, "direction"))


async def info_rows(dash: Dashboard,
                    records: Sequence[Mapping[str, Any]]) -> list[list[InfoRow]]:
    """The rows extensions add to each job's info table (``Extension.job_rows``), on a
    worker thread (a renderer may read Redis); no thread at all when none adds any."""
    if not any(extension.job_rows is not None for extension in dash.extensions):
        return [[] for _ in records]
    return await dash.run(job_info_rows, dash.extensions, records, dash.config)


# -- job sets ---------------------------------------------------------------------------------
async def job_set(request: Request, kind: data.SetKind) -> Response:
    dash = dashboard(request)
    page = data.page_number(request.query_params.get("page"))
    substr = request.query_params.get("substr", "").strip()
    found = await dash.run(data.set_page, dash.config, kind, page, substr)
    return render(request, "jobs.html", {"s": found, "kind": kind})


async def job_set_action(request: Request, kind: data.SetKind) -> Response:
    dash, action = dashboard(request), form_value(request, "action")
    if wants_all(request):
        count = await perform(dash, actions.set_bulk, kind, action)
    else:
        count = await perform(dash, actions.set_action, kind, action, form_list(request, "key"))
        return redirect(request, f"/{kind.name}", notice=action, count=count,
                        **back_to(request, "substr"))
    return redirect(request, f"/{kind.name}", notice=action, count=count)


async def job_entry(request: Request, kind: data.SetKind) -> Response:
    dash = dashboard(request)
    found = await dash.run(data.entry_page, dash.config, kind, request.path_params["key"])
    if found is None:
        raise HTTPException(404, f"This job is no longer in {kind.title}: it has run, moved "
                                 "or been deleted.")
    [rows] = await info_rows(dash, [found])
    return render(request, "job.html", {"e": found, "kind": kind, "info_rows": rows})


async def job_entry_action(request: Request, kind: data.SetKind) -> Response:
    action = form_value(request, "action")
    count = await perform(dashboard(request), actions.set_action, kind, action,
                          [request.path_params["key"]])
    return redirect(request, f"/{kind.name}", notice=action if count else "gone", count=count)


# -- the language ------------------------------------------------------------------------------
async def locale_page(request: Request) -> Response:
    """The available languages, each by its own name, to choose from."""
    back = i18n.safe_next(request.query_params.get(i18n.NEXT_FIELD))
    return render(request, "locale.html", {"back": back})


async def change_locale(request: Request) -> Response:
    """``POST /change_locale``: the chosen language kept in a cookie, then back to the page
    the form was on (a path of the dashboard only)."""
    form = request.scope.get(SCOPE_FORM, {})
    code = i18n.chosen(form)
    root = request.scope.get(SCOPE_ROOT, "")
    response = RedirectResponse(root + i18n.safe_next(form.get(i18n.NEXT_FIELD)),
                                status_code=303)
    i18n.remember(response, code, root=root, secure=request.url.scheme == "https")
    return response


def routes() -> list[BaseRoute]:
    found: list[BaseRoute] = [
        Route("/", home, methods=["GET", "HEAD"]),
        Route("/locale", locale_page, methods=["GET"]),
        Route(i18n.CHANGE_PATH, change_locale, methods=["POST"]),
        Route("/busy", busy, methods=["GET"]),
        Route("/busy", busy_action, methods=["POST"]),
        Route("/queues", queues, methods=["GET"]),
        # A queue name may hold "/" (the path arrives decoded): ":path" keeps it whole;
        # "/delete" is matched first.
        Route("/queues/{name:path}/delete", queue_delete, methods=["POST"]),
        Route("/queues/{name:path}", queue, methods=["GET"]),
        Route("/queues/{name:path}", queue_action, methods=["POST"]),
        # A queue named "." or "..": the browser would resolve the segment away.
        Route("/queue/delete", queue_delete, methods=["POST"]),
        Route("/queue", queue, methods=["GET"]),
        Route("/queue", queue_action, methods=["POST"]),
    ]
    for kind in data.SET_KINDS.values():
        found += [
            Route(f"/{kind.name}", partial(job_set, kind=kind), methods=["GET"]),
            Route(f"/{kind.name}", partial(job_set_action, kind=kind), methods=["POST"]),
            Route(f"/{kind.name}/{{key}}", partial(job_entry, kind=kind), methods=["GET"]),
            Route(f"/{kind.name}/{{key}}", partial(job_entry_action, kind=kind),
                  methods=["POST"]),
        ]
    # Sidekiq calls the dead set's page /morgue; /dead, its name everywhere else (the CLI,
    # `wurk dead`), leads there too.
    found += [Route("/dead", to_morgue, methods=["GET", "HEAD"]),
              Route("/dead/{key}", to_morgue, methods=["GET", "HEAD"])]
    return found


async def to_morgue(request: Request) -> Response:
    """``/dead[/KEY]`` → ``/morgue[/KEY]``, query kept, under the mount prefix."""
    key = request.path_params.get("key")
    rest = f"/{quote(key, safe='')}" if key else ""
    query = f"?{request.url.query}" if request.url.query else ""
    return RedirectResponse(f"{request.scope.get(SCOPE_ROOT, '')}/morgue{rest}{query}", 307)
