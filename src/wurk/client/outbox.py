"""The transactional outbox: a push inside a transaction is a row of that transaction.

1. ``client="outbox"`` makes the process's client an ``OutboxClient``. Inside a database
   transaction a push runs whole at the call — normalised, through the client middleware,
   arguments checked, stamped — and its payload is written into the outbox table through
   the adapter (``write_outbox``), in the same transaction: committed means pushed at least
   once, rolled back means never pushed, and Redis need not answer at commit.
2. Outside a transaction, with ``set(transactional=False)``, for a batch member, or inside a
   batch's jobs block it pushes at once, as the default client does. Under a testing mode
   (fake, inline) it defers to the commit as the transactional client does, so a test sees
   exactly the committed pushes and needs no table. ``push_bulk`` inside a transaction
   writes its rows too (they wait in the database, not in memory).
3. ``Relay`` moves rows to Redis and deletes them: the store (``OutboxStore``, the
   adapter's) takes a batch of rows no other relay holds — ``SELECT … FOR UPDATE SKIP
   LOCKED`` where the database has it, a claim column with a lease
   (``outbox_claim_timeout``) where it does not (SQLite) — hands them to the relay, which
   pushes them with the recording script (``wurk.client.idempotent``: a row pushed before a
   crash undid its deletion is not pushed twice), then deletes them. A unique job takes its
   lock then; a duplicate is dropped, its row deleted. A row that is not a JSON object, or
   no job a push can send (``idempotent.from_text``), goes to the dead set as the text it
   was.
4. Promptly: each push into the outbox asks the transaction to wake this process's relay
   thread after the commit (``after_commit``); a process that exits lets that thread finish
   (one last pass for rows it was woken for). Every worker polls the table every
   ``outbox_poll_interval`` as the fallback (``OutboxDuty``, on the worker's shared timer
   thread), so rows a killed process left, or written while Redis was down, go too. A poll
   takes one batch and, when it was full, comes again at once: the thread's other duties
   run between batches; it skips while a pass of the same process is under way.
5. Fork: a forked child starts its relay afresh (``os.register_at_fork``): no thread, no
   lock held by a thread of its parent's (a pass in progress holds one through a database
   query and a Redis round trip), so the child's own passes are never held up by one.
   The fork and exit hooks are registered when the first relay is made
   (``wurk.runtime.hooks``), not at import.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from .. import payload as P
from ..config import Config
from ..errors import ConfigError, InvalidPayload
from ..runtime import hooks
from ..runtime.duty import Duty
from ..runtime.timer import Timers
from . import idempotent, writers
from .core import Client
from .transactional import TransactionAdapter, TransactionalClient
from .writers import Entries

__all__ = ["JID_LENGTH", "LOCK_TIMEOUT", "OutboxAdapter", "OutboxClient", "OutboxDuty", "OutboxRow",
           "OutboxStore", "Relay", "relay_for"]

log = logging.getLogger("wurk")

# How long the relay thread waits, with nothing to do, before dropping the records of the
# jids it pushed (wurk.client.idempotent) in a round trip of their own.
FORGET_AFTER = 1.0
# The longest a relay's transaction waits for a lock on the outbox table (a migration, a
# ``LOCK TABLE``, a ``VACUUM FULL``) where the database lets it say so (PostgreSQL's
# ``lock_timeout``): the pass then fails as an outage does and is tried again, and the
# worker's shared timer thread it runs on (the leader's renewal, the scheduler) is never
# held for the length of that lock. Rows are never waited on: they are skipped when locked.
LOCK_TIMEOUT = 2.0
# The outbox table's ``jid`` column: ``varchar(64)`` (the Django model, the SQLAlchemy table).
JID_LENGTH = 64


def _check_jid(jid: str) -> None:
    """A jid the outbox table's ``jid`` column holds (``JID_LENGTH`` characters)."""
    if len(jid) > JID_LENGTH:
        raise InvalidPayload(f"outbox: jid {jid[:40]!r}... is {len(jid)} characters; the outbox "
                             f"table's jid column holds at most {JID_LENGTH} (give a shorter "
                             "jid, or push it with transactional=False)", field=P.JID)


