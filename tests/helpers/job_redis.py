"""The Redis that jobs run by a worker subprocess record into: ``REDIS_URL``'s, one client per
process, made on first use (never at import, so loading the jobs module connects nothing)."""

from __future__ import annotations

import os

import redis

_client: redis.Redis | None = None


def r() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ["REDIS_URL"])
    return _client
