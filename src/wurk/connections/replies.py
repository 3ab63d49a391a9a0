"""What a Redis error means: refused for now, or a bug — and the one error loops retry on.

1. ``reply_code`` reads the code of an error reply (``READONLY``, ``BUSY``…), whichever way
   redis-py parsed it.
2. Replies that refuse a command for a while — the server is loading its data (``LOADING``),
   running a long script (``BUSY``), a replica (``READONLY``), out of memory (``OOM``) — and
   broken connections become ``RedisUnavailable``, so the loops that retry (``wurk.runtime.outage``)
   and the code that pushes see one kind of error. Any other error reply is a bug or a wrong
   type and is raised as it is.
3. ``FAILOVER_REPLIES`` mark a connection that reaches a demoted master: the command was
   refused, not applied, and another connection may reach the new master.
4. ``CLUSTER_REPLIES`` (``MOVED``, ``ASK``, ``CROSSSLOT``) from a server reached by a plain
   ``redis://`` URL mean a Redis Cluster node used as one Redis: ``UnsupportedServer`` says
   so and names the ``redis+cluster://`` form. Through a ``redis+cluster://`` URL,
   ``MOVED`` and ``ASK`` mean the keyspace's slot has moved (a failover, resharding): the
   command was refused, not applied — ``RedisUnavailable``, and a new connection asks the
   nodes where the slot is now (``wurk.connections.cluster``). ``CROSSSLOT`` stays an
   error there: every key of one keyspace carries its hash tag, so it is a bug.
"""

from __future__ import annotations

from typing import NoReturn

import redis

from ..errors import RedisUnavailable, UnsupportedServer
from . import cluster
from .locate import describe_url

__all__ = ["CLUSTER_REPLIES", "CONNECTION_ERRORS", "FAILOVER_REPLIES", "SLOT_MOVED",
           "cluster_refusal", "raise_refusal", "refusal", "reply_code", "retry_replies",
           "unavailable"]

FAILOVER_REPLIES = frozenset({"READONLY", "NOREPLICAS", "UNBLOCKED"})
# A Redis Cluster node redirecting a command, or refusing keys of several slots.
CLUSTER_REPLIES = frozenset({"MOVED", "ASK", "CROSSSLOT"})
# Through a ``redis+cluster://`` URL: the keyspace's slot is served elsewhere now.
SLOT_MOVED = frozenset({"MOVED", "ASK"})
# Error replies that mean "not now" rather than "never": the command was refused, not applied.
_TRANSIENT_REPLIES = FAILOVER_REPLIES | {"LOADING", "BUSY", "OOM", "MASTERDOWN", "TRYAGAIN",
                                         "CLUSTERDOWN"}
CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)
# redis-py strips the code from the message of the replies it has a class for; these give
# it back (most specific class first: MasterDownError is a ClusterDownError).
_CODE_OF_CLASS: tuple[tuple[type[Exception], str], ...] = (
    (redis.exceptions.ReadOnlyError, "READONLY"),
    (redis.exceptions.OutOfMemoryError, "OOM"),
    (redis.exceptions.BusyLoadingError, "LOADING"),
    (redis.exceptions.TryAgainError, "TRYAGAIN"),
    (redis.exceptions.MasterDownError, "MASTERDOWN"),
    (redis.exceptions.ClusterDownError, "CLUSTERDOWN"),
    (redis.exceptions.MovedError, "MOVED"),
    (redis.exceptions.AskError, "ASK"),
    (redis.exceptions.ClusterCrossSlotError, "CROSSSLOT"),
)
# redis-py prefixes the first error of a pipeline with this (and the command's position).
_PIPELINE_NOTE = "caused error: "


def reply_code(exc: BaseException) -> str:
    """The error reply's code (``READONLY``, ``BUSY``…), whichever way redis-py parsed it."""
    for cls, code in _CODE_OF_CLASS:
        if isinstance(exc, cls):
            return code
    text = str(exc)
    if _PIPELINE_NOTE in text:
        text = text.split(_PIPELINE_NOTE, 1)[1]
    return text.split(" ", 1)[0]


def retry_replies(url: str) -> frozenset[str]:
    """The replies after which a pool tries a command once more on another connection."""
    return FAILOVER_REPLIES | SLOT_MOVED if cluster.is_cluster(url) else FAILOVER_REPLIES


def refusal(exc: BaseException, url: str) -> RedisUnavailable | None:
    """A ``RedisUnavailable`` naming the refusal when ``exc`` is a transient error reply."""
    if not isinstance(exc, redis.RedisError):
        return None
    code = reply_code(exc)
    transient = _TRANSIENT_REPLIES | SLOT_MOVED if cluster.is_cluster(url) \
        else _TRANSIENT_REPLIES
    if code not in transient:
        return None
    text = str(exc)
    shown = text if text.startswith(code) else f"{code} {text}"
    return RedisUnavailable(f"{describe_url(url)} refused the command: {shown}")


def cluster_refusal(url: str) -> str:
    """Why wurk refuses a Redis Cluster node, and what to use instead."""
    return (f"Redis at {describe_url(url)} is a Redis Cluster node, named by a plain URL; "
            "wurk's Sidekiq key layout moves jobs between keys of different hash slots, so "
            "on a cluster it needs its own layout: name the cluster as "
            f"{cluster.FORM} (docs/scaling.md; Ruby Sidekiq cannot read that layout)")


def raise_refusal(exc: redis.ResponseError, url: str) -> NoReturn:
    """``RedisUnavailable`` for a transient refusal; ``UnsupportedServer`` for a Redis Cluster
    node's redirect; any other reply (a bug, a wrong type) is raised as it is."""
    code = reply_code(exc)
    if code in CLUSTER_REPLIES and not (cluster.is_cluster(url) and code in SLOT_MOVED):
        if cluster.is_cluster(url):
            raise UnsupportedServer(f"{describe_url(url)} refused a command whose keys span "
                                    f"hash slots ({exc}); this is a bug in wurk's Redis "
                                    "Cluster layout, please report it") from exc
        raise UnsupportedServer(cluster_refusal(url)) from exc
    refused = refusal(exc, url)
    if refused is None:
        raise exc
    raise refused from exc


def unavailable(exc: Exception, url: str) -> RedisUnavailable:
    """A broken connection or a refusal, as the one error retrying loops know."""
    # redis-py's text ends with a period; a message that goes on after it must not show two.
    return refusal(exc, url) or RedisUnavailable(f"{describe_url(url)}: {str(exc).rstrip('.')}")
