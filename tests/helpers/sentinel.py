"""A real Sentinel deployment on loopback: one primary, one replica, three sentinels.

1. ``Topology.start(directory)`` starts Debian's ``redis-server`` twice (the second a
   replica of the first) and ``redis-sentinel`` three times, each on a free port, waits
   until the replica is in sync and every sentinel knows the replica and the other
   sentinels; ``url`` is the ``redis+sentinel://`` URL wurk is given.
   With ``replica_link`` the replica replicates through a fault proxy (``link``): holding
   that link back makes a replica that lags, as a slow network or a busy host would.
2. ``kill_primary()`` SIGKILLs the primary (no clean shutdown: what it had not sent to the
   replica is gone); ``wait_for_promotion`` waits until the sentinels name another primary
   and returns when that happened; ``node.start(extra)`` starts a killed node again on its
   port (``["--replicaof", …]``: as a replica of the new primary).
3. ``skip_reason()``: why a Sentinel test cannot run here (no ``redis-server`` or
   ``redis-sentinel`` on the PATH), said by the test rather than skipped silently.
"""

from __future__ import annotations

import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.helpers.proxy import FaultProxy
from tests.helpers.server import free_port
from tests.helpers.wait import wait_until

__all__ = ["SERVICE", "Node", "Topology", "skip_reason"]

SERVICE = "wurkmaster"
# The sentinels call a primary down after this long without an answer. At 1 s a CI run (the
# suite's four workers beside a chaos run's seven processes on 2 cores) once starved the new
# primary that long, and the sentinels failed over a second time; 5 s a loaded machine keeps.
DOWN_AFTER_MS = 5000
FAILOVER_TIMEOUT_MS = 5000
LINKED_FAILOVER_TIMEOUT_MS = 120_000
QUORUM = 2
SENTINELS = 3
STARTUP = 20.0
# Deployments started on fresh ports when one was taken (free_port lets a port go before the
# node binds it, and parallel test workers start servers too).
PORT_TRIES = 3


def skip_reason() -> str | None:
    missing = [name for name in ("redis-server", "redis-sentinel") if not shutil.which(name)]
    if missing:
        return (f"needs Debian's {' and '.join(missing)} on the PATH (apt-get install "
                "redis-server redis-sentinel; .ci/run installs them)")
    return None


class PortTaken(RuntimeError):
    """A node's free port was taken by another process before the node bound it."""


