"""Reliable fetch's public hooks (Sidekiq Pro's super_fetch): ``wurk.reliability.on_poison``.

``on_poison(fn)`` is ``wurk.on_poison`` itself, not a copy: a callback registered through
either name is told each poison pill the reaper kills, ``{jid, klass, count, queue}``
(docs/reliability.md). The fetch and the reaper live in ``wurk.fetch``, which is internal.
"""

from __future__ import annotations

from .fetch.poison import Registration, on_poison

__all__ = ["Registration", "on_poison"]
