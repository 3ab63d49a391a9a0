"""``wurk top``: the dashboard's views and actions in a terminal, as Sidekiq 8.1's ``kiq``.

1. ``TopApp`` (``app.py``): a Textual app — Home, Busy, Queues, Scheduled, Retries, Dead,
   Metrics, Batches and Periodic tabs (``panes.py``), the screens they open
   (``screens.py``), the table they share (``sheet.py``).
2. It reads what the dashboard reads (``reads.py``) and acts through the dashboard's own
   actions (``operations.py``); a running iterable job's progress comes from its
   ``it-<jid>`` hash (``iteration.py``).
3. Everything read from Redis is untrusted here as on the web: every value reaches the
   screen through ``text.py`` — escaped, cut, an unreadable one marked invalid, never
   markup.

Internal: the ``wurk top`` command is the public surface. Needs the ``tui`` extra:
``pip install 'wurk[tui]'``.
"""

from __future__ import annotations

try:
    import textual  # noqa: F401
except ImportError as exc:  # tests/tui/test_cli.py hides Textual
    # The missing module's name goes on: ``wurk top`` says it (without it, "None is missing").
    raise ImportError(f"wurk top needs the tui extra ({exc.name} is missing): "
                      "pip install 'wurk[tui]'", name=exc.name) from exc

from .app import TopApp

__all__ = ["TopApp"]
