"""What a worker runs for time limits and cancels: owned by its launcher.

``WorkerStops`` makes the registry of running jobs, the time-limit thread and the cancel
poller, puts the ``Stopper`` link at the tail of the worker's chain (after every other link,
the application's included), and starts and stops its threads with the worker. A job stuck
past its stop is marked in the work map (the Busy page shows it) and counted for the
metrics (``stuck``).
"""

from __future__ import annotations

import logging
import time

from ..config import Config
from ..runtime.busy import Busy
from ..runtime.timer import Timers
from .deadlines import Deadlines
from .handler import CancelPoller
from .running import Running, Target
from .stopper import Stopper

__all__ = ["WorkerStops"]

log = logging.getLogger("wurk")


class WorkerStops:
    """Time limits and cancels of one worker process."""

    def __init__(self, config: Config, identity: str, busy: Busy, timers: Timers) -> None:
        self.config = config
        self.busy = busy
        self.running = Running()
        self.deadlines = Deadlines(clock=timers.clock, on_stuck=self._stuck)
        self.poller = CancelPoller(config, identity, self.running, self.deadlines, timers)
        self.stuck_total = 0  # jobs reported stuck since the worker started

    def install(self) -> None:
        """The ``Stopper`` at the end of the chain (once; a frozen chain stays as it is)."""
        chain = self.config.server_middleware
        if self.config.frozen or any(isinstance(link, Stopper) for link in chain):
            return
        chain.pin_innermost(Stopper(self.config, self.running, self.deadlines))

    def start(self) -> None:
        self.deadlines.start()
        self.poller.start()

    def stop(self, timeout: float) -> None:
        self.poller.stop(timeout)
        self.deadlines.stop(timeout)

    def stuck(self) -> int:
        """Jobs running now that were told to stop and did not."""
        return sum(target.stuck for target in self.running.targets())

    def _stuck(self, target: Target) -> None:
        self.stuck_total += 1
        # Marked only while the stuck run lasts: one that ended as it was found stuck must
        # not leave its mark on the next job of its thread.
        target.while_running(target.stuck_run, lambda: self.busy.mark(
            target.busy_id, stuck_at=time.time(), stopping=target.reason))
