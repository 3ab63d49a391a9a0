"""Shards against two real servers: where pushes go, one worker serving both, and the numbers.

The session's server is the default shard; a second server, started once for the module and
flushed before each test, is shard ``eu``.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.faults import FAST
from tests.helpers.server import Server, free_port, start_server
from tests.helpers.wait import wait_until
from tests.web.conftest import browse
from wurk.api import ProcessSet, Queue, RetrySet, ShardStats
from wurk.cli import run
from wurk.launcher import Launcher
from wurk.web import create_app

ran: list[tuple[str, Any]] = []
ran_lock = threading.Lock()


@wurk.job(name="Shards::Home")
def home(n: int) -> None:
    with ran_lock:
        ran.append(("home", n))


@wurk.job(name="Shards::Euro", shard="eu")
def euro(n: int) -> None:
    with ran_lock:
        ran.append(("eu", n))


@wurk.job(name="Shards::Failing", shard="eu", retry=3)
def failing() -> None:
    raise RuntimeError("fails on purpose, on shard eu")


@pytest.fixture(scope="module")
def second(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    started = start_server(tmp_path_factory.mktemp("shard-eu"))
    yield started
    started.stop()


@pytest.fixture
def eu(second: Server) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(second.url, decode_responses=True)
    client.flushall()
    ran.clear()
    yield client
    client.close()


@pytest.fixture
def sharded(second: Server, eu: redis.Redis) -> wurk.Config:
    return wurk.configure(shards={"eu": second.url})


def queued(client: redis.Redis, queue: str = "default") -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in client.lrange(f"queue:{queue}", 0, -1)]


# -- where pushes go ----------------------------------------------------------------------------
def test_via_pushes_land_on_the_named_shard(sharded: wurk.Config, r: redis.Redis,
                                            eu: redis.Redis) -> None:
    home.perform_async(1)
    with wurk.via("eu") as chosen:
        assert chosen is sharded.shard("eu") and wurk.default_config() is chosen
        home.perform_async(2)
        wurk.push({"class": "RubyJob", "args": [3]})
        asyncio.run(home.aperform_async(4))
        home.perform_bulk([[5], [6]])
        with wurk.redis() as conn:
            conn.call("SET", "written-here", "1")
        with wurk.via("default"):
            home.perform_async(7)
    assert [job["args"] for job in queued(r)] == [[7], [1]]
    assert sorted(job["args"][0] for job in queued(eu)) == [2, 3, 4, 5, 6]
    assert eu.get("written-here") == "1" and r.get("written-here") is None
    assert all("shard" not in job for job in queued(eu))  # never written into a payload


def test_via_wins_over_the_jobs_own_shard_and_takes_a_config(
        sharded: wurk.Config, r: redis.Redis, eu: redis.Redis) -> None:
    with wurk.via("default"):
        euro.perform_async(1)
    with wurk.via(sharded.shard("eu")):
        euro.perform_async(2)
    assert [job["args"] for job in queued(r)] == [[1]]
    assert [job["args"] for job in queued(eu)] == [[2]]


def test_jobs_are_routed_by_class_and_by_set(sharded: wurk.Config, r: redis.Redis,
                                            eu: redis.Redis) -> None:
    euro.perform_async(1)
    home.perform_async(2)
    home.set(shard="eu").perform_async(3)
    euro.set(shard="default").perform_async(4)
    euro.perform_in(60, 5)
    assert sorted(job["args"][0] for job in queued(eu)) == [1, 3]
    assert sorted(job["args"][0] for job in queued(r)) == [2, 4]
    assert eu.zcard("schedule") == 1 and r.zcard("schedule") == 0


def test_set_pool_takes_a_shard_or_a_configuration_as_sidekiqs_set_pool(
        sharded: wurk.Config, r: redis.Redis, eu: redis.Redis, second: Server) -> None:
    """``job.set(pool=...)`` — Sidekiq's ``set(pool: POOL)`` — was refused as an option "not
    JSON-native"; it names the Redis one push goes to: a shard's name, a shard's view, or a
    configuration of its own. The router does not send it elsewhere."""
    wurk.configure(shards={"eu": second.url}, shard_router=lambda name, queue, args: "eu")
    config = wurk.default_config()
    home.set(pool="default").perform_async(1)
    euro.set(pool=config.shard("default")).perform_async(2)
    home.set(pool=config.shard("eu")).perform_async(3)
    own = wurk.Config(key_prefix="own")  # REDIS_URL wins over a redis_url: a prefix tells
    home.set(pool=own).perform_in(60, 4)
    assert [job["args"] for job in queued(r)] == [[2], [1]]
    assert [job["args"] for job in queued(eu)] == [[3]]
    assert r.zcard("own:schedule") == 1 and eu.zcard("schedule") == r.zcard("schedule") == 0
    assert all("pool" not in job and "shard" not in job for job in queued(r) + queued(eu))
    with pytest.raises(wurk.ConfigError, match=r"pool must be a shard's name .* not 5"):
        home.set(pool=5)
    with pytest.raises(wurk.ConfigError, match="mars"):
        home.set(pool="mars").perform_async(5)
    own.close()


@wurk.job(name="Shards::PooledByName", pool="eu")
def pooled_by_name(n: int) -> None: ...


class PooledClass(wurk.Job, name="Shards::PooledClass", pool="eu"):
    def perform(self, n: int) -> None: ...


def test_a_jobs_definition_takes_a_pool_below_via_and_over_the_router(
        second: Server, r: redis.Redis, eu: redis.Redis) -> None:
    """``@wurk.job(pool=...)`` and the class keyword, Sidekiq's ``sidekiq_options pool:``:
    a shard's name was kept as an option and dropped at push (the job went to the default
    shard), a configuration refused. A ``via`` block wins over it; it wins over the router."""
    config = wurk.configure(shards={"eu": second.url}, shard_router=lambda *_: "default")
    own = wurk.Config(key_prefix="own")

    @wurk.job(name="Shards::PooledOwn", pool=own)
    def pooled_own(n: int) -> None: ...

    try:
        pooled_by_name.perform_async(1)
        PooledClass.perform_async(2)
        pooled_own.perform_async(3)
        pooled_by_name.perform_bulk([[4], [5]])
        pooled_own.set(shard="eu").perform_async(8)  # a push's own shard, of the process's
        with wurk.via("default"):
            pooled_by_name.perform_async(6)
            pooled_own.perform_async(7)
        assert sorted(job["args"][0] for job in queued(eu)) == [1, 2, 4, 5, 8]
        assert [job["args"] for job in queued(r)] == [[7], [6]]
        assert [json.loads(raw)["args"] for raw in r.lrange("own:queue:default", 0, -1)] \
            == [[3]]
        assert all("pool" not in job and "shard" not in job for job in queued(eu))
        with pytest.raises(wurk.ConfigError, match="give pool or shard, not both"):
            wurk.job(name="Shards::Both", pool="eu", shard="eu")(lambda: None)
        with pytest.raises(wurk.ConfigError, match=r"pool must be a shard's name .* not 5"):
            wurk.job(name="Shards::Five", pool=5)(lambda: None)
        with pytest.raises(wurk.ConfigError, match="no shard named 'mars'"):
            wurk.job(name="Shards::Mars", pool="mars")(lambda n: None).perform_async(1)
    finally:
        for name in ("Shards::PooledOwn", "Shards::Mars"):
            wurk.registry.unregister(name)
        own.close()
        assert config is wurk.default_config()


def test_a_pushs_own_pool_wins_over_via_as_sidekiqs_set_pool_over_client_via(
        sharded: wurk.Config, r: redis.Redis, eu: redis.Redis) -> None:
    """Inside ``with wurk.via(...)`` an explicit ``set(pool=...)`` (or ``set(shard=...)``)
    gave way to the block; in Sidekiq the push's own pool wins, and here too. The job's
    definition's shard still gives way to the block."""
    own = wurk.Config(key_prefix="own")
    with wurk.via("eu"):
        home.set(pool="default").perform_async(1)
        home.set(shard="default").perform_async(2)
        home.set(pool=sharded).perform_in(60, 3)
        asyncio.run(home.set(pool="default").aperform_async(4))
        home.set(pool=own).perform_async(5)
        euro.set(pool="default").perform_bulk([[6], [7]])
        home.perform_bulk([[8]], pool="default")
        wurk.push({"class": "RubyJob", "args": [9]}, pool="default")
        wurk.push_bulk({"class": "RubyJob", "args": [[10], [11]]}, pool=sharded)
        asyncio.run(wurk.apush_bulk({"class": "RubyJob", "args": [[12]]}, pool="default"))
        home.perform_async(13)  # the block's
        euro.set(shard="default").perform_async(14)
    assert sorted(job["args"][0] for job in queued(r)) == [1, 2, 4, 6, 7, 8, 9, 10, 11, 12, 14]
    assert r.zcard("schedule") == 1 and eu.zcard("schedule") == 0
    assert [job["args"] for job in queued(eu)] == [[13]]
    assert [json.loads(raw)["args"] for raw in r.lrange("own:queue:default", 0, -1)] == [[5]]
    assert all("shard" not in job for job in queued(r))
    with pytest.raises(wurk.ConfigError, match="give pool or shard, not both"):
        home.set(pool="eu", shard="eu")
    with pytest.raises(wurk.ConfigError, match=r"perform_bulk\(\): pool must be .* not 5"):
        home.perform_bulk([[1]], pool=5)  # type: ignore[arg-type]
    with pytest.raises(wurk.ConfigError, match=r"wurk.push: pool must be"):
        wurk.push({"class": "RubyJob", "args": []}, pool="")
    own.close()


