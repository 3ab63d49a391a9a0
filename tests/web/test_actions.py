"""Every dashboard action, through the pages' forms and through the JSON API."""

from __future__ import annotations

import html
import json
import re
import time

import pytest
import redis
from starlette.testclient import TestClient

import wurk
from tests.web.conftest import failed, job, post, seed_process, seed_sets, token
from wurk.api import DeadSet, RetrySet, ScheduledSet


def keys(client: TestClient, kind: str) -> list[str]:
    return [e["key"] for e in client.get(f"/api/{kind}").json()["entries"]]


def queued_jids(r: redis.Redis, queue: str = "default") -> set[str]:
    return {json.loads(raw)["jid"] for raw in r.lrange(f"queue:{queue}", 0, -1)}


# -- one entry, from its own page --------------------------------------------------------------
@pytest.mark.parametrize(("kind", "action", "lands_in"), [
    ("retries", "retry", "queue"), ("retries", "kill", "dead"), ("retries", "delete", None),
    ("scheduled", "add_to_queue", "queue"), ("scheduled", "delete", None),
    ("morgue", "retry", "queue"), ("morgue", "delete", None),
])
def test_entry_action_from_its_page(client: TestClient, config: wurk.Config, r: redis.Redis,
                                    kind: str, action: str, lands_in: str | None) -> None:
    seed_sets(config, 2)
    first = client.get(f"/api/{kind}").json()["entries"][0]
    key, jid = first["key"], first["jid"]
    response = post(client, f"/{kind}/{key}", action=action)
    assert response.status_code == 303
    assert response.headers["location"] == f"/{kind}?notice={action}&count=1"
    assert key not in keys(client, kind)
    assert (jid in queued_jids(r)) == (lands_in == "queue")
    assert (DeadSet(config).find_job(jid) is not None) == (lands_in == "dead")
    assert 'class="notice" role="status">1 ' in client.get(response.headers["location"]).text


def test_retry_now_costs_no_attempt(client: TestClient, config: wurk.Config,
                                    r: redis.Redis) -> None:
    RetrySet(config).schedule(time.time() + 60, failed(1))
    post(client, f"/retries/{keys(client, 'retries')[0]}", action="retry")
    assert json.loads(r.lindex("queue:default", 0))["retry_count"] == 0


def test_action_on_a_gone_entry_says_so(client: TestClient, config: wurk.Config) -> None:
    seed_sets(config, 1)
    key = keys(client, "retries")[0]
    RetrySet(config).clear()  # a worker took it first
    response = post(client, f"/retries/{key}", action="retry")
    assert response.headers["location"] == "/retries?notice=gone&count=0"
    assert "already gone" in client.get(response.headers["location"]).text


def test_unknown_action_is_refused(client: TestClient, config: wurk.Config) -> None:
    seed_sets(config, 1)
    key = keys(client, "scheduled")[0]
    response = post(client, f"/scheduled/{key}", action="kill")
    assert response.status_code == 400
    assert "add_to_queue, delete" in response.text
    assert ScheduledSet(config).size() == 1


# -- the selected ones, and all -----------------------------------------------------------------
def test_selected_entries(client: TestClient, config: wurk.Config, r: redis.Redis) -> None:
    seed_sets(config, 4)
    chosen = keys(client, "retries")[:2]
    response = client.post("/retries", data={"csrf_token": token(client), "action": "retry",
                                             "key": chosen})
    assert response.headers["location"] == "/retries?notice=retry&count=2"
    assert RetrySet(config).size() == 2 and r.llen("queue:default") == 2


@pytest.mark.parametrize(("kind", "action"), [
    ("retries", "retry"), ("retries", "kill"), ("retries", "delete"),
    ("scheduled", "add_to_queue"), ("scheduled", "delete"),
    ("morgue", "retry"), ("morgue", "delete"),
])
def test_bulk_all(client: TestClient, config: wurk.Config, r: redis.Redis, kind: str,
                  action: str) -> None:
    seed_sets(config, 3)
    response = post(client, f"/{kind}", action=action, all="1")
    assert response.headers["location"] == f"/{kind}?notice={action}&count=3"
    assert keys(client, kind) == []
    expected_queue = 3 if action in ("retry", "add_to_queue") else 0
    assert r.llen("queue:default") == expected_queue
    if action == "kill":
        assert DeadSet(config).size() == 6


