"""Iterable jobs: long jobs that walk their items one by one, stop between two of them when
the worker stops, and go on later from where they stopped (Sidekiq 7.3+'s iterable jobs).

- ``IterableJob`` (``job.py``): the base class — ``build_enumerator`` and ``each_iteration``,
  the hooks, ``max_iteration_runtime``.
- ``state.py``: the ``it-<jid>`` hash, Sidekiq 8's layout, read as untrusted.
- ``handler.py``: the worker's built-in link that pushes an interrupted job again.
- ``control.py``: ``wurk.cancel(jid)``.
- ``enumerators.py``: ``items``, ``ids``, ``csv_rows``/``csv_batches``,
  ``sqlalchemy_rows``/``sqlalchemy_batches``, ``django_rows``/``django_batches``.

docs/iterable-jobs.md teaches them.
"""

from __future__ import annotations

from .control import cancel
from .enumerators import (
    csv_batches,
    csv_rows,
    django_batches,
    django_rows,
    ids,
    items,
    sqlalchemy_batches,
    sqlalchemy_rows,
)
from .job import FLUSH_INTERVAL, IterableJob
from .state import STATE_TTL, IterationState

__all__ = ["FLUSH_INTERVAL", "STATE_TTL", "IterableJob", "IterationState",
           "cancel", "csv_batches", "csv_rows", "django_batches", "django_rows", "ids",
           "items", "sqlalchemy_batches", "sqlalchemy_rows"]
