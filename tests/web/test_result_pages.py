"""A job's own page (Retries, Scheduled, Dead) shows its stored result when it keeps one:
the last run's failure and whether a retry is due, a value, or a record that cannot be read
— marked so, never an error page."""

from __future__ import annotations

import json
import time

import redis
from starlette.testclient import TestClient

import wurk
from tests.web.conftest import XSS, failed
from wurk.api import DeadSet, RetrySet
from wurk.results import store


def entry_key(client: TestClient, kind: str) -> str:
    key: str = client.get(f"/api/{kind}").json()["entries"][0]["key"]
    return key


def test_a_retrying_jobs_page_shows_its_last_runs_result(client: TestClient,
                                                         config: wurk.Config) -> None:
    payload = failed(1, result_ttl=60)
    RetrySet(config).schedule(time.time() + 60, payload)
    outcome = store.failed(payload, ValueError(f"card {XSS} declined"), time.time() - 1,
                           retries_remain=True, backtrace=None)
    store.record(config, payload, outcome, 60)
    key = entry_key(client, "retries")
    page = client.get(f"/retries/{key}").text
    assert "<h2>Result</h2>" in page and "<strong>ValueError</strong>" in page
    assert "card &lt;script&gt;" in page and XSS not in page  # escaped
    assert "<dt>Retry due</dt><dd>yes</dd>" in page
    document = client.get(f"/api/retries/{key}").json()
    assert document["result"]["status"] == "failed"
    assert document["result"]["error_message"] == f"card {XSS} declined"
    assert document["result"]["retries_remain"] is True


def test_a_dead_jobs_page_shows_a_stored_value_and_none_without_a_record(
        client: TestClient, config: wurk.Config, r: redis.Redis) -> None:
    kept, bare = failed(1, result_ttl=60), failed(2)
    DeadSet(config).kill(kept)
    DeadSet(config).kill(bare)
    r.set(f"wurk:result:{kept['jid']}", json.dumps(
        {"status": "succeeded", "value": {"rows": [1, 2]}, "class": "HardJob",
         "finished_at": time.time()}))
    pages = {}
    for entry in client.get("/api/morgue").json()["entries"]:
        pages[entry["jid"]] = client.get(f"/morgue/{entry['key']}").text
    assert "<h2>Result</h2>" in pages[kept["jid"]] and "succeeded" in pages[kept["jid"]]
    assert "&#34;rows&#34;" in pages[kept["jid"]] or "&quot;rows&quot;" in pages[kept["jid"]]
    assert "<h2>Result</h2>" not in pages[bare["jid"]]  # keeps none: no panel


def test_a_record_that_cannot_be_read_is_marked_on_the_page(client: TestClient,
                                                            config: wurk.Config,
                                                            r: redis.Redis) -> None:
    payload = failed(3, result_ttl=60)
    RetrySet(config).schedule(time.time() + 60, payload)
    r.set(f"wurk:result:{payload['jid']}", '{"status": "exploded"}')
    key = entry_key(client, "retries")
    response = client.get(f"/retries/{key}")
    assert response.status_code == 200
    assert "The stored result cannot be read" in response.text
    assert "status &#39;exploded&#39; is none of" in response.text or \
        "status 'exploded' is none of" in response.text
    assert client.get(f"/api/retries/{key}").status_code == 200
