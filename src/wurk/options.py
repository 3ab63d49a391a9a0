"""Job options and queue names, checked — below the configuration, so the configuration's
periodic loops and the job definitions share one check.

1. ``parse_queue``: ``"name"`` or ``"name,weight"``, a name without spaces (the queues a
   worker listens on); ``check_queue_name`` refuses an empty name and the separator wurk
   reserves for in-flight lists.
2. ``validate_options``: the options Sidekiq gives meaning to (``queue``, ``retry``,
   ``retry_for``…) have the right type; any other must be JSON-native. Each message names
   the option, the value and what was expected.
3. The limits' fields, for a job's options and for a payload at push: ``unique_for`` (seconds
   or a timedelta, False for none), ``unique_until`` (``success`` or ``start``) and
   ``expires_in`` (relative seconds or a timedelta: an absolute time is refused).
4. Profiling: ``profile`` is a token (a non-empty string; it names the stored profile) and
   ``profiler_options`` only what wurk's profiler honours (``check_profiler_options``).
5. Results: ``result_ttl``, the seconds a job's outcome is kept (or a timedelta), as whole
   seconds (``result_ttl_seconds``); False keeps none, and overrides a job's own.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from . import payload as P
from .errors import ConfigError, InvalidArguments, InvalidPayload
from .keys import PRIVATE_SEPARATOR
from .log import level_number

__all__ = ["MAX_RETRY_FOR", "PROFILER_OPTIONS", "PROFILE_INTERVAL_RANGE", "PROFILE_TOKEN_MAX",
           "SHARD",
           "UNIQUE_UNTIL",
           "check_expiry_fields", "check_job_queue", "check_profiler_options",
           "check_queue_name",
           "check_result_ttl", "check_unique_fields", "expires_in_seconds", "parse_queue",
           "queue_entry",
           "result_ttl_seconds", "retry_for_seconds", "stamp_expiry", "unique_for_seconds",
           "validate_options"]

UNIQUE_UNTIL = ("success", "start")
# A profile token is part of a Redis key (``<token>-<jid>``): long enough for any name.
PROFILE_TOKEN_MAX = 100
# ``profiler_options``: what wurk's profiler honours, and the sampling interval's bounds in
# µs (Vernier's unit): under 100 µs the sampler costs more than the job; over 1 s a job of
# minutes gives a handful of samples.
PROFILER_OPTIONS = ("interval", "mode")
# The option naming the shard a job is pushed to (``docs/scaling.md``): read by the client,
# never written into the payload.
SHARD = "shard"
PROFILE_INTERVAL_RANGE = (100, 1_000_000)
# The longest time limit a job may ask for (``timeout``): a week.
MAX_TIMEOUT = 7 * 86400
# retry_for must be relative seconds; anything larger was surely meant as a timestamp.
MAX_RETRY_FOR = 1_000_000_000


# The largest weight: a weighted fetch shuffles each queue's name weight times, so a weight
# of 10**9 took gigabytes at boot and a long shuffle at every fetch.
MAX_WEIGHT = 1_000


def queue_entry(value: Any) -> tuple[str, int]:
    """A queue as a configuration gives it: ``"name"``, ``"name,weight"`` (``parse_queue``)
    or a pair ``(name, weight)``, each checked alike."""
    if isinstance(value, str):
        return parse_queue(value)
    if not isinstance(value, (tuple, list)) or len(value) != 2 or not isinstance(value[0], str):
        raise ConfigError(f"queue {value!r:.100}: expected 'name', 'name,weight' or a pair "
                          "(name, weight)")
    name, weight = value
    if "," in name:
        raise ConfigError(f"queue name {name!r:.100} holds ','; give the weight as the pair's "
                          "second item")
    parse_queue(name)  # the name's checks
    if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= MAX_WEIGHT:
        raise ConfigError(f"queue {name!r:.100}: the weight must be from 0 to {MAX_WEIGHT:,}, "
                          f"not {weight!r:.40}")
    return name, weight


def parse_queue(spec: str) -> tuple[str, int]:
    """``"critical,3"`` → ``("critical", 3)``; a bare name has weight 0 (strict order). A
    name with a space inside is refused: a worker would wait on a queue nothing pushes to
    (``critical - default`` is a YAML list indented one space too deep)."""
    name, _, weight_text = spec.partition(",")
    name = name.strip()
    check_queue_name(name)
    if " - " in name:
        raise ConfigError(
            f"queue name {name!r} holds ' - ': in a YAML list, an item indented deeper than "
            "the one above continues it; put each '- name' at the same indentation")
    if any(char.isspace() for char in name):
        raise ConfigError(f"queue name {name!r} has a space in it; give each queue on its "
                          "own (-q critical -q default), a weight after a comma (critical,3)")
    if not weight_text:
        return name, 0
    try:
        weight = int(weight_text)
    except ValueError:
        raise ConfigError(
            f"queue {spec!r}: the weight {weight_text!r} is not a whole number "
            "(write NAME or NAME,WEIGHT, e.g. critical,3)"
        ) from None
    if not 0 <= weight <= MAX_WEIGHT:
        raise ConfigError(f"queue {spec!r}: the weight must be from 0 to {MAX_WEIGHT:,}")
    return name, weight


def check_queue_name(name: str) -> None:
    if not name:
        raise ConfigError("a queue name is empty")
    if PRIVATE_SEPARATOR in name:
        raise ConfigError(
            f"queue name {name!r} contains {PRIVATE_SEPARATOR!r}, which wurk reserves for "
            "in-flight lists; choose another name"
        )


def check_job_queue(value: Any, *, key: str = P.QUEUE, where: str = "push") -> None:
    """The queue a job goes to (its ``queue`` or ``retry_queue``), as a job's option or a raw
    push's field: a name a worker can be given (``parse_queue``), without ',' or spaces
    around it. ``ConfigError`` naming the option, the value and what was expected."""
    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{where}: option {key}={value!r} is invalid; expected {expected}")

    if not isinstance(value, str):
        raise bad("a queue name")
    parse_queue(value)
    if "," in value or value != value.strip():
        # "a,3" passed as the queue "a" of weight 3, and the job went to "a,3", a queue
        # no worker can be given: -q (Sidekiq's too) reads what follows a comma as a weight
        raise bad("a queue name without ',' or spaces around it (a worker's -q reads what "
                  "follows a comma as the queue's weight)")


def retry_for_seconds(value: Any, bad: Callable[[str], Exception]) -> int:
    """``retry_for`` as the whole seconds stored (a timedelta or a fraction rounds up: a
    window is never shorter than asked); ``bad(expected)`` is raised for anything else."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or not 0 < seconds <= MAX_RETRY_FOR:  # also refuses NaN
        raise bad(f"a number of seconds (or a timedelta) above 0 and at most {MAX_RETRY_FOR}")
    return math.ceil(seconds)


