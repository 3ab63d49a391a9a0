"""Debian's headless Chromium drives the dashboard while a real worker runs jobs.

Skipped only where no Chromium exists and ``CI`` is unset; in CI a missing browser fails.
Screenshots land in ``test-output/screenshots/``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis

import wurk
from tests.system import worker_jobs
from tests.system.conftest import Worker, wait_for
from tests.web.live import SCREENSHOTS, browser_context, serve
from wurk.api import RetrySet
from wurk.web import create_app

BROWSER_TIMEOUT_MS = 20_000
PHONE = {"width": 390, "height": 844}


def shoot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def test_live_dashboard_and_retry_from_the_job_page(
        r: redis.Redis, start_worker: Callable[..., Worker]) -> None:
    config = wurk.configure(web_stream_interval=0.25)
    jid = "b0" * 12
    payload = {"class": "Sys::Incr", "args": ["web:retried"], "queue": "default", "jid": jid,
               "retry": True, "retry_count": 0, "error_class": "RuntimeError",
               "error_message": "first try failed", "failed_at": time.time(),
               "created_at": time.time(), "enqueued_at": time.time()}
    RetrySet(config).schedule(time.time() + 3600, payload)  # not due: only the button moves it
    start_worker()
    with serve(create_app(config)) as server, \
            browser_context(viewport={"width": 1280, "height": 900}) as browser:
        page = browser.new_page()
        page.set_default_timeout(BROWSER_TIMEOUT_MS)
        page.goto(server.url + "/")
        page.wait_for_selector("#live-state.on")
        before = page.text_content("[data-stat=processed]")
        worker_jobs.incr.perform_bulk([["web:count"] for _ in range(20)])
        page.wait_for_function(
            "v => document.querySelector('[data-stat=processed]').textContent !== v",
            arg=before, timeout=BROWSER_TIMEOUT_MS)
        assert page.text_content("[data-stat=processed]") != before
        wait_for(lambda: r.get("web:count") == "20", message="the jobs ran")
        page.wait_for_function("() => document.querySelector('#live-processed')"
                               ".getAttribute('points') !== ''")
        shoot(page, "dashboard")
        shoot_variants(page, server.url)

        page.click("nav >> text=Retries")
        page.click(f"td:has-text('{jid}') >> a")
        assert "first try failed" in page.text_content("main")
        shoot(page, "job")
        page.click("button:has-text('Retry now')")
        page.wait_for_url("**/retries?notice=retry&count=1")
        assert "1 queued to run now." in page.text_content(".notice")
        assert jid not in page.content()
        wait_for(lambda: r.get("web:retried") == "1", message="the retried job ran")
        assert RetrySet(config).size() == 0


def shoot_variants(page: Any, url: str) -> None:
    """The same dashboard dark, and on a phone: for a person to look at."""
    page.emulate_media(color_scheme="dark")
    shoot(page, "dashboard-dark")
    page.emulate_media(color_scheme="light")
    page.set_viewport_size(PHONE)
    page.goto(url + "/")
    page.wait_for_selector("#live-state.on")
    shoot(page, "dashboard-phone")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(url + "/")


def test_a_workers_jobs_on_the_metrics_pages(
        r: redis.Redis, start_worker: Callable[..., Worker]) -> None:
    config = wurk.configure()
    start_worker("-c", "4")
    worker_jobs.incr.perform_bulk([["web:metrics"] for _ in range(25)])
    for n in range(2):
        worker_jobs.Failing.set(retry=False).perform_async(f"web:fail:{n}")
    wait_for(lambda: r.get("web:metrics") == "25" and r.get("web:fail:1") == "1",
             message="the jobs ran")
    with serve(create_app(config)) as server, \
            browser_context(viewport={"width": 1280, "height": 900}) as browser:
        page = browser.new_page()
        page.set_default_timeout(BROWSER_TIMEOUT_MS)
        page.goto(server.url + "/")
        page.click("nav >> text=Metrics")
        row = "tr[data-job='Sys::Incr'] [data-metric=processed]"
        for _ in range(40):  # the worker writes its counts with its next heartbeat
            if page.query_selector(row) and page.text_content(row) == "25":
                break
            time.sleep(0.25)
            page.reload()
        assert page.text_content(row) == "25"
        assert page.text_content("tr[data-job='Sys::Fail'] [data-metric=failed]") == "2"
        shoot(page, "metrics")
        page.click("a >> text=Sys::Incr")
        page.wait_for_selector("rect.bar")
        counts = page.eval_on_selector_all("rect.bar", "bars => bars.map(b => +b.dataset.count)")
        assert len(counts) == 26 and sum(counts) == 25
        assert page.text_content(".stat [data-metric=failed]") == "0"
        shoot(page, "metrics-job")


def test_a_page_rebinding_its_name_to_the_dashboard_gets_nothing(config: wurk.Config) -> None:
    """DNS rebinding as a browser lives it: the attacker's name resolves to 127.0.0.1, so
    the browser calls the dashboard same-origin; only the Host header tells."""
    RetrySet(config).schedule(time.time() + 3600, {"class": "Keep", "args": [], "jid": "k" * 24})
    rebind = ("--host-resolver-rules=MAP evil.example 127.0.0.1",)
    with serve(create_app(config)) as server, browser_context(extra_args=rebind) as browser:
        page = browser.new_page()
        page.set_default_timeout(BROWSER_TIMEOUT_MS)
        evil = f"http://evil.example:{server.port}"
        response = page.goto(evil + "/")
        assert response is not None and response.status == 400
        assert "does not answer to that host name" in page.text_content("main")
        answers = page.evaluate("""async () => {
            const token = await fetch('/api/csrf');
            const act = await fetch('/api/retries', {method: 'POST',
                headers: {'Content-Type': 'application/json', 'X-CSRF-Token': 'guess'},
                body: JSON.stringify({action: 'delete', all: true})});
            return [token.status, act.status];
        }""")
        assert answers == [400, 400]
        shoot(page, "rebinding-refused")
        own = page.goto(server.url.replace("127.0.0.1", "localhost") + "/retries")
        assert own is not None and own.status == 200  # the operator's own tab still works
    assert RetrySet(config).size() == 1
