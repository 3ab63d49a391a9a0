"""The sorted sets of jobs: ``schedule``, ``retry`` and ``dead``.

1. ``JobSet`` — size, newest-first iteration, substring scan, find by jid, fetch by score,
   delete, clear, schedule; the base of the three sets.
2. ``SortedEntry`` — one member: delete, retry now, add to queue, kill, reschedule. Every
   action names the member by the bytes it was read as and returns whether this
   call was the one that acted (False when someone else moved it first). Its ``address``
   (``<score>-<digest>``) names it in a URL whatever its size, score (negative, infinite) or
   jid (missing, repeated); ``JobSet.at_address`` finds it again.
3. ``ScheduledSet``; ``RetrySet`` (retry all, kill all); ``DeadSet`` (kill, retry all, trim).
4. ``bury`` — the dead-set write (add, trim by age and size) in one ``MULTI``.

Deleting, clearing or killing a unique job releases its lock (``wurk.unique``). Killing a
job that keeps its result (``result_ttl``) stores its final failure and tells its waiters
(``wurk.results.recorder.record_deaths``, a page of jobs a round trip), whatever
``notify_failure`` says and in any process (a dashboard alone too): ``wurk.JobKilled``, its
message naming the job's last error when its entry carries one.

"Retry now" and "add to queue" move a member to its queue in one Lua script
(``scripts/api_requeue.lua``): removal and push cannot be separated, and a replay after a
broken connection finds the member gone and pushes nothing. "Kill" moves a member to the
dead set in one script too (``scripts/api_kill.lua``, through ``Morgue.take``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

from .. import payload as P
from .. import scripts
from .. import stored as values
from ..config import Config, default_config
from ..connections.pool import RedisPool
from ..errors import InspectionError, JobKilled
from ..morgue import Morgue
from ..reporting import run_death_handlers
from ..results.recorder import ResultDeathHandler, record_deaths
from ..results.store import keeping, record_deleted
from ..stored import Invalid
from ..unique import release_stored
from .paging import PAGE_SIZE, ZEntry, clear_entries, scan_entries, zset_after, zset_entries
from .record import JobRecord

# Members of one score ``JobSet.at_address`` and ``fetch`` read per round trip.
ADDRESS_PAGE = 1_000
# Characters a JSON writer never escapes: a jid made only of these appears in its payload's
# bytes as given, so an entry without them is not parsed to be ruled out.
_VERBATIM = frozenset(chr(c) for c in range(0x20, 0x7F)) - set('"\\/')

__all__ = ["DeadSet", "JobSet", "RetrySet", "ScheduledSet", "SortedEntry", "bury"]

REQUEUE_SCRIPT = "api_requeue.lua"
# Entries moved per round trip by retry_all / kill_all: one pipeline of this many script
# calls or ZREMs stays well under a millisecond of server time.
BULK_PAGE = 100
KILLED_BY_API = "Job killed by API"
# The longest last error a killed job's result quotes (characters).
LAST_ERROR_CAP = 500


def bury(config: Config, members: Sequence[bytes | str], *, now: float | None = None,
         trim: bool = True) -> None:
    """Add ``members`` to the dead set through the package's one dead-set writer."""
    Morgue(config, config.pool("api")).bury(*members, now=now, trim=trim)


def notify_death(config: Config, item: P.Payload, exc: BaseException) -> None:
    """The application's death handlers, told of a job killed through the API; not the one
    that stores a result (``killed`` stored it)."""
    run_death_handlers(config, item, exc, skip=ResultDeathHandler)


def killed(config: Config, gone: Sequence[bytes | str], *, notify_failure: bool,
           exc: BaseException | None) -> None:
    """After ``gone`` (stored entries) moved to the dead set: unique locks released, the
    final failure of each job keeping its result stored and its waiters told (one round
    trip), then, with ``notify_failure``, the death handlers run for each job payload."""
    if not gone:
        return
    release_stored(config, gone)
    record_deaths(config, ((item, exc or killed_error(item)) for item in keeping(gone)))
    if notify_failure:
        for raw in gone:
            found = JobRecord(raw, config=config)
            if found.parse_error is None:
                notify_death(config, found.item, exc or JobKilled(KILLED_BY_API))


