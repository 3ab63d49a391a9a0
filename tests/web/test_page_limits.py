"""The bounds docs/dashboard.md promises on what a page reads and shows, whatever Redis
holds: 1,000 queues, 2,000 periodic loops, a batch's first 50 failed and dead jobs, 1,000
filter matches, a listed queue job found up to 1,000 entries from where it was listed, and
one warning for a key of the wrong type."""

from __future__ import annotations

import json
import logging
import re
import time

import pytest
import redis
from starlette.testclient import TestClient

import wurk
from tests.web.conftest import failed
from tests.web.test_batches_tab import make
from wurk.api import Queue
from wurk.batch import accounting


def test_the_queue_list_shows_at_most_1000_queues(client: TestClient, r: redis.Redis) -> None:
    r.sadd("queues", *[f"q{n:05}" for n in range(1200)])
    assert len(client.get("/api/queues").json()["queues"]) == 1000
    assert client.get("/queues").text.count('href="/queues/q') == 1000


def test_the_periodic_tab_lists_at_most_2000_loops(client: TestClient, r: redis.Redis) -> None:
    r.sadd("periodic", *[f"{n:016x}" for n in range(2100)])
    assert len(client.get("/api/periodic/loops").json()["loops"]) == 2000
    assert client.get("/periodic/").status_code == 200


def test_a_batchs_page_lists_its_first_50_failed_and_50_dead_jobs(
        config: wurk.Config, client: TestClient) -> None:
    batch, jids = make(config, 120)
    with wurk.redis() as conn:
        for jid in jids[:60]:
            accounting.record(conn, config, batch.bid, jid, "failure")
        for jid in jids[60:]:
            accounting.record(conn, config, batch.bid, jid, "death")
    page = client.get(f"/batches/{batch.bid}")
    assert page.status_code == 200
    assert len(set(re.findall(r'href="/retries\?substr=([^"]+)"', page.text))) == 50
    assert len(set(re.findall(r'href="/morgue\?substr=([^"]+)"', page.text))) == 50


def test_a_substring_filter_shows_at_most_1000_matches_and_says_so(
        config: wurk.Config, client: TestClient, r: redis.Redis) -> None:
    now = time.time()
    r.zadd("retry", {wurk.payload.dumps(failed(n)): now + 60 + n for n in range(1100)})
    found = client.get("/api/retries?substr=boom").json()
    assert found["size"] == 1000 and found["truncated"] is True
    page = client.get("/retries?substr=boom").text
    assert "The filter matched more entries than are shown" in page
    few = client.get("/api/retries?substr=boom%2010").json()  # 10, 100-109, 1000-1099
    assert few["truncated"] is False and few["size"] == 111


@pytest.mark.parametrize(("pushed_since", "found"), [(1000, True), (1001, False)])
def test_a_listed_queue_job_is_found_up_to_1000_entries_from_where_it_was_listed(
        config: wurk.Config, r: redis.Redis, pushed_since: int, found: bool) -> None:
    r.sadd("queues", "default")
    r.lpush("queue:default", json.dumps({"class": "Doomed", "args": [], "jid": "d" * 24}))
    queue = Queue("default", config)
    (listed,) = queue.listing(0, 1)
    other = json.dumps({"class": "Other", "args": [], "jid": "0" * 24})
    for start in range(0, pushed_since, 500):  # pushes move it towards the tail
        r.lpush("queue:default", *[other] * min(500, pushed_since - start))
    assert queue.delete_listed(listed.index, listed.record.digest) is found
    assert r.llen("queue:default") == pushed_since + (0 if found else 1)


def test_a_key_of_the_wrong_type_reads_as_absent_with_one_warning_naming_it(
        client: TestClient, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    from wurk.connections import reading

    reading._warned.clear()  # said once per key and process: this test wants to hear it
    r.set("queues", "not a set")
    for _ in range(3):
        assert client.get("/queues").status_code == 200
        assert client.get("/api/queues").json()["queues"] == []
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING
              and "another type" in rec.getMessage()]
    assert len(warned) == 1 and "'queues'" in warned[0], warned
    reading._warned.clear()
