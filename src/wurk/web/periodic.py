"""The Periodic tab: a built-in ``Extension``, so periodic jobs stay out of the core views.

1. Pages: ``/periodic`` lists every loop (cron, zone, job, next run in the loop's zone,
   last run, paused); ``/periodic/{lid}`` shows one with its recent history.
2. Buttons: pause, unpause, enqueue now — POSTs through the dashboard's guard (CSRF,
   read-only refused), answered with a redirect carrying a notice code that becomes fixed
   text, so nothing from the request is echoed.
3. JSON twins under ``/api/periodic``: the same data (``wurk.api.PeriodicSet``) and the same
   actions, ``{"action": …, "count": n}`` (``jid`` too for enqueue).
Every value comes from ``LoopRecord``, which reads each field through the checked readers
(``wurk.api.values``): a hostile cron string or next-run mark shows as a problem (and an
``Invalid`` cell) on the page, and as ``null`` plus its raw text in JSON — never a 500.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from ..api import PeriodicSet
from ..config import Config
from ..errors import InspectionError
from .api import Document, Endpoint
from .context import dashboard
from .extensions import Extension
from .guard import SCOPE_ROOT
from .i18n import N_
from .templating import named_path, render, url
from .views import form_value, name_of, same_target

__all__ = ["ACTIONS", "NAME", "extension"]

NAME = "periodic"
TEMPLATES = Path(__file__).parent / "templates" / NAME
ACTIONS = ("pause", "unpause", "enqueue")
# How many pushes the list shows per loop; its own page shows the whole history.
LIST_HISTORY = 3
NOTICES = {"pause": "Loop paused: its ticks pass without a push until it is unpaused.",
           "unpause": "Loop unpaused.", "enqueue": "Job pushed now.",
           "gone": "That loop is gone: the leader pruned it.",
           "stopped": "A client middleware stopped the push."}


# -- what the handlers do, off the event loop -------------------------------------------------
def loops(config: Config) -> list[dict[str, Any]]:
    return [rec.to_dict() for rec in PeriodicSet(config).loops(history=LIST_HISTORY)]


def loop(config: Config, lid: str) -> dict[str, Any] | None:
    found = PeriodicSet(config).loop(lid)
    return found.to_dict() if found is not None else None


def act(config: Config, lid: str, action: str) -> tuple[str, str | None]:
    """What happened — the action's name when done, ``gone`` or ``stopped`` (a client
    middleware stopped the push) — and the pushed jid for enqueue."""
    if action not in ACTIONS:
        raise HTTPException(400, f"Unknown action; choose one of: {', '.join(ACTIONS)}.")
    loops = PeriodicSet(config)
    if lid not in loops.lids():
        return "gone", None
    if action in ("pause", "unpause"):
        done = loops.pause(lid) if action == "pause" else loops.unpause(lid)
        return (action if done else "gone"), None
    try:
        jid = loops.enqueue_now(lid)
    except InspectionError:
        raise HTTPException(400, "This loop cannot be pushed: its stored definition cannot "
                                 "be read (see the loop's problems).") from None
    return ("enqueue" if jid else "stopped"), jid


# -- pages ------------------------------------------------------------------------------------
def loop_path(lid: str) -> str:
    """A loop's page and form (``templating.named_path``)."""
    return named_path("loop", lid)


def page_notice(request: Request) -> str | None:
    return NOTICES.get(request.query_params.get("notice", ""))


async def list_page(request: Request) -> Response:
    dash = dashboard(request)
    found = await dash.run(loops, dash.config)
    return render(request, f"{NAME}/loops.html", {"loops": found, "loop_path": loop_path,
                                                  "notice": page_notice(request)})


async def loop_page(request: Request) -> Response:
    dash = dashboard(request)
    found = await dash.run(loop, dash.config, await name_of(request, "loop"))
    if found is None:
        raise HTTPException(404, N_("No such periodic loop: the leader may have pruned it."))
    return render(request, f"{NAME}/loop.html", {"loop": found, "loop_path": loop_path,
                                                 "notice": page_notice(request)})


async def loop_action(request: Request) -> Response:
    dash, lid = dashboard(request), await name_of(request, "loop")
    same_target(request, "lid", lid, "loop")
    outcome, _ = await dash.run(act, dash.config, lid, form_value(request, "action"))
    back = loop_path(lid) if form_value(request, "back") == "loop" and outcome != "gone" \
        else f"/{NAME}/"
    return RedirectResponse(url(request.scope.get(SCOPE_ROOT, ""), back, notice=outcome), 303)


# -- the JSON twins ---------------------------------------------------------------------------
async def api_loops(request: Request) -> Response:
    dash = dashboard(request)
    return Document({"loops": await dash.run(loops, dash.config)})


async def api_loop(request: Request) -> Response:
    dash = dashboard(request)
    found = await dash.run(loop, dash.config, request.path_params["lid"])
    if found is None:
        raise HTTPException(404, N_("No such periodic loop: the leader may have pruned it."))
    return Document(found)


async def api_action(request: Request) -> Response:
    dash, action = dashboard(request), form_value(request, "action")
    outcome, jid = await dash.run(act, dash.config, request.path_params["lid"], action)
    answer: dict[str, Any] = {"action": action, "count": int(outcome == action)}
    if action == "enqueue":
        answer["jid"] = jid
    return JSONResponse(answer)


API = (
    Endpoint("GET", "/loops", api_loops,
             "Periodic loops: next run, last run, paused, recent pushes", tag=NAME),
    Endpoint("GET", "/loops/{lid}", api_loop, "One periodic loop and its history", tag=NAME),
    Endpoint("POST", "/loops/{lid}", api_action, "Pause, unpause or push a loop's job now",
             body=(("action", "string", " | ".join(ACTIONS)),), tag=NAME),
)


def extension() -> Extension:
    """The Periodic tab, registered by ``create_app`` on every dashboard."""
    return Extension(name=NAME, tab=N_("Periodic"), templates=TEMPLATES, api=API, routes=[
        Route("/", list_page, methods=["GET"]),
        # A loop id "." or "..": the browser would resolve the segment away.
        Route("/-/loop", loop_page, methods=["GET"]),
        Route("/-/loop", loop_action, methods=["POST"]),
        Route("/{lid}", loop_page, methods=["GET"]),
        Route("/{lid}", loop_action, methods=["POST"]),
    ])
