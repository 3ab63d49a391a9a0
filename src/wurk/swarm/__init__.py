"""The swarm: one parent loads the app, forks N worker children and keeps them running.

1. ``settings``: ``SwarmSettings`` (count, memory and job limits, the supervise intervals).
2. ``backoff``: per-slot crash backoff as due times.
3. ``restart``: the rolling-restart state machine (replacement first, one slot at a time).
4. ``child``: what runs after ``fork`` (the orphan guard, notices to the parent).
5. ``supervisor``: the parent's loop. ``wurk swarm`` runs it; ``wurk.inprocess.boot_swarm`` hosts
   it on a thread of a web process. See ``docs/swarm.md``.
"""

from __future__ import annotations

from .settings import SwarmSettings
from .supervisor import Supervisor

__all__ = ["Supervisor", "SwarmSettings"]
