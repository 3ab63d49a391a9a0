"""``python -m wurk`` runs the ``wurk`` command."""

from .cli import entry

entry()
