"""The Profiles tab: the list, a profile's page with its flame graph drawn on the server, and
the download — for wurk's profiles and Ruby Sidekiq 8's; and in headless Chromium, a job
profiled by a real worker opened from the tab, its function named in the flame graph's SVG
and the picture of it checked to be one."""

from __future__ import annotations

import gzip
import json
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis
from starlette.testclient import TestClient

import wurk
from tests.helpers.profiles import VERNIER, ruby_profile
from tests.helpers.runner import Drain
from tests.helpers.wait import wait_until
from tests.web.conftest import XSS
from tests.web.live import browser_context, serve
from wurk.web import create_app

BROWSER_TIMEOUT_MS = 20_000


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


@wurk.job(name="Web::Profiled")
def compute_the_quarterly_report(rounds: int) -> None:
    for _ in range(rounds):
        fib(17)


@pytest.fixture
def raw(redis_server: Any) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


def profiled(config: wurk.Config, token: str = "web") -> str:
    jid = compute_the_quarterly_report.set(profile=token).perform_async(40)
    Drain(config)()
    return f"{token}-{jid}"


def test_the_list_shows_each_profile_and_prunes_the_expired(
        config: wurk.Config, client: TestClient, raw: redis.Redis) -> None:
    mine = profiled(config)
    ruby = ruby_profile(raw, "mike", "beef" * 6)
    ruby_profile(raw, "old", "dead" * 6, now=time.time() - 90_000)
    page = client.get("/profiles/")
    assert page.status_code == 200
    text = page.text
    for shown in ("Web::Profiled", mine.split("-", 1)[1], "HardJob", "beef" * 6, "mike"):
        assert shown in text
    assert "dead" * 6 not in text and raw.zcard("profiles") == 2  # pruned, as Sidekiq does
    assert f'href="/profiles/view?key={quote(mine)}"' in text
    assert f'href="/profiles/data?key={quote(ruby)}"' in text
    assert '<a href="/profiles">Profiles</a>' in client.get("/").text  # the tab in the nav


