"""The guard: CSRF, same origin, read-only, the auth hook, basic auth, headers, errors."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest
import redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket, WebSocketDisconnect

import wurk
from tests.web.conftest import browse, seed_sets, token
from wurk.api import RetrySet
from wurk.web import Extension, create_app, dashboard
from wurk.web.extensions import Contained
from wurk.web.security import CSP

ACTION = {"action": "delete", "all": "1"}


@pytest.fixture
def one_retry(config: wurk.Config) -> wurk.Config:
    seed_sets(config, 1)
    return config


# -- CSRF and origin ----------------------------------------------------------------------------
def test_post_without_token_is_refused(client: TestClient, one_retry: wurk.Config) -> None:
    token(client)  # the cookie is there; the form lacks the token
    response = client.post("/retries", data=ACTION)
    assert response.status_code == 403 and "CSRF" in response.text
    assert RetrySet(one_retry).size() == 1


def test_post_with_a_wrong_token_or_no_cookie_is_refused(client: TestClient,
                                                         one_retry: wurk.Config) -> None:
    good = token(client)
    assert client.post("/retries", data={**ACTION, "csrf_token": good + "x"}).status_code == 403
    client.cookies.clear()
    assert client.post("/retries", data={**ACTION, "csrf_token": good}).status_code == 403
    assert RetrySet(one_retry).size() == 1


@pytest.mark.parametrize("path", ["/retries", "/busy", "/queues/default",
                                  "/queues/default/delete", "/api/retries", "/api/busy",
                                  "/morgue/1.0-x", "/api/queues/default"])
def test_every_post_route_needs_the_token(client: TestClient, one_retry: wurk.Config,
                                          path: str) -> None:
    token(client)
    response = client.post(path, json={"action": "delete", "all": True})
    assert response.status_code == 403
    assert RetrySet(one_retry).size() == 1


@pytest.mark.parametrize("send", [
    lambda client, good: client.post("/api/retries", json={**ACTION, "csrf_token": 5}),
    lambda client, good: client.post("/api/retries", json={**ACTION, "csrf_token": [good]}),
    lambda client, good: client.post("/api/retries",
                                     json={**ACTION, "csrf_token": {"t": good}}),
    lambda client, good: client.post(
        "/retries", content=f"action=delete&all=1&csrf_token={good}&csrf_token={good}",
        headers={"content-type": "application/x-www-form-urlencoded"}),
], ids=["number", "list", "object", "repeated-field"])
def test_a_token_that_is_not_one_string_is_refused_not_a_500(
        client: TestClient, one_retry: wurk.Config, send: Any) -> None:
    response = send(client, token(client))
    assert response.status_code == 403 and "CSRF" in response.text
    assert RetrySet(one_retry).size() == 1


@pytest.mark.parametrize("headers", [
    {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
    {"Origin": "http://evil.example"}, {"Origin": "null"},
])
def test_cross_origin_post_is_refused_even_with_the_token(client: TestClient,
                                                          one_retry: wurk.Config,
                                                          headers: dict[str, str]) -> None:
    response = client.post("/retries", data={**ACTION, "csrf_token": token(client)},
                           headers=headers)
    assert response.status_code == 403 and "own pages" in response.text
    assert RetrySet(one_retry).size() == 1


@pytest.mark.parametrize("headers", [{"Sec-Fetch-Site": "same-origin"},
                                     {"Origin": "http://localhost"}])
def test_same_origin_post_passes(client: TestClient, one_retry: wurk.Config,
                                 headers: dict[str, str]) -> None:
    response = client.post("/retries", data={**ACTION, "csrf_token": token(client)},
                           headers=headers)
    assert response.status_code == 303
    assert RetrySet(one_retry).size() == 0


def test_csrf_cookie_attributes(client: TestClient) -> None:
    cookie = client.get("/").headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert "set-cookie" not in client.get("/").headers  # once it is there, it stays


def test_oversized_body_is_refused(client: TestClient) -> None:
    response = client.post("/retries", content=b"x" * (2 << 20),
                           headers={"content-type": "application/x-www-form-urlencoded"})
    assert response.status_code == 413


def test_bad_json_body_is_refused(client: TestClient) -> None:
    response = client.post("/api/retries", content=b"[1,",
                           headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]


# -- read-only ----------------------------------------------------------------------------------
def test_read_only_refuses_actions_and_hides_buttons(one_retry: wurk.Config) -> None:
    with browse(create_app(one_retry, read_only=True), follow_redirects=False) as client:
        response = client.post("/retries", data={**ACTION, "csrf_token": token(client)})
        assert response.status_code == 403 and "read-only" in response.text
        page = client.get("/retries").text
        assert "<button name=\"action\"" not in page and "read-only" in page
        assert client.post("/api/retries", json=ACTION,
                           headers={"X-CSRF-Token": token(client)}).status_code == 403
    assert RetrySet(one_retry).size() == 1


def test_read_only_from_the_configuration(r: redis.Redis) -> None:
    config = wurk.configure(web_read_only=True)
    with browse(create_app(config)) as client:
        assert client.post("/queues/default", data={"action": "clear",
                                                    "csrf_token": token(client)}
                           ).status_code == 403


# -- the auth hook ------------------------------------------------------------------------------
def test_authorize_hook_decides_every_request(config: wurk.Config) -> None:
    seen: list[str] = []

    def authorize(request: Request) -> bool:
        seen.append(request.url.path)
        return request.headers.get("x-user") == "admin"

    with browse(create_app(config, authorize=authorize)) as client:
        for path in ["/", "/api/stats", "/static/wurk.css", "/stats/stream"]:
            response = client.get(path)
            assert response.status_code == 403, path
            assert "not allowed" in response.text
        assert client.get("/queues", headers={"x-user": "admin"}).status_code == 200
    assert "/static/wurk.css" in seen


def test_async_authorize_hook(config: wurk.Config) -> None:
    async def authorize(request: Request) -> bool:
        return request.query_params.get("key") == "s3cret"

    with browse(create_app(config, authorize=authorize)) as client:
        assert client.get("/queues").status_code == 403
        assert client.get("/queues?key=s3cret").status_code == 200


def test_authorize_hook_that_raises_fails_closed_without_detail(
        config: wurk.Config, caplog: pytest.LogCaptureFixture) -> None:
    def authorize(request: Request) -> bool:
        raise RuntimeError("ldap password hunter2 rejected")

    with browse(create_app(config, authorize=authorize)) as client:
        response = client.get("/")
    assert response.status_code == 500
    assert "hunter2" not in response.text and "Something went wrong" in response.text
    assert "hunter2" in caplog.text


def test_authorize_must_say_true(config: wurk.Config) -> None:
    def authorize(request: Request) -> Any:
        return "yes"  # truthy, but not True

    with browse(create_app(config, authorize=authorize)) as client:
        assert client.get("/").status_code == 403


# -- basic auth ---------------------------------------------------------------------------------
def basic(user: str, password: str) -> dict[str, str]:
    encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {encoded}"}


def test_basic_auth_from_the_configuration(r: redis.Redis) -> None:
    config = wurk.configure(web_username="ops", web_password="pässword")
    with browse(create_app(config)) as client:
        missing = client.get("/")
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"].startswith("Basic realm=")
        assert client.get("/", headers=basic("ops", "wrong")).status_code == 401
        assert client.get("/", headers=basic("root", "pässword")).status_code == 401
        assert client.get("/api/stats", headers={"Authorization": "Basic %%%"}
                          ).status_code == 401
        assert client.get("/", headers=basic("ops", "pässword")).status_code == 200


# -- headers and errors -------------------------------------------------------------------------
def test_security_headers_on_pages_errors_and_refusals(client: TestClient,
                                                       config: wurk.Config) -> None:
    for response in (client.get("/"), client.get("/nowhere"), client.post("/retries")):
        headers = response.headers
        assert headers["content-security-policy"] == CSP
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["x-frame-options"] == "DENY"
    assert "'unsafe-inline'" not in CSP and "script-src 'self'" in CSP


# -- host names (DNS rebinding) -----------------------------------------------------------------
def snapshot(r: redis.Redis) -> dict[str, Any]:
    """Every key and its value: what "changes nothing in Redis" compares."""
    return {key: r.dump(key) for key in sorted(r.keys("*"))}


def test_a_rebinding_page_is_refused_and_changes_nothing(one_retry: wurk.Config,
                                                         r: redis.Redis) -> None:
    app = create_app(one_retry)
    before = snapshot(r)
    with browse(app) as local:  # the operator's own tab: cookie and token are real
        good = token(local)
        cookies = dict(local.cookies)
    with TestClient(app, base_url="http://evil.example:7433", cookies=cookies) as rebound:
        assert rebound.get("/api/csrf").status_code == 400
        page = rebound.get("/")
        assert page.status_code == 400 and "web_allowed_hosts" in page.text
        assert "evil.example" not in page.text  # the refusal never repeats the Host
        for path, body in (("/api/retries", {"action": "delete", "all": True}),
                           ("/api/queues/default", {"action": "clear"}),
                           ("/api/busy", {"action": "stop"})):
            response = rebound.post(path, json=body, headers={
                "X-CSRF-Token": good, "Sec-Fetch-Site": "same-origin",
                "Origin": "http://evil.example:7433"})
            assert response.status_code == 400, path
        assert rebound.post("/morgue", data={"csrf_token": good, "action": "delete",
                                             "all": "1"},
                            headers={"Sec-Fetch-Site": "same-origin"}).status_code == 400
    assert snapshot(r) == before


@pytest.mark.parametrize(("host", "allowed", "status"), [
    ("localhost:7433", [], 200), ("127.0.0.1", [], 200), ("[::1]:7433", [], 200),
    ("LOCALHOST.", [], 200), ("jobs.example.com", [], 400),
    ("jobs.example.com", ["jobs.example.com"], 200), ("a.jobs.example.com", [".example.com"], 200),
    ("example.com", [".example.com"], 200), ("evilexample.com", [".example.com"], 400),
    ("anything.at.all:1", ["*"], 200), ("localhost.evil.example", [], 400),
])
def test_host_names_answered(config: wurk.Config, host: str, allowed: list[str],
                             status: int) -> None:
    with browse(create_app(config, allowed_hosts=allowed)) as client:
        assert client.get("/queues", headers={"Host": host}).status_code == status


def test_allowed_hosts_from_the_configuration(r: redis.Redis) -> None:
    config = wurk.configure(web_allowed_hosts=["jobs.example.com"])
    with TestClient(create_app(config), base_url="http://jobs.example.com") as client:
        assert client.get("/").status_code == 200
        assert client.get("/", headers={"Host": "other.example.com"}).status_code == 400


@pytest.mark.parametrize("bad", [["jobs.example.com:80"], ["http://x"], [""], ["a b"], "x",
                                 [3]])
def test_bad_allowed_hosts_are_refused_naming_the_setting(bad: Any) -> None:
    with pytest.raises(wurk.ConfigError, match="web_allowed_hosts"):
        wurk.Config(redis_url="redis://127.0.0.1:1/0", web_allowed_hosts=bad)


def test_a_redirect_never_names_the_hosts_it_was_asked_for(config: wurk.Config) -> None:
    from tests.web.test_extensions import extension

    app = create_app(config, extensions=[extension()], allowed_hosts=["*"])
    with TestClient(app, base_url="http://evil.example:7433", follow_redirects=False) as client:
        response = client.get("/limits")  # Starlette redirects to the trailing slash
        assert response.status_code in (301, 307, 308)
        assert response.headers["location"] == "/limits/"
        done = client.post("/retries", data={"csrf_token": token(client), "action": "delete",
                                             "all": "1"})
        assert done.headers["location"] == "/retries?notice=delete&count=0"


# -- bodies ---------------------------------------------------------------------------------------
def test_a_deeply_nested_json_body_is_400_before_the_token_check(
        client: TestClient, one_retry: wurk.Config) -> None:
    token(client)
    for depth in (101, 500_000):
        response = client.post("/api/retries", content=b"[" * depth + b"]" * depth,
                               headers={"content-type": "application/json"})
        assert response.status_code == 400 and "100 levels" in response.json()["error"]
    assert RetrySet(one_retry).size() == 1


# -- extensions' WebSockets -----------------------------------------------------------------------
async def echo(socket: WebSocket) -> None:
    await socket.accept()
    await socket.send_text(await socket.receive_text())
    await socket.close()


def socket_extension() -> Extension:
    return Extension(name="live", tab="Live", routes=[WebSocketRoute("/echo", echo)])


def refused(client: TestClient, host: str = "localhost", **headers: str) -> bool:
    try:
        with client.websocket_connect(f"ws://{host}/live/echo", headers=headers) as socket:
            socket.send_text("hi")
            return socket.receive_text() != "hi"
    except WebSocketDisconnect as closed:
        return closed.code == 1008


def test_extension_websockets_pass_the_guard(r: redis.Redis) -> None:
    config = wurk.configure(web_username="ops", web_password="pw")
    app = create_app(config, extensions=[socket_extension()])
    with browse(app) as client:
        assert refused(client)  # no credentials
        assert not refused(client, **basic("ops", "pw"))
        assert refused(client, **basic("ops", "pw"), Origin="http://evil.example")
        assert refused(client, "evil.example", **basic("ops", "pw"))
        assert not refused(client, **basic("ops", "pw"), Origin="http://localhost")
    with browse(create_app(config, extensions=[socket_extension()], read_only=True)) as client:
        assert refused(client, **basic("ops", "pw"))
    deny = create_app(wurk.configure(), extensions=[socket_extension()],
                      authorize=lambda connection: False)
    with browse(deny) as client:
        assert refused(client)


def test_a_websocket_whose_authorize_hook_fails_is_closed_and_reported(
        config: wurk.Config) -> None:
    reported: list[str] = []
    config.error_handlers.append(lambda exc, context, cfg: reported.append(str(exc)))

    def authorize(connection: Any) -> bool:
        raise RuntimeError("ldap down")

    app = create_app(config, extensions=[socket_extension()], authorize=authorize)
    with browse(app) as client, pytest.raises(WebSocketDisconnect) as closed, \
            client.websocket_connect("ws://localhost/live/echo"):
        pass
    assert closed.value.code == 1011 and reported == ["ldap down"]


# -- every state-changing route, enumerated from the app ---------------------------------------
SAFE = {"GET", "HEAD", "OPTIONS"}


async def extension_action(request: Request) -> Response:
    RetrySet(dashboard(request).config).clear()  # would change Redis if ever reached
    return PlainTextResponse("done")


def acting_routes(routes: list[BaseRoute], prefix: str = "") -> list[tuple[str, str]]:
    """``(method, path)`` of every route that is not read-only, Mounts followed down."""
    found: list[tuple[str, str]] = []
    for route in routes:
        if isinstance(route, Mount):
            inner = route.app.app if isinstance(route.app, Contained) else route.app
            found += acting_routes(list(getattr(inner, "routes", [])), prefix + route.path)
        elif isinstance(route, Route):
            path = prefix + route.path_format
            found += [(method, path) for method in sorted(set(route.methods or ()) - SAFE)]
    return found


def every_action_app(config: wurk.Config, **options: Any) -> Starlette:
    mine = Extension(name="mine", tab="Mine",
                     routes=[Route("/act", extension_action, methods=["POST", "DELETE"])])
    return create_app(config, extensions=[mine], **options)


def try_every_action(app: Starlette, r: redis.Redis, headers: dict[str, str],
                     with_token: bool = True, exempt: frozenset[str] = frozenset()) -> set[int]:
    """POST (or DELETE…) each acting route with a body that would act; the statuses seen."""
    listed = acting_routes(app.routes)
    assert len(listed) >= 20 and ("DELETE", "/mine/act") in listed, listed
    statuses: set[int] = set()
    before = snapshot(r)
    with browse(app, follow_redirects=False) as client:
        good = token(client) if client.get("/api/csrf").status_code == 200 else "x"
        for method, template in listed:
            if template in exempt:
                continue
            path = re.sub(r"\{[^}]+\}", "default", template)
            body = {"action": "delete", "all": "1", "key": "default", "keys": ["default"]}
            if with_token:
                body["csrf_token"] = good
            response = client.request(method, path, data=body, headers=headers)
            assert response.status_code == 403, (method, path, response.status_code)
            statuses.add(response.status_code)
    assert snapshot(r) == before
    return statuses


def test_every_acting_route_needs_the_token(one_retry: wurk.Config, r: redis.Redis) -> None:
    try_every_action(every_action_app(one_retry), r, {}, with_token=False)


def test_every_acting_route_refuses_a_cross_origin_request(one_retry: wurk.Config,
                                                          r: redis.Redis) -> None:
    try_every_action(every_action_app(one_retry), r, {"Sec-Fetch-Site": "cross-site"})


def test_every_acting_route_is_refused_in_read_only_mode(one_retry: wurk.Config,
                                                         r: redis.Redis) -> None:
    # The viewer's language is a preference, not an action: read-only mode allows it
    # (test_locales.py); every other POST is refused.
    try_every_action(every_action_app(one_retry, read_only=True), r, {},
                     exempt=frozenset({"/change_locale"}))


def test_every_acting_route_is_refused_when_the_hook_says_no(one_retry: wurk.Config,
                                                             r: redis.Redis) -> None:
    def readers_only(request: Request) -> bool:
        return request.method in SAFE

    try_every_action(every_action_app(one_retry, authorize=readers_only), r, {})
