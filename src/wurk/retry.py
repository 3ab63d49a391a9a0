"""Booking a failed job: a retry in ``retry``, or its death, as Sidekiq books them.

1. ``JobRetry.handle`` follows Sidekiq's retry steps in its order: resolve ``retry``,
   stamp the error fields, count the failure, test exhaustion, ask the ``retry_in`` hook,
   add jitter and ``ZADD retry``; or, once exhausted, ask ``retries_exhausted`` and bury the
   job (through the one ``Morgue``) unless it is discarded. Death handlers run once per death.
2. ``kill_invalid``: a payload that cannot be interpreted goes straight to the dead set with
   ``error_class`` ``wurk.InvalidPayload`` — no retry can fix it; so does a failure of class
   ``wurk.Unretryable`` (an encrypted argument that cannot be opened: ``DecryptionError``),
   whatever the job's ``retry`` option says.
3. User hooks are contained: one that raises is reported and the default applies.
4. ``will_retry``: whether ``handle`` will book a retry of a failure, by the same rules,
   before it is booked (a job's stored result says so: ``wurk.results``). Only the
   ``retry_in`` hook is not asked — its ``"kill"`` or ``"discard"`` is known once it runs,
   and a death handler then says so.

Every field this module does not understand is kept as it was: other middleware (Ruby or
Python) may own it.
"""

from __future__ import annotations

import math
import random
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal

from . import payload as P
from .config import Config
from .connections.pool import RedisPool
from .errors import InvalidPayload, Unretryable
from .job import JobDefinition
from .morgue import Morgue
from .reporting import report_error, run_death_handlers

__all__ = ["BACKOFF_BASE", "JITTER_STEP", "JobRetry", "backtrace_lines", "default_delay",
           "kept_backtrace", "will_retry"]

# Sidekiq's backoff is count⁴ + 15 s: 15 s, 16 s, 31 s, 96 s, … about 20 days over 25 retries.
BACKOFF_BASE = 15
# Sidekiq 8's jitter is a whole number of seconds in [0, 10·(count+1)): it spreads a burst of
# failures out more as the delays grow.
JITTER_STEP = 10
# No retry is scheduled further off than this: a payload whose retry_count is absurd (huge,
# or negative and huge) would otherwise make a delay, or a jitter, no float can hold, and the
# failure could not be booked at all. A century is "never" for any queue.
MAX_DELAY = 100 * 365 * 24 * 60 * 60

Verdict = Literal["discard", "kill"]
_VERDICTS: tuple[Verdict, ...] = ("discard", "kill")


def default_delay(count: int) -> int:
    """Seconds before retry number ``count + 1`` when no hook decides."""
    return int(min(count**4, MAX_DELAY) + BACKOFF_BASE)


def backtrace_lines(exc: BaseException) -> list[str]:
    """One line per frame, innermost first, as Ruby lists them, so Sidekiq's dashboard shows
    a Python backtrace the way it shows its own and ``backtrace: N`` keeps the N nearest."""
    frames = traceback.extract_tb(exc.__traceback__)
    lines = [f"{frame.filename}:{frame.lineno}:in '{frame.name}'" for frame in reversed(frames)]
    # A file under a directory named in another encoding has surrogate escapes in its name
    # (``os.fsdecode``), which UTF-8 cannot carry: the backtrace, so the failure, could not
    # be stored. Replaced as ``error_message`` replaces them.
    return [line if line.isascii() else line.encode("utf-8", "replace").decode("utf-8")
            for line in lines]


