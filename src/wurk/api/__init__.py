"""The inspection model: what the dashboard, the CLI and tests read Redis through.

1. ``Queue`` — the queues and their jobs (``queues.py``).
2. ``ScheduledSet``, ``RetrySet``, ``DeadSet`` and their ``SortedEntry`` members (``sets.py``).
3. ``JobRecord`` — one stored job, shown as a person recognises it (``record.py``).
4. ``ProcessSet``, ``Process``, ``WorkSet``, ``Work`` — processes and running jobs
   (``api/processes.py``).
5. ``Stats``, ``StatsHistory`` — the numbers; ``ShardStats`` — each shard's and their sum
   (``stats.py``).
6. ``PeriodicSet``, ``LoopRecord`` — periodic loops, their history, pause and enqueue now
   (``api/periodic.py``); ``ProfileSet``, ``ProfileRecord`` — job profiles kept a day
   (``api/profiles.py``).
   ``IterableJobQuery`` — iterable jobs' state and cancellation (``api/iteration.py``).
   ``ResultQuery`` — jobs' stored results, by jid or by batch (``api/results.py``).
7. Paging that tolerates concurrent change (``paging.py``).
8. Checked values (``values.py``): everything above reads times, counts, JSON and backtraces
   through it, so a value that cannot be read is an ``Invalid`` carrying its raw text, not
   an exception.

Every call that talks to Redis is a method (an attribute never does I/O) on an object holding an
explicit ``Config`` (default: ``wurk.default_config()``), and uses that configuration's
``"api"`` pool. Reads may be replayed once after a broken connection; writes are not, unless
replaying them cannot change the outcome. A worker imports it too: the
limiters read their stored state through ``values``, the history sampler the cluster's
numbers through ``Stats``.

    from wurk.api import Queue, RetrySet
    Queue("default").size()
    for entry in RetrySet().scan("NoMethodError"):
        entry.retry()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..stored import Invalid
    from .iteration import IterableJobQuery
    from .periodic import LoopRecord, PeriodicSet
    from .processes import Process, ProcessSet, Work, WorkSet
    from .profiles import ProfileRecord, ProfileSet
    from .queues import Queue
    from .record import JobRecord
    from .results import ResultQuery
    from .sets import DeadSet, JobSet, RetrySet, ScheduledSet, SortedEntry
    from .stats import QueueSummary, ShardNumbers, ShardStats, Stats, StatsHistory

# Each name is imported from its module on first use (PEP 562): a worker reads a few
# checked values through ``values`` and should not carry the rest of the model (sets,
# processes, periodic loops…) in its memory.
_HOME = {
    "LoopRecord": "periodic", "PeriodicSet": "periodic",
    "Process": "processes", "ProcessSet": "processes", "Work": "processes",
    "WorkSet": "processes", "Queue": "queues", "JobRecord": "record",
    "DeadSet": "sets", "JobSet": "sets", "RetrySet": "sets", "ScheduledSet": "sets",
    "SortedEntry": "sets", "QueueSummary": "stats", "Stats": "stats",
    "StatsHistory": "stats", "ShardNumbers": "stats", "ShardStats": "stats",
    "Invalid": "values",
    "ProfileRecord": "profiles", "ProfileSet": "profiles", "IterableJobQuery": "iteration",
    "ResultQuery": "results",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])


__all__ = [
    "DeadSet",
    "Invalid",
    "IterableJobQuery",
    "JobRecord",
    "JobSet",
    "LoopRecord",
    "PeriodicSet",
    "Process",
    "ProcessSet",
    "ProfileRecord",
    "ProfileSet",
    "Queue",
    "QueueSummary",
    "ResultQuery",
    "RetrySet",
    "ScheduledSet",
    "ShardNumbers",
    "ShardStats",
    "SortedEntry",
    "Stats",
    "StatsHistory",
    "Work",
    "WorkSet",
]
