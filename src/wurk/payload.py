"""The job payload: Sidekiq's JSON object, built, checked, dumped and loaded here only.

1. Field names are constants of this module.
2. ``dumps`` writes what Ruby's ``JSON.generate`` writes: compact, raw UTF-8, no NaN.
3. ``loads`` + ``validate`` turn a raw entry into a dict or an error that names the field.
   ``loads`` reads what Ruby's parser reads: UTF-8, no ``NaN``, at most 100 levels deep;
   and no number beyond a float (``1e400``), which would come back as no JSON, nor an
   escaped lone surrogate (``"\\ud800"``), which UTF-8 cannot carry.
4. Time values: ``write_time`` follows ``timestamp_format`` (Sidekiq 8's ms, or 6/7's float
   seconds); ``read_time``
   accepts every form found in the wild.
5. Arguments must be JSON-native, of the exact types (an enum member or a subclass is refused,
   but for ``Jid``, the text a push returned), with text UTF-8 can encode and ints Python
   writes as text; ``check_args`` names the first one that is not, ``check_value`` checks
   one value (a job's return value) by the same rules.
6. Backtraces are stored as Sidekiq 7.2.1+ stores them: strict base64 of zlib(JSON array);
   reading one inflates at most ``BACKTRACE_MAX_BYTES`` (a stored value can be a zip bomb).
7. An option whose value is null is one not set (Ruby's nil: Sidekiq's client keeps
   ``set(retry: nil)`` as ``"retry":null`` and reads it as absent). Every reader — push,
   scheduler, worker, retry, API — reads an option as ``payload.get(X)`` and takes None as
   absent, never as ``X in payload``; a push keeps the null as Sidekiq's client does.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import time
import zlib
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Literal, NoReturn

from .errors import InvalidArguments, InvalidPayload, UnparseablePayload

__all__ = [
    "Jid",
    "Payload",
    "TimestampFormat",
    "check_args",
    "check_value",
    "decode_backtrace",
    "dumps",
    "encode_backtrace",
    "error_class_name",
    "finite_seconds",
    "loads",
    "loads_json",
    "new_jid",
    "read_backtrace",
    "read_time",
    "score",
    "too_large",
    "validate",
    "write_time",
]

Payload = dict[str, Any]
TimestampFormat = Literal["ms", "float"]

# -- field names ------------------------------------------------------------------------------
CLASS = "class"
ARGS = "args"
QUEUE = "queue"
JID = "jid"
RETRY = "retry"
RETRY_FOR = "retry_for"
RETRY_QUEUE = "retry_queue"
RETRY_COUNT = "retry_count"
CREATED_AT = "created_at"
ENQUEUED_AT = "enqueued_at"
FAILED_AT = "failed_at"
RETRIED_AT = "retried_at"
DISCARDED_AT = "discarded_at"
AT = "at"
TAGS = "tags"
BID = "bid"
WRAPPED = "wrapped"
DISPLAY_CLASS = "display_class"
DEAD = "dead"
BACKTRACE = "backtrace"
ERROR_CLASS = "error_class"
ERROR_MESSAGE = "error_message"
ERROR_BACKTRACE = "error_backtrace"
LOG_LEVEL = "log_level"
ENCRYPT = "encrypt"
PROFILE = "profile"
PROFILER_OPTIONS = "profiler_options"  # Sidekiq 8: options for the profiler (Vernier's)
# wurk's own: seconds the job's outcome is kept under ``wurk:result:<jid>`` (``wurk.results``);
# a Ruby worker ignores it and keeps nothing.
RESULT_TTL = "result_ttl"
TIMEOUT = "timeout"  # wurk: the job's time limit, seconds (``wurk.control``)

# Limits (rate limiters, unique jobs, expiring jobs).
OVERRATED = "overrated"  # how often a rate limiter rescheduled the job (Sidekiq Enterprise)
# Not on the wire: set by an inner link of the worker on a job it dropped unrun that will
# never run and is no success (a workflow step past its ``expires_in``, dead in its
# workflow), and popped by the batch link, which counts it dead.
DEAD_UNRUN = "wurk_dead_unrun"
UNIQUE_FOR = "unique_for"  # seconds the unique lock lives (Sidekiq Enterprise)
UNIQUE_UNTIL = "unique_until"  # "success" (default) or "start"
UNIQUE_DIGEST = "unique_digest"  # wurk: names the lock, so any process can release it
EXPIRES_IN = "expires_in"  # seconds, relative (Sidekiq Pro)
PARTITION = "partition"  # wurk: the job's partition of a partitioned queue (wurk.partitions)
EXPIRES_AT = "expires_at"  # wurk: the deadline, in the timestamp format of created_at
# wurk's own: the context variables ``wurk.context.persist`` saved at push time.
CONTEXT = "wurk_ctx"
# W3C trace context of the span that pushed the job (``wurk.otel``); the names are the HTTP
# headers', as OpenTelemetry's Ruby Sidekiq instrumentation stores them, so traces cross.
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
# wurk's own: a workflow step's job names its workflow's id and its step (``wurk.workflow``).
WORKFLOW = "wf"
WORKFLOW_STEP = "wf_step"
# wurk's own: a ``django.tasks`` task's job names the backend (its alias in ``TASKS``) it was
# enqueued through, whose shard keeps the task's records (``wurk.contrib.django.tasks``).
TASK_BACKEND = "wurk_task_backend"

DEFAULT_QUEUE = "default"
# wurk's own client-side option: ``set(transactional=False)`` pushes at once, even inside a
# transaction, when transactional push is on.
TRANSACTIONAL = "transactional"
# Client-side options that never reach Redis.
TRANSIENT_FIELDS = frozenset({"pool", "client_class", "sync", TRANSACTIONAL, AT})
# Sidekiq truncates error messages to this many characters.
ERROR_MESSAGE_LIMIT = 10_000
# An epoch value below this cannot be milliseconds after 1973, so wurk's readers take it as
# seconds; wurk never writes one.
_MS_FLOOR = 10**11
# Relative intervals are below this; larger numbers are absolute epoch seconds.
ABSOLUTE_EPOCH_FLOOR = 1_000_000_000


class Jid(str):
    """A jid as a push returns it (``wurk.results.ResultHandle`` is one): the only ``str``
    subclass a payload takes, since it is nothing but its text — JSON writes that, and the
    job reads back a ``str`` equal to it, as it did before pushes returned handles."""

    __slots__ = ()


def new_jid() -> str:
    """12 random bytes as 24 lowercase hex characters, as Sidekiq makes them."""
    return os.urandom(12).hex()


# -- JSON -------------------------------------------------------------------------------------
_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def dumps(obj: Any) -> str:
    """Compact JSON with raw UTF-8, the bytes Ruby's generator produces for the same object."""
    return _encoder.encode(obj)