def killed_error(item: P.Payload) -> JobKilled:
    """What a job killed through the API died of, as its result says: killed, and its last
    error when its entry carries one (a retry's)."""
    error_class, message = item.get(P.ERROR_CLASS), item.get(P.ERROR_MESSAGE)
    said = f"{KILLED_BY_API} (wurk.api or the dashboard)"
    if not isinstance(error_class, str) or not error_class:
        return JobKilled(said)
    last = f"{error_class}: {message}" if isinstance(message, str) and message else error_class
    if len(last) > LAST_ERROR_CAP:
        last = last[:LAST_ERROR_CAP] + "…"
    return JobKilled(f"{said}; its last error: {last}")


def _score(at: Any) -> float:
    """``at`` as a set's score (epoch seconds; an infinity is a score Redis keeps), or
    ``ValueError`` naming it: Redis refused NaN in its own words, and a text or a bool
    went through ``float()`` unchecked."""
    if isinstance(at, bool) or not isinstance(at, (int, float)):
        raise ValueError(f"a time to run at must be epoch seconds (a number), not {at!r}")
    try:
        score = float(at)
    except OverflowError:
        score = math.inf if at > 0 else -math.inf
    if math.isnan(score):
        raise ValueError("a time to run at must be epoch seconds, not NaN")
    return score


class SortedEntry(JobRecord):
    """One member of a job set, with its score (epoch seconds)."""

    __slots__ = ("parent", "score")

    def __init__(self, parent: JobSet, raw: bytes | str, score: float) -> None:
        super().__init__(raw, config=parent.config)
        self.parent = parent
        self.score = score

    @property
    def at(self) -> float | Invalid:
        """When it runs (schedule, retry) or died (dead): the score, checked as a time."""
        checked = values.epoch(self.score)
        return checked if checked is not None else values.invalid(self.score, "a time")

    @property
    def entry_id(self) -> str:
        """``<score>-<jid>``: names one entry even among equal scores."""
        return f"{P.score(self.score)}-{self.jid}"

    @property
    def address(self) -> str:
        """``<score>-<digest>``: names this entry in a URL (``JobSet.at_address``)."""
        return f"{P.score(self.score)}-{self.digest}"

    def to_dict(self) -> dict[str, Any]:
        return {"score": self.score, **super().to_dict()}

    def delete(self) -> bool:
        """Remove this entry; False if it was already gone."""
        return self.parent.delete_by_value(self.raw)

    def retry(self) -> bool:
        """Push it to its queue now, ``retry_count`` one lower so this run costs no attempt."""
        return self.parent._requeue(self, decrement=True)

    def add_to_queue(self) -> bool:
        """Push it to its queue now, unchanged but for ``enqueued_at``."""
        return self.parent._requeue(self, decrement=False)

    def kill(self, *, notify_failure: bool = True, exc: BaseException | None = None) -> bool:
        """Move it to the dead set as stored; death handlers run unless ``notify_failure``
        is False."""
        return self.parent._kill(self, notify_failure=notify_failure, exc=exc)

    def reschedule(self, at: float) -> bool:
        """Give it a new score (epoch seconds); False if it is gone."""
        return self.parent._reschedule(self, at)


