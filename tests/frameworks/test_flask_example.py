"""The Flask example: its test client pushes, ``flask wurk worker`` runs the job in the app
context, the dashboard answers under the app's mount only for an admin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

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


def mounted(authorize: Any, **options: Any) -> Any:
    """A Flask app of its own with the dashboard at ``/wurk`` (the example's is fixed)."""
    from flask import Flask, g

    from wurk.contrib.flask import Wurk

    app = Flask("claims")
    app.config.update(SECRET_KEY="test-only", WURK_REDIS_URL=os.environ["REDIS_URL"],
                      WURK_CONCURRENCY=5)

    @app.before_request
    def who() -> None:
        g.user = "admin"

    Wurk(app, dashboard="/wurk", authorize=authorize, **options)
    return app


@pytest.mark.parametrize("answer", [1, "yes", [True], None, False])
def test_authorize_must_return_exactly_true_anything_else_is_403(
        redis_server: Server, answer: Any) -> None:
    """flask.md: authorize() "runs inside the request (so session, g ... are there) and must
    return exactly True; anything else answers 403"."""
    from flask import g

    refused = mounted(lambda: answer).test_client()
    assert refused.get("/wurk/").status_code == 403
    assert refused.get("/wurk/queues").status_code == 403
    allowed = mounted(lambda: g.user == "admin").test_client()  # g, set by the request
    assert allowed.get("/wurk/").status_code == 200


def test_a_second_init_app_on_one_app_is_a_clear_error(redis_server: Server) -> None:
    """init_app twice on one app (an app factory's extension set up again) failed inside
    Flask with an AssertionError about an endpoint, after replacing the process default;
    it now says what happened and changes nothing."""
    from wurk.contrib.flask import Wurk

    app = mounted(lambda: True)
    first = wurk.default_config()
    with pytest.raises(ConfigError, match="already set up on the Flask app 'claims'"):
        Wurk(dashboard="/other", authorize=lambda: True).init_app(app)
    assert wurk.default_config() is first
    assert app.test_client().get("/wurk/").status_code == 200


def test_init_app_makes_its_settings_the_process_default(redis_server: Server) -> None:
    mounted(lambda: True)
    config = wurk.default_config()
    assert config.concurrency == 5 and config.redis_url == os.environ["REDIS_URL"]


def test_the_dashboard_checks_its_own_token_and_origin_on_posts(r: redis.Redis) -> None:
    r.zadd("retry", {json.dumps({"class": "X", "args": [], "jid": "e" * 24}): time.time()})
    client = mounted(lambda: True).test_client()
    form = {"action": "delete", "all": "1"}
    assert client.post("/wurk/retries", data=form).status_code == 403  # no token
    token = client.get("/wurk/api/csrf").json["token"]
    assert client.post("/wurk/retries", data={**form, "csrf_token": token},
                       headers={"Origin": "http://evil.example"}).status_code == 403
    assert r.zcard("retry") == 1
    assert client.post("/wurk/retries", data={**form, "csrf_token": token},
                       headers={"Origin": "http://localhost"}).status_code == 303
    assert r.zcard("retry") == 0


def test_the_live_stream_answers_204_unless_live_is_true(redis_server: Server) -> None:
    assert mounted(lambda: True).test_client().get("/wurk/stats/stream").status_code == 204
    live = mounted(lambda: True, live=True).test_client()
    stream = live.get("/wurk/stats/stream", buffered=False)
    try:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
    finally:
        stream.close()


def test_flask_wurk_worker_imports_the_modules_of_wurk_imports(
        example_env: dict[str, str], r: redis.Redis, tmp_path: Path) -> None:
    """flask.md: "WURK_IMPORTS lists modules the worker imports besides what the app
    imports": the job's module is imported by the worker only, and its job runs."""
    (tmp_path / "jobs_elsewhere.py").write_text(
        "import os, wurk\n\n"
        "@wurk.job(name='Elsewhere::Mark')\n"
        "def mark(text):\n"
        "    with open(os.environ['MARK_FILE'], 'a') as out:\n"
        "        out.write(text)\n")
    (tmp_path / "bare_app.py").write_text(
        "from flask import Flask\n"
        "from wurk.contrib.flask import Wurk\n\n"
        "app = Flask(__name__)\n"
        "app.config.update(WURK_IMPORTS=['jobs_elsewhere'], WURK_FETCH_TIMEOUT=0.2)\n"
        "Wurk(app)\n")
    mark = tmp_path / "mark.txt"
    wurk.push({"class": "Elsewhere::Mark", "args": ["ran"]})
    env = {**example_env, "MARK_FILE": str(mark), "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), *filter(None, [example_env.get("PYTHONPATH")])])}
    worker = subprocess.Popen([sys.executable, "-m", "flask", "--app", "bare_app", "wurk",
                               "worker", "-c", "1", "-t", "1"], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 40
        while not (mark.exists() and mark.read_text()):
            assert worker.poll() is None, worker.communicate()[0]
            assert time.monotonic() < deadline, "the worker did not run the job"
            time.sleep(0.1)
    finally:
        worker.terminate()
        output, _ = worker.communicate(timeout=30)
    assert mark.read_text() == "ran", output
    assert worker.returncode == 0, output
