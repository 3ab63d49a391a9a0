"""An iterable job's state in ``it-<jid>``, laid out as Sidekiq 7.3+ and 8 lay it out.

1. The hash holds ``ex`` (executions so far), ``c`` (the cursor, JSON), ``rt`` (runtime so
   far, float seconds) and, once someone asked, ``cancelled`` (epoch seconds of the request).
   A Ruby process and wurk read and write the same fields, so either can resume, cancel or
   show a job the other started.
2. A flush is one transaction: ``HSET`` the three fields, ``EXPIRE … NX`` (30 days, set only
   when the key has none, as Sidekiq 8 does) and ``HGET cancelled`` — so every flush also
   learns whether the job was cancelled meanwhile.
3. ``cancel`` writes ``cancelled`` once (``HSETNX``) with Redis's own clock, in a script:
   the first request's time stands, whoever makes it and whatever their clock says. A key
   of another type is left as it is and the cancel is an ``IterationStateError``
   (``cancel_time``), as is a ``cancelled`` time that cannot be read.
4. Everything read back is untrusted: a field that is not what Sidekiq writes makes
   ``wurk.IterationStateError`` (a failure no retry fixes: the job goes to the dead set, the
   key is left for a person to look at), never a guess. A ``cancelled`` field of any value
   counts: the request is honoured even when its timestamp cannot be read.
5. Of the error replies a read or a flush meets, only ``WRONGTYPE`` (a key of another type)
   says something of the state. Redis refusing the command for now (``OOM``, ``BUSY``,
   ``LOADING``, ``READONLY``…) is ``wurk.RedisUnavailable``, as it is for every other
   command (``wurk.connections.replies``): the job is retried from its last flush, not sent
   to the dead set; any other error reply is raised as it came.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, NoReturn

import redis

from .. import payload as P
from .. import scripts, stored
from ..connections.replies import raise_refusal, reply_code
from ..errors import IterationStateError

__all__ = ["FIELDS", "STATE_TTL", "IterationState", "cancel_script", "cancel_time",
           "flush_commands", "parse", "read_command"]

# Sidekiq's: the state outlives any sane pause between two executions.
STATE_TTL = 30 * 86400
EXECUTIONS, CURSOR, RUNTIME, CANCELLED = "ex", "c", "rt", "cancelled"
FIELDS = (EXECUTIONS, CURSOR, RUNTIME, CANCELLED)

cancel_script = scripts.Script("iteration_cancel.lua")


@dataclass(frozen=True)
class IterationState:
    """What ``it-<jid>`` says: read by the job itself, ``wurk.api`` and the dashboard."""

    jid: str
    executions: int = 0
    cursor: Any = None
    runtime: float = 0.0
    # When cancellation was asked for (epoch seconds); None when it was not, or when the
    # stored time cannot be read (``cancel_requested`` still says it was asked).
    cancelled_at: float | None = None
    cancel_requested: bool = False
    exists: bool = False

    @property
    def cancelled(self) -> bool:
        return self.cancel_requested


def read_command(key: str) -> tuple[str, ...]:
    """One ``HMGET`` of the four fields: bounded whatever else the hash holds."""
    return ("HMGET", key, *FIELDS)


def parse(jid: str, key: str, reply: Any, *, url: str) -> IterationState:
    """The state of ``jid`` in an ``HMGET`` reply of its ``key`` (``Keys.iteration``, under
    any ``key_prefix``) from the Redis at ``url``; ``IterationStateError`` naming the key and
    the field that cannot be read (a wrong-type key comes back as an error reply)."""
    if isinstance(reply, Exception):
        _refused(key, reply, url, "read as a hash")
    if not isinstance(reply, list) or len(reply) != len(FIELDS):
        raise IterationStateError(f"{key}: unexpected reply "
                                  f"{stored.shown(reply, stored.RAW_LIMIT)}")
    ex, cursor, runtime, cancelled = reply
    if ex is None and cursor is None and runtime is None and cancelled is None:
        return IterationState(jid)
    return IterationState(
        jid,
        executions=_executions(key, ex),
        cursor=_cursor(key, cursor),
        runtime=_runtime(key, runtime),
        cancelled_at=_cancelled_at(cancelled),
        cancel_requested=cancelled is not None,
        exists=True,
    )


def _executions(key: str, value: Any) -> int:
    if value is None:
        return 0
    number = stored.count(value)
    if isinstance(number, stored.Invalid):
        raise IterationStateError(f"{key}: field ex is {number.raw}, not a count of executions")
    return number


def _cursor(key: str, value: Any) -> Any:
    if value is None:
        return None
    try:
        return P.loads_json(value)
    except (ValueError, RecursionError):
        raise IterationStateError(f"{key}: field c is {stored.shown(value, stored.RAW_LIMIT)}, "
                         "not a JSON cursor") from None


def _runtime(key: str, value: Any) -> float:
    if value is None:
        return 0.0
    try:
        seconds = float(stored.text(value))
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise IterationStateError(f"{key}: field rt is {stored.shown(value, stored.RAW_LIMIT)}, "
                         "not seconds")
    return seconds


def _cancelled_at(value: Any) -> float | None:
    if value is None:
        return None
    try:  # Ruby writes ``Time.now.to_i``: whole seconds as text
        when = float(stored.text(value))
    except ValueError:
        return None
    return when if 0 <= when < stored.EPOCH_MAX else None


def cancel_time(key: str, reply: Any) -> float:
    """The epoch seconds a cancel stands from, in ``cancel_script``'s reply;
    ``IterationStateError`` naming the problem when nothing could be written (a key of
    another type) or the stored time cannot be read (the job counts it as cancelled)."""
    if isinstance(reply, list) and len(reply) == 1:
        raise IterationStateError(f"{key} is a {stored.text(reply[0])}, not an iterable "
                                  "job's state hash: the cancel mark was not written")
    stood = reply[1] if isinstance(reply, list) and len(reply) == 2 else None
    when = _cancelled_at(stood)
    if when is None:
        raise IterationStateError(f"{key}: field cancelled is "
                                  f"{stored.shown(stood, stored.RAW_LIMIT)}, not epoch seconds; "
                                  "the job counts it as cancelled all the same")
    return when


def encode_cursor(jid: str, cursor: Any) -> str:
    """The cursor as the ``c`` field holds it; a cursor JSON cannot hold is the job's error,
    named, before anything is written."""
    try:
        encoded = json.dumps(cursor, ensure_ascii=False, separators=(",", ":"),
                             allow_nan=False)
        _check_keys(cursor)  # after dumps, which refuses a cycle
        encoded.encode("utf-8")  # a lone surrogate: no UTF-8 (so no Redis) holds it
    except (TypeError, ValueError, RecursionError) as exc:
        raise TypeError(f"job {jid}: the cursor {stored.shown(repr(cursor), 200)} cannot be "
                        f"stored as JSON ({exc}); yield cursors made of str, int, float, "
                        "bool, None, lists and dicts with str keys") from None
    return encoded


def _check_keys(cursor: Any) -> None:
    """``TypeError`` for a dict key other than a str: ``json.dumps`` turns ``{1: "a"}`` into
    ``{"1": "a"}`` without a word, so the resumed job would meet a cursor it never yielded."""
    pending = [cursor]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise TypeError(f"the key {stored.shown(repr(key), 100)} is not a str; "
                                    "it would come back as text")
                pending.append(item)
        elif isinstance(value, (list, tuple)):
            pending.extend(value)


def flush_commands(key: str, executions: int, cursor: str, runtime: float
                   ) -> list[tuple[Any, ...]]:
    """Sidekiq's flush, one transaction; its last reply is ``[_, _, cancelled]``."""
    return [("MULTI",),
            ("HSET", key, EXECUTIONS, executions, CURSOR, cursor, RUNTIME, f"{runtime:.6f}"),
            ("EXPIRE", key, STATE_TTL, "NX"),
            ("HGET", key, CANCELLED),
            ("EXEC",)]


def cancelled_in(key: str, replies: list[Any], *, url: str) -> bool:
    """Whether a flush's replies (from the Redis at ``url``) say the job was cancelled; an
    error reply raises (point 5)."""
    for reply in replies:
        if isinstance(reply, Exception):
            _refused(key, reply, url, "written")
    result = replies[-1]
    if not isinstance(result, list) or len(result) != 3:
        raise IterationStateError(f"{key}: the flush was not applied ({result!r})")
    for reply in result:
        if isinstance(reply, Exception):
            _refused(key, reply, url, "written")
    return result[2] is not None


def _refused(key: str, reply: Exception, url: str, doing: str) -> NoReturn:
    """An error reply met reading or writing ``key``: ``IterationStateError`` for a key of
    another type; a refusal for now is ``RedisUnavailable``, any other reply raised as it
    came (point 5)."""
    if reply_code(reply) == "WRONGTYPE" or not isinstance(reply, redis.ResponseError):
        raise IterationStateError(f"{key} cannot be {doing}: {reply}")
    raise_refusal(reply, url)