class JobSet:
    """A sorted set of job payloads scored by epoch seconds."""

    name: ClassVar[str] = ""  # Sidekiq's name for the set
    label: ClassVar[str] = ""  # how messages name it
    # Where a job deleted from the set was, as its result says (``wurk.JobDeleted``); None:
    # its deletion records no result (the dead set's jobs stored their final one as they died).
    deleted_from: ClassVar[str | None] = None

    def __init__(self, config: Config | None = None) -> None:
        self.config = config if config is not None else default_config()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key!r}>"

    @property
    def key(self) -> str:
        """The sorted set's key (``wurk.keys``, under any ``key_prefix``)."""
        raise NotImplementedError

    @property
    def _pool(self) -> RedisPool:
        return self.config.pool("api")

    def _read(self, fn: Callable[[Any], Any]) -> Any:
        return self._pool.run(fn, idempotent=True)

    # -- reading ----------------------------------------------------------------------------
    def size(self) -> int:
        return int(self._read(lambda r: r.zcard(self.key)))

    def iterate(self, page_size: int = PAGE_SIZE) -> Iterator[SortedEntry]:
        """Every entry, highest score first, in pages (``wurk.api.paging``'s guarantee)."""
        for member, score in zset_entries(self._pool, self.key, page_size):
            yield SortedEntry(self, member, score)

    def __iter__(self) -> Iterator[SortedEntry]:
        return self.iterate()

    def page(self, start: int, count: int, *, descending: bool = False) -> list[SortedEntry]:
        """``count`` entries from rank ``start``, lowest score first (highest when
        ``descending``): one ``ZRANGE``, for screens that show page N of a large set."""
        if start < 0 or count < 1:
            raise ValueError(f"page needs start ≥ 0 and count ≥ 1, not {start!r}, {count!r}")
        rows = self._read(lambda r: r.zrange(self.key, start, start + count - 1,
                                              desc=descending, withscores=True))
        return [SortedEntry(self, bytes(m), float(s)) for m, s in rows]

    def scan(self, text: str) -> Iterator[SortedEntry]:
        """Entries whose stored JSON contains ``text`` (``ZSCAN MATCH``)."""
        for member, score in scan_entries(self._pool, self.key, text):
            yield SortedEntry(self, member, score)

    def find_job(self, jid: str) -> SortedEntry | None:
        """The entry with this jid (a scan: O(n) on a large set)."""
        if not jid:
            return None
        return next((entry for entry in self.scan(jid) if entry.jid == jid), None)

    def fetch(self, score: float | tuple[float, float],
              jid: str | None = None) -> list[SortedEntry]:
        """Entries with exactly this score — or, given a ``(low, high)`` pair, scored from
        ``low`` to ``high`` (both included, lowest first), as Sidekiq's ``fetch`` takes a
        range — and this jid, when given. Read ``ADDRESS_PAGE`` a round trip: a score
        thousands of entries share (a bulk schedule) is never one reply, and with a jid only
        the entries whose bytes hold it are parsed."""
        low, high = _bounds(score)
        needle = jid.encode() if jid is not None and set(jid) <= _VERBATIM else None
        found: list[SortedEntry] = []
        for raw, at in self._between(low, high):
            if needle is not None and needle not in raw:
                continue  # a JSON writer leaves such a jid as it is: not this one
            entry = SortedEntry(self, raw, at)
            if jid is None or entry.jid == jid:
                found.append(entry)
        return found

    def _at_score(self, score: float) -> Iterator[ZEntry]:
        """The members with exactly this score, ``ADDRESS_PAGE`` per round trip."""
        return self._between(score, score)

    def _between(self, low: float, high: float) -> Iterator[ZEntry]:
        """The members scored from ``low`` to ``high``, ``ADDRESS_PAGE`` per round trip."""
        first, last = P.score(low), P.score(high)
        offset = 0
        while True:
            def page(r: Any, at: int = offset) -> Any:
                return r.zrange(self.key, first, last, byscore=True, withscores=True,
                                offset=at, num=ADDRESS_PAGE)

            rows = self._read(page)
            for member, found in rows:
                yield bytes(member), float(found)
            if len(rows) < ADDRESS_PAGE:
                return
            offset += len(rows)

    def at_address(self, address: str) -> SortedEntry | None:
        """The entry whose ``address`` this is, or None (gone, or not an address)."""
        score_text, dash, digest = address.rpartition("-")
        try:
            score = float(score_text)
        except ValueError:
            return None
        if not dash or math.isnan(score):
            return None
        # The members sharing the score are read a page at a time and matched by the digest
        # of their bytes: a score that thousands of entries share (a bulk schedule, a hostile
        # set) costs hashing their bytes, never parsing every payload to show one.
        for raw, found in self._at_score(score):
            if hashlib.sha1(raw, usedforsecurity=False).hexdigest() == digest:
                return SortedEntry(self, raw, found)
        return None

    # -- writing ----------------------------------------------------------------------------
    def schedule(self, at: float, payload: Mapping[str, Any]) -> None:
        """Add a payload scored ``at`` (epoch seconds)."""
        score = _score(at)
        raw = P.dumps(dict(payload))
        self._read(lambda r: r.zadd(self.key, {raw: score}))  # same member, same score

    def delete_by_value(self, raw: bytes | str) -> bool:
        removed = bool(self._pool.run(lambda r: r.zrem(self.key, raw)))
        if removed:
            release_stored(self.config, [raw])
            if self.deleted_from is not None:
                record_deleted(self.config, [raw], self.deleted_from)
        return removed

    def delete_by_jid(self, score: float, jid: str) -> bool:
        """Remove the entry with this score and jid; False if there is none."""
        return any([entry.delete() for entry in self.fetch(score, jid)])

    def clear(self) -> int:
        """Remove every entry; returns how many there were. The set leaves its key in one
        step (an entry added after it stays); the unique jobs among those taken then have
        their locks released, found a page at a time (``paging.clear_entries``)."""
        return clear_entries(self.config, self._pool, self.key, "zset",
                             deleted_from=self.deleted_from)

    # -- entry actions ----------------------------------------------------------------------
    def _requeue(self, entry: SortedEntry, *, decrement: bool) -> bool:
        queue, payload = self._pushable(entry, decrement=decrement)
        keys = self.config.keys
        script = _requeue_script()

        def move(r: Any) -> int:
            return int(r.register_script(script)(
                keys=[self.key, keys.queues, keys.queue(queue)],
                args=[entry.raw, queue, payload]))

        return bool(self._pool.run(move, idempotent=True))  # a replay finds it gone

    def _pushable(self, entry: SortedEntry, *, decrement: bool) -> tuple[str, str]:
        """The queue and the payload to push for ``entry``; refuses what cannot run."""
        if entry.parse_error is not None:
            raise InspectionError(
                f"{self.label} entry {entry.text[:80]!r} is not a job payload "
                f"({entry.parse_error}); it can only be deleted"
            )
        item = dict(entry.item)
        queue = item.get(P.QUEUE, P.DEFAULT_QUEUE)
        if not isinstance(queue, str) or not queue or "|" in queue:
            raise InspectionError(
                f"job {entry.jid!r} in the {self.label} names the queue {queue!r}, which "
                "cannot be pushed to; fix or delete the entry"
            )
        count = item.get(P.RETRY_COUNT)
        if decrement and isinstance(count, int) and not isinstance(count, bool):
            item[P.RETRY_COUNT] = count - 1
        item[P.ENQUEUED_AT] = P.write_time(self.config.timestamp_format)
        try:
            return queue, P.dumps(item)
        except ValueError:
            raise InspectionError(
                f"job {entry.jid!r} in the {self.label} holds a number JSON cannot carry "
                "(too large for a float); it can only be deleted or killed"
            ) from None

    def _kill(self, entry: SortedEntry, *, notify_failure: bool,
              exc: BaseException | None) -> bool:
        if not self._take([entry.raw])[0]:
            return False
        killed(self.config, [entry.raw], notify_failure=notify_failure, exc=exc)
        return True

    def _take(self, members: list[bytes]) -> list[bool]:
        """Move each member to the dead set in one script each (``scripts/api_kill.lua``):
        never in neither place; whether each was still here."""
        return Morgue(self.config, self._pool).take(self.key, members)

    def _reschedule(self, entry: SortedEntry, at: float) -> bool:
        score = _score(at)

        def run(r: Any) -> bool:
            pipe = r.pipeline(transaction=True)
            pipe.zadd(self.key, {entry.raw: score}, xx=True)
            pipe.zscore(self.key, entry.raw)
            return pipe.execute()[1] is not None

        present = bool(self._read(run))
        if present:
            entry.score = score
        return present

    # -- bulk -------------------------------------------------------------------------------
    def _lowest(self, offset: int, count: int) -> list[ZEntry]:
        rows = self._read(lambda r: r.zrange(self.key, offset, offset + count - 1,
                                              withscores=True))
        return [(bytes(m), float(s)) for m, s in rows]

    def _after(self, cursor: ZEntry, count: int) -> list[ZEntry]:
        """Up to ``count`` entries after ``cursor`` in the set's order (score, then member
        bytes), found by rank whether or not the cursor is still there
        (``wurk.api.paging.zset_after``)."""
        return zset_after(self._pool, self.key, cursor, count, descending=False)

    def _present(self) -> Iterator[list[ZEntry]]:
        """Pages of ``BULK_PAGE`` entries, lowest score first, up to the entry that was the
        highest when this began. Each page is read after the last entry of the one before (by
        score and member), not by rank: an entry added below the cursor meanwhile (a new
        failure scored sooner) shifts nothing, so every entry present throughout is given."""
        top = self._read(lambda r: r.zrange(self.key, -1, -1, withscores=True))
        if not top:
            return
        last = (float(top[0][1]), bytes(top[0][0]))
        page = self._lowest(0, BULK_PAGE)
        while page:
            kept = [(m, s) for m, s in page if (s, m) <= last]
            if kept:
                yield kept
            if len(kept) < len(page):
                return
            page = self._after(page[-1], BULK_PAGE)

    def _requeue_all(self, *, decrement: bool,
                     only: Callable[[list[SortedEntry]], list[SortedEntry]] | None = None
                     ) -> int:
        """Move every entry present now to its queue (with ``only``, those it keeps of each
        page), oldest first, a page a round trip; returns how many moved.

        Entries that are not job payloads stay where they are.
        """
        moved = 0
        for rows in self._present():
            entries = [SortedEntry(self, member, score) for member, score in rows]
            batch: list[tuple[SortedEntry, str, str]] = []
            for entry in entries if only is None else only(entries):
                try:
                    batch.append((entry, *self._pushable(entry, decrement=decrement)))
                except InspectionError:
                    continue  # left in place
            moved += self._requeue_batch(batch)
        return moved

    def _requeue_batch(self, batch: list[tuple[SortedEntry, str, str]]) -> int:
        if not batch:
            return 0
        keys = self.config.keys
        script = _requeue_script()

        def move(r: Any) -> int:
            pipe = r.pipeline(transaction=False)
            moving = r.register_script(script)
            for entry, queue, payload in batch:
                moving(keys=[self.key, keys.queues, keys.queue(queue)],
                       args=[entry.raw, queue, payload], client=pipe)
            return sum(int(x) for x in pipe.execute())

        return int(self._pool.run(move, idempotent=True))


