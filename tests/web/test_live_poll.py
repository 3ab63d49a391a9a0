"""The Live Poll toggle: the list pages' content re-fetched and swapped in place.

The setting and its data attribute are checked through Starlette's TestClient; what the
script does with them, in Debian's headless Chromium (skipped as ``test_browser.py``'s
tests are: only where no Chromium exists and ``CI`` is unset).
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from starlette.testclient import TestClient

import wurk
from tests.web.conftest import browse, failed, seed_sets
from tests.web.live import browser_context, serve
from wurk.api import RetrySet
from wurk.errors import ConfigError
from wurk.web import create_app

BROWSER_TIMEOUT_MS = 20_000
# Short, so "nothing changed for three intervals" costs about a second.
POLL = 0.3
TOGGLE = "#live-poll-toggle"
POLLED_PAGES = ("/busy", "/queues", "/queues/default", "/retries", "/scheduled", "/morgue")
INTERVAL = re.compile(r'data-poll-interval="([^"]*)"')


# -- the setting ------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [0, -1, 0.0, "5", None, True, float("nan"), float("inf"),
                                   10**400])
def test_a_poll_interval_that_is_no_positive_number_is_refused(value: Any) -> None:
    with pytest.raises(ConfigError, match="web_poll_interval must be a number of seconds"):
        wurk.Config.from_mapping({"web_poll_interval": value})
    with pytest.raises(ConfigError, match="web_poll_interval"):
        wurk.Config(web_poll_interval=value)


def test_the_poll_interval_defaults_to_five_seconds() -> None:
    assert wurk.Config().web_poll_interval == 5.0


def intervals(client: TestClient, path: str) -> tuple[int, list[str]]:
    answer = client.get(path)
    return answer.status_code, INTERVAL.findall(answer.text)


def test_the_list_pages_carry_the_toggle_and_the_interval(config: wurk.Config) -> None:
    seed_sets(config)
    wurk.Client(config=config).push({"class": "Poll", "args": [], "queue": "default"})
    with browse(create_app(config)) as client:
        for path in POLLED_PAGES:
            assert intervals(client, path) == (200, ["5.0"]), path
            assert 'id="live-poll-toggle"' in client.get(path).text
        # Pages that do not poll: the dashboard (its numbers are live already), a job's.
        key = client.get("/api/retries").json()["entries"][0]["key"]
        for path in ("/", f"/retries/{key}", "/metrics", "/api"):
            assert "live-poll" not in client.get(path).text, path
    tuned = wurk.Config(redis_url=config.redis_url, web_poll_interval=POLL)
    with browse(create_app(tuned)) as client:
        assert intervals(client, "/queues") == (200, [str(POLL)])
    tuned.close()


@pytest.mark.parametrize("query", ["?page=abc&substr=%ff%00", "?page=-1&direction=sideways",
                                   "?page=99999999999999999999", "?count=%00&only=x",
                                   "?page=&page=2&notice=%3Cb%3E&count=1e9"])
def test_a_bad_query_on_a_polled_page_answers_as_the_page_does(config: wurk.Config,
                                                                query: str) -> None:
    """The script polls the page's own URL, query and all: whatever it holds, the answer
    is the page's (never a 500), with the toggle on it."""
    seed_sets(config)
    wurk.Client(config=config).push({"class": "Poll", "args": [], "queue": "default"})
    with browse(create_app(config)) as client:
        for path in POLLED_PAGES:
            assert intervals(client, path + query) == (200, ["5.0"]), path + query


# -- in the browser ---------------------------------------------------------------------------
def row_size(queue: str) -> str:
    return (f"() => {{ const row = [...document.querySelectorAll('#content tbody tr')]"
            f".find(tr => tr.querySelector('a') && tr.querySelector('a').textContent === "
            f"{queue!r}); return row ? row.querySelector('td.num').textContent : null; }}")


def shown(page: Any, path: str) -> None:
    """Wait for ``path`` to be the page shown and its script to have set the button up
    (the server renders it hidden, saying "Start")."""
    page.wait_for_url(f"**{path}")
    page.wait_for_selector("#live-poll:not([hidden])")


