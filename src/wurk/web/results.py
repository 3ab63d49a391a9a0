"""The Results tab: what a job that keeps its result (``result_ttl``) came to, by its jid.

1. ``extension()``: a built-in ``Extension``. ``GET /results/`` is a form asking for a jid;
   ``GET /results/?jid=<jid>`` redirects to ``GET /results/<jid>``, the job's stored
   outcome — succeeded (its JSON value, pretty-printed, the first ``VALUE_CHARS``
   characters of it), failed (the error's class and message, whether a retry is due, the
   backtrace when the job keeps one) or cancelled — with the job's class, when its last run
   started and finished, and how long it ran.
2. ``GET /api/results/<jid>``: the same as JSON, ``{"jid", "result"}`` with the record as
   stored (``Outcome.to_dict``); a record that cannot be read is ``null`` there, its raw
   text under ``"invalid"`` and what is wrong under ``"problem"``.
3. Read through ``wurk.api.ResultQuery``: what Redis holds is untrusted, and a record that is
   not what wurk writes is an ``Invalid`` (``wurk.results.store.decode``), shown as such —
   never an error page. A jid with no stored result answers 404 with a fixed sentence.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from markupsafe import Markup, escape
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ..api.results import ResultQuery
from ..config import Config
from ..results.store import Outcome
from ..stored import Invalid
from .api import Document, Endpoint
from .context import dashboard
from .extensions import Extension
from .guard import SCOPE_ROOT
from .i18n import N_
from .templating import named_path, render, url

__all__ = ["GONE", "NAME", "VALUE_CHARS", "extension", "lookup"]

NAME = "results"
TEMPLATES = Path(__file__).parent / "templates" / NAME
GONE = N_("No result is stored for this job: it keeps none (no result_ttl), has not finished, "
        "or its result expired.")
# A value is shown as at most this many characters of pretty-printed JSON (the API has it
# whole): a 10 MB value costs the page what 20 kB does.
VALUE_CHARS = 20_000
# Backtrace lines shown at most (each is cut like any text a page shows).
BACKTRACE_LINES = 200
# A jid longer than this is looked up as it is cut: no jid wurk writes comes near it.
JID_CHARS = 1_000


def pretty_value(value: Any, limit: int = VALUE_CHARS) -> tuple[Markup, bool]:
    """``value`` as indented JSON, escaped, and whether it was cut at ``limit`` characters
    (encoded a piece at a time: a huge value is never written out whole)."""
    encoder = json.JSONEncoder(indent=2, ensure_ascii=False, sort_keys=True, default=str)
    pieces: list[str] = []
    size = 0
    for piece in encoder.iterencode(value):
        pieces.append(piece)
        size += len(piece)
        if size > limit:
            return escape("".join(pieces)[:limit]), True
    return escape("".join(pieces)), False


def runtime(outcome: Outcome) -> float | None:
    """Seconds from the last run's start to its end; None when either is unknown."""
    if outcome.started_at is None or outcome.finished_at is None:
        return None
    seconds = outcome.finished_at - outcome.started_at
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def lookup(config: Config, jid: str) -> dict[str, Any] | None:
    """What the result page shows for ``jid``; None when no result is stored."""
    found = ResultQuery(config).find(jid)
    if found is None:
        return None
    if isinstance(found, Invalid):
        return {"jid": jid, "invalid": found, "outcome": None}
    shown: dict[str, Any] = {"jid": jid, "invalid": None, "outcome": found,
                             "runtime": runtime(found), "value": None, "cut": False,
                             "backtrace": None, "hidden_lines": 0}
    if found.status == "succeeded":
        shown["value"], shown["cut"] = pretty_value(found.value)
    if found.backtrace:
        shown["backtrace"] = found.backtrace[:BACKTRACE_LINES]
        shown["hidden_lines"] = max(0, len(found.backtrace) - BACKTRACE_LINES)
    return shown


def document(config: Config, jid: str) -> dict[str, Any] | None:
    """What ``GET /api/results/<jid>`` answers; None when no result is stored."""
    found = ResultQuery(config).find(jid)
    if found is None:
        return None
    if isinstance(found, Invalid):
        return {"jid": jid, "result": found, "problem": f"expected {found.expected}"}
    return {"jid": jid, "result": found.to_dict()}


def jid_of(request: Request) -> str:
    """The jid of ``/results/<jid>``, or of ``/results/-/result?jid=`` (``named_path``)."""
    jid = request.path_params.get("jid")
    if jid is None:
        jid = request.query_params.get("jid", "")
    return str(jid)[:JID_CHARS]


# -- pages ------------------------------------------------------------------------------------
async def form_page(request: Request) -> Response:
    jid = request.query_params.get("jid", "").strip()[:JID_CHARS]
    if jid:
        return RedirectResponse(url(request.scope.get(SCOPE_ROOT, ""),
                                    named_path("result", jid)), 303)
    return render(request, f"{NAME}/result.html", {"jid": "", "found": None, "missing": False})


async def result_page(request: Request) -> Response:
    dash, jid = dashboard(request), jid_of(request)
    if not jid:
        return await form_page(request)
    found = await dash.run(lookup, dash.config, jid)
    if found is None:
        return render(request, f"{NAME}/result.html",
                      {"jid": jid, "found": None, "missing": True, "gone": GONE}, status=404)
    return render(request, f"{NAME}/result.html", {"jid": jid, "found": found,
                                                   "missing": False,
                                                   "value_chars": VALUE_CHARS})


async def api_result(request: Request) -> Response:
    dash = dashboard(request)
    found = await dash.run(document, dash.config, jid_of(request))
    if found is None:
        raise HTTPException(404, GONE)
    return Document(found)


API = [Endpoint("GET", "/{jid}", api_result,
                "A job's stored result (result_ttl): its status, value or error, and when "
                "its last run started and finished", tag=NAME)]


def extension() -> Extension:
    """The Results tab, registered by ``create_app`` on every dashboard."""
    return Extension(name=NAME, tab=N_("Results"), templates=TEMPLATES, api=API, routes=[
        Route("/", form_page, methods=["GET"]),
        # A jid "." or "..": the browser would resolve the segment away.
        Route("/-/result", result_page, methods=["GET"]),
        Route("/{jid:path}", result_page, methods=["GET"]),
    ])