def test_a_due_job_is_not_sent_elsewhere_by_a_shard_field_read_from_redis(
        second: Server, r: redis.Redis, eu: redis.Redis) -> None:
    """A push's own pool wins over ``via``; a stored payload's ``shard`` field (written by
    hand) does not: the client scheduler sends a due job to its own shard's queue."""
    from wurk.scheduled import Scheduler

    config = wurk.configure(shards={"eu": second.url}, scheduler="client")
    eu.zadd("schedule", {json.dumps({"class": "RubyJob", "args": [1], "jid": "a" * 24,
                                     "queue": "default", "shard": "default",
                                     "created_at": time.time()}): time.time() - 1})
    Scheduler(config.shard("eu")).enqueue_due()
    assert [job["args"] for job in queued(eu)] == [[1]] and not queued(r)


def test_a_router_splits_a_bulk_push_by_each_jobs_shard(
        second: Server, r: redis.Redis, eu: redis.Redis) -> None:
    def by_region(job: str, queue: str, args: list[Any]) -> str | None:
        return "eu" if args and args[0] % 2 else None

    wurk.configure(shards={"eu": second.url}, shard_router=by_region)
    jids = home.perform_bulk([[n] for n in range(6)])
    assert sorted(job["args"][0] for job in queued(eu)) == [1, 3, 5]
    assert sorted(job["args"][0] for job in queued(r)) == [0, 2, 4]
    by_jid = {job["jid"]: job["args"][0] for job in [*queued(r), *queued(eu)]}
    assert [by_jid[jid] for jid in jids] == list(range(6))  # jids in the order pushed
    later = time.time() + 60
    home.perform_bulk([[n] for n in range(4)], at=[later + n for n in range(4)])
    assert [int(score) for _, score in eu.zrange("schedule", 0, -1, withscores=True)] \
        == [int(later) + 1, int(later) + 3]  # each job's own time went with it
    assert r.zcard("schedule") == 2


