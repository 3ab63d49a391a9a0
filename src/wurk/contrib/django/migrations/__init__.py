"""The outbox table's migrations (``manage.py migrate wurk``)."""

__all__: list[str] = []
