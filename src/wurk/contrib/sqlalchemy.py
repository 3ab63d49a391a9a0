"""Transactional push for SQLAlchemy sessions: ``SQLAlchemyAdapter(Session)``.

1. ``after_commit`` finds the session in use (a ``scoped_session``, or any callable that
   returns the current ``Session`` or None) and, when it is inside a transaction, keeps the
   push with that transaction — the innermost savepoint if one is open.
2. A savepoint that is released hands its pushes to its parent; one that is rolled back
   drops them; the outermost commit runs them, after the database committed, every one even
   past one that raises, then raises the first error (``wurk.client.transactional.run_all``). A
   rollback or a session closed without commit drops them.
3. It listens to the session's own events (``after_commit``, ``after_transaction_end``,
   ``after_soft_rollback``), registered once per session object.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    from sqlalchemy import event
    from sqlalchemy.orm import Session, SessionTransaction
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError("wurk.contrib.sqlalchemy needs SQLAlchemy: "
                      "pip install 'wurk[sqlalchemy]'") from exc

from ..client.transactional import run_all

__all__ = ["SQLAlchemyAdapter"]

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


class SQLAlchemyAdapter:
    """``wurk.configure(client="transactional", transaction=SQLAlchemyAdapter(Session))``."""

    def __init__(self, sessions: Callable[[], Session | None]) -> None:
        if not callable(sessions):
            raise TypeError(f"SQLAlchemyAdapter takes a scoped_session or a function "
                            f"returning the current Session, not {sessions!r}")
        self._sessions = sessions

    def after_commit(self, callback: Callback) -> bool:
        session = self._sessions()
        if session is None or not session.in_transaction():
            return False
        transaction = session.get_nested_transaction() or session.get_transaction()
        if transaction is None:
            return False
        self._pushes(session).add(transaction, callback)
        return True

    @staticmethod
    def _pushes(session: Session) -> _SessionPushes:
        pushes: Any = session.info.get(_INFO_KEY)
        if pushes is None:
            pushes = session.info[_INFO_KEY] = _SessionPushes(session)
        return pushes  # type: ignore[no-any-return]
