"""The outbox table, ``wurk_outbox`` (``wurk.contrib.django.models.OutboxEntry``)."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations, models

__all__ = ["Migration"]


class Migration(migrations.Migration):
    initial = True

    dependencies: ClassVar[list[Any]] = []

    operations: ClassVar[list[Any]] = [
        migrations.CreateModel(
            name="OutboxEntry",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("jid", models.CharField(max_length=64)),
                ("payload", models.TextField()),
                ("at", models.FloatField(null=True)),
                ("created_at", models.FloatField()),
                ("claimed_by", models.CharField(max_length=64, null=True)),
                ("claimed_until", models.FloatField(null=True)),
            ],
            options={
                "verbose_name": "outbox entry",
                "verbose_name_plural": "outbox entries",
                "db_table": "wurk_outbox",
            },
        ),
    ]
