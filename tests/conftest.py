"""Test harness: one private server per session, flushed before every test.

Every process the tests start inherits ``REDIS_URL``, so a worker subprocess and the test
talk to the same private server. Nothing here reads ``../shared``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import wurk
import wurk.config
from tests.helpers import cluster as redis_clusters
from tests.helpers import mariadb
from tests.helpers.postgres import INSTALL_HINT, Cluster, find_binaries, start_cluster
from tests.helpers.server import Server, start_server

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session", autouse=True)
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(tmp_path_factory.mktemp("redis"))
    previous = {name: os.environ.get(name) for name in ("REDIS_URL", "WURK_HOME")}
    os.environ["REDIS_URL"] = server.url
    # A home of the session's own: no test process finds a .wurk of the checkout (and says
    # that REDIS_URL wins over it on stderr).
    os.environ["WURK_HOME"] = str(tmp_path_factory.mktemp("wurk-home"))
    yield server
    server.stop()
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def _fresh_state(redis_server: Server) -> Iterator[None]:
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    # mypy's API (the typing tests run it in-process) raises the recursion limit to 16,384
    # and leaves it there: a later test would parse hostile nesting under a limit no wurk
    # process has.
    limit = sys.getrecursionlimit()
    yield
    sys.setrecursionlimit(limit)
    old = wurk.config._default
    wurk.config._default = None
    if old is not None:
        old.close()
    _drop_wurk_log_handlers()


def _drop_wurk_log_handlers() -> None:
    """A CLI run in a test gives the ``wurk`` logger a handler on the stream of that test's
    capture, closed once it ends: a later test's log line would meet it ("--- Logging
    error ---" on its stderr). Each test starts with the logger as a fresh process has it."""
    wurk_logger = logging.getLogger("wurk")
    for owner in (wurk_logger, logging.getLogger()):
        for handler in list(owner.handlers):
            if getattr(handler, "_wurk_handler", False):
                owner.removeHandler(handler)
    wurk_logger.propagate = True


@pytest.fixture
def r(redis_server: Server) -> Iterator[redis.Redis]:
    """A raw client for reading back what wurk wrote (strings decoded)."""
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def config(redis_server: Server) -> Iterator[wurk.Config]:
    cfg = wurk.configure(redis_url=redis_server.url)
    yield cfg


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis_clusters.Cluster]:
    """A real Redis Cluster (3 primaries + 3 replicas, ``tests.helpers.cluster``), started
    only for the tests that ask for it, once per session."""
    reason = redis_clusters.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    started = redis_clusters.Cluster.start(tmp_path_factory.mktemp("redis-cluster"))
    yield started
    started.stop()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """A private PostgreSQL cluster for this test process (``tests.helpers.postgres``),
    started on first use; the tests that need it are skipped, saying why, where PostgreSQL
    is not installed."""
    if find_binaries() is None:
        pytest.skip(f"SKIPPED, no PostgreSQL: {INSTALL_HINT}")
    cluster = start_cluster()
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: Cluster, request: pytest.FixtureRequest) -> str:
    """A new, empty database on the cluster (``postgresql://`` URL)."""
    name = "t_" + "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:55]
    return pg_cluster.database(name)


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[mariadb.Server]:
    """A private MariaDB server for this test process (``tests.helpers.mariadb``), started
    on first use; the tests that need it are skipped, saying why, where MariaDB is not
    installed."""
    if mariadb.find_binaries() is None:
        pytest.skip(f"SKIPPED, no MariaDB: {mariadb.INSTALL_HINT}")
    server = mariadb.start_server()
    yield server
    server.stop()


@pytest.fixture
def mariadb_url(mariadb_server: mariadb.Server, request: pytest.FixtureRequest) -> str:
    """A new, empty database on the server (``mysql+pymysql://`` URL, for SQLAlchemy)."""
    name = "t_" + "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:60]
    return mariadb_server.database(name)
