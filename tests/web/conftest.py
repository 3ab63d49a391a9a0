"""The dashboard against the real test server: an app per test, clients to drive it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

import wurk
from wurk.api import DeadSet, RetrySet, ScheduledSet
from wurk.web import create_app

XSS = "<script>alert('x')</script>"
# What a browser on this machine sends as Host: the dashboard answers only to loopback names
# unless told others (TestClient's own default, "testserver", is not one).
LOCAL = "http://localhost"


def browse(app: Any, **options: Any) -> TestClient:
    """A client that talks to ``app`` as a browser on this machine does."""
    return TestClient(app, base_url=LOCAL, **options)


@pytest.fixture
def app(config: wurk.Config) -> Starlette:
    return create_app(config)


@pytest.fixture
def client(app: Starlette) -> Iterator[TestClient]:
    with browse(app, follow_redirects=False) as test_client:
        yield test_client


def token(client: TestClient) -> str:
    """Load a page (which sets the CSRF cookie) and return the token forms carry."""
    found: str = client.get("/api/csrf").json()["token"]
    return found


def job(n: int, **extra: Any) -> dict[str, Any]:
    return {"class": "HardJob", "args": [n, "two"], "queue": "default", "retry": True,
            "jid": f"{n:024x}", "created_at": time.time() - 60,
            "enqueued_at": time.time() - 30, **extra}


def failed(n: int, **extra: Any) -> dict[str, Any]:
    return job(n, error_class="RuntimeError", error_message=f"boom {n}",
               failed_at=time.time() - 10, retry_count=1, **extra)


def seed_sets(config: wurk.Config, count: int = 3) -> None:
    now = time.time()
    for n in range(count):
        RetrySet(config).schedule(now + 60 + n, failed(n))
        ScheduledSet(config).schedule(now + 120 + n, job(100 + n))
        DeadSet(config).schedule(now - 600 + n, failed(200 + n))


def seed_pages(config: wurk.Config, r: Any) -> None:
    """Something on every page: the three sets, a live process with a running job, three
    queued jobs and a processed count."""
    seed_sets(config)
    seed_process(r)
    for n in range(3):
        r.lpush("queue:default", wurk.payload.dumps(job(300 + n)))
    r.sadd("queues", "default")
    r.set("stat:processed", 4321)


def post(client: TestClient, path: str, **form: Any) -> Any:
    """A form POST as the dashboard's own page sends it (token included)."""
    return client.post(path, data={"csrf_token": token(client), **form})


def seed_process(r: Any, identity: str = "host:1:abc", *, embedded: bool = False,
                 tag: str = "app", busy: int = 1) -> str:
    """A heartbeat record and one running job, as a live worker writes them."""
    info = {"hostname": "host", "pid": 1, "tag": tag, "concurrency": 5, "queues": ["default"],
            "labels": ["blue"], "started_at": time.time() - 100, "version": "0.1.0",
            "identity": identity, "embedded": embedded}
    r.sadd("processes", identity)
    r.hset(identity, mapping={"info": wurk.payload.dumps(info), "busy": busy,
                              "beat": time.time(), "quiet": "false", "rss": 51200,
                              "rtt_us": 250, "concurrency": 5})
    work = {"queue": "default", "run_at": time.time() - 5,
            "payload": wurk.payload.dumps(job(7))}
    r.hset(f"{identity}:work", "tid-1", wurk.payload.dumps(work))
    return identity


# The system tests' real worker subprocess, for the browser test.
from tests.system.conftest import start_worker  # noqa: E402, F401
