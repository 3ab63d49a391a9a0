"""Saying that a long job has started, while it still runs.

1. A job's ``start`` line is at DEBUG: one more line per job would double a busy worker's
   log. A job still running ``log_slow_jobs_after`` seconds after it started gets its start
   line at INFO then, once, with its context (jid, class, queue…), so a 40 s job shows in
   the log long before its ``done`` line.
2. ``SlowJobs`` is a poller (``wurk.runtime.timer.TimerLoop``) over what the process runs now (the
   ``Busy`` map the heartbeat publishes), started and stopped by the launcher; the job
   threads themselves do nothing more.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Protocol

from .. import log as wurk_log
from .. import payload as P
from ..config import Config
from ..runtime.timer import TimerLoop, Timers

__all__ = ["SlowJobs"]

log = logging.getLogger("wurk")

# The poller looks this often at most; a shorter threshold makes it look more often, so a
# line comes at most a fifth of the threshold late.
MAX_TICK = 1.0


class _Running(Protocol):
    def snapshot(self) -> dict[str, str]: ...


class SlowJobs:
    """Logs ``start`` at INFO for each job running longer than the threshold."""

    def __init__(self, config: Config, busy: _Running, *, timers: Timers | None = None) -> None:
        self.config = config
        self.busy = busy
        self.after = float(config.log_slow_jobs_after or 0)
        self._told: set[tuple[str, str]] = set()  # (thread, payload) of jobs announced
        tick = min(MAX_TICK, self.after / 5) if self.after else MAX_TICK
        self._loop = TimerLoop("wurk-slow-jobs", self.check, tick, host=timers)

    @property
    def enabled(self) -> bool:
        return bool(self.after) and not self.config.skip_default_job_logging

    def start(self) -> None:
        if self.enabled:
            self._loop.start()

    def stop(self, timeout: float) -> None:
        self._loop.stop(timeout=timeout)

    def check(self, now: float | None = None) -> int:
        """One look: announce the jobs that just passed the threshold; how many."""
        moment = time.time() if now is None else now
        running = {(tid, entry): _decode(entry) for tid, entry in self.busy.snapshot().items()}
        self._told &= set(running)  # forget the jobs that ended
        told = 0
        for key, work in running.items():
            started = work.get("run_at")
            if key in self._told or not isinstance(started, (int, float)) \
                    or moment - started < self.after:
                continue
            self._told.add(key)
            self._announce(work, moment - started)
            told += 1
        return told

    def _announce(self, work: dict[str, Any], elapsed: float) -> None:
        job = _decode(work.get("payload"))
        queue = work.get("queue")
        fields: dict[str, Any] = {"class": job.get(P.WRAPPED) or job.get(P.CLASS),
                                  "jid": job.get(P.JID), "queue": queue}
        fields.update({name: job[name] for name in self.config.logged_job_attributes
                       if name in job})
        with wurk_log.job_context(fields):
            log.info("start (still running after %.0f s)", elapsed)


def _decode(text: Any) -> dict[str, Any]:
    """A JSON object from the work map; {} for anything else (it holds what was fetched)."""
    if not isinstance(text, str):
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
