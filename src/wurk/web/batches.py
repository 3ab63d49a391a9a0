"""The Batches and Dead Batches tabs: built-in ``Extension``s on every dashboard.

1. ``/batches``: live batches newest first (progress bar, counts, description, tags),
   paged, with a tag search; ``/batches/{bid}``: one batch — counts, callbacks, parent and
   children, its first failed and dead jobs (each linked to a search of the retry or dead
   set for its jid: no page scans those sets), expiry; buttons to invalidate or delete it.
2. ``/batches/{bid}.json``: the status summary a front-end progress bar polls; JSON twins
   under ``/api/batches`` (the list, one batch, the dead ones, and the actions), listed in
   the API's documentation.
3. ``/dead-batches``: batches with a dead job; a button sends a batch's dead jobs back to
   their queues, so its success can still fire.
Every value comes from ``wurk.BatchStatus``, which checks each stored field: an unreadable
count or time shows as a problem on the page, never a 500.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from ..batch import Batch, BatchSet, BatchStatus, DeadBatches, scan_tags
from ..config import Config
from .api import PAGE, Document, Endpoint
from .context import dashboard
from .extensions import Extension
from .guard import SCOPE_ROOT
from .i18n import N_
from .templating import named_path, render, url
from .views import form_value, name_of

__all__ = ["DEAD_NAME", "NAME", "extensions"]

NAME = "batches"
DEAD_NAME = "dead-batches"
TEMPLATES = Path(__file__).parent / "templates" / NAME
PER_PAGE = 25
# Failed and dead jobs listed by jid on a batch's page (a batch can have thousands; the
# counts say how many there are).
JIDS_SHOWN = 50
ACTIONS = ("invalidate", "delete")
NOTICES = {"invalidate": "Batch invalidated: its jobs' valid_within_batch() is now false.",
           "delete": "Batch deleted.", "retry": "Its dead jobs were sent back to their queues.",
           "gone": "That batch is gone: it expired or was deleted."}


# -- what the handlers do, off the event loop -------------------------------------------------
def listing(config: Config, page: int, tag: str) -> dict[str, Any]:
    if tag:
        bids = scan_tags(tag, config=config)
        size = len(bids)
        page = _within(page, size)
        chosen = bids[(page - 1) * PER_PAGE: page * PER_PAGE]
        statuses = [BatchStatus(bid, config=config) for bid in chosen]
    else:
        batches = BatchSet(config=config)
        size = len(batches)
        page = _within(page, size)
        statuses = batches.page((page - 1) * PER_PAGE, PER_PAGE)
    return {"batches": [summary(s) for s in statuses], "size": size, "page": page,
            "pages": max(1, math.ceil(size / PER_PAGE)), "tag": tag}


def _within(page: int, size: int) -> int:
    """``page`` clamped to the pages there are (``?page=10000000000000000000`` is the last)."""
    return min(max(page, 1), max(1, math.ceil(size / PER_PAGE)))


def summary(status: BatchStatus) -> dict[str, Any]:
    found = status.data()
    total, pending = found["total"], found["pending"]
    if isinstance(total, int) and isinstance(pending, int) and total > 0:
        found["percent"] = max(0, min(100, 100 * (total - pending) // total))
    else:
        found["percent"] = 0
    return found


def detail(config: Config, bid: str) -> dict[str, Any] | None:
    status = BatchStatus(bid, config=config)
    if not status.exists:
        return None
    found = summary(status)
    dead = status.dead_jids
    dead_set = set(dead)
    failed = [jid for jid in status.failed_jids if jid not in dead_set]
    found.update(callbacks=[(event, target, options) for event, target, options
                            in status.callbacks[:JIDS_SHOWN]],
                 children=status.child_bids[:JIDS_SHOWN], child_count=status.child_count,
                 failed=failed[:JIDS_SHOWN], dead_jobs=dead[:JIDS_SHOWN],
                 failed_count=status.size_of("failed"), dead_count=status.size_of("died"),
                 workflow=is_workflow(config, bid))
    return found


def is_workflow(config: Config, bid: str) -> bool:
    """Whether the batch is a workflow's (same id): its page links the workflow's graph."""
    def read(r: Any) -> bool:
        return bool(r.exists(config.keys.workflow(bid)))

    return config.pool("api").run(read, idempotent=True)


def act(config: Config, bid: str, action: str) -> str:
    if action not in ACTIONS:
        raise HTTPException(400, f"Unknown action; choose one of: {', '.join(ACTIONS)}"
                                 " (or retry, for a batch's dead jobs).")
    status = BatchStatus(bid, config=config)
    if not status.exists:
        return "gone"
    if action == "delete":
        status.delete()
    else:
        Batch(bid, config=config).invalidate_all()
    return action


def dead_listing(config: Config, page: int) -> dict[str, Any]:
    statuses, size = DeadBatches(config=config).page((page - 1) * PER_PAGE, PER_PAGE)
    return {"batches": [summary(status) | {"dead_count": status.size_of("died")}
                        for status in statuses],
            "size": size, "page": page, "pages": max(1, math.ceil(size / PER_PAGE))}


def retry_dead(config: Config, bid: str) -> str:
    return "retry" if DeadBatches(config=config).retry(bid) else "gone"


# -- pages ------------------------------------------------------------------------------------
def page_number(request: Request) -> int:
    text = request.query_params.get("page", "1")
    digits = text.isascii() and text.isdigit()  # '²' is a digit to isdigit, not to int
    if not digits or len(text) > 18:  # a number Redis could take as an offset
        return 1 if not digits else 10**18
    return max(1, int(text))


def page_notice(request: Request) -> str | None:
    return NOTICES.get(request.query_params.get("notice", ""))


async def list_page(request: Request) -> Response:
    dash = dashboard(request)
    tag = request.query_params.get("tag", "")[:100]
    found = await dash.run(listing, dash.config, page_number(request), tag)
    return render(request, f"{NAME}/list.html", {**found, "notice": page_notice(request)})


async def batch_page(request: Request) -> Response:
    dash = dashboard(request)
    found = await dash.run(detail, dash.config, await name_of(request, "batch"))
    if found is None:
        raise HTTPException(404, N_("No such batch: it expired or was deleted."))
    return render(request, f"{NAME}/batch.html", {"b": found, "notice": page_notice(request)})


async def batch_json(request: Request) -> Response:
    dash = dashboard(request)
    status = await dash.run(BatchStatus, request.path_params["bid"], config=dash.config)
    if not status.exists:
        return JSONResponse({"error": "No such batch: it expired or was deleted."}, 404)
    return JSONResponse(status.data())


async def batch_action(request: Request) -> Response:
    dash, bid = dashboard(request), await name_of(request, "batch")
    outcome = await dash.run(act, dash.config, bid, form_value(request, "action"))
    back = named_path("batch", bid) if outcome == "invalidate" else f"/{NAME}/"
    return RedirectResponse(url(request.scope.get(SCOPE_ROOT, ""), back, notice=outcome), 303)


async def dead_page(request: Request) -> Response:
    dash = dashboard(request)
    found = await dash.run(dead_listing, dash.config, page_number(request))
    return render(request, f"{DEAD_NAME}/dead.html", {**found, "notice": page_notice(request)})


async def dead_action(request: Request) -> Response:
    dash = dashboard(request)
    outcome = await dash.run(retry_dead, dash.config, await name_of(request, "dead-batch"))
    return RedirectResponse(url(request.scope.get(SCOPE_ROOT, ""), f"/{DEAD_NAME}/",
                                notice=outcome), 303)


# -- the JSON twins ---------------------------------------------------------------------------
async def api_batches(request: Request) -> Response:
    dash = dashboard(request)
    tag = request.query_params.get("tag", "")[:100]
    return Document(await dash.run(listing, dash.config, page_number(request), tag))


async def api_batch(request: Request) -> Response:
    dash = dashboard(request)
    found = await dash.run(detail, dash.config, request.path_params["bid"])
    if found is None:
        raise HTTPException(404, N_("No such batch: it expired or was deleted."))
    return Document(found)


async def api_action(request: Request) -> Response:
    dash, action = dashboard(request), form_value(request, "action")
    bid = request.path_params["bid"]
    if action == "retry":
        outcome = await dash.run(retry_dead, dash.config, bid)
    else:
        outcome = await dash.run(act, dash.config, bid, action)
    return JSONResponse({"action": action, "count": int(outcome == action)})


async def api_dead(request: Request) -> Response:
    dash = dashboard(request)
    return Document(await dash.run(dead_listing, dash.config, page_number(request)))


API = (
    Endpoint("GET", "/", api_batches, "Live batches, newest first, with their progress",
             query=(PAGE, ("tag", "string", "only batches with a tag containing this")),
             tag=NAME),
    Endpoint("GET", "/dead", api_dead, "Batches with a job in the dead set", query=(PAGE,),
             tag=NAME),
    Endpoint("GET", "/{bid}", api_batch,
             "One batch: counts, callbacks, children, failed and dead jobs", tag=NAME),
    Endpoint("POST", "/{bid}", api_action,
             "Invalidate or delete a batch, or retry its dead jobs",
             body=(("action", "string", "invalidate | delete | retry"),), tag=NAME),
)


def extensions() -> list[Extension]:
    """The two tabs, registered by ``create_app`` on every dashboard."""
    return [
        Extension(name=NAME, tab=N_("Batches"), templates=TEMPLATES, api=API, routes=[
            Route("/", list_page, methods=["GET"]),
            # A bid "." or "..": the browser would resolve the segment away.
            Route("/-/batch", batch_page, methods=["GET"]),
            Route("/-/batch", batch_action, methods=["POST"]),
            Route("/{bid}.json", batch_json, methods=["GET"]),
            Route("/{bid}", batch_page, methods=["GET"]),
            Route("/{bid}", batch_action, methods=["POST"]),
        ]),
        Extension(name=DEAD_NAME, tab=N_("Dead Batches"), templates=TEMPLATES, routes=[
            Route("/", dead_page, methods=["GET"]),
            Route("/-/batch", dead_action, methods=["POST"]),
            Route("/{bid}", dead_action, methods=["POST"]),
        ]),
    ]
