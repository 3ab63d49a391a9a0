"""A real Redis Cluster on loopback: 3 primaries and 3 replicas (or N primaries, no replicas).

1. ``Cluster.start(directory, primaries=3, replicas=1)`` starts Debian's ``redis-server
   --cluster-enabled yes`` once per node on a free port, joins them with ``redis-cli
   --cluster create … --cluster-replicas R --cluster-yes`` and waits until every node says
   ``cluster_state:ok`` and knows every other; ``url`` is the ``redis+cluster://`` URL wurk is
   given.
2. ``primary_of(keyspace)`` is the node serving a keyspace's slot now (asked of a live node);
   ``kill(node)`` SIGKILLs it; ``wait_for_promotion(old, slot)`` waits until another node
   serves that slot and the cluster is ``ok`` again.
3. ``skip_reason()``: why a cluster test cannot run here (no ``redis-server`` or
   ``redis-cli`` on the PATH), said by the test rather than skipped silently.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.crc import key_slot

from tests.helpers.sentinel import Node
from tests.helpers.wait import wait_until

__all__ = ["Cluster", "skip_reason"]

# A primary is failed over after this long without an answer: short, so the test's failover
# is quick; a loaded 2-core machine still answers a PING well within it.
NODE_TIMEOUT_MS = 2000


def skip_reason() -> str | None:
    missing = [name for name in ("redis-server", "redis-cli") if not shutil.which(name)]
    if missing:
        return (f"needs Debian's {' and '.join(missing)} on the PATH (apt-get install "
                "redis-server; .ci/run installs it)")
    return None


def cluster_port() -> int:
    """A free loopback port a cluster node can use: its bus listens 10,000 above it, so
    the port is at most 55535 and that one is free too."""
    while True:
        port = random.randint(20000, 55000)
        try:
            for candidate in (port, port + 10000):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port


def slot_of(keyspace: str) -> int:
    return key_slot(f"{{{keyspace}}}".encode())


@dataclass
class Cluster:
    directory: Path
    nodes: list[Node] = field(default_factory=list)

    @classmethod
    def start(cls, directory: Path, *, primaries: int = 3, replicas: int = 1,
              appendonly: bool = False) -> Cluster:
        """With ``appendonly`` a node stopped and started again keeps its data."""
        directory.mkdir(parents=True, exist_ok=True)
        found = cls(directory)
        try:
            found._start(primaries, replicas, appendonly)
        except BaseException:
            found.stop()
            raise
        return found

    def _start(self, primaries: int, replicas: int, appendonly: bool) -> None:
        for index in range(primaries * (1 + replicas)):
            port = cluster_port()
            node_dir = self.directory / f"node{index}"
            node_dir.mkdir(exist_ok=True)
            node = Node(f"node{index}", port, [
                "redis-server", "--port", str(port), "--bind", "127.0.0.1",
                "--cluster-enabled", "yes", "--cluster-config-file",
                str(node_dir / "nodes.conf"), "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                "--dir", str(node_dir), "--save", "",
                "--appendonly", "yes" if appendonly else "no",
                "--maxmemory-policy", "noeviction"], self.directory)
            node.start()
            self.nodes.append(node)
        if primaries == 1 and replicas == 0:
            # redis-cli refuses a cluster of fewer than 3 primaries: one node takes all.
            client = self.nodes[0].client()
            client.execute_command("CLUSTER ADDSLOTSRANGE", 0, 16383)
            client.close()
        elif primaries < 3:
            self._assign_by_hand(primaries)
        else:
            addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
            subprocess.run(["redis-cli", "--cluster", "create", *addresses,
                            "--cluster-replicas", str(replicas), "--cluster-yes"],
                           check=True, capture_output=True, timeout=60)
        wait_until(self.healthy, timeout=60, what="cluster_state:ok on every node")

    def _assign_by_hand(self, primaries: int) -> None:
        first = self.nodes[0].client()
        for node in self.nodes[1:]:
            first.execute_command("CLUSTER MEET", "127.0.0.1", node.port)
        first.close()
        share = 16384 // primaries
        for index, node in enumerate(self.nodes):
            start = index * share
            end = 16383 if index == primaries - 1 else start + share - 1
            client = node.client()
            client.execute_command("CLUSTER ADDSLOTSRANGE", start, end)
            client.close()

    def healthy(self) -> bool:
        for node in self.nodes:
            if not node.running:
                continue
            try:
                client = node.client(socket_timeout=2)
                info = client.execute_command("CLUSTER INFO")
                nodes = client.execute_command("CLUSTER NODES")
                client.close()
            except redis.RedisError:
                return False
            if info.get("cluster_state") != "ok" or len(nodes) < len(self.nodes):
                return False
        return True

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{node.port}"
                                             for node in self.nodes[:3])

    def live(self) -> Node:
        return next(node for node in self.nodes if node.running)

    def slots(self) -> list[tuple[int, int, int]]:
        """``(start, end, primary port)`` of every slot range, as a live node says."""
        client = self.live().client(socket_timeout=2)
        try:
            ranges = client.execute_command("CLUSTER SLOTS")
        finally:
            client.close()
        return [(int(r[0]), int(r[1]), int(r[2][1])) for r in ranges]

    def primary_port(self, keyspace: str) -> int:
        slot = slot_of(keyspace)
        return next(port for start, end, port in self.slots() if start <= slot <= end)

    def primary_of(self, keyspace: str) -> Node:
        port = self.primary_port(keyspace)
        return next(node for node in self.nodes if node.port == port)

    def primaries(self) -> list[Node]:
        ports = {port for _, _, port in self.slots()}
        return [node for node in self.nodes if node.port in ports]

    def all_keys(self) -> dict[str, int]:
        """Every key on every primary, with the port of the primary holding it."""
        found: dict[str, int] = {}
        for node in self.primaries():
            direct = node.client()
            found.update({key.decode(): node.port for key in direct.scan_iter(count=1000)})
            direct.close()
        return found

    def replica_of(self, primary: Node) -> Node:
        """A replica of ``primary`` (a node whose CLUSTER NODES line names it as master)."""
        client = primary.client(socket_timeout=5)
        try:
            myself = client.execute_command("CLUSTER MYID")
        finally:
            client.close()
        myself = myself.decode() if isinstance(myself, bytes) else str(myself)
        for node in self.nodes:
            if node is primary or not node.running:
                continue
            direct = node.client(socket_timeout=5)
            try:
                info = direct.execute_command("ROLE")
            finally:
                direct.close()
            if info[0] in (b"slave", "slave") and int(info[2]) == primary.port:
                return node
        raise LookupError(f"no replica of {primary.name} (id {myself})")

    def fail_over_to(self, replica: Node, keyspace: str, timeout: float = 60.0) -> None:
        """A manual ``CLUSTER FAILOVER`` on ``replica``, once its link to its primary is up
        and synced (a replica still syncing lets the failover time out unannounced: it is
        asked again until it serves ``keyspace``)."""
        direct = replica.client(socket_timeout=5)
        try:
            def linked() -> bool:
                info = direct.info("replication")
                return (info.get("master_link_status") == "up"
                        and not info.get("master_sync_in_progress"))

            wait_until(linked, timeout=timeout, what=f"{replica.name}'s link to its primary")
            deadline = time.monotonic() + timeout
            while True:
                direct.execute_command("CLUSTER FAILOVER")
                asked = time.monotonic()
                while time.monotonic() - asked < 8:
                    with contextlib.suppress(redis.RedisError, StopIteration):
                        if self.primary_port(keyspace) == replica.port and self.healthy():
                            return
                    time.sleep(0.1)
                if time.monotonic() > deadline:
                    raise AssertionError(f"{replica.name} did not take over {keyspace} "
                                         f"within {timeout:.0f} s of CLUSTER FAILOVER")
        finally:
            direct.close()

    def kill(self, node: Node) -> None:
        node.kill()

    def wait_for_promotion(self, old: Node, keyspace: str, timeout: float = 60.0) -> float:
        """Seconds until a node other than ``old`` serves ``keyspace`` and the cluster is ok."""
        started = time.monotonic()

        def promoted() -> bool:
            try:
                return self.primary_port(keyspace) != old.port and self.healthy()
            except (redis.RedisError, StopIteration):
                return False

        wait_until(promoted, timeout=timeout, what="a replica promoted")
        return time.monotonic() - started

    def flush(self) -> None:
        for node in self.primaries():
            client = node.client()
            client.flushall()
            client.close()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