class ScheduledSet(JobSet):
    """Jobs due later (``schedule``); score = when they are due."""

    name = "schedule"
    label = "scheduled set"
    deleted_from = "scheduled set"

    @property
    def key(self) -> str:
        return self.config.keys.schedule

    def add_all_to_queue(self) -> int:
        """Push every entry to its queue now, unchanged; returns how many were pushed."""
        return self._requeue_all(decrement=False)


class RetrySet(JobSet):
    """Failed jobs waiting for their next attempt (``retry``); score = when it runs."""

    name = "retry"
    label = "retry set"
    deleted_from = "retry set"

    @property
    def key(self) -> str:
        return self.config.keys.retry

    def retry_all(self) -> int:
        """Push every entry to its queue now; returns how many were pushed."""
        return self._requeue_all(decrement=True)

    def kill_all(self, *, notify_failure: bool = False, exc: BaseException | None = None
                 ) -> int:
        """Move every entry to the dead set; returns how many moved. With
        ``notify_failure`` (Sidekiq 7's option), ``config.death_handlers`` run for each
        moved entry that is a job payload, with ``exc`` (default ``JobKilled``). Either way
        a job keeping its result stores its final failure (``killed``)."""
        moved = 0
        for rows in self._present():
            members = [member for member, _ in rows]
            gone = [m for m, done in zip(members, self._take(members), strict=True) if done]
            moved += len(gone)
            killed(self.config, gone, notify_failure=notify_failure, exc=exc)
        return moved


