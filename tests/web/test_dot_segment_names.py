"""Queues and periodic loops named ``.`` or ``..``: a browser resolves such a path segment
away (WHATWG URL parsing), so their links and forms must take a path it keeps, and an action
must never land on another queue or loop than the row's."""

from __future__ import annotations

import hashlib
import html
import re
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

import wurk
from tests.helpers.metrics import tracked
from tests.web.conftest import job, post, token
from tests.web.live import browser_context, serve
from wurk.web import create_app

DOTS = (".", "..")
HTML = {"accept": "text/html"}


def seed_queue(r: redis.Redis, name: str, count: int) -> None:
    for n in range(count):
        r.lpush(f"queue:{name}", wurk.payload.dumps(job(n, queue=name)))
    r.sadd("queues", name)


def row_actions(text: str) -> list[str]:
    """The forms of the page's rows (the footer's language picker is every page's)."""
    return [html.unescape(a) for a in re.findall(r'<form method="post" action="([^"]*)"', text)
            if a != "/change_locale"]


@pytest.mark.parametrize("name", DOTS)
def test_a_dot_named_queue_is_cleared_by_its_own_row_and_no_other(
        client: TestClient, r: redis.Redis, name: str) -> None:
    seed_queue(r, name, 2)
    seed_queue(r, "", 3)        # what "/queues/" names
    seed_queue(r, "x", 4)
    page = client.get("/queues").text
    link = next(html.unescape(h) for h in re.findall(r'<a href="([^"]*)">' + re.escape(name)
                                                     + "</a>", page))
    shown = client.get(link)
    assert shown.status_code == 200 and f'<span class="name">{name}</span>' in shown.text
    action = next(a for a in row_actions(page) if a == link)
    done = client.post(action, data={"csrf_token": token(client), "action": "clear",
                                     "queue": name})
    assert done.status_code == 303
    assert r.llen(f"queue:{name}") == 0
    assert r.llen("queue:") == 3 and r.llen("queue:x") == 4


def test_a_queue_form_sent_to_another_queue_is_refused(client: TestClient,
                                                       r: redis.Redis) -> None:
    seed_queue(r, "x", 3)
    refused = post(client, "/queues/x", action="clear", queue=".")
    assert refused.status_code == 400
    assert r.llen("queue:x") == 3


def test_a_dot_named_queues_job_is_deleted_on_its_own_page(client: TestClient,
                                                          r: redis.Redis) -> None:
    seed_queue(r, "..", 2)
    seed_queue(r, "", 2)
    page = client.get("/queues").text
    link = next(html.unescape(h) for h in re.findall(r'<a href="([^"]*)">\.\.</a>', page))
    newest = client.get(link).text
    oldest = html.unescape(re.findall(r'<a href="([^"]*)">oldest first</a>', newest)[0])
    queue_page = client.get(oldest)
    assert queue_page.status_code == 200 and "newest first</a>" in queue_page.text
    action = row_actions(queue_page.text)[0]
    key = html.unescape(re.findall(r'name="key" value="([^"]*)"', queue_page.text)[0])
    done = client.post(action, data={"csrf_token": token(client), "key": key, "queue": ".."})
    assert done.status_code == 303 and "notice=delete" in done.headers["location"]
    assert r.llen("queue:..") == 1 and r.llen("queue:") == 2


@pytest.mark.parametrize("lid", DOTS)
def test_a_dot_named_loop_is_paused_by_its_own_row(client: TestClient, r: redis.Redis,
                                                   lid: str) -> None:
    for one in (lid, "aaaa"):
        r.sadd("periodic", one)
        r.hset(f"loops:{one}", mapping={"schedule": "* * * * *", "klass": f"K{len(one)}",
                                        "paused": "0", "options": "{}"})
    page = client.get("/periodic/").text
    actions = row_actions(page)
    assert len(set(actions)) == 2
    link = next(a for a in actions if "aaaa" not in a)
    assert client.get(link).status_code == 200
    done = client.post(link, data={"csrf_token": token(client), "action": "pause", "lid": lid})
    assert done.status_code == 303
    assert r.hget(f"loops:{lid}", "paused") == "1"
    assert r.hget("loops:aaaa", "paused") == "0"
    refused = post(client, "/periodic/aaaa", action="pause", lid=lid)
    assert refused.status_code == 400 and r.hget("loops:aaaa", "paused") == "0"


