"""The Periodic tab and its JSON twins: loops as the leader wrote them, hostile ones too;
pause, unpause and enqueue now through the guard; read-only respected; a real browser."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

import wurk
from tests.system.conftest import Worker
from tests.web.conftest import XSS, browse, post, seed_process, token
from tests.web.live import browser_context, serve
from wurk.web import create_app

GOOD = "aaaaaaaaaaaaaaaa"
HOSTILE = "bbbbbbbbbbbbbbbb"
WRONG_TYPE = "cccccccccccccccc"


def seed_loops(r: redis.Redis) -> None:
    """What a leader writes (one loop with history), and what an attacker might."""
    now = int(time.time())
    r.sadd("periodic", GOOD, HOSTILE, WRONG_TYPE, XSS)
    r.hset(f"loops:{GOOD}", mapping={
        "schedule": "30 2 * * *", "klass": "Per::Web", "tz": "Europe/Berlin", "paused": "0",
        "options": json.dumps({"args": [1, "two"], "queue": "low"}),
        "lf": now - 3600, "nf": now + 3600})
    r.lpush(f"loop-history:{GOOD}", json.dumps([now - 3600, "a" * 24]), "not json",
            json.dumps(["soon", 5]))
    r.hset(f"loops:{HOSTILE}", mapping={
        "schedule": XSS, "klass": XSS, "tz": "../../etc/passwd", "options": "{not json",
        "paused": "maybe", "lf": "yesterday", "nf": "1e999"})
    r.set(f"loops:{WRONG_TYPE}", "a string")
    r.hset(f"loops:{XSS}", mapping={"schedule": "* * * * * * * *", "klass": "X",
                                    "nf": "99999999999999999999"})


@pytest.fixture
def seeded(r: redis.Redis) -> redis.Redis:
    seed_loops(r)
    return r


def test_the_tab_lists_every_loop_and_survives_hostile_ones(client: TestClient,
                                                           seeded: redis.Redis) -> None:
    page = client.get("/periodic/")
    assert page.status_code == 200
    text = page.text
    assert 'href="/periodic" aria-current="page">Periodic</a>' in text
    assert "30 2 * * *" in text and "Per::Web" in text and "Europe/Berlin" in text
    assert "&lt;script&gt;" in text and "<script>alert" not in text
    assert "options are not a JSON object" in text and "the next run is not a time" in text
    assert "not a hash" in text and "cannot be read" in text
    one = client.get(f"/periodic/{GOOD}")
    assert one.status_code == 200 and "a" * 24 in one.text and "&#34;queue&#34;" in one.text
    assert client.get(f"/periodic/{HOSTILE}").status_code == 200
    assert client.get("/periodic/nope").status_code == 404


def test_the_next_run_is_shown_in_the_loops_zone(client: TestClient,
                                                 seeded: redis.Redis) -> None:
    loop = client.get(f"/api/periodic/loops/{GOOD}").json()
    offset = loop["next_run_local"][-6:]
    assert offset in ("+01:00", "+02:00") and loop["queue"] == "low"
    assert loop["history"] == [{"fired_at": loop["last_run"], "jid": "a" * 24}]


def test_pause_unpause_and_enqueue_now(client: TestClient, seeded: redis.Redis) -> None:
    assert client.post(f"/periodic/{GOOD}", data={"action": "pause"}).status_code == 403
    done = post(client, f"/periodic/{GOOD}", action="pause")
    assert done.status_code == 303 and done.headers["location"] == "/periodic/?notice=pause"
    assert seeded.hget(f"loops:{GOOD}", "paused") == "1"
    assert "Loop paused" in client.get("/periodic/?notice=pause").text
    post(client, f"/periodic/{GOOD}", action="unpause")
    assert seeded.hget(f"loops:{GOOD}", "paused") == "0"
    marks = seeded.hmget(f"loops:{GOOD}", "lf", "nf")
    done = post(client, f"/periodic/{GOOD}", action="enqueue", back="loop")
    assert done.headers["location"] == f"/periodic/{GOOD}?notice=enqueue"
    (pushed,) = [json.loads(raw) for raw in seeded.lrange("queue:low", 0, -1)]
    assert (pushed["class"], pushed["args"]) == ("Per::Web", [1, "two"])
    assert json.loads(seeded.lindex(f"loop-history:{GOOD}", 0) or "")[1] == pushed["jid"]
    assert seeded.hmget(f"loops:{GOOD}", "lf", "nf") == marks  # its own ticks are untouched
    assert pushed["retry"] is True and "tags" not in pushed  # Per::Web: not registered here
    assert post(client, f"/periodic/{GOOD}", action="explode").status_code == 400


def test_enqueue_now_uses_the_jobs_own_options_when_the_job_is_registered(
        client: TestClient, seeded: redis.Redis) -> None:
    """periodic.md: "the job's own options are used when the dashboard process has the job
    registered, else the loop's alone" — the loop's still win over the job's."""

    @wurk.job(name="Per::Web", retry=3, tags=["own"], queue="high")
    def per_web(*args: Any) -> None: ...

    try:
        post(client, f"/periodic/{GOOD}", action="enqueue")
    finally:
        wurk.registry.unregister("Per::Web")
    (pushed,) = [json.loads(raw) for raw in seeded.lrange("queue:low", 0, -1)]
    assert (pushed["retry"], pushed["tags"], pushed["queue"]) == (3, ["own"], "low")
    assert seeded.llen("queue:high") == 0


