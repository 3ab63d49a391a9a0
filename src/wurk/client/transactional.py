"""Transactional push: a job pushed inside a database transaction is written when it commits.

1. ``wurk.configure(client="transactional", transaction=adapter)`` makes the default client
   a ``TransactionalClient``. The adapter knows the application's transactions:
   ``wurk.contrib.sqlalchemy.SQLAlchemyAdapter`` or Django's (its app installs it).
2. Inside a transaction, ``push`` normalises the payload and checks its arguments at once,
   so a bad push raises at the call and defers nothing, gives the job its jid, and hands the
   rest of the push — client middleware included, so a unique lock or a batch count is not
   taken for a job a rollback drops — to ``adapter.after_commit``. A rollback drops it.
   Outside one, it pushes at once.
3. ``set(transactional=False)`` pushes at once even inside a transaction (for a job that
   must run whether or not the data is kept); so does a batch member (``bid``, or a push
   inside a batch's jobs block), whose batch counts its jobs at push time.
4. ``push_bulk`` is not deferred, as in Sidekiq: a long import would otherwise hold every
   payload in memory until its commit.
5. At commit every deferred push is attempted, even past one that raises (Redis down, a
   middleware refusing); then the first error is raised from the commit call, after the
   data was committed (``run_all``; Django's adapter makes each push a robust ``on_commit``
   callback, which Django logs instead); nothing is kept to push later.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from .. import payload as P
from . import writers
from .core import Client

__all__ = ["TransactionAdapter", "TransactionalClient", "run_all"]


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
        other = self._routed(item)  # another shard's client defers it in its own right
        if other is not None:
            return other.push(item)
        job = self.normalize(item)
        if self._deferred(item, job):
            return str(job[P.JID])
        return self._drive(self._push_steps(job))

    async def apush(self, item: Mapping[str, Any]) -> str | None:
        """``push`` for async code: deferred the same way; pushed at once on the loop's
        asyncio pool outside a transaction. At commit the push is the sync one (the
        adapter calls back from sync code)."""
        other = self._routed(item)
        if other is not None:
            return await other.apush(item)
        job = self.normalize(item)
        if self._deferred(item, job):
            return str(job[P.JID])
        return await self._adrive(self._push_steps(job))

    def _deferred(self, item: Mapping[str, Any], job: P.Payload) -> bool:
        """Hand the push of ``job`` (``item`` normalised: its jid is the caller's now, e.g.
        to store in the row) to the open transaction's commit; False when it is to be pushed
        at once. Its arguments are checked here, before the client middleware that runs at
        the commit: a bad push raises at the call, not from the commit after the data was
        kept (design.md: arguments that are not JSON-native are refused at push time)."""
        if item.get(P.TRANSACTIONAL, True) is False or job.get(P.BID) or \
                writers.overlay() is not None:  # inside a batch's jobs block: joins at push
            return False
        checked = False

        def push_at_commit() -> None:
            if checked:  # a push refused at the call leaves this behind, pushing nothing
                self._drive(self._push_steps(job))  # normalised at the call already

        # Handed over before the check, since only the adapter knows whether a transaction
        # is open: outside one the push goes at once, its arguments checked after the
        # middleware (which may convert them), as any push's.
        if not self.adapter.after_commit(push_at_commit):
            return False
        P.check_args(job[P.ARGS])
        checked = True
        return True


def run_all(callbacks: Iterable[Callable[[], None]]) -> None:
    """Run a commit's deferred pushes, every one even past one that raises, then raise the
    first error: a push that fails (Redis refusing, a middleware raising) must not drop the
    pushes after it. An adapter of a framework that runs its callbacks itself uses it."""
    errors: list[Exception] = []
    for callback in callbacks:
        try:
            callback()
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]
