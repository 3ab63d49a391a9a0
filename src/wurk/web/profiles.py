"""The Profiles tab: job profiles kept for a day, each drawn as a flame graph on the server.

1. ``extension()``: a built-in ``Extension``. ``GET /profiles/`` lists them, newest first,
   25 a page, after dropping the expired (as Sidekiq's tab does); ``GET
   /profiles/view?key=<token>-<jid>`` shows one: its fields and a flame graph drawn as SVG
   by ``charts.flame_graph`` from speedscope's format (wurk's) or the Firefox Profiler's
   (Ruby's Vernier) — no script, nothing fetched from elsewhere, nothing uploaded.
2. ``GET /profiles/data?key=…`` downloads the stored gzip: served with ``content-encoding:
   gzip`` as ``<name>.json``, which speedscope (wurk's profiles) and the Firefox Profiler
   (Ruby's) open, when it is gzip that inflates; any other bytes as they are, as a file.
3. ``POST /profiles/firefox`` (form: ``key``, the CSRF token): "Open in Firefox Profiler",
   as Sidekiq 8's "View": the profile is uploaded to ``web_profiler_store_url``
   (``wurk.profiling.firefox``) and the browser sent (303) to ``web_profiler_view_url``
   with the store's token; only on that click, and only where ``web_profiler_upload`` is on
   (else 404). A profile the Firefox Profiler does not import (speedscope's: wurk's own),
   one that cannot be read, or a store that fails (unreachable, an error, no answer within
   ``web_profiler_timeout``, no token) is the profile page again, saying why (422, 502).
   The profile page lets its form lead to the view's origin (its CSP's ``form-action``): a
   browser checks it on the redirect after the POST.
4. The key is a query parameter (a form field for the POST), not a path segment: a member
   is read from Redis and may hold a ``/``. Every value shown is read through
   ``wurk.api.ProfileSet`` (``Invalid`` cells, a record's ``problem``) and escaped; a
   profile that cannot be drawn says why, in fixed words. Nothing here answers 500 for what
   Redis holds, nor for what the store answers.
"""

from __future__ import annotations

import contextlib
import math
import re
import zlib
from functools import partial
from pathlib import Path
from typing import Any

import anyio.to_thread
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ..api.profiles import DATA_LIMIT, ProfileRecord, ProfileSet
from ..config import Config
from ..errors import RedisUnavailable
from ..profiling import firefox
from ..profiling.flame import Unreadable
from . import charts
from .context import dashboard
from .data import page_number
from .extensions import Extension
from .guard import SCOPE_FORM
from .i18n import N_
from .security import content_security_policy
from .templating import render

__all__ = ["NAME", "PAGE_SIZE", "extension"]

NAME = "profiles"
TEMPLATES = Path(__file__).parent / "templates" / NAME
PAGE_SIZE = 25
GONE = N_("No such profile: it expired, was deleted or never was.")
# A download inflates to at most this before it is served as gzip JSON (else as raw bytes):
# a stored gzip may be a bomb, and a browser told ``content-encoding: gzip`` that cannot
# inflate it fails the download.
INFLATE_CHECK = 256 * 1024 * 1024
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def listing(config: Config, page: int) -> dict[str, Any]:
    profiles = ProfileSet(config)
    with contextlib.suppress(RedisUnavailable):  # a read-only replica: list all there is
        profiles.prune()
    size = profiles.size()
    pages = max(1, math.ceil(size / PAGE_SIZE))
    page = min(page, pages)
    found = profiles.page((page - 1) * PAGE_SIZE, PAGE_SIZE) if size else []
    return {"profiles": [shown(record) for record in found], "size": size, "page": page,
            "pages": pages}


