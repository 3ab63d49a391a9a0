"""Property: whatever is stored in the fields the dashboard reads, every page and API route
answers 200 or 404, with JSON any parser reads and markup never unescaped.

Hypothesis writes random hostile values — numbers no float holds, NaN and infinities as
text, times in the wrong unit, JSON nested past any limit, control characters, markup,
garbage bytes — into every field of every record the dashboard reads (queued jobs, the
three job sets and their scores, processes and their running jobs, the counters, the
queue names), then ``visit_everything`` requests every route, each queue and entry page
included; the same data is acted on through the API and read by the CLI.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any
from urllib.parse import quote

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

import wurk
from tests.web.conftest import browse, token
from tests.web.hostile import MARK, strict_json, today_keys, visit_everything
from wurk.web import create_app

# Enough to cover every kind of value in the suite's time budget; a longer hunt:
# WURK_HOSTILE_EXAMPLES=500 WURK_HOSTILE_RANDOM=1 pytest tests/web/test_hostile_property.py
EXAMPLES = int(os.environ.get("WURK_HOSTILE_EXAMPLES", "25"))
DERANDOMIZE = not os.environ.get("WURK_HOSTILE_RANDOM")

# -- raw JSON text for one field (written as is, so it can hold what no encoder writes) -----
NUMBERS = st.sampled_from([
    "1e400", "-1e400", "1e300", "-1e300", "1" + "0" * 400, "-" + "9" * 400, "0", "-1",
    "-1e12", "1e12", "1712345678123", "1712345678.5", "2e-320", "9" * 4300,
])
TEXTS = st.sampled_from([
    '"1e300"', '"nan"', '"inf"', '"-inf"', '"soon"', '"2024-13-45T99:99:99Z"', '""',
    json.dumps(MARK), json.dumps("\x00\n\r\x1b[2J\u202e"), json.dumps("x" * 20_000),
    '"' + "9" * 5000 + '"', '"Mon, 01 Jan 99999 00:00:00 GMT"',
])
NESTED = st.integers(1, 3).map(lambda n: "[" * (50 * n) + "]" * (50 * n)) | st.just(
    '{"a":' * 120 + "1" + "}" * 120)
SCALARS = st.sampled_from(["true", "false", "null", "[]", "{}", "[1,2]", '{"k":"v"}'])
FIELD = NUMBERS | TEXTS | NESTED | SCALARS | st.text(max_size=30).map(json.dumps)

# -- whole stored values ----------------------------------------------------------------------
# A terminal escape among the sampled values, not only as binary() may draw it: Hypothesis
# also draws constants it finds in the modules loaded, so what a fixed seed draws moves with
# the tests that ran before in the same process.
GARBAGE = st.sampled_from([
    b"", b"[" * 10_000, b"{not json", b"\xff\xfe\x00", b"1e400", b"nan", b"-1e12", b"inf",
    b"9" * 400, b'"text"', b"[1,2,3]", MARK.encode(), b"\x1b[2J\x1b]0;title\x07",
]) | st.binary(max_size=40)
REDIS_TEXT = GARBAGE | NUMBERS.map(str.encode) | st.just(b"12")
SCORES = st.sampled_from([float("inf"), float("-inf"), 1e300, -1e300, -5.0, 0.0, 5e-324,
                          1e12, 1712345678.25]) | st.floats(allow_nan=False)

PAYLOAD_FIELDS = ["class", "args", "queue", "jid", "created_at", "enqueued_at", "failed_at",
                  "retried_at", "retry_count", "error_class", "error_message",
                  "error_backtrace", "tags", "bid", "wrapped", "display_class", "encrypt"]
PROCESS_FIELDS = ["hostname", "pid", "tag", "started_at", "concurrency", "queues", "labels",
                  "version", "embedded", "capsules", "identity"]


def record(fields: list[str]) -> st.SearchStrategy[str]:
    """A JSON object whose chosen fields hold hostile raw text; the rest stay sensible."""
    chosen = st.dictionaries(st.sampled_from(fields), FIELD, max_size=len(fields))
    return chosen.map(lambda values: "{" + ",".join(
        [f'"{name}":{text}' for name, text in values.items()]
        + ['"class":"Base"', '"args":[1]', '"jid":"' + f"{len(values):024x}" + '"']) + "}")


def member() -> st.SearchStrategy[bytes]:
    return record(PAYLOAD_FIELDS).map(str.encode) | GARBAGE


@st.composite
def hostile_redis(draw: st.DrawFn) -> dict[str, Any]:
    """Everything the dashboard reads, each piece drawn hostile or sensible."""
    names = draw(st.lists(st.sampled_from(["default", "low", "a|b", "", "x" * 300, MARK,
                                           "sp ace", "ü/", "%2F"]), min_size=1, max_size=3,
                          unique=True))
    return {
        "queues": {name: draw(st.lists(member(), max_size=3)) for name in names},
        "paused": draw(st.lists(st.sampled_from(names), max_size=2)),
        "sets": {key: draw(st.lists(st.tuples(member(), SCORES), max_size=3))
                 for key in ("retry", "schedule", "dead")},
        "processes": draw(st.lists(st.fixed_dictionaries({
            "info": record(PROCESS_FIELDS).map(str.encode) | GARBAGE,
            "busy": REDIS_TEXT, "beat": REDIS_TEXT, "quiet": st.sampled_from([b"true", b"x"]),
            "rss": REDIS_TEXT, "rtt_us": REDIS_TEXT, "concurrency": REDIS_TEXT,
            "work": st.lists(record(["queue", "run_at", "payload"]).map(str.encode) | GARBAGE,
                             max_size=2),
        }), max_size=2)),
        "counters": {key: draw(REDIS_TEXT) for key in ("stat:processed", "stat:failed",
                                                       *today_keys())},
        "leader": draw(GARBAGE),
    }


def store(r: redis.Redis, data: dict[str, Any]) -> None:
    r.flushdb()
    for name, entries in data["queues"].items():
        r.sadd("queues", name)
        if entries:
            r.rpush(f"queue:{name}", *entries)
    if data["paused"]:
        r.sadd("paused", *data["paused"])
    for key, entries in data["sets"].items():
        for raw, score in entries:
            r.zadd(key, {raw: score})
    for n, process in enumerate(data["processes"]):
        identity = f"host:{n}:{'ab' * 6}"
        r.sadd("processes", identity)
        r.hset(identity, mapping={k: v for k, v in process.items() if k != "work"})
        for tid, work in enumerate(process["work"]):
            r.hset(f"{identity}:work", f"t{tid}", work)
    r.mset(data["counters"])
    r.set("dear-leader", data["leader"])


def act_on_everything(client: TestClient) -> None:
    """Each entry's first action and each queued job's delete, through the API: answered
    (200, or 400 for what cannot be), never 500."""
    headers = {"X-CSRF-Token": token(client)}
    for kind in ("retries", "scheduled", "morgue"):
        for entry in client.get(f"/api/{kind}").json()["entries"]:
            action = {"retries": "kill", "scheduled": "add_to_queue", "morgue": "retry"}[kind]
            response = client.post(f"/api/{kind}/{entry['key']}", json={"action": action},
                                   headers=headers)
            assert response.status_code == 200, response.text
    for queue in client.get("/api/queues").json()["queues"]:
        path = f"/api/queues/{quote(queue['name'] or '-', safe='')}"
        page = client.get(path)
        for listed in page.json().get("jobs", []) if page.status_code == 200 else []:
            response = client.post(f"{path}/delete", json={"key": listed["key"]},
                                   headers=headers)
            assert response.status_code == 200, response.text


@pytest.fixture
def hostile_client(config: wurk.Config) -> Any:
    with browse(create_app(config), follow_redirects=False) as client:
        yield client


@settings(max_examples=EXAMPLES, deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@pytest.mark.timeout(360)  # real time, 25-60 s here: more on a slower machine
@given(data=hostile_redis())
def test_every_route_answers_whatever_redis_holds(hostile_client: TestClient, r: redis.Redis,
                                                  data: dict[str, Any],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from wurk.cli import run

    store(r, data)
    visit_everything(hostile_client)
    for command in (["stats"], ["queues"], ["retries"], ["dead"], ["processes"]):
        assert run([*command, "--json"]) == 0, command
        strict_json(capsys.readouterr().out)
    act_on_everything(hostile_client)
    visit_everything(hostile_client)  # after the actions moved things about


def test_the_property_draws_what_it_claims(r: redis.Redis) -> None:
    """The strategy reaches the values the issue names (so the property is not vacuous)."""
    seen: set[str] = set()

    @settings(max_examples=60, deadline=None, derandomize=True)
    @given(data=hostile_redis())
    def collect(data: dict[str, Any]) -> None:
        text = repr(data)
        seen.update(mark for mark in ("1e400", "inf", "[" * 100, "9" * 400, "\\x1b", "<b>")
                    if mark in text)

    started = time.monotonic()
    collect()
    assert seen == {"1e400", "inf", "[" * 100, "9" * 400, "\\x1b", "<b>"}
    assert time.monotonic() - started < 60
