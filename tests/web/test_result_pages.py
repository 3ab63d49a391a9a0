"""A job's own page (Retries, Scheduled, Dead) shows its stored result when it keeps one:
the last run's failure and whether a retry is due, a value, or a record that cannot be read
— marked so, never an error page."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

import wurk
from tests.helpers.wait import wait_until
from tests.web.conftest import XSS, failed, post, token
from wurk.api import DeadSet, RetrySet
from wurk.results import store, waiting


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


def test_a_job_killed_from_the_dashboard_ends_its_waiters_with_its_failure(
        client: TestClient, config: wurk.Config, r: redis.Redis,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The dashboard alone (no worker's death handler in its process): the Kill button and
    "kill all" store the killed jobs' final failure, and a waiter hears it at once."""
    monkeypatch.setattr(waiting, "RECHECK", 3600.0)  # only the announcement ends the wait
    for n in range(3):
        RetrySet(config).schedule(time.time() + 60 + n, failed(n, result_ttl=600))
    found: list[Any] = []

    def wait() -> None:
        started = time.monotonic()
        try:
            wurk.ResultHandle(f"{0:024x}", config).result(timeout=30)
        except Exception as exc:  # the test looks at it
            found.append(exc)
        found.append(time.monotonic() - started)

    thread = threading.Thread(target=wait)
    thread.start()
    wait_until(lambda: any(int(c.get("sub", 0)) for c in r.client_list()),
               what="the wait subscribed")
    key = next(e["key"] for e in client.get("/api/retries").json()["entries"]
               if e["jid"] == f"{0:024x}")
    assert post(client, f"/retries/{key}", action="kill").status_code == 303
    thread.join(35)
    error, took = found
    assert isinstance(error, wurk.JobFailed) and took < 10
    assert error.error_class == "wurk.JobKilled" and not error.retries_remain
    assert "dashboard" in error.message and "last error: RuntimeError: boom 0" in error.message
    response = client.post("/api/retries", json={"action": "kill", "all": True},
                           headers={"X-CSRF-Token": token(client)})
    assert response.json()["count"] == 2
    for n in (1, 2):
        with pytest.raises(wurk.JobFailed, match=f"killed by API.*boom {n}"):
            wurk.ResultHandle(f"{n:024x}", config).result(timeout=0)
    page = client.get(f"/morgue/{client.get('/api/morgue').json()['entries'][0]['key']}").text
    assert "<strong>wurk.JobKilled</strong>" in page


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


# -- the Results tab: a job's stored result by its jid ------------------------------------------
def stored(config: wurk.Config, n: int, outcome_of: str = "succeeded", **extra: object) -> str:
    """A finished job's result, as the worker stores it; its jid."""
    payload = failed(n, result_ttl=60, **extra)
    started = time.time() - 2.5
    if outcome_of == "succeeded":
        outcome = store.succeeded(payload, extra.get("value", {"rows": [1, 2]}), started)
    elif outcome_of == "failed":
        outcome = store.failed(payload, ValueError(f"card {XSS} declined"), started,
                               retries_remain=False, backtrace=[f"line {XSS}", "line 2"])
    else:
        outcome = store.cancelled(payload, None)
    store.record(config, payload, outcome, 60)
    return str(payload["jid"])


def test_the_results_tab_is_in_the_nav_and_its_form_leads_to_a_jids_page(
        client: TestClient) -> None:
    assert '<a href="/results">Results</a>' in client.get("/").text
    form = client.get("/results/")
    assert form.status_code == 200 and 'name="jid"' in form.text
    went = client.get("/results/?jid=%20abc%2Fdef%20")
    assert went.status_code == 303 and went.headers["location"] == "/results/abc%2Fdef"


def test_a_succeeded_jobs_result_page_shows_its_value_pretty_printed_and_escaped(
        client: TestClient, config: wurk.Config) -> None:
    jid = stored(config, 10, value={"html": XSS, "n": [1, 2]})
    response = client.get(f"/results/{jid}")
    assert response.status_code == 200
    page = response.text
    assert "<strong>succeeded</strong>" in page and "<dd>HardJob</dd>" in page
    assert "<dt>Runtime</dt><dd>2." in page  # started 2.5 s before it finished
    assert "&#34;html&#34;: &#34;&lt;script&gt;" in page and XSS not in page
    assert '\n  &#34;n&#34;: [\n    1,' in page  # indented
    document = client.get(f"/api/results/{jid}").json()
    assert document["jid"] == jid and document["result"]["status"] == "succeeded"
    assert document["result"]["value"] == {"html": XSS, "n": [1, 2]}
    assert document["result"]["class"] == "HardJob"


def test_a_long_value_is_cut_with_a_note(client: TestClient, config: wurk.Config) -> None:
    jid = stored(config, 11, value=["y" * 1000] * 100)  # ~100 kB as JSON
    page = client.get(f"/results/{jid}").text
    assert "this is its beginning" in page and page.count("y" * 1000) < 25
    assert len(client.get(f"/api/results/{jid}").json()["result"]["value"]) == 100  # whole


def test_a_failed_jobs_result_page_shows_the_error_and_backtrace_escaped(
        client: TestClient, config: wurk.Config) -> None:
    jid = stored(config, 12, "failed")
    page = client.get(f"/results/{jid}").text
    assert "<strong>failed</strong>" in page and "<strong>ValueError</strong>" in page
    assert "card &lt;script&gt;" in page and XSS not in page
    assert "<dt>Retry due</dt><dd>no</dd>" in page
    assert "line &lt;script&gt;" in page and "<h2>Backtrace</h2>" in page
    document = client.get(f"/api/results/{jid}").json()["result"]
    assert document["error_message"] == f"card {XSS} declined"
    assert document["retries_remain"] is False and document["backtrace"][1] == "line 2"


def test_a_cancelled_jobs_result_page_says_so(client: TestClient, config: wurk.Config) -> None:
    jid = stored(config, 13, "cancelled")
    page = client.get(f"/results/{jid}").text
    assert "<strong>cancelled</strong>" in page and "cancelled before it ran" in page
    assert client.get(f"/api/results/{jid}").json()["result"]["status"] == "cancelled"


def test_a_jid_without_a_result_is_a_plain_404(client: TestClient) -> None:
    response = client.get(f"/results/{XSS}")
    assert response.status_code == 404
    assert "No result is stored for this job" in response.text and XSS not in response.text
    answer = client.get("/api/results/nope")
    assert answer.status_code == 404 and "No result is stored" in answer.json()["error"]


def test_an_unreadable_record_is_shown_as_invalid(client: TestClient, r: redis.Redis) -> None:
    r.set("wurk:result:bad1", json.dumps({"status": XSS}))
    r.hset("wurk:result:bad2", "a", "hash")  # a key of another type
    page = client.get("/results/bad1")
    assert page.status_code == 200 and "The stored result cannot be read" in page.text
    assert XSS not in page.text and "&lt;script&gt;" in page.text
    assert client.get("/results/bad2").status_code == 200
    document = client.get("/api/results/bad1").json()
    assert document["result"] is None and "/result" in document["invalid"]
    assert "is none of" in document["problem"]
