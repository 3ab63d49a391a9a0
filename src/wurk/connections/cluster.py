"""Redis Cluster: a ``redis+cluster://`` URL, and pools that follow the primary of one slot.

1. ``parse`` reads the URL form (``docs/scaling.md``)::

       redis+cluster://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]…][/KEYSPACE]

   Hosts are seed nodes of the cluster (port 6379 when left out); any node answers where
   the others are. ``KEYSPACE`` is the hash tag every key of that wurk keyspace carries
   (``{KEYSPACE}:queue:…``); without it, ``default``. A cluster has one db, so a db, a
   query or a keyspace that is no queue name is refused with a ``ConfigError`` naming it.
2. Every key of one keyspace hashes to one slot, so one keyspace lives on one primary:
   ``blocking_pool`` / ``async_blocking_pool`` make wurk's bounded pools connect straight
   to the primary serving that slot, asked of the nodes (``CLUSTER SLOTS``) for each new
   connection — as a Sentinel pool asks the sentinels. Every Lua script, ``MULTI`` and
   pipeline of wurk then runs unchanged on that node; none can cross a slot, since the
   keyspace has only one.
3. After a failover (or a slot moved by resharding) a connection to the old primary reads
   ``MOVED``, or breaks if the node died: the pool retires it (``MOVED`` means refused, not
   applied, as ``READONLY`` does) and a new connection asks the nodes again and reaches
   the promoted replica. Until the cluster has promoted one, connecting fails or nodes
   answer ``CLUSTERDOWN``: ``RedisUnavailable``, which wurk's loops ride out.
"""

from __future__ import annotations

import asyncio
import re
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import redis
import redis.asyncio as aredis
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry

from ..errors import ConfigError
from .hostlist import CUT_SHORT, credentials, cut_short, host_list

__all__ = ["DEFAULT_KEYSPACE", "SCHEME", "ClusterTarget", "SlotLocator", "async_blocking_pool",
           "blocking_pool", "describe", "is_cluster", "keyspace_name", "parse", "with_keyspace"]

SCHEME = "redis+cluster"
DEFAULT_PORT = 6379
# The keyspace of the configuration's own URL: the queue named "default" lives there, and
# so do the leader election, the limiters and the index of the cluster's queues.
DEFAULT_KEYSPACE = "default"
# A keyspace is a queue's name, written inside ``{}``: no braces, no separators of ours.
KEYSPACE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
FORM = "redis+cluster://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/KEYSPACE]"
# What the locator's own short-lived connections take from the pool's settings.
_NODE_OPTIONS = ("socket_timeout", "socket_connect_timeout")


@dataclass(frozen=True)
class ClusterTarget:
    """What a ``redis+cluster://`` URL says."""

    nodes: tuple[tuple[str, int], ...]
    keyspace: str = DEFAULT_KEYSPACE
    username: str | None = None
    password: str | None = None

    @property
    def slot(self) -> int:
        """The hash slot of every key of this keyspace (``{keyspace}``'s)."""
        return key_slot(f"{{{self.keyspace}}}".encode())


def is_cluster(url: str | None) -> bool:
    return isinstance(url, str) and url.lower().startswith(f"{SCHEME}://")


def keyspace_name(name: str, where: str = "keyspace") -> str:
    """``name`` when it can be a keyspace (a queue's name in ``{}``); ``ConfigError`` else."""
    if not isinstance(name, str) or not KEYSPACE.fullmatch(name):
        raise ConfigError(f"{where}: {name!r} cannot be a Redis Cluster keyspace: on a cluster "
                          "a queue's name is its keys' hash tag, so it must be letters, "
                          "digits, '_', '.' or '-' (64 at most)")
    return name


def parse(url: str) -> ClusterTarget:
    """The seed nodes, keyspace and credentials of ``url``; ``ConfigError`` naming what is
    wrong and the form otherwise."""
    if not is_cluster(url):
        raise ConfigError(f"not a Redis Cluster URL (it must start with {SCHEME}://): {FORM}")
    rest, question, query = url[len(SCHEME) + 3:].partition("?")
    netloc, _, path = rest.partition("/")
    if cut_short(netloc, path + query):
        raise ConfigError(f"Redis Cluster URL: {CUT_SHORT}: {FORM}")
    if question:
        raise ConfigError(f"Redis Cluster URL: it takes no options after '?': {FORM}")
    hosts, username, password = credentials(netloc)
    parts = [part for part in path.split("/") if part]
    if len(parts) > 1:
        raise ConfigError(f"Redis Cluster URL: a cluster has no db; after the nodes comes at "
                          f"most a keyspace: {FORM}")
    keyspace = keyspace_name(unquote(parts[0]), "Redis Cluster URL") if parts \
        else DEFAULT_KEYSPACE
    return ClusterTarget(nodes=_hosts(hosts), keyspace=keyspace, username=username,
                         password=password)


def _hosts(text: str) -> tuple[tuple[str, int], ...]:
    return host_list(text, url="Redis Cluster URL", member="node", form=FORM,
                     default_port=DEFAULT_PORT)


def _netloc(target: ClusterTarget, *, hide: bool) -> str:
    user = target.username or ""
    if target.password is not None:
        auth = f"{user}:{'***' if hide else target.password}@"
    else:
        auth = f"{user}@" if user else ""
    hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in target.nodes)
    return f"{auth}{hosts}"


def with_keyspace(url: str, keyspace: str) -> str:
    """``url`` naming ``keyspace`` instead of its own (a shard view's URL)."""
    target = parse(url)
    return f"{SCHEME}://{_netloc(target, hide=False)}/{keyspace_name(keyspace)}"


