"""Job profiles as Ruby Sidekiq 8 writes them, for the tests that read them back.

``ruby_profile`` stores a Vernier profile (``tests/fixtures/profiles/vernier_firefox.json``,
the Firefox Profiler's processed format) the way Sidekiq 8's ``Profiler`` does: one
``MULTI`` of ``ZADD profiles <now + 86400.0> <token>-<jid>``, ``HSET`` of ``started_at``
(``Time#to_i``), ``token``, ``type``, ``jid``, ``filename`` (the temporary file Vernier
wrote), ``elapsed`` (``Float#to_s``), ``data`` (gzip) and ``size``, and ``EXPIRE 86400``.
"""

from __future__ import annotations

import gzip
import time
from pathlib import Path

import redis

__all__ = ["VERNIER", "ruby_profile"]

VERNIER = Path(__file__).resolve().parents[1] / "fixtures" / "profiles" / "vernier_firefox.json"


def ruby_profile(r: redis.Redis, token: str, jid: str, *, job: str = "HardJob",
                 now: float | None = None, data: bytes | None = None) -> str:
    """Store one; returns its member (and hash key) ``<token>-<jid>``."""
    at = time.time() if now is None else now
    stored = gzip.compress(VERNIER.read_bytes()) if data is None else data
    key = f"{token}-{jid}"
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(at))
    pipe = r.pipeline(transaction=True)
    pipe.zadd("profiles", {key: at + 86400.0})
    pipe.hset(key, mapping={
        "started_at": int(at) - 1, "token": token, "type": job, "jid": jid,
        "filename": f"/tmp/{token}-{job}-{jid}-{stamp}.json.gz", "elapsed": "0.012345",
        "data": stored, "size": len(stored)})
    pipe.expire(key, 86400)
    pipe.execute()
    return key