class DeadSet(JobSet):
    """Jobs whose retries ran out (``dead``); score = time of death. Trimmed on every add."""

    name = "dead"
    label = "dead set"

    @property
    def key(self) -> str:
        return self.config.keys.dead

    def kill(self, message: bytes | str | Mapping[str, Any], *, notify_failure: bool = True,
             exc: BaseException | None = None, trim: bool = True) -> None:
        """Add a job to the dead set (as stored, when given as bytes or text); death
        handlers run unless ``notify_failure`` is False. A job keeping its result stores its
        final failure either way (``killed``)."""
        raw = P.dumps(dict(message)) if isinstance(message, Mapping) else message
        bury(self.config, [raw], trim=trim)
        killed(self.config, [raw], notify_failure=notify_failure, exc=exc)

    def trim(self) -> None:
        """Drop entries older than ``dead_timeout`` and beyond ``dead_max_jobs``."""
        bury(self.config, [])

    def retry_all(self) -> int:
        """Push every job payload to its queue now; returns how many were pushed."""
        return self._requeue_all(decrement=True)


def _bounds(score: Any) -> tuple[float, float]:
    """``fetch``'s score or ``(low, high)`` pair as two scores; a ``ValueError`` names what
    is neither (NaN included: Redis refuses it as a bound)."""
    pair = tuple(score) if isinstance(score, (tuple, list)) else (score, score)
    if len(pair) != 2:
        raise ValueError(f"fetch takes a score or a (low, high) pair of scores, not {score!r}")
    try:
        low, high = float(pair[0]), float(pair[1])
    except (TypeError, ValueError):
        raise ValueError(f"fetch takes a score or a (low, high) pair of scores, not "
                         f"{score!r}") from None
    if math.isnan(low) or math.isnan(high):
        raise ValueError(f"fetch takes a score or a (low, high) pair of scores, not {score!r}")
    return low, high


def _requeue_script() -> str:
    return scripts.source(REQUEUE_SCRIPT)
