from typing import Any, ClassVar

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies: ClassVar[list[Any]] = []
    operations: ClassVar[list[Any]] = [
        migrations.CreateModel(
            name="Order",
            fields=[("id", models.AutoField(auto_created=True, primary_key=True,
                                            serialize=False, verbose_name="ID")),
                    ("number", models.IntegerField(unique=True))],
        ),
    ]
