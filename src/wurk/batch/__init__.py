"""Batches: groups of jobs with callbacks when they have all run, all succeeded, or one died.

``wurk.Batch`` describes and fills one (``model``), ``wurk.BatchStatus`` reads it
(``status``), ``BatchSet`` / ``DeadBatches`` / ``scan_tags`` list them (``sets``). The
accounting is Lua (``accounting`` and ``scripts/batch_*.lua``), attached to pushes and
workers through middleware and a death handler (``middleware``); callbacks are ordinary
jobs (``callback``). ``docs/batches.md`` tells the whole story.
"""

from __future__ import annotations

from .. import payload as P
from ..config import Config
from ..job import current_job, open_batches_with
from .block import worker_config
from .callback import Callback, Empty
from .middleware import install as install_middleware
from .model import EVENTS, Batch, new_bid, open_batch
from .sets import BatchSet, DeadBatches, scan_tags
from .status import BatchStatus, invalidated

__all__ = [
    "EVENTS",
    "Batch",
    "BatchSet",
    "BatchStatus",
    "Callback",
    "DeadBatches",
    "Empty",
    "current_batch",
    "install",
    "new_bid",
    "open_batch",
    "scan_tags",
    "valid_within_batch",
]


def current_batch() -> Batch | None:
    """The batch of the running job (to reopen it and add jobs), or None outside one."""
    job = current_job()
    bid = job.get(P.BID) if job is not None else None
    if not isinstance(bid, str) or not bid:
        return None
    return Batch(bid, config=worker_config())


def valid_within_batch() -> bool:
    """False once the running job's batch was invalidated (``invalidate_all``): the job
    should return early. True outside a batch."""
    job = current_job()
    bid = job.get(P.BID) if job is not None else None
    if not isinstance(bid, str) or not bid:
        return True
    return not invalidated(bid, config=worker_config())


def install(config: Config) -> None:
    """Make ``config``'s worker (and pushes) keep batch accounting, once, and let a job
    reach its batch (``Job.batch``): the launcher calls it before the worker starts, the
    testing modes before a job runs."""
    install_middleware(config)
    open_batches_with(open_batch)

