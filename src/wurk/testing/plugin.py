"""The pytest plugin, registered on install through the ``pytest11`` entry point.

1. ``wurk_fake`` / ``wurk_inline``: the whole process in that mode for one test (threads the
   code under test starts included), the fake queues empty before and after; the mode the
   test found is put back. The fixture's value is the fake store (``.jobs()``,
   ``.drain_all()``, ``.clear_all()``).
2. ``wurk_redis``: a private real server (the embedded server binary of ``wurk[embedded]``)
   started once per session in a temporary directory and emptied before each test; the
   test gets a ``wurk.Config`` pointing at it, made the process default, with ``REDIS_URL``
   set for the test so subprocesses (a worker) find the same server. Pushes go to Redis
   for the test, whatever mode the suite switched on.
3. Nothing happens unless a test asks for a fixture: loading the plugin changes no mode.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .. import config as wurk_config
from ..connections.server import EmbeddedServer
from . import FakeStore, set_mode, store

__all__ = ["RedisServer", "wurk_fake", "wurk_inline", "wurk_redis", "wurk_redis_server"]


@pytest.fixture
def wurk_fake() -> Iterator[FakeStore]:
    """Fake mode for this test: ``resize.perform_async(1); assert len(resize.jobs) == 1``."""
    store.clear_all()
    previous = set_mode("fake")
    try:
        yield store
    finally:
        set_mode(previous)
        store.clear_all()


@pytest.fixture
def wurk_inline() -> Iterator[None]:
    """Inline mode for this test: every push runs its job at once."""
    previous = set_mode("inline")
    try:
        yield
    finally:
        set_mode(previous)


class RedisServer:
    """The session's private server: its URL, and a way to empty it."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._server = EmbeddedServer(home)
        self.url = self._server.start().url

    def flush(self) -> None:
        import redis

        client = redis.Redis.from_url(self.url, socket_timeout=5)
        try:
            client.flushall()
        finally:
            client.close()

    def stop(self) -> None:
        self._server.stop()


@pytest.fixture(scope="session")
def wurk_redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One private server for the whole session (started on first use)."""
    server = RedisServer(tmp_path_factory.mktemp("wurk-redis"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def wurk_redis(wurk_redis_server: RedisServer) -> Iterator[wurk_config.Config]:
    """A configuration on the private server, empty at the start of the test."""
    wurk_redis_server.flush()
    previous_url = os.environ.get("REDIS_URL")
    os.environ["REDIS_URL"] = wurk_redis_server.url
    previous_mode = set_mode("disable")
    previous_config = wurk_config._default
    config = wurk_config.Config(redis_url=wurk_redis_server.url)
    wurk_config._default = config
    try:
        yield config
    finally:
        wurk_config._default = previous_config
        config.close()
        set_mode(previous_mode)
        if previous_url is None:
            os.environ.pop("REDIS_URL", None)
        else:
            os.environ["REDIS_URL"] = previous_url
