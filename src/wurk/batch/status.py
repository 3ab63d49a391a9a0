"""``wurk.BatchStatus(bid)``: what a batch's keys say, read once and checked.

1. One round trip reads the record and its set sizes; ``failed_jids`` / ``dead_jids`` /
   ``child_bids`` read their sets when asked. Stored values are untrusted and read through
   ``wurk.api.values``: a count or time that does not parse is an ``Invalid`` (and named in
   ``problems``), never an exception.
2. ``complete`` / ``succeeded`` / ``dead``; ``data()`` is the JSON summary the dashboard's
   status endpoint serves; ``join(timeout)`` waits for ``complete`` (for tests).
   ``results()``: the stored outcomes of the batch's jobs that keep one (``result_ttl``),
   by jid, in the order they finished (``wurk.results``).
3. ``delete()`` removes every key of the batch and its entries in the indexes.
"""

from __future__ import annotations

import time
from typing import Any

from .. import payload as P
from .. import stored
from ..config import Config, default_config
from ..errors import BatchError
from ..results.store import BATCH_READ_CAP, Outcome, batch_outcomes
from ..stored import Invalid, count, epoch, invalid, to_json
from .accounting import decode_callbacks

__all__ = ["BatchStatus", "invalidated"]

# join() polls this often: a test waiting for callbacks does not need it faster.
JOIN_POLL = 0.05


def _members(raw: Any) -> list[str]:
    return sorted(stored.text(m) for m in raw or ())


# The record's fields this module reads (``b-<bid>``), read by name.
FIELDS = ("total", "pending", "failures", "created_at", "complete_at", "success_at",
          "death_at", "description", "callback_queue", "parent_bid", "invalidated", "tags",
          "callbacks")

