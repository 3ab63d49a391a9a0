"""A small Starlette app hosting wurk as a web process would;
``test_in_process_worker_app.py`` serves it with uvicorn. ``WURK_TEST_EMBED`` picks the
mode: ``threads`` (``wurk.embed``, the default) or ``swarm`` (``boot_swarm``: forked
children supervised from a background thread).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import wurk
from wurk.inprocess import boot_swarm
from wurk.swarm import SwarmSettings


def _config() -> wurk.Config:
    config = wurk.configure(heartbeat_interval=0.5, fetch_timeout=0.5, timeout=2,
                            shutdown_grace=1, concurrency=2, poll_interval_average=0.2,
                            scheduler_initial_wait=0, tag="embed-test")
    # Imported after configure: the job modules add their handlers to this configuration.
    import tests.system.swarm_jobs
    import tests.system.worker_jobs  # noqa: F401

    return config


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    config = _config()
    if os.environ.get("WURK_TEST_EMBED") == "swarm":
        host = boot_swarm(config, SwarmSettings(count=2, tick=0.1, backoff_base=0.2,
                                                shutdown_grace=3))
        try:
            yield
        finally:
            host.stop()
    else:
        worker = wurk.embed(config)
        try:
            yield
        finally:
            worker.stop()


async def home(request: Request) -> JSONResponse:
    return JSONResponse({"pid": os.getpid()})


app = Starlette(routes=[Route("/", home)], lifespan=lifespan)
