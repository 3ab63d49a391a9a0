"""What a successful profiled run leaves in Redis, in Sidekiq 8's layout.

1. ``store``: in one script (``profile_store.lua``) — ``ZADD profiles <now + 1 day>
   <token>-<jid>``, ``HSET <token>-<jid>`` with ``started_at`` (int s), ``token``,
   ``type`` (the job's class, or the class an ActiveJob wrapper names), ``jid``,
   ``filename`` (a download name: no file is written), ``elapsed`` (float s), ``data``
   (the gzip JSON) and ``size`` (its bytes), and ``EXPIRE`` of a day. Ruby's dashboard
   lists what wurk stores, and wurk's what Ruby's does. The token and jid come from the
   payload: when ``<token>-<jid>`` holds anything but a hash that is this profile's own,
   nothing is written and a warning says so.
2. ``encode``: ``data`` is speedscope's file format (what pyinstrument renders), gzipped.
3. ``capped``: a profile is at most ``STORED_MAX_BYTES`` gzipped. Past that it is rendered
   again with the call tree cut coarser (frames under 5 %, then 20 % of the run dropped);
   still past it, or when it cannot be rendered at all, ``data`` is a one-frame profile
   whose name says why (``note``) — a successful job is never failed by its profile.
"""

from __future__ import annotations

import gzip
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import scripts
from .. import stored as values
from ..config import Config
from ..connections.lending import redis as lent_redis
from ..reporting import report_error

__all__ = ["EXPIRY", "STORED_MAX_BYTES", "THRESHOLDS", "Run", "capped", "encode", "member",
           "note", "store"]

log = logging.getLogger("wurk")

# Sidekiq keeps a profile a day (its ``Profiler::EXPIRY``), in the sorted set and the hash.
EXPIRY = 86_400
# One hash field holds the whole profile, and every profile of the last day stays in Redis's
# memory: 5 MB gzipped is an hour of a busy job at pyinstrument's 1 ms, far past what a
# person reads in a flame graph, and a hundred of them fit in half a gigabyte.
STORED_MAX_BYTES = 5 * 1024 * 1024
# Frames under this share of the run are left out: pyinstrument's own default first, then
# coarser until the profile fits.
THRESHOLDS = (0.01, 0.05, 0.2)
# gzip level: 6 is zlib's default, within a few percent of 9's size at a third of its time.
GZIP_LEVEL = 6
SPEEDSCOPE_SCHEMA = "https://www.speedscope.app/file-format-schema.json"
# The store, only into a hash that is free or this profile's own (``profile_store.lua``).
_STORE = scripts.Script("profile_store.lua")


@dataclass(frozen=True)
class Run:
    """One successful profiled execution."""

    token: str
    jid: str
    type: str
    started_at: float  # epoch seconds
    elapsed: float  # seconds

    @property
    def member(self) -> str:
        return member(self.token, self.jid)

    @property
    def filename(self) -> str:
        """What a download is named: Sidekiq's ``<token>-<type>-<jid>-<time>``, with the
        format in the suffix (no file is written: Vernier writes one, pyinstrument none)."""
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(self.started_at))
        return f"{self.token}-{self.type}-{self.jid}-{stamp}.speedscope.json.gz"


def member(token: str, jid: str) -> str:
    """A profile's ``profiles`` member and (under the prefix) its hash key."""
    return f"{token}-{jid}"


def encode(document: str | dict[str, Any]) -> bytes:
    """A profile's JSON (text as rendered, or a document) gzipped."""
    text = document if isinstance(document, str) else json.dumps(document,
                                                                  separators=(",", ":"))
    return gzip.compress(text.encode(), compresslevel=GZIP_LEVEL, mtime=0)


def note(run: Run, text: str) -> dict[str, Any]:
    """A speedscope file of one frame named ``text``, spanning the run: any viewer opens it
    and shows why there is nothing else."""
    return {"$schema": SPEEDSCOPE_SCHEMA, "name": text, "exporter": "wurk",
            "activeProfileIndex": 0, "shared": {"frames": [{"name": text}]},
            "profiles": [{"type": "evented", "name": text, "unit": "seconds",
                          "startValue": 0, "endValue": run.elapsed,
                          "events": [{"type": "O", "at": 0, "frame": 0},
                                     {"type": "C", "at": run.elapsed, "frame": 0}]}]}


def capped(run: Run, render: Callable[[float], str | dict[str, Any]],
           limit: int = STORED_MAX_BYTES) -> bytes:
    """The gzip profile ``render(threshold)`` gives, at the finest threshold that fits in
    ``limit`` bytes; else a note saying how large it was."""
    size = 0
    for threshold in THRESHOLDS:
        try:
            data = encode(render(threshold))
        except Exception as exc:  # a deep recursion in the renderer, a bug in it
            log.warning("the profile of %s could not be rendered (%s): a note is stored "
                        "in its place", run.jid, type(exc).__name__)
            return encode(note(run, "profile could not be rendered "
                                    f"({type(exc).__name__}); the job succeeded"))
        if len(data) <= limit:
            return data
        size = len(data)
    log.warning("the profile of %s is %s bytes gzipped even with frames under %d %% left "
                "out, over the cap of %s: a note is stored in its place", run.jid,
                f"{size:,}", round(THRESHOLDS[-1] * 100), f"{limit:,}")
    return encode(note(run, f"profile too large to keep: {size:,} bytes gzipped with frames "
                            f"under {THRESHOLDS[-1]:.0%} of the run left out, over the "
                            f"{limit:,}-byte cap"))


def store(config: Config, run: Run, data: bytes, *, now: float | None = None) -> None:
    """Write the run as Sidekiq 8 does; a failure is reported, never raised (the job
    succeeded, and its ACK must not wait on a profile)."""
    keys = config.keys
    at = time.time() if now is None else now
    fields = {"started_at": int(run.started_at), "token": run.token, "type": run.type,
              "jid": run.jid, "filename": run.filename, "elapsed": repr(float(run.elapsed)),
              "data": data, "size": len(data)}
    flat = [part for pair in fields.items() for part in pair]
    key = keys.profile(run.member)
    try:
        with lent_redis(config) as conn:
            stored = _STORE.call(conn, [keys.profiles, key],
                                 [repr(at + EXPIRY), run.member, EXPIRY, *flat])
    except Exception as exc:
        report_error(config, exc, {"context": "storing a job's profile", "jid": run.jid})
        return
    if stored != 1:  # the token and jid came from Redis: they may spell any key
        log.warning("the profile of %.100r was not stored: its key %.200r holds a %s that "
                    "is not this profile's (a token and jid that spell another key)",
                    run.jid, key, values.text(stored))
