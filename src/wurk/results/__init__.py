"""Job results: a job's return value (or its failure) kept in Redis, and waited for.

Opt in per job with ``result_ttl`` (seconds the result is kept): ``@wurk.job(result_ttl=3600)``,
``class Report(wurk.Job, result_ttl=3600)`` or ``job.set(result_ttl=60)``. Then a push
returns a ``ResultHandle`` — still the jid, a ``str`` — that waits for the result::

    handle = add.perform_async(1, 2)
    handle.result(timeout=5)      # 3, or wurk.JobFailed / wurk.JobCancelled / TimeoutError
    await handle                  # in async code; one connection for every waiter of a loop

1. ``store``: the record (``wurk:result:<jid>``), what it holds (``Outcome``), how it is
   written in one round trip and read back as untrusted data.
2. ``waiting``: waits woken by Redis's pub/sub, never by polling.
3. ``handle``: ``ResultHandle``, typed by the job's return annotation.
4. ``recorder`` (imported by the worker, not here): the built-in server middleware that
   stores each run's outcome, and the death handler that stores a final failure.

A job without ``result_ttl`` stores nothing and costs the worker one dict lookup. Ruby
Sidekiq, running the same job, stores nothing. Keys, failure modes: docs/results.md.
"""

from __future__ import annotations

from .handle import ResultHandle
from .store import Outcome, afind, batch_outcomes, find, find_many, record_cancelled

__all__ = ["Outcome", "ResultHandle", "afind", "batch_outcomes", "find", "find_many",
           "record_cancelled"]
