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

from .. import stored
from ..config import Config, default_config
from ..keys import glob_escape
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
        """Up to ``count`` live batches from position ``start`` (newest first); none past
        the end, however far past it ``start`` is."""
        return self._read(start, count)[0]

    def _read(self, start: int, count: int) -> tuple[list[BatchStatus], int]:
        """(live batches, entries read); entries of expired batches are removed."""
        key = self.config.keys.batches
        if start >= len(self) or count <= 0:
            return [], 0  # Redis refuses an offset past 2**63: never ask for one
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
    """Batches one of whose jobs died, in bid order; at most ``stored.FIELD_CAP`` listed."""

    def __init__(self, *, config: Config | None = None) -> None:
        self.config = config if config is not None else default_config()

    def bids(self) -> list[str]:
        """The bids, sorted; those of batches gone since are dropped from the set."""
        key = self.config.keys.batch_died
        found = self.config.pool("api").run(lambda r: stored.members(r, key), idempotent=True)
        members = [] if isinstance(found, stored.Invalid) else sorted(
            stored.text(m) for m in found.items)
        gone = set(_missing(self.config, members))
        if gone:
            self.config.pool("api").run(lambda r: r.srem(key, *gone))
        return [bid for bid in members if bid not in gone]

    def page(self, start: int, count: int) -> tuple[list[BatchStatus], int]:
        """(the batches at ``start``, how many there are)."""
        bids = self.bids()
        return [BatchStatus(bid, config=self.config) for bid in bids[start:start + count]], \
            len(bids)

    def __iter__(self) -> Iterator[BatchStatus]:
        for bid in self.bids():
            yield BatchStatus(bid, config=self.config)

    def __len__(self) -> int:
        return len(self.bids())

    def retry(self, bid: str) -> int:
        """Send the batch's dead jobs back to their queues; returns how many went."""
        from ..api.sets import DeadSet  # not at import: a worker loads this package, never it

        key = self.config.keys.batch(bid, "died")
        pool = self.config.pool("api")
        if stored.text(pool.run(lambda r: r.type(key), idempotent=True)) != "set":
            return 0  # none died, or a key of another type (written by hand): none to send

        def of_the_batch(entries: list[Any]) -> list[Any]:
            """The page's entries whose jid is in the batch's ``-died`` set: one SMISMEMBER
            a page of the dead set, never the whole set read (``BatchStatus.dead_jids``
            lists only ``stored.FIELD_CAP`` of them, for people to read)."""
            jids = [entry.jid for entry in entries]
            found = pool.run(lambda r: r.smismember(key, jids), idempotent=True) if jids else []
            return [entry for entry, member in zip(entries, found, strict=True) if member]

        # A page of the dead set a round trip, as retry_all; an entry that cannot be pushed
        # (not a payload, no queue) stays, as there.
        return DeadSet(config=self.config)._requeue_all(decrement=True, only=of_the_batch)


def _missing(config: Config, bids: list[str]) -> list[str]:
    """The bids whose record is gone, asked in one round trip per ``PAGE``."""
    keys = config.keys
    gone: list[str] = []
    for start in range(0, len(bids), PAGE):
        chunk = bids[start:start + PAGE]

        def exists(r: Any, chunk: list[str] = chunk) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for bid in chunk:
                pipe.exists(keys.batch(bid))
            return list(pipe.execute())

        found = config.pool("api").run(exists, idempotent=True)
        gone += [bid for bid, there in zip(chunk, found, strict=True) if not there]
    return gone


# Keys a tag search looks at, at most: a substring search scans the key space, and a
# dashboard request must not take the time of a million keys.
TAG_SCAN_LIMIT = 100_000


def scan_tags(text: str, *, config: Config | None = None) -> list[str]:
    """Bids of live batches with a tag containing ``text`` (case-sensitive), sorted; at most
    ``stored.FIELD_CAP`` of them, found among the first ``TAG_SCAN_LIMIT`` keys."""
    cfg = config if config is not None else default_config()
    prefix = cfg.keys.batch_tag_prefix
    pattern = glob_escape(prefix) + "*" + glob_escape(text) + "*"

    def scan(r: Any) -> set[str]:
        found: set[str] = set()
        cursor, looked = 0, 0
        while len(found) < stored.FIELD_CAP and looked < TAG_SCAN_LIMIT:
            cursor, names = r.scan(cursor, match=pattern, count=1000)
            looked += 1000
            for key in names:
                members = stored.members(r, key, cap=stored.FIELD_CAP - len(found))
                if not isinstance(members, stored.Invalid):
                    found.update(stored.text(m) for m in members.items)
            if not cursor:
                break
        return found

    bids = sorted(cfg.pool("api").run(scan, idempotent=True))[:stored.FIELD_CAP]
    gone = set(_missing(cfg, bids))
    return [bid for bid in bids if bid not in gone]