def test_a_wurk_profile_page_draws_the_flame_graph_and_downloads_speedscope(
        config: wurk.Config, client: TestClient) -> None:
    key = profiled(config)
    page = client.get("/profiles/view", params={"key": key})
    assert page.status_code == 200
    assert "<svg" in page.text and "compute_the_quarterly_report" in page.text
    assert "speedscope" in page.text
    figure = page.text[page.text.index('<figure class="flame">'):]
    figure = figure[:figure.index("</figure>")]
    assert "<svg" in figure  # drawn on the server: no script in it, nothing from elsewhere
    assert not any(part in figure.lower() for part in ("<script", "href=", "src=", "http"))
    data = client.get("/profiles/data", params={"key": key})
    assert data.status_code == 200
    assert data.headers["content-encoding"] == "gzip"
    assert data.headers["content-type"] == "application/json"
    disposition = data.headers["content-disposition"]
    assert disposition.startswith('attachment; filename="web-Web_Profiled-')
    assert disposition.endswith('.speedscope.json"')
    document = data.json()  # the client inflated it, as a browser does
    assert document["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    assert "compute_the_quarterly_report" in {f["name"] for f in document["shared"]["frames"]}


def test_a_ruby_vernier_profile_is_drawn_and_downloads_as_stored(
        config: wurk.Config, client: TestClient, raw: redis.Redis) -> None:
    key = ruby_profile(raw, "mike", "1234")
    page = client.get("/profiles/view", params={"key": key})
    assert page.status_code == 200
    assert "HardJob#crunch" in page.text and "Firefox Profiler" in page.text
    data = client.get("/profiles/data", params={"key": key})
    assert data.headers["content-encoding"] == "gzip"
    assert data.json() == json.loads(VERNIER.read_text())


def test_what_cannot_be_drawn_or_inflated_says_so_and_still_downloads(
        config: wurk.Config, client: TestClient, raw: redis.Redis) -> None:
    key = ruby_profile(raw, "bad", "1", data=b"not gzip " + XSS.encode())
    page = client.get("/profiles/view", params={"key": key})
    assert page.status_code == 200 and "No flame graph: the stored data is not gzip" in page.text
    data = client.get("/profiles/data", params={"key": key})
    assert data.status_code == 200 and "content-encoding" not in data.headers
    assert data.headers["content-type"] == "application/octet-stream"
    assert data.content == b"not gzip " + XSS.encode()
    damaged = ruby_profile(raw, "bad", "2", data=gzip.compress(b"{}")[:-6])
    assert "content-encoding" not in client.get("/profiles/data",
                                                params={"key": damaged}).headers


def test_hostile_fields_are_escaped_and_unknown_keys_are_404(
        config: wurk.Config, client: TestClient, raw: redis.Redis) -> None:
    document = {"shared": {"frames": [{"name": XSS, "file": XSS}]},
                "profiles": [{"type": "evented", "unit": "seconds", "events": [
                    {"type": "O", "at": 0, "frame": 0}, {"type": "C", "at": 1, "frame": 0}]}]}
    key = ruby_profile(raw, f"{XSS}/x?y", "1", job=XSS,
                       data=gzip.compress(json.dumps(document).encode()))
    raw.hset(key, "filename", f'../../{XSS}"; rm -rf')
    for path in ("/profiles/", f"/profiles/view?key={quote(key, safe='')}"):
        page = client.get(path)
        assert page.status_code == 200 and XSS not in page.text and "&lt;script&gt;" in page.text
    disposition = client.get("/profiles/data", params={"key": key}).headers[
        "content-disposition"]
    assert disposition == 'attachment; filename="script_rm_-rf.json"'
    for path in ("/profiles/view", "/profiles/data", "/profiles/view?key=none-1"):
        assert client.get(path).status_code == 404
    assert client.get("/profiles/?page=10000000000000000000").status_code == 200


def test_profiles_whose_stacks_are_deep_are_drawn_in_seconds_and_say_they_are_cut(
        config: wurk.Config, client: TestClient, raw: redis.Redis) -> None:
    # Well under the 8 MB drawn at most, stacks deeper than the 256 frames read, again and
    # again: speedscope events that open a frame and never close it (each event once copied
    # the whole stack, then walked 256 frames), and Firefox samples of a stack 300 deep
    # (each walked 256 frames); an event or a sample now costs the same at any depth.
    opens = [{"type": "O", "at": at, "frame": 0} for at in range(60_000)]
    speedscope = {"shared": {"frames": [{"name": "deeper"}]},
                  "profiles": [{"type": "evented", "unit": "seconds", "events": opens}]}
    firefox = {"threads": [{"samples": {"stack": [299] * 400_000},
                            "stackTable": {"frame": [0] * 300,
                                           "prefix": [None, *range(299)]},
                            "frameTable": {"func": [0]}, "funcTable": {"name": [0]},
                            "stringArray": ["deeper"]}]}
    for n, document in enumerate((speedscope, firefox)):
        key = ruby_profile(raw, "deep", str(n),
                           data=gzip.compress(json.dumps(document).encode()))
        started = time.monotonic()
        page = client.get("/profiles/view", params={"key": key})
        assert page.status_code == 200 and "deeper" in page.text
        assert "larger than is read for drawing" in page.text
        assert time.monotonic() - started < 10.0, document.keys()  # ~0.3 s; a minute unbounded


# -- in a browser ---------------------------------------------------------------------------------
def png_colours(png: bytes) -> int:
    """How many distinct colours an 8-bit RGB(A) PNG holds (Chromium's screenshots are)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width = height = depth = kind = 0
    chunks, at = [], 8
    while at < len(png):
        length, tag = struct.unpack(">I4s", png[at:at + 8])
        body = png[at + 8:at + 8 + length]
        if tag == b"IHDR":
            width, height, depth, kind = struct.unpack(">IIBB", body[:10])
        elif tag == b"IDAT":
            chunks.append(body)
        at += 12 + length
    assert depth == 8 and kind in (2, 6)
    step = 3 if kind == 2 else 4
    raw, stride = zlib.decompress(b"".join(chunks)), width * step
    previous, colours = bytearray(stride), set()
    for row in range(height):
        start = row * (stride + 1)
        kind_of_filter, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            left = line[i - step] if i >= step else 0
            up, corner = previous[i], previous[i - step] if i >= step else 0
            if kind_of_filter == 1:
                line[i] = (line[i] + left) & 255
            elif kind_of_filter == 2:
                line[i] = (line[i] + up) & 255
            elif kind_of_filter == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind_of_filter == 4:
                guess = left + up - corner
                near = min((abs(guess - left), 0, left), (abs(guess - up), 1, up),
                           (abs(guess - corner), 2, corner))[2]
                line[i] = (line[i] + near) & 255
        colours.update(bytes(line[i:i + 3]) for i in range(0, stride, step))
        previous = line
    return len(colours)


def test_in_chromium_the_tab_opens_a_profiled_jobs_flame_graph(
        redis_server: Any, raw: redis.Redis, tmp_path: Path) -> None:
    config = wurk.configure(redis_url=redis_server.url, concurrency=2, fetch_timeout=0.2)
    worker = wurk.InProcessWorker(config).start()
    try:
        jid = compute_the_quarterly_report.set(profile="browser").perform_async(60)
        wait_until(lambda: raw.exists(f"browser-{jid}"), what="the profile")
    finally:
        worker.stop()
    with serve(create_app(wurk.configure(redis_url=redis_server.url))) as server, \
            browser_context(viewport={"width": 1280, "height": 900}) as browser:
        page = browser.new_page()
        page.set_default_timeout(BROWSER_TIMEOUT_MS)
        page.goto(server.url + "/")
        page.click("nav >> text=Profiles")
        page.wait_for_url("**/profiles/")
        requested: list[str] = []
        page.on("request", lambda request: requested.append(request.url))
        page.click(f"tr:has-text('{jid}') >> a:has-text('Web::Profiled')")
        page.wait_for_selector("figure.flame svg")
        page.wait_for_load_state("networkidle")
        assert requested and all(url.startswith(server.url) for url in requested)
        svg = page.inner_html("figure.flame")
        assert "compute_the_quarterly_report" in svg
        names = page.eval_on_selector_all("figure.flame svg title",
                                          "nodes => nodes.map(n => n.textContent)")
        assert any(name.startswith("compute_the_quarterly_report") for name in names)
        whole, flame = tmp_path / "profile-page.png", tmp_path / "flame-graph.png"
        page.screenshot(path=str(whole), full_page=True)
        page.locator("figure.flame").screenshot(path=str(flame))
    for picture in (whole, flame):
        assert picture.stat().st_size > 5_000
    assert png_colours(flame.read_bytes()) >= 4  # background, root and warm frames, text
