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
4. ``CLUSTER_REPLIES`` (``MOVED``, ``ASK``, ``CROSSSLOT``) mean a Redis Cluster node, which
   wurk does not run on: ``UnsupportedServer`` says so and what to use instead.
"""

from __future__ import annotations

from typing import NoReturn

import redis

from ..errors import RedisUnavailable, UnsupportedServer
from .locate import describe_url

__all__ = ["CLUSTER_REPLIES", "CONNECTION_ERRORS", "FAILOVER_REPLIES", "cluster_refusal",
           "raise_refusal", "refusal", "reply_code", "unavailable"]

FAILOVER_REPLIES = frozenset({"READONLY", "NOREPLICAS", "UNBLOCKED"})
# A Redis Cluster node redirecting a command, or refusing keys of several slots.
CLUSTER_REPLIES = frozenset({"MOVED", "ASK", "CROSSSLOT"})
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


def refusal(exc: BaseException, url: str) -> RedisUnavailable | None:
    """A ``RedisUnavailable`` naming the refusal when ``exc`` is a transient error reply."""
    if not isinstance(exc, redis.RedisError):
        return None
    code = reply_code(exc)
    if code not in _TRANSIENT_REPLIES:
        return None
    text = str(exc)
    shown = text if text.startswith(code) else f"{code} {text}"
    return RedisUnavailable(f"{describe_url(url)} refused the command: {shown}")


def cluster_refusal(url: str) -> str:
    """Why wurk refuses a Redis Cluster node, and what to use instead."""
    return (f"Redis at {describe_url(url)} is a Redis Cluster node; wurk does not run on "
            "Redis Cluster: its Lua scripts and pipelines move jobs between keys of different "
            "hash slots. Use several independent Redis servers as shards (each may have "
            "Sentinel failover): docs/scaling.md")


def raise_refusal(exc: redis.ResponseError, url: str) -> NoReturn:
    """``RedisUnavailable`` for a transient refusal; ``UnsupportedServer`` for a Redis Cluster
    node's redirect; any other reply (a bug, a wrong type) is raised as it is."""
    if reply_code(exc) in CLUSTER_REPLIES:
        raise UnsupportedServer(cluster_refusal(url)) from exc
    refused = refusal(exc, url)
    if refused is None:
        raise exc
    raise refused from exc


def unavailable(exc: Exception, url: str) -> RedisUnavailable:
    """A broken connection or a refusal, as the one error retrying loops know."""
    # redis-py's text ends with a period; a message that goes on after it must not show two.
    return refusal(exc, url) or RedisUnavailable(f"{describe_url(url)}: {str(exc).rstrip('.')}")
