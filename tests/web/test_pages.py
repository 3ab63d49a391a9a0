"""Every page of the dashboard against the real test server: content, paging, escaping."""

from __future__ import annotations

import re
import time

import pytest
import redis
from starlette.testclient import TestClient

import wurk
from tests.web.conftest import XSS, browse, failed, job, seed_pages, seed_process, seed_sets
from wurk.api import Queue, RetrySet

PAGES = ["/", "/busy", "/queues", "/queues/default", "/retries", "/scheduled", "/morgue",
         "/api"]


@pytest.fixture
def seeded(config: wurk.Config, r: redis.Redis) -> wurk.Config:
    seed_pages(config, r)
    return config


@pytest.mark.parametrize("path", PAGES)
def test_every_page_renders(client: TestClient, seeded: wurk.Config, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert "<nav" in response.text and "wurk.css" in response.text


@pytest.mark.parametrize("path", PAGES)
def test_pages_hold_no_inline_script_style_or_remote_asset(client: TestClient,
                                                           seeded: wurk.Config,
                                                           path: str) -> None:
    text = client.get(path).text
    assert not re.search(r"<script(?![^>]*\bsrc=)", text), "inline script"
    assert not re.search(r"\sstyle=", text), "inline style attribute"
    assert not re.search(r"\son[a-z]+=", text), "inline event handler"
    assert not re.search(r"(src|href)=\"(https?:)?//", text), "asset from another origin"


def test_dashboard_shows_numbers_history_and_redis(client: TestClient,
                                                   seeded: wurk.Config) -> None:
    text = client.get("/?days=7").text
    assert 'data-stat="processed">4,321<' in text
    assert 'data-stat="retries">3<' in text
    assert "Valkey" in text or "Redis" in text
    assert text.count("<polyline") == 4  # live (drawn by script) and history, two lines each
    assert 'aria-current="true">7 days' in text


def test_head_is_the_cheap_health_check(client: TestClient, config: wurk.Config) -> None:
    response = client.head("/")
    assert response.status_code == 200
    assert response.content == b""


def test_busy_lists_processes_and_running_jobs(client: TestClient, seeded: wurk.Config) -> None:
    text = client.get("/busy").text
    assert "host:1" in text and "blue" in text and "HardJob" in text
    assert "1 / 5" in text
    only = client.get("/busy?only=processes").text
    assert "Jobs running" not in only and "host:1" in only


def test_busy_shows_each_processs_event_loop_lag(client: TestClient, r: redis.Redis) -> None:
    """async-jobs.md: "The loop's lag ... is written to the process record as loop_lag_us
    and shown on the dashboard's Busy page"."""
    r.hset(seed_process(r, "host:1:lagging"), "loop_lag_us", 12_345)
    seed_process(r, "host:2:calm")  # no lag measured: a dash
    text = client.get("/busy").text
    assert '<th class="num opt">Loop lag</th>' in text
    assert text.count(">12.3 ms<") == 1  # the lagging process's, no other


def test_queue_page_pages_and_orders(client: TestClient, config: wurk.Config,
                                     r: redis.Redis) -> None:
    for n in range(30):
        r.lpush("queue:default", wurk.payload.dumps(job(n)))
    newest = client.get("/queues/default").text
    assert newest.index(f"{29:024x}") < newest.index(f"{10:024x}")
    assert "Page 1 of 2" in newest
    oldest = client.get("/queues/default?direction=asc").text
    assert oldest.index(f"{0:024x}") < oldest.index(f"{10:024x}")
    assert f"{29:024x}" not in oldest
    second = client.get("/queues/default?page=2").text
    assert f"{0:024x}" in second and f"{29:024x}" not in second


def test_set_pages_page_and_filter(client: TestClient, config: wurk.Config) -> None:
    now = time.time()
    for n in range(30):
        RetrySet(config).schedule(now + n, failed(n))
    first = client.get("/retries").text
    assert "Page 1 of 2" in first and "boom 0<" in first  # soonest first
    last = client.get("/retries?page=99").text  # clamped to the last page
    assert "Page 2 of 2" in last and "boom 29" in last
    filtered = client.get("/retries?substr=boom%2017").text
    assert "boom 17" in filtered and "boom 16" not in filtered and "(1 matching)" in filtered


def test_morgue_is_newest_first(client: TestClient, config: wurk.Config) -> None:
    seed_sets(config, 3)
    text = client.get("/morgue").text
    assert text.index("boom 202") < text.index("boom 200")


def test_entry_page_shows_error_and_backtrace(client: TestClient, config: wurk.Config) -> None:
    trace = ["app.py:10:in `perform'", "lib.py:3:in `call'"]
    RetrySet(config).schedule(time.time() + 60, failed(1, error_backtrace=trace))
    key = client.get("/api/retries").json()["entries"][0]["key"]
    text = client.get(f"/retries/{key}").text
    assert "RuntimeError" in text and "boom 1" in text
    assert "app.py:10:in `perform&#39;" in text and "lib.py:3" in text


def test_gone_entry_is_a_404_page(client: TestClient, config: wurk.Config) -> None:
    response = client.get("/retries/1700000000.0-nosuchjid")
    assert response.status_code == 404
    assert "no longer in Retries" in response.text
    assert client.get("/retries/not-a-key").status_code == 404


def test_unknown_page_is_a_404_page(client: TestClient) -> None:
    response = client.get("/nowhere")
    assert response.status_code == 404 and "<nav" in response.text


def test_xss_in_job_data_is_rendered_inert(client: TestClient, config: wurk.Config,
                                           r: redis.Redis) -> None:
    payload = job(1, args=[XSS, {"k": XSS}], error_class=XSS, error_message=XSS,
                  tags=[XSS], queue=XSS)
    RetrySet(config).schedule(time.time() + 60, payload)
    r.lpush("queue:default", wurk.payload.dumps(payload))
    r.sadd("queues", "default", XSS)
    seed_process(r, tag=XSS)
    key = client.get("/api/retries").json()["entries"][0]["key"]
    for path in ["/retries", f"/retries/{key}", "/queues", "/queues/default", "/busy", "/"]:
        text = client.get(path).text
        assert "<script>alert" not in text, path
        assert "&lt;script&gt;" in text, path


def test_mounted_under_a_prefix(config: wurk.Config) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    from wurk.web import create_app

    seed_sets(config, 1)
    host = Starlette(routes=[Mount("/admin/jobs", app=create_app(config))])
    with browse(host, follow_redirects=False) as client:
        page = client.get("/admin/jobs/retries")
        assert page.status_code == 200
        assert 'href="/admin/jobs/static/wurk.css' in page.text
        assert 'action="/admin/jobs/retries"' in page.text
        assert "Path=/admin/jobs" in page.headers["set-cookie"]
        assert client.get("/admin/jobs/static/wurk.js").status_code == 200
        assert client.get("/admin/jobs/static/wurk.js").headers["cache-control"].startswith(
            "private")
        assert client.get("/admin/jobs/queues").headers["cache-control"] == "no-store"
        token = client.get("/admin/jobs/api/csrf").json()["token"]
        done = client.post("/admin/jobs/retries", data={"csrf_token": token, "all": "1",
                                                        "action": "delete"})
        assert done.status_code == 303
        assert done.headers["location"].startswith("/admin/jobs/retries?")
        assert client.get("/admin/jobs/api/openapi.json").json()["servers"] == [
            {"url": "/admin/jobs"}]


def test_assets_are_cached_and_pages_are_not(client: TestClient) -> None:
    assert client.get("/static/wurk.css").headers["cache-control"].startswith("private")
    assert client.get("/queues").headers["cache-control"] == "no-store"


def test_a_page_whose_path_holds_static_is_not_cached(client: TestClient, r: redis.Redis) -> None:
    """Only the assets are cached: a queue named "static/x" (a job class "static/x" on the
    Metrics tab, a jid on Results) is a page with its jobs and the CSRF token in it, and a
    page is never kept in the browser's cache."""
    r.sadd("queues", "static/x")
    r.lpush("queue:static/x", wurk.payload.dumps(job(1)))
    page = client.get("/queues/static%2Fx")
    assert page.status_code == 200 and "csrf_token" in page.text
    for path in ["/queues/static%2Fx", "/queues/static/x", "/metrics/static/x",
                 "/results/static/x"]:
        assert client.get(path).headers["cache-control"] == "no-store", path


def test_page_when_redis_is_down_says_nothing_about_it(caplog: pytest.LogCaptureFixture) -> None:
    from wurk.web import create_app

    down = wurk.Config(redis_url="redis://127.0.0.1:1/0", socket_timeout=0.5)
    down.redis_url = "redis://127.0.0.1:1/0"  # REDIS_URL from the harness would win
    with browse(create_app(down)) as client:
        response = client.get("/queues")
    assert response.status_code == 503
    assert "Redis cannot be reached" in response.text
    assert "127.0.0.1:1" not in response.text and "Connection refused" not in response.text
    assert "127.0.0.1:1" in caplog.text  # the details are in the server log
    down.close()


def test_dead_leads_to_the_dead_page(client: TestClient, seeded: wurk.Config) -> None:
    moved = client.get("/dead?page=1")
    assert (moved.status_code, moved.headers["location"]) == (307, "/morgue?page=1")
    morgue = client.get("/morgue")
    followed = client.get("/dead", follow_redirects=True)
    assert followed.status_code == 200 and str(followed.url).endswith("/morgue")
    assert 'href="/morgue" aria-current="page">Dead' in followed.text
    key = re.search(r'href="/morgue/([^"?]+)"', morgue.text)
    assert key is not None
    entry = client.get(f"/dead/{key.group(1)}", follow_redirects=True)
    assert entry.status_code == 200 and str(entry.url).endswith(f"/morgue/{key.group(1)}")


def test_dead_keeps_the_mount_prefix(config: wurk.Config) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    from wurk.web import create_app

    host = Starlette(routes=[Mount("/jobs", create_app(config))])
    with TestClient(host, base_url="http://localhost", follow_redirects=False) as client:
        moved = client.get("/jobs/dead")
    assert (moved.status_code, moved.headers["location"]) == (307, "/jobs/morgue")


@pytest.mark.parametrize("path", ["/stats", "/stats/queues", "/api/queues"])
def test_json_endpoints_answer_json_when_redis_is_down(path: str) -> None:
    from wurk.web import create_app

    down = wurk.Config(redis_url="redis://127.0.0.1:1/0", socket_timeout=0.5)
    down.redis_url = "redis://127.0.0.1:1/0"  # REDIS_URL from the harness would win
    with TestClient(create_app(down), base_url="http://localhost") as client:
        response = client.get(path)
    assert response.status_code == 503
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"error": "Redis cannot be reached right now (details in the "
                                        "server log)."}
    down.close()


def test_queue_listing_after_clear(client: TestClient, config: wurk.Config,
                                   r: redis.Redis) -> None:
    r.lpush("queue:gone", "x")
    r.sadd("queues", "gone")
    Queue("gone", config).clear()
    assert "gone" not in client.get("/queues").text