# Redis's smallest ``proto-max-bulk-len`` (1 MB): a payload no larger always fits, so only a
# larger one makes a client ask its server for the limit. Redis's default is 512 MB.
MIN_BULK_LIMIT = 1024 * 1024
DEFAULT_BULK_LIMIT = 512 * 1024 * 1024


def too_large(text: str, limit: int) -> int | None:
    """The size in bytes of a payload's JSON (UTF-8, as sent) when it is over ``limit``
    bytes; None when it fits. Encodes nothing for a text of at most ``limit / 4``
    characters (no character takes more than 4 bytes)."""
    if len(text) * 4 <= limit:
        return None
    size = len(text.encode("utf-8", "surrogatepass"))
    return size if size > limit else None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text} is beyond any float")
    return value


# Python's parser takes NaN and Infinity, which no other JSON reader (Ruby's included) does
# and which wurk could not write back into a retry: refused as not JSON. So is a number no
# float holds (``1e400``): Python would read it as infinity, which no JSON writer writes back,
# so the job could be neither retried nor buried with its error.
_decoder = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)
# Ruby's JSON parser (so Sidekiq) reads at most 100 levels of nesting; deeper payloads are
# refused here too, which also keeps re-encoding one (into retry, or dead) far from Python's
# recursion limit.
MAX_NESTING = 100
# A payload is an object holding the ``args`` array: an argument may nest this many levels
# (``[]`` is one), or the payload is deeper than Ruby reads — Sidekiq's client refuses such a
# push (its generator has the same limit) and every worker would bury the job unread.
ARG_NESTING = MAX_NESTING - 2
_TOO_DEEP = object()


