"""Reliable push's buffers, as the processes that keep them report them.

1. ``PushBuffers(config).reports()``: the processes that reported in the last hour
   (``wurk:push-buffers``, newest first, at most ``REPORTS_CAP``), each a ``BufferReport``:
   who (identity, host, pid), which kind and where (memory, or the disk buffer's file), the
   jobs waiting and when the oldest was kept, the jobs sent from its buffer since it started
   and when it reported. A process reports when it sends jobs from its buffer — so once it
   reaches Redis again: a process cut off from Redis cannot say so here (``wurk stats`` on
   its host reads its disk buffer's directory instead: ``wurk.client.buffer.survey``).
2. ``sent()``: jobs sent from any buffer since Redis started counting
   (``wurk:stat:recovered-push``).

Reports are untrusted, as everything read: a field that cannot be read is an ``Invalid``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .. import stored as values
from ..config import Config, default_config
from ..stored import Invalid

__all__ = ["REPORTS_CAP", "REPORT_WINDOW", "BufferReport", "PushBuffers"]

# Reports read at most (the newest), and how old the oldest shown may be (their TTL).
REPORTS_CAP = 100
REPORT_WINDOW = 3600
TEXT_LIMIT = 300


def _text(value: Any) -> str:
    return values.shown(value, TEXT_LIMIT) if isinstance(value, (str, int, float)) else ""


@dataclass(frozen=True)
class BufferReport:
    identity: str
    hostname: str
    pid: int | Invalid | None
    kind: str
    where: str
    buffered: int | Invalid
    oldest: float | Invalid | None
    sent: int | Invalid
    at: float | Invalid | None

    def to_dict(self) -> dict[str, Any]:
        return {"identity": self.identity, "hostname": self.hostname, "pid": self.pid,
                "kind": self.kind, "where": self.where, "buffered": self.buffered,
                "oldest": self.oldest, "sent": self.sent, "at": self.at}


def _report(identity: str, raw: Any) -> BufferReport | None:
    found = values.json_object(raw)
    if found is None:
        return None  # expired between the two reads
    record: dict[str, Any] = {} if isinstance(found, Invalid) else found
    bad = found if isinstance(found, Invalid) else None
    return BufferReport(
        identity=values.shown(identity, TEXT_LIMIT), hostname=_text(record.get("hostname")),
        pid=values.integer(record.get("pid")), kind=_text(record.get("kind")),
        where=_text(record.get("where")),
        buffered=bad or values.count(record.get("buffered")),
        oldest=values.epoch(record.get("oldest")), sent=values.count(record.get("sent")),
        at=values.epoch(record.get("at")))


class PushBuffers:
    def __init__(self, config: Config | None = None) -> None:
        self.config = config if config is not None else default_config()

    def reports(self) -> list[BufferReport]:
        keys = self.config.keys
        since = time.time() - REPORT_WINDOW

        def read(r: Any) -> tuple[list[Any], list[Any]]:
            names = r.zrevrangebyscore(keys.push_buffers, "+inf", since, start=0,
                                       num=REPORTS_CAP)
            # A name that is not UTF-8 names no report wurk wrote: skipped.
            identities = [found for found in map(values.utf8, names) if found is not None]
            pipe = r.pipeline(transaction=False)
            for identity in identities:
                pipe.get(keys.push_buffer(identity))
            return identities, list(pipe.execute()) if identities else []

        identities, raws = self.config.pool("api").run(read, idempotent=True)
        found = (_report(identity, raw) for identity, raw in zip(identities, raws,
                                                                 strict=True))
        return [report for report in found if report is not None]

    def __iter__(self) -> Iterator[BufferReport]:
        return iter(self.reports())

    def sent(self) -> int | Invalid:
        key = self.config.keys.stat_recovered_push
        return values.count(self.config.pool("api").run(lambda r: r.get(key),
                                                         idempotent=True))