def describe(url: str) -> str:
    """``url`` without its password, for logs and errors."""
    try:
        target = parse(url)
    except ConfigError:
        return f"{SCHEME}://(not a valid Redis Cluster URL)"
    return f"{SCHEME}://{_netloc(target, hide=True)}/{target.keyspace}"


class SlotLocator:
    """Where the primary serving one slot is: asked of the nodes, the seeds and the nodes
    the last answer named, in turn, until one answers (point 2); the last node that
    answered is asked first."""

    def __init__(self, target: ClusterTarget, options: dict[str, Any]) -> None:
        self.target = target
        self.slot = target.slot
        self._options = {name: options[name] for name in _NODE_OPTIONS if name in options}
        self._lock = threading.Lock()
        self._known: list[tuple[str, int]] = list(target.nodes)

    def primary(self) -> tuple[str, int]:
        """``(host, port)`` of the slot's primary; ``redis.ConnectionError`` when no node
        answers, ``redis.ResponseError`` when no node serves the slot."""
        with self._lock:
            nodes = list(dict.fromkeys(self._known))
        errors: list[str] = []
        for host, port in nodes:
            try:
                found = self._owner(self._ask(host, port), host)
            except (redis.RedisError, OSError, *_GARBLED) as exc:
                errors.append(f"{host}:{port}: {exc}")
                continue
            if found is not None:
                with self._lock:  # asked first next time: a dead seed costs no timeout
                    self._known = [(host, port), *(n for n in self._known if n != (host, port))]
                return found
            errors.append(f"{host}:{port}: no node serves slot {self.slot}")
        raise redis.ConnectionError(
            f"no node of the Redis Cluster named the primary of keyspace "
            f"{{{self.target.keyspace}}} (slot {self.slot}): {'; '.join(errors)}")

    def _ask(self, host: str, port: int) -> Any:
        # No retry of redis-py's own: a node that does not answer is passed over at once.
        client = redis.Redis(host=host, port=port, username=self.target.username,
                             password=self.target.password, retry=Retry(NoBackoff(), 0),
                             **self._options)
        try:
            return client.execute_command("CLUSTER SLOTS")  # type: ignore[no-untyped-call]
        finally:
            client.close()

    def _owner(self, slots: Any, asked: str) -> tuple[str, int] | None:
        """The slot's primary in a ``CLUSTER SLOTS`` reply; the nodes to ask next time are
        the ones it names, then the seeds: a node the cluster no longer names is forgotten,
        so the list does not grow with every node that ever served (a cluster resharded or
        rebuilt on new addresses). A reply no cluster sends (untrusted: the node may be
        anything) raises one of ``_GARBLED``, and nothing of it is learnt."""
        owner: tuple[str, int] | None = None
        seen: list[tuple[str, int]] = []
        for entry in slots or ():
            start, end, *nodes = entry
            addresses = [_address(node, asked) for node in nodes]
            seen.extend(addresses)
            if int(start) <= self.slot <= int(end) and addresses:
                owner = addresses[0]
        with self._lock:
            self._known = list(dict.fromkeys([*seen, *self.target.nodes]))
        return owner


# What reading a ``CLUSTER SLOTS`` reply of the wrong shape raises.
_GARBLED = (ValueError, TypeError, IndexError)


def _address(node: Any, asked: str) -> tuple[str, int]:
    """``(host, port)`` of one node of a ``CLUSTER SLOTS`` entry (an empty host is the node
    asked); ``ValueError`` when it is not one."""
    host = node[0].decode() if isinstance(node[0], bytes) else str(node[0])
    port = int(node[1])
    if not 0 < port < 65536:
        raise ValueError(f"a node's port {port} in CLUSTER SLOTS is not a TCP port")
    return host or asked, port


class _SlotConnection:
    """Mixed into the pool's connection class: each new connection goes where the locator
    says the slot's primary is now."""

    locator: SlotLocator

    def _connect(self) -> Any:
        self.host, self.port = self.locator.primary()
        return super()._connect()  # type: ignore[misc]


class _AsyncSlotConnection:
    locator: SlotLocator

    async def _connect(self) -> Any:
        host, port = await asyncio.to_thread(self.locator.primary)
        self.host, self.port = host, port
        return await super()._connect()  # type: ignore[misc]


def _pool_options(target: ClusterTarget, options: dict[str, Any]) -> dict[str, Any]:
    chosen = dict(options)
    chosen.pop("db", None)
    if target.username is not None:
        chosen["username"] = target.username
    if target.password is not None:
        chosen["password"] = target.password
    return chosen


def blocking_pool(url: str, base: type, connection_class: type, **options: Any) -> Any:
    """A pool of class ``base`` (a ``redis.BlockingConnectionPool``) whose connections (of
    ``connection_class``) reach the primary of the URL's keyspace."""
    target = parse(url)
    locator = SlotLocator(target, options)
    connection = type(f"Slot{connection_class.__name__}",
                      (_SlotConnection, connection_class), {"locator": locator})
    return base(connection_class=connection, host=target.nodes[0][0], port=target.nodes[0][1],
                **_pool_options(target, options))


def async_blocking_pool(url: str, base: type, **options: Any) -> Any:
    """``blocking_pool`` for redis-py's asyncio client (``base`` its blocking pool)."""
    target = parse(url)
    locator = SlotLocator(target, options)
    connection = type("AsyncSlotConnection", (_AsyncSlotConnection, aredis.Connection),
                      {"locator": locator})
    return base(
        connection_class=connection, host=target.nodes[0][0], port=target.nodes[0][1],
        **_pool_options(target, options))