def shown(record: ProfileRecord) -> dict[str, Any]:
    row = record.to_dict()
    size = row["size"]
    row["kilobytes"] = max(1, size // 1024) if isinstance(size, int) and size else size
    return row


def one(config: Config, key: str) -> dict[str, Any] | None:
    record = ProfileSet(config).find(key)
    if record is None:
        return None
    answer: dict[str, Any] = {"p": shown(record), "chart": None, "unreadable": None,
                              "flame": None}
    try:
        flame = record.flame()
    except Unreadable as exc:
        answer["unreadable"] = str(exc)
        return answer
    answer["flame"] = {"kind": flame.kind, "title": flame.title, "cut": flame.cut,
                       "total": flame.root.value, "unit": flame.unit}
    answer["chart"] = charts.flame_graph(flame.root, flame.unit)
    return answer


def download(config: Config, key: str) -> tuple[bytes, str] | None:
    record = ProfileSet(config).find(key)
    data = record.data() if record is not None else None
    if record is None or data is None:
        return None
    name = record.filename.rpartition("/")[2] or key  # Ruby stores the temporary file's path
    stem = _UNSAFE_NAME.sub("_", name)[-120:].lstrip("._-")
    for suffix in (".gz", ".json"):  # the format's suffix is the response's to give
        stem = stem.removesuffix(suffix)
    return data, stem or "profile"


def inflates(data: bytes, limit: int = INFLATE_CHECK) -> bool:
    """Whether ``data`` is one whole gzip stream inflating to at most ``limit`` bytes (read
    in steps and thrown away: nothing but the answer is kept)."""
    inflater = zlib.decompressobj(wbits=31)
    size, chunk = 0, data
    try:
        while chunk and size <= limit:
            size += len(inflater.decompress(chunk, 1 << 20))
            chunk = inflater.unconsumed_tail
        size += len(inflater.flush())
    except zlib.error:
        return False
    return inflater.eof and size <= limit


# -- pages ------------------------------------------------------------------------------------
def key_of(request: Request) -> str:
    return request.query_params.get("key", "")


async def list_page(request: Request) -> Response:
    dash = dashboard(request)
    found = await dash.run(listing, dash.config, page_number(request.query_params.get("page")))
    return render(request, f"{NAME}/list.html", {
        "found": found, "pages": found["pages"], "page": found["page"],
        "pager_path": f"/{NAME}/", "pager_query": {}})


async def profile_page(request: Request) -> Response:
    return await shown_page(request, key_of(request))


async def shown_page(request: Request, key: str, failure: firefox.UploadFailed | None = None
                     ) -> Response:
    """A profile's page; after a failed upload, with why, and the failure's status."""
    dash = dashboard(request)
    found = await dash.run(one, dash.config, key)
    if found is None:
        raise HTTPException(404, GONE)
    config = dash.config
    upload = None
    if config.web_profiler_upload and not dash.read_only:
        upload = {"host": firefox.store_host(config.web_profiler_store_url)}
    context = {**found, "upload": upload,
               "upload_failed": str(failure) if failure is not None else None}
    response = render(request, f"{NAME}/profile.html", context,
                      status=failure.status if failure is not None else 200)
    if upload is not None:  # the form's redirect ends at the profiler
        response.headers["content-security-policy"] = content_security_policy(
            firefox.view_origin(config.web_profiler_view_url))
    return response


def upload_body(config: Config, key: str) -> bytes | None:
    """What to upload for the profile ``key`` (None: no such profile); ``NotImported``."""
    record = ProfileSet(config).find(key)
    if record is None:
        return None
    data = record.data()
    if data is None:
        raise firefox.NotImported("no profile data is stored (or it is over "
                                  f"{DATA_LIMIT // (1024 * 1024)} MB)")
    return firefox.prepare(data)


async def open_in_firefox(request: Request) -> Response:
    dash = dashboard(request)
    config = dash.config
    if not config.web_profiler_upload:
        raise HTTPException(404, "Opening profiles in the Firefox Profiler is switched off "
                                 "(web_profiler_upload).")
    key = request.scope.get(SCOPE_FORM, {}).get("key", "")
    if not isinstance(key, str) or not key:
        raise HTTPException(404, GONE)
    try:
        body = await dash.run(upload_body, config, key)
        if body is None:
            raise HTTPException(404, GONE)
        # Not on the dashboard's Redis threads: the store may take its whole timeout.
        token = await anyio.to_thread.run_sync(partial(
            firefox.upload, body, config.web_profiler_store_url,
            float(config.web_profiler_timeout)))
        target = firefox.view_url(config.web_profiler_view_url, token)
    except firefox.UploadFailed as failed:
        return await shown_page(request, key, failed)
    return RedirectResponse(target, 303)


async def data_file(request: Request) -> Response:
    dash = dashboard(request)
    found = await dash.run(download, dash.config, key_of(request))
    if found is None:
        raise HTTPException(404, GONE)
    data, stem = found
    if await dash.run(inflates, data):
        return Response(data, media_type="application/json", headers={
            "content-encoding": "gzip",
            "content-disposition": f'attachment; filename="{stem}.json"'})
    return Response(data, media_type="application/octet-stream", headers={
        "content-disposition": f'attachment; filename="{stem}.bin"'})


def extension() -> Extension:
    """The Profiles tab, registered by ``create_app`` on every dashboard."""
    return Extension(name=NAME, tab=N_("Profiles"), templates=TEMPLATES, routes=[
        Route("/", list_page, methods=["GET"]),
        Route("/view", profile_page, methods=["GET"]),
        Route("/data", data_file, methods=["GET"]),
        Route("/firefox", open_in_firefox, methods=["POST"]),
    ])
