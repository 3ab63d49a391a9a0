"""``create_app``: the dashboard as one ASGI app.

1. Routes: the pages (``views``), the JSON API and its documentation (``api``,
   ``openapi``), the live stream (``sse``), the package's own assets (``/static``; nothing
   comes from a CDN, so it works offline) and each extension under its name. The built-in
   Periodic, Metrics, History, Profiles, Results, Limits, Batches, Dead Batches and
   Workflows tabs are extensions registered first (a host's own ``limits`` replaces the
   Limits tab);
   ``/metrics`` itself answers a browser with the Metrics page and a Prometheus scraper with
   the cluster's figures. With ``shards`` configured, a Shards tab shows each shard's
   numbers and their sum, and mounts each other shard's own dashboard under it
   (``wurk.web.shards``).
2. The ``Guard`` middleware around all of them (host names, auth, CSRF, headers); HTTP
   errors as a page, or JSON under ``/api``, with fixed text only.
3. Mount it anywhere: every link is built from the prefix the host app mounted it at
   (``root_path``), and it needs no lifespan of its own. Its Redis pool belongs to the
   configuration and is closed with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from ..config import Config, default_config
from ..errors import ConfigError
from ..hosts import HostNames
from . import (
    api,
    batches,
    history,
    metrics,
    openapi,
    periodic,
    profiles,
    results,
    shards,
    views,
    workflows,
)
from .context import STATE_ATTRIBUTE, Dashboard
from .extensions import Extension, mount
from .guard import Authorize, Guard, assets, wants_json
from .limiters import NAME as LIMITS_TAB
from .limiters import extension as limits_tab
from .sse import EventStream, LiveStats
from .templating import build_templates, render

__all__ = ["create_app"]


def create_app(config: Config | None = None, *, authorize: Authorize | None = None,
               read_only: bool | None = None, extensions: Sequence[Extension] = (),
               allowed_hosts: Sequence[str] = ()) -> Starlette:
    """The dashboard for ``config`` (default: the process-wide configuration).

    ``authorize(request)`` — sync or async — decides per request; anything but ``True``
    answers 403. ``web_username``/``web_password`` in the configuration add HTTP basic auth
    in front of it. ``read_only`` (default: ``config.web_read_only``) refuses every action.
    It answers requests for the loopback names, ``config.web_allowed_hosts`` and
    ``allowed_hosts`` only (``"*"``: any host); any other ``Host`` gets 400.
    """
    cfg = config if config is not None else default_config()
    extensions = check_extensions(extensions)
    chosen = (*builtin_extensions(extensions), *extensions)
    shard_tab = shards.extension(cfg, lambda view: create_app(
        view, authorize=authorize, read_only=read_only, extensions=extensions,
        allowed_hosts=allowed_hosts))
    if shard_tab is not None:  # every shard's numbers, and each shard's own pages
        chosen = (*chosen, shard_tab)
    check_unique(chosen)
    dash = Dashboard.for_config(
        cfg, read_only=cfg.web_read_only if read_only is None else bool(read_only),
        stream_interval=float(cfg.web_stream_interval), templates=build_templates(chosen),
        extensions=chosen, poll_interval=float(cfg.web_poll_interval))
    basic = None
    if cfg.web_username is not None and cfg.web_password is not None:
        basic = (cfg.web_username, cfg.web_password)
    try:
        hosts = HostNames([*cfg.web_allowed_hosts, *allowed_hosts])
    except ValueError as exc:
        raise ConfigError(f"allowed_hosts: {exc}") from None
    guard = Middleware(Guard, config=cfg, basic=basic, authorize=authorize,
                       read_only=dash.read_only, hosts=hosts)
    app = Starlette(routes=routes(chosen, cfg), middleware=[guard],
                    exception_handlers={HTTPException: http_error})
    setattr(app.state, STATE_ATTRIBUTE, dash)
    return app


def routes(extensions: tuple[Extension, ...], config: Config) -> list[BaseRoute]:
    return [
        *views.routes(), *api.routes(), *openapi.routes(),
        Route(openapi.STREAM_PATH, EventStream(LiveStats()), methods=["GET"]),
        Mount("/static", assets(StaticFiles(packages=[("wurk.web", "static")])),
              name="static"),
        Route("/metrics", metrics.root, methods=["GET"]),
        *[route for extension in extensions for route in mount(extension, config)],
    ]


def builtin_extensions(given: Sequence[Extension] = ()) -> tuple[Extension, ...]:
    """The tabs wurk adds through the extension mechanism (after Sidekiq's own); the Limits
    tab gives way to a host's own extension named ``limits``."""
    builtin = (periodic.extension(), metrics.extension(), history.extension(),
               profiles.extension(), results.extension(), *batches.extensions(),
               workflows.extension())
    if any(extension.name == LIMITS_TAB for extension in given):
        return builtin
    return (*builtin, limits_tab())


def check_extensions(given: Any) -> tuple[Extension, ...]:
    """``extensions`` as ``create_app`` takes it: a list of ``Extension`` objects. Anything
    else (a built-in tab's module, ``extensions=[wurk.web.batches]``, as a Sidekiq Pro user
    adds its tabs) is named, and the built-in tabs said to need nothing, not an
    ``AttributeError`` from deep inside."""
    if isinstance(given, Extension):
        raise ConfigError(f"extensions must be a list of wurk.web.Extension, not one: give "
                          f"[it] (the tab {given.name!r})")
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
        raise ConfigError(f"extensions must be a list of wurk.web.Extension, not {given!r}"
                          f"{_built_in_note()}")
    for item in given:
        if not isinstance(item, Extension):
            raise ConfigError(f"extensions: {item!r} is no wurk.web.Extension"
                              f"{_built_in_note()}")
    return tuple(given)


def _built_in_note() -> str:
    tabs = ", ".join(extension.tab for extension in builtin_extensions()
                     if extension.tab is not None)
    return (f"; the built-in tabs ({tabs}) are always there and need nothing here: give "
            "only tabs of your own, each a wurk.web.Extension(...) (docs/dashboard.md)")


def check_unique(extensions: tuple[Extension, ...]) -> None:
    names = [extension.name for extension in extensions]
    doubled = sorted({name for name in names if names.count(name) > 1})
    if doubled:
        raise ConfigError(f"two dashboard extensions are named {doubled[0]!r}; names must "
                          "be unique")


async def http_error(request: Request, exc: Exception) -> Response:
    """404, 405, 400…: JSON under ``/api``, else a page; the detail is always our text."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else "Something went wrong."
    if wants_json(request.scope):
        return JSONResponse({"error": detail}, status)
    return render(request, "error.html", {"status": status, "message": detail}, status=status)