# -- queues -----------------------------------------------------------------------------------
def test_pause_unpause_clear(client: TestClient, config: wurk.Config, r: redis.Redis) -> None:
    for n in range(3):
        r.lpush("queue:mail", wurk.payload.dumps(job(n, queue="mail")))
    r.sadd("queues", "mail")
    assert post(client, "/queues/mail", action="pause").status_code == 303
    assert r.sismember("paused", "mail")
    assert "paused" in client.get("/queues").text
    post(client, "/queues/mail", action="unpause")
    assert not r.sismember("paused", "mail")
    response = post(client, "/queues/mail", action="clear")
    assert response.headers["location"] == "/queues?notice=clear&count=3"
    assert r.llen("queue:mail") == 0 and not r.sismember("queues", "mail")


def test_delete_one_queued_job(client: TestClient, config: wurk.Config, r: redis.Redis) -> None:
    for n in range(2):
        r.lpush("queue:default", wurk.payload.dumps(job(n)))
    listed = client.get("/api/queues/default").json()["jobs"][0]
    response = post(client, "/queues/default/delete", key=listed["key"])
    assert response.headers["location"] == "/queues/default?notice=delete&count=1"
    assert r.llen("queue:default") == 1 and listed["raw"] not in r.lrange("queue:default", 0, -1)
    again = post(client, "/queues/default/delete", key=listed["key"])
    assert again.headers["location"] == "/queues/default?notice=gone&count=0"


# -- processes --------------------------------------------------------------------------------
def test_quiet_one_and_stop_all(client: TestClient, config: wurk.Config, r: redis.Redis) -> None:
    one = seed_process(r, "host:1:aaa")
    two = seed_process(r, "host:2:bbb")
    embedded = seed_process(r, "host:3:ccc", embedded=True)
    post(client, "/busy", action="quiet", identity=one)
    assert r.lrange(f"{one}-signals", 0, -1) == ["TSTP"]
    response = post(client, "/busy", action="stop")
    assert response.headers["location"] == "/busy?notice=stop&count=2"
    assert r.lrange(f"{two}-signals", 0, -1) == ["TERM"]
    assert r.llen(f"{embedded}-signals") == 0


def test_a_process_whose_identity_is_empty_is_stopped_alone(client: TestClient,
                                                            r: redis.Redis) -> None:
    """A heartbeat written with the identity "" (by hand, or by an attacker) is listed with
    its own Quiet and Stop buttons; they act on that row only, not on every process as the
    "all" form (which sends no identity) does. The JSON API does the same."""
    other = seed_process(r, "host:1:aaa")
    seed_process(r, "")
    page = client.get("/busy").text
    assert 'name="identity" value=""' in page  # the row's own form, as a browser sends it
    response = post(client, "/busy", action="stop", identity="")
    assert response.headers["location"] == "/busy?notice=stop&count=1"
    assert r.llen(f"{other}-signals") == 0
    assert r.lrange("-signals", 0, -1) == ["TERM"]
    assert api_post(client, "/api/busy", {"action": "quiet", "identity": ""})["count"] == 1
    assert r.llen(f"{other}-signals") == 0


def test_a_process_whose_identity_a_page_would_cut_has_no_buttons_that_send_it_cut(
        client: TestClient, r: redis.Redis) -> None:
    """A page cuts text past 2,000 characters: a hidden field holding a cut identity would
    quiet or stop nothing (or another process). That row has no Quiet/Stop, and says why;
    the JSON API still takes the identity whole."""
    short = seed_process(r, "host:1:aaa")
    long = seed_process(r, "host:9:" + "x" * 2100)
    page = client.get("/busy").text
    sent = [html.unescape(v) for v in re.findall(r'name="identity" value="([^"]*)"', page)]
    assert sent == [short]
    assert "too long for this page's buttons" in page
    assert api_post(client, "/api/busy", {"action": "quiet", "identity": long})["count"] == 1
    assert r.lrange(f"{long}-signals", 0, -1) == ["TSTP"] and r.llen(f"{short}-signals") == 0


# -- the JSON API -----------------------------------------------------------------------------
def api_post(client: TestClient, path: str, body: dict[str, object]) -> dict[str, object]:
    response = client.post(path, json=body, headers={"X-CSRF-Token": token(client)})
    assert response.status_code == 200, response.text
    found: dict[str, object] = response.json()
    return found


def test_api_actions(client: TestClient, config: wurk.Config, r: redis.Redis) -> None:
    seed_sets(config, 3)
    first, second, _ = keys(client, "retries")
    assert api_post(client, f"/api/retries/{first}", {"action": "kill"}) == {
        "action": "kill", "count": 1}
    assert api_post(client, "/api/retries", {"action": "retry", "keys": [second]})["count"] == 1
    assert api_post(client, "/api/morgue", {"action": "delete", "all": True})["count"] == 4
    assert api_post(client, "/api/queues/default", {"action": "pause"})["count"] == 1
    raw = client.get("/api/queues/default").json()["jobs"][0]["raw"]
    assert api_post(client, "/api/queues/default/delete", {"job": raw})["count"] == 1
    identity = seed_process(r)
    assert api_post(client, "/api/busy", {"action": "quiet", "identity": identity})["count"] == 1


