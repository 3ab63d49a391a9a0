"""The FastAPI example: its test client pushes, the worker the lifespan embedded runs the
job, the dashboard answers under the mount for an admin only."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest
import redis
from starlette.testclient import TestClient

import wurk
from tests.frameworks.conftest import EXAMPLES, load_example
from tests.helpers.server import Server
from wurk.errors import ConfigError

PROJECT = EXAMPLES / "fastapi_app"


@pytest.fixture
def shop(redis_server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("FASTAPI_SHOP_OUTBOX", str(tmp_path / "outbox.txt"))
    monkeypatch.setenv("FASTAPI_SHOP_ADMIN_TOKEN", "s3cret")
    return load_example(PROJECT / "fastapi_shop.py")


def test_an_endpoint_pushes_and_the_embedded_worker_runs_it(shop: ModuleType, r: redis.Redis,
                                                            tmp_path: Path) -> None:
    outbox = tmp_path / "outbox.txt"
    with TestClient(shop.create_app(worker=True), base_url="http://localhost") as client:
        jid = client.post("/orders", json={"id": 7, "email": "ada@example.com"}).json()["jid"]
        deadline = time.monotonic() + 30
        while not (outbox.exists() and outbox.read_text()):
            assert time.monotonic() < deadline, "the embedded worker did not run the job"
            time.sleep(0.05)
        assert len(r.smembers("processes")) == 1
    assert outbox.read_text() == "receipt 7 to ada@example.com\n"
    assert len(jid) == 24
    assert r.smembers("processes") == set()  # the lifespan's end stopped the worker


def test_without_the_worker_the_job_waits_in_redis(shop: ModuleType, r: redis.Redis) -> None:
    with TestClient(shop.create_app(worker=False), base_url="http://localhost") as client:
        jid = client.post("/orders", json={"id": 8, "email": "bob@example.com"}).json()["jid"]
    (raw,) = r.lrange("queue:default", 0, -1)
    assert json.loads(raw)["jid"] == jid
    assert json.loads(raw)["args"] == [8, "bob@example.com"]


def test_the_dashboard_answers_under_the_mount_for_an_admin_only(shop: ModuleType) -> None:
    app = shop.create_app(worker=False)
    with TestClient(app, base_url="http://localhost") as client:
        assert client.get("/wurk/").status_code == 403
        page = client.get("/wurk/", headers={"x-admin-token": "s3cret"})
        assert page.status_code == 200
        assert 'href="/wurk/queues"' in page.text
        assert client.get("/wurk/queues", headers={"x-admin-token": "s3cret"}).status_code \
            == 200
    # A second lifespan does not mount it twice.
    with TestClient(app, base_url="http://localhost") as client:
        assert client.get("/wurk/", headers={"x-admin-token": "s3cret"}).status_code == 200
    assert sum(1 for route in app.routes if getattr(route, "path", "") == "/wurk") == 1


def test_a_dashboard_without_authorize_is_refused() -> None:
    from wurk.contrib.fastapi import Wurk

    with pytest.raises(ConfigError, match="needs authorize="):
        Wurk(dashboard="/wurk")


def test_async_endpoints_push_on_the_asyncio_client(shop: ModuleType, r: redis.Redis) -> None:
    """``await client.apush`` and ``await job.aperform_async`` in ``async def`` endpoints:
    the app's loop holds asyncio connections (named wurk-async) while it serves, and the
    lifespan's end closes them."""
    with TestClient(shop.create_app(worker=False), base_url="http://localhost") as client:
        first = client.post("/orders", json={"id": 9, "email": "cy@example.com"}).json()["jid"]
        again = client.post("/orders/9/resend", params={"email": "cy@example.com"}).json()
        names = [c.get("name") for c in r.client_list()]
        assert "wurk-async" in names
        assert "wurk-client" not in names  # no sync push happened
    jobs = {json.loads(raw)["jid"]: json.loads(raw) for raw in r.lrange("queue:default", 0, -1)}
    assert set(jobs) == {first, again["jid"]}
    assert all(job["args"] == [9, "cy@example.com"] for job in jobs.values())
    deadline = time.monotonic() + 5
    while "wurk-async" in [c.get("name") for c in r.client_list()]:
        assert time.monotonic() < deadline, "the lifespan's end left asyncio connections"
        time.sleep(0.02)


def test_async_endpoints_in_fake_mode_keep_the_jobs(shop: ModuleType, r: redis.Redis) -> None:
    import wurk.testing

    previous = wurk.testing.set_mode("fake")  # the test client runs the app in a thread
    try:
        with TestClient(shop.create_app(worker=False), base_url="http://localhost") as client:
            first = client.post("/orders", json={"id": 3, "email": "d@example.com"}).json()
            again = client.post("/orders/3/resend", params={"email": "d@example.com"}).json()
        kept = wurk.testing.jobs()
        assert [job["jid"] for job in kept] == [first["jid"], again["jid"]]
        assert [job["args"] for job in kept] == [[3, "d@example.com"]] * 2
        assert r.llen("queue:default") == 0
    finally:
        wurk.testing.clear_all()
        wurk.testing.set_mode(previous)


