"""Features docs/scaling.md had not yet run on a real cluster, run on the session's
``redis_cluster`` (3 primaries + 3 replicas): each pushes to a queue other than ``default``
(another keyspace, on another primary), its job runs once, and every key it wrote is in
that queue's hash slot, on that slot's primary. (Reliable push and the outbox are refused
on a cluster: tests/unit/test_cluster_layout.py.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from redis.crc import key_slot

import wurk
from tests.helpers.cluster import Cluster, slot_of
from tests.helpers.wait import wait_until
from wurk.client import core
from wurk.inprocess import InProcessWorker

SETTINGS: dict[str, Any] = dict(heartbeat_interval=0.5, poll_interval_average=0.2,
                                scheduler_initial_wait=0, fetch_timeout=0.5,
                                reaper_interval=1, concurrency=2)
done: list[Any] = []
seen: list[tuple[int, str]] = []  # (execution, the state's key) per execution's first item
lock = threading.Lock()


@wurk.job(name="ClusterFeature::Plain")
def plain(n: int) -> None:
    with lock:
        done.append((n, wurk.current_job()["queue"]))  # type: ignore[index]


class ClusterWalk(wurk.IterableJob, name="ClusterFeature::Walk"):
    """Five items; the first execution stops before item 2 (``Interrupted``, as a worker's
    stop or ``max_iteration_runtime`` makes it), the second resumes there."""

    def build_enumerator(self, *, cursor: int | None) -> Any:
        return wurk.iteration.items([0, 1, 2, 3, 4], cursor=cursor)

    def each_iteration(self, item: int) -> None:
        if item == 0 or (item == 2 and self.executions == 2):
            with lock:
                seen.append((self.executions, self._key()))
        if item == 2 and self.executions == 1:
            raise wurk.Interrupted()
        with lock:
            done.append(item)


@pytest.fixture
def cluster(redis_cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    redis_cluster.flush()
    core._indexed.clear()  # the cluster's index was flushed with the rest
    done.clear()
    seen.clear()
    monkeypatch.setenv("REDIS_URL", redis_cluster.url)
    yield redis_cluster


def _in_their_slots(cluster: Cluster, queue: str) -> dict[str, int]:
    """Every key is in its hash tag's slot on that slot's primary, and the queue's keyspace
    holds some: the keys found."""
    keys = cluster.all_keys()
    for key, port in keys.items():
        assert key.startswith("{"), f"{key} is outside the cluster layout"
        tag = key[1:key.index("}")]
        assert tag in {queue, "default"}, f"{key} is in neither {queue}'s keyspace nor default's"
        assert key_slot(key.encode()) == slot_of(tag), key
        assert port == cluster.primary_port(tag), f"{key} on the wrong primary"
    assert any(key.startswith(f"{{{queue}}}:") for key in keys)
    return keys


def test_an_iterable_job_stops_and_resumes_in_its_queue_s_keyspace(cluster: Cluster) -> None:
    """Its state (``it-<jid>``) is in its queue's keyspace, the interrupt link pushes it
    back there, the second execution resumes at the saved item: every item runs once."""
    assert cluster.primary_port("exports") != cluster.primary_port("default")
    config = wurk.configure(queues=["default", "exports"], **SETTINGS)
    jid = ClusterWalk.set(queue="exports").perform_async()
    worker = InProcessWorker(config).start()
    try:
        wait_until(lambda: len(done) == 5, timeout=20, what=f"every item (so far {done})")
        exports = config.shard("exports")
        wait_until(lambda: exports.pool("api").run(
            lambda r: r.exists(exports.keys.iteration(str(jid)))) == 0,
            what="the state deleted once complete")
    finally:
        worker.stop()
        config.close()
    assert done == [0, 1, 2, 3, 4]
    assert seen == [(1, f"{{exports}}:it-{jid}"), (2, f"{{exports}}:it-{jid}")]
    keys = _in_their_slots(cluster, "exports")
    assert "{exports}:stat:processed" in keys and "{default}:queue:exports" not in keys


def test_pushes_wait_for_a_replica_of_their_queue_s_primary(cluster: Cluster) -> None:
    """``push_replicas: 1``: each push (one, bulk, scheduled) is followed by ``WAIT`` on
    its queue's primary, which a replica of that primary confirms (a push too few confirm
    raises ``wurk.RedisUnavailable``); the jobs run once, in that keyspace."""
    replica = cluster.replica_of(cluster.primary_of("mail")).client()
    wait_until(lambda: replica.info("replication").get("master_link_status") == "up",
               timeout=60, what="the replica synced with mail's primary")  # a fresh cluster's
    config = wurk.configure(queues=["mail"], push_replicas=1, push_replica_timeout=2,
                            **SETTINGS)
    assert plain.set(queue="mail").perform_async(0) is not None
    assert all(plain.set(queue="mail").perform_bulk([[1], [2]]))
    assert plain.set(queue="mail").perform_in(0.1, 3) is not None
    try:  # what WAIT confirmed is on the replica already
        replica.execute_command("READONLY")  # a cluster replica answers reads then
        assert replica.llen("{mail}:queue:mail") == 3 and replica.zcard("{mail}:schedule") == 1
    finally:
        replica.close()
    worker = InProcessWorker(config).start()
    try:
        wait_until(lambda: len(done) == 4, timeout=20, what=f"every job (so far {done})")
    finally:
        worker.stop()
        config.close()
    assert sorted(done) == [(0, "mail"), (1, "mail"), (2, "mail"), (3, "mail")]
    _in_their_slots(cluster, "mail")
