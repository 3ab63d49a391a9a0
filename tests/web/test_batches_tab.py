"""The Batches and Dead Batches tabs: lists, a batch's page, the status JSON, the actions,
hostile stored values — through TestClient, and once in real headless Chromium."""

from __future__ import annotations

import re
import time
from typing import Any

import redis
from starlette.testclient import TestClient

import wurk
from tests.web.conftest import XSS, browse, post, token
from tests.web.live import browser_context, serve
from wurk.api import DeadSet, RetrySet
from wurk.batch import accounting
from wurk.web import create_app


@wurk.job(name="WebBatch::work")
def work(n: int) -> None: ...


def make(config: wurk.Config, jobs: int = 3, **options: Any) -> tuple[wurk.Batch, list[str]]:
    batch = wurk.Batch(**options)
    batch.on("success", work, {"n": 1})
    with batch.jobs():
        jids = [str(work.perform_async(n)) for n in range(jobs)]
    return batch, jids


def entry(jid: str, bid: str, message: str) -> dict[str, Any]:
    return {"class": "WebBatch::work", "args": [1], "queue": "default", "jid": jid,
            "bid": bid, "retry": True, "retry_count": 0, "error_class": "RuntimeError",
            "error_message": message, "failed_at": time.time(), "created_at": time.time()}


def test_list_page_progress_and_tag_search(config: wurk.Config, client: TestClient) -> None:
    first, jids = make(config, 4, description="nightly import", tags=["import"])
    make(config, 2, description="export", tags=["export"])
    with wurk.redis() as conn:
        accounting.record(conn, config, first.bid, jids[0], "success")
    page = client.get("/batches/")
    assert page.status_code == 200
    assert "nightly import" in page.text and "export" in page.text
    assert 'value="25"' in page.text  # one of four done
    tagged = client.get("/batches/", params={"tag": "imp"})
    assert "nightly import" in tagged.text and ">export<" not in tagged.text
    assert "Batches" in client.get("/").text and "Dead Batches" in client.get("/").text


def test_a_batchs_page_links_each_failed_and_dead_job_to_its_entry(
        config: wurk.Config, client: TestClient) -> None:
    batch, jids = make(config, 3, description=XSS)
    with wurk.redis() as conn:
        accounting.record(conn, config, batch.bid, jids[0], "failure")
        accounting.record(conn, config, batch.bid, jids[1], "death")
    RetrySet(config).schedule(time.time() + 60, entry(jids[0], batch.bid, "retry me"))
    DeadSet(config).schedule(time.time(), entry(jids[1], batch.bid, "it died"))
    page = client.get(f"/batches/{batch.bid}")
    assert page.status_code == 200
    assert XSS not in page.text  # escaped
    links = re.findall(r'href="(/(?:retries|morgue)\?substr=[^"]+)"', page.text)
    assert len(links) == 2, links  # one each: the failed job, the dead one
    found = {link: client.get(link.replace("&amp;", "&")) for link in links}
    assert all(answer.status_code == 200 for answer in found.values())  # no link is a 404
    texts = " ".join(answer.text for answer in found.values())
    assert "retry me" in texts and "it died" in texts  # each search finds its entry
    assert "WebBatch::work" in page.text  # the callback target
    assert client.get("/batches/nope").status_code == 404
    dead = client.get("/dead-batches/")
    assert batch.bid in dead.text


def test_status_json(config: wurk.Config, client: TestClient) -> None:
    batch, _ = make(config, 2)
    data = client.get(f"/batches/{batch.bid}.json").json()
    assert (data["total"], data["pending"], data["failures"]) == (2, 2, 0)
    assert data["complete"] is False and data["bid"] == batch.bid
    assert client.get("/batches/nope.json").status_code == 404


