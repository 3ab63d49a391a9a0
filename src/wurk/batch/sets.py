"""Every batch, the dead ones, and those carrying a tag.

1. ``BatchSet``: live batches, newest first, from the ``batches`` index; an entry whose
   batch expired is removed as it is met (the index has no expiry of its own).
2. ``DeadBatches``: batches with a job in the dead set (``batch-died``), cleaned the same
   way; ``retry(bid)`` sends the batch's dead jobs back to their queues, so its ``success``
   can still fire.
3. ``scan_tags(text)``: bids whose tags contain ``text``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .. import payload as P
from .. import stored
from ..config import Config, default_config
from .status import BatchStatus

__all__ = ["BatchSet", "DeadBatches", "scan_tags"]

# Batches read per round trip when listing.
PAGE = 100


class BatchSet:
    """Live batches, newest first."""

    def __init__(self, *, config: Config | None = None) -> None:
        self.config = config if config is not None else default_config()

    def __len__(self) -> int:
        key = self.config.keys.batches
        return int(self.config.pool("api").run(lambda r: r.zcard(key), idempotent=True))

    def page(self, start: int = 0, count: int = PAGE) -> list[BatchStatus]:
        """Up to ``count`` live batches from position ``start`` (newest first)."""
        return self._read(start, count)[0]

    def _read(self, start: int, count: int) -> tuple[list[BatchStatus], int]:
        """(live batches, entries read); entries of expired batches are removed."""
        key = self.config.keys.batches
        bids = [stored.text(b) for b in self.config.pool("api").run(
            lambda r: r.zrevrange(key, start, start + count - 1), idempotent=True)]
        statuses = [BatchStatus(bid, config=self.config) for bid in bids]
        gone = [status.bid for status in statuses if not status.exists]
        if gone:
            self.config.pool("api").run(lambda r: r.zrem(key, *gone))
        return [status for status in statuses if status.exists], len(bids)

    def __iter__(self) -> Iterator[BatchStatus]:
        start = 0
        while True:
            live, read = self._read(start, PAGE)
            yield from live
            if read < PAGE:
                return
            start += len(live)  # the removed entries no longer take a position


class DeadBatches:
    """Batches one of whose jobs died."""

    def __init__(self, *, config: Config | None = None) -> None:
        self.config = config if config is not None else default_config()

    def bids(self) -> list[str]:
        key = self.config.keys.batch_died
        members = sorted(stored.text(m) for m in self.config.pool("api").run(
            lambda r: r.smembers(key), idempotent=True))
        gone = [bid for bid in members if not self._exists(bid)]
        if gone:
            self.config.pool("api").run(lambda r: r.srem(key, *gone))
        return [bid for bid in members if bid not in gone]

    def __iter__(self) -> Iterator[BatchStatus]:
        for bid in self.bids():
            yield BatchStatus(bid, config=self.config)

    def __len__(self) -> int:
        return len(self.bids())

    def _exists(self, bid: str) -> bool:
        key = self.config.keys.batch(bid)
        return bool(self.config.pool("api").run(lambda r: r.exists(key), idempotent=True))

    def retry(self, bid: str) -> int:
        """Send the batch's dead jobs back to their queues; returns how many went."""
        from ..api.sets import DeadSet  # not at import: a worker loads this package, never it

        wanted = set(BatchStatus(bid, config=self.config).dead_jids)
        moved = 0
        for entry in DeadSet(config=self.config):
            item: Any = entry.item
            if isinstance(item, dict) and item.get(P.JID) in wanted and entry.retry():
                moved += 1
        return moved


def scan_tags(text: str, *, config: Config | None = None) -> list[str]:
    """Bids of live batches with a tag containing ``text`` (case-sensitive), sorted."""
    cfg = config if config is not None else default_config()
    prefix = cfg.keys.batch_tag_prefix
    pattern = prefix + "*" + _glob_escape(text) + "*"

    def scan(r: Any) -> set[str]:
        found: set[str] = set()
        for key in r.scan_iter(match=pattern, count=500):
            found.update(stored.text(m) for m in r.smembers(key))
        return found

    bids = cfg.pool("api").run(scan, idempotent=True)
    return sorted(bid for bid in bids if BatchStatus(bid, config=cfg).exists)


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
