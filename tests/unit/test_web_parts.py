"""The dashboard's pure parts: security checks, charts, filters, keys, settings."""

from __future__ import annotations

import base64

import pytest
from starlette.datastructures import Headers

import wurk
from wurk.errors import ConfigError
from wurk.web import charts, security, templating
from wurk.web.data import clamp_page, history_days, page_number, parse_queue_key


def encoded(text: str) -> str:
    return "Basic " + base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(("header", "expected"), [
    (encoded("ops:pw"), ("ops", "pw")), (encoded("ops:p:w"), ("ops", "p:w")),
    (encoded("nocolon"), None), ("Bearer abc", None), ("Basic !!!", None), (None, None),
    ("basic " + base64.b64encode(b"a:b").decode(), ("a", "b")),
])
def test_basic_credentials(header: str | None, expected: tuple[str, str] | None) -> None:
    assert security.basic_credentials(header) == expected


def test_credentials_and_tokens_match_exactly() -> None:
    assert security.credentials_match(("a", "b"), "a", "b")
    assert not security.credentials_match(("a", "c"), "a", "b")
    assert not security.credentials_match(None, "a", "b")
    assert security.token_matches("t1", "t1")
    assert not security.token_matches("t1", "t2") and not security.token_matches(None, "t1")
    assert not security.token_matches("", "")
    assert security.new_token() != security.new_token()


@pytest.mark.parametrize(("headers", "ok"), [
    ({}, True), ({"sec-fetch-site": "same-origin"}, True),
    ({"sec-fetch-site": "cross-site", "origin": "http://h"}, False),
    ({"origin": "http://h", "host": "h"}, True), ({"origin": "http://x", "host": "h"}, False),
    ({"origin": "null", "host": "h"}, False),
])
def test_same_origin(headers: dict[str, str], ok: bool) -> None:
    assert security.same_origin(Headers(headers)) is ok


def test_csrf_cookie_is_secure_over_https() -> None:
    assert security.csrf_cookie("t", path="/p", secure=True).endswith(b"; Secure")
    assert b"Secure" not in security.csrf_cookie("t", path="", secure=False)


def test_line_chart_scales_to_a_round_top() -> None:
    chart = charts.line_chart(["a", "b", "c"], [("processed", "P", [0, 50, 130])])
    assert chart.grid[-1][1] == "200"
    points = [tuple(map(float, p.split(","))) for p in chart.series[0][2].split()]
    assert points[0][1] == charts.HEIGHT - charts.PAD and points[0][0] == charts.PAD
    assert charts.nice_ceiling(0) == 1 and charts.nice_ceiling(7) == 10
    assert charts.line_chart([], [("p", "P", [])]).series == [("p", "P", "")]


def test_filters() -> None:
    # Babel's CLDR text, English unless a locale is given (the page's, as a filter)
    assert templating.ago(100.0, now=145.0) == "45 seconds ago"
    assert templating.ago(200.0, now=100.0) == "in 2 minutes"
    assert templating.ago(100.0, now=145.0, locale="de") == "vor 45 Sekunden"
    assert templating.ago(None) == "—" and templating.ago(5.0, now=5.2) == "just now"
    assert templating.duration(1.234) == "1.23 sec" and templating.duration(7200) == "2 hr"
    assert templating.duration(1e300) == "1e+300"  # past a timedelta's range: no error
    assert templating.utc(0) == "1970-01-01 00:00:00 UTC"
    assert templating.number(1234567) == "1,234,567"
    assert templating.number(1234567, locale="de") == "1.234.567"
    assert templating.kilobytes(2048) == "2.0 MB" and templating.kilobytes(0) == "—"
    assert templating.short_json(["x" * 500]).endswith("…")
    assert templating.segment("a/b c") == "a%2Fb%20c"
    assert templating.url("/p", "/q", page=2, substr="") == "/p/q?page=2"


def test_paging_input_is_forgiving() -> None:
    assert page_number("3") == 3 and page_number("x") == 1 and page_number("-4") == 1
    assert clamp_page(9, 30) == 2 and clamp_page(1, 0) == 1
    assert history_days("500") == 180 and history_days("0") == 1 and history_days("x") == 30
    assert parse_queue_key("12-abc") == (12, "abc", None) and parse_queue_key("abc") is None
    sha = "a" * 40
    assert parse_queue_key(f"3-{sha}-acct-7") == (3, sha, "acct-7")
    assert parse_queue_key(f"3-{sha}x") is None and parse_queue_key(f"3-{sha}-") is None
    assert parse_queue_key("-1-abc") is None and parse_queue_key("²-abc") is None


def test_routed_view_shares_all_but_the_routed_pool() -> None:
    config = wurk.Config(redis_url="redis://127.0.0.1:1/0")
    view = config.routed("api", "web", size=3)
    assert view.pool("api") is config.pool("web") and view.pool("api").size == 3
    assert view.pool("client") is config.pool("client")
    assert config.pool("api") is not view.pool("api")
    assert view.keys is config.keys and view.error_handlers is config.error_handlers
    config.close()


@pytest.mark.parametrize(("settings", "message"), [
    ({"web_username": "ops"}, "go together"), ({"web_password": "pw"}, "go together"),
    ({"web_stream_interval": 0}, "web_stream_interval"),
    ({"web_pool_size": 0}, "web_pool_size"),
])
def test_web_settings_are_checked(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        wurk.Config(**settings)  # type: ignore[arg-type]
