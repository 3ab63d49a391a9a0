"""``python -m wurk`` runs the ``wurk`` command."""

from .cli import entry

__all__: list[str] = []

entry()
