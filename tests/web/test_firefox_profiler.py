"""The button "Open in Firefox Profiler" on a profile's page: the upload to the profiler's store and
the redirect to its view, against a real HTTP server standing in for the store (it records
each request and answers as profiler-server does: a JWT holding the profile token), its
failures shown as a sentence, the switch that turns it off, and a click in headless
Chromium that ends on the view URL (the page's CSP lets its form be redirected there)."""

from __future__ import annotations

import base64
import gzip
import html
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

import wurk
from tests.helpers.profiles import VERNIER, ruby_profile
from tests.web.conftest import XSS, browse, post
from tests.web.live import browser_context, serve
from wurk.errors import ConfigError
from wurk.web import create_app

ACCEPT = "application/vnd.firefox-profiler+json;version=1.0"
TOKEN = "0123456789abcdefghjkmnpqrstvwxyz0123456789abcdef"  # base32, as profiler-server's
BROWSER_TIMEOUT_MS = 20_000
HANG_LIMIT = 10.0  # how long a hanging store holds a request at most (released at teardown)


def jwt(payload: dict[str, Any]) -> bytes:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")
    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part(payload)}.c2lnbmF0dXJl".encode()


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Store:
    """The store service on a free loopback port; ``answer`` says how it replies."""

    server: ThreadingHTTPServer
    answer: str = "jwt"
    received: list[Received] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def store() -> Iterator[Store]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def reply(self, status: int, body: bytes, kind: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            running.received.append(Received("POST", self.path, dict(self.headers.items()),
                                              self.rfile.read(length)))
            if running.answer == "hang":
                running.release.wait(HANG_LIMIT)
                return
            if running.answer == "not-http":
                self.wfile.write(b"NOT HTTP AT ALL\r\n\r\n")
                self.close_connection = True
                return
            replies = {"jwt": (200, jwt({"profileToken": TOKEN})),
                       "bare": (200, TOKEN.encode() + b"\n"),
                       "500": (500, b"Internal Server Error"),
                       "html": (200, b"<html><body>" + XSS.encode() + b"</body></html>"),
                       "evil-token": (200, jwt({"profileToken": "x/../../evil?y=" + XSS}))}
            self.reply(*replies[running.answer])

        def do_GET(self) -> None:  # the view, for the browser
            running.received.append(Received("GET", self.path, dict(self.headers.items()), b""))
            self.reply(200, b"<html><body><h1>The profiler's view</h1></body></html>",
                       "text/html")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    running = Store(server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield running
    running.release.set()
    server.shutdown()
    server.server_close()
    thread.join(HANG_LIMIT)


def settings(redis_server: Any, store: Store, **more: Any) -> wurk.Config:
    return wurk.configure(redis_url=redis_server.url,
                          web_profiler_store_url=store.url + "/compressed-store",
                          web_profiler_view_url=store.url + "/public/{token}/calltree/",
                          **more)


@pytest.fixture
def raw(redis_server: Any) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


@pytest.fixture
def dash(redis_server: Any, store: Store) -> Iterator[TestClient]:
    with browse(create_app(settings(redis_server, store, web_profiler_timeout=0.3)),
                follow_redirects=False) as client:
        yield client


def speedscope() -> bytes:
    document = {"$schema": "https://www.speedscope.app/file-format-schema.json",
                "shared": {"frames": [{"name": "work"}]},
                "profiles": [{"type": "evented", "unit": "seconds", "startValue": 0,
                              "endValue": 1, "events": [{"type": "O", "at": 0, "frame": 0},
                                                        {"type": "C", "at": 1, "frame": 0}]}]}
    return gzip.compress(json.dumps(document).encode())


def test_a_click_uploads_the_ruby_profile_gzipped_and_redirects_to_the_view(
        dash: TestClient, store: Store, raw: redis.Redis) -> None:
    key = ruby_profile(raw, "mike", "1234")
    page = dash.get("/profiles/view", params={"key": key})
    assert page.status_code == 200 and "Open in Firefox Profiler" in page.text
    host = store.url.removeprefix("http://")
    assert f"Uploads this profile to <code>{host}</code>" in page.text
    assert f"form-action 'self' {store.url};" in page.headers["content-security-policy"]
    assert store.received == []  # nothing is sent before the click
    answer = post(dash, "/profiles/firefox", key=key)
    assert answer.status_code == 303
    assert answer.headers["location"] == f"{store.url}/public/{TOKEN}/calltree/"
    [sent] = store.received
    assert (sent.method, sent.path) == ("POST", "/compressed-store")
    assert sent.headers["Accept"] == ACCEPT
    assert sent.headers["User-Agent"].startswith("wurk/")
    assert json.loads(gzip.decompress(sent.body)) == json.loads(VERNIER.read_text())


def test_a_store_answering_a_bare_token_is_followed_too(
        dash: TestClient, store: Store, raw: redis.Redis) -> None:
    store.answer = "bare"
    key = ruby_profile(raw, "mike", "5678")
    answer = post(dash, "/profiles/firefox", key=key)
    assert answer.status_code == 303
    assert answer.headers["location"] == f"{store.url}/public/{TOKEN}/calltree/"


@pytest.mark.parametrize(("answer", "said"), [
    ("500", "answered HTTP 500"),
    ("hang", "did not answer within 0.3 s"),
    ("html", "answered something that is not a profile token"),
    ("not-http", "answered something that is not HTTP"),
    ("evil-token", "answered something that is not a profile token"),
])
def test_a_store_that_fails_is_a_sentence_on_the_profile_page(
        dash: TestClient, store: Store, raw: redis.Redis, answer: str, said: str) -> None:
    store.answer = answer
    key = ruby_profile(raw, "mike", "1234")
    page = post(dash, "/profiles/firefox", key=key)
    assert page.status_code == 502
    assert f"Not opened in the Firefox Profiler: the store at {store.url[7:]} {said}." \
        in page.text
    assert "HardJob#crunch" in page.text  # the profile's page, flame graph and all
    assert XSS not in page.text and "evil" not in page.text
    assert len(store.received) == 1


def test_a_store_that_cannot_be_reached_is_a_sentence(
        redis_server: Any, store: Store, raw: redis.Redis) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: the connection is refused
    config = wurk.configure(redis_url=redis_server.url,
                            web_profiler_store_url=f"http://127.0.0.1:{port}/store")
    key = ruby_profile(raw, "mike", "1234")
    with browse(create_app(config), follow_redirects=False) as client:
        page = post(client, "/profiles/firefox", key=key)
    assert page.status_code == 502
    assert (f"Not opened in the Firefox Profiler: the store at 127.0.0.1:{port} could not be "
            "reached (ConnectionRefusedError).") in page.text


@pytest.mark.parametrize(("data", "said"), [
    (speedscope(), "this profile is in speedscope's format (wurk's own profiles), which the "
                   "Firefox Profiler does not import"),
    (b"not gzip " + XSS.encode(), "the stored data is not gzip"),
    (gzip.compress(b"{}")[:-6], "the stored gzip is damaged"),
    (gzip.compress(b"{\"threads\": [1, 2"), "the stored profile is not JSON"),
    (gzip.compress(b"{\"threads\": []}"), "the stored profile is not in the Firefox "
                                          "Profiler's format (an object with meta and threads)"),
], ids=["speedscope", "not-gzip", "damaged-gzip", "not-json", "no-meta"])
def test_a_profile_the_profiler_cannot_import_says_why_and_sends_nothing(
        dash: TestClient, store: Store, raw: redis.Redis, data: bytes, said: str) -> None:
    key = ruby_profile(raw, "odd", "1", data=data)
    page = post(dash, "/profiles/firefox", key=key)
    assert page.status_code == 422
    assert f"Not opened in the Firefox Profiler: {said}" in html.unescape(page.text)
    assert XSS not in page.text
    assert store.received == []


def test_a_speedscope_profile_has_no_button_but_says_why(
        dash: TestClient, raw: redis.Redis) -> None:
    key = ruby_profile(raw, "wurk", "1", data=speedscope())
    page = dash.get("/profiles/view", params={"key": key})
    assert page.status_code == 200 and "Open in Firefox Profiler" not in page.text
    assert "The Firefox Profiler does not import speedscope's format" in html.unescape(
        page.text)


def test_an_unknown_key_is_404_and_a_post_without_the_csrf_token_403(
        dash: TestClient, store: Store, raw: redis.Redis) -> None:
    assert post(dash, "/profiles/firefox", key="none-1").status_code == 404
    assert post(dash, "/profiles/firefox").status_code == 404
    key = ruby_profile(raw, "mike", "1234")
    assert dash.post("/profiles/firefox", data={"key": key}).status_code == 403
    assert store.received == []


@pytest.mark.parametrize("switch", [{"web_profiler_upload": False}, {"read_only": True}])
def test_switched_off_or_read_only_there_is_no_button_and_no_upload(
        redis_server: Any, store: Store, raw: redis.Redis, switch: dict[str, Any]) -> None:
    read_only = switch.pop("read_only", None)
    app = create_app(settings(redis_server, store, **switch), read_only=read_only)
    key = ruby_profile(raw, "mike", "1234")
    with browse(app, follow_redirects=False) as client:
        page = client.get("/profiles/view", params={"key": key})
        assert page.status_code == 200 and "HardJob#crunch" in page.text
        assert "Firefox Profiler</th>" not in page.text
        assert "Open in Firefox Profiler" not in page.text
        assert "form-action 'self';" in page.headers["content-security-policy"]
        refused = post(client, "/profiles/firefox", key=key)
    assert refused.status_code == (403 if read_only else 404)
    assert store.received == []


@pytest.mark.parametrize(("setting", "value", "said"), [
    ("web_profiler_store_url", "ftp://store.example/x", "absolute http:// or https:// URL"),
    ("web_profiler_store_url", "store.example/compressed-store", "absolute http://"),
    ("web_profiler_store_url", "https://u:secret@store.example/", "user name or password"),
    ("web_profiler_store_url", 7, "web_profiler_store_url must be text"),
    ("web_profiler_view_url", "https://profiler.example/public/", "no {token} placeholder"),
    ("web_profiler_view_url", "https://{token}.example/", "not the host"),
    ("web_profiler_view_url", "https://a;b/{token}", "absolute http://"),
    ("web_profiler_timeout", 0, "web_profiler_timeout must be a number of seconds > 0"),
    ("web_profiler_upload", "yes", "web_profiler_upload must be true or false"),
])
def test_the_settings_are_checked_with_a_clear_error(
        setting: str, value: Any, said: str) -> None:
    with pytest.raises(ConfigError, match=said.replace("(", r"\(").replace(")", r"\)")
                       .replace("{", r"\{").replace("}", r"\}")) as refused:
        wurk.Config(**{setting: value})
    assert "secret" not in str(refused.value)


def test_the_defaults_are_the_public_instance() -> None:
    config = wurk.Config()
    assert config.web_profiler_upload is True
    assert config.web_profiler_store_url == "https://api.profiler.firefox.com/compressed-store"
    assert config.web_profiler_view_url == "https://profiler.firefox.com/public/{token}/"
    assert config.web_profiler_timeout == 30.0


def test_in_chromium_the_button_ends_on_the_profilers_view(
        redis_server: Any, store: Store, raw: redis.Redis) -> None:
    key = ruby_profile(raw, "mike", "1234")
    with serve(create_app(settings(redis_server, store))) as server, \
            browser_context() as browser:
        page = browser.new_page()
        page.set_default_timeout(BROWSER_TIMEOUT_MS)
        page.goto(f"{server.url}/profiles/view?key={key}")
        page.click("button:has-text('Open in Firefox Profiler')")
        page.wait_for_url(f"{store.url}/public/{TOKEN}/calltree/")
        assert page.inner_text("h1") == "The profiler's view"
    assert store.received[0].method == "POST"
    assert ("GET", f"/public/{TOKEN}/calltree/") in [
        (sent.method, sent.path) for sent in store.received]
    assert json.loads(gzip.decompress(store.received[0].body)) == json.loads(
        VERNIER.read_text())