def test_actions_invalidate_delete_and_retry_dead(config: wurk.Config, client: TestClient,
                                                  r: redis.Redis) -> None:
    batch, jids = make(config, 2)
    answer = post(client, f"/batches/{batch.bid}", action="invalidate")
    assert answer.status_code == 303 and wurk.BatchStatus(batch.bid).invalidated
    with wurk.redis() as conn:
        accounting.record(conn, config, batch.bid, jids[0], "death")
    DeadSet(config).schedule(time.time(), entry(jids[0], batch.bid, "dead"))
    r.delete("queue:default")
    assert post(client, f"/dead-batches/{batch.bid}").status_code == 303
    assert r.llen("queue:default") == 1 and DeadSet(config).size() == 0
    assert post(client, f"/batches/{batch.bid}", action="delete").status_code == 303
    assert not wurk.BatchStatus(batch.bid).exists
    assert post(client, f"/batches/{batch.bid}", action="explode").status_code == 400


def test_read_only_refuses_actions(config: wurk.Config) -> None:
    batch, _ = make(config, 1)
    with browse(create_app(config, read_only=True), follow_redirects=False) as client:
        assert "Delete" not in client.get(f"/batches/{batch.bid}").text
        assert post(client, f"/batches/{batch.bid}", action="delete").status_code == 403
    assert wurk.BatchStatus(batch.bid).exists


def test_hostile_stored_values_show_as_problems(config: wurk.Config, client: TestClient,
                                               r: redis.Redis) -> None:
    batch, _ = make(config, 1)
    r.hset(f"b-{batch.bid}", mapping={"total": XSS, "pending": "-", "created_at": "x",
                                      "callbacks": "[[", "tags": "[1,2]"})
    for path in ("/batches/", f"/batches/{batch.bid}"):
        page = client.get(path)
        assert page.status_code == 200 and XSS not in page.text
    data = client.get(f"/batches/{batch.bid}.json")
    assert data.headers["content-type"] == "application/json"
    assert data.json()["total"] is None and len(data.json()["problems"]) == 4
    assert data.json()["invalid"]["/total"] == XSS  # raw text, in JSON: nothing runs it
    assert "is not a whole number" in client.get(f"/batches/{batch.bid}").text


def test_batches_tab_in_chromium(config: wurk.Config) -> None:
    batch, _ = make(config, 4, description="seen in a browser", tags=["ui"])
    with serve(create_app(config)) as server, browser_context() as browser:
        page = browser.new_page()
        page.set_default_timeout(20_000)
        page.goto(server.url + "/")
        page.click("nav >> text=Batches")
        page.wait_for_selector("text=seen in a browser")
        page.click(f"a >> text={batch.bid}")
        page.wait_for_selector("h1 >> text=Batch")
        assert page.locator("progress").count() == 1
        page.click("text=status JSON")
        assert '"total": 4' in page.content() or '"total":4' in page.content()


def test_json_twins_under_the_api(config: wurk.Config, client: TestClient,
                                  r: redis.Redis) -> None:
    batch, jids = make(config, 2, tags=["api"])
    listing = client.get("/api/batches/", params={"tag": "ap"}).json()
    assert listing["size"] == 1 and listing["batches"][0]["bid"] == batch.bid
    one = client.get(f"/api/batches/{batch.bid}").json()
    assert one["total"] == 2 and one["callbacks"] == [["success", "WebBatch::work", {"n": 1}]]
    assert client.get("/api/batches/nope").status_code == 404
    with wurk.redis() as conn:
        accounting.record(conn, config, batch.bid, jids[0], "death")
    DeadSet(config).schedule(time.time(), entry(jids[0], batch.bid, "dead"))
    assert [b["bid"] for b in client.get("/api/batches/dead").json()["batches"]] == [batch.bid]
    answer = client.post(f"/api/batches/{batch.bid}", json={"action": "retry"},
                         headers={"X-CSRF-Token": token(client)})
    assert answer.json() == {"action": "retry", "count": 1}
    assert "/api/batches/{bid}" in client.get("/api/openapi.json").text
