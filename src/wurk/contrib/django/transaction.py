"""Django's transactions for transactional push and the outbox: one database alias.

1. ``after_commit``: each deferred push (``client="transactional"``) is a *robust*
   ``on_commit`` callback: Django otherwise stops at the first callback that raises and
   drops every one after it (wurk's pushes and the application's own), so one push failing
   at commit (Redis down) would lose the others. Robust, Django logs the failure and runs
   the rest.
2. The outbox (``client="outbox"``, this app's default): ``write_outbox`` inserts the rows
   into ``wurk_outbox`` (``OutboxEntry``) on the alias, inside the ``atomic()`` block open
   now; ``outbox_store`` is what the relay takes them through (``wurk.contrib.django.outbox``).
3. A transaction managed by hand (``set_autocommit(False)``, no ``atomic()`` block) may still
   roll back, and neither ``on_commit`` (Django refuses it there) nor the outbox's wake can
   wait for its commit: a push that would join it raises ``TransactionManagementError`` at
   the call, never goes at once for data a rollback then erases.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.transaction import TransactionManagementError

if TYPE_CHECKING:
    from ...client.outbox import OutboxRow
    from .outbox import DjangoOutbox

__all__ = ["DjangoAdapter"]


class DjangoAdapter:
    """Inside ``atomic()`` a push waits for ``on_commit`` (a savepoint rolled back drops
    what it pushed, as Django drops its callbacks), or is written into the outbox table with
    the transaction's other rows; outside one it pushes at once."""

    outbox = "wurk.OutboxEntry"  # the outbox table's model (client="outbox")

    def __init__(self, using: str = "default") -> None:
        self.using = using
        self._store: Any = None

    def in_transaction(self) -> bool:
        connection = transaction.get_connection(self.using)
        if connection.in_atomic_block:
            return True
        # Autocommit off outside atomic(): a transaction is open that nothing can hook.
        # (No connection yet: nothing is open, and none is made here.)
        if connection.connection is not None and not connection.get_autocommit():
            raise TransactionManagementError(
                f"a push cannot wait for the commit of a transaction managed by hand "
                f"(set_autocommit(False) on database {self.using!r}): push inside "
                f"transaction.atomic(), or with set(transactional=False) to push at once")
        return False

    def after_commit(self, callback: Callable[[], None]) -> bool:
        if not self.in_transaction():
            return False
        transaction.on_commit(callback, using=self.using, robust=True)
        return True

    def write_outbox(self, rows: list[OutboxRow]) -> None:
        self.outbox_store().write(rows)

    def outbox_store(self) -> DjangoOutbox:
        if self._store is None:
            # Here, not at import: the model exists once Django's apps are ready.
            from .outbox import DjangoOutbox

            self._store = DjangoOutbox(self.using)
        store: DjangoOutbox = self._store
        return store

    def __repr__(self) -> str:
        return f"DjangoAdapter(using={self.using!r})"
