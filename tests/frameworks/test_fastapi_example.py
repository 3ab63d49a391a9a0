"""The FastAPI example: its test client pushes, the worker the lifespan embedded runs the
job, the dashboard answers under the mount for an admin only."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import ModuleType

import pytest
import redis
from starlette.testclient import TestClient

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
