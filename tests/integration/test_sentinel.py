"""Sentinel and the durability knob, against real servers.

1. A ``redis+sentinel://`` configuration — the sync and async client, the dashboard and the
   CLI — reaches the primary, and after its SIGKILL each reaches the replica the sentinels
   promote, within the failover's time + 5 s, with no new configuration and no restart.
2. ``push_replicas``: a push waits for its replicas on its own connection (plain, unique,
   batch and reliable pushes alike), and raises ``RedisUnavailable`` saying so when too few
   confirm.

The 10,000-job failover with workers is ``tests/chaos/test_sentinel.py``.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import wurk
from tests.helpers.sentinel import SERVICE, Node, Topology, skip_reason
from tests.helpers.server import Server, free_port, start_server
from tests.helpers.wait import wait_until
from tests.web.conftest import browse
from wurk.cli import run
from wurk.web import create_app

REASON = skip_reason()
needs_sentinel = pytest.mark.skipif(REASON is not None, reason=REASON or "")
# Each process follows within the failover's own time plus the longest backoff step.
FOLLOW_WITHIN = 5.0


@wurk.job(name="SentinelProbe")
def probe(n: int) -> None:
    """Never run here: pushed and counted."""


@pytest.fixture
def topology(tmp_path: Path) -> Iterator[Topology]:
    started = Topology.start(tmp_path / "sentinel")
    yield started
    started.stop()


def _enqueued(dashboard: object) -> int | None:
    try:
        reply = dashboard.get("/stats")  # type: ignore[attr-defined]
    except Exception:
        return None
    return int(reply.json()["sidekiq"]["enqueued"]) if reply.status_code == 200 else None


@needs_sentinel
def test_clients_dashboard_and_cli_follow_a_failover(
        topology: Topology, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("REDIS_URL", topology.url)
    config = wurk.configure(socket_timeout=2.0)
    probe.perform_async(1)
    asyncio.run(probe.aperform_async(2))
    with browse(create_app(config)) as dashboard:
        assert _enqueued(dashboard) == 2
        assert topology.data[0].client().llen("queue:default") == 2  # on the first primary
        wait_until(lambda: topology.data[1].client().llen("queue:default") == 2,
                   what="the replica having both")
        old, killed = topology.kill_primary()
        promoted = topology.wait_for_promotion(old)
        deadline = promoted + FOLLOW_WITHIN

        wait_until(_pushes, deadline - time.monotonic(), "a sync push to the new primary")
        assert asyncio.run(probe.aperform_async(4)) is not None
        wait_until(lambda: _enqueued(dashboard) == 4, max(deadline - time.monotonic(), 0.1),
                   "the dashboard reading the new primary")
    new = topology.primary()
    assert new is topology.data[1] and new.client().llen("queue:default") == 4
    code = run(["stats", "--json"])
    out, _ = capsys.readouterr()
    assert code == 0 and json.loads(out)["enqueued"] == 4
    print(f"\nfailover {promoted - killed:.1f} s; every client followed within "
          f"{time.monotonic() - killed:.1f} s of the kill")


@needs_sentinel
def test_a_dead_sentinel_is_passed_over_and_a_push_with_no_primary_raises(
        topology: Topology, monkeypatch: pytest.MonkeyPatch) -> None:
    """sentinel.md: "Name several: wurk asks each in turn until one answers", and "A push made
    while there is no primary raises wurk.RedisUnavailable"."""
    dead = free_port()  # nothing listens there: the first sentinel named never answers
    url = topology.url.replace("redis+sentinel://", f"redis+sentinel://127.0.0.1:{dead},")
    monkeypatch.setenv("REDIS_URL", url)
    assert wurk.configure(socket_timeout=2.0).redis_url == url
    assert probe.perform_async(1) is not None
    assert topology.primary().client().llen("queue:default") == 1
    old, _ = topology.kill_primary()  # the sentinels name it for a second more
    with pytest.raises(wurk.RedisUnavailable):
        probe.perform_async(2)
    topology.wait_for_promotion(old)

    wait_until(_pushes, FOLLOW_WITHIN, "a push to the new primary, past the dead sentinel")


