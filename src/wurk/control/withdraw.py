"""Withdrawing a job for ``wurk.cancel(jid)``: stopped wherever it is.

1. **Waiting** — in a queue, the scheduled set or the retry set: removed (its unique lock
   released), never to run; it counts as cancelled, and a batch it belongs to counts it as
   dead (the batch still completes).
2. **Running** — every live process is told through ``wurk:cancel:<identity>``, a list each
   worker's ``CancelPoller`` (``handler.py``) pops every ``control_interval`` seconds: the
   process running it stops a sync job by raising ``wurk.JobCancelled`` in its body, an
   async job by cancelling its task (``stopper.py``), and remembers the jid for a while, so
   the job is refused at its start if it was fetched meanwhile.
3. **Iterable jobs** are cancelled Sidekiq's way: ``cancelled`` in ``it-<jid>`` (written for
   every cancel, so a Ruby process honours it too); the job stops at its next flush and runs
   ``on_cancel`` (``wurk.iteration``). An ``it-<jid>`` of another type, or whose time cannot
   be read, is a warning: the cancel goes on (``cancelled_at`` stays 0).

A running job that was cancelled ends as cancelled — not a failure, not retried: the
built-in ``CancelHandler`` link counts it in ``wurk:stat:cancelled`` and acknowledges it.
A job that keeps its result (``result_ttl``) has it say "cancelled" either way (removed here,
or stopped by the worker's ``ResultRecorder``): its handle raises ``wurk.JobCancelled``.
``cancel`` returns a ``Cancellation`` saying where the job was found; a jid found nowhere
(finished long ago, or never pushed) says so.

This is the admin side (it reads queues and sets through ``wurk.api``); a worker loads only
``handler.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import payload as P
from ..api.processes import WorkSet, process_identities
from ..api.queues import Queue
from ..api.sets import RetrySet, ScheduledSet
from ..batch.middleware import count as count_in_batch
from ..config import Config, default_config
from ..connections.lending import redis as lent_redis
from ..errors import IterationStateError, JobCancelled
from ..iteration import state as iteration_state
from ..iteration.control import check_jid
from ..reporting import report_error
from ..results.store import record_cancelled

__all__ = ["CONTROL_TTL", "Cancellation", "Removed", "withdraw"]

log = logging.getLogger("wurk")

# Seconds a cancel waits in a process's list before it is dropped (a process that does not
# pop it in that time is not running, or not a wurk process).
CONTROL_TTL = 60


@dataclass
class Cancellation:
    """What ``wurk.cancel`` did with a jid."""

    jid: str
    removed_from: list[str] = field(default_factory=list)  # queue:<name>, schedule, retry
    running_on: list[str] = field(default_factory=list)  # identities whose work map has it
    told: int = 0  # processes told to stop it if it runs there
    cancelled_at: float = 0.0  # when the iterable mark says it was cancelled (Redis's time)

    @property
    def found(self) -> bool:
        return bool(self.removed_from or self.running_on)

    def __str__(self) -> str:
        if self.removed_from:
            return f"job {self.jid} cancelled: removed from {', '.join(self.removed_from)}"
        if self.running_on:
            return (f"job {self.jid} cancelled: it runs on {', '.join(self.running_on)}, "
                    "which stops it within a second")
        return (f"job {self.jid} was not found waiting or running: it finished, or never "
                f"existed; {self.told} running process(es) were told anyway, in case it has "
                "just started")


# Told of a job a cancel took out of its queue or set, before its batch is (``wurk.cancel``
# passes the workflow's death handler: the step is dead, as one stopped running is).
Removed = Callable[[dict[str, Any], BaseException], None]


def withdraw(jid: str, *, config: Config | None = None,
             removed: Removed | None = None) -> Cancellation:
    """Cancel the job ``jid``: removed if it waits, stopped if it runs (see the module).
    ``removed`` is told of a waiting job taken out, as a death handler is."""
    cfg = config or default_config()
    check_jid(jid)
    done = Cancellation(jid)
    with lent_redis(cfg) as conn:
        reply = iteration_state.cancel_script.call(
            conn, [cfg.keys.iteration(jid)], [iteration_state.STATE_TTL])
    try:
        done.cancelled_at = iteration_state.cancel_time(cfg.keys.iteration(jid), reply)
    except IterationStateError as exc:  # a stray key must not keep the job from its cancel
        log.warning("%s", exc)
    for queue in Queue.all(cfg):
        record = queue.find_job(jid)
        if record is not None and queue.delete(record):
            done.removed_from.append(f"queue:{queue.name}")
            _never_ran(cfg, record.raw, removed)
    for name, job_set in (("schedule", ScheduledSet(cfg)), ("retry", RetrySet(cfg))):
        entry = job_set.find_job(jid)
        if entry is not None and entry.delete():
            done.removed_from.append(name)
            _never_ran(cfg, entry.raw, removed)
    done.running_on = sorted({work.process for work in WorkSet(cfg)
                              if getattr(work.job, "jid", None) == jid})
    done.told = _tell(cfg, jid)
    log.info("%s", done)
    return done


def _never_ran(config: Config, raw: bytes | str, removed: Removed | None) -> None:
    """A waiting job removed by a cancel: counted, its result (when it keeps one) says
    "cancelled", and its batch told it will not run — after the result, so a batch callback
    reads it."""
    job = P.loads(raw)
    config.pool("api").run(lambda r: r.incr(config.keys.stat_cancelled))
    try:
        record_cancelled(config, job)
    except Exception as exc:  # the job is removed all the same; a waiter times out
        log.warning("job %s is cancelled, but its result could not say so: %s",
                    job.get(P.JID), exc)
    # Before the batch, as the death handlers are: a workflow's dependants that
    # ``continue`` pushes join the batch before it counts the death. One that raises is
    # reported, as the morgue reports a death handler's error, and the batch still counts
    # the job: it is out of its queue for good, and a second cancel finds it nowhere.
    if removed is not None:
        try:
            jid = job.get(P.JID)
            removed(job, JobCancelled(f"job {jid} was cancelled",
                                      jid=jid if isinstance(jid, str) else None))
        except Exception as failure:
            report_error(config, failure, {"context": "Error calling death handler",
                                           "job": job})
    bid, jid = job.get(P.BID), job.get(P.JID)
    if isinstance(bid, str) and bid and isinstance(jid, str) and jid:
        count_in_batch(config, bid, jid, "death")


def _tell(config: Config, jid: str) -> int:
    """Push the cancel to every live process's control list; how many."""
    identities = process_identities(config)
    if not identities:
        return 0

    def send(r: Any) -> None:
        pipe = r.pipeline(transaction=False)
        for identity in identities:
            key = config.keys.cancels(identity)
            pipe.rpush(key, jid)
            pipe.expire(key, CONTROL_TTL)
        pipe.execute()

    config.pool("api").run(send)
    return len(identities)