def test_a_loop_whose_definition_cannot_be_read_is_refused_with_fixed_text(
        client: TestClient, seeded: redis.Redis) -> None:
    refused = post(client, f"/periodic/{HOSTILE}", action="enqueue")
    assert refused.status_code == 400 and "cannot be pushed" in refused.text
    assert seeded.llen("queue:default") == 0
    gone = post(client, "/periodic/ffffffffffffffff", action="pause")
    assert gone.headers["location"] == "/periodic/?notice=gone"
    assert not seeded.exists("loops:ffffffffffffffff")


def test_read_only_shows_no_buttons_and_refuses_posts(config: wurk.Config,
                                                     seeded: redis.Redis) -> None:
    with browse(create_app(config, read_only=True), follow_redirects=False) as client:
        assert "Enqueue now" not in client.get("/periodic/").text
        refused = client.post(f"/periodic/{GOOD}",
                              data={"csrf_token": token(client), "action": "pause"})
        assert refused.status_code == 403
        api = client.post(f"/api/periodic/loops/{GOOD}", json={"action": "pause"},
                          headers={"X-CSRF-Token": token(client)})
        assert api.status_code == 403 and "read-only" in api.json()["error"]
    assert seeded.hget(f"loops:{GOOD}", "paused") == "0"


def test_the_json_twins(client: TestClient, seeded: redis.Redis) -> None:
    answer = client.get("/api/periodic/loops").json()
    loops = answer["loops"]
    assert {loop["lid"] for loop in loops} == {GOOD, HOSTILE, WRONG_TYPE, XSS}
    hostile = next(i for i, loop in enumerate(loops) if loop["lid"] == HOSTILE)
    assert loops[hostile]["next_run"] is None and loops[hostile]["last_run"] is None
    assert answer["invalid"][f"/loops/{hostile}/next_run"] == "1e999"
    assert answer["invalid"][f"/loops/{hostile}/last_run"] == "yesterday"
    assert client.get("/api/periodic/loops/nope").json() == {
        "error": "No such periodic loop: the leader may have pruned it."}
    headers = {"X-CSRF-Token": token(client)}
    assert client.post(f"/api/periodic/loops/{GOOD}", json={"action": "pause"},
                       headers=headers).json() == {"action": "pause", "count": 1}
    pushed = client.post(f"/api/periodic/loops/{GOOD}", json={"action": "enqueue"},
                         headers=headers).json()
    assert pushed["count"] == 1 and len(pushed["jid"]) == 24
    assert client.post(f"/api/periodic/loops/{GOOD}", json={"action": "enqueue"}).status_code \
        == 403
    paths = client.get("/api/openapi.json").json()["paths"]
    assert {"/api/periodic/loops", "/api/periodic/loops/{lid}"} <= set(paths)
    assert "/api/periodic/loops/{lid}" in client.get("/api").text


def test_the_busy_page_marks_the_leader(client: TestClient, r: redis.Redis) -> None:
    seed_process(r, "host:1:leader")
    seed_process(r, "host:2:other")
    r.set("dear-leader", "host:1:leader")
    busy = client.get("/api/busy").json()
    assert {p["identity"]: p["leader"] for p in busy["processes"]} == {
        "host:1:leader": True, "host:2:other": False}
    assert 'class="badge good">leader</span>' in client.get("/busy").text


def test_in_a_browser_the_tab_pauses_a_loop(seeded: redis.Redis,
                                            start_worker: Callable[..., Worker]) -> None:
    config = wurk.configure()
    with serve(create_app(config)) as server, \
            browser_context(viewport={"width": 1280, "height": 900}) as browser:
        page: Any = browser.new_page()
        page.set_default_timeout(20_000)
        page.goto(server.url + "/")
        page.click("nav >> text=Periodic")
        page.wait_for_selector("text=Per::Web")
        page.on("dialog", lambda dialog: dialog.accept())
        page.click(f"form[action='/periodic/{GOOD}'] button[value=pause]")
        page.wait_for_url("**/periodic/?notice=pause")
        assert "Loop paused" in page.text_content(".notice")
        assert seeded.hget(f"loops:{GOOD}", "paused") == "1"


def test_a_stored_zone_that_is_a_directory_is_named_not_a_server_path(
        client: TestClient, r: redis.Redis) -> None:
    """zoneinfo answers 'Europe' with IsADirectoryError, whose text is a path on the server:
    the problem shown is the zone's, as for any unknown zone."""
    r.sadd("periodic", GOOD)
    r.hset(f"loops:{GOOD}", mapping={"schedule": "* * * * *", "klass": "Per::Web",
                                     "tz": "Europe", "options": "{}",
                                     "nf": int(time.time()) + 60})
    loop = client.get(f"/api/periodic/loops/{GOOD}").json()
    assert any("is not a known IANA zone" in problem for problem in loop["problems"]), loop
    assert "zoneinfo" not in json.dumps(loop) and client.get("/periodic/").status_code == 200
