"""Each stored value that used to answer 500, alone: it shows as invalid, the page stays.

The values are those an attacker (or a person at redis-cli) left in Redis; each test writes
one kind into the field the dashboard reads and walks every page and API route
(``hostile.visit_everything``), then looks at where the value shows.
"""

from __future__ import annotations

import base64
import json
import time
import tracemalloc
import zlib

import pytest
import redis
from starlette.testclient import TestClient

import wurk
from tests.web.conftest import failed, job, post, seed_process, token
from tests.web.hostile import MARK, strict_json, today_keys, visit_everything
from wurk.api import DeadSet, RetrySet, ScheduledSet

BIG = "9" * 400


def raw_job(n: int, **fields: str) -> str:
    """A failed job's payload whose ``fields`` are written as the raw JSON text given
    (``1e400`` stays ``1e400``: a JSON encoder could not write it)."""
    base = json.dumps(failed(n))[:-1]
    return base + "".join(f', "{name}": {text}' for name, text in fields.items()) + "}"


@pytest.mark.parametrize("enqueued_at", [BIG, "1e300", '"1e300"', "-1" + "0" * 400,
                                         '"' + "9" * 5000 + '"'])
def test_an_unreadable_enqueued_at(client: TestClient, r: redis.Redis,
                                   enqueued_at: str) -> None:
    r.sadd("queues", "default", "low")
    r.lpush("queue:default", raw_job(1, enqueued_at=enqueued_at))
    r.lpush("queue:low", wurk.payload.dumps(job(2)))
    answers = visit_everything(client)
    home, queues = answers["/"].text, answers["/queues"].text
    assert "invalid (" in home and "invalid (" in queues
    assert "/queues/low" in queues  # the other queue is still listed
    latency = answers["/stats"].json()
    assert latency["sidekiq"]["default_latency"] is None
    assert latency["invalid"]["/sidekiq/default_latency"]  # its raw text, as read
    assert answers["stream"]["sidekiq"]["default_latency"] is None
    listed = answers["/api/queues/default?direction=asc"].json()
    assert listed["jobs"][0]["enqueued_at"] is None
    assert "/jobs/0/enqueued_at" in listed["invalid"]
    assert len(listed["invalid"]["/jobs/0/enqueued_at"]) <= 120


@pytest.mark.parametrize("score", [float("inf"), float("-inf"), 1e300, -5.0, -1e12])
@pytest.mark.parametrize("job_set", [RetrySet, DeadSet, ScheduledSet])
def test_an_unreadable_score_and_its_own_page(client: TestClient, config: wurk.Config,
                                              r: redis.Redis, score: float,
                                              job_set: type[RetrySet]) -> None:
    entries = job_set(config)
    entries.schedule(score, job(1))
    entries.schedule(time.time() + 60, job(2))
    kind = {"retry": "retries", "dead": "morgue", "schedule": "scheduled"}[entries.name]
    answers = visit_everything(client)
    listed = answers[f"/api/{kind}"].json()
    assert listed["size"] == 2 and len(listed["entries"]) == 2
    bad = next(e for e in listed["entries"] if e["jid"] == job(1)["jid"])
    assert bad["at"] is None and bad["at_epoch"] is None
    page = client.get(f"/{kind}/{bad['key']}")
    assert page.status_code == 200 and "invalid (" in page.text  # reachable, negative too
    action = "delete"
    done = client.post(f"/api/{kind}/{bad['key']}", json={"action": action},
                       headers={"X-CSRF-Token": token(client)})
    assert done.json() == {"action": action, "count": 1} and entries.size() == 1


@pytest.mark.parametrize("field", ["failed_at", "retried_at", "created_at"])
def test_times_out_of_range_on_an_entry_page(client: TestClient, r: redis.Redis,
                                             field: str) -> None:
    r.zadd("retry", {raw_job(1, **{field: "1e300"}): time.time() + 60})
    r.zadd("retry", {raw_job(2, **{field: "-1e12"}): time.time() + 61})
    answers = visit_everything(client)
    pages = [text for path, text in ((p, a.text) for p, a in answers.items() if p != "stream")
             if path.startswith("/retries/")]
    assert len(pages) == 2 and all("invalid (" in text for text in pages)


