"""Iterable jobs on the dashboard: the Busy and Retries pages show each job's state in
``it-<jid>`` (as Sidekiq 8's pages do), and a Cancel button writes ``cancelled``."""

from __future__ import annotations

import time

import redis
from starlette.testclient import TestClient

import wurk
from tests.web.conftest import failed, post, seed_process
from wurk.api import RetrySet

RUNNING = f"{7:024x}"  # seed_process's running job


def test_busy_shows_a_running_jobs_iteration_and_cancels_it(client: TestClient,
                                                           r: redis.Redis) -> None:
    seed_process(r)
    r.hset(f"it-{RUNNING}", mapping={"ex": 3, "c": '"row-1520"', "rt": 12.5})
    page = client.get("/busy").text
    assert "iteration: 3 runs" in page and "row-1520" in page and "· 12 s" in page
    assert 'name="jid" value="' + RUNNING in page and 'value="cancel"' in page
    response = post(client, "/busy", action="cancel", jid=RUNNING)
    assert response.status_code == 303
    assert response.headers["location"] == "/busy?notice=cancel&count=1"
    assert r.hexists(f"it-{RUNNING}", "cancelled")
    after = client.get("/busy").text
    assert "<strong>cancelled</strong>" in after and 'value="cancel"' not in after
    assert "1 cancelled: a waiting job is removed" in \
        client.get(response.headers["location"]).text


def test_any_running_job_has_a_cancel_button(client: TestClient, r: redis.Redis) -> None:
    seed_process(r)
    page = client.get("/busy").text
    assert "iteration:" not in page and 'value="cancel"' in page


def test_cancel_refuses_what_is_not_a_jid(client: TestClient, r: redis.Redis) -> None:
    response = post(client, "/busy", action="cancel", jid="x\x1b[2J y")
    assert response.status_code == 400 and "not a jid" in response.text
    assert not r.keys("it-*")


def test_retries_show_the_state_and_cancel_the_selected(client: TestClient,
                                                        config: wurk.Config,
                                                        r: redis.Redis) -> None:
    payload = failed(1)
    RetrySet(config).schedule(time.time() + 60, payload)
    r.hset(f"it-{payload['jid']}", mapping={"ex": 1, "c": "40", "rt": 0.25})
    page = client.get("/retries").text
    assert "iteration: 1 run " in page and "<code>40</code>" in page
    key = client.get("/api/retries").json()["entries"][0]["key"]
    response = post(client, "/retries", action="cancel", key=key)
    assert response.headers["location"] == "/retries?notice=cancel&count=1"
    assert r.hexists(f"it-{payload['jid']}", "cancelled")
    assert RetrySet(config).size() == 0  # a waiting job is removed


def test_an_unreadable_state_is_marked_not_a_500(client: TestClient, r: redis.Redis) -> None:
    seed_process(r)
    r.hset(f"it-{RUNNING}", mapping={"ex": "many", "c": "{"})
    page = client.get("/busy")
    assert page.status_code == 200 and "iteration state unreadable" in page.text
    r.delete(f"it-{RUNNING}")
    r.set(f"it-{RUNNING}", "not a hash")
    page = client.get("/busy")
    assert page.status_code == 200 and "iteration state unreadable" in page.text
