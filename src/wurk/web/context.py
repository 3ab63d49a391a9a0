"""What every request handler of the dashboard shares.

1. ``Dashboard``: the configuration view whose ``"api"`` pool is the dashboard's own small
   ``"web"`` pool (pages never take a worker's connections), the settings, the templates and
   the extensions.
2. ``Dashboard.run``: blocking reads and writes of ``wurk.api`` run on worker threads, at
   most as many at once as the pool has connections, so excess requests wait in the event
   loop instead of each holding a thread blocked on an empty pool.
3. ``dashboard(request)``: the ``Dashboard`` of the app serving a request.
4. ``Dashboard.words``: a page's translations, wurk's over its extensions' catalogs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.to_thread
from babel.support import NullTranslations
from starlette.requests import Request

from ..config import Config
from .i18n import with_extensions

if TYPE_CHECKING:
    from starlette.templating import Jinja2Templates

    from .extensions import Extension

__all__ = ["WEB_POOL_ROLE", "Dashboard", "dashboard"]

T = TypeVar("T")

WEB_POOL_ROLE = "web"
STATE_ATTRIBUTE = "wurk_dashboard"


@dataclass(eq=False)
class Dashboard:
    """One dashboard app's shared state."""

    config: Config
    read_only: bool
    stream_interval: float
    templates: Jinja2Templates
    extensions: tuple[Extension, ...] = ()
    # Seconds between two refreshes of a page's content while its Live Poll is on.
    poll_interval: float = 5.0
    # Set by whoever stops the server (``wurk web`` does): open live streams end at their
    # next tick instead of holding the shutdown until they are cancelled.
    closing: threading.Event = field(default_factory=threading.Event)
    _limiter: anyio.CapacityLimiter | None = field(default=None, init=False, repr=False)

    @classmethod
    def for_config(cls, config: Config, **settings: Any) -> Dashboard:
        """A dashboard reading through ``config``'s own ``web`` pool."""
        view = config.routed("api", WEB_POOL_ROLE, size=config.web_pool_size)
        return cls(config=view, **settings)

    def words(self, code: str) -> NullTranslations:
        """The translations of ``code`` for this dashboard's pages: wurk's, over its
        extensions' catalogs (``Extension.locales``)."""
        catalogs = tuple((ext.name, str(ext.locales)) for ext in self.extensions
                         if ext.locales is not None)
        return with_extensions(code, catalogs)

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on a worker thread, within the pool's capacity."""
        if self._limiter is None:  # made in the event loop: older anyio needs one running
            self._limiter = anyio.CapacityLimiter(self.config.web_pool_size)
        return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs),
                                              limiter=self._limiter)


def dashboard(request: Request) -> Dashboard:
    """The ``Dashboard`` of the app serving ``request`` (for extension handlers too)."""
    found: Dashboard = getattr(request.app.state, STATE_ATTRIBUTE)
    return found
