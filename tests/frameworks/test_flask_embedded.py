"""``Wurk(app, worker=True)``: an embedded worker started by the app's first request, running
jobs in the app context; a ``flask`` command starts none; a failed boot is logged and the
app serves; ``stop()`` drains."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask import Flask, current_app

import wurk
from tests.helpers.server import Server
from tests.helpers.wait import wait_until
from wurk.contrib.flask import Wurk

SEEN: list[str] = []
STARTED = threading.Event()
FINISH = threading.Event()


@wurk.job(name="FlaskEmbedded::AppName")
def record_the_app_name() -> None:
    SEEN.append(current_app.name)  # current_app: the job runs in the app context


@wurk.job(name="FlaskEmbedded::Slow")
def a_job_longer_than_the_timeout() -> None:
    STARTED.set()
    while not FINISH.wait(0.01):  # until the test ends; the shutdown's interrupt lands
        pass                      # between these short waits first


def make_app(redis_server: Server, **settings: Any) -> Flask:
    app = Flask("embedded_shop")
    app.config.update(WURK_REDIS_URL=redis_server.url, WURK_CONCURRENCY=1,
                      WURK_FETCH_TIMEOUT=0.2, WURK_HEARTBEAT_INTERVAL=0.2, WURK_TIMEOUT=1,
                      **settings)

    @app.post("/push")
    def push() -> dict[str, object]:
        return {"jid": record_the_app_name.perform_async()}

    @app.get("/ping")
    def ping() -> str:
        return "pong"

    @app.cli.command("push-one")
    def push_one() -> None:
        record_the_app_name.perform_async()

    return app


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    SEEN.clear()
    STARTED.clear()
    FINISH.clear()
    yield
    FINISH.set()


def test_the_first_request_starts_a_worker_that_runs_jobs_in_the_app_context(
        redis_server: Server, r: redis.Redis) -> None:
    app = make_app(redis_server)
    ext = Wurk(app, worker=True)
    assert ext.embedded is None and r.scard("processes") == 0  # nothing before a request
    client = app.test_client()
    try:
        reply = client.post("/push").json
        assert reply is not None
        jid = reply["jid"]
        worker = ext.embedded
        assert worker is not None and worker.running
        assert app.extensions["wurk"] is ext
        wait_until(lambda: SEEN == ["embedded_shop"], what="the job in the app context")
        assert r.smembers("processes") == {worker.identity}
        client.post("/push")
        assert ext.embedded is worker  # one worker per process, not one per request
        wait_until(lambda: len(SEEN) == 2, what="the second job")
    finally:
        ext.stop()
    assert len(jid) == 24 and ext.embedded is None and r.scard("processes") == 0


def test_init_app_takes_worker_too(redis_server: Server, r: redis.Redis) -> None:
    app = make_app(redis_server)
    ext = Wurk()
    ext.init_app(app, worker=True)
    try:
        app.test_client().post("/push")
        wait_until(lambda: SEEN == ["embedded_shop"], what="the job")
    finally:
        ext.stop()
    plain = make_app(redis_server)
    Wurk(plain)  # the default: no worker
    plain.test_client().post("/push")
    assert r.scard("processes") == 0 and r.llen("queue:default") == 1


def test_one_extension_on_two_apps_runs_a_worker_for_each_and_names_each_apps(
        redis_server: Server, r: redis.Redis) -> None:
    """An extension set up on several apps (the app-factory pattern) starts one worker per
    app; ``embedded`` is the worker of the app in context, ``worker_of(app)`` any app's.
    Before, ``embedded`` named the latest app's worker wherever it was read."""
    first, second = make_app(redis_server), make_app(redis_server)
    ext = Wurk(worker=True)
    ext.init_app(first)
    ext.init_app(second)
    try:
        first.test_client().get("/ping")
        assert ext.worker_of(first) is not None and ext.worker_of(second) is None
        second.test_client().get("/ping")
        ours, theirs = ext.worker_of(first), ext.worker_of(second)
        assert ours is not None and theirs is not None and ours is not theirs
        with first.app_context():
            assert ext.embedded is ours
        with second.app_context():
            assert ext.embedded is theirs
        assert ext.worker_of(make_app(redis_server)) is None  # an app it was not set up on
        assert r.smembers("processes") == {ours.identity, theirs.identity}
    finally:
        ext.stop()
    assert ext.worker_of(first) is None and ext.worker_of(second) is None
    assert r.scard("processes") == 0


def test_a_flask_command_starts_no_worker(redis_server: Server, r: redis.Redis) -> None:
    """``flask wurk worker``, ``flask db upgrade``… import the app factory too: a command
    pushes, no worker takes the job; the first request starts one, and it does."""
    app = make_app(redis_server)
    ext = Wurk(app, worker=True)
    try:
        done = app.test_cli_runner().invoke(args=["push-one"])
        assert done.exit_code == 0, done.output
        assert ext.embedded is None and r.scard("processes") == 0
        assert r.llen("queue:default") == 1
        assert app.test_client().get("/ping").text == "pong"
        wait_until(lambda: SEEN == ["embedded_shop"], what="the job, once a request came")
    finally:
        ext.stop()


def test_a_worker_that_cannot_boot_is_logged_and_the_app_serves(
        redis_server: Server, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        app = make_app(redis_server, WURK_HEALTH_PORT=port)
        ext = Wurk(app, worker=True)
        client = app.test_client()
        with caplog.at_level("ERROR", logger="wurk"):
            assert client.get("/ping").text == "pong"
            assert client.post("/push").status_code == 200  # pushes still work
            assert client.get("/ping").text == "pong"
    finally:
        taken.close()
    assert ext.embedded is None and r.scard("processes") == 0  # what started was stopped
    booted = [rec for rec in caplog.records if "embedded worker" in rec.message]
    assert len(booted) == 1 and booted[0].exc_info is not None  # one try, not one a request
    assert f"health_port {port}" in str(booted[0].exc_info[1])
    assert r.llen("queue:default") == 1
    ext.stop()  # nothing to stop: fine


def test_stop_gives_running_jobs_timeout_seconds_then_requeues_them(
        redis_server: Server, r: redis.Redis) -> None:
    """For gunicorn's ``worker_exit``: ``stop()`` drains now, and no request starts another."""
    app = make_app(redis_server)
    ext = Wurk(app, worker=True)
    client = app.test_client()
    client.get("/ping")
    worker = ext.embedded
    assert worker is not None
    jid = a_job_longer_than_the_timeout.perform_async()
    assert STARTED.wait(20), "the embedded worker did not start the job"
    stopping = time.monotonic()
    ext.stop()
    took = time.monotonic() - stopping
    assert 0.9 <= took < 10, took  # WURK_TIMEOUT, then the requeue; not the job's end
    assert not worker.running and r.scard("processes") == 0
    [raw] = r.lrange("queue:default", 0, -1)
    assert json.loads(raw)["jid"] == jid
    client.get("/ping")
    assert ext.embedded is None and r.scard("processes") == 0  # stopped for good
