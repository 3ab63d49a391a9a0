"""Riding out a Redis outage: back off with a cap, say when it starts and how long it lasted.

1. ``Backoff``: the wait before the next try after a failure — full jitter: drawn at random
   between 0 and a ceiling that doubles from ``FIRST_WAIT`` to ``MAX_WAIT``; reset by a
   success. Every thread of every process lost Redis at the same moment; drawn waits spread
   their retries, so a Redis that comes back is not hit by all of them in the same instant.
   A loop that retries Redis never spins and notices a restarted server within ``MAX_WAIT``.
2. ``Outage``: one component's outage, shared by its threads (a capsule's processors), so
   an outage makes two lines whatever the concurrency: the first failure is reported (to the
   error handlers, or the log) and the end is logged with its length and the number of
   failed tries. Thread-safe; the healthy path takes no lock. While the worker waits for
   a Redis that has not answered since boot, neither line is written: that wait is one
   message for the whole process (``wurk.connections.unreached``; the heartbeat, which
   writes to Redis, ends it).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import TYPE_CHECKING

from ..reporting import report_error

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["FIRST_WAIT", "MAX_WAIT", "Backoff", "Outage"]

log = logging.getLogger("wurk")

# The first retry comes soon: a cut connection or a failover usually heals at once.
FIRST_WAIT = 0.1
# Never more than this between tries: a thread makes about two dozen tries in a 30 s outage
# (the drawn waits average half the ceiling), and Redis coming back is noticed within this.
MAX_WAIT = 5.0


class Backoff:
    """Waits drawn at random below a ceiling that doubles after each failure, from ``first``
    up to ``cap`` ("full jitter")."""

    def __init__(self, first: float = FIRST_WAIT, cap: float = MAX_WAIT) -> None:
        self.first = first
        self.cap = cap
        self.failures = 0
        self._wait = 0.0

    def next_wait(self) -> float:
        """Count one failure; draw the wait before the next try."""
        self.failures += 1
        self._wait = random.uniform(0.0, self.ceiling)
        return self._wait

    @property
    def ceiling(self) -> float:
        """The longest the current wait can be (0 while healthy)."""
        if self.failures == 0:
            return 0.0
        # The exponent is bounded so a very long outage cannot overflow the float.
        return min(self.cap, self.first * 2.0 ** min(self.failures - 1, 32))

    @property
    def wait(self) -> float:
        """The wait drawn at the last failure (0 while healthy): the same on every read."""
        return self._wait

    def reset(self) -> None:
        self.failures = 0
        self._wait = 0.0


class Outage:
    """Whether a component is in an outage, and since when; logs its start and its end."""

    def __init__(self, config: Config, component: str) -> None:
        self.config = config
        self.component = component
        self._lock = threading.Lock()
        self._since: float | None = None
        self._failures = 0
        self._quiet = False  # this outage began while Redis had not answered since boot
        self.count = 0  # outages begun (for the metrics)

    @property
    def active(self) -> bool:
        return self._since is not None

    def failed(self, exc: BaseException) -> None:
        """One failed try; the first of an outage is reported, the others only counted."""
        quiet = self.config.unreached.absorbs(exc)
        with self._lock:
            self._failures += 1
            if self._since is not None:
                log.debug("%s: still failing (%d tries): %s", self.component,
                          self._failures, exc)
                return
            self._since = time.monotonic()
            self._quiet = quiet
            self.count += 1
        if not quiet:
            report_error(self.config, exc, {"context": self.component})

    def ended(self) -> None:
        """A try worked: log the outage's length if there was one."""
        if self._since is None:  # the healthy path: no lock
            return
        with self._lock:
            since, failures, quiet = self._since, self._failures, self._quiet
            self._since, self._failures, self._quiet = None, 0, False
        if since is not None and not quiet:
            log.info("%s: Redis is back after %.1f s (%d failed tries)", self.component,
                     time.monotonic() - since, failures)