STARTED = threading.Event()
FINISH = threading.Event()


@wurk.job(name="FastClaims::Slow")
def a_job_longer_than_the_timeout() -> None:
    STARTED.set()
    while not FINISH.wait(0.01):  # until the test ends; the shutdown's interrupt lands
        pass                      # between these short waits first


def test_the_lifespans_end_gives_running_jobs_timeout_seconds_then_requeues_them(
        redis_server: Server, r: redis.Redis) -> None:
    """fastapi.md: with worker=True the lifespan "stops it at shutdown: running jobs get
    `timeout` seconds, then go back to their queue"."""
    from fastapi import FastAPI

    from wurk.contrib.fastapi import Wurk

    STARTED.clear()
    FINISH.clear()
    config = wurk.Config(redis_url=redis_server.url, timeout=1, fetch_timeout=0.2,
                         concurrency=1, heartbeat_interval=0.2)
    ext = Wurk(config, worker=True)
    jid = a_job_longer_than_the_timeout.set(config=config).perform_async()
    try:
        with TestClient(FastAPI(lifespan=ext.lifespan)):
            assert STARTED.wait(20), "the embedded worker did not start the job"
            assert r.llen("queue:default") == 0
            stopping = time.monotonic()
        took = time.monotonic() - stopping
    finally:
        FINISH.set()  # a job the interrupt missed ends here, not 30 s later
    assert 0.9 <= took < 10, took  # the timeout, then the requeue; not the job's 30 s
    [raw] = r.lrange("queue:default", 0, -1)
    assert json.loads(raw)["jid"] == jid
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0


def test_an_async_authorize_decides_too(redis_server: Server) -> None:
    from fastapi import FastAPI
    from starlette.requests import Request

    from wurk.contrib.fastapi import Wurk

    async def admin(request: Request) -> bool:
        return request.headers.get("x-admin") == "yes"

    ext = Wurk(wurk.Config(redis_url=redis_server.url), dashboard="/jobs", authorize=admin)
    with TestClient(FastAPI(lifespan=ext.lifespan), base_url="http://localhost") as client:
        assert client.get("/jobs/").status_code == 403
        assert client.get("/jobs/", headers={"x-admin": "yes"}).status_code == 200


def test_the_client_dependency_is_of_the_given_configuration_else_the_default(
        redis_server: Server) -> None:
    from wurk.contrib.fastapi import Wurk

    given = wurk.Config(redis_url=redis_server.url, key_prefix="given")
    assert Wurk(given).client().config is given
    default = wurk.configure(redis_url=redis_server.url)
    assert Wurk().client().config is default


def test_a_stop_that_fails_still_closes_the_apps_asyncio_connections(
        redis_server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lifespan's end closed the app loop's asyncio pool only after the embedded worker
    stopped: a stop that raised left those connections open on a loop that was ending."""
    from fastapi import FastAPI

    from wurk.contrib.fastapi import Wurk
    from wurk.inprocess import InProcessWorker

    config = wurk.Config(redis_url=redis_server.url)
    closed: list[bool] = []
    real_stop, real_close = InProcessWorker.stop, config.aclose_async_pool

    def failing_stop(self: InProcessWorker, *args: object, **kwargs: object) -> None:
        real_stop(self)
        raise RuntimeError("the stop failed")

    async def close() -> None:
        closed.append(True)
        await real_close()

    monkeypatch.setattr(InProcessWorker, "stop", failing_stop)
    monkeypatch.setattr(config, "aclose_async_pool", close)
    ext = Wurk(config, worker=True)
    with pytest.raises(RuntimeError, match="the stop failed"), \
            TestClient(FastAPI(lifespan=ext.lifespan)):
        assert ext.embedded is not None
    assert closed == [True] and ext.embedded is None


def test_a_worker_that_cannot_boot_is_logged_and_the_app_serves_http(
        redis_server: Server, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """A worker that cannot boot is logged and the app keeps serving HTTP. A startup hook
    raising took the whole app down with it: the site was gone for want of its worker."""
    from fastapi import FastAPI

    from wurk.contrib.fastapi import Wurk

    config = wurk.Config(redis_url=redis_server.url)

    def no_database() -> None:
        raise RuntimeError("no database")

    config.on("startup", no_database)
    ext = Wurk(config, worker=True)
    app = FastAPI(lifespan=ext.lifespan)

    @app.get("/ping")
    def ping() -> str:
        return "pong"

    with caplog.at_level("ERROR", logger="wurk"), TestClient(app) as client:
        assert client.get("/ping").json() == "pong"
        assert ext.embedded is None
        assert r.scard("processes") == 0  # what started was stopped
    booted = [rec for rec in caplog.records if "embedded worker did not start" in rec.message]
    assert len(booted) == 1 and booted[0].exc_info is not None
    assert "no database" in str(booted[0].exc_info[1])