def test_the_browser_keeps_a_dot_named_queues_link(config: wurk.Config,
                                                  r: redis.Redis) -> None:
    seed_queue(r, ".", 1)
    seed_queue(r, "", 1)
    with serve(create_app(config)) as server, browser_context() as browser:
        page: Any = browser.new_page()
        page.set_default_timeout(20_000)
        page.goto(server.url + "/queues")
        row = "td > a >> text='.'"
        written = page.get_attribute(row, "href")
        assert page.eval_on_selector(row, "a => a.href") == server.url + written
        page.click(row)
        page.wait_for_load_state()
        assert page.url == server.url + written
        assert page.text_content("h1 .name") == "."


def links(text: str) -> list[str]:
    return [html.unescape(a) for a in re.findall(r'<a href="([^"]*)"', text)]


def rename_batch(config: wurk.Config, r: redis.Redis, old: str, new: str) -> None:
    keys = config.keys
    for source, target in zip(keys.batch_keys(old), keys.batch_keys(new), strict=True):
        if r.exists(source):
            r.rename(source, target)
    score = r.zscore(keys.batches, old)
    r.zrem(keys.batches, old)
    r.zadd(keys.batches, {new: score or 1})


@pytest.mark.parametrize("bid", DOTS)
def test_a_dot_named_batch_is_reached_and_acted_on_by_its_own_links(
        config: wurk.Config, client: TestClient, r: redis.Redis, bid: str) -> None:
    batch = wurk.Batch(description="dotted")
    with batch.jobs():
        wurk.Client(config=config).push({"class": "Dot", "args": []})
    rename_batch(config, r, batch.bid, bid)
    listed = client.get("/batches/").text
    link = next(a for a in links(listed) if "/batches/" in a and "tag=" not in a
                and a.rstrip("/") != "/batches")
    shown = client.get(link)
    assert shown.status_code == 200 and f"<h1>Batch <code>{bid}</code></h1>" in shown.text
    action = row_actions(shown.text)[0]
    done = client.post(action, data={"csrf_token": token(client), "action": "invalidate"})
    assert done.status_code == 303
    assert r.hget(config.keys.batch(bid), "invalidated") is not None or \
        "invalidate" in done.headers["location"]
    assert client.get(done.headers["location"]).status_code == 200


@pytest.mark.parametrize("wid", DOTS)
def test_a_dot_named_workflows_link_reaches_its_page(config: wurk.Config, client: TestClient,
                                                     r: redis.Redis, wid: str) -> None:
    keys = config.keys
    r.hset(keys.workflow(wid), mapping={"state": "running", "total": 1, "pending": 1})
    r.hset(keys.workflow(wid, "state"), "only", "queued")
    r.zadd(keys.workflows, {wid: 1})
    link = next(a for a in links(client.get("/workflows/").text) if "/workflows/" in a
                and a.rstrip("/") != "/workflows")
    shown = client.get(link)
    assert shown.status_code == 200 and f"<code>{wid}</code>" in shown.text


@pytest.mark.parametrize("name", DOTS)
def test_a_dot_named_jobs_metrics_links_reach_its_page(config: wurk.Config,
                                                       client: TestClient, name: str) -> None:
    tracker = tracked(**{name: ([5.0], 0)})
    tracker.flush(config.pool(), config.keys)
    listed = client.get("/metrics", headers=HTML).text
    link = next(a for a in links(listed) if f'">{name}</a>' in listed and "/metrics/" in a)
    shown = client.get(link, headers=HTML)
    assert shown.status_code == 200 and f'<h1 class="name">{name}</h1>' in shown.text
    periods = [a for a in links(shown.text) if "period=24h" in a]
    assert periods
    for period in periods:
        assert f'<h1 class="name">{name}</h1>' in client.get(period, headers=HTML).text


