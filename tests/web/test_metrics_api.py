"""The Metrics pages' JSON twins: ``/api/metrics`` and ``/api/metrics/<job>``."""

from __future__ import annotations

import datetime as dt
import json

import redis
from starlette.testclient import TestClient

import wurk
from tests.helpers.metrics import tracked
from tests.web.conftest import XSS
from tests.web.hostile import strict_json
from wurk import deploy


def flushed(config: wurk.Config, minutes_ago: int = 0, **jobs: tuple[list[float], int]) -> None:
    tracker = tracked(**jobs)
    when = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=minutes_ago)
    tracker.flush(config.pool(), config.keys, now=when)


def test_the_list_has_every_jobs_totals_sorted_and_filtered(config: wurk.Config,
                                                           client: TestClient) -> None:
    flushed(config, HardJob=([10.0] * 4, 2), EasyJob=([1.0] * 9, 0))
    flushed(config, 3, HardJob=([30.0], 0))
    answer = client.get("/api/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    found = answer.json()
    assert (found["period"], found["granularity"], len(found["buckets"])) == ("1h", "minutely",
                                                                             60)
    assert found["jobs"] == [
        {"name": "EasyJob", "processed": 9, "failed": 0, "total_ms": 9, "average_ms": 1.0},
        {"name": "HardJob", "processed": 7, "failed": 2, "total_ms": 70, "average_ms": 14.0},
    ]
    assert found["total_jobs"] == 2 and found["invalid_count"] == 0 and "invalid" not in found
    busiest = {job["name"]: job["processed"] for job in found["busiest"]}
    assert sum(busiest["HardJob"]) == 7 and busiest["HardJob"][-4] == 1  # 3 minutes ago
    assert len(busiest["EasyJob"]) == 60 and busiest["EasyJob"][-1] == 9
    by_name = client.get("/api/metrics?sort=name&direction=asc").json()
    assert [job["name"] for job in by_name["jobs"]] == ["EasyJob", "HardJob"]
    assert (by_name["sort"], by_name["descending"]) == ("name", False)
    by_failures = client.get("/api/metrics?sort=failed").json()
    assert by_failures["jobs"][0]["name"] == "HardJob"
    assert [job["name"] for job in client.get("/api/metrics?substr=hard").json()["jobs"]] == [
        "HardJob"]
    long = client.get("/api/metrics?period=24h").json()
    assert (long["granularity"], len(long["buckets"])) == ("ten_minutes", 144)
    assert {job["name"]: job["processed"] for job in long["jobs"]} == {"EasyJob": 9,
                                                                      "HardJob": 7}
    odd = client.get("/api/metrics?period=nonsense&sort=%3Cx%3E").json()
    assert (odd["period"], odd["sort"]) == ("1h", "processed")
    assert client.get("/api/metrics/").json()["total_jobs"] == 2  # the list, as /metrics/


def test_a_jobs_document_has_series_a_histogram_and_marks(config: wurk.Config,
                                                          client: TestClient) -> None:
    flushed(config, 2, **{"Billing::Invoice": ([5.0, 25.0, 40.0, 2000.0], 1)})
    deploy.mark("v2 <b>deploy</b>", config=config,
                at=dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=1))
    found = client.get("/api/metrics/Billing%3A%3AInvoice").json()
    assert found["name"] == "Billing::Invoice"
    assert (found["processed"], found["failed"], found["total_ms"]) == (5, 1, 2070)
    assert found["average_ms"] == 517.5
    series = found["series"]
    assert (sum(series["processed"]), sum(series["failed"]), sum(series["ms"])) == (5, 1, 2070)
    assert series["processed"][-3] == 5 and series["average_ms"][-3] == 517.5
    counted = {row["bucket"]: row["count"] for row in found["histogram"] if row["count"]}
    assert counted == {"20ms": 1, "30ms": 1, "45ms": 1, "2.5s": 1}
    assert len(found["histogram"]) == 26
    assert [mark["label"] for mark in found["marks"]] == ["v2 <b>deploy</b>"]  # JSON, as is
    assert client.get("/api/metrics/Billing%3A%3AInvoice?period=72h").json()["histogram"] \
        is None  # histograms are kept 8 hours
    unknown = client.get("/api/metrics/NeverRan").json()
    assert (unknown["processed"], sum(unknown["series"]["ms"])) == (0, 0)
    slashed = client.get("/api/metrics/Admin/Report%20Job").json()
    assert slashed["name"] == "Admin/Report Job"


def test_hostile_stored_metrics_are_null_and_named_never_a_500(
        config: wurk.Config, r: redis.Redis, client: TestClient) -> None:
    now = dt.datetime.now(dt.timezone.utc)
    minute = config.keys.metrics_minute(now)
    r.hset(minute, mapping={f"{XSS}|p": "3", f"{XSS}|ms": "x" * 10, "Bad|f": "-9",
                            "|p": "1", "no-bar": "1", "Bad|p": "1e400"})
    r.lpush(config.keys.metrics_ten_minutes(now), "a list")
    r.sadd(config.keys.histogram("Bad", now), "a set")
    r.hset(config.keys.deploy_marks(now.date()), mapping={"garbage": XSS})
    for path in ("/api/metrics", "/api/metrics?period=24h", f"/api/metrics/{XSS}",
                 "/api/metrics/Bad", "/api/metrics/Bad?period=8h"):
        answer = client.get(path)
        assert answer.status_code == 200, path
        strict_json(answer.text)
    found = client.get("/api/metrics").json()
    assert found["invalid_count"] == 4  # three counts and a deploy mark's time
    assert found["invalid_values"] == [None] * 4
    assert sorted(found["invalid"].values()) == ["-9", "1e400", "garbage", "x" * 10]
    assert {job["name"] for job in found["jobs"]} == {XSS, "Bad"}  # data, not markup
    bad = client.get("/api/metrics/Bad").json()
    assert bad["processed"] == 0 and bad["histogram"] == [
        {"bucket": row["bucket"], "count": 0} for row in bad["histogram"]]
    assert json.dumps(bad["invalid"]).count("1e400") == 1


def test_the_schema_lists_both_with_their_parameters(client: TestClient) -> None:
    paths = client.get("/api/openapi.json").json()["paths"]
    listing, one = paths["/api/metrics"]["get"], paths["/api/metrics/{name}"]["get"]
    assert [p["name"] for p in listing["parameters"]] == ["period", "substr", "sort",
                                                          "direction"]
    assert [(p["name"], p["in"]) for p in one["parameters"]] == [("name", "path"),
                                                                 ("period", "query")]
    assert "1h | 2h | 4h | 8h | 24h | 48h | 72h" in one["parameters"][1]["description"]
    assert "/api/metrics/{name}" in client.get("/api").text
