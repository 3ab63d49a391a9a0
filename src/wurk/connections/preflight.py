"""Boot checks on the Redis a worker is about to use: refuse what cannot work, warn of what
loses jobs.

1. ``check_server`` refuses a server older than Redis 7.0 with ``UnsupportedServer``, whose
   message names the version found and the one needed; and a node of a Redis Cluster
   (``cluster_enabled:1``) reached by a plain URL: Sidekiq's layout touches keys of many
   hash slots; a ``redis+cluster://`` URL selects wurk's cluster layout (``docs/scaling.md``).
2. It warns when ``maxmemory-policy`` is not ``noeviction``: under memory pressure Redis
   would then delete keys — queued jobs, in-flight lists, retries — and the delivery
   guarantee (``docs/guarantees.md``) is void. ``CONFIG GET`` is often refused on managed
   Redis; ``INFO memory`` says the same thing there.
3. No check ever fails boot for want of an answer: a server that refuses ``INFO`` too is
   logged and the worker starts (its loops ride out the outage). Where nothing answers at
   all, the worker's wait for Redis begins (``wurk.connections.unreached``): one plain
   message naming the URL and the way out, then one line per step, not one per loop.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import redis

from ..config import Config
from ..errors import RedisUnavailable, UnsupportedServer
from . import cluster
from .locate import describe_url
from .pool import RedisPool
from .replies import cluster_refusal
from .unreached import unreachable

__all__ = ["MIN_VERSION", "check_server", "eviction_policy", "refuse_cluster",
           "require_version", "server_version"]

log = logging.getLogger("wurk")

# Sidekiq 7+ needs Redis 7.0, and wurk is built and tested against what it offers.
MIN_VERSION = (7, 0)
SAFE_POLICY = "noeviction"
_VERSION = re.compile(r"^(\d+)\.(\d+)")


def check_server(config: Config, pool: RedisPool | None = None) -> None:
    """Refuse an old server; warn about an evicting one; never fail for want of an answer."""
    target = pool or config.pool("internal")
    try:
        version = server_version(target)
        policy = eviction_policy(target)
    except (RedisUnavailable, redis.RedisError) as exc:
        if unreachable(exc):
            config.unreached.begin(exc, target.url, embedded=config.redis_url is None)
            return
        log.warning("could not check the Redis server at boot (%s); starting anyway", exc)
        return
    if version is not None:
        require_version(version, target.url)
    refuse_cluster(target)
    if policy is not None and policy != SAFE_POLICY:
        log.warning("Redis maxmemory-policy is %r: under memory pressure Redis will delete "
                    "wurk's data (queued and in-flight jobs). Set it to %r "
                    "(CONFIG SET maxmemory-policy noeviction, or in redis.conf)",
                    policy, SAFE_POLICY)


def refuse_cluster(pool: RedisPool) -> None:
    """``UnsupportedServer`` when the server is a Redis Cluster node named by a plain URL;
    nothing when it does not say (a server that refuses ``INFO cluster`` is no cluster wurk
    could use anyway), or when the URL is a ``redis+cluster://`` one."""
    if cluster.is_cluster(pool.url):
        return
    try:
        info = pool.run(lambda r: r.info("cluster"), idempotent=True)
    except (RedisUnavailable, redis.RedisError):
        return
    if str(info.get("cluster_enabled", "0")) == "1":
        raise UnsupportedServer(cluster_refusal(pool.url))


def require_version(version: tuple[int, int], url: str) -> None:
    """``UnsupportedServer`` when ``version`` is older than ``MIN_VERSION``."""
    if version < MIN_VERSION:
        raise UnsupportedServer(
            f"Redis at {describe_url(url)} is version {'.'.join(map(str, version))}; wurk "
            f"needs Redis {'.'.join(map(str, MIN_VERSION))} or newer (or Valkey 7.2+)")


def server_version(pool: RedisPool) -> tuple[int, int] | None:
    """``(major, minor)`` from ``INFO server``; None when it does not say."""
    info = pool.run(lambda r: r.info("server"), idempotent=True)
    match = _VERSION.match(str(info.get("redis_version", "")))
    return (int(match.group(1)), int(match.group(2))) if match else None


def eviction_policy(pool: RedisPool) -> str | None:
    """``maxmemory-policy`` from ``CONFIG GET``, else from ``INFO memory``; None if neither."""
    try:
        reply: dict[Any, Any] = pool.run(lambda r: r.config_get("maxmemory-policy"),
                                         idempotent=True)
        value = reply.get("maxmemory-policy") or reply.get(b"maxmemory-policy")
    except redis.ResponseError:  # CONFIG renamed or forbidden (managed Redis)
        value = None
    if value is None:
        info = pool.run(lambda r: r.info("memory"), idempotent=True)
        value = info.get("maxmemory_policy")
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)
