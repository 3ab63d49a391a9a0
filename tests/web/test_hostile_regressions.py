"""The second hostile-data pass, point by point: each finding has its regression test here or
names the test that covers it. (The structural one — every key family made hostile and read
by every page, route and listing — is ``test_hostile_families.py``.)

1. metrics read without a limit → test_hostile_families: a million metric fields
2. a batch page's 500s and its 404 links → here, and test_batches_tab
3. one bad batch key breaks the Batches tab and ``wurk batches`` → test_hostile_families
   (every batch family, wrong type and deep JSON in ``tags``/``callbacks``)
4. the health and metrics ports → here
5. metrics labels without a length limit → here
6. wrong-type 500s of limits, periodic, history, busy, retries, morgue → test_hostile_families,
   and the limiter interval and history values → here
7. periodic "enqueue now" with hostile stored options → here
8. batch paging, dead batches, a batch page over a big retry set, tag search → here
9. ``wurk batches show`` writing control characters → test_hostile_families (every listing)
10. a batch callback naming any method of a job class → here
11. pages growing with stored values → test_hostile_families (10 MB in every family)
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

import wurk
from tests.web.conftest import browse, token
from wurk.batch.callback import resolve
from wurk.keys import Keys
from wurk.metrics.health import HealthServer
from wurk.metrics.prometheus import WorkerExporter
from wurk.metrics.tracking import NAME_LIMIT, job_name
from wurk.web import create_app


@pytest.fixture
def client(config: wurk.Config) -> Iterator[TestClient]:
    with browse(create_app(config), follow_redirects=False) as found:
        yield found


def get(port: int, host: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", "/", headers={"Host": host})
    status = connection.getresponse().status
    connection.close()
    return status


# -- 4 ---------------------------------------------------------------------------------------
def test_the_health_and_metrics_listeners_bind_loopback_and_refuse_other_names() -> None:
    config = wurk.Config(redis_url="redis://127.0.0.1:1/0")
    assert config.health_host == "127.0.0.1" and config.metrics_host == "127.0.0.1"
    health = HealthServer(config.health_host, 0, lambda: (True, {})).start()
    exporter = WorkerExporter(outages=list, busy=lambda: 0, concurrency=1)
    metrics = exporter.start(config.metrics_host, 0)
    try:
        assert health._server.server_address[0] == "127.0.0.1"
        for port in (health.port, metrics):
            for host in ("localhost", f"localhost:{port}", "127.0.0.1", "10.1.2.3:9191",
                         "[fd00::5]:80"):
                assert get(port, host) == 200, (port, host)  # loopback names and any IP
            assert get(port, "rebind.attacker.example") == 403
    finally:
        health.stop()
        exporter.stop()
    allowed = HealthServer("127.0.0.1", 0, lambda: (True, {}),
                           wurk.hosts.HostNames(["probe.internal"])).start()
    try:
        assert get(allowed.port, "probe.internal") == 200
    finally:
        allowed.stop()


def test_the_worker_takes_health_and_metrics_hosts_from_flags() -> None:
    from wurk.cli.worker import build_config

    config, _ = build_config({"health_host": "0.0.0.0", "metrics_host": "::",
                              "health_port": 7434})
    assert (config.health_host, config.metrics_host) == ("0.0.0.0", "::")


# -- 5 ---------------------------------------------------------------------------------------
def test_a_megabyte_job_name_is_cut_before_redis_and_every_label() -> None:
    huge = "J" * 1_000_000
    assert len(job_name({"class": "X", "wrapped": huge})) == NAME_LIMIT
    exporter = WorkerExporter(outages=list, busy=lambda: 0, concurrency=1)
    exporter.observe(job_name({"class": huge}), "q" * 1_000_000, {}, 5.0, None)
    scrape = b"".join(line for metric in exporter.registry.collect()
                      for line in [json.dumps([s.labels for s in metric.samples]).encode()])
    assert len(scrape) < 50_000


# -- 6 ---------------------------------------------------------------------------------------
def test_a_limiter_of_absurd_interval_and_history_of_absurd_values_show(
        client: TestClient, r: redis.Redis) -> None:
    keys = Keys()
    r.sadd(keys.limiter_list, "tiny")
    r.hset(keys.limiter("tiny"), mapping={"type": "bucket",
                                          "options": json.dumps({"size": 5,
                                                                 "interval": 1e-300})})
    r.zadd(keys.history, {json.dumps({"t": 1e308, "processed": 1e308}): 253402300800,
                          json.dumps({"t": time.time(), "processed": "nan"}): time.time()})
    for path in ("/limits/", "/api/limits", "/history/", "/history/?period=72h"):
        assert client.get(path).status_code == 200, path
    row = client.get("/api/limits").json()["limiters"][0]
    assert row["problem"]  # shown as a problem of that limiter


def test_history_holding_a_number_past_a_floats_range_shows(
        client: TestClient, config: wurk.Config, r: redis.Redis) -> None:
    """A sample's number of 400 digits (JSON reads it as an int no float holds) made the
    History tab answer 500 for as long as the sample was kept (a day); it reads as 0."""
    from wurk.metrics.history import read_history

    keys = Keys()
    r.zadd(keys.history, {json.dumps({"t": time.time(), "processed": 10**400, "failed": 2,
                                      "queues": {"default": -(10**400)},
                                      "latency": {"default": 10**400}}): time.time()})
    for path in ("/history/", "/history/?period=72h"):
        assert client.get(path).status_code == 200, path
    [sample] = read_history(config, 3600)
    assert (sample.get("processed"), sample.get("failed")) == (0.0, 2.0)
    assert sample.queues == {"default": 0.0} and sample.latency == {"default": 0.0}


# -- 7 ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("options", [{"queue": ""}, {"queue": 5}, {"queue": "a|b"},
                                     {"retry": "<script>"}, {"unique_for": -1},
                                     {"tags": "x"}, {"retry_for": "soon"}])
def test_enqueue_now_refuses_stored_options_the_push_would_refuse(
        client: TestClient, r: redis.Redis, options: dict[str, Any]) -> None:
    keys = Keys()
    lid = "0123456789abcdef"
    r.sadd(keys.periodic, lid)
    r.hset(keys.loop(lid), mapping={"schedule": "* * * * *", "klass": "Loop::Job",
                                    "options": json.dumps(options), "tz": "", "paused": "0"})
    answer = client.post(f"/periodic/{lid}", data={"action": "enqueue",
                                                   "csrf_token": token(client)})
    assert answer.status_code in (303, 400), answer.text[:300]
    assert r.llen("queue:default") == 0


# -- 8 ---------------------------------------------------------------------------------------
def test_batch_pages_stay_fast_over_big_sets(client: TestClient, r: redis.Redis) -> None:
    keys = Keys()
    now = time.time()
    pipe = r.pipeline(transaction=False)
    for n in range(20_000):
        bid = f"bid{n:06d}"
        pipe.hset(keys.batch(bid), mapping={"total": 1, "pending": 1, "failures": 1,
                                            "created_at": now, "tags": '["big"]'})
        pipe.sadd(keys.batch_died, bid)
        pipe.zadd(keys.batches, {bid: now + n})
        pipe.sadd(keys.batch_tag("big"), bid)
        if n % 2000 == 1999:
            pipe.execute()
    payloads = {json.dumps({"class": "X", "args": [], "jid": f"{n:024x}", "bid": "bid000001",
                            "queue": "default", "error_message": True}): now + n
                for n in range(200_000)}
    for start in range(0, 200_000, 20_000):
        r.zadd(keys.retry, dict(list(payloads.items())[start:start + 20_000]))
    r.sadd(keys.batch("bid000001", "failed"), *(f"{n:024x}" for n in range(5000)))
    for path in ("/dead-batches/", "/dead-batches/?page=400", "/batches/bid000001",
                 "/batches/?tag=big", "/batches/?page=10000000000000000000",
                 "/api/batches/dead", "/retries"):
        # this process's CPU (the app runs in it), not the wall clock a loaded machine stretches
        started = time.process_time()
        assert client.get(path).status_code == 200, path
        assert time.process_time() - started < 3.0, path


# -- 10 --------------------------------------------------------------------------------------
class Careful(wurk.Job, name="Hostile::Careful"):
    batch_callbacks = ("finish",)

    def on_success(self, status: Any, options: Any) -> None: ...

    def finish(self, status: Any, options: Any) -> None: ...

    def drop_everything(self, status: Any, options: Any) -> None:
        raise AssertionError("never called by a stored target")


def test_a_stored_callback_target_names_only_callbacks() -> None:
    assert resolve("Hostile::Careful", "success")
    assert resolve("Hostile::Careful#finish", "success")
    assert resolve("Hostile::Careful#on_success", "complete")
    for target in ("Hostile::Careful#drop_everything", "Hostile::Careful#__init__",
                   "Hostile::Careful#perform"):
        with pytest.raises(wurk.BatchError, match="is not a callback of Hostile::Careful"):
            resolve(target, "success")
