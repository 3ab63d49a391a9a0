"""Django's transactions for transactional push: ``on_commit`` of one database alias.

Each deferred push is a *robust* ``on_commit`` callback: Django otherwise stops at the first
callback that raises and drops every one after it (wurk's pushes and the application's
own), so one push failing at commit (Redis down) would lose the others. Robust, Django logs
the failure and runs the rest.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction

__all__ = ["DjangoAdapter"]


class DjangoAdapter:
    """Inside ``atomic()`` a push waits for ``on_commit`` (a savepoint rolled back drops
    what it pushed, as Django drops its callbacks); outside one it pushes at once."""

    def __init__(self, using: str = "default") -> None:
        self.using = using

    def after_commit(self, callback: Callable[[], None]) -> bool:
        if not transaction.get_connection(self.using).in_atomic_block:
            return False
        transaction.on_commit(callback, using=self.using, robust=True)
        return True

    def __repr__(self) -> str:
        return f"DjangoAdapter(using={self.using!r})"