def test_an_unreadable_process(client: TestClient, r: redis.Redis) -> None:
    seed_process(r, "good:1:aaa")
    r.sadd("processes", "nested:1:bbb", "numbers:1:ccc", "capsules:1:ddd")
    r.hset("nested:1:bbb", mapping={"info": "[" * 10_000, "busy": "1", "beat": "1e400"})
    numbers = {"hostname": "numbers", "pid": 10**400, "started_at": 1e300,
               "concurrency": 3, "queues": ["default"]}
    r.hset("numbers:1:ccc", mapping={"info": json.dumps(numbers), "busy": BIG, "beat": "nan",
                                     "rss": BIG, "rtt_us": "-1", "quiet": "false"})
    capsules = {"hostname": "capsules", "capsules": {"a": {"weights": 5},
                                                     "b": {"weights": [[1, 2], "x", {}]},
                                                     "c": "nope"}}
    r.hset("capsules:1:ddd", mapping={"info": json.dumps(capsules), "beat": "-1e12",
                                      "concurrency": "many"})
    answers = visit_everything(client)
    busy = answers["/busy"].text
    assert "good:1:aaa" in busy and "nested:1:bbb" in busy and "numbers:1:ccc" in busy
    assert busy.count("invalid (") >= 5
    listed = {p["identity"]: p for p in answers["/api/busy"].json()["processes"]}
    assert listed["numbers:1:ccc"]["busy"] is None and listed["numbers:1:ccc"]["rss_kb"] is None
    assert listed["capsules:1:ddd"]["queues"] == ["x"]
    totals = answers["/api/busy"].json()["totals"]
    assert totals["processes"] == 4 and totals["busy"] == 2  # the readable ones


def test_a_work_entry_with_unreadable_fields(client: TestClient, r: redis.Redis) -> None:
    identity = seed_process(r, "host:1:aaa")
    r.hset(f"{identity}:work", "tid-2", json.dumps({"queue": 7, "run_at": "soon",
                                                    "payload": "[" * 5000}))
    r.hset(f"{identity}:work", "tid-3", "[" * 10_000)
    answers = visit_everything(client)
    jobs = answers["/api/busy"].json()["jobs"]
    assert len(jobs) == 2 and any(j["run_at"] is None for j in jobs)


def test_an_unreadable_daily_counter(client: TestClient, r: redis.Redis) -> None:
    processed, failed = today_keys()
    r.set(processed, BIG)
    r.set(failed, "-3")
    r.set("stat:processed", "1e400")
    answers = visit_everything(client)
    assert answers["/"].status_code == 200 and "<polyline" in answers["/"].text
    history = answers["/api/dashboard"].json()
    assert history["history"]["processed"][-1] is None
    assert history["invalid"]["/history/processed/29"].startswith("999")
    assert history["sidekiq"]["processed"] is None and "invalid (1e400)" in answers["/"].text


@pytest.mark.parametrize("count", ["9" * 5000, "²", "-1", "1e3"])
def test_a_notice_count_that_is_no_number(client: TestClient, count: str) -> None:
    response = client.get(f"/queues?notice=delete&count={count}")
    assert response.status_code == 200 and "0 deleted." in response.text


def bomb(inflated: int) -> str:
    """A backtrace that inflates to ``inflated`` bytes of JSON, compressed as it is made."""
    packer = zlib.compressobj(9)
    chunk = b"a" * (1 << 20)
    parts = [packer.compress(b'["')]
    parts += [packer.compress(chunk) for _ in range(inflated >> 20)]
    parts += [packer.compress(b'"]'), packer.flush()]
    return base64.b64encode(b"".join(parts)).decode()


def test_a_zip_bomb_backtrace_costs_neither_time_nor_memory(client: TestClient,
                                                            r: redis.Redis) -> None:
    stored = bomb(256 << 20)
    assert len(stored) < 400 << 10  # a 340 KiB entry, 256 MiB inflated
    r.zadd("dead", {raw_job(1, error_backtrace=json.dumps(stored)): time.time()})
    key = client.get("/api/morgue").json()["entries"][0]["key"]
    tracemalloc.start()
    started = time.process_time()  # CPU, which a loaded machine does not swell
    page = client.get(f"/morgue/{key}")
    detail = client.get(f"/api/morgue/{key}").json()
    elapsed = time.process_time() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert page.status_code == 200 and "backtrace too large" in page.text
    assert detail["error_backtrace"] is None and "/error_backtrace" in detail["invalid"]
    assert elapsed < 5  # 7 s before the cap, on an idle machine; well under 1 s now
    assert peak < 64 << 20  # the request read the entry (340 KiB), never the 256 MiB


def test_a_backtrace_inflating_to_deep_json(client: TestClient, r: redis.Redis) -> None:
    deep = base64.b64encode(zlib.compress(b"[" * 100_000 + b"]" * 100_000)).decode()
    r.zadd("dead", {raw_job(1, error_backtrace=json.dumps(deep)): time.time()})
    answers = visit_everything(client)
    page = next(a for p, a in answers.items() if p.startswith("/morgue/"))
    assert "Backtrace not shown" in page.text


