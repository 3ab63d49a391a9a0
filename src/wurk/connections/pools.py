"""The Redis connections of one configuration: made on first use, closed together.

1. ``Connections.pool(role)``: one bounded ``RedisPool`` per role (``client``, ``internal``,
   a capsule's name, ``web``…), made on first use from the settings read then — where Redis
   is (``wurk.connections.locate``) and the socket timeout. The reading roles (``api``,
   ``web``) get the client that reads a key of the wrong type as absent.
2. ``routed(role, to, size)``: a view whose ``pool(role)`` is ``pool(to, size=size)``,
   sharing every pool (the dashboard reads ``wurk.api`` through a view that routes ``api``
   to its own small ``web`` pool).
3. ``async_pool()``: one asyncio pool per running event loop (an asyncio connection works
   only on the loop that opened it); pools of loops closed since are closed then.
4. ``reset_after_fork`` drops every pool without closing the parent's sockets; ``close`` /
   ``aclose`` end every connection; a pool used again afterwards is made anew.
   ``close_idle`` closes the connections idle longer than ``redis_idle_timeout``: the sync
   pools' at once, and each asyncio pool's on its own loop, soon after.
5. ``unreached``: whether a worker of this configuration has been waiting since boot for a
   Redis that never answered (``wurk.connections.unreached``), shared by every view.
6. ``view(name, make)``: the configuration's view of shard ``name`` (``Config.shard``),
   made once; ``close`` and ``reset_after_fork`` reach the views' pools too.

``Config`` holds settings; this object holds what a configuration opens at run time, and
``Config.pool()`` / ``Config.async_pool()`` / ``Config.close()`` hand over to it.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Callable
from typing import Any, Protocol

import redis

from .locate import resolve_url
from .pool import AsyncRedisPool, RedisPool
from .reading import ReadingRedis
from .unreached import Unreached

__all__ = ["Connections", "Settings"]

# A pool's size when its role does not ask for one.
DEFAULT_SIZE = 10
# The roles that read what others wrote, for people: the inspection API and the CLI
# (``api``), the dashboard (``web``). Their reads take a key of the wrong type as absent
# (``wurk.connections.reading``).
READING_ROLES = frozenset({"api", "web"})


class Settings(Protocol):
    """What a configuration says about reaching Redis, read when a pool is made."""

    redis_url: str | None
    home: str
    start_embedded: bool
    socket_timeout: float
    redis_idle_timeout: float | None


class Connections:
    """A configuration's pools; thread-safe."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self._pools: dict[str, RedisPool] = {}
        self._async_pools: dict[asyncio.AbstractEventLoop, AsyncRedisPool] = {}
        self._routes: dict[str, tuple[str, int]] = {}
        self._views: dict[str, Any] = {}  # shard name -> its Config view
        self.unreached = Unreached()

    def pool(self, role: str = "client", *, size: int | None = None) -> RedisPool:
        route = self._routes.get(role)
        if route is not None:
            role, size = route
        with self._lock:
            existing = self._pools.get(role)
            if existing is not None:
                return existing
            settings = self._settings
            url = resolve_url(settings.redis_url, settings.home, start=settings.start_embedded)
            made = self._pools[role] = RedisPool(
                url, size=size or DEFAULT_SIZE, name=f"wurk-{role}",
                socket_timeout=settings.socket_timeout,
                client_class=ReadingRedis if role in READING_ROLES else redis.Redis,
                idle_timeout=settings.redis_idle_timeout)
            return made

    def routed(self, role: str, to: str, *, size: int) -> Connections:
        view = copy.copy(self)  # the same pools, lock and settings; routes of its own
        view._routes = {**self._routes, role: (to, size)}
        return view

    def async_pool(self) -> AsyncRedisPool:
        loop = asyncio.get_running_loop()
        pool = self._async_pools.get(loop)
        if pool is not None:
            return pool
        url = self.pool("client").url
        with self._lock:
            pool = self._async_pools.get(loop)
            if pool is None:
                for old in [p for p in self._async_pools.values() if p.loop.is_closed()]:
                    old.close()
                    del self._async_pools[old.loop]
                pool = self._async_pools[loop] = AsyncRedisPool(
                    url, loop, socket_timeout=self._settings.socket_timeout,
                    idle_timeout=self._settings.redis_idle_timeout)
            return pool

    def view(self, name: str, make: Callable[[], Any]) -> Any:
        """The view of shard ``name``, made by ``make`` the first time."""
        with self._lock:
            found = self._views.get(name)
            if found is None:
                found = self._views[name] = make()
            return found

    def _view_connections(self) -> list[Connections]:
        with self._lock:
            return [view._connections for view in self._views.values()]

    def close_idle(self) -> int:
        """Close the connections idle longer than ``redis_idle_timeout`` in every pool
        (the shards' too); how many of the sync pools'. Each asyncio pool's loop is asked to
        close its own (``AsyncRedisPool.close_idle_soon``): they are not counted."""
        closed = sum(connections.close_idle() for connections in self._view_connections())
        with self._lock:
            pools = list(self._pools.values())
            async_pools = list(self._async_pools.values())
        for async_pool in async_pools:
            async_pool.close_idle_soon()
        return closed + sum(pool.close_idle() for pool in pools)

    def reset_after_fork(self) -> None:
        for connections in self._view_connections():
            connections.reset_after_fork()
        with self._lock:
            for pool in self._pools.values():
                pool.reset_after_fork()
            self._pools.clear()
            self._async_pools.clear()  # the parent's loops do not run here

    def close(self) -> None:
        for connections in self._view_connections():
            connections.close()
        with self._lock:
            for pool in self._pools.values():
                pool.close()
            self._pools.clear()
            for async_pool in self._async_pools.values():
                async_pool.close()
            self._async_pools.clear()

    async def aclose_async_pool(self) -> None:
        with self._lock:
            mine = self._async_pools.pop(asyncio.get_running_loop(), None)
        if mine is not None:
            await mine.aclose()