class JobRetry:
    """Turns a failure into a scheduled retry or a death."""

    def __init__(self, config: Config, morgue: Morgue, pool: RedisPool | None = None) -> None:
        self.config = config
        self.morgue = morgue
        self.pool = pool if pool is not None else config.pool("internal")

    # -- public -----------------------------------------------------------------------------
    def handle(self, job: dict[str, Any], exc: BaseException, *,
               definition: JobDefinition | None, instance: object | None,
               queue: str | None = None) -> None:
        """Book the failure of ``job``; ``job`` is changed in place. ``queue``: the queue it
        was fetched from, written into the payload (as Sidekiq writes it, unless a
        ``retry_queue`` is set), so its retry comes back there."""
        try:
            P.validate(job)
        except InvalidPayload as invalid:
            self.kill_invalid(job, invalid)
            return
        if isinstance(exc, Unretryable):
            self.kill_unretryable(job, exc)
            return
        retry = _retry_option(job, definition)
        if not _retries(retry):
            # No retry and no dead set: only the death handlers hear of it.
            run_death_handlers(self.config, job, exc)
            return
        self._book(job, exc, retry, definition, instance, queue)

    def kill_unretryable(self, job: dict[str, Any], exc: Unretryable) -> None:
        """A failure no retry can fix (``wurk.Unretryable``: an envelope that cannot be
        opened): the dead set, as an invalid payload goes."""
        self.kill_invalid(job, exc)

    def kill_invalid(self, job: dict[str, Any], exc: InvalidPayload | Unretryable) -> None:
        """Straight to the dead set with the error recorded, death handlers told; no retry."""
        _stamp_error(job, exc)
        if P.FAILED_AT not in job:
            job[P.FAILED_AT] = self._now_field()
        job.setdefault(P.RETRY_COUNT, 0)
        self.morgue.kill(job, exc)

    # -- a retry ----------------------------------------------------------------------------------
    def _book(self, job: dict[str, Any], exc: BaseException, retry: int,
              definition: JobDefinition | None, instance: object | None,
              queue: str | None) -> None:
        now = time.time()
        limit = _limit(self.config, retry)
        retry_queue = job.get(P.RETRY_QUEUE)
        if isinstance(retry_queue, str) and retry_queue:
            job[P.QUEUE] = retry_queue
        elif queue:  # where it was fetched from, as Sidekiq writes it
            job[P.QUEUE] = queue
        _stamp_error(job, exc)
        count = self._count_failure(job, now)
        _store_backtrace(job, exc)
        if _exhausted(job, count, limit, now):
            self._exhaust(job, exc, definition, instance)
            return
        delay = self._delay(job, exc, count, definition, instance)
        if delay == "discard":
            job[P.DISCARDED_AT] = self._now_field()
            run_death_handlers(self.config, job, exc)
        elif delay == "kill":
            self._exhaust(job, exc, definition, instance)
        else:
            # A negative count (a hand-made payload) must not make the jitter's range empty.
            jitter = random.randrange(JITTER_STEP * (max(count, 0) + 1))
            self._schedule(job, now + min(delay + jitter, MAX_DELAY))

    def _count_failure(self, job: dict[str, Any], now: float) -> int:
        stamp = P.write_time(self.config.timestamp_format, now)
        if job.get(P.RETRY_COUNT) is None:
            job[P.FAILED_AT] = stamp
        else:
            job[P.RETRIED_AT] = stamp
            if P.read_time(job.get(P.FAILED_AT)) is None:
                # A later failure with no readable first one (a hand-made or damaged
                # payload): this one starts the record, else a retry_for window that has no
                # start never closes and the job is retried for ever.
                job[P.FAILED_AT] = stamp
        job[P.RETRY_COUNT] = _next_count(job)
        return int(job[P.RETRY_COUNT])

    def _delay(self, job: dict[str, Any], exc: BaseException, count: int,
               definition: JobDefinition | None, instance: object | None) -> float | Verdict:
        hook = _hook(definition, "retry_in", instance)
        if hook is None:
            return default_delay(count)
        try:
            answer = hook(count, exc)
        except Exception as failure:
            report_error(self.config, failure, {
                "context": "retry_in raised; falling back to the default delay", "job": job})
            return default_delay(count)
        return _interpret_delay(answer, count)

    def _schedule(self, job: dict[str, Any], at: float) -> None:
        key, member = self.config.keys.retry, P.dumps(job)
        self.pool.run(lambda redis: redis.zadd(key, {member: at}))

    # -- exhaustion ------------------------------------------------------------------------------
    def _exhaust(self, job: dict[str, Any], exc: BaseException,
                 definition: JobDefinition | None, instance: object | None) -> None:
        answer = self._retries_exhausted(job, exc, definition, instance)
        if job.get(P.DEAD) is False or answer == "discard":
            job[P.DISCARDED_AT] = self._now_field()
        else:
            self.morgue.kill(job, exc, notify=False)
        run_death_handlers(self.config, job, exc)

    def _retries_exhausted(self, job: dict[str, Any], exc: BaseException,
                           definition: JobDefinition | None, instance: object | None) -> object:
        hook = _hook(definition, "retries_exhausted", instance)
        if hook is None:
            return None
        try:
            return hook(job, exc)
        except Exception as failure:
            report_error(self.config, failure,
                         {"context": "Error calling retries_exhausted", "job": job})
            return None

    def _now_field(self) -> int | float:
        return P.write_time(self.config.timestamp_format)


