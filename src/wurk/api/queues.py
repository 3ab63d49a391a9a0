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
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from .. import payload as P
from .. import scripts
from ..config import Config, default_config
from ..connections.pool import RedisPool
from ..fetch.pause import invalidate_local
from ..keys import PRIVATE_SEPARATOR
from ..stored import Invalid
from ..unique import CLEAR_PAGE, MARK, release_stored
from .paging import PAGE_SIZE, SCAN_COUNT, list_entries
from .record import JobRecord

__all__ = ["Queue", "queue_names"]

DELETE_LISTED_SCRIPT = "api_delete_listed.lua"
_DELETE_MATCHING = scripts.Script("api_delete_matching.lua")
# Entries one call of the delete script looks at: a page costs Redis well under a
# millisecond, and a million-entry queue takes 2,000 short calls instead of one long one.
DELETE_PAGE = 500
# How far from where it was listed a job is looked for: a page is a few seconds old, and a
# queue taking a thousand pushes in that time is busy enough that "it moved, reload" is fair.
LISTED_REACH = 1000
_DIGEST_TEXT = frozenset("0123456789abcdef")
# Characters a JSON writer never escapes: a value made only of these appears in a matching
# payload exactly as given, so the script may look for it before decoding.
_VERBATIM = frozenset(chr(c) for c in range(0x20, 0x7F)) - set('"\\/')


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

    # -- reading ----------------------------------------------------------------------------
    def size(self) -> int:
        return int(self._read(lambda r: r.llen(self.key)))

    def latency(self) -> float | Invalid:
        """Seconds the oldest job has waited; 0.0 for an empty queue."""
        oldest = self._read(lambda r: r.lindex(self.key, -1))
        return entry_latency(oldest)

    def paused(self) -> bool:
        return bool(self._read(lambda r: r.sismember(self.config.keys.paused, self.name)))

    def iterate(self, page_size: int = PAGE_SIZE) -> Iterator[JobRecord]:
        """Every job, newest first, in pages (``wurk.api.paging``'s guarantee)."""
        for raw in list_entries(self._pool, self.key, page_size):
            yield JobRecord(raw, queue=self.name, config=self.config)

    def __iter__(self) -> Iterator[JobRecord]:
        return self.iterate()

    def page(self, start: int, count: int, *, oldest_first: bool = False) -> list[JobRecord]:
        """``count`` jobs from position ``start``, newest first (oldest first when asked):
        one ``LRANGE``, for screens that show page N of a long queue."""
        if start < 0 or count < 1:
            raise ValueError(f"page needs start ≥ 0 and count ≥ 1, not {start!r}, {count!r}")
        if oldest_first:  # the tail of the list is its oldest end
            rows = self._read(lambda r: r.lrange(self.key, -start - count, -start - 1))
            rows = list(reversed(rows))
        else:
            rows = self._read(lambda r: r.lrange(self.key, start, start + count - 1))
        return [JobRecord(raw, queue=self.name, config=self.config) for raw in rows]

    def find_job(self, jid: str) -> JobRecord | None:
        """The job with this jid (reads the whole queue in pages: O(n))."""
        if not jid:
            return None
        needle = jid.encode("utf-8")
        for raw in list_entries(self._pool, self.key):
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
        """Remove one job by its stored bytes; False if it was not there."""
        raw = job.raw if isinstance(job, JobRecord) else job

        def remove(r: Any) -> int:
            return int(r.lrem(self.key, 1, raw))

        removed = bool(self._pool.run(remove))
        if removed:
            release_stored(self.config, [raw])
        return removed

    def delete_listed(self, index: int, digest: str) -> bool:
        """Remove the job listed at ``index`` whose bytes have this SHA-1 (``JobRecord.digest``),
        looking up to ``LISTED_REACH`` entries either side; False if it is not there. A
        unique job's lock is released."""
        if index < 0 or len(digest) != 40 or not set(digest) <= _DIGEST_TEXT:
            return False
        script = scripts.source(DELETE_LISTED_SCRIPT)

        def remove(r: Any) -> Any:
            return r.register_script(script)(keys=[self.key], args=[index, digest,
                                                                    LISTED_REACH])

        found = self._pool.run(remove)
        if not isinstance(found, (bytes, str)):
            return False
        release_stored(self.config, [found])
        return True

    def delete_job(self, jid: str) -> bool:
        """Remove the job with this jid, searched for inside Redis a page at a time (Sidekiq
        Pro's ``delete_job``); False when no entry has it. A unique job's lock is released."""
        if not isinstance(jid, str) or not jid:
            return False
        return self._delete_matching(P.JID, jid) > 0

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
        return self._delete_matching(P.CLASS, wanted)

    def _delete_matching(self, field: str, value: str) -> int:
        """Run the delete script page by page from the head; returns the jobs deleted.
        Never replayed: a broken connection raises, and what the pages before it deleted
        stays deleted (their locks released)."""
        verbatim = "1" if set(value) <= _VERBATIM else ""
        keys = [self.key]
        start, deleted = 0, 0
        while start >= 0:
            args: list[object] = [field, value, start, DELETE_PAGE, verbatim, MARK]

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
        return deleted

    def clear(self) -> int:
        """Delete every job and forget the queue; returns how many jobs there were.

        Never replayed after a broken connection. The unique jobs
        among them are read first (the whole list, in pages) to release their locks.
        """
        marked = MARK.encode()
        holding = [raw for raw in list_entries(self._pool, self.key, CLEAR_PAGE)
                   if marked in raw]

        def run(r: Any) -> int:
            pipe = r.pipeline(transaction=True)
            pipe.llen(self.key)
            pipe.unlink(self.key)
            pipe.srem(self.config.keys.queues, self.name)
            return int(pipe.execute()[0])

        cleared = int(self._pool.run(run))
        release_stored(self.config, holding)
        return cleared


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
