"""The outbox table: a push inside ``atomic()`` is a row of the same transaction.

``OutboxEntry`` (table ``wurk_outbox``, made by ``manage.py migrate``) holds one job per row,
as it will be stored in Redis; the relay (``wurk.contrib.django.outbox``) moves rows to Redis
and deletes them. ``claimed_by`` and ``claimed_until`` are used only where the database
cannot lock rows and skip the locked ones (SQLite): a relay claims rows for a lease there.
"""

from __future__ import annotations

from django.db import models

__all__ = ["OutboxEntry"]


class OutboxEntry(models.Model):
    id = models.BigAutoField(primary_key=True)
    jid = models.CharField(max_length=64)
    payload = models.TextField()  # the job's JSON, as it will be stored in Redis
    at = models.FloatField(null=True)  # a scheduled job's time, epoch seconds
    created_at = models.FloatField()  # epoch seconds
    claimed_by = models.CharField(max_length=64, null=True)
    claimed_until = models.FloatField(null=True)

    class Meta:
        app_label = "wurk"
        db_table = "wurk_outbox"
        verbose_name = "outbox entry"
        verbose_name_plural = "outbox entries"

    def __str__(self) -> str:
        return f"outbox entry {self.id} (jid {self.jid})"
