"""Stopping jobs from outside: time limits and ``wurk.cancel``.

- ``stops.py``: the processor's guard — where in a sync job's thread an exception may be
  raised from outside (the shutdown in its frame, a stop in its body).
- ``running.py``: running jobs as targets that can be told to stop, and the cancels a
  process remembers.
- ``deadlines.py``: the time-limit thread; a job that does not stop is reported stuck.
- ``stopper.py``: the innermost link, which opens a job's body to stops.
- ``handler.py``: the built-in ``CancelHandler`` link and the poller that brings a worker
  its cancels.
- ``withdraw.py``: ``wurk.cancel(jid)``'s steps, which read queues and sets through
  ``wurk.api``; ``cancelling.py``: ``wurk.cancel`` itself, which also tells a workflow of
  its step taken out. Imported when it is called, so neither ``import wurk`` nor a worker
  loads the inspection model.
- ``worker.py``: what a worker owns of all this.

docs/time-limits-and-cancel.md teaches them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import Config
    from .withdraw import Cancellation

__all__ = ["cancel"]


def cancel(jid: str, *, config: Config | None = None) -> Cancellation:
    """Cancel the job ``jid`` wherever it is: removed from its queue, the scheduled or the
    retry set if it waits; stopped if it runs (``wurk.JobCancelled`` in a sync job's body, its
    task cancelled for an async job; an iterable job at its next flush). Returns a
    ``Cancellation`` saying where it was found."""
    from .cancelling import cancel as cancel_job

    return cancel_job(jid, config=config)
