"""A Redis Cluster node named by a plain ``redis://`` URL is refused, saying why and naming
the ``redis+cluster://`` form that selects wurk's cluster layout (docs/scaling.md): a worker
at boot, and a push that a cluster node redirects.

Two nodes of the Valkey test server with ``--cluster-enabled yes``, each given half of the
hash slots by hand (``CLUSTER ADDSLOTSRANGE`` and ``CLUSTER MEET``): the least that makes a
node answer ``MOVED``.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator

import pytest
import redis

import wurk
from tests.helpers.server import Server, start_server
from tests.helpers.wait import wait_until
from wurk.launcher import Launcher

SAYS = (r"is a Redis Cluster node, named by a plain URL.*needs its own layout.*"
        r"redis\+cluster://.*docs/scaling.md; Ruby Sidekiq cannot read that layout")


def cluster_port() -> int:
    """A free port whose cluster bus port (10,000 above) is free and valid too."""
    while True:
        port = random.randint(20_000, 50_000)
        try:
            for candidate in (port, port + 10_000):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Server]]:
    tmp_path = tmp_path_factory.mktemp("cluster")
    started = [start_server(tmp_path / f"node-{n}", port=cluster_port(), extra=[
        "--cluster-enabled", "yes", "--cluster-config-file", str(tmp_path / f"nodes-{n}.conf")])
        for n in range(2)]
    clients = [redis.Redis(port=node.port, decode_responses=True) for node in started]
    try:
        clients[0].execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 8191)
        clients[1].execute_command("CLUSTER", "ADDSLOTSRANGE", 8192, 16383)
        clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", started[1].port)
        wait_until(lambda: all(c.cluster("info")["cluster_state"] == "ok" for c in clients),
                   what="the two-node cluster up")
        yield started
    finally:
        for client in clients:
            client.close()
        for node in started:
            node.stop()


def test_a_worker_refuses_a_cluster_node_at_boot(nodes: list[Server]) -> None:
    config = wurk.Config(redis_url=nodes[0].url)
    object.__setattr__(config, "redis_url", nodes[0].url)  # REDIS_URL would win at build
    launcher = Launcher(config)
    with pytest.raises(wurk.UnsupportedServer, match=SAYS):
        launcher.start()
    config.close()


def test_a_push_a_cluster_node_redirects_is_refused_saying_so(nodes: list[Server]) -> None:
    client = redis.Redis(port=nodes[0].port)
    owner = 0 if client.cluster("keyslot", "queues") <= 8191 else 1
    other = nodes[1 - owner]  # does not own the ``queues`` set: it answers MOVED
    config = wurk.Config()
    object.__setattr__(config, "redis_url", other.url)
    with pytest.raises(wurk.UnsupportedServer, match=SAYS):
        wurk.Client(config).push({"class": "Anything", "args": []})
    client.close()
    config.close()