def test_api_reads_match_the_pages(client: TestClient, config: wurk.Config,
                                   r: redis.Redis) -> None:
    seed_sets(config, 2)
    seed_process(r)
    stats = client.get("/stats").json()
    assert stats["sidekiq"]["retries"] == 2 and stats["sidekiq"]["dead"] == 2
    assert "redis_version" in stats["redis"] and stats["server_utc_time"].endswith("UTC")
    assert client.get("/api/dashboard?days=3").json()["history"]["days"][-1] == time.strftime(
        "%Y-%m-%d", time.gmtime())
    entry = client.get("/api/retries").json()["entries"][0]
    detail = client.get(f"/api/retries/{entry['key']}").json()
    assert detail["jid"] == entry["jid"] and detail["error_message"] == "boom 0"
    assert client.get("/api/busy").json()["totals"]["processes"] == 1
    assert client.get("/api/retries/1.0-gone").status_code == 404
    assert client.get("/api/retries/1.0-gone").json() == {
        "error": "No such entry in Retries: it has run, moved or been deleted."}


# -- a field sent twice -------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/retries", "/retries/{key}", "/queues/default", "/busy",
                                  "/periodic/nope", "/batches/nope"])
def test_a_repeated_form_field_is_refused_and_changes_nothing(
        client: TestClient, config: wurk.Config, r: redis.Redis, path: str) -> None:
    seed_sets(config, 2)
    seed_process(r)
    path = path.format(key=keys(client, "retries")[0])
    body = f"csrf_token={token(client)}&action=kill&action=delete&all=1"
    response = client.post(path, content=body,
                           headers={"content-type": "application/x-www-form-urlencoded"})
    assert response.status_code == 400 and "“action” more than once" in response.text
    assert RetrySet(config).size() == 2 and DeadSet(config).size() == 2
    assert r.hget("host:1:abc", "quiet") == "false"


@pytest.mark.parametrize("path", ["/api/retries", "/api/queues/default", "/api/busy",
                                  "/api/periodic/loops/nope", "/api/batches/nope"])
def test_a_list_where_the_api_wants_one_value_is_refused(
        client: TestClient, config: wurk.Config, path: str) -> None:
    seed_sets(config, 2)
    response = client.post(path, json={"action": ["kill", "delete"], "all": True},
                           headers={"X-CSRF-Token": token(client)})
    assert response.status_code == 400 and "“action” more than once" in response.json()["error"]
    assert RetrySet(config).size() == 2 and DeadSet(config).size() == 2


# -- a field left out ---------------------------------------------------------------------------
@pytest.mark.parametrize(("path", "form", "named"), [
    ("/queues/default/delete", {}, "“key”"),
    ("/busy", {"action": "cancel"}, "“jid”"),
])
def test_a_missing_field_is_a_400_naming_it(client: TestClient, config: wurk.Config,
                                            r: redis.Redis, path: str, form: dict[str, str],
                                            named: str) -> None:
    wurk.Client(config=config).push(job(1))
    response = post(client, path, **form)
    assert response.status_code == 400 and named in response.text
    assert r.llen("queue:default") == 1


def test_the_api_delete_without_key_or_job_is_a_400(client: TestClient, config: wurk.Config,
                                                    r: redis.Redis) -> None:
    wurk.Client(config=config).push(job(1))
    response = client.post("/api/queues/default/delete", json={},
                           headers={"X-CSRF-Token": token(client)})
    assert response.status_code == 400 and "“key”" in response.json()["error"]
    assert r.llen("queue:default") == 1


def test_cancel_of_something_that_is_not_a_jid_says_so(client: TestClient) -> None:
    response = post(client, "/busy", action="cancel", jid="a b\x00")
    assert response.status_code == 400 and "not a jid" in response.text


# -- a key of the wrong type ------------------------------------------------------------------
def test_retry_all_stopped_by_a_wrong_type_queue_key_says_so_and_loses_no_job(
        client: TestClient, config: wurk.Config, r: redis.Redis) -> None:
    now = time.time()
    RetrySet(config).schedule(now + 1, failed(1, queue="broken"))  # first in the set's order
    for n in range(2, 5):
        RetrySet(config).schedule(now + 10 + n, failed(n))
    r.set("queue:broken", "not a list")
    response = post(client, "/retries", action="retry", all="1")
    assert response.status_code == 409
    assert "A Redis key this action writes" in response.text
    # Every job is in its queue or still in the retry set: none in neither place.
    assert queued_jids(r) | {e.jid for e in RetrySet(config)} == \
        {f"{n:024x}" for n in range(1, 5)}
    assert r.get("queue:broken") == "not a list"


