"""The Flask example: its test client pushes, ``flask wurk worker`` runs the job in the app
context, the dashboard answers under the app's mount only for an admin."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
import redis

import wurk
import wurk.testing
from tests.frameworks.conftest import EXAMPLES, load_example
from tests.helpers.server import Server
from wurk.errors import ConfigError

PROJECT = EXAMPLES / "flask_app"


@pytest.fixture
def shop(redis_server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("FLASK_SHOP_OUTBOX", str(tmp_path / "outbox.txt"))
    return load_example(PROJECT / "flask_shop.py")


def test_the_test_client_pushes_and_flask_wurk_worker_runs_it_in_the_app_context(
        shop: ModuleType, example_env: dict[str, str], r: redis.Redis, tmp_path: Path) -> None:
    app = shop.create_app()
    jid = app.test_client().post("/signup", data={"email": "ada@example.com"}).json["jid"]
    (raw,) = r.lrange("queue:default", 0, -1)
    assert json.loads(raw)["jid"] == jid
    outbox = tmp_path / "outbox.txt"
    env = {**example_env, "FLASK_SHOP_OUTBOX": str(outbox)}
    worker = subprocess.Popen([sys.executable, "-m", "flask", "--app", "flask_shop", "wurk",
                               "worker", "-c", "1"], cwd=PROJECT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 40
        while not (outbox.exists() and outbox.read_text()):
            assert worker.poll() is None, worker.communicate()[0]
            assert time.monotonic() < deadline, "the worker did not run the job"
            time.sleep(0.1)
        assert outbox.read_text() == "welcome ada@example.com\n"
    finally:
        worker.terminate()
        output, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0, output


def test_inline_mode_runs_the_job_inside_the_app_context(shop: ModuleType,
                                                         tmp_path: Path) -> None:
    app = shop.create_app()
    with wurk.testing.inline():
        app.test_client().post("/signup", data={"email": "bob@example.com"})
    assert (tmp_path / "outbox.txt").read_text() == "welcome bob@example.com\n"


def test_a_job_outside_any_request_gets_the_app_context(shop: ModuleType,
                                                        tmp_path: Path) -> None:
    shop.create_app()
    with wurk.testing.fake():
        shop.send_welcome.perform_async("eve@example.com")
        shop.send_welcome.drain()
    assert "eve@example.com" in (tmp_path / "outbox.txt").read_text()


def test_the_dashboard_answers_under_the_mount_for_an_admin_only(shop: ModuleType) -> None:
    client = shop.create_app().test_client()
    assert client.get("/admin/wurk/").status_code == 403
    client.post("/login", data={"admin": "yes"})
    page = client.get("/admin/wurk/")
    assert page.status_code == 200
    assert 'href="/admin/wurk/queues"' in page.text
    assert client.get("/admin/wurk/queues").status_code == 200
    assert "processed" in client.get("/admin/wurk/stats").text
    assert client.get("/admin/wurk/stats/stream").status_code == 204
    client.post("/login", data={"admin": "no"})
    assert client.get("/admin/wurk/queues").status_code == 403


def test_a_dashboard_without_authorize_is_refused() -> None:
    from wurk.contrib.flask import Wurk

    with pytest.raises(ConfigError, match="needs authorize="):
        Wurk(dashboard="/wurk")


def test_unknown_settings_are_named(redis_server: Server) -> None:
    from flask import Flask

    from wurk.contrib.flask import Wurk

    app = Flask("bad")
    app.config["WURK_CONCURENCY"] = 3
    with pytest.raises(ConfigError, match="unknown setting 'concurency'"):
        Wurk(app)
    assert wurk.default_config() is not None
