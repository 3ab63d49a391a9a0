"""Redis Cluster's layout on a real cluster (the session's ``redis_cluster``: 3 primaries + 3
replicas of ``redis-server --cluster-enabled yes``): each feature's path run by a worker on
the cluster, every key it wrote in its queue's hash slot, the numbers of every keyspace added
up, a slot moved by a failover followed (docs/scaling.md)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from redis.crc import key_slot

import wurk
import wurk.limiter
from tests.helpers.cluster import Cluster, slot_of
from tests.helpers.fake_node import fake_node, handshake_or
from tests.helpers.server import free_port
from tests.helpers.wait import wait_until
from tests.web.conftest import browse
from wurk.api.stats import ShardStats
from wurk.cli import run
from wurk.client import core
from wurk.connections.cluster import SlotLocator, parse
from wurk.connections.lease import Lease
from wurk.connections.pool import RedisPool
from wurk.inprocess import InProcessWorker
from wurk.web import create_app

QUEUES = ["default", "mail", "exports"]  # three keyspaces, on three different primaries
runs: Counter[str] = Counter()
lock = threading.Lock()


def _ran(what: str) -> None:
    with lock:
        runs[what] += 1


@wurk.job(name="ClusterIt::Plain")
def plain(n: int) -> None:
    _ran(f"plain:{wurk.current_job()['queue']}")  # type: ignore[index]


@wurk.job(name="ClusterIt::Failing", retry=1, retry_in=lambda count, exc: 0.1)
def failing() -> None:
    _ran("failing")
    raise RuntimeError("fails on purpose")


@wurk.job(name="ClusterIt::Unique", unique_for=60)
def unique(key: int) -> None:
    _ran("unique")


@wurk.job(name="ClusterIt::Limited")
def limited() -> None:
    with wurk.limiter.concurrent("cluster-it", 1, lock_timeout=30).within_limit():
        _ran("limited")


@wurk.job(name="ClusterIt::Windowed")
def windowed() -> None:
    with wurk.limiter.window("cluster-it-window", 1, "hour", wait_timeout=0).within_limit():
        _ran("windowed")


@wurk.job(name="ClusterIt::Add", result_ttl=60)
def add(a: int, b: int) -> int:
    return a + b


@wurk.job(name="ClusterIt::Later")
def later() -> None:
    _ran("later")


@pytest.fixture
def on_cluster(redis_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
               ) -> Iterator[wurk.Config]:
    """The process-wide configuration on the cluster, every keyspace empty."""
    redis_cluster.flush()
    core._indexed.clear()  # the cluster's index was flushed with the rest
    runs.clear()
    monkeypatch.setenv("REDIS_URL", redis_cluster.url)
    config = wurk.configure(queues=QUEUES, concurrency=6, heartbeat_interval=0.5,
                            poll_interval_average=0.2, scheduler_initial_wait=0,
                            fetch_timeout=0.5, reaper_interval=1)
    yield config
    config.close()


def test_each_feature_runs_on_the_cluster_and_every_key_is_in_its_queue_slot(
        on_cluster: wurk.Config, redis_cluster: Cluster) -> None:
    assert len({redis_cluster.primary_port(q) for q in QUEUES}) == 3
    for queue in QUEUES:
        plain.set(queue=queue).perform_bulk([[n] for n in range(3)])
    plain.set(queue="mail").perform_in(1, 99)  # scheduled
    failing.set(queue="exports").perform_async()  # retried once, then dead
    assert unique.set(queue="mail").perform_async(1) is not None
    assert unique.set(queue="mail").perform_async(1) is None  # held by the first
    limited.set(queue="exports").perform_async()
    with wurk.via("exports"):  # a push goes to its queue's keyspace whatever via says
        plain.set(queue="default").perform_async(3)
    worker = InProcessWorker(on_cluster).start()
    try:
        wait_until(lambda: runs["plain:default"] == 4 and runs["plain:mail"] == 4
                   and runs["plain:exports"] == 3 and runs["failing"] == 2
                   and runs["unique"] == 1 and runs["limited"] == 1, timeout=30,
                   what=f"every job run once (so far {dict(runs)})")
        exports = on_cluster.shard("exports")
        wait_until(lambda: exports.pool("api").run(
            lambda r: r.zcard(exports.keys.dead)) == 1, what="the failing job dead")
    finally:
        worker.stop()
    keys = redis_cluster.all_keys()
    # Each keyspace's own record of the queue, its retry/dead sets, its stats;
    # the limiter in the configuration's own keyspace (default's).
    assert "{mail}:queues" in keys and "{exports}:dead" in keys
    assert "{default}:stat:processed" in keys and "{mail}:stat:processed" in keys
    assert any(key.startswith("{default}:lmtr") for key in keys)
    assert any(key.startswith("{mail}:j|") for key in keys)  # execution metrics
    assert not any(key.startswith("{exports}:queue:default") for key in keys)
    for key, port in keys.items():
        tag = key[1:key.index("}")] if key.startswith("{") else None
        assert tag in {*QUEUES, "default"}, f"{key} is outside the cluster layout"
        assert key_slot(key.encode()) == slot_of(tag), key
        assert port == redis_cluster.primary_port(tag), f"{key} on the wrong primary"


def test_locked_reads_a_unique_lock_in_its_queue_s_keyspace(on_cluster: wurk.Config) -> None:
    jid = unique.set(queue="mail").perform_async(1)
    assert jid is not None
    # the push took it in mail's keyspace; locked finds it there whatever config it is given
    assert wurk.unique.locked("mail", "ClusterIt::Unique", [1]) == jid
    assert wurk.unique.locked("mail", "ClusterIt::Unique", [1],
                              config=on_cluster.shard("exports")) == jid
    with wurk.via("exports"):
        assert wurk.unique.locked("mail", "ClusterIt::Unique", [1]) == jid
    assert wurk.unique.locked("default", "ClusterIt::Unique", [1]) is None


def test_results_async_pushes_and_cancel_reach_the_queue_s_keyspace(
        on_cluster: wurk.Config) -> None:
    """A push's result handle waits in its queue's keyspace; an async push is routed as a
    sync one is; ``wurk.cancel`` given the queue's keyspace finds the job there."""
    handle = add.set(queue="mail").perform_async(2, 3)
    pushed = asyncio.run(wurk.Client(on_cluster).apush(
        {"class": "ClusterIt::Later", "queue": "exports", "args": []}))
    waiting = later.set(queue="mail").perform_in(3600)
    cancelled = wurk.cancel(waiting, config=on_cluster.shard("mail"))
    assert cancelled.removed_from == ["schedule"]
    worker = InProcessWorker(on_cluster).start()
    try:
        assert handle.result(timeout=20) == 5
        wait_until(lambda: runs["later"] == 1, timeout=20, what="the async push run")
    finally:
        worker.stop()
    assert pushed is not None and runs["later"] == 1