@dataclass(frozen=True)
class OutboxRow:
    """One row of the outbox table: the payload as it will be stored in Redis."""

    id: int | None  # the table's key (None before it is written)
    jid: str
    payload: str
    at: float | None  # epoch seconds of a scheduled job


class OutboxStore(Protocol):
    """The outbox table, as a framework reaches it (``wurk.contrib.django``,
    ``wurk.contrib.sqlalchemy``)."""

    def relay(self, limit: int, lease: float, push: Callable[[list[OutboxRow]], None]) -> int:
        """Take up to ``limit`` rows no other relay holds, oldest first (a claim that cannot
        be a row lock lasts ``lease`` seconds); call ``push`` with them; delete them once it
        returned. A wait for a lock on the table is bounded (``LOCK_TIMEOUT``) where the
        database can bound it. Rows ``push`` raised on stay for a later try. Returns how many were
        deleted: fewer than were pushed when a claim's lease ran out during the push and
        another relay claimed some of them again."""
        ...

    def pending(self) -> int:
        """Rows waiting in the table."""
        ...


class OutboxAdapter(TransactionAdapter, Protocol):
    """A transaction adapter with an outbox table."""

    def in_transaction(self) -> bool: ...

    def write_outbox(self, rows: list[OutboxRow]) -> None:
        """Insert ``rows`` into the outbox table, in the transaction open now."""
        ...

    def outbox_store(self) -> OutboxStore: ...


_into_outbox: contextvars.ContextVar[bool] = contextvars.ContextVar("wurk_into_outbox",
                                                                     default=False)


class OutboxClient(TransactionalClient):
    """Writes the pushes made inside a transaction into the outbox table of that
    transaction (see the module's notes)."""

    @property
    def outbox(self) -> OutboxAdapter:
        adapter: OutboxAdapter = self.config.transaction
        return adapter

    def push(self, item: Mapping[str, Any]) -> str | None:
        other = self._routed(item)  # another shard's: pushed at once there, never a row
        if other is not None:
            self._no_row_elsewhere(item, other)
            return other.push(item)
        job = self.normalize(item)
        route = self._route(item, job)
        if route == "commit" and self._deferred(item, job):
            return str(job[P.JID])
        if route == "outbox":
            token = _into_outbox.set(True)
            try:
                return self._drive(self._push_steps(job))
            finally:
                _into_outbox.reset(token)
        return self._drive(self._push_steps(job))

    async def apush(self, item: Mapping[str, Any]) -> str | None:
        """``push`` for async code. Inside a transaction the row is written on this thread
        (a transaction belongs to its thread's connection), as a sync push would."""
        other = self._routed(item)
        if other is not None:
            self._no_row_elsewhere(item, other)
            return await other.apush(item)
        job = self.normalize(item)
        route = self._route(item, job)
        if route == "commit" and self._deferred(item, job):
            return str(job[P.JID])
        if route == "outbox":
            token = _into_outbox.set(True)
            try:
                return self._drive(self._push_steps(job))
            finally:
                _into_outbox.reset(token)
        return await self._adrive(self._push_steps(job))

    def push_bulk(self, item: Mapping[str, Any]) -> list[str | None]:
        if self._joins_outbox(item):
            for client, _, _ in self._bulk_routes(item) or []:
                if client is not self:
                    self._no_row_elsewhere(item, client)
            token = _into_outbox.set(True)
            try:
                return self._drive(self._bulk_steps(item))
            finally:
                _into_outbox.reset(token)
        return super().push_bulk(item)

    def _joins_outbox(self, item: Mapping[str, Any]) -> bool:
        """Whether a push of ``item`` would be rows of the transaction open now."""
        return item.get(P.TRANSACTIONAL, True) is not False and not item.get(P.BID) and \
            writers.selected() is None and self.outbox.in_transaction()

    def _no_row_elsewhere(self, item: Mapping[str, Any], other: Client) -> None:
        """Refuse a push to another shard that would be a row: a row names no shard, and
        the relay pushes every row into its configuration's own Redis (default's)."""
        if isinstance(item, Mapping) and writers.overlay() is None and \
                self._joins_outbox(item):
            raise ConfigError(
                f"a push to shard {other.config.shard_name!r} cannot be a row of the outbox: "
                f"its relay pushes every row into shard {self.config.shard_name!r}; push it "
                f"with set(transactional=False) to send it at once, or outside the "
                f"transaction")

    def _route(self, item: Mapping[str, Any], job: P.Payload) -> str:
        """"now", "commit" (a testing mode: deferred as the transactional client does) or
        "outbox"."""
        if item.get(P.TRANSACTIONAL, True) is False or job.get(P.BID) or \
                writers.overlay() is not None:
            return "now"
        if writers.selected() is not None:
            return "commit"
        return "outbox" if self.outbox.in_transaction() else "now"

    def _write(self, entries: Entries) -> set[str]:
        if not _into_outbox.get():
            return super()._write(entries)
        self._stamp(entries)
        keys = self.config.keys
        rows = []
        for job, at in entries:
            ready = idempotent.sendable(keys, job, at)
            writers.check_size(self.config, job, ready.text)  # no row the relay cannot push
            _check_jid(ready.jid)  # refused here, not by the database: its error aborts the
            # caller's whole transaction (PostgreSQL), this one is raised at the push
            rows.append(OutboxRow(None, ready.jid, ready.text, ready.at))
        self.outbox.write_outbox(rows)
        relay = relay_for(self.config)
        self.outbox.after_commit(relay.wake)
        return set()  # a unique job's duplicate is found when the row is relayed


