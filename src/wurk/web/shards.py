"""The Shards tab: every shard's numbers side by side, their sum, and each shard's own pages.

1. Shown when the configuration names ``shards`` (``docs/scaling.md``): ``/shards`` reads
   each shard's numbers (``wurk.api.ShardStats``: processed, failed, busy, enqueued,
   scheduled, retries, dead, processes) and adds them up. A shard that cannot be read is
   named with its error, never a 500, and the total says it leaves that shard out.
2. Each other shard's own dashboard is mounted at ``/shards/<name>/``: the same pages, on
   that shard's Redis, behind the same guard (host names, auth, read-only, CSRF) as this
   one; the default shard's pages are this dashboard's.
3. On Redis Cluster (``Config.is_cluster``) the shards are the queues' keyspaces
   (``docs/scaling.md``): the tab lists every keyspace ``Config.shard_names`` knows when the
   page is read, and mounts the pages of those known when the dashboard was made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route

from ..api.stats import SUMMED, ShardStats
from ..config import DEFAULT_SHARD, Config
from .context import dashboard
from .extensions import Extension
from .i18n import N_
from .templating import render

__all__ = ["NAME", "extension"]

NAME = "shards"


def _numbers(config: Config) -> ShardStats:
    """Each shard's numbers, read through the dashboard's own small pool on each."""
    size = config.web_pool_size
    return ShardStats(configs=[(name, config.shard(name).routed("api", "web", size=size))
                               for name in config.shard_names()])


async def page(request: Request) -> Response:
    dash = dashboard(request)
    found = await dash.run(_numbers, dash.config)
    return render(request, "shards.html", {"shards": found.shards, "total": found.total(),
                                           "complete": found.complete, "columns": SUMMED,
                                           "default": DEFAULT_SHARD})


def extension(config: Config, make_app: Callable[[Config], Any]) -> Extension | None:
    """The tab for ``config``'s shards, with each other shard's dashboard made by
    ``make_app``; None without shards, or for a shard's own dashboard."""
    if not (config.shards or config.is_cluster) or config.shard_name != DEFAULT_SHARD:
        return None
    others = config.shard_names()[1:] if config.is_cluster else list(config.shards)
    routes: list[BaseRoute] = [Route("/", page, methods=["GET"])]
    routes += [Mount(f"/{name}", app=make_app(config.shard(name))) for name in others]
    return Extension(name=NAME, tab=N_("Shards"), routes=routes)