def will_retry(config: Config, job: dict[str, Any], exc: BaseException,
               definition: JobDefinition | None) -> bool:
    """Whether ``JobRetry.handle`` will schedule a retry of this failure of ``job`` (read
    before it is booked; ``job`` is not changed): a payload it can read, an error a retry
    may fix, retries on and not used up (``retry_for``'s window included). The ``retry_in``
    hook is not asked: its ``"kill"`` or ``"discard"`` is known only when it is."""
    try:
        P.validate(job)
    except InvalidPayload:
        return False
    retry = _retry_setting(job, definition)
    if isinstance(exc, Unretryable) or not _retries(retry):
        return False
    return not _exhausted(job, _next_count(job), _limit(config, retry), time.time())


def _retry_setting(job: dict[str, Any], definition: JobDefinition | None) -> Any:
    """The payload's ``retry`` if it has one, else the job's option, else on (an unknown
    job without one retries with the default: never silently dropped). A null ``retry`` is
    none, as Sidekiq reads it (``msg["retry"].nil?``): its client keeps ``set(retry: nil)``."""
    if job.get(P.RETRY) is not None:
        return job[P.RETRY]
    if definition is not None and P.RETRY in definition.options:
        return definition.options[P.RETRY]
    return True


def _retry_option(job: dict[str, Any], definition: JobDefinition | None) -> Any:
    """``_retry_setting``, written into the payload when it came from the job's option:
    Sidekiq writes the class's value there, so the retry entry carries it."""
    retry = _retry_setting(job, definition)
    if job.get(P.RETRY) is None and definition is not None and P.RETRY in definition.options:
        job[P.RETRY] = retry
    return retry


def _retries(retry: Any) -> bool:
    """Whether a ``retry`` setting allows retries at all (None and False do not)."""
    return retry is not None and retry is not False


def _limit(config: Config, retry: Any) -> int:
    """How many retries a ``retry`` setting allows: ``True`` means the configuration's."""
    return config.max_retries if retry is True else int(retry)


def _next_count(job: dict[str, Any]) -> int:
    """The ``retry_count`` booking this failure writes: 0 for the first, else one more."""
    previous = job.get(P.RETRY_COUNT)
    return 0 if previous is None else int(previous) + 1


def _stamp_error(job: dict[str, Any], exc: BaseException) -> None:
    job[P.ERROR_MESSAGE] = P.error_message(exc)
    job[P.ERROR_CLASS] = P.error_class_name(exc)


def kept_backtrace(job: dict[str, Any], exc: BaseException) -> list[str] | None:
    """The backtrace lines the job's ``backtrace`` option keeps (all for True, the first N
    for a count), or None when it keeps none."""
    wanted = job.get(P.BACKTRACE)
    if wanted is None or wanted is False:
        return None
    lines = backtrace_lines(exc)
    if wanted is not True:  # a line count; Ruby's 0 is truthy and stores an empty list
        lines = lines[: int(wanted)]
    return lines


def _store_backtrace(job: dict[str, Any], exc: BaseException) -> None:
    lines = kept_backtrace(job, exc)
    if lines is not None:
        job[P.ERROR_BACKTRACE] = P.encode_backtrace(lines)


def _exhausted(job: dict[str, Any], count: int, limit: int, now: float) -> bool:
    """Sidekiq 8.1: a ``retry_for`` window replaces the count limit when present."""
    window = job.get(P.RETRY_FOR)
    if window is None:
        return count >= limit
    first = P.read_time(job.get(P.FAILED_AT))
    return (now if first is None else first) + _seconds(window) < now


def _seconds(window: Any) -> float:
    """A window as float seconds; an integer too large for a float is as good as infinite."""
    try:
        return float(window)
    except OverflowError:
        return math.inf if window > 0 else -math.inf


def _hook(definition: JobDefinition | None, name: str,
          instance: object | None) -> Callable[..., Any] | None:
    return None if definition is None else definition.hook(name, instance)


def _interpret_delay(answer: object, count: int) -> float | Verdict:
    """A positive number of seconds, ``"discard"``, ``"kill"``; anything else → default."""
    if isinstance(answer, str):
        return answer if answer in _VERDICTS else default_delay(count)
    if isinstance(answer, timedelta):
        answer = answer.total_seconds()
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        try:
            seconds = float(answer)
        except OverflowError:  # an int past any float: as far off as a retry may be, if ahead
            seconds = float(MAX_DELAY if answer > 0 else 0)
        if 0 < seconds < math.inf:
            return seconds
    return default_delay(count)