@pytest.mark.parametrize("jid", DOTS)
def test_a_dot_jids_result_lookup_lands_on_its_own_page(client: TestClient, jid: str) -> None:
    sent = client.get("/results/", params={"jid": jid})
    assert sent.status_code == 303
    where = sent.headers["location"]
    assert "?" in where  # a path "/results/.." is "/" to a browser
    shown = client.get(where)
    assert shown.status_code == 404 and f'name="jid" value="{jid}"' in shown.text


def test_the_browser_keeps_a_dot_named_batchs_link(config: wurk.Config,
                                                   r: redis.Redis) -> None:
    batch = wurk.Batch(description="dotted")
    with batch.jobs():
        wurk.Client(config=config).push({"class": "Dot", "args": []})
    rename_batch(config, r, batch.bid, "..")
    with serve(create_app(config)) as server, browser_context() as browser:
        page: Any = browser.new_page()
        page.set_default_timeout(20_000)
        page.goto(server.url + "/batches/")
        row = "td > a:has(code:text-is('..'))"
        written = page.get_attribute(row, "href")
        page.click(row)
        page.wait_for_load_state()
        assert page.url == server.url + written
        assert page.text_content("h1 code") == ".."


LONG = "q" * 2_500 + "é" * 400  # over the 2,000 characters a page shows of any text


def test_a_queue_with_a_long_name_is_reached_and_cleared_by_its_own_row(
        client: TestClient, r: redis.Redis) -> None:
    seed_queue(r, LONG, 2)
    seed_queue(r, LONG[:2_000], 3)  # what a link cut at 2,000 characters would name
    page = client.get("/queues").text
    link = "/queue?sha1=" + hashlib.sha1(LONG.encode()).hexdigest()
    assert link in links(page)
    shown = client.get(link)
    assert shown.status_code == 200 and "2 jobs" in shown.text
    action = next(a for a in row_actions(page) if a == link)
    field = "sha1:" + hashlib.sha1(LONG.encode()).hexdigest()
    assert f'name="queue" value="{field}"' in page  # not the long name, whole or cut
    done = client.post(action, data={"csrf_token": token(client), "action": "clear",
                                     "queue": field})
    assert done.status_code == 303
    assert r.llen(f"queue:{LONG}") == 0 and r.llen(f"queue:{LONG[:2_000]}") == 3
    assert client.get("/queue?sha1=" + "0" * 40).status_code == 404


def test_a_loop_with_a_long_id_is_reached_and_paused_by_its_own_row(
        client: TestClient, r: redis.Redis) -> None:
    r.sadd("periodic", LONG)
    r.hset(f"loops:{LONG}", mapping={"schedule": "* * * * *", "klass": "K", "paused": "0",
                                     "options": "{}"})
    page = client.get("/periodic/").text
    action = row_actions(page)[0]
    assert len(action) < 200 and client.get(action).status_code == 200
    field = html.unescape(re.findall(r'name="lid" value="([^"]*)"', page)[0])
    done = client.post(action, data={"csrf_token": token(client), "action": "pause",
                                     "lid": field})
    assert done.status_code == 303 and r.hget(f"loops:{LONG}", "paused") == "1"


def test_a_batch_id_too_long_for_a_link_links_to_the_batches_list(
        config: wurk.Config, client: TestClient, r: redis.Redis) -> None:
    """No batch wurk makes has a 100,000-character id (one written by hand): its row links to
    the list of batches, not by a link as long as the id (a page of such rows grew by the
    ids' size) nor by one cut short (another batch's page)."""
    batch = wurk.Batch(description="long")
    with batch.jobs():
        wurk.Client(config=config).push({"class": "Long", "args": []})
    huge = "b" * 100_000
    rename_batch(config, r, batch.bid, huge)
    listed = client.get("/batches/")
    assert listed.status_code == 200 and len(listed.text) < 60_000
    assert all(len(a) < 2_000 for a in links(listed.text))
    assert "/batches" in links(listed.text)