def test_live_poll_swaps_the_tables_in_place_and_is_remembered() -> None:
    config = wurk.configure(web_poll_interval=POLL)
    client = wurk.Client(config=config)
    client.push({"class": "Poll", "args": [], "queue": "first"})
    with serve(create_app(config)) as server, \
            browser_context(viewport={"width": 1280, "height": 900}) as browser:
        page = browser.new_page()
        page.set_default_timeout(BROWSER_TIMEOUT_MS)
        page.goto(server.url + "/queues")
        shown(page, "/queues")
        assert page.text_content(TOGGLE) == "Live Poll: Start"  # off until chosen
        page.click(TOGGLE)
        assert page.text_content(TOGGLE) == "Live Poll: Stop"
        page.evaluate("() => { window.wurkLoadedOnce = 'still here'; }")
        client.push({"class": "Poll", "args": [], "queue": "polled"})
        client.push({"class": "Poll", "args": [], "queue": "polled"})
        page.wait_for_function(f"() => ({row_size('polled')})() === '2'")
        # The same document: a full reload would have dropped the variable.
        assert page.evaluate("() => window.wurkLoadedOnce") == "still here"
        assert page.text_content(TOGGLE) == "Live Poll: Stop"

        # Another page: still on, and its table refreshes too — but not under a ticked row.
        RetrySet(config).schedule(time.time() + 3600, failed(1))
        page.click("nav >> text=Retries")
        shown(page, "/retries")
        assert page.text_content(TOGGLE) == "Live Poll: Stop"
        page.evaluate("() => { window.wurkLoadedOnce = 'retries'; }")
        page.check("#content input[name=key]")
        RetrySet(config).schedule(time.time() + 3600, failed(2))
        page.wait_for_timeout(3 * POLL * 1000)
        assert page.locator("#content input[name=key]").count() == 1  # the tick kept
        page.uncheck("#content input[name=key]")
        page.wait_for_function("() => document.querySelectorAll("
                               "'#content input[name=key]').length === 2")
        assert page.evaluate("() => window.wurkLoadedOnce") == "retries"
        # The swapped-in rows still drive the bulk buttons.
        assert page.is_disabled("#content button[value=retry]")
        page.check("#content input[name=key] >> nth=0")
        assert page.is_enabled("#content button[value=retry]")
        page.uncheck("#content input[name=key] >> nth=0")

        # Off: nothing is fetched, nothing changes.
        page.goto(server.url + "/queues")
        shown(page, "/queues")
        assert page.text_content(TOGGLE) == "Live Poll: Stop"
        page.click(TOGGLE)
        assert page.text_content(TOGGLE) == "Live Poll: Start"
        page.evaluate("() => { window.wurkLoadedOnce = 'off'; }")
        page.wait_for_timeout(POLL * 1000)  # an answer already on its way arrives and is dropped
        fetched: list[str] = []
        page.on("request", lambda request: fetched.append(request.url))
        client.push({"class": "Poll", "args": [], "queue": "unseen"})
        page.wait_for_timeout(3 * POLL * 1000)
        assert page.evaluate(row_size("unseen")) is None
        assert page.evaluate(row_size("polled")) == "2"
        assert fetched == []
        assert page.evaluate("() => window.wurkLoadedOnce") == "off"
        page.click("nav >> text=Busy")
        shown(page, "/busy")
        assert page.text_content(TOGGLE) == "Live Poll: Start"  # off is remembered too


def test_live_poll_stops_at_a_failed_fetch_and_says_so() -> None:
    """The viewer's access withdrawn (403 from then on): the poll stops at the first failed
    answer, says why, and asks no more instead of asking again every interval."""
    config = wurk.configure(web_poll_interval=POLL)
    wurk.Client(config=config).push({"class": "Poll", "args": [], "queue": "brief"})
    allowed = [True]
    with serve(create_app(config, authorize=lambda request: allowed[0])) as server, \
            browser_context() as browser:
        page = browser.new_page()
        page.set_default_timeout(BROWSER_TIMEOUT_MS)
        page.goto(server.url + "/queues/brief")
        shown(page, "/queues/brief")
        page.click(TOGGLE)
        assert page.text_content(TOGGLE) == "Live Poll: Stop"
        fetched: list[str] = []
        page.on("request", lambda request: fetched.append(request.url))
        allowed[0] = False
        page.wait_for_function("() => document.getElementById('live-poll-state')"
                               ".textContent !== ''")
        assert page.text_content("#live-poll-state") == ("Live Poll stopped: the page "
                                                         "answered 403; reload it.")
        assert page.text_content(TOGGLE) == "Live Poll: Start"
        seen = len(fetched)
        page.wait_for_timeout(3 * POLL * 1000)
        assert len(fetched) == seen  # no more asking
        assert "Poll" in page.text_content("#content")  # the page as it was, not the error
        # The choice itself stays: the next page opened polls again.
        assert page.evaluate("() => localStorage.getItem('wurk-live-poll')") == "on"