def test_markup_and_control_characters_are_shown_escaped(client: TestClient,
                                                         r: redis.Redis) -> None:
    r.sadd("queues", "default")
    r.lpush("queue:default", raw_job(1, enqueued_at=json.dumps(MARK + "\x00\n\x1b[31m")))
    answers = visit_everything(client)
    raw = answers["/api/queues/default?direction=asc"].json()["invalid"]["/jobs/0/enqueued_at"]
    assert raw == "<b>mark</b>\\x00\\n\\x1b[31m"
    assert "&lt;b&gt;mark&lt;/b&gt;\\x00\\n" in answers["/queues/default"].text


def test_a_job_over_a_mebibyte_can_be_deleted(client: TestClient, r: redis.Redis) -> None:
    r.sadd("queues", "default")
    big = job(1, args=["x" * (3 << 19)])  # 1.5 MiB: more than a request body may carry
    r.lpush("queue:default", wurk.payload.dumps(big))
    for n in range(2, 5):
        r.lpush("queue:default", wurk.payload.dumps(job(n)))
    page = client.get("/queues/default?direction=asc")
    listed = client.get("/api/queues/default?direction=asc").json()["jobs"][0]
    assert listed["jid"] == big["jid"] and f'value="{listed["key"]}"' in page.text
    r.lpush("queue:default", wurk.payload.dumps(job(9)))  # it moves while the page is open
    response = post(client, "/queues/default/delete", key=listed["key"])
    assert response.headers["location"] == "/queues/default?notice=delete&count=1"
    assert r.llen("queue:default") == 4
    assert all(json.loads(e)["jid"] != big["jid"] for e in r.lrange("queue:default", 0, -1))


def test_an_api_client_deletes_by_key_or_by_text(client: TestClient, r: redis.Redis) -> None:
    for n in range(2):
        r.lpush("queue:default", wurk.payload.dumps(job(n)))
    first, second = client.get("/api/queues/default").json()["jobs"]
    headers = {"X-CSRF-Token": token(client)}
    assert client.post("/api/queues/default/delete", json={"key": first["key"]},
                       headers=headers).json() == {"action": "delete", "count": 1}
    assert client.post("/api/queues/default/delete", json={"job": second["raw"]},
                       headers=headers).json() == {"action": "delete", "count": 1}
    assert r.llen("queue:default") == 0


def test_a_queue_name_that_cannot_be_a_queue_is_404(client: TestClient, r: redis.Redis) -> None:
    r.sadd("queues", "a|b", "default")
    answers = visit_everything(client)
    assert answers["/queues/a%7Cb"].status_code == 404
    assert answers["/api/queues/a%7Cb?direction=asc"].status_code == 404
    response = client.post("/api/queues/a%7Cb", json={"action": "clear"},
                           headers={"X-CSRF-Token": token(client)})
    assert response.status_code == 400


def test_retrying_a_job_no_float_holds_is_refused_not_500(client: TestClient,
                                                          r: redis.Redis) -> None:
    """A number no float holds (``1e400``) makes the entry no payload a worker reads: it is
    listed as unparseable, naming the number, and a retry moves nothing."""
    r.zadd("retry", {raw_job(1, args="[1e400]"): time.time() + 60})
    key = client.get("/api/retries").json()["entries"][0]["key"]
    detail = strict_json(client.get(f"/api/retries/{key}").text)
    assert detail["display_class"] == "[unparseable entry]"
    assert "the number 1e400 is beyond any float" in detail["parse_error"]
    done = client.post(f"/api/retries/{key}", json={"action": "retry"},
                       headers={"X-CSRF-Token": token(client)})
    assert done.json() == {"action": "retry", "count": 0} and r.zcard("retry") == 1


def test_the_cli_reads_the_same_hostile_values(config: wurk.Config, r: redis.Redis,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from wurk.cli import run

    r.sadd("queues", "default")
    r.lpush("queue:default", raw_job(1, enqueued_at="1e300"))
    r.zadd("retry", {raw_job(2, failed_at=BIG): float("inf")})
    r.set("stat:processed", BIG)
    r.sadd("processes", "p:1:a")
    r.hset("p:1:a", mapping={"info": "[" * 10_000, "beat": "nan", "rss": BIG})
    for command in (["stats"], ["queues"], ["retries"], ["processes"]):
        assert run(command) == 0, command
        assert "invalid (" in capsys.readouterr().out, command
        assert run([*command, "--json"]) == 0, command
        strict_json(capsys.readouterr().out)
    assert run(["stats", "--json"]) == 0
    assert strict_json(capsys.readouterr().out)["invalid"]["/processed"].startswith("999")