def test_a_batch_and_its_jobs_stay_on_one_shard(sharded: wurk.Config, r: redis.Redis,
                                                eu: redis.Redis) -> None:
    with wurk.via("eu"):
        batch = wurk.Batch()
        with batch.jobs():
            home.perform_async(1)
            euro.set(shard="default").perform_async(2)  # not routed inside a jobs block
    assert eu.exists(f"b-{batch.bid}") and not r.exists(f"b-{batch.bid}")
    assert len(queued(eu)) == 2 and not queued(r)


def test_an_unknown_shard_is_refused_naming_the_known_ones(sharded: wurk.Config) -> None:
    with pytest.raises(wurk.ConfigError, match="no shard named 'us'; the shards are "
                                               "'default', 'eu'"):
        home.set(shard="us").perform_async(1)
    with pytest.raises(wurk.ConfigError, match="no shard named 'us'"), wurk.via("us"):
        pass


# -- one worker serving both --------------------------------------------------------------------
def test_one_worker_serves_both_shards_each_on_its_own_redis(
        second: Server, r: redis.Redis, eu: redis.Redis) -> None:
    config = wurk.configure(**FAST, shards={"eu": second.url},
                            capsules=[wurk.Capsule(name="europe", shard="eu", concurrency=2)])
    worker = wurk.InProcessWorker(config).start()
    try:
        home.perform_bulk([[n] for n in range(20)])
        euro.perform_bulk([[n] for n in range(20)])
        failing.perform_async()
        wait_until(lambda: len(ran) == 40, what="both shards' jobs")
        wait_until(lambda: RetrySet(config.shard("eu")).size() == 1, what="the retry on eu")
        assert sorted(ran) == sorted([("home", n) for n in range(20)]
                                     + [("eu", n) for n in range(20)])
        assert RetrySet(config).size() == 0  # booked where the job came from
        [on_eu] = ProcessSet(config.shard("eu")).iterate()
        [at_home] = ProcessSet(config).iterate()
        assert on_eu.identity == at_home.identity == worker.identity
        assert on_eu.queues == ["default"] and "europe" in on_eu.info["capsules"]
        assert "europe" not in at_home.info["capsules"]
    finally:
        worker.stop()
    assert not eu.smembers("processes") and not r.smembers("processes")
    # Each shard counts what ran from it (the failure among eu's).
    assert (r.get("stat:processed"), r.get("stat:failed") or "0") == ("20", "0")
    assert (eu.get("stat:processed"), eu.get("stat:failed")) == ("21", "1")


