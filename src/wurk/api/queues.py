"""Queues: the lists jobs wait in, and the ``paused`` set.

1. ``Queue.all`` — every queue named in ``queues``, sorted by name.
2. ``Queue`` — size, latency (age of the oldest job), paused or not, pause/unpause,
   newest-first iteration in pages, find a job by jid, delete one job (by its bytes, or by
   where it was listed and its digest), clear. Deleting or clearing a unique job releases
   its lock (``wurk.unique``): it will never run to do so.
3. ``delete_job(jid)`` and ``delete_by_class(name)``: Sidekiq Pro's deletes done inside
   Redis (``scripts/api_delete_matching.lua``), a page of ``DELETE_PAGE`` entries per script
   call, so a queue of a million jobs never holds Redis for long; entries that are not JSON
   objects are skipped.
4. A partitioned queue (``wurk.partitions``, declared in the configuration's
   ``partitions``): every call covers the whole queue — its plain list (jobs not routed yet)
   and each partition with work (the ring's members, read with ``ZSCAN``), listed in that
   order: the plain list, then the partitions by name, each newest first. A page reads the
   lists' lengths and then only the entries it shows. ``clear`` empties each partition a page
   at a time in Lua (``scripts/partition_clear.lua``), taking an emptied partition out of
   the ring in the same script and leaving the in-flight counts alone, so the jobs already
   running are ACKed as before; the script hands back the page's unique jobs and jobs
   keeping their result, whose locks are released and results say "deleted".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from .. import partitions, scripts
from .. import payload as P
from ..config import Config, default_config
from ..connections.pool import RedisPool
from ..fetch.pause import invalidate_local
from ..keys import PRIVATE_SEPARATOR
from ..results.store import record_deleted
from ..stored import Invalid
from ..unique import CLEAR_PAGE, MARK, release_stored
from .paging import PAGE_SIZE, SCAN_COUNT, clear_entries, list_entries
from .record import JobRecord

__all__ = ["Listed", "Queue", "queue_names"]

DELETE_LISTED_SCRIPT = "api_delete_listed.lua"
_DELETE_MATCHING = scripts.Script("api_delete_matching.lua")
# Entries one call of the delete script looks at: a page costs Redis well under a
# millisecond, and a million-entry queue takes 2,000 short calls instead of one long one.
DELETE_PAGE = 500
# How far from where it was listed a job is looked for: a page is a few seconds old, and a
# queue taking a thousand pushes in that time is busy enough that "it moved, reload" is fair.
LISTED_REACH = 1000
# The text every job that keeps its result contains: the delete script returns those it
# deleted, whose results then say so (``record_deleted``).
KEEPS_RESULT = f'"{P.RESULT_TTL}"'
_DIGEST_TEXT = frozenset("0123456789abcdef")
# Characters a JSON writer never escapes: a value made only of these appears in a matching
# payload exactly as given, so the script may look for it before decoding.
_VERBATIM = frozenset(chr(c) for c in range(0x20, 0x7F)) - set('"\\/')


# Lists whose length one pipeline reads (a partitioned queue's partitions), and entries of a
# partition one call of the clear script removes.
LENGTHS_PAGE = 1000
PARTITION_CLEAR_PAGE = CLEAR_PAGE


@dataclass(frozen=True, slots=True)
class Listed:
    """A job as a page listed it: where it is, to delete it by that (``delete_listed``)."""

    record: JobRecord
    partition: str | None  # None: the queue's plain list
    index: int  # its place in that list, counted from the head (newest) end


# Queues listed at most (the dashboard, ``wurk queues``, the stats): a deployment has tens;
# a ``queues`` set of a million names, left by a bug or an attacker, costs a page what a
# thousand do.
QUEUE_CAP = 1_000


def queue_names(config: Config, cap: int = QUEUE_CAP) -> Iterator[str]:
    """Names in the ``queues`` set, read with ``SSCAN`` (unsorted, each once or more), at
    most about ``cap`` of them."""
    pool = config.pool("api")
    cursor, given = 0, 0
    while given < cap:
        cursor, names = pool.run(partial(sscan_page, config.keys.queues, cursor),
                                 idempotent=True)
        yield from names[:cap - given]
        given += len(names)
        if cursor == 0:
            return


def sscan_page(key: str, cursor: int, r: Any) -> tuple[int, list[str]]:
    """One ``SSCAN`` step: the next cursor and the members, as text."""
    next_cursor, members = r.sscan(key, cursor, count=SCAN_COUNT)
    return int(next_cursor), [m.decode("utf-8", "replace") for m in members]


class Queue:
    """One queue, ``queue:<name>``. Every call reads Redis afresh."""

    def __init__(self, name: str = P.DEFAULT_QUEUE, config: Config | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a queue name must be a non-empty string, not {name!r}")
        if PRIVATE_SEPARATOR in name:
            raise ValueError(f"queue name {name!r} contains {PRIVATE_SEPARATOR!r}; that is an "
                             "in-flight list, not a queue")
        self.name = name
        self.config = config if config is not None else default_config()

    @classmethod
    def all(cls, config: Config | None = None) -> list[Queue]:
        """Every known queue (the ``queues`` set), sorted by name."""
        cfg = config if config is not None else default_config()
        return [cls(name, cfg) for name in sorted(set(queue_names(cfg))) if name
                and PRIVATE_SEPARATOR not in name]

    def __repr__(self) -> str:
        return f"<Queue {self.name!r}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Queue) and (other.name, other.config) == (self.name,
                                                                           self.config)

    def __hash__(self) -> int:
        return hash(self.name)

    @property
    def key(self) -> str:
        return self.config.keys.queue(self.name)

    @property
    def _pool(self) -> RedisPool:
        return self.config.pool("api")

    def _read(self, fn: Callable[[Any], Any]) -> Any:
        return self._pool.run(fn, idempotent=True)

    # -- a partitioned queue's lists ----------------------------------------------------------
    @property
    def partitioned(self) -> bool:
        """Whether this configuration declares the queue partitioned (``wurk.partitions``)."""
        return self.name in self.config.partitions

    def partition_names(self) -> list[str]:
        """The partitions with work (the ring's members that name one), sorted; [] for a
        plain queue. Read with ``ZSCAN``, a page per round trip; a member no push could
        have written is left out."""
        if not self.partitioned:
            return []
        ring = self.config.keys.partition_ring(self.name)
        if self._read(lambda r: _text(r.type(ring))) != "zset":
            return []
        found: set[str] = set()
        cursor = 0
        while True:
            def step(r: Any, at: int = cursor) -> tuple[int, Any]:
                next_cursor, rows = r.zscan(ring, at, count=SCAN_COUNT)
                return int(next_cursor), rows

            cursor, rows = self._read(step)
            found.update(name for name in (_text(m) for m, _ in rows)
                         if partitions.is_partition_name(name))
            if cursor == 0:
                return sorted(found)

    def _lists(self) -> list[tuple[str | None, str]]:
        """``(partition, key)`` of each list holding the queue's jobs, in listing order: the
        plain list (partition None), then a partitioned queue's partitions by name."""
        keys = self.config.keys
        return [(None, self.key), *((name, keys.partition(self.name, name))
                                    for name in self.partition_names())]

    def _lengths(self, lists: list[tuple[str | None, str]]) -> list[int]:
        """The length of each list, ``LENGTHS_PAGE`` per round trip; a key that is not a
        list (written by hand) holds none."""
        lengths: list[int] = []
        for start in range(0, len(lists), LENGTHS_PAGE):
            chunk = [key for _, key in lists[start:start + LENGTHS_PAGE]]

            def read(r: Any, chunk: list[str] = chunk) -> list[Any]:
                pipe = r.pipeline(transaction=False)
                for key in chunk:
                    pipe.llen(key)
                return list(pipe.execute(raise_on_error=False))

            lengths += [n if isinstance(n, int) else 0 for n in self._read(read)]
        return lengths

    def unrouted(self) -> int:
        """Jobs on the plain list (for a partitioned queue: not routed to a partition yet);
        a key that is not a list holds none."""
        return self._lengths([(None, self.key)])[0]

    def partitioned_size(self) -> int:
        """Jobs waiting in a partitioned queue's partitions (not its plain list); 0 for a
        plain queue."""
        lists = self._lists()[1:]
        return sum(self._lengths(lists)) if lists else 0

    # -- reading ----------------------------------------------------------------------------
    def size(self) -> int:
        """Jobs waiting; a partitioned queue's in its plain list and every partition."""
        if self.partitioned:
            return sum(self._lengths(self._lists()))
        return int(self._read(lambda r: r.llen(self.key)))

    def latency(self) -> float | Invalid:
        """Seconds the oldest job has waited; 0.0 for an empty queue."""
        oldest = self._read(lambda r: r.lindex(self.key, -1))
        return entry_latency(oldest)

    def paused(self) -> bool:
        return bool(self._read(lambda r: r.sismember(self.config.keys.paused, self.name)))

    def iterate(self, page_size: int = PAGE_SIZE) -> Iterator[JobRecord]:
        """Every job, newest first, in pages (``wurk.api.paging``'s guarantee); a
        partitioned queue's plain list, then each partition by name."""
        for _, key in self._lists():
            for raw in list_entries(self._pool, key, page_size):
                yield JobRecord(raw, queue=self.name, config=self.config)

    def __iter__(self) -> Iterator[JobRecord]:
        return self.iterate()

    def page(self, start: int, count: int, *, oldest_first: bool = False) -> list[JobRecord]:
        """``count`` jobs from position ``start``, newest first (oldest first when asked):
        one ``LRANGE``, for screens that show page N of a long queue."""
        return [listed.record for listed in self.listing(start, count,
                                                         oldest_first=oldest_first)]

    def listing(self, start: int, count: int, *, oldest_first: bool = False) -> list[Listed]:
        """``page``'s jobs, each with the list it is in and its place there. A partitioned
        queue's page reads every list's length (``LENGTHS_PAGE`` a round trip), then only
        the entries shown, in one round trip."""
        if start < 0 or count < 1:
            raise ValueError(f"page needs start ≥ 0 and count ≥ 1, not {start!r}, {count!r}")
        if self.partitioned:
            return self._partitioned_listing(start, count, oldest_first)
        if oldest_first:  # the tail of the list is its oldest end
            rows = self._read(lambda r: r.lrange(self.key, -start - count, -start - 1))
            rows = list(reversed(rows))
        else:
            rows = self._read(lambda r: r.lrange(self.key, start, start + count - 1))
        length = int(self._read(lambda r: r.llen(self.key))) if oldest_first else 0
        return [Listed(JobRecord(raw, queue=self.name, config=self.config), None,
                       max(0, length - 1 - start - i) if oldest_first else start + i)
                for i, raw in enumerate(rows)]

    def _partitioned_listing(self, start: int, count: int,
                             oldest_first: bool) -> list[Listed]:
        lists = self._lists()
        lengths = self._lengths(lists)
        order = list(zip(lists, lengths, strict=True))
        if oldest_first:
            order.reverse()
        # (partition, key, offset from the end read, how many, the list's length)
        wanted: list[tuple[str | None, str, int, int, int]] = []
        skip, need = start, count
        for (name, key), length in order:
            if need == 0:
                break
            if skip >= length:
                skip -= length
                continue
            take = min(need, length - skip)
            wanted.append((name, key, skip, take, length))
            skip, need = 0, need - take
        if not wanted:
            return []

        def read(r: Any) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for _, key, offset, take, _ in wanted:
                if oldest_first:  # the tail of a list is its oldest end
                    pipe.lrange(key, -offset - take, -offset - 1)
                else:
                    pipe.lrange(key, offset, offset + take - 1)
            return list(pipe.execute(raise_on_error=False))

        listed: list[Listed] = []
        for (name, _, offset, _, length), rows in zip(wanted, self._read(read), strict=True):
            if not isinstance(rows, list):
                continue  # the key changed type meanwhile
            if oldest_first:
                rows.reverse()
            for i, raw in enumerate(rows):
                index = length - 1 - offset - i if oldest_first else offset + i
                listed.append(Listed(JobRecord(raw, queue=self.name, config=self.config),
                                     name, max(0, index)))
        return listed

    def find_job(self, jid: str) -> JobRecord | None:
        """The job with this jid (reads the whole queue in pages: O(n))."""
        if not jid:
            return None
        needle = jid.encode("utf-8")
        for _, key in self._lists():
            for raw in list_entries(self._pool, key):
                if needle in raw:  # cheap test before parsing
                    record = JobRecord(raw, queue=self.name, config=self.config)
                    if record.jid == jid:
                        return record
        return None

    # -- writing ----------------------------------------------------------------------------
    def pause(self) -> None:
        """Workers stop fetching from it (``SADD paused``); running jobs are unaffected."""
        self._read(lambda r: r.sadd(self.config.keys.paused, self.name))  # idempotent
        invalidate_local()  # this process's fetchers see it now, others within the cache TTL

    def unpause(self) -> None:
        self._read(lambda r: r.srem(self.config.keys.paused, self.name))  # idempotent
        invalidate_local()

    def delete(self, job: JobRecord | bytes | str) -> bool:
        """Remove one job by its stored bytes; False if it was not there. A partitioned
        queue's job is looked for in the plain list, then in the partition it names, then
        (a job written by hand into another) in the others, one round trip each."""
        raw = job.raw if isinstance(job, JobRecord) else job
        keys = [self.key]
        if self.partitioned:
            named = self.config.keys.partition(self.name, partitions.partition_of(raw))
            keys += [named, *(key for _, key in self._lists()[1:] if key != named)]

        def remove(r: Any) -> int:
            for key in keys:
                if r.type(key) in (b"list", "list") and int(r.lrem(key, 1, raw)):
                    return 1
            return 0

        removed = bool(self._pool.run(remove))
        if removed:
            release_stored(self.config, [raw])
            record_deleted(self.config, [raw], self.deleted_from)
        return removed

    @property
    def deleted_from(self) -> str:
        """Where a job deleted from here was, as its result says (``wurk.JobDeleted``)."""
        return f"queue {self.name}"

    def delete_listed(self, index: int, digest: str, partition: str | None = None) -> bool:
        """Remove the job listed at ``index`` whose bytes have this SHA-1 (``JobRecord.digest``),
        looking up to ``LISTED_REACH`` entries either side; False if it is not there. A
        unique job's lock is released. ``partition`` names the partition of a partitioned
        queue it was listed in (``Listed.partition``); None, the plain list."""
        if index < 0 or len(digest) != 40 or not set(digest) <= _DIGEST_TEXT:
            return False
        key = self.key
        if partition is not None:
            if not self.partitioned or not partitions.is_partition_name(partition):
                return False
            key = self.config.keys.partition(self.name, partition)
        script = scripts.source(DELETE_LISTED_SCRIPT)

        def remove(r: Any) -> Any:
            if r.type(key) not in (b"list", "list"):
                return 0
            return r.register_script(script)(keys=[key], args=[index, digest, LISTED_REACH])

        found = self._pool.run(remove)
        if not isinstance(found, (bytes, str)):
            return False
        release_stored(self.config, [found])
        record_deleted(self.config, [found], self.deleted_from)
        return True

    def delete_job(self, jid: str) -> bool:
        """Remove the job with this jid, searched for inside Redis a page at a time (Sidekiq
        Pro's ``delete_job``); False when no entry has it. A unique job's lock is released."""
        if not isinstance(jid, str) or not jid:
            return False
        return any(self._delete_matching(P.JID, jid, key) > 0 for _, key in self._lists())

    def delete_by_class(self, name: str | Any) -> int:
        """Remove every job whose ``class`` is ``name`` (a job name, or an ``@wurk.job``
        function or ``wurk.Job`` class), a page at a time (Sidekiq Pro's
        ``delete_by_class``); returns how many. Unique jobs' locks are released. Jobs pushed
        while it runs may be left."""
        wanted = name if isinstance(name, str) else getattr(getattr(name, "definition", None),
                                                            "name", None)
        if not isinstance(wanted, str) or not wanted:
            raise ValueError(f"delete_by_class needs a job name or a registered job, not "
                             f"{name!r}")
        return sum(self._delete_matching(P.CLASS, wanted, key) for _, key in self._lists())

    def _delete_matching(self, field: str, value: str, key: str) -> int:
        """Run the delete script page by page from the head; returns the jobs deleted.
        Never replayed: a broken connection raises, and what the pages before it deleted
        stays deleted (their locks released)."""
        verbatim = "1" if set(value) <= _VERBATIM else ""
        keys = [key]  # of another type (written by hand): nothing to delete (the script)
        start, deleted = 0, 0
        while start >= 0:
            args: list[object] = [field, value, start, DELETE_PAGE, verbatim, MARK,
                                  KEEPS_RESULT]

            def run(r: Any, args: list[object] = args) -> Any:
                reply = _DELETE_MATCHING.call_many(r, [(keys, args)])[0]
                if isinstance(reply, Exception):
                    raise reply
                return reply

            reply = self._pool.run(run)
            deleted += int(reply[0])
            start = int(reply[1])
            if len(reply) > 2:
                release_stored(self.config, reply[2:])
                record_deleted(self.config, reply[2:], self.deleted_from)
        return deleted

    def clear(self) -> int:
        """Delete every job and forget the queue; returns how many jobs there were.

        The list leaves its key and the queue the queues set in one step (a job pushed
        after it stays); the unique jobs among those taken then have their locks released,
        read a page at a time (``paging.clear_entries``). That step is not replayed: a
        connection broken under it raises ``RedisUnavailable``, whether or not Redis applied
        it. A partitioned queue's partitions are emptied after its plain list, each a page
        at a time (``partition_clear.lua``); see the module's notes.
        """
        if self.partitioned:
            return self._clear_partitioned()
        return clear_entries(self.config, self._pool, self.key, "list", self.name,
                             deleted_from=self.deleted_from)

    def _clear_partitioned(self) -> int:
        keys = self.config.keys
        ring = keys.partition_ring(self.name)
        cleared = 0
        if self._read(lambda r: _text(r.type(self.key))) == "list":
            cleared += clear_entries(self.config, self._pool, self.key, "list",
                                     deleted_from=self.deleted_from)
        for name in self.partition_names():
            cleared += self._clear_partition(name)
        self._drop_bad_members(ring)

        def forget(r: Any) -> Any:
            return partitions.FORGET.call_many(r, [([self.key, ring, keys.queues],
                                                    [self.name])])[0]

        self._pool.run(forget)
        return cleared

    def _clear_partition(self, name: str) -> int:
        """Empty one partition, ``PARTITION_CLEAR_PAGE`` jobs per script call, at most the
        jobs it held at the first call (a steady stream of pushes cannot keep it going)."""
        keys = self.config.keys
        call = ([keys.partition(self.name, name), keys.partition_ring(self.name)],
                [name, PARTITION_CLEAR_PAGE, MARK, KEEPS_RESULT])
        removed, budget = 0, None
        while budget is None or removed < budget:

            def run(r: Any) -> Any:
                reply = partitions.CLEAR.call_many(r, [call])[0]
                if isinstance(reply, Exception):
                    raise reply
                return reply

            reply = self._pool.run(run)
            taken, left = int(reply[0]), int(reply[1])
            if budget is None:
                budget = taken + left
            removed += taken
            if len(reply) > 2:
                release_stored(self.config, reply[2:])
                record_deleted(self.config, reply[2:], self.deleted_from)
            if left == 0 or taken == 0:
                break
        return removed

    def _drop_bad_members(self, ring: str) -> None:
        """Ring members no push could have written (the fetch drops them too): gone, so a
        cleared queue is forgotten."""
        def run(r: Any) -> None:
            if _text(r.type(ring)) != "zset":
                return
            bad = [m for m, _ in r.zscan_iter(ring, count=SCAN_COUNT)
                   if not partitions.is_partition_name(_text(m))]
            for start in range(0, len(bad), LENGTHS_PAGE):
                r.zrem(ring, *bad[start:start + LENGTHS_PAGE])

        self._pool.run(run)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def entry_latency(raw: bytes | Invalid | None, now: float | None = None) -> float | Invalid:
    """The latency of a queue whose oldest entry is ``raw``; 0.0 when unknown,
    ``Invalid`` when its time (or the queue itself) cannot be read."""
    if raw is None:
        return 0.0
    if isinstance(raw, Invalid):
        return raw
    record = JobRecord(raw)
    if record.parse_error is not None:
        return 0.0
    waited = record.latency(time.time() if now is None else now)
    return waited if isinstance(waited, Invalid) else max(0.0, waited)