class Relay:
    """Moves the outbox's rows to Redis: ``run_once`` from any thread (the worker's duty),
    and a thread of its own that a commit wakes (``wake``)."""

    def __init__(self, config: Config, store: OutboxStore) -> None:
        self.config = config
        self.store = store
        self._fresh()
        _hook_process()
        _live.add(self)

    def _fresh(self) -> None:
        """Per-process state (again in a forked child, where the parent's thread is gone
        and a lock it held would stay held for good)."""
        self.forgets = idempotent.Forgets()
        self.relayed = 0  # rows pushed (or found pushed) by this process
        self.duty = Duty(self.config, "wurk-outbox-relay", self.run_once, self._interval,
                         component="outbox relay", retry_early=True)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._behind = False  # the last pass left rows (a full batch)
        # One pass at a time in this process: a pass run from a test (``relay_outbox``)
        # starts once the thread's own is over, so every row committed before it is sent.
        self._pass = threading.Lock()
        self._woken_since_pass = False

    def after_fork(self) -> None:
        """In a forked child: none of the parent's thread, locks or records."""
        self._fresh()

    # -- one pass ---------------------------------------------------------------------------
    def run_once(self) -> int:
        """Relay until the table holds nothing this relay may take; the rows pushed.
        Raises when Redis or the database fails (the rows stay)."""
        with self._pass:
            self._woken_since_pass = False
            return self._run_pass()

    def poll(self) -> bool:
        """A worker's poll, on its shared timer thread: one batch at most, so the thread's
        other duties (the leader's renewal, the scheduler, cancels) have their turn between
        batches; nothing when a pass of this process is under way (it is sending the rows),
        so the timer thread never waits on it. Returns whether a full batch was taken (more
        rows may wait: poll again at once)."""
        if not self._pass.acquire(blocking=False):
            return False
        try:
            taken = self._batch()
        finally:
            self._pass.release()
        self.relayed += taken
        if not taken:
            self.forget_now()
        return taken >= self.config.outbox_batch_size

    def _run_pass(self) -> int:
        total = 0
        self._behind = True
        while True:
            taken = self._batch()
            total += taken
            if taken < self.config.outbox_batch_size:
                break
        self._behind = False
        self.relayed += total
        return total

    def _batch(self) -> int:
        """Relay one batch of rows (one database transaction); the rows taken."""
        landed: list[str] = []
        given: list[int] = []

        def push(rows: list[OutboxRow]) -> None:
            given.append(len(rows))
            landed.extend(self._push(rows))

        taken = self.store.relay(self.config.outbox_batch_size,
                                 self.config.outbox_claim_timeout, push)
        if taken < sum(given):
            # The claim ran out while pushing and another relay took some rows again: their
            # records in Redis are what keeps it from pushing them twice, so none go.
            log.warning("outbox: the claim on %d rows ran out while they were pushed "
                        "(outbox_claim_timeout %s s); another relay deletes them, and the "
                        "records of this batch are kept", sum(given) - taken,
                        self.config.outbox_claim_timeout)
        else:
            self.forgets.add(landed)  # their deletion is committed: the records may go
        return taken

    def _push(self, rows: list[OutboxRow]) -> list[str]:
        """Push ``rows``; the jids now in Redis (or refused there), for forgetting once
        their rows' deletion is committed."""
        jobs, kept = [], []
        for row in rows:
            if row.payload is None:  # a nullable column of an older schema, or by hand
                log.error("outbox: row %s has no payload (NULL), so no job to push; the row "
                          "is deleted (jid column: %r)", row.id, row.jid)
                continue
            try:
                if not isinstance(row.payload, (str, bytes)):  # SQLite: any type in any column
                    raise InvalidPayload(f"payload is a {type(row.payload).__name__}, not a "
                                         "job's JSON text", field=None)
                job = idempotent.from_text(self.config.keys, row.payload, row.at)
            except InvalidPayload as exc:  # not JSON, or a field no push can send
                self._bury(row, exc)
                continue
            over = writers.oversize(self.config, job.text)
            if over is not None:
                # Redis would refuse it (or cut the connection) at every pass, and the rows
                # behind it would wait for ever; no value that size fits the dead set either.
                log.error("outbox: row %s (jid %s) is %s bytes of JSON, over the %s bytes the "
                          "Redis server takes in one value (proto-max-bulk-len), so Redis "
                          "could never take it; the row is deleted. Its JSON starts: %s",
                          row.id, job.jid, f"{over[0]:,}", f"{over[1]:,}", job.text[:500])
                continue
            jobs.append(job)
            kept.append(row)
        pool = self.config.pool("client")
        forget = self.forgets.take()
        try:
            outcome = idempotent.send(self.config, pool, jobs, forget)
        except redis.ResponseError:
            # Redis refused one for good (its queue's key of another type): each alone, so
            # that row goes to the dead set and cannot hold up the rows after it for ever.
            self.forgets.add(forget)
            outcome = idempotent.Outcome()
            for row, job in zip(kept, jobs, strict=True):
                try:
                    one = idempotent.send(self.config, pool, [job])
                except redis.ResponseError as exc:
                    self._bury(row, exc)
                    continue
                outcome.pushed += one.pushed
                outcome.already += one.already
                outcome.refused.update(one.refused)
        except BaseException:
            self.forgets.add(forget)
            raise
        for jid, holder in outcome.refused.items():
            log.info("outbox: unique job %s not pushed: jid %s holds its lock", jid, holder)
        return outcome.landed

    def _bury(self, row: OutboxRow, exc: Exception) -> None:
        """A row that is not a job, or whose push Redis refused for good: to the dead set as
        the text it was, as a worker does with such an entry."""
        keys, pool = self.config.keys, self.config.pool("client")
        text = row.payload if isinstance(row.payload, (str, bytes)) else str(row.payload)
        try:
            pool.run(lambda r: r.zadd(keys.dead, {text: time.time()}))
        except redis.ResponseError as error:  # for good (its key of another type); an
            # outage or a transient refusal (OOM, LOADING) raises: the row stays for a retry
            log.error("outbox: row %s cannot be pushed (%s), and the dead set refused it too "
                      "(%s); the row is deleted: %s", row.id, exc, error, text)
            return
        log.error("outbox: row %s cannot be pushed (%s); moved to the dead set", row.id, exc)

    def forget_now(self) -> None:
        """Drop the records of what was relayed (normally sent with the next push)."""
        forget = self.forgets.take()
        if not forget:
            return
        pool = self.config.pool("client")
        try:
            pool.run(lambda _: pool.send_all([("ZREM", self.config.keys.push_sent,
                                               *forget)]))
        except BaseException:
            self.forgets.add(forget)
            raise

    # -- the thread a commit wakes ----------------------------------------------------------
    def _interval(self) -> float:
        return 0.0 if self._behind else FORGET_AFTER

    def wake(self) -> None:
        """After a commit that wrote rows: relay them now, on the relay's thread."""
        with self._start_lock:
            if self._stopping.is_set():
                return  # the rows wait for a worker's poll
            self._woken_since_pass = True
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="wurk-outbox-relay",
                                                daemon=True)
                self._thread.start()
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        """End the relay's thread: a pass in progress finishes first, and rows a commit
        woke it for and it has not taken yet get one last pass (a short-lived process —
        a script, ``manage.py shell`` — sends what it committed before it exits)."""
        self._stopping.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            if self.duty.failing:
                timeout: float | None = self.duty.next_wait()  # the outage's backoff
            elif self._behind:
                timeout = 0.0
            elif len(self.forgets):
                timeout = FORGET_AFTER
            else:
                timeout = None  # until the next commit
            # Cleared only when it was set: a commit's wake that lands just as a timed wait
            # runs out stays set, so the next wait returns at once and a pass takes its rows
            # (cleared after a timeout, it was lost and the rows waited for another commit).
            woken = self._wake.wait(timeout)
            if woken:
                self._wake.clear()
            if self._stopping.is_set():
                if self._woken_since_pass:
                    self.duty.run()  # the last pass: a commit woke the relay for it
                return
            if woken or self.duty.failing or self._behind:
                self.duty.run()
                continue
            try:
                self.forget_now()
            except Exception as exc:  # the records age out; the next push sends them
                log.debug("outbox relay: %s", exc)