@wurk.job(name="Shards::FromEu", shard="eu")
def from_eu() -> None:
    with wurk.redis() as conn:  # the processor's own connection: the shard it fetched from
        conn.call("SET", "written-by-job", "1")
    # Not routed: to the default shard, wherever this job came from. Pushed last, so the
    # test that waits for it to run finds the write above done.
    home.perform_async(99)


def test_what_belongs_to_the_process_is_the_default_shard_s(
        second: Server, r: redis.Redis, eu: redis.Redis) -> None:
    # scaling.md: lifecycle hooks fire once, the health check and metrics ports are bound
    # once, leader election runs on the default shard only; another shard's StatsD metrics
    # carry shard:<name>; a push from a running job goes to the default shard unless routed,
    # and wurk.redis() inside it reaches the shard the job was fetched from.
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    listener.settimeout(0.2)
    health = free_port()
    config = wurk.configure(**FAST, shards={"eu": second.url}, health_port=health,
                            metrics_port=free_port(),
                            statsd=f"127.0.0.1:{listener.getsockname()[1]}",
                            statsd_tags=["env:test"],
                            capsules=[wurk.Capsule(name="europe", shard="eu", concurrency=1)])
    fired: list[str] = []
    for event in ("startup", "shutdown"):
        config.on(event, lambda event=event: fired.append(event))
    worker = wurk.InProcessWorker(config).start()
    try:
        wait_until(config.is_leader, what="the default shard's leader")
        assert r.exists("dear-leader") and not eu.exists("dear-leader")
        from_eu.perform_async()
        wait_until(lambda: ("home", 99) in ran, what="the job's push, run at home")
        assert eu.get("written-by-job") == "1" and r.get("written-by-job") is None
        lines: list[str] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any("Shards::FromEu" in x for x in lines):
            try:
                lines += listener.recv(65536).decode().splitlines()
            except TimeoutError:
                continue
        [count] = [x for x in lines if x.startswith("wurk.jobs.count:") and "Shards::FromEu" in x]
        assert count.endswith(",env:test,shard:eu")
        with urllib.request.urlopen(f"http://127.0.0.1:{health}/", timeout=5) as answer:
            assert answer.status == 200
        assert fired == ["startup"]
    finally:
        worker.stop()
        listener.close()
    assert fired == ["startup", "shutdown"]