def validate_options(options: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    """Check the options Sidekiq gives meaning to; the message names option, value and fix."""
    result = dict(options)
    for key, value in result.items():
        _check_option(key, value, where)
    if P.RETRY_FOR in result:
        given = result[P.RETRY_FOR]
        result[P.RETRY_FOR] = retry_for_seconds(given, lambda expected: ConfigError(
            f"{where}: option retry_for={given!r} is invalid; expected {expected}"))
    if P.RESULT_TTL in result:
        result[P.RESULT_TTL] = result_ttl_seconds(result[P.RESULT_TTL], where)
    _limits_options(result, where)
    return result


def _limits_options(options: dict[str, Any], where: str) -> None:
    """``unique_for``/``expires_in`` in seconds (timedeltas accepted); False drops the lock."""
    if P.UNIQUE_FOR in options and options[P.UNIQUE_FOR] is None:
        options[P.UNIQUE_FOR] = False  # set(unique_for=None) overrides the job's lock too
    try:
        if P.UNIQUE_FOR in options or P.UNIQUE_UNTIL in options:
            check_unique_fields(options, where)
            if P.UNIQUE_FOR not in options and P.UNIQUE_UNTIL not in options:
                options[P.UNIQUE_FOR] = False  # set(unique_for=False) overrides the job's
        if P.EXPIRES_IN in options:
            check_expiry_fields(options, where)
    except InvalidPayload as exc:
        raise ConfigError(str(exc)) from None


def unique_for_seconds(value: Any, where: str) -> float | bool:
    """``unique_for`` as seconds (a whole number stays an int), or False to push without."""
    if value is False or value is None:
        return False
    given = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(given, bool) or not isinstance(given, (int, float)) or not (
            0 < given < P.ABSOLUTE_EPOCH_FLOOR):
        raise InvalidPayload(f"{where}: unique_for={value!r} is invalid; expected seconds "
                             "(or a timedelta) greater than 0, or False to push without a "
                             "lock", field=P.UNIQUE_FOR)
    return int(given) if float(given).is_integer() else float(given)


def check_unique_fields(job: dict[str, Any], where: str = "push") -> None:
    """Validate (and normalise) the unique fields of a payload or of a job's options. A null
    field is one not set (``payload.validate``'s rule), kept null as Sidekiq's client keeps
    it: ``unique_for`` no lock, ``unique_until`` ``"success"``."""
    if job.get(P.UNIQUE_FOR) is not None:
        value = unique_for_seconds(job[P.UNIQUE_FOR], where)
        if value is False:
            job.pop(P.UNIQUE_FOR)
            job.pop(P.UNIQUE_UNTIL, None)
            job.pop(P.UNIQUE_DIGEST, None)
            return
        job[P.UNIQUE_FOR] = value
    until = job.get(P.UNIQUE_UNTIL)
    if until is not None and until not in UNIQUE_UNTIL:
        raise InvalidPayload(f"{where}: unique_until={until!r} is invalid; expected "
                             "'success' or 'start'", field=P.UNIQUE_UNTIL)


def expires_in_seconds(value: Any, where: str) -> int | float:
    """``expires_in`` as relative seconds; a datetime or a timestamp is refused."""
    if isinstance(value, datetime):
        raise InvalidPayload(f"{where}: expires_in={value!r} is an absolute time; give "
                             "seconds or a timedelta counted from when the job is due",
                             field=P.EXPIRES_IN)
    given = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(given, bool) or not isinstance(given, (int, float)) or not given > 0:
        raise InvalidPayload(f"{where}: expires_in={value!r} is invalid; expected seconds "
                             "(or a timedelta) greater than 0", field=P.EXPIRES_IN)
    if given >= P.ABSOLUTE_EPOCH_FLOOR:
        raise InvalidPayload(f"{where}: expires_in={value!r} looks like a timestamp; "
                             "expires_in is relative: give the seconds from when the job is "
                             "due", field=P.EXPIRES_IN)
    return int(given) if float(given).is_integer() else float(given)


def check_expiry_fields(job: dict[str, Any], where: str = "push") -> None:
    """A payload's (or a job's options') ``expires_in`` as seconds; a null one is one not
    set (``payload.validate``'s rule): kept null, no deadline."""
    if job.get(P.EXPIRES_IN) is not None:
        job[P.EXPIRES_IN] = expires_in_seconds(job[P.EXPIRES_IN], where)


def _check_option(key: str, value: Any, where: str) -> None:
    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{where}: option {key}={value!r} is invalid; expected {expected}")

    if key in (P.QUEUE, P.RETRY_QUEUE):
        check_job_queue(value, key=key, where=where)
    elif key == P.RETRY:
        if not (isinstance(value, bool) or (isinstance(value, int) and value >= 0)):
            raise bad("True, False or a number of retries ≥ 0")
    elif key == P.RETRY_FOR:
        return  # checked and converted to whole seconds by validate_options
    elif key == P.DEAD:
        if not isinstance(value, bool):
            raise bad("True or False")
    elif key == P.BACKTRACE:
        if not (isinstance(value, bool) or (isinstance(value, int) and value >= 0)):
            raise bad("True, False or a number of lines")
    elif key == P.TAGS:
        if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
            raise bad("a list of strings")
    elif key in (P.UNIQUE_FOR, P.EXPIRES_IN):
        return  # checked and converted to seconds by _limits_options
    elif key == P.RESULT_TTL:
        return  # checked and converted to whole seconds by validate_options
    elif key == P.PARTITION:
        if isinstance(value, bool) or not isinstance(value, (str, int)) or (
                isinstance(value, str) and (not value or "|" in value or ":" in value)):
            raise bad("a partition: a non-empty string (or a whole number) without ':' or "
                      "'|' (docs/partitions.md)")
    elif key == P.ENCRYPT:
        if not isinstance(value, bool):
            raise bad("True or False (True seals the last argument: wurk.crypto)")
    elif key == P.LOG_LEVEL:
        if level_number(value) is None:
            raise bad("a log level: 'debug', 'info', 'warn', 'error' or 'fatal'")
    elif key == P.PROFILE:
        if not isinstance(value, str) or not value or len(value) > PROFILE_TOKEN_MAX:
            raise bad(f"a non-empty string of at most {PROFILE_TOKEN_MAX} characters that "
                      "names the profile (its key is <token>-<jid>)")
    elif key == P.PROFILER_OPTIONS:
        check_profiler_options(value, where)
    elif key == P.TIMEOUT:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not 0 < value <= MAX_TIMEOUT:
            raise bad(f"a time limit in seconds, above 0 and at most {MAX_TIMEOUT} (7 days)")
    elif key == SHARD:
        if not isinstance(value, str) or not value:
            raise bad("the name of a shard of the configuration (its shards setting)")
    elif key == "partition_by":
        raise ConfigError(f"{where}: partition_by is an option of the job's definition "
                          "(@wurk.job(partition_by=...) or the class keyword); give one push "
                          "its partition with partition=")
    elif key == "rate_limit":
        raise ConfigError(f"{where}: rate_limit is an option of the job's definition "
                          "(@wurk.job(rate_limit=...) or the class keyword), not of one push")
    else:
        try:
            P.check_args([value], what=f"option {key!r}")
        except InvalidArguments as exc:
            raise ConfigError(f"{where}: {exc}") from None


def result_ttl_seconds(value: Any, where: str) -> int | bool:
    """``result_ttl`` as whole seconds (a fraction rounds up: Redis keeps keys by the
    second), or False for no result; ``ConfigError`` naming the value otherwise."""
    if value is False or value is None:
        return False
    given = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(given, bool) or not isinstance(given, (int, float)) or not (
            0 < given < P.ABSOLUTE_EPOCH_FLOOR):
        raise ConfigError(f"{where}: result_ttl={value!r} is invalid; expected the seconds "
                          "the job's result is kept (or a timedelta), above 0 and below "
                          f"{P.ABSOLUTE_EPOCH_FLOOR:,}, or False to keep none")
    return math.ceil(given)


def check_result_ttl(job: dict[str, Any], where: str = "push") -> None:
    """A payload's ``result_ttl`` at push: whole seconds, or gone when it is False (a push
    that turned off its job's result); a null one is one not set, kept null."""
    if job[P.RESULT_TTL] is None:
        return
    try:
        seconds = result_ttl_seconds(job[P.RESULT_TTL], where)
    except ConfigError as exc:
        raise InvalidPayload(str(exc), field=P.RESULT_TTL) from None
    if seconds is False:
        job.pop(P.RESULT_TTL)
    else:
        job[P.RESULT_TTL] = seconds


def check_profiler_options(value: Any, where: str) -> None:
    """``profiler_options`` as wurk can honour them: ``interval`` (µs between samples, as
    Vernier counts) and ``mode`` ``"wall"`` (what the sampler measures); anything else is
    refused, so no option does nothing."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: option profiler_options={value!r} is invalid; expected "
                          "a dict such as {'interval': 500} (microseconds between samples)")
    unknown = sorted(set(value) - set(PROFILER_OPTIONS))
    if unknown:
        raise ConfigError(f"{where}: profiler_options {unknown[0]!r} is not one wurk's "
                          f"profiler has; it takes {', '.join(PROFILER_OPTIONS)}")
    interval = value.get("interval", PROFILE_INTERVAL_RANGE[0])
    low, high = PROFILE_INTERVAL_RANGE
    if isinstance(interval, bool) or not isinstance(interval, int) \
            or not low <= interval <= high:
        raise ConfigError(f"{where}: profiler_options interval={interval!r} is invalid; "
                          f"expected whole microseconds from {low} to {high:,}")
    if value.get("mode", "wall") != "wall":
        raise ConfigError(f"{where}: profiler_options mode={value['mode']!r} is invalid; "
                          "wurk's profiler samples wall-clock time only: 'wall'")


def stamp_expiry(job: dict[str, Any], at: float | None, fmt: P.TimestampFormat) -> None:
    """Write a job's ``expires_at`` (its deadline) at push, from ``expires_in`` and when the
    job is due: a scheduled job's time counts from its ``at``. Nothing for a null
    ``expires_in``; a null ``expires_at`` is written."""
    if job.get(P.EXPIRES_IN) is not None and job.get(P.EXPIRES_AT) is None:
        due = time.time() if at is None else at
        job[P.EXPIRES_AT] = P.write_time(fmt, due + float(job[P.EXPIRES_IN]))
