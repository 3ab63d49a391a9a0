"""The outbox table as the relay reaches it through Django's ORM (``OutboxStore``).

1. ``DjangoOutbox(alias).relay(limit, lease, push)``: where the database locks rows and
   skips locked ones (``features.has_select_for_update_skip_locked``: PostgreSQL, MySQL 8,
   Oracle), one transaction takes up to ``limit`` rows with ``SELECT … FOR UPDATE SKIP
   LOCKED``, pushes them and deletes them: two relays never hold one row, and a relay that
   dies mid-way lets its rows go with its connection; on PostgreSQL that transaction waits at
   most ``LOCK_TIMEOUT`` for a lock on the table (a migration's). Elsewhere (SQLite) a relay
   claims rows in a transaction of its own (``claimed_by``, ``claimed_until`` = now +
   ``lease``), pushes them, then deletes them; a claim a dead relay left is taken again once
   its lease ends.
2. The relay runs on threads that are not requests (its own, a worker's timer): each pass
   closes the thread's connection when Django would (``close_if_unusable_or_obsolete``).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

from django.db import connections, transaction
from django.db.models import Q

from ...client.outbox import LOCK_TIMEOUT, OutboxRow
from .models import OutboxEntry

__all__ = ["DjangoOutbox"]

_COLUMNS = ("id", "jid", "payload", "at")


class DjangoOutbox:
    """``wurk_outbox`` on one database alias."""

    def __init__(self, using: str = "default") -> None:
        self.using = using

    def relay(self, limit: int, lease: float, push: Callable[[list[OutboxRow]], None]) -> int:
        connection = connections[self.using]
        connection.close_if_unusable_or_obsolete()
        try:
            if connection.features.has_select_for_update_skip_locked:
                return self._locked(limit, push)
            return self._claimed(limit, lease, push)
        finally:
            connection.close_if_unusable_or_obsolete()

    def _entries(self) -> Any:
        return OutboxEntry.objects.using(self.using)

    def _locked(self, limit: int, push: Callable[[list[OutboxRow]], None]) -> int:
        with transaction.atomic(using=self.using):
            connection = connections[self.using]
            if connection.vendor == "postgresql":  # never held by a lock on the table
                with connection.cursor() as cursor:
                    cursor.execute(f"SET LOCAL lock_timeout = '{round(LOCK_TIMEOUT * 1000)}ms'")
            found = list(self._entries().select_for_update(skip_locked=True)
                         .order_by("id").values_list(*_COLUMNS)[:limit])
            if found:
                push([OutboxRow(*row) for row in found])
                self._delete_taken(connection, [row[0] for row in found])
        return len(found)

    def _delete_taken(self, connection: Any, ids: list[int]) -> None:
        """Delete the rows this relay's ``SELECT … FOR UPDATE`` locked, waiting on no other
        row. On MySQL and MariaDB one ``DELETE … WHERE id = %s`` a row, as the SQLAlchemy
        relay does (``wurk.contrib.sqlalchemy``): for ``id IN (…)`` MariaDB 10.11 scans the
        whole table, locking the rows other relays hold, and relays deadlock (1213)."""
        if connection.vendor != "mysql":
            self._entries().filter(id__in=ids).delete()
            return
        table = connection.ops.quote_name(OutboxEntry._meta.db_table)
        with connection.cursor() as cursor:
            cursor.executemany(f"DELETE FROM {table} WHERE id = %s", [(id_,) for id_ in ids])

    def _claimed(self, limit: int, lease: float, push: Callable[[list[OutboxRow]], None]
                 ) -> int:
        token, now = secrets.token_hex(8), time.time()
        with transaction.atomic(using=self.using):
            free = self._entries().filter(Q(claimed_until__isnull=True)
                                          | Q(claimed_until__lt=now)).order_by("id")
            self._entries().filter(id__in=free.values("id")[:limit]).update(
                claimed_by=token, claimed_until=now + lease)
        found = list(self._entries().filter(claimed_by=token).order_by("id")
                     .values_list(*_COLUMNS))
        if not found:
            return 0
        try:
            push([OutboxRow(*row) for row in found])
        except BaseException:  # free for the next try, not only after the lease
            self._entries().filter(claimed_by=token).update(claimed_by=None,
                                                            claimed_until=None)
            raise
        # Fewer than found when the lease ran out during the push and another relay claimed
        # some again: those are its to delete (and their records to keep).
        deleted, _ = self._entries().filter(claimed_by=token).delete()
        return int(deleted)

    def pending(self) -> int:
        return int(self._entries().count())

    def write(self, rows: list[OutboxRow]) -> None:
        now = time.time()
        self._entries().bulk_create([
            OutboxEntry(jid=row.jid, payload=row.payload, at=row.at, created_at=now)
            for row in rows])