def _health(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        with refused:
            return refused.code, json.loads(refused.read())


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return str(answer.read().decode())


def test_another_shard_s_outage_fails_the_health_check_naming_it(
        tmp_path: Path, r: redis.Redis) -> None:
    """metrics.md: a worker serving several shards answers 200 only while every shard's
    heartbeat lands and every shard's capsules fetch; a shard it cannot reach makes it 503
    naming that shard, and ``wurk_redis_outage{shard=...}`` 1. ``wurk_concurrency`` and
    ``wurk_busy_threads`` are the whole process's. (A server of this test's own is stopped.)"""
    own = start_server(tmp_path / "shard-eu")
    try:
        health, metrics = free_port(), free_port()
        config = wurk.configure(**FAST, shards={"eu": own.url}, concurrency=1,
                                health_port=health, metrics_port=metrics,
                                capsules=[wurk.Capsule(name="europe", shard="eu",
                                                       concurrency=2)])
        worker = wurk.InProcessWorker(config).start()
        try:
            wait_until(lambda: _health(health)[0] == 200, what="both shards healthy")
            text = _scrape(metrics)
            assert "wurk_concurrency 3.0" in text  # 1 at home + 2 on eu
            assert "wurk_busy_threads 0.0" in text
            for component, shard in (("heartbeat", "default"), ("heartbeat", "eu"),
                                     ("fetch (capsule default)", "default"),
                                     ("fetch (capsule europe)", "eu")):
                assert f'wurk_redis_outage{{component="{component}",shard="{shard}"}} 0.0' \
                    in text
            own.stop()
            wait_until(lambda: _health(health)[0] == 503, what="the health check's 503")
            status, answer = _health(health)
            assert status == 503 and answer["status"] == "redis unreachable"
            assert answer["shards"] == ["eu"]
            assert "eu: heartbeat" in answer["failing"] or \
                "eu: fetch (capsule europe)" in answer["failing"]
            assert all(part.startswith("eu: ") for part in answer["failing"])
            wait_until(lambda: 'wurk_redis_outage{component="heartbeat",shard="eu"} 1.0'
                       in _scrape(metrics), what="eu's heartbeat outage scraped")
            text = _scrape(metrics)
            assert 'wurk_redis_outage{component="heartbeat",shard="default"} 0.0' in text
            assert 'wurk_redis_outages_total{component="heartbeat",shard="eu"} 1.0' in text
            assert len(re.findall(r"^wurk_redis_outage\{", text, re.MULTILINE)) == 4
        finally:
            worker.stop(timeout=0)
    finally:
        own.stop()


def test_a_lone_launcher_refuses_a_capsule_bound_to_a_shard(second: Server) -> None:
    config = wurk.Config(shards={"eu": second.url},
                         capsules=[wurk.Capsule(name="europe", shard="eu")])
    with pytest.raises(wurk.ConfigError, match=r"capsule 'europe' serves shard 'eu': start "
                                               r"this worker with wurk\.sharding\.launcher_for"):
        Launcher(config)


def test_a_capsule_of_an_unknown_shard_is_refused_at_build() -> None:
    with pytest.raises(wurk.ConfigError, match="capsule 'europe': no shard named 'eu'"):
        wurk.Config(capsules=[wurk.Capsule(name="europe", shard="eu")])


@pytest.mark.parametrize(("shards", "says"), [
    ({"default": "redis://x"}, "is not a shard name"),
    ({"e u": "redis://x"}, "is not a shard name"),
    ({"eu": ""}, "must be a Redis URL"),
    ({"eu": "redis+sentinel://s1"}, "shards: 'eu': a Sentinel URL names the service"),
])
def test_shards_are_checked(shards: dict[str, str], says: str) -> None:
    with pytest.raises(wurk.ConfigError, match=says):
        wurk.Config(shards=shards)


# -- the numbers ---------------------------------------------------------------------------------
def test_shard_stats_count_each_shard_and_the_sum(sharded: wurk.Config, r: redis.Redis,
                                                  eu: redis.Redis) -> None:
    home.perform_bulk([[n] for n in range(3)])
    euro.perform_bulk([[n] for n in range(5)])
    found = ShardStats(sharded)
    assert [(s.name, s.numbers["enqueued"] if s.numbers else None) for s in found.shards] \
        == [("default", 3), ("eu", 5)]
    assert found.total()["enqueued"] == 8 and found.complete


def test_the_dashboard_shows_each_shard_and_all_together(
        sharded: wurk.Config, r: redis.Redis, eu: redis.Redis) -> None:
    home.perform_bulk([[n] for n in range(3)])
    euro.perform_bulk([[n] for n in range(5)])
    with browse(create_app(sharded)) as client:
        page = client.get("/shards/")
        assert page.status_code == 200
        text = page.text
        row = {name: text.split(f'data-shard="{name}"', 1)[1].split("</tr>", 1)[0]
               for name in ("default", "eu", "all")}
        assert ">3<" in row["default"] and ">5<" in row["eu"] and ">8<" in row["all"]
        eu_queue = client.get("/shards/eu/queues")
        assert eu_queue.status_code == 200 and ">5<" in eu_queue.text
        home_queue = client.get("/queues")
        assert ">3<" in home_queue.text and ">5<" not in home_queue.text
        assert client.get("/shards/eu/shards/").status_code == 404  # no tab in a shard's own


def test_a_first_visit_straight_to_a_shard_gets_one_token_its_forms_carry(
        sharded: wurk.Config, r: redis.Redis, eu: redis.Redis) -> None:
    """The shard's own guard sits inside the dashboard's: one cookie, one token, and the
    page's first action goes through."""
    euro.perform_bulk([[n] for n in range(2)])
    with browse(create_app(sharded), follow_redirects=False) as client:
        for path in ("/shards/eu/", "/shards/eu/queues"):
            client.cookies.clear()
            page = client.get(path)
            cookies = [c for c in page.headers.get_list("set-cookie")
                       if c.startswith("wurk_csrf=")]
            assert len(cookies) == 1 and "Path=/;" in cookies[0]
        found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert found is not None and cookies[0].startswith(f"wurk_csrf={found[1]};")
        done = client.post("/shards/eu/queues/default",
                           data={"csrf_token": found[1], "action": "pause"})
        assert done.status_code == 303
    assert eu.sismember("paused", "default") and not r.sismember("paused", "default")


def test_the_dashboard_names_a_shard_it_cannot_read(r: redis.Redis) -> None:
    config = wurk.configure(shards={"gone": "redis://127.0.0.1:1/0"}, socket_timeout=0.5)
    home.perform_async(1)
    with browse(create_app(config)) as client:
        page = client.get("/shards/")
    assert page.status_code == 200 and "not read: RedisUnavailable" in page.text
    assert "without the shards not read" in page.text


def test_stats_reads_each_redis_url_and_their_sum(
        second: Server, redis_server: Server, r: redis.Redis, eu: redis.Redis,
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    wurk.configure(shards={"eu": second.url})
    home.perform_bulk([[n] for n in range(3)])
    euro.perform_bulk([[n] for n in range(5)])
    assert run(["stats", "--json", "--redis-url", redis_server.url,
                "--redis-url", second.url]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [s["enqueued"] for s in found["shards"]] == [3, 5]
    assert found["total"]["enqueued"] == 8 and found["complete"]
    assert run(["stats", "--redis-url", second.url, "--redis-url", redis_server.url]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:5] == ["REDIS", "PROCESSED", "FAILED", "BUSY", "ENQUEUED"]
    assert table[-1].split()[:5] == ["all", "0", "0", "0", "8"]
    assert run(["stats", "--json", "--redis-url", second.url]) == 0  # one: that Redis alone
    assert json.loads(capsys.readouterr().out)["enqueued"] == 5
    assert Queue("default", wurk.default_config().shard("eu")).size() == 5


# -- the docs' example -------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- run by tests/integration/test_shards.py -->\n```python\n"


def test_the_routing_example_of_docs_scaling_md_runs_as_it_says(
        second: Server, redis_server: Server, eu: redis.Redis) -> None:
    """docs/scaling.md's example, its shards pointed at this test's servers (``us`` is
    the session server's db 1)."""
    page = (ROOT / "docs" / "scaling.md").read_text(encoding="utf-8")
    code = page.split(MARKER, 1)[1].split("```", 1)[0]
    us_url = redis_server.url.rsplit("/", 1)[0] + "/1"
    code = code.replace("redis://redis-eu/0", second.url).replace("redis://redis-us/0", us_url)
    us = redis.Redis.from_url(us_url, decode_responses=True)
    us.flushdb()
    try:
        exec(compile(code, "docs/scaling.md", "exec"), {})
        assert sorted(j["args"][0] for j in queued(eu)) == [8, 42]
        assert sorted((j["class"], j["args"]) for j in queued(us)) == [
            ("Report", ["us-17"]), ("resize", [7])]
    finally:
        wurk.registry.unregister("resize")
        us.flushdb()
        us.close()


def test_the_client_scheduler_moves_a_due_job_to_its_own_shard_s_queue(
        second: Server, r: redis.Redis, eu: redis.Redis) -> None:
    # A retry or scheduled job lives in its shard's set: coming due, it goes to that shard's
    # queue, as the atomic scheduler's script moves it — never where the router would send a
    # new push now (the job was pushed by via or by its own shard option, which beat it).
    from wurk.scheduled import Scheduler

    def elsewhere(job: str, queue: str, args: list[Any]) -> str | None:
        return "default"

    config = wurk.configure(shards={"eu": second.url}, shard_router=elsewhere,
                            scheduler="client")
    with wurk.via("eu"):
        home.perform_in(60, 1)
    euro.perform_in(60, 2)
    assert eu.zcard("schedule") == 2
    for member in eu.zrange("schedule", 0, -1):
        eu.zadd("schedule", {member: time.time() - 1})  # come due now
    Scheduler(config.shard("eu")).enqueue_due()
    assert sorted(job["args"][0] for job in queued(eu)) == [1, 2]
    assert not queued(r)


def test_an_interrupted_iterable_job_goes_back_to_its_own_shard(
        second: Server, r: redis.Redis, eu: redis.Redis) -> None:
    # Its cursor is kept on the shard it ran from: pushed again anywhere else, it would
    # start over from the first item (docs/iterable-jobs.md), whatever the router says now.
    from wurk.iteration.handler import InterruptHandler

    def elsewhere(job: str, queue: str, args: list[Any]) -> str | None:
        return "default"

    config = wurk.configure(shards={"eu": second.url}, shard_router=elsewhere)
    payload = {"class": "Shards::Home", "args": [1], "queue": "default",
               "jid": "0123456789abcdef01234567", "created_at": time.time()}
    InterruptHandler(config.shard("eu")).push_again(payload, "default")
    assert [job["jid"] for job in queued(eu)] == ["0123456789abcdef01234567"]
    assert not queued(r)


def test_a_routed_bulk_push_is_checked_whole_before_any_shard_gets_a_job(
        second: Server, r: redis.Redis, eu: redis.Redis) -> None:
    # Split by the router, a bulk push is refused as an unsplit one is: before anything is
    # pushed. Each part used to be checked alone: three times for six jobs passed as three
    # for each shard's three, and a bad argument list in the second part came after the
    # first part was pushed.
    def by_region(job: str, queue: str, args: Any) -> str | None:
        return "eu" if isinstance(args, list) and args and args[0] % 2 else None

    wurk.configure(shards={"eu": second.url}, shard_router=by_region)
    later = time.time() + 60
    with pytest.raises(wurk.InvalidPayload, match="'at' has 3 times for 6 jobs"):
        wurk.push_bulk({"class": "Shards::Home",
                        "args": [[n] for n in range(6)], "at": [later] * 3})
    with pytest.raises(wurk.InvalidPayload, match="a list of argument lists"):
        wurk.push_bulk({"class": "Shards::Home", "args": [[1], [0], 7]})
    assert not queued(r) and not queued(eu)
    assert not r.zcard("schedule") and not eu.zcard("schedule")


def test_a_routed_bulk_push_failing_on_a_later_shard_says_which_shards_got_their_part(
        second: Server, r: redis.Redis, eu: redis.Redis) -> None:
    # The part for the default shard went, then shard eu's part was refused: the error said
    # neither, so a caller could only push all six again (the default shard's three twice).
    def by_region(job: str, queue: str, args: Any) -> str | None:
        return "eu" if args and args[0] % 2 else None

    wurk.configure(shards={"eu": second.url}, shard_router=by_region)
    args: list[list[Any]] = [[0], [1], [2], [3, {1}], [4], [5]]  # {1}: not JSON
    with pytest.raises(wurk.PartlyPushed) as raised:
        wurk.push_bulk({"class": "Shards::Home", "args": args})
    exc = raised.value
    # Its own type: a retry of the whole push on the part's error would run three twice.
    assert not isinstance(exc, wurk.InvalidArguments)
    assert exc.shards_pushed == ["default"] and exc.shards_unpushed == ["eu"]
    assert exc.pushed == [0, 2, 4] and exc.unpushed == [1, 3, 5]
    assert sorted(job["jid"] for job in queued(r)) \
        == sorted(jid for jid in exc.jids if jid is not None)
    assert [exc.jids[i] is None for i in range(6)] == [False, True, False, True, False, True]
    assert not queued(eu)
    assert "shard 'eu'" in str(exc) and "[1, 3, 5]" in str(exc)
    assert isinstance(exc.error, wurk.InvalidArguments) and exc.__cause__ is exc.error
    # Pushing only the jobs not pushed, mended, completes the push without a duplicate.
    wurk.push_bulk({"class": "Shards::Home", "args": [[1], [3], [5]]})
    assert sorted(job["args"][0] for job in queued(eu)) == [1, 3, 5]
    assert len(queued(r)) == 3


def test_a_routed_bulk_push_failing_on_its_first_part_raises_the_error_as_it_was(
        second: Server, r: redis.Redis, eu: redis.Redis) -> None:
    def by_region(job: str, queue: str, args: Any) -> str | None:
        return "eu" if args and args[0] % 2 else None

    wurk.configure(shards={"eu": second.url}, shard_router=by_region)
    with pytest.raises(wurk.InvalidArguments) as raised:  # nothing went: no PartlyPushed
        wurk.push_bulk({"class": "Shards::Home", "args": [[0, {1}], [1]]})
    assert not isinstance(raised.value, wurk.PartlyPushed)
    assert not queued(r) and not queued(eu)


def test_an_async_routed_bulk_push_and_a_partitioned_perform_bulk_say_what_went(
        second: Server, r: redis.Redis, eu: redis.Redis) -> None:
    def by_region(job: str, queue: str, args: Any) -> str | None:
        return "eu" if args and args[0] % 2 else None

    wurk.configure(shards={"eu": second.url}, shard_router=by_region)
    with pytest.raises(wurk.PartlyPushed) as raised:
        asyncio.run(wurk.apush_bulk({"class": "Shards::Home",
                                     "args": [[0], [1, {1}], [2]]}))
    assert raised.value.pushed == [0, 2] and raised.value.unpushed == [1]
    assert isinstance(raised.value.error, wurk.InvalidArguments)
    r.delete("queue:default")
    # By partition, then by shard: partition "a" went whole (to both shards), then
    # partition "b"'s part for eu failed after its part for the default shard went.
    by_part = wurk.job(name="Shards::ByPart", partition_by=lambda n, tag, extra=None: tag)(
        lambda n, tag, extra=None: None)
    with pytest.raises(wurk.PartlyPushed) as partly:
        by_part.perform_bulk([[0, "a"], [1, "a"], [2, "b"], [3, "b", {1}], [4, "a"]])
    exc = partly.value
    assert exc.pushed == [0, 1, 2, 4] and exc.unpushed == [3]
    assert exc.shards_pushed == ["default", "eu"] and exc.shards_unpushed == ["eu"]
    assert len(queued(r)) == 3 and len(queued(eu)) == 1