@needs_sentinel
def test_a_sentinel_answering_an_error_is_passed_over(
        topology: Topology, redis_server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """sentinel.md: "wurk asks each in turn until one answers": a server named as a sentinel
    that answers ``SENTINEL MASTERS`` with an error (here a plain Redis) is passed over."""
    url = topology.url.replace("redis+sentinel://",
                               f"redis+sentinel://127.0.0.1:{redis_server.port},")
    monkeypatch.setenv("REDIS_URL", url)
    wurk.configure(socket_timeout=2.0)
    assert probe.perform_async(1) is not None
    assert asyncio.run(probe.aperform_async(2)) is not None
    assert topology.primary().client().llen("queue:default") == 2


@needs_sentinel
@pytest.mark.parametrize("form", ["sync", "async"])
def test_a_sentinel_that_never_answers_costs_one_socket_timeout(
        topology: Topology, monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    """sentinel.md: a sentinel "that does not answer within the socket timeout" is passed
    over: asked once, not again and again by redis-py's own retries."""
    with socket.socket() as silent:  # takes connections (the kernel's backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = topology.url.replace(
            "redis+sentinel://", f"redis+sentinel://127.0.0.1:{silent.getsockname()[1]},")
        monkeypatch.setenv("REDIS_URL", url)
        wurk.configure(socket_timeout=1.0)
        started = time.monotonic()
        if form == "sync":
            assert probe.perform_async(1) is not None
        else:
            assert asyncio.run(probe.aperform_async(1)) is not None
        assert time.monotonic() - started < 2.0


@needs_sentinel
def test_a_primary_demoted_not_killed_is_followed_without_a_failed_push(
        topology: Topology, monkeypatch: pytest.MonkeyPatch) -> None:
    """sentinel.md: "A primary demoted rather than killed (SENTINEL FAILOVER …) answers
    READONLY: the connection that read it is retired and the command, refused and not
    applied, is tried once more on a fresh one" — so once the sentinels name the new primary
    the first push (sync and async) after it goes through, none raising."""
    monkeypatch.setenv("REDIS_URL", topology.url)
    wurk.configure(socket_timeout=2.0)
    probe.perform_async(1)  # the pools hold connections to the first primary
    assert asyncio.run(probe.aperform_async(2)) is not None
    old = topology.primary()
    wait_until(lambda: topology.data[1].client().llen("queue:default") == 2,
               what="the replica having both")
    topology.sentinels[0].client().execute_command("SENTINEL", "FAILOVER", SERVICE)
    topology.wait_for_promotion(old)
    # The sentinels turn the old primary into a replica once they see it still answering as
    # a primary: seconds after the promotion, more on a loaded machine.
    wait_until(lambda: _role(old) == "slave", 45,
               what="the old primary demoted")
    probe.perform_async(3)
    assert asyncio.run(probe.aperform_async(4)) is not None
    assert topology.data[1].client().llen("queue:default") == 4


def _refused_push(form: str) -> tuple[str, float]:
    """The message of the ``RedisUnavailable`` a push raises, and how long it took."""
    started = time.monotonic()
    with pytest.raises(wurk.RedisUnavailable) as raised:
        if form == "sync":
            probe.perform_async(1)
        else:
            asyncio.run(probe.aperform_async(1))
    return str(raised.value), time.monotonic() - started


@pytest.mark.parametrize("form", ["sync", "async"])
def test_all_sentinels_down_is_said_per_sentinel_in_one_short_line(
        monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    """sentinel.md: with every sentinel down, a push (and the worker's boot line) names each
    sentinel and why it did not answer, at once: not redis-py's client objects."""
    ports = [free_port(), free_port()]  # nothing listens on them
    monkeypatch.setenv("REDIS_URL", "redis+sentinel://" + ",".join(
        f"127.0.0.1:{port}" for port in ports) + f"/{SERVICE}/0")
    wurk.configure(socket_timeout=1.0)
    message, took = _refused_push(form)
    assert took < 1.5, took
    assert "redis.client" not in message and "Redis<" not in message, message
    for port in ports:
        said = rf"sentinel 127\.0\.0\.1:{port}: ConnectionError: [^;]*connecting to"
        assert re.search(said, message), message
    assert len(message) < 800, message


@needs_sentinel
@pytest.mark.parametrize("form", ["sync", "async"])
def test_a_service_the_sentinels_do_not_monitor_is_named_with_what_they_do(
        topology: Topology, monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    """sentinel.md: a SERVICE no sentinel monitors (a typo) is said as such, with the names
    the sentinels do monitor, rather than as a Redis that cannot be reached."""
    monkeypatch.setenv("REDIS_URL", topology.url.replace(f"/{SERVICE}/", "/nosuch/"))
    wurk.configure(socket_timeout=1.0)
    message, took = _refused_push(form)
    assert took < 1.5, took
    for node in topology.sentinels:
        assert (f"sentinel 127.0.0.1:{node.port}: monitors no master named 'nosuch' "
                f"(it monitors '{SERVICE}')") in message, message


def _pushes() -> bool:
    """Whether a push (of 3) went through: False while there is no primary to take it."""
    try:
        probe.perform_async(3)
    except wurk.RedisUnavailable:
        return False
    return True


# -- push_replicas ------------------------------------------------------------------------------
@pytest.fixture
def replica(redis_server: Server, tmp_path: Path) -> Iterator[Server]:
    started = start_server(tmp_path / "replica",
                           extra=["--replicaof", "127.0.0.1", str(redis_server.port)])
    client = redis.Redis(port=started.port, decode_responses=True)
    wait_until(lambda: client.info("replication")["master_link_status"] == "up",
               what="the replica in sync")
    yield started
    started.stop()


def _durable(timeout: float = 0.3, **settings: object) -> wurk.Config:
    return wurk.configure(push_replicas=1, push_replica_timeout=timeout, **settings)


def test_a_push_returns_once_a_replica_has_it(replica: Server) -> None:
    # A replica on a loaded machine may take longer than the refusal tests' 0.3 s to confirm.
    _durable(timeout=2.5)
    follower = redis.Redis(port=replica.port)
    probe.perform_async(1)
    # WAIT returned: the replica has the job already, with no waiting here.
    assert follower.llen("queue:default") == 1
    probe.perform_in(60, 2)
    assert follower.zcard("schedule") == 1
    probe.set(unique_for=60).perform_async(3)
    assert follower.llen("queue:default") == 2 and follower.keys("unique:*")
    asyncio.run(probe.set(unique_for=60).aperform_async(4))
    assert follower.llen("queue:default") == 3
    batch = wurk.Batch()
    with batch.jobs():
        probe.perform_async(5)
    assert follower.llen("queue:default") == 4 and follower.exists(f"b-{batch.bid}")
    _durable(timeout=2.5, reliable_push="memory")  # reliable push's own path waits as well
    probe.perform_async(6)
    assert follower.llen("queue:default") == 5


def test_a_bulk_push_and_wurk_push_wait_for_a_replica_once_per_1000_jobs(
        redis_server: Server, replica: Server) -> None:
    """docs: push_replicas covers `perform_bulk` and `wurk.push` too; bulk pushes wait once
    per 1,000 jobs."""
    _durable(timeout=2.5)
    follower = redis.Redis(port=replica.port)
    primary = redis.Redis(port=redis_server.port)
    primary.config_resetstat()
    probe.perform_bulk([[n] for n in range(2500)])
    assert follower.llen("queue:default") == 2500  # on the replica when the call returned
    assert primary.info("commandstats")["cmdstat_wait"]["calls"] == 3
    wurk.push({"class": "SentinelProbe", "args": [1]})
    assert follower.llen("queue:default") == 2501
    assert primary.info("commandstats")["cmdstat_wait"]["calls"] == 4


@pytest.mark.parametrize("kind", ["plain", "unique", "batch", "async", "reliable",
                                  "reliable-async"])
def test_a_push_no_replica_confirms_raises_saying_so(kind: str) -> None:
    _durable(**({"reliable_push": "memory"} if kind.startswith("reliable") else {}))
    with pytest.raises(wurk.RedisUnavailable,
                       match=r"the primary took it, but 0 of the 1 replica\(s\) push_replicas "
                             r"asks for confirmed it within 0.3 s"):
        if kind in ("plain", "reliable"):
            probe.perform_async(1)
        elif kind == "unique":
            probe.set(unique_for=60).perform_async(1)
        elif kind in ("async", "reliable-async"):
            asyncio.run(probe.aperform_async(1))
        else:
            with wurk.Batch().jobs():
                probe.perform_async(1)


def _role(node: Node) -> str | None:
    """The node's replication role; None while it cannot answer — the sentinels close its
    clients as they turn it into a replica, the test's own connection among them."""
    client = node.client(socket_timeout=2)
    try:
        return str(client.info("replication")["role"])
    except redis.RedisError:
        return None
    finally:
        client.close()