def loads(raw: str | bytes) -> Payload:
    """Parse a stored entry; anything but a JSON object is an ``UnparseablePayload``.

    Bytes must be UTF-8 (JSON's interchange encoding, and what Sidekiq writes)."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        # What every worker fetches, a JSON object written without surrounding space, is
        # read in one call (``decode`` adds two: skipping whitespace, then checking for it);
        # anything else, and all errors, take ``decode`` for its exact message.
        if text[:1] == "{" and text[-1:] == "}":
            value, end = _decoder.raw_decode(text)
            if end != len(text):
                value = _decoder.decode(text)
        else:
            value = _decoder.decode(text)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise UnparseablePayload(
            f"payload is not valid JSON ({exc}): {_excerpt(raw)}", field=None
        ) from None
    except RecursionError:
        value = _TOO_DEEP  # deeper than Python parses: certainly deeper than MAX_NESTING
    # Deeper than MAX_NESTING needs more brackets than that: an ordinary payload is told by
    # two ``count`` calls, in place (this runs for every job), and walked only past them.
    if value is _TOO_DEEP or (text.count("[") + text.count("{") > MAX_NESTING
                              and _too_deep(value, None)):
        raise UnparseablePayload(
            f"payload is nested deeper than {MAX_NESTING} levels, the most Ruby's JSON (so "
            f"Sidekiq) reads: {_excerpt(raw)}"
        )
    # An escape of half a UTF-16 pair (``"\\ud800"``) reads as a lone surrogate, which UTF-8
    # cannot carry: the job could be written back nowhere (not retried, buried or pushed).
    # Only text that has such an escape is looked at again.
    if ("\\ud" in text or "\\uD" in text) and _has_lone_surrogate(value):
        raise UnparseablePayload(
            f"payload is no UTF-8 text: it holds a lone surrogate (an escape like \\ud800, "
            f"half a UTF-16 pair), which UTF-8 cannot carry: {_excerpt(raw)}"
        )
    if not isinstance(value, dict):
        raise UnparseablePayload(
            f"payload is JSON but not an object ({type(value).__name__}): {_excerpt(raw)}"
        )
    return value


def _too_deep(value: Any, raw: str | bytes | None) -> bool:
    """Whether ``value`` nests deeper than ``MAX_NESTING``; with its ``raw`` text, walked
    only when that has so many brackets at all (``loads`` counts them in place)."""
    if raw is not None and (raw.count(b"[") + raw.count(b"{") if isinstance(raw, bytes)
                            else raw.count("[") + raw.count("{")) <= MAX_NESTING:
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_NESTING:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, (dict, list)))
    return False


def _has_lone_surrogate(value: Any) -> bool:
    try:
        dumps(value).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _excerpt(raw: str | bytes, limit: int = 200) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return repr(text[:limit]) + ("…" if len(text) > limit else "")


# -- validation -------------------------------------------------------------------------------
def validate(payload: Payload) -> Payload:
    """Check the fields a worker relies on; raise ``InvalidPayload`` naming the first bad one.

    An option given as null (``tags``, ``retry_for``, ``retry_count``, ``retry``…) is one not
    set, as Sidekiq reads it: its client keeps ``set(tags: nil)`` as null.
    Runs for every job: each check is inline, and only a bad field costs a call."""
    value = payload.get(CLASS)
    if not (isinstance(value, str) and value != ""):
        _fail(payload, CLASS, "a non-empty string")
    if not isinstance(payload.get(ARGS), list):
        _fail(payload, ARGS, "an array")
    if QUEUE in payload:
        value = payload[QUEUE]
        if not (isinstance(value, str) and value != ""):
            _fail(payload, QUEUE, "a non-empty string")
    if JID in payload and not isinstance(payload[JID], str):
        _fail(payload, JID, "a string")
    if RETRY in payload:
        value = payload[RETRY]
        if not (value is None or isinstance(value, bool)
                or (isinstance(value, int) and value >= 0)):
            _fail(payload, RETRY, "true, false or a non-negative integer")
    value = payload.get(RETRY_FOR)
    if value is not None and not _is_number(value):
        _fail(payload, RETRY_FOR, "a number of seconds")
    value = payload.get(RETRY_COUNT)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        _fail(payload, RETRY_COUNT, "an integer")
    value = payload.get(TAGS)
    if value is not None and not isinstance(value, list):
        _fail(payload, TAGS, "an array")
    if BACKTRACE in payload:
        value = payload[BACKTRACE]
        if not (isinstance(value, (bool, int)) or value is None):
            _fail(payload, BACKTRACE, "true, false or a line count")
    if DEAD in payload and not (isinstance(payload[DEAD], bool) or payload[DEAD] is None):
        _fail(payload, DEAD, "true or false")
    return payload


def _fail(payload: Mapping[str, Any], field: str, expected: str) -> NoReturn:
    shown = _excerpt(dumps(payload.get(field)), 80) if field in payload else "missing"
    raise InvalidPayload(f"payload field {field!r} is {shown}; expected {expected}", field=field)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# -- arguments --------------------------------------------------------------------------------
def check_args(args: Iterable[Any], *, what: str = "argument") -> None:
    """Refuse anything JSON would not carry back unchanged; name it and say what to do."""
    for index, value in enumerate(args):
        # Runs on every push: the usual argument passes on its exact type and one cheap look
        # (no encoding, no str()); anything else, even a subclass, takes the careful path.
        kind = type(value)
        if kind is str:
            if not value.isascii():
                _check_text(value, f"{what} {index}")
        elif not ((kind is int and value.bit_length() <= _SHORT_INT_BITS)
                  or value is None or kind is bool):
            _check_native(value, f"{what} {index}", ARG_NESTING)


def check_value(value: Any, what: str) -> None:
    """``check_args``'s rules for one value (a job's return value): ``InvalidArguments``
    naming ``what``, the value's type and what to do when JSON would not bring it back."""
    _check_native(value, what)


