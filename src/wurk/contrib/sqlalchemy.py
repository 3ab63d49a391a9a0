"""Transactional push and the outbox for SQLAlchemy sessions: ``SQLAlchemyAdapter(Session)``.

1. ``after_commit`` finds the session in use (a ``scoped_session``, or any callable that
   returns the current ``Session`` or None) and, when it is inside a transaction, keeps the
   push with that transaction — the innermost savepoint if one is open.
2. A savepoint that is released hands its pushes to its parent; one that is rolled back
   drops them; the outermost commit runs them, after the database committed, every one even
   past one that raises, then raises the first error (``wurk.client.transactional.run_all``). A
   rollback or a session closed without commit drops them.
3. It listens to the session's own events (``after_commit``, ``after_transaction_end``,
   ``after_soft_rollback``), registered once per session object.
4. The outbox (``client="outbox"``): ``outbox_table(metadata)`` is the ``wurk_outbox``
   table in your metadata (``create_all`` or Alembic makes it; its DDL is in
   docs/outbox.md); ``SQLAlchemyAdapter(Session, outbox=table)`` writes each push made in a
   transaction into it through that session (same transaction), and its store
   (``SQLAlchemyOutbox``) lets a relay take rows: ``SELECT … FOR UPDATE SKIP LOCKED`` on
   PostgreSQL, MySQL 8.0.1+, MariaDB 10.6+ and Oracle (``skips_locked``, asked once the
   server's version is known); elsewhere (SQLite, an older MySQL or MariaDB, where the
   clause is a syntax error) a claim (``claimed_by``, with a lease in ``claimed_until``)
   taken in a transaction of its own, since SQLite locks the whole file.
   On PostgreSQL its transaction waits at most ``LOCK_TIMEOUT`` for a lock on the table.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

try:
    from sqlalchemy import (
        BigInteger,
        Column,
        Connection,
        Double,
        Engine,
        Integer,
        MetaData,
        String,
        Table,
        Text,
        bindparam,
        delete,
        event,
        func,
        insert,
        or_,
        select,
        update,
    )
    from sqlalchemy.engine import Dialect
    from sqlalchemy.exc import UnboundExecutionError
    from sqlalchemy.orm import Session, SessionTransaction
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError("wurk.contrib.sqlalchemy needs SQLAlchemy: "
                      "pip install 'wurk[sqlalchemy]'") from exc

from ..client.outbox import LOCK_TIMEOUT, OutboxRow
from ..client.transactional import run_all

__all__ = ["SQLAlchemyAdapter", "SQLAlchemyOutbox", "outbox_table", "skips_locked"]

# Dialects that lock rows and skip the locked ones: a relay takes rows in one transaction.
_SKIP_LOCKED = frozenset({"postgresql", "mysql", "mariadb", "oracle"})

Callback = Callable[[], None]
_INFO_KEY = "wurk.after_commit"


class _SessionPushes:
    """The pushes waiting on one session's transactions."""

    def __init__(self, session: Session) -> None:
        self.waiting: dict[SessionTransaction, list[Callback]] = {}
        # A released savepoint's pushes, moved to its parent: taken back out if the
        # savepoint turns out to have been rolled back (that event comes after its end).
        self.handed_up: dict[SessionTransaction, tuple[SessionTransaction, list[Callback]]] = {}
        event.listen(session, "after_commit", self._committed)
        event.listen(session, "after_transaction_end", self._ended)
        event.listen(session, "after_soft_rollback", self._rolled_back)

    def add(self, transaction: SessionTransaction, callback: Callback) -> None:
        self.waiting.setdefault(transaction, []).append(callback)

    def _committed(self, session: Session) -> None:
        root = session.get_transaction()
        if root is None or root.is_active:
            return  # a savepoint was released; its end hands its pushes up
        run_all(self.waiting.pop(root, []))

    def _ended(self, session: Session, transaction: SessionTransaction) -> None:
        callbacks = self.waiting.pop(transaction, [])
        parent = transaction.parent
        if parent is None:
            self.handed_up.clear()  # the outermost transaction is over: nothing to take back
        elif callbacks:
            self.waiting.setdefault(parent, []).extend(callbacks)
            self.handed_up[transaction] = (parent, callbacks)

    def _rolled_back(self, session: Session, previous: SessionTransaction) -> None:
        self.waiting.pop(previous, None)
        parent, callbacks = self.handed_up.pop(previous, (None, []))
        if parent is not None:
            kept = self.waiting.get(parent, [])
            self.waiting[parent] = [cb for cb in kept if all(cb is not c for c in callbacks)]
        self.handed_up = {t: v for t, v in self.handed_up.items() if t.parent is not previous}


