"""The Limits tab: every rate limiter, its type, size, current use and stats; a JSON twin.

1. ``extension()``: the tab, a built-in ``Extension`` that ``create_app`` adds unless the
   host passes its own extension named ``limits``. ``GET /limits`` is the page.
2. ``read``: what ``GET /api/limits`` answers (``wurk.web.api``, with the other pages'
   twins) — the same data; an unreadable stored value is ``null`` there, its raw text under
   ``"invalid"``.
3. What the page shows comes from ``wurk.limiter.inspect``, which reads through
   ``wurk.api.values``: a hostile or corrupt counter is an ``invalid`` cell, a limiter whose
   metadata cannot be read a ``problem`` on its row — never an error page. Names and types
   shown are only those that passed its checks.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..config import Config
from ..expiry import expired_count
from ..limiter.inspect import limiters
from .context import dashboard
from .data import page_number
from .extensions import Extension
from .i18n import N_
from .templating import render

__all__ = ["NAME", "extension", "limits_data", "read"]

NAME = "limits"
# How a page filter is cut: a name is at most 200 characters, so a longer filter finds none.
FILTER_CHARS = 200


def limits_data(config: Config, page: int, substr: str) -> dict[str, Any]:
    found = limiters(config, page=page, substr=substr[:FILTER_CHARS])
    found["expired_jobs"] = expired_count(config)
    return found


async def read(request: Request) -> dict[str, Any]:
    """What a request for the Limits tab (or its JSON twin) asks to see."""
    dash = dashboard(request)
    page = page_number(request.query_params.get("page"))
    substr = request.query_params.get("substr", "").strip()
    return await dash.run(limits_data, dash.config, page, substr)


async def limits_page(request: Request) -> Response:
    found = await read(request)
    return render(request, "limits.html", {
        "l": found, "pages": found["pages"], "page": found["page"], "pager_path": "/limits",
        "pager_query": {"substr": found["substr"]}})


def extension() -> Extension:
    return Extension(name=NAME, tab=N_("Limits"), routes=[Route("/", limits_page, methods=["GET"])])
