"""wurk in a FastAPI (or any Starlette) app: ``FastAPI(lifespan=Wurk(...).lifespan)``.

1. ``lifespan`` mounts the dashboard at ``dashboard`` (behind ``authorize(request)``,
   required with it) and, with ``worker=True``, runs an embedded worker (threads in this
   process, ``wurk.InProcessWorker``) from startup to shutdown: at shutdown running jobs get the
   configuration's ``timeout`` to finish, then go back to their queue. A worker that cannot
   boot (a ``startup`` hook raising, a port in use) is logged with its traceback and the
   app serves HTTP without it (``embedded`` stays None): the site is not taken down by its
   background worker. It nests inside an app's own lifespan
   (``async with wurk_ext.lifespan(app): ...``).
2. ``Depends(wurk_ext.client)`` gives the configured ``wurk.Client`` to an endpoint: in an
   ``async def`` one, ``await client.apush(...)`` (or ``await job.aperform_async(...)``)
   pushes on redis-py's asyncio client, on the app's loop, with no thread.
3. The configuration is the one given, else the process default (``wurk.configure``).
4. The lifespan's end closes the app loop's asyncio connections (the configuration's other
   pools are the app's to close: it may outlive the app).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

try:
    import anyio.to_thread
    from starlette.requests import Request
    from starlette.routing import Mount
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError("wurk.contrib.fastapi needs Starlette: pip install 'wurk[fastapi]'") \
        from exc

from ..client.core import Client
from ..client.default import default_client
from ..config import Config, default_config
from ..inprocess import InProcessWorker
from . import require_authorize

__all__ = ["Wurk"]

Authorize = Callable[[Request], "bool | Awaitable[bool]"]

log = logging.getLogger("wurk")


class Wurk:
    """The dashboard mount, an optional embedded worker, and a client dependency."""

    def __init__(self, config: Config | None = None, *, dashboard: str | None = None,
                 authorize: Authorize | None = None, worker: bool = False) -> None:
        require_authorize(dashboard, authorize, "lambda request: is_admin(request); "
                          "lambda request: True only behind authentication of your own")
        self._config = config
        self.dashboard_path = dashboard.rstrip("/") if dashboard else None
        self.authorize = authorize
        self.worker = worker
        self.embedded: InProcessWorker | None = None

    @property
    def config(self) -> Config:
        return self._config if self._config is not None else default_config()

    def client(self) -> Client:
        """A FastAPI dependency: ``client: wurk.Client = Depends(wurk_ext.client)``; its
        ``apush`` / ``apush_bulk`` never block the app's loop."""
        return default_client(self.config)

    @asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        config = self.config
        if self.dashboard_path is not None:
            self._mount(app, config)
        embedded = InProcessWorker(config) if self.worker else None
        if embedded is not None:
            try:
                await anyio.to_thread.run_sync(embedded.start)
            except Exception:  # the start stopped what it had started
                log.exception("wurk: the embedded worker did not start; the app serves HTTP "
                              "without it (no job runs in this process)")
                embedded = None
            self.embedded = embedded
        try:
            yield
        finally:
            try:
                if embedded is not None:
                    self.embedded = None
                    await anyio.to_thread.run_sync(embedded.stop)
            finally:
                # asyncio connections die with their loop, whether or not the stop failed
                await config.aclose_async_pool()

    def _mount(self, app: Any, config: Config) -> None:
        path = self.dashboard_path
        if any(isinstance(route, Mount) and route.path == path for route in app.routes):
            return  # a second lifespan of the same app (a test client per test)
        from ..web import create_app

        app.mount(path, create_app(config, authorize=self.authorize), name="wurk")