def test_a_job_over_its_limit_is_rescheduled_in_its_queue_s_keyspace(
        on_cluster: wurk.Config) -> None:
    """One use an hour: the second job meets the limit (kept in the default keyspace) and
    goes back to its own queue's scheduled set, to run later."""
    windowed.set(queue="exports").perform_bulk([[], []])
    exports = on_cluster.shard("exports")
    worker = InProcessWorker(on_cluster).start()
    try:
        wait_until(lambda: runs["windowed"] == 1 and exports.pool("api").run(
            lambda r: r.zcard(exports.keys.schedule)) == 1, timeout=20,
            what="one run and one job rescheduled")
    finally:
        worker.stop()
    raw = exports.pool("api").run(lambda r: r.zrange(exports.keys.schedule, 0, -1))
    assert json.loads(raw[0])["overrated"] == 1


def test_a_partitioned_queue_runs_on_the_cluster_in_its_keyspace(
        redis_cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """Partitions (docs/partitions.md) keep their lists and counts under the queue's
    prefix, so in its keyspace: fetched round-robin there, every key in the queue's slot."""
    redis_cluster.flush()
    core._indexed.clear()
    runs.clear()
    monkeypatch.setenv("REDIS_URL", redis_cluster.url)
    config = wurk.configure(queues=["mail"], concurrency=2, partitions={"mail": 1},
                            heartbeat_interval=0.5, poll_interval_average=0.2,
                            fetch_timeout=0.5)
    for account in ("a", "b"):
        plain.set(queue="mail", partition=account).perform_bulk([[n] for n in range(3)])
    assert {"{mail}:wurk:part:mail:a", "{mail}:wurk:part:mail:b"} <= set(
        redis_cluster.all_keys())  # the partitions' lists, in the queue's keyspace
    worker = InProcessWorker(config).start()
    try:
        wait_until(lambda: runs["plain:mail"] == 6, timeout=20, what="every partition's jobs")
    finally:
        worker.stop()
        config.close()
    for key in redis_cluster.all_keys():
        tag = key[1:key.index("}")]
        assert key_slot(key.encode()) == slot_of(tag), key


def test_every_keyspace_is_counted_by_stats_the_dashboard_and_the_cli(
        on_cluster: wurk.Config, redis_cluster: Cluster,
        capsys: pytest.CaptureFixture[str]) -> None:
    for queue in QUEUES:
        plain.set(queue=queue).perform_bulk([[n] for n in range(2)])
    plain.set(queue="reports").perform_async(0)  # a queue no worker serves: the index knows
    assert on_cluster.shard_names() == ["default", "mail", "exports", "reports"]
    found = ShardStats(on_cluster)
    assert [s.name for s in found.shards] == ["default", "mail", "exports", "reports"]
    assert [s.numbers["enqueued"] for s in found.shards if s.numbers] == [2, 2, 2, 1]
    assert found.total()["enqueued"] == 7 and found.complete
    with browse(create_app(on_cluster)) as client:
        page = client.get("/shards/").text
        mail = client.get("/shards/mail/queues").text
    assert 'data-shard="all"' in page
    assert page.split('data-shard="all"', 1)[1].split("</tr>", 1)[0].count(">7<") == 1
    assert "mail" in mail
    capsys.readouterr()
    assert run(["stats", "--json"]) == 0  # a row per keyspace, and their sum
    printed = json.loads(capsys.readouterr().out)
    assert [row["enqueued"] for row in printed["shards"]] == [2, 2, 2, 1]
    assert printed["total"]["enqueued"] == 7 and printed["complete"] is True


def test_a_hostile_queue_index_lists_only_what_can_be_a_keyspace(
        on_cluster: wurk.Config, redis_cluster: Cluster) -> None:
    """The index is read from Redis, so untrusted: names that cannot be a keyspace are left
    out, and an index of the wrong type lists nothing more than the served queues."""
    index = on_cluster.keys.cluster_queues
    direct = redis_cluster.primary_of("default").client()
    try:
        direct.sadd(index, "reports", "a:b", "{x}", "é" * 3, "q" * 65, b"\xff\xfe")
        assert on_cluster.shard_names() == ["default", "mail", "exports", "reports"]
        direct.delete(index)
        direct.set(index, "not a set")
        assert on_cluster.shard_names() == ["default", "mail", "exports"]
        with browse(create_app(on_cluster)) as client:
            assert client.get("/shards/").status_code == 200
    finally:
        direct.delete(index)
        direct.close()


def test_a_slot_moved_by_a_failover_is_followed(on_cluster: wurk.Config,
                                                redis_cluster: Cluster) -> None:
    """A pool's connections reach the old primary, which answers MOVED once demoted: the
    pool retires them and asks the nodes where the slot is now (no error reaches wurk)."""
    mail = on_cluster.shard("mail")
    pool = mail.pool("client")
    assert pool.run(lambda r: r.set(mail.keys.queue("mail") + ":probe", 1))
    old = redis_cluster.primary_of("mail")
    replica = redis_cluster.replica_of(old)
    redis_cluster.fail_over_to(replica, "mail")  # the replica takes over, the primary demoted
    # The session's other tests ask where each keyspace is; three primaries still serve.
    deadline = time.monotonic() + 10
    while True:  # the first command after may meet the demoted node mid-handover
        try:
            value = pool.run(lambda r: r.get(mail.keys.queue("mail") + ":probe"))
            break
        except wurk.RedisUnavailable:
            assert time.monotonic() < deadline
    assert value == b"1"
    connection = pool.take_connection()
    assert connection.port == replica.port  # the pool's connections now reach the new one
    pool.release_connection(connection)


def test_a_held_connection_that_reads_moved_is_dropped_and_the_slot_followed(
        on_cluster: wurk.Config, redis_cluster: Cluster) -> None:
    """A lease (a processor's fetch, a job's ``wurk.redis()``) holds its connection across
    commands: once the old primary is demoted and answers MOVED, the lease drops that
    connection, so its next command asks the nodes again and reaches the new primary
    instead of meeting MOVED on the old node for good."""
    mail = on_cluster.shard("mail")
    key = mail.keys.queue("mail") + ":held"
    lease = Lease(mail.pool("client"))
    try:
        assert lease.call("SET", key, "1") == b"OK"
        old = redis_cluster.primary_of("mail")
        assert lease._connection.port == old.port
        replica = redis_cluster.replica_of(old)
        redis_cluster.fail_over_to(replica, "mail")
        demoted = old.client(socket_timeout=5)
        try:  # the old primary knows it was demoted: it answers MOVED, not the value
            wait_until(lambda: demoted.execute_command("ROLE")[0] in (b"slave", "slave"),
                       what="the old primary to become a replica")
        finally:
            demoted.close()

        def answered() -> bool:
            try:  # a node that has not heard of the failover yet may still name the old one
                return lease.call("GET", key) == b"1" and lease._connection.port == replica.port
            except wurk.RedisUnavailable:  # MOVED from the demoted node
                return False

        wait_until(answered, what="the lease's command on the new primary")
    finally:
        lease.release()


def test_a_plain_url_to_a_cluster_node_still_names_the_cluster_form(
        redis_cluster: Cluster) -> None:
    config = wurk.Config()
    object.__setattr__(config, "redis_url", f"redis://127.0.0.1:{redis_cluster.nodes[0].port}")
    with pytest.raises(wurk.UnsupportedServer, match=r"redis\+cluster://"):
        for n in range(50):  # some key of these is on another primary: MOVED
            wurk.Client(config).push({"class": "X", "args": [], "queue": f"q{n}"})
    config.close()


def test_one_seed_node_finds_the_primary_of_any_keyspace(redis_cluster: Cluster) -> None:
    """A keyspace's pool asks the nodes it knows: one seed, whichever, finds every slot."""
    for queue in QUEUES:
        pool = RedisPool(f"redis+cluster://127.0.0.1:{redis_cluster.nodes[0].port}/{queue}")
        connection = pool.take_connection()
        try:
            connection.send_command("PING")
            assert connection.read_response() in (b"PONG", "PONG")
            assert connection.port == redis_cluster.primary_port(queue)
        finally:
            pool.release_connection(connection)
            pool.close()


def test_a_seed_that_is_down_is_passed_over_and_asked_last(redis_cluster: Cluster) -> None:
    """The locator asks the node that answered last first: a dead seed costs one failed
    connect, not one per new connection."""
    dead = free_port()  # nothing listens there
    live = redis_cluster.live().port
    locator = SlotLocator(parse(f"redis+cluster://127.0.0.1:{dead},127.0.0.1:{live}/mail"),
                          {"socket_connect_timeout": 1})
    assert locator.primary()[1] == redis_cluster.primary_port("mail")
    assert locator._known[0] == ("127.0.0.1", live)


def test_a_node_the_cluster_no_longer_names_is_forgotten() -> None:
    """The nodes asked are the seeds and those the last ``CLUSTER SLOTS`` answer named: a
    node dropped from the cluster (resharded away, rebuilt elsewhere) is not asked again,
    so the list does not grow with every address a cluster ever had."""
    gone = free_port()

    def slots(port: int, *others: int) -> bytes:
        nodes = [port, *others]
        reply = b"*%d\r\n" % len(nodes)
        for index, node in enumerate(nodes):  # node i serves slot i only; node 0 the rest
            start, end = (0, 16383) if index == 0 else (index, index)
            reply += (b"*3\r\n:%d\r\n:%d\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n"
                      % (start, end, node))
        return reply

    answers: list[bytes] = []

    def cluster_slots(command: list[bytes]) -> bytes | None:
        return answers[0] if command[0].upper() == b"CLUSTER" else None

    with fake_node(handshake_or(cluster_slots)) as port:
        locator = SlotLocator(parse(f"redis+cluster://127.0.0.1:{port}/mail"),
                              {"socket_timeout": 1})
        answers[:] = [slots(port, gone)]
        locator.primary()
        assert ("127.0.0.1", gone) in locator._known
        answers[:] = [slots(port)]  # the cluster dropped that node
        locator.primary()
        assert locator._known == [("127.0.0.1", port)]


@pytest.mark.parametrize("entry", [0, 1, 2])
def test_a_node_answering_a_garbled_slot_map_is_passed_over(redis_cluster: Cluster,
                                                             entry: int) -> None:
    """Replies read from Redis are untrusted: a node whose ``CLUSTER SLOTS`` reply has no
    shape a cluster sends is passed over as one that does not answer, and the next is asked."""
    replies = [b"*1\r\n*1\r\n:0\r\n",
               b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$1\r\nx\r\n$1\r\ny\r\n",
               b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$1\r\nx\r\n:99999\r\n"]

    def cluster_slots(command: list[bytes]) -> bytes | None:
        return replies[entry] if command[0].upper() == b"CLUSTER" else None

    with fake_node(handshake_or(cluster_slots)) as garbled:
        live = redis_cluster.live().port
        locator = SlotLocator(parse(f"redis+cluster://127.0.0.1:{garbled},"
                                    f"127.0.0.1:{live}/mail"), {"socket_timeout": 1})
        assert locator.primary()[1] == redis_cluster.primary_port("mail")
