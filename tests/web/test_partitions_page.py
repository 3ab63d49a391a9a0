"""The queue page of a partitioned queue (``wurk.partitions``): its partitions, their sizes
and in-flight counts, in the page and in the JSON API."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

import wurk
from tests.web.conftest import XSS, browse, post
from wurk.config import Capsule
from wurk.fetch.partitioned import PartitionedFetch
from wurk.runtime.identity import Identity
from wurk.web import create_app

Q = "imports"


@pytest.fixture
def pconfig(redis_server: Any) -> Iterator[wurk.Config]:
    yield wurk.configure(redis_url=redis_server.url, partitions={Q: 2})


@pytest.fixture
def pclient(pconfig: wurk.Config) -> Iterator[TestClient]:
    with browse(create_app(pconfig)) as found:
        yield found


@wurk.job(name="parts.page", queue=Q)
def page_job(n: int) -> None:
    return None


def test_the_queue_page_shows_partitions_sizes_and_in_flight(
    pconfig: wurk.Config, pclient: TestClient, r: redis.Redis
) -> None:
    for n in range(7):
        page_job.set(partition="acme").perform_async(n)
    for n in range(3):
        page_job.set(partition="globex").perform_async(n)
    fetcher = PartitionedFetch(pconfig, Capsule(queues=[(Q, 0)], concurrency=1),
                               pconfig.pool("t", size=2), identity=Identity.current(),
                               capsule_index=0, slot=0)
    assert fetcher.fetch(0.05) is not None  # one of each partition now in flight
    text = pclient.get(f"/queues/{Q}").text
    rows = re.findall(r'<tr><td class="name">([^<]+)</td><td>(\d+)</td><td>(\d+)', text)
    assert rows == [("acme", "6", "1"), ("globex", "2", "1")]
    assert "2 partitions with work or in flight" in text and "at most 2 in flight" in text
    assert "8 jobs in partitions · 0 not yet routed" in text
    listed = {q["name"]: q["size"] for q in pclient.get("/api/queues").json()["queues"]}
    assert listed[Q] == 8  # the queues list counts the jobs waiting in the partitions
    found = pclient.get(f"/api/queues/{Q}").json()["partitions"]
    assert found["rows"] == [{"name": "acme", "size": 6, "running": 1},
                             {"name": "globex", "size": 2, "running": 1}]
    assert (found["limit"], found["total"], found["waiting"], found["running"]) == (2, 2, 8, 2)
    assert found["rate"] is None
    fetcher.flush()


def test_the_page_says_a_queues_rate(redis_server: Any, r: redis.Redis) -> None:
    config = wurk.configure(redis_url=redis_server.url, partitions={Q: 2},
                            partition_rates={Q: 10})
    with browse(create_app(config)) as client:
        assert "at most 2 in flight each, 10 started a second" in client.get(f"/queues/{Q}").text
        assert client.get(f"/api/queues/{Q}").json()["partitions"]["rate"] == 10


def test_a_partition_at_its_limit_says_so_and_a_plain_queue_shows_none(
    pconfig: wurk.Config, pclient: TestClient, r: redis.Redis
) -> None:
    r.hset(pconfig.keys.partition_running(Q), "acme", 2)
    r.zadd(pconfig.keys.partition_ring(Q), {"acme": 0, XSS: 0})  # a member no push writes
    text = pclient.get(f"/queues/{Q}").text
    assert "at limit" in text and XSS not in text
    assert pclient.get("/api/queues/default").json()["partitions"] is None
    assert "Partitions" not in pclient.get("/queues/default").text


def test_the_queue_page_lists_deletes_and_clears_the_partitions_jobs(
    pconfig: wurk.Config, r: redis.Redis
) -> None:
    for n in range(3):
        page_job.set(partition="acme").perform_async(n)
    page_job.set(partition="globex").perform_async(10)
    with browse(create_app(pconfig), follow_redirects=False) as client:
        found = client.get(f"/api/queues/{Q}").json()
        assert found["size"] == 4
        assert [job["args"] for job in found["jobs"]] == [[2], [1], [0], [10]]
        text = client.get(f"/queues/{Q}").text
        assert text.count('name="key"') == 4
        listed = found["jobs"][1]
        assert listed["key"].endswith("-acme")
        response = post(client, f"/queues/{Q}/delete", key=listed["key"])
        assert response.headers["location"] == f"/queues/{Q}?notice=delete&count=1"
        assert [j["args"] for j in client.get(f"/api/queues/{Q}").json()["jobs"]] == \
            [[2], [0], [10]]
        again = post(client, f"/queues/{Q}/delete", key=listed["key"])
        assert again.headers["location"] == f"/queues/{Q}?notice=gone&count=0"
        oldest = client.get(f"/api/queues/{Q}?direction=asc").json()["jobs"]
        assert [j["args"] for j in oldest] == [[10], [0], [2]]
        response = post(client, f"/queues/{Q}", action="clear")
        assert response.headers["location"] == "/queues?notice=clear&count=3"
        assert r.zcard(pconfig.keys.partition_ring(Q)) == 0
        assert Q not in {q["name"] for q in client.get("/api/queues").json()["queues"]}


@pytest.mark.parametrize("key", [
    "0-" + "a" * 40 + "-a:b", "0-" + "a" * 40 + "-" + XSS, "0-" + "a" * 40 + "-",
    "0-" + "a" * 40 + "-" + "p" * 300, "x-y-z",
])
def test_a_delete_key_naming_no_partition_deletes_nothing(
    pconfig: wurk.Config, r: redis.Redis, key: str
) -> None:
    page_job.set(partition="acme").perform_async(1)
    with browse(create_app(pconfig), follow_redirects=False) as client:
        response = post(client, f"/queues/{Q}/delete", key=key)
        assert response.headers["location"] == f"/queues/{Q}?notice=gone&count=0"
    assert r.llen(pconfig.keys.partition(Q, "acme")) == 1


def test_the_queue_page_of_hand_written_partitions_answers(
    pconfig: wurk.Config, pclient: TestClient, r: redis.Redis
) -> None:
    keys = pconfig.keys
    r.lpush(keys.partition(Q, "acme"), "not json", XSS, '{"class": 5, "args": "x"}')
    r.set(keys.partition(Q, "str"), "not a list")
    r.zadd(keys.partition_ring(Q), {"acme": 0, "str": 0, "a:b": 0, XSS: 0})
    r.sadd(keys.queues, Q)
    text = pclient.get(f"/queues/{Q}").text
    assert XSS not in text
    found = pclient.get(f"/api/queues/{Q}").json()
    assert found["size"] == 3 and len(found["jobs"]) == 3
    sizes = {q["name"]: q["size"] for q in pclient.get("/api/queues").json()["queues"]}
    assert sizes[Q] == 3
    r.delete(keys.partition_ring(Q))
    r.set(keys.partition_ring(Q), "not a zset")
    assert pclient.get(f"/queues/{Q}").status_code == 200
    assert pclient.get(f"/api/queues/{Q}").json()["size"] == 0


def test_the_queue_api_lists_at_most_200_partitions_largest_first(
    pconfig: wurk.Config, pclient: TestClient, r: redis.Redis
) -> None:
    """docs: the queue page lists the partitions, largest first (200 at most)."""
    keys = pconfig.keys
    pipe = r.pipeline(transaction=False)
    for n in range(250):  # partition p<n> holds n + 1 jobs
        name = f"p{n:03d}"
        pipe.rpush(keys.partition(Q, name), *[f'{{"jid":"{name}-{i}"}}' for i in range(n + 1)])
        pipe.zadd(keys.partition_ring(Q), {name: n})
    pipe.execute()
    found = pclient.get(f"/api/queues/{Q}").json()["partitions"]
    assert found["total"] == 250
    rows = found["rows"]
    assert len(rows) == 200
    assert [row["name"] for row in rows] == [f"p{n:03d}" for n in range(249, 49, -1)]
    assert [row["size"] for row in rows] == list(range(250, 50, -1))
    text = pclient.get(f"/queues/{Q}").text
    assert len(re.findall(r'<tr><td class="name">p\d{3}</td>', text)) == 200