def _autocommits(session: Session) -> bool:
    """Whether ``session`` is bound in ``AUTOCOMMIT``: the isolation level of its bind's
    execution options, else the one its engine was made with (``create_engine``'s
    ``isolation_level``, which SQLAlchemy keeps on the dialect only). A session of several
    binds (none of its own) is taken as transactional."""
    try:
        bind = session.get_bind()
    except UnboundExecutionError:
        return False
    level = bind.get_execution_options().get("isolation_level")
    if level is None:
        engine = bind.engine if isinstance(bind, Connection) else bind
        level = getattr(engine.dialect, "_on_connect_isolation_level", None)
    return bool(level == "AUTOCOMMIT")


def outbox_table(metadata: MetaData, name: str = "wurk_outbox") -> Table:
    """The outbox table, added to ``metadata`` (``create_all``, or Alembic's autogenerate,
    makes it)."""
    return Table(
        name, metadata,
        # BIGINT where it is a sequence of its own; SQLite's rowid is INTEGER PRIMARY KEY.
        Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True,
               autoincrement=True),
        Column("jid", String(64), nullable=False),
        Column("payload", Text(), nullable=False),  # the job as it will be stored in Redis
        Column("at", Double(), nullable=True),  # a scheduled job's time (epoch seconds)
        Column("created_at", Double(), nullable=False),
        Column("claimed_by", String(64), nullable=True),  # where rows cannot be locked
        Column("claimed_until", Double(), nullable=True),
    )


class SQLAlchemyOutbox:
    """The outbox table as a relay reaches it (``wurk.client.outbox.OutboxStore``)."""

    def __init__(self, engine: Engine, table: Table) -> None:
        self.engine = engine
        self.table = table
        self._skip_locked: bool | None = None  # known once connected (the server's version)

    @property
    def skip_locked(self) -> bool:
        if self._skip_locked is None:
            with self.engine.connect():  # the dialect reads the server's version on connect
                pass
            self._skip_locked = skips_locked(self.engine.dialect)
        return self._skip_locked

    def relay(self, limit: int, lease: float, push: Callable[[list[OutboxRow]], None]) -> int:
        t = self.table
        columns = (t.c.id, t.c.jid, t.c.payload, t.c.at)
        if self.skip_locked:
            with self.engine.begin() as conn:
                if self.engine.dialect.name == "postgresql":  # never held by a table's lock
                    conn.exec_driver_sql(_lock_timeout_sql())
                found = conn.execute(select(*columns).order_by(t.c.id).limit(limit)
                                     .with_for_update(skip_locked=True)).all()
                if found:
                    push([OutboxRow(*row) for row in found])
                    self._delete_taken(conn, [row[0] for row in found])
            return len(found)
        token, now = secrets.token_hex(8), time.time()
        free = select(t.c.id).where(or_(t.c.claimed_until.is_(None), t.c.claimed_until < now)) \
            .order_by(t.c.id).limit(limit)
        with self.engine.begin() as conn:
            conn.execute(update(t).where(t.c.id.in_(free))
                         .values(claimed_by=token, claimed_until=now + lease))
        with self.engine.connect() as conn:
            found = conn.execute(select(*columns).where(t.c.claimed_by == token)
                                 .order_by(t.c.id)).all()
        if not found:
            return 0
        try:
            push([OutboxRow(*row) for row in found])
        except BaseException:
            with self.engine.begin() as conn:  # free for the next try, not after the lease
                conn.execute(update(t).where(t.c.claimed_by == token)
                             .values(claimed_by=None, claimed_until=None))
            raise
        with self.engine.begin() as conn:
            # Fewer than found when the lease ran out during the push and another relay
            # claimed some again: those are its to delete (and their records to keep).
            return int(conn.execute(delete(t).where(t.c.claimed_by == token)).rowcount)

    def _delete_taken(self, conn: Connection, ids: list[int]) -> None:
        """Deletes the rows this relay's ``SELECT … FOR UPDATE`` locked, without waiting on
        any other row. On MySQL and MariaDB one ``DELETE … WHERE id = ?`` a row: for ``id IN
        (…)`` their optimizer may choose a scan of the whole table (MariaDB 10.11 does for 100
        ids of 400 rows), which locks every row it reads — the rows other relays hold
        included — so two relays' deletions wait on each other: a deadlock (error 1213),
        whatever the isolation level. An equality on the primary key reads, and locks, that
        row only, already this transaction's."""
        t = self.table
        if self.engine.dialect.name in ("mysql", "mariadb"):
            conn.execute(delete(t).where(t.c.id == bindparam("taken_id")),
                         [{"taken_id": id_} for id_ in ids])
        else:
            conn.execute(delete(t).where(t.c.id.in_(ids)))

    def pending(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(self.table)).scalar_one())