# An int of at most this many bits has at most 603 digits, fewer than the lowest limit Python
# may be set to write as text (640, ``sys.set_int_max_str_digits``): never too long.
_SHORT_INT_BITS = 2000


def _check_native(value: Any, path: str, levels: int | None = None) -> None:
    """``levels``: how deep ``value`` may nest (None: no limit)."""
    # Exact types: an IntEnum, a str-mixin Enum or a float subclass passes isinstance, but
    # JSON writes it as its plain value and reads that back (``1``, ``"red"``), not it.
    kind = type(value)
    if value is None or kind is bool:
        return
    if kind is str or isinstance(value, Jid):
        _check_text(value, path)
        return
    if kind is int:
        _check_int(value, path)
        return
    if kind is float:
        if not math.isfinite(value):
            raise InvalidArguments(f"{path} is {value!r}; JSON cannot carry NaN or infinity")
        return
    if kind is list or kind is dict:
        if levels is not None and levels < 1:
            raise InvalidArguments(
                f"{path} is nested too deep: its job's payload would be nested deeper than "
                f"{MAX_NESTING} levels, the most Ruby's JSON (so Sidekiq) reads and wurk reads "
                "too; flatten it")
        inner = None if levels is None else levels - 1
    if kind is list:
        for i, item in enumerate(value):
            _check_native(item, f"{path}[{i}]", inner)
        return
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise InvalidArguments(
                    f"{path} has the key {key!r} of type {type(key).__name__}; JSON object keys "
                    "must be plain strings (it would come back as a string)"
                )
            if not key.isascii():
                _check_text(key, f"{path} has the key {key!r}, which")
            _check_native(item, f"{path}[{key!r}]", inner)
        return
    raise InvalidArguments(
        f"{path} is {type(value).__name__} ({_short_repr(value)}), which is not JSON-native; "
        "pass only None, bool, int, float, str, list and dict with str keys (convert it "
        "yourself, e.g. a datetime to .isoformat(), an enum to .value, a tuple to a list)"
    )


def _check_text(text: str, path: str) -> None:
    """A str UTF-8 can encode: any but one holding a lone surrogate (what a bad decode with
    ``surrogateescape`` leaves), which the push could not write."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArguments(
            f"{path} has a lone surrogate ({text[exc.start]!r} at index {exc.start}): UTF-8, "
            "so JSON in Redis, cannot carry it; decode the text it came from with "
            "errors='replace'"
        ) from None


def _check_int(number: int, path: str) -> None:
    """An int Python writes as text: not longer than its int-to-str digit limit."""
    if number.bit_length() <= _SHORT_INT_BITS:
        return
    try:
        repr(number)  # refused at once past the limit: Python counts before it converts
    except ValueError:
        digits = int(number.bit_length() * math.log10(2)) + 1
        raise InvalidArguments(
            f"{path} is an int of about {digits} digits, more than Python writes as text "
            "(sys.get_int_max_str_digits()); pass it as a str"
        ) from None


def _short_repr(value: Any) -> str:
    if type(value) is int and value.bit_length() > _SHORT_INT_BITS:
        return f"an int of {value.bit_length()} bits"  # repr may refuse to write it
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- time -------------------------------------------------------------------------------------
def write_time(fmt: TimestampFormat, at: float | None = None) -> int | float:
    """A payload timestamp: integer ms (Sidekiq 8) or float seconds (Sidekiq 6/7)."""
    t = time.time() if at is None else at
    if fmt == "ms":
        return int(t * 1000)
    return float(t)


def read_time(value: Any) -> float | None:
    """Epoch seconds from any timestamp form Sidekiq ever wrote, or None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, int):
        try:
            return value / 1000.0 if value >= _MS_FLOOR else float(value)
        except OverflowError:  # an integer no float holds is no time
            return None
    if isinstance(value, str):
        return _read_time_text(value.strip())
    return None


