"""Transactional push: a job pushed inside a database transaction is written when it commits.

1. ``wurk.configure(client="transactional", transaction=adapter)`` makes the default client
   a ``TransactionalClient``. The adapter knows the application's transactions:
   ``wurk.contrib.sqlalchemy.SQLAlchemyAdapter`` or Django's (its app installs it).
2. Inside a transaction, ``push`` gives the job its jid at once and hands the whole push —
   client middleware included, so a unique lock or a batch count is not taken for a job a
   rollback drops — to ``adapter.after_commit``. A rollback drops it. Outside one, it
   pushes at once.
3. ``set(transactional=False)`` pushes at once even inside a transaction (for a job that
   must run whether or not the data is kept); so does a batch member (``bid``, or a push
   inside a batch's jobs block), whose batch counts its jobs at push time.
4. ``push_bulk`` is not deferred, as in Sidekiq: a long import would otherwise hold every
   payload in memory until its commit.
5. A push that fails at commit (Redis down) raises from the commit call, after the data
   was committed; nothing is kept to push later.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from . import payload as P
from .client import Client

__all__ = ["TransactionAdapter", "TransactionalClient"]


class TransactionAdapter(Protocol):
    def after_commit(self, callback: Callable[[], None]) -> bool:
        """Run ``callback`` once the current transaction commits, never if it rolls back;
        False (nothing scheduled) when no transaction is open."""
        ...


class TransactionalClient(Client):
    """Defers each push to the surrounding transaction's commit."""

    @property
    def adapter(self) -> TransactionAdapter:
        adapter: TransactionAdapter = self.config.transaction
        return adapter

    def push(self, item: Mapping[str, Any]) -> str | None:
        job = dict(item)
        if self._deferred(job):
            return str(job[P.JID])
        return super().push(job)

    async def apush(self, item: Mapping[str, Any]) -> str | None:
        """``push`` for async code: deferred the same way; pushed at once on the loop's
        asyncio pool outside a transaction. At commit the push is the sync one (the
        adapter calls back from sync code)."""
        job = dict(item)
        if self._deferred(job):
            return str(job[P.JID])
        return await super().apush(job)

    def _deferred(self, job: P.Payload) -> bool:
        """Hand ``job``'s push to the open transaction's commit (giving it its jid now);
        False when it is to be pushed at once."""
        from .batch.block import current as open_block  # the batch package imports this one

        if job.pop(P.TRANSACTIONAL, True) is False or job.get(P.BID) or \
                open_block() is not None:  # inside a jobs block: it joins at push
            return False
        if not job.get(P.JID):
            job[P.JID] = P.new_jid()  # the caller gets it now, e.g. to store in the row
        return self.adapter.after_commit(lambda: self._push_now(job))

    def _push_now(self, job: P.Payload) -> None:
        Client.push(self, job)
