"""Redis Cluster without a server: the ``redis+cluster://`` URL, the keyspace layout, a
capsule's processors shared by its queues (or split, with basic fetch), the replies a
cluster pool rides out, and what is refused at boot with the reason (docs/scaling.md)."""

from __future__ import annotations

import pytest
import redis
from sqlalchemy import MetaData, create_engine
from sqlalchemy.orm import scoped_session, sessionmaker

import wurk
from wurk.connections import cluster
from wurk.connections.replies import raise_refusal, retry_replies
from wurk.contrib.sqlalchemy import SQLAlchemyAdapter, outbox_table
from wurk.errors import BatchError, ConfigError, RedisUnavailable, UnsupportedServer
from wurk.keys import keyspace_prefix
from wurk.launcher import Launcher
from wurk.sharding import ShardedLauncher, cluster_capsules, launcher_for, shares_processors
from wurk.workflow import Workflow

URL = "redis+cluster://127.0.0.1:7000,127.0.0.1:7001"


@pytest.fixture
def on_cluster(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setenv("REDIS_URL", URL)  # REDIS_URL wins over redis_url, as in production
    return monkeypatch


def test_the_url_names_seed_nodes_credentials_and_a_keyspace() -> None:
    found = cluster.parse("redis+cluster://bob:s%40cret@a:7000,[::1]:7001,b/mail")
    assert found.nodes == (("a", 7000), ("::1", 7001), ("b", 6379))
    assert (found.username, found.password, found.keyspace) == ("bob", "s@cret", "mail")
    assert found.slot == redis.crc.key_slot(b"{mail}")
    assert cluster.parse(URL).keyspace == "default"
    assert cluster.describe("redis+cluster://bob:secret@a:7000/mail") == \
        "redis+cluster://bob:***@a:7000/mail"
    assert cluster.with_keyspace(URL, "exports") == \
        "redis+cluster://127.0.0.1:7000,127.0.0.1:7001/exports"


@pytest.mark.parametrize(("url", "says"), [
    ("redis+cluster://a:7000/mail/0", "a cluster has no db"),
    ("redis+cluster://a:7000?x=1", "no options"),
    ("redis+cluster://a:99999", "not a TCP port"),
    ("redis+cluster://a:7000/ma{il}", "cannot be a Redis Cluster keyspace"),
])
def test_a_bad_url_is_refused_naming_the_problem(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        cluster.parse(url)


def test_every_key_of_a_queue_carries_its_name_as_hash_tag(on_cluster: pytest.MonkeyPatch
                                                           ) -> None:
    config = wurk.Config(queues=["default", "mail"])
    assert config.is_cluster
    assert config.keys.queue("default") == "{default}:queue:default"
    assert config.keys.cluster_queues == "{default}:wurk:cluster-queues"
    mail = config.shard("mail")
    assert mail.redis_url == f"{URL}/mail" and mail.is_cluster
    assert (mail.keys.queue("mail"), mail.keys.retry, mail.keys.dead, mail.keys.processes) == \
        ("{mail}:queue:mail", "{mail}:retry", "{mail}:dead", "{mail}:processes")
    assert mail.keys.private("mail", "h", 1, "n", 0) == "{mail}:queue:mail|h|1|n|0"
    assert keyspace_prefix("app", "mail") == "app:{mail}"
    prefixed = wurk.Config(key_prefix="app")
    assert prefixed.shard("mail").keys.schedule == "app:{mail}:schedule"
    assert config.shard("mail") is mail  # made once


def test_reliable_fetch_shares_a_capsule_s_processors_by_all_its_queues(
        on_cluster: pytest.MonkeyPatch) -> None:
    """Each queue's launcher gets a capsule of the whole concurrency and starts no thread:
    the capsule's processors are shared (wurk.fetch.keyspaces)."""
    config = wurk.Config(queues=["default,6", "mail,2"], concurrency=10)
    config.capsule("low", queues=["exports", "bulk"], concurrency=1)
    assert shares_processors(config)
    layout = cluster_capsules(config)
    assert {q: [(c.name, c.concurrency, c.queue_names) for c in capsules]
            for q, capsules in layout.items()} == {
        "default": [("default", 10, ["default"])], "mail": [("default", 10, ["mail"])],
        "exports": [("low", 1, ["exports"])], "bulk": [("low", 1, ["bulk"])]}
    launcher = launcher_for(config)
    assert isinstance(launcher, ShardedLauncher)
    assert [(m.capsule.name, m.capsule.concurrency) for m in launcher.shared] == [
        ("default", 10), ("low", 1)]
    assert not any(inner.threads for inner in launcher.launchers)


def test_the_health_check_and_metrics_read_every_keyspace_and_the_shared_processors(
        on_cluster: pytest.MonkeyPatch) -> None:
    """metrics.md: the worker's health check and exporter read every keyspace's heartbeat
    and the processors its capsules share (booked to ``default``), each series once: the
    queues' launchers' own managers, which run no processor, are not read. A shared
    capsule's fetch outage makes the probe fail naming it; ``wurk_concurrency`` is the
    processors the worker runs."""
    from prometheus_client import generate_latest

    from wurk.metrics.prometheus import WorkerExporter

    config = wurk.Config(queues=["default,6", "mail,2"], concurrency=10)
    config.capsule("low", queues=["exports", "bulk"], concurrency=1)
    launcher = launcher_for(config)
    assert isinstance(launcher, ShardedLauncher)
    instruments = launcher.home.instruments
    parts = [(shard, outage.component) for shard, outage in instruments.outages()]
    assert parts == [("default", "heartbeat"), ("mail", "heartbeat"),
                     ("exports", "heartbeat"), ("bulk", "heartbeat"),
                     ("default", "fetch (capsule default)"), ("default", "fetch (capsule low)")]
    assert [outage for _, outage in instruments.outages()][4:] == \
        [manager.outage for manager in launcher.shared]
    assert sum(m.capsule.concurrency for _, m in instruments.fetching()) == 11
    exporter = WorkerExporter(outages=instruments.outages, busy=lambda: 0, concurrency=11,
                              shard_label=True)
    text = generate_latest(exporter.registry).decode()
    series = [line.rsplit(" ", 1)[0] for line in text.splitlines()
              if line.startswith("wurk_redis_outage{")]
    assert len(series) == len(set(series)) == 6
    assert 'wurk_redis_outage{component="fetch (capsule low)",shard="default"}' in series
    probe = instruments.probe()
    launcher.shared[1].outage.failed(RedisUnavailable("no keyspace answered"))
    try:
        healthy, answer = probe()
        assert not healthy and answer["status"] == "redis unreachable"
        assert answer["failing"] == ["default: fetch (capsule low)"]
        assert answer["shards"] == ["default"]
        assert 'wurk_redis_outage{component="fetch (capsule low)",shard="default"} 1.0' \
            in generate_latest(exporter.registry).decode()
    finally:
        launcher.shared[1].outage.ended()


def test_basic_fetch_shares_a_capsule_s_threads_out_by_weight_at_least_one_each(
        on_cluster: pytest.MonkeyPatch) -> None:
    config = wurk.Config(queues=["default,6", "mail,2"], concurrency=10, fetch="basic")
    config.capsule("low", queues=["exports", "bulk"], concurrency=1)
    assert not shares_processors(config)
    split = cluster_capsules(config)
    assert {q: [(c.name, c.concurrency, c.queue_names) for c in capsules]
            for q, capsules in split.items()} == {
        "default": [("default", 8, ["default"])], "mail": [("default", 2, ["mail"])],
        "exports": [("low", 1, ["exports"])], "bulk": [("low", 1, ["bulk"])]}
    launcher = launcher_for(config)
    assert isinstance(launcher, ShardedLauncher) and launcher.shared == []


def test_a_lone_launcher_is_refused_on_a_cluster(on_cluster: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="launcher per queue"):
        Launcher(wurk.Config())


@pytest.mark.parametrize(("settings", "says"), [
    ({"shards": {"eu": "redis://eu"}}, "shards cannot be combined"),
    ({"shard_router": lambda *a: None}, "shard_router cannot be set"),
    ({"key_prefix": "a{b}"}, "holds a brace"),
    ({"queues": ["default", "a:b"]}, "cannot be a Redis Cluster keyspace"),
    ({"periodic": [{"cron": "* * * * *", "job": "Report", "queue": "mail:eu"}]},
     "cannot be a Redis Cluster keyspace"),
    ({"periodic": [{"cron": "* * * * *", "job": "Report", "queue": "mail",
                    "retry_queue": "low"}]},
     "retry_queue 'low' is not supported on Redis Cluster"),
    ({"reliable_push": "memory"}, "reliable_push='memory' is not supported on Redis Cluster"),
    ({"reliable_push": "disk"}, "reliable_push='disk' is not supported on Redis Cluster"),
])
def test_what_cannot_work_on_a_cluster_is_refused_at_boot_with_the_reason(
        on_cluster: pytest.MonkeyPatch, settings: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        wurk.Config(**settings)  # type: ignore[arg-type]


def test_the_outbox_is_refused_on_a_cluster_and_the_transactional_client_accepted(
        on_cluster: pytest.MonkeyPatch) -> None:
    """The relay would push every row into the default keyspace: refused with the reason,
    given a working outbox (SQLAlchemy on SQLite); ``client='transactional'`` pushes at
    commit through the client, which routes each job to its queue's keyspace."""
    engine = create_engine("sqlite://")
    table = outbox_table(MetaData())
    session = scoped_session(sessionmaker(engine))
    with pytest.raises(ConfigError, match="client='outbox' is not supported on Redis Cluster"):
        wurk.Config(client="outbox",
                    transaction=SQLAlchemyAdapter(session, outbox=table, engine=engine))
    assert wurk.Config(client="transactional",
                       transaction=SQLAlchemyAdapter(session)).client == "transactional"
    engine.dispose()


def test_periodic_loops_are_accepted_on_a_cluster(on_cluster: pytest.MonkeyPatch) -> None:
    """A loop pushing to any queue that can be a keyspace boots (wurk.periodic.cluster)."""
    config = wurk.Config(periodic=[{"cron": "* * * * *", "job": "Report", "queue": "mail"},
                                   {"cron": "0 * * * *", "job": "Other"}])
    assert len(config.periodic) == 2
    assert len(cluster_capsules(config)) == 1  # the default queue's launcher leads


def test_a_capsule_bound_to_a_shard_and_a_keyspace_in_the_url_are_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", URL)
    config = wurk.Config()
    config.capsule("eu", queues=["mail"], concurrency=1).shard = "eu"
    with pytest.raises(ConfigError, match="shard cannot be set on Redis Cluster"):
        config.validate()
    monkeypatch.setenv("REDIS_URL", f"{URL}/mail")
    with pytest.raises(ConfigError, match="names no keyspace"):
        wurk.Config()


def test_batches_and_workflows_are_refused_with_the_reason(
        on_cluster: pytest.MonkeyPatch) -> None:
    wurk.configure()
    with pytest.raises(BatchError, match="batches are not supported on Redis Cluster"):
        wurk.Batch()
    with pytest.raises(BatchError, match="workflows are built on batches"):
        Workflow("w")


def test_a_slot_moved_is_an_outage_through_a_cluster_url_and_a_refusal_through_a_plain_one(
        ) -> None:
    moved = redis.exceptions.MovedError("3999 127.0.0.1:7002")
    assert "MOVED" in retry_replies(URL) and "MOVED" not in retry_replies("redis://x")
    with pytest.raises(RedisUnavailable, match="MOVED"):
        raise_refusal(moved, URL)
    with pytest.raises(UnsupportedServer, match=r"redis\+cluster://"):
        raise_refusal(moved, "redis://127.0.0.1:7000/0")
    crossed = redis.exceptions.ClusterCrossSlotError()
    with pytest.raises(UnsupportedServer, match="bug in wurk's Redis Cluster layout"):
        raise_refusal(crossed, URL)


def test_a_push_to_a_queue_that_cannot_be_a_keyspace_is_refused_naming_it(
        on_cluster: pytest.MonkeyPatch) -> None:
    client = wurk.Client(wurk.Config())
    with pytest.raises(wurk.InvalidPayload, match="cannot be a Redis Cluster keyspace"):
        client.push({"class": "Report", "args": [], "queue": "mail:eu"})


def test_a_retry_queue_other_than_the_job_s_queue_is_refused_at_push(
        on_cluster: pytest.MonkeyPatch) -> None:
    """Its retries would land in the job's queue's keyspace, under another queue's name,
    where no worker of that queue looks."""
    client = wurk.Client(wurk.Config())
    with pytest.raises(wurk.InvalidPayload, match="retry_queue 'low' is not supported"):
        client.push({"class": "Report", "args": [], "queue": "mail", "retry_queue": "low"})



def test_a_shard_s_bad_cluster_url_is_refused_when_the_configuration_is_built() -> None:
    """A shard's URL is checked when the configuration is built, a cluster's as any other."""
    with pytest.raises(ConfigError, match=r"^shards: 'eu': Redis Cluster URL: port 99999"):
        wurk.Config(shards={"eu": "redis+cluster://10.0.0.1:99999"})