def _read_time_text(text: str) -> float | None:
    try:
        number: int | float = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            return _parse_date_text(text)
    return read_time(number)


def _parse_date_text(text: str) -> float | None:
    candidates = [text.replace(" UTC", "+00:00").replace("Z", "+00:00")]
    for candidate in candidates:
        try:
            parsed = datetime.fromisoformat(candidate)
        except ValueError:
            continue
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)
        return parsed.timestamp()
    try:
        return parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


def finite_seconds(value: Any, name: str, expected: str, *, field: str | None) -> float:
    """``value`` as float seconds: a finite int or float, not a bool. Anything else —
    NaN, infinity, an int no float holds — raises ``InvalidPayload`` saying that ``name``
    must be ``expected``: Redis refuses a NaN score only once the push is sent, and an
    infinite one holds a job for ever."""
    if type(value) is not bool and isinstance(value, (int, float)):
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond any float
            seconds = math.inf
        if math.isfinite(seconds):
            return seconds
    raise InvalidPayload(f"{name} must be {expected}, not {_short_repr(value)}", field=field)


def score(at: float) -> str:
    """A sorted-set score: float epoch seconds, with every digit a double holds."""
    return repr(float(at))


# -- errors -----------------------------------------------------------------------------------
def error_class_name(exc: BaseException) -> str:
    """``module.QualName``, or the bare name for builtins, as Sidekiq names errors."""
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def error_message(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # a broken __str__ must not stop the retry from being booked
        text = "!!! ERROR MESSAGE THREW AN ERROR !!!"
    text = text.encode("utf-8", "replace").decode("utf-8")
    return text[:ERROR_MESSAGE_LIMIT]


def encode_backtrace(lines: list[str]) -> str:
    """Strict base64 of zlib(compact JSON array) — Sidekiq 7.2.1+'s ``error_backtrace``."""
    return base64.b64encode(zlib.compress(dumps(lines).encode("utf-8"))).decode("ascii")


# A stored backtrace inflates to at most this: Sidekiq keeps a few hundred lines, far below
# it, while a 340 KiB entry can inflate to 256 MiB and take a reader's memory with it.
BACKTRACE_MAX_BYTES = 1 << 20


def decode_backtrace(value: Any) -> list[str] | None:
    """Read every stored backtrace form; None when it cannot be decoded (Marshal,
    too large, not a list of lines)."""
    try:
        return read_backtrace(value)
    except ValueError:
        return None


def read_backtrace(value: Any, *, max_bytes: int = BACKTRACE_MAX_BYTES) -> list[str]:
    """The lines of a stored backtrace; ``ValueError`` saying why it cannot be read."""
    if isinstance(value, list):
        lines: Any = value
    elif isinstance(value, str):
        lines = _inflate_lines(value, max_bytes)
    else:
        raise ValueError("not a backtrace (neither a list of lines nor base64 text)")
    if not isinstance(lines, list) or any(isinstance(line, (list, dict)) for line in lines):
        raise ValueError("not a list of lines")
    return [line if isinstance(line, str) else str(line) for line in lines]


def _inflate_lines(value: str, max_bytes: int) -> Any:
    try:
        packed = base64.b64decode("".join(value.split()))
        inflater = zlib.decompressobj()
        text = inflater.decompress(packed, max_bytes)
    except (binascii.Error, zlib.error, ValueError):
        raise ValueError("not base64 of zlib data (a Ruby Marshal backtrace?)") from None
    if inflater.unconsumed_tail:
        raise ValueError(f"backtrace too large (inflates past {max_bytes:,} bytes)")
    if not inflater.eof:
        raise ValueError("backtrace cut short (the zlib stream does not end)")
    try:
        return loads_json(text)
    except ValueError as exc:
        raise ValueError(f"backtrace is not JSON ({exc})") from None


def loads_json(raw: str | bytes) -> Any:
    """Any JSON value, read as ``loads`` reads payloads: no NaN, at most ``MAX_NESTING``
    levels; ``ValueError`` otherwise."""
    try:
        value = _decoder.decode(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
    except RecursionError:
        value = _TOO_DEEP
    if value is _TOO_DEEP or _too_deep(value, raw):
        raise ValueError(f"nested deeper than {MAX_NESTING} levels")
    return value