@pytest.mark.parametrize(("setup", "path", "body"), [
    (lambda r: r.set("queue:default", "x"), "/api/scheduled/{key}", {"action": "add_to_queue"}),
    (lambda r: r.set("queue:default", "x"), "/api/retries", {"action": "retry", "keys": ["{key}"]}),
    (lambda r: r.set("dead", "x"), "/api/retries", {"action": "kill", "all": True}),
    (lambda r: r.set("paused", "x"), "/api/queues/default", {"action": "pause"}),
    (lambda r: r.set("paused", "x"), "/queues/default", {"action": "unpause"}),
])
def test_an_action_on_a_key_of_the_wrong_type_is_a_409_naming_the_problem(
        client: TestClient, config: wurk.Config, r: redis.Redis, setup: object, path: str,
        body: dict[str, object]) -> None:
    seed_sets(config, 1)
    kind = "scheduled" if "scheduled" in path else "retries"
    key = keys(client, kind)[0]
    setup(r)  # type: ignore[operator]
    filled = {name: [key] if isinstance(v, list) else v for name, v in body.items()}
    if path.startswith("/api"):
        response = client.post(path.format(key=key), json=filled,
                               headers={"X-CSRF-Token": token(client)})
        assert response.json()["error"].startswith("A Redis key this action writes")
    else:
        response = post(client, path, **filled)
        assert "A Redis key this action writes" in response.text
    assert response.status_code == 409
    assert RetrySet(config).size() + ScheduledSet(config).size() == 2  # nothing moved


# -- "all" says yes or no ---------------------------------------------------------------------
@pytest.mark.parametrize("no", ["0", "false", "False", "off"])
@pytest.mark.parametrize("api", [False, True])
def test_all_false_acts_on_the_selected_entries_only(client: TestClient, config: wurk.Config,
                                                     no: str, api: bool) -> None:
    seed_sets(config, 3)
    chosen = keys(client, "morgue")[0]
    if api:
        response = client.post("/api/morgue", json={"action": "delete", "all": no,
                                                    "keys": [chosen]},
                               headers={"X-CSRF-Token": token(client)})
        assert response.json() == {"action": "delete", "count": 1}
    else:
        response = post(client, "/morgue", action="delete", all=no, key=chosen)
        assert response.headers["location"] == "/morgue?notice=delete&count=1"
    assert DeadSet(config).size() == 2


@pytest.mark.parametrize("path", ["/morgue", "/api/morgue"])
def test_an_all_that_is_neither_yes_nor_no_is_a_400_naming_it(client: TestClient,
                                                              config: wurk.Config,
                                                              path: str) -> None:
    seed_sets(config, 2)
    response = client.post(path, data={"csrf_token": token(client), "action": "delete",
                                       "all": "yes please"})
    assert response.status_code == 400
    assert "“all”" in response.text
    assert DeadSet(config).size() == 2


# -- back where the action was taken ----------------------------------------------------------
def test_a_selection_action_returns_to_the_page_and_filter_it_was_taken_on(
        client: TestClient, config: wurk.Config) -> None:
    now = time.time()
    for n in range(30):
        RetrySet(config).schedule(now + 60 + n, failed(n, **{"class": "PayJob"}))
    listed = client.get("/retries", params={"page": "2", "substr": "PayJob"}).text
    assert '<input type="hidden" name="page" value="2">' in listed
    assert '<input type="hidden" name="substr" value="PayJob">' in listed
    chosen = client.get("/api/retries", params={"page": "2"}).json()["entries"][0]["key"]
    response = post(client, "/retries", action="delete", key=chosen, page="2", substr="PayJob")
    assert response.headers["location"] == \
        "/retries?notice=delete&count=1&page=2&substr=PayJob"
    # Nothing to go back to, or nothing that is a page: the list's first page.
    again = post(client, "/retries", action="delete", key=chosen, page="x")
    assert again.headers["location"] == "/retries?notice=delete&count=0"


def test_a_queue_delete_returns_to_the_page_and_order_it_was_taken_on(
        client: TestClient, r: redis.Redis) -> None:
    for n in range(30):
        r.lpush("queue:default", wurk.payload.dumps(job(n)))
    listed = client.get("/queues/default", params={"page": "2", "direction": "asc"}).text
    assert '<input type="hidden" name="page" value="2">' in listed
    key = client.get("/api/queues/default", params={"page": "2", "direction": "asc"}
                     ).json()["jobs"][0]["key"]
    response = post(client, "/queues/default/delete", key=key, page="2", direction="asc")
    assert response.headers["location"] == \
        "/queues/default?notice=delete&count=1&page=2&direction=asc"
    assert r.llen("queue:default") == 29