class OutboxDuty:
    """A worker's poll of the outbox table: the fallback for rows no commit hook relayed
    (their process died, Redis was down)."""

    def __init__(self, config: Config, timers: Timers) -> None:
        self.relay = relay_for(config)
        self.poll_interval = config.outbox_poll_interval
        self._more = False  # the last poll took a full batch: poll again at once
        self.duty = Duty(config, "wurk-outbox-poll", self._tick, self._interval,
                         component="outbox relay", retry_early=False, host=timers)

    def _tick(self) -> None:
        self._more = False
        self._more = self.relay.poll()

    def _interval(self) -> float:
        return 0.0 if self._more else self.poll_interval

    def start(self) -> None:
        self.duty.start()

    def stop(self, timeout: float) -> bool:
        return self.duty.stop(timeout)


_relays: weakref.WeakKeyDictionary[Config, Relay] = weakref.WeakKeyDictionary()
_relays_lock = threading.Lock()
_live: weakref.WeakSet[Relay] = weakref.WeakSet()  # every relay of this process


def _hook_process() -> None:
    """On first use, not at import: a forked child's relays start afresh (and their
    registry's lock), and the exit sends what commits woke the relays for."""
    hooks.install(__name__, after_fork_in_child=_after_fork_in_child, at_exit=_at_exit)


def _after_fork_in_child() -> None:
    global _relays_lock
    _relays_lock = threading.Lock()  # a thread of the parent's may have held it
    for relay in list(_live):
        relay.after_fork()



def _at_exit() -> None:
    """A process ending sends what its commits woke its relay for, if Redis answers (else
    the rows wait for a worker's poll): bounded by the socket timeout."""
    for relay in list(_relays.values()):
        relay.stop(timeout=2 * relay.config.socket_timeout + 1)



def relay_for(config: Config) -> Relay:
    """This process's relay of ``config``'s outbox (made on first use)."""
    _hook_process()  # before the lock: a fork from now on gives the child a fresh one
    with _relays_lock:
        relay = _relays.get(config)
        if relay is None:
            adapter: OutboxAdapter = config.transaction
            relay = _relays[config] = Relay(config, adapter.outbox_store())
        return relay
