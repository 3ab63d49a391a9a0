"""Reading the sorted sets a test's jobs land in."""

from __future__ import annotations

import json
from typing import Any

import redis


def retry_entry(r: redis.Redis, jid: str) -> dict[str, Any] | None:
    """The retry set's entry of ``jid``, parsed; None when it holds none."""
    for raw in r.zrange("retry", 0, -1):
        job = json.loads(raw)
        if job["jid"] == jid:
            return job  # type: ignore[no-any-return]
    return None
