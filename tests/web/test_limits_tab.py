"""The Limits tab and its JSON twin: every limiter, its use and stats; hostile data renders."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

import wurk
from tests.web.conftest import XSS, browse
from tests.web.live import browser_context, serve
from wurk.limiter.base import forget_registrations
from wurk.stored import Invalid
from wurk.web import Extension, create_app


def seed(config: wurk.Config) -> None:
    forget_registrations()
    erp = wurk.limiter.concurrent("erp", 3, wait_timeout=0)
    erp.within_limit().__enter__()  # one slot held now
    with erp.within_limit():
        pass
    with wurk.limiter.window("search", 50, "hour").within_limit(used=12):
        pass
    with wurk.limiter.bucket("api", 100, "minute").within_limit(used=7):
        pass
    with wurk.limiter.leaky("stripe", 10, "minute").within_limit():
        pass
    with wurk.limiter.points("llm", 1000, 5).within_limit(used=400):
        pass
    full = wurk.limiter.concurrent("full", 1, wait_timeout=0)
    try:
        with full.within_limit(), full.within_limit():
            pass
    except wurk.limiter.OverLimit:
        pass


def rows(client: TestClient, **query: Any) -> dict[str, dict[str, Any]]:
    found = client.get("/api/limits", params=query).json()
    return {row["name"]: row for row in found["limiters"]}


def test_the_json_twin_lists_every_limiter_with_its_use_and_stats(
        config: wurk.Config, client: TestClient) -> None:
    seed(config)
    found = rows(client)
    assert sorted(found) == ["api", "erp", "full", "llm", "search", "stripe"]
    assert (found["erp"]["type"], found["erp"]["size"], found["erp"]["use"]) == (
        "concurrent", 3, 1)
    assert found["erp"]["stats"]["held"] == 2
    assert found["search"]["use"] == 12 and found["search"]["interval"] == 3600
    assert found["api"]["use"] == 7 and found["api"]["interval"] == 60
    assert 0.9 < found["stripe"]["use"] <= 1
    assert 600 <= found["llm"]["use"] < 620
    assert found["full"]["stats"]["refused"] == 1
    assert all(row["problem"] is None for row in found.values())
    assert list(rows(client, substr="er")) == ["erp"]
    assert client.get("/api/limits").json()["expired_jobs"] == 0


def test_the_page_shows_the_same(config: wurk.Config, client: TestClient) -> None:
    seed(config)
    page = client.get("/limits/")
    assert page.status_code == 200
    assert 'aria-current="page">Limits' in page.text
    for text in ("erp", "concurrent", "search", "window", "stripe", "leaky", "llm"):
        assert text in page.text
    r = redis.Redis.from_url(config.redis_url or "")
    r.set("stat:expired", 7)
    assert "dropped unrun): 7" in client.get("/limits/").text
    assert client.get("/limits").status_code in (200, 307)
    assert 'href="/limits">Limits</a>' in client.get("/").text


def test_hostile_stored_values_render_as_problems(config: wurk.Config, client: TestClient,
                                                   r: redis.Redis) -> None:
    r.sadd("lmtr-list", XSS, "ok-name", "bad-type", "not-json", "wrong-kind", "nostats")
    redis.Redis(port=r.connection_pool.connection_kwargs["port"]).sadd(
        "lmtr-list", b"\xff\xfe")  # not UTF-8
    r.hset("lmtr:bad-type", mapping={"type": XSS, "options": "{}"})
    r.hset("lmtr:not-json", mapping={"type": "window", "options": "{oops"})
    r.hset("lmtr:ok-name", mapping={"type": "window", "options": '{"size": 5, "interval": 1}'})
    r.hset("lmtr-s:{ok-name}", mapping={"held": "lots", "refused": "-3", "waited": XSS})
    r.zadd("lmtr-w:{ok-name}", {"a": float("inf")})
    r.hset("lmtr:wrong-kind", mapping={"type": "concurrent",
                                       "options": '{"size": 1e308, "lock_timeout": -1}'})
    r.set("lmtr-c:{wrong-kind}", "a string, not a sorted set")
    r.hset("lmtr:nostats", mapping={"type": "leaky", "options": '{"size": 5, '
                                    '"drain_period": "soon"}'})
    page = client.get("/limits/")
    assert page.status_code == 200
    assert "<script>" not in page.text and XSS not in page.text
    found = client.get("/api/limits").json()
    assert found["unreadable_names"] == 2
    problems = {row["name"]: row["problem"] for row in found["limiters"]}
    assert problems == {"bad-type": "unknown type",
                        "not-json": "options are not a JSON object",
                        "ok-name": None, "wrong-kind": "its keys hold the wrong type of value",
                        "nostats": "options lack a valid interval"}
    index, ok = next((i, row) for i, row in enumerate(found["limiters"])
                     if row["name"] == "ok-name")
    assert ok["stats"]["held"] is None and ok["stats"]["refused"] is None and ok["use"] == 1
    assert found["invalid"][f"/limiters/{index}/stats/held"] == "lots"
    assert found["invalid"][f"/limiters/{index}/stats/refused"] == "-3"
    assert "invalid (lots)" in page.text
    assert next(row for row in found["limiters"] if row["name"] == "bad-type")["type"] == \
        "unknown"


def test_a_whole_number_too_large_for_a_float_in_options_is_a_problem_not_an_error_page(
        config: wurk.Config, client: TestClient, r: redis.Redis) -> None:
    """JSON reads ``1`` followed by 400 zeros as a Python int, and checking it raised
    OverflowError ("int too large to convert to float"): one limiter's metadata written so
    (by hand, by another tool) made the Limits tab and ``/api/limits`` an error for every
    limiter. Such a size or interval is a problem on its row; such a lock is none."""
    huge = "1" + "0" * 400
    r.sadd("lmtr-list", "big-size", "big-interval", "big-lock")
    r.hset("lmtr:big-size", mapping={"type": "window",
                                     "options": f'{{"size": {huge}, "interval": 1}}'})
    r.hset("lmtr:big-interval", mapping={"type": "bucket",
                                         "options": f'{{"size": 5, "interval": {huge}}}'})
    r.hset("lmtr:big-lock", mapping={"type": "concurrent",
                                     "options": f'{{"size": 2, "lock_timeout": {huge}}}'})
    assert client.get("/limits/").status_code == 200
    found = rows(client)
    assert found["big-size"]["problem"] == "options lack a valid size"
    assert found["big-interval"]["problem"] == "options lack a valid interval"
    assert found["big-lock"]["problem"] is None and found["big-lock"]["lock_timeout"] is None
    assert found["big-lock"]["size"] == 2


@pytest.mark.parametrize("stored", ["lots", "-3", "1e400"])
def test_an_expired_count_that_is_no_count_is_shown_as_invalid_not_zero(
        config: wurk.Config, client: TestClient, r: redis.Redis, stored: str) -> None:
    """``stat:expired`` holding text, a negative number or 1e400 (written by hand) read as
    0 expired jobs, with nothing saying so; it is shown as what it holds, as every other
    counter that is no count."""
    r.set("stat:expired", stored)
    found = client.get("/api/limits").json()
    assert found["expired_jobs"] is None and found["invalid"]["/expired_jobs"] == stored
    assert f"dropped unrun): invalid ({stored})" in client.get("/limits/").text
    assert isinstance(wurk.expiry.expired_count(config), Invalid)


def test_paging_and_an_empty_listing(config: wurk.Config, client: TestClient,
                                     r: redis.Redis) -> None:
    assert "No limiters yet" in client.get("/limits/").text
    for n in range(30):
        r.sadd("lmtr-list", f"dyn-{n:02}")
        r.hset(f"lmtr:dyn-{n:02}", mapping={"type": "bucket",
                                            "options": '{"size": 5, "interval": 60}'})
    first, second = client.get("/api/limits").json(), client.get(
        "/api/limits", params={"page": 2}).json()
    assert (first["total"], first["pages"], len(first["limiters"])) == (30, 2, 25)
    assert [row["name"] for row in second["limiters"]] == [f"dyn-{n}" for n in range(25, 30)]
    assert client.get("/api/limits", params={"page": 99}).json()["page"] == 2
    assert 'rel="next"' in client.get("/limits/").text


def test_a_host_extension_named_limits_replaces_the_built_in_tab(
        config: wurk.Config) -> None:
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def own(request: Any) -> PlainTextResponse:
        return PlainTextResponse("the host's own limits page")

    app = create_app(config, extensions=[Extension(name="limits", tab="Quotas",
                                                   routes=[Route("/", own)])])
    with browse(app) as client:
        assert client.get("/limits/").text == "the host's own limits page"
        assert client.get("/api/limits").status_code == 200  # the JSON twin stays


def test_the_tab_in_a_real_browser(config: wurk.Config) -> None:
    seed(config)
    with serve(create_app(config)) as server, \
            browser_context(viewport={"width": 1280, "height": 900}) as browser:
        page = browser.new_page()
        page.set_default_timeout(20_000)
        page.goto(server.url + "/")
        page.click("nav >> text=Limits")
        page.wait_for_selector("table >> text=erp")
        row = page.locator("tr", has_text="search")
        assert "window" in row.inner_text() and "12" in row.inner_text()