class BatchStatus:
    """A batch as stored now; ``exists`` is False for a batch expired or deleted."""

    def __init__(self, bid: str, *, config: Config | None = None) -> None:
        if not isinstance(bid, str) or not bid:
            raise BatchError(f"bid must be a non-empty string, not {bid!r}")
        self.bid = bid
        self.config = config if config is not None else default_config()
        self.problems: list[str] = []
        self._load()

    def __repr__(self) -> str:
        return (f"<wurk.BatchStatus {self.bid} total={self.total} pending={self.pending} "
                f"failures={self.failures}>")

    # -- reading ----------------------------------------------------------------------------
    def _load(self) -> None:
        keys = self.config.keys
        bid = self.bid

        def read(r: Any) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            pipe.exists(keys.batch(bid))
            # The fields this reads, by name: the record may hold anything else besides (a
            # million fields an attacker left), which nothing reads.
            pipe.hmget(keys.batch(bid), list(FIELDS))
            pipe.scard(keys.batch(bid, "kids"))
            pipe.scard(keys.batch(bid, "jids"))
            pipe.ttl(keys.batch(bid))
            return list(pipe.execute())

        exists, fields, kids, live, ttl = self.config.pool("api").run(read, idempotent=True)
        self.raw = {name: stored.text(value) for name, value in zip(FIELDS, fields, strict=True)
                    if value is not None}
        self.exists = bool(exists) and bool(self.raw)
        self.child_count = int(kids)
        self.unfinished = int(live)  # jids neither succeeded nor dead
        self.expires_at = time.time() + ttl if isinstance(ttl, int) and ttl > 0 else None
        self.total = self._count("total")
        self.pending = self._count("pending")
        self.failures = self._count("failures")
        self.created_at = self._time("created_at")
        self.complete_at = self._time("complete_at")
        self.success_at = self._time("success_at")
        self.death_at = self._time("death_at")
        self.description = self.raw.get("description", "")
        self.callback_queue = self.raw.get("callback_queue") or P.DEFAULT_QUEUE
        self.parent_bid = self.raw.get("parent_bid") or None
        self.invalidated = self.raw.get("invalidated") == "1"
        self.tags = self._tags()
        self.callbacks = decode_callbacks(self.raw.get("callbacks"))

    def _count(self, name: str) -> int | Invalid:
        found = count(self.raw.get(name), missing=0)
        if isinstance(found, Invalid):
            self.problems.append(f"{name} is not a whole number: {found.raw}")
        return found

    def _time(self, name: str) -> float | Invalid | None:
        found = epoch(self.raw.get(name) or None)
        if isinstance(found, Invalid):
            self.problems.append(f"{name} is not a time: {found.raw}")
        return found

    def _tags(self) -> list[str]:
        value = self.raw.get("tags")
        if not value:
            return []
        try:
            tags = P.loads_json(value)  # at most 100 levels deep, as Ruby's parser reads
        except ValueError:
            tags = None
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            shown = invalid(value, "a list of tags").raw
            self.problems.append(f"tags is not a list of names: {shown}")
            return []
        return tags

    def refresh(self) -> BatchStatus:
        self.problems = []
        self._load()
        return self

    # -- derived ----------------------------------------------------------------------------
    @property
    def complete(self) -> bool:
        return bool(self.raw.get("complete_at"))

    @property
    def succeeded(self) -> bool:
        return bool(self.raw.get("success_at"))

    @property
    def dead(self) -> bool:
        return bool(self.raw.get("death_at"))

    def _set(self, part: str) -> list[str]:
        """The members of one of the batch's sets, sorted; at most ``stored.FIELD_CAP`` of
        them (a batch of a million failed jobs lists ten thousand)."""
        key = self.config.keys.batch(self.bid, part)
        found = self.config.pool("api").run(lambda r: stored.members(r, key), idempotent=True)
        return [] if isinstance(found, Invalid) else _members(found.items)

    def size_of(self, part: str) -> int:
        """How many members one of the batch's sets holds (``failed``, ``died``…)."""
        key = self.config.keys.batch(self.bid, part)
        return int(self.config.pool("api").run(lambda r: r.scard(key), idempotent=True))

    @property
    def failed_jids(self) -> list[str]:
        """Jobs that failed and have not succeeded since (the dead ones included)."""
        return self._set("failed")

    @property
    def dead_jids(self) -> list[str]:
        return self._set("died")

    @property
    def child_bids(self) -> list[str]:
        return self._set("kids")

    def results(self, *, limit: int = BATCH_READ_CAP) -> dict[str, Outcome | Invalid]:
        """The outcomes stored by this batch's jobs that keep theirs (``result_ttl``): jid →
        ``wurk.results.Outcome`` (``.value``, or ``.unwrap()`` to raise a failure), in the
        order they finished, at most ``limit``; one that cannot be read is an ``Invalid``.
        A job that keeps no result, has not finished, or whose result expired is absent."""
        return batch_outcomes(self.config, self.bid, limit=limit)

    def includes(self, jid: str) -> bool:
        """Whether ``jid`` is a job of this batch that has not finished yet."""
        key = self.config.keys.batch(self.bid, "jids")
        return bool(self.config.pool("api").run(lambda r: r.sismember(key, jid),
                                                idempotent=True))

    def data(self) -> dict[str, Any]:
        """The JSON summary a progress bar polls (the dashboard's status endpoint): an
        unreadable value is null there, its stored text under ``"invalid"``."""
        document = {
            "bid": self.bid, "exists": self.exists, "description": self.description,
            "total": self.total, "pending": self.pending, "failures": self.failures,
            "complete": self.complete, "success": self.succeeded, "dead": self.dead,
            "created_at": self.created_at, "complete_at": self.complete_at,
            "success_at": self.success_at, "death_at": self.death_at,
            "parent_bid": self.parent_bid, "child_count": self.child_count,
            "tags": self.tags, "invalidated": self.invalidated,
            "expires_at": self.expires_at, "problems": list(self.problems),
        }
        found: dict[str, Any] = to_json(document)
        return found

    # -- waiting and deleting ---------------------------------------------------------------
    def join(self, timeout: float = 30.0, *, until: str = "complete") -> BatchStatus:
        """Wait until the batch is complete (or ``until="success"``); for tests and
        scripts — a job must never wait for its own batch."""
        deadline = time.monotonic() + timeout
        while True:
            done = self.succeeded if until == "success" else self.complete
            if done:
                return self
            if time.monotonic() >= deadline:
                raise TimeoutError(f"batch {self.bid} not {until} after {timeout} s "
                                   f"(pending {self.pending} of {self.total})")
            time.sleep(JOIN_POLL)
            self.refresh()

    def delete(self) -> None:
        """Remove the batch: its keys and its entries in the batch and tag indexes."""
        keys = self.config.keys
        bid = self.bid
        tag_keys = [keys.batch_tag(tag) for tag in self.tags or self._set("tags")]

        def remove(r: Any) -> None:
            pipe = r.pipeline(transaction=True)
            pipe.delete(*keys.batch_keys(bid))
            pipe.zrem(keys.batches, bid)
            pipe.srem(keys.batch_died, bid)
            for tag_key in tag_keys:
                pipe.srem(tag_key, bid)
            pipe.execute()

        self.config.pool("api").run(remove)
        self.exists = False


def invalidated(bid: str, *, config: Config | None = None) -> bool:
    """Whether batch ``bid`` (or an ancestor, which marks it too) was invalidated."""
    cfg = config if config is not None else default_config()
    key = cfg.keys.batch(bid)
    return stored.text(cfg.pool("api").run(lambda r: r.hget(key, "invalidated"),
                                     idempotent=True)) == "1"
