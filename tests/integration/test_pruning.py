"""Pruning ``processes``: stale identities go, at most once a minute."""

from __future__ import annotations

import redis

from tests.helpers.server import free_port
from wurk.config import Config
from wurk.connections.pool import RedisPool
from wurk.errors import RedisUnavailable
from wurk.runtime.pruning import CLEANUP_INTERVAL, prune_processes


def test_removes_identities_whose_hash_is_gone(config: Config, r: redis.Redis) -> None:
    r.sadd("processes", "gone:1:aaa", "gone:2:bbb", "alive:3:ccc")
    r.hset("alive:3:ccc", mapping={"info": '{"hostname":"alive"}', "busy": "0"})
    assert prune_processes(config) == 2
    assert r.smembers("processes") == {"alive:3:ccc"}
    assert 0 < r.ttl("process_cleanup") <= CLEANUP_INTERVAL


def test_at_most_once_a_minute_cluster_wide(config: Config, r: redis.Redis) -> None:
    r.sadd("processes", "gone:1:aaa")
    r.set("process_cleanup", "1", ex=60)  # another process pruned a moment ago
    assert prune_processes(config) == 0
    assert r.smembers("processes") == {"gone:1:aaa"}


def test_a_hash_without_info_counts_as_gone(config: Config, r: redis.Redis) -> None:
    r.sadd("processes", "half:1:aaa")
    r.hset("half:1:aaa", "busy", "1")  # expired between the writes, say
    assert prune_processes(config) == 1


def test_empty_set_and_prefix(r: redis.Redis) -> None:
    config = Config(key_prefix="ns")
    assert prune_processes(config) == 0
    r.delete("ns:process_cleanup")
    r.sadd("ns:processes", "gone:1:aaa", "alive:2:bbb")
    r.hset("ns:alive:2:bbb", "info", "{}")
    r.hset("alive:2:bbb", "info", "{}")
    r.sadd("processes", "alive:2:bbb")
    assert prune_processes(config) == 1
    assert r.smembers("ns:processes") == {"alive:2:bbb"}
    config.close()


def test_many_processes(config: Config, r: redis.Redis) -> None:
    r.sadd("processes", *[f"host:{i}:n" for i in range(2500)])
    for i in range(0, 2500, 2):
        r.hset(f"host:{i}:n", "info", "{}")
    assert prune_processes(config) == 1250
    assert r.scard("processes") == 1250


def test_unreachable_redis_raises_a_clear_error() -> None:
    config = Config()
    pool = RedisPool(f"redis://127.0.0.1:{free_port()}/0", socket_timeout=0.5)
    try:
        prune_processes(config, pool)
    except RedisUnavailable as exc:
        assert "127.0.0.1" in str(exc)
    else:
        raise AssertionError("prune_processes reached a closed port")
    finally:
        pool.close()