@dataclass
class Node:
    """One process of the deployment, on a fixed port so it can be started again."""

    name: str
    port: int
    args: list[str]
    directory: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self, extra: list[str] | None = None) -> None:
        log = (self.directory / f"{self.name}.log").open("ab")
        self.process = subprocess.Popen([*self.args, *(extra or [])], cwd=self.directory,
                                        stdout=log, stderr=subprocess.STDOUT)
        log.close()
        client = self.client(socket_timeout=1)
        deadline = time.monotonic() + STARTUP
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} did not start: "
                                       f"{(self.directory / f'{self.name}.log').read_text()}"
                                       ) from None
                time.sleep(0.02)
        try:  # the server that answered is this process, not another test's on a reused port
            answered = int(client.info("server")["process_id"])
        finally:
            client.close()
        if answered != self.process.pid:
            self.stop()  # it could not bind: it exits by itself
            raise PortTaken(f"{self.name}: port {self.port} was taken by another server "
                            f"(pid {answered}) between choosing it and starting")

    def client(self, **options: object) -> redis.Redis:
        return redis.Redis(port=self.port, **options)  # type: ignore[arg-type]

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class Topology:
    directory: Path
    data: list[Node] = field(default_factory=list)  # the first is the primary at start
    sentinels: list[Node] = field(default_factory=list)

    link: FaultProxy | None = None  # between replica and primary, when asked for
    failover_timeout_ms: int = FAILOVER_TIMEOUT_MS

    @classmethod
    def start(cls, directory: Path, *, replica_link: bool = False) -> Topology:
        """With ``replica_link``, the replica replicates through a fault proxy (``link``),
        so a test can hold the replication stream back: a replica that lags."""
        directory.mkdir(parents=True, exist_ok=True)
        for attempt in range(PORT_TRIES):
            topology = cls(directory)
            try:
                topology._start(replica_link)
            except PortTaken:
                topology.stop()
                if attempt == PORT_TRIES - 1:
                    raise
                continue  # the whole deployment again, on new ports: each names the others'
            except BaseException:
                topology.stop()
                raise
            return topology
        raise AssertionError("unreachable")

    def _start(self, replica_link: bool) -> None:
        primary = self._data_node("primary", [])
        primary.start()
        upstream = primary.port
        if replica_link:
            self.link = FaultProxy(primary.port).start()
            upstream = self.link.port
            # The sentinels repoint a replica that replicates from an address other than
            # the primary's once failover-timeout has passed: not within a test's run.
            self.failover_timeout_ms = LINKED_FAILOVER_TIMEOUT_MS
        replica = self._data_node("replica", ["--replicaof", "127.0.0.1", str(upstream)])
        replica.start()
        wait_until(lambda: _in_sync(replica), STARTUP, "the replica in sync")
        # Each sentinel is told of the others and of the replica in its file, as a running
        # deployment's sentinels rewrite it: no two seconds of discovery at every start.
        peers = [(free_port(), secrets.token_hex(20)) for _ in range(SENTINELS)]
        for serial in range(SENTINELS):
            self._sentinel(serial, peers, replica.port).start()
        wait_until(self._sentinels_see_everything, STARTUP,
                   "every sentinel knowing the replica and the other sentinels")

    def _data_node(self, name: str, extra: list[str]) -> Node:
        port = free_port()
        node = Node(name, port, [
            shutil.which("redis-server") or "redis-server", "--port", str(port),
            "--bind", "127.0.0.1", "--dir", str(self.directory), "--save", "",
            "--appendonly", "no", "--dbfilename", f"{name}.rdb", "--loglevel", "warning",
            "--maxmemory-policy", "noeviction", "--repl-diskless-sync-delay", "0", *extra],
            self.directory)
        self.data.append(node)
        return node

    def _sentinel(self, serial: int, peers: list[tuple[int, str]], replica_port: int) -> Node:
        port, myid = peers[serial]
        conf = self.directory / f"sentinel-{serial}.conf"
        others = "".join(f"sentinel known-sentinel {SERVICE} 127.0.0.1 {p} {i}\n"
                         for p, i in peers if p != port)
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndaemonize no\ndir {self.directory}\n"
            f"sentinel myid {myid}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.data[0].port} {QUORUM}\n"
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} {self.failover_timeout_ms}\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
            f"sentinel known-replica {SERVICE} 127.0.0.1 {replica_port}\n{others}")
        node = Node(f"sentinel-{serial}", port,
                    [shutil.which("redis-sentinel") or "redis-sentinel", str(conf)],
                    self.directory)
        self.sentinels.append(node)
        return node

    def _sentinels_see_everything(self) -> bool:
        for node in self.sentinels:
            client = node.client(socket_timeout=1, decode_responses=True)
            try:
                state = client.sentinel_master(SERVICE)
            except redis.RedisError:
                return False
            finally:
                client.close()
            if int(state["num-slaves"]) < 1 or int(state["num-other-sentinels"]) < SENTINELS - 1:
                return False
        return True

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def primary_port(self) -> int | None:
        """The primary's port, as the first sentinel that answers names it."""
        for node in self.sentinels:
            client = node.client(socket_timeout=1)
            try:
                host_port = client.sentinel_get_master_addr_by_name(SERVICE)
            except redis.RedisError:
                continue
            finally:
                client.close()
            if host_port:
                return int(host_port[1])
        return None

    def primary(self) -> Node:
        port = self.primary_port()
        return next(node for node in self.data if node.port == port)

    def kill_primary(self) -> tuple[Node, float]:
        victim = self.primary()
        victim.kill()
        return victim, time.monotonic()

    def wait_for_promotion(self, old: Node, timeout: float = 30.0) -> float:
        """Until every sentinel names a primary other than ``old`` that answers as one;
        the monotonic time that was first seen."""
        def promoted() -> bool:
            ports = {self._named_by(node) for node in self.sentinels}
            if len(ports) != 1 or old.port in ports or None in ports:
                return False
            (port,) = ports
            client = redis.Redis(port=port, socket_timeout=1, decode_responses=True)
            try:
                return client.info("replication").get("role") == "master"
            except redis.RedisError:
                return False
            finally:
                client.close()

        wait_until(promoted, timeout, "the sentinels promoting the replica")
        return time.monotonic()

    def failovers(self) -> int:
        """Failovers so far: the most ``+switch-master`` events one sentinel logged (each
        sentinel logs one per primary it switches to; a split vote's extra epoch is none)."""
        return max((len(self._switches(node)) for node in self.sentinels), default=0)

    def account(self) -> str:
        """What the sentinels logged about the primary: who they thought down, when, and
        each switch, to say why a run saw more failovers than it made."""
        marks = ("+sdown", "-sdown", "+odown", "-odown", "+switch-master", "+elected-leader",
                 "+try-failover", "-failover-abort")
        lines = []
        for node in self.sentinels:
            lines += [f"{node.name}: {line}" for line in self._log(node).splitlines()
                      if any(f" {mark} " in line for mark in marks)]
        return "\n".join(lines)

    def _switches(self, node: Node) -> list[str]:
        return [line for line in self._log(node).splitlines() if " +switch-master " in line]

    def _log(self, node: Node) -> str:
        try:
            return (self.directory / f"{node.name}.log").read_text(errors="replace")
        except OSError:
            return ""

    @staticmethod
    def _named_by(node: Node) -> int | None:
        client = node.client(socket_timeout=1)
        try:
            found = client.sentinel_get_master_addr_by_name(SERVICE)
        except redis.RedisError:
            return None
        finally:
            client.close()
        return int(found[1]) if found else None

    def stop(self) -> None:
        for node in [*self.sentinels, *self.data]:
            node.stop()
        if self.link is not None:
            self.link.close()


def _in_sync(replica: Node) -> bool:
    client = replica.client(socket_timeout=1, decode_responses=True)
    try:
        return client.info("replication").get("master_link_status") == "up"
    except redis.RedisError:
        return False
    finally:
        client.close()