def skips_locked(dialect: Dialect) -> bool:
    """Whether ``dialect``'s server locks rows and skips the locked ones (``FOR UPDATE SKIP
    LOCKED``): PostgreSQL, Oracle, MySQL from 8.0.1, MariaDB from 10.6 (before them the
    clause is a syntax error). The version is the one read on connect."""
    if dialect.name not in _SKIP_LOCKED:
        return False
    if dialect.name in ("mysql", "mariadb"):
        version = tuple(dialect.server_version_info or ())
        return version >= ((10, 6) if getattr(dialect, "is_mariadb", False) else (8, 0, 1))
    return True


def _lock_timeout_sql() -> str:
    """PostgreSQL: this transaction waits at most ``LOCK_TIMEOUT`` for a lock."""
    return f"SET LOCAL lock_timeout = '{round(LOCK_TIMEOUT * 1000)}ms'"


class SQLAlchemyAdapter:
    """``wurk.configure(client="transactional", transaction=SQLAlchemyAdapter(Session))``;
    with ``outbox=outbox_table(metadata)``, ``client="outbox"`` too."""

    def __init__(self, sessions: Callable[[], Session | None], *,
                 outbox: Table | None = None, engine: Engine | None = None) -> None:
        if not callable(sessions):
            raise TypeError(f"SQLAlchemyAdapter takes a scoped_session or a function "
                            f"returning the current Session, not {sessions!r}")
        if outbox is not None and not isinstance(outbox, Table):
            raise TypeError(f"outbox= takes the table outbox_table(metadata) made, not "
                            f"{outbox!r}")
        self._sessions = sessions
        self.outbox = outbox  # client="outbox" refuses an adapter without one
        self._engine = engine
        self._store: SQLAlchemyOutbox | None = None

    def after_commit(self, callback: Callback) -> bool:
        session = self._open()
        if session is None:
            return False
        transaction = session.get_nested_transaction() or session.get_transaction()
        if transaction is None:
            return False
        self._pushes(session).add(transaction, callback)
        return True

    # -- the outbox -------------------------------------------------------------------------
    def in_transaction(self) -> bool:
        return self._open() is not None

    def _open(self) -> Session | None:
        """The session in use when a transaction of its own is open (point 1): not in
        ``AUTOCOMMIT``, where what it writes is kept at once."""
        session = self._sessions()
        if session is None or not session.in_transaction() or _autocommits(session):
            return None
        return session

    def write_outbox(self, rows: list[OutboxRow]) -> None:
        session = self._open()
        if session is None:
            raise RuntimeError("no transaction is open to write the outbox rows in")
        now = time.time()
        session.execute(insert(self._table()), [
            {"jid": row.jid, "payload": row.payload, "at": row.at, "created_at": now}
            for row in rows])

    def outbox_store(self) -> SQLAlchemyOutbox:
        if self._store is None:
            engine = self._engine
            if engine is None:
                session = self._sessions()
                if session is None:
                    raise RuntimeError("the outbox relay needs an engine: give "
                                       "SQLAlchemyAdapter(..., engine=engine)")
                engine = session.get_bind()  # type: ignore[assignment]
            assert engine is not None
            self._store = SQLAlchemyOutbox(engine, self._table())
        return self._store

    def _table(self) -> Table:
        if self.outbox is None:
            raise RuntimeError("client='outbox' needs the outbox table: "
                               "SQLAlchemyAdapter(Session, outbox=outbox_table(metadata))")
        return self.outbox

    @staticmethod
    def _pushes(session: Session) -> _SessionPushes:
        pushes: Any = session.info.get(_INFO_KEY)
        if pushes is None:
            pushes = session.info[_INFO_KEY] = _SessionPushes(session)
        return pushes  # type: ignore[no-any-return]
