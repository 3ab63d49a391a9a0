"""A job's outcome in Redis: the record written when the job asks (``result_ttl``), and read.

1. ``Outcome``: what the last run of a job came to — ``succeeded`` with its JSON return value,
   ``failed`` with the error's class and message and whether a retry is due, or
   ``cancelled`` — and when that run started and ended. ``unwrap()`` is the value, or the
   error a waiter raises (``wurk.JobFailed``, ``wurk.JobCancelled``).
2. ``record``: one round trip — ``SET wurk:result:<jid> <json> EX <ttl>`` and ``PUBLISH
   wurk:result-ready:<jid> <json>`` (waiters hear the outcome itself; a record longer than
   ``ANNOUNCE_INLINE`` is announced by ``NOTICE`` alone and read by its waiters with a GET:
   a large message would overflow a subscriber's output buffer, and Redis would drop the
   connection), and for a batch's job ``ZADD wurk:batch-results:<bid>`` (the batch's index
   of the jids with a result). Each run overwrites the last: a retried job's result is its
   last run's. ``record_cancelled`` writes "cancelled" for a job removed before it ran (a
   no-op for one that keeps none); ``record_deleted`` the same, with ``deleted_from``, for
   jobs the API deleted (``wurk.JobDeleted`` to a waiter); ``record_gone`` writes such
   outcomes of many jobs already gone (deleted, killed through the API) in one round trip.
3. ``find`` / ``find_many`` / ``batch_outcomes`` read them back. What is stored is untrusted:
   a record that is not what ``record`` writes — not JSON, an unknown status, a field of the
   wrong type, a key of another Redis type — reads as an ``Invalid`` naming the problem,
   never an exception (``decode``).
4. ``ttl_of(payload)``: the job's ``result_ttl`` when it is a number of seconds wurk writes;
   a payload from elsewhere holding anything else keeps no result, with a warning.
5. A job run by ``wurk.testing`` (inline mode, a drain) keeps its outcome in this process's
   memory, never in Redis (``keep``): those modes write nothing there. A jid kept so, or any
   jid read under a testing mode that keeps or runs pushes here (fake, inline), is answered
   from memory (``kept_here``, ``kept``); ``forget_kept`` empties it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn

from .. import payload as P
from .. import stored
from ..client import writers
from ..config import Config
from ..connections.lending import redis as lent_redis
from ..errors import (
    InvalidPayload,
    JobCancelled,
    JobDeleted,
    JobFailed,
    RedisUnavailable,
    UnreadableResult,
    UnstorableResult,
)
from ..stored import Invalid

__all__ = ["ANNOUNCE_INLINE", "NOTICE", "STATUSES", "Outcome", "afind", "arecord",
           "astored_text", "batch_outcomes", "cancelled", "decode", "deleted", "failed", "find",
           "find_many", "forget_kept", "keep", "keeping", "kept", "kept_changed",
           "kept_here", "raise_unreadable", "record", "record_cancelled", "record_commands",
           "record_deleted", "record_gone", "stored_text", "succeeded", "ttl_of"]

log = logging.getLogger("wurk")

Status = Literal["succeeded", "failed", "cancelled"]
STATUSES: tuple[Status, ...] = ("succeeded", "failed", "cancelled")
# Jids one read asks for at most (an MGET of a page, a batch's index): a batch of a million
# jobs is read a page at a time by whoever wants them all.
READ_PAGE = 1_000
# A batch's results ``batch_outcomes`` returns at most unless asked for more.
BATCH_READ_CAP = stored.FIELD_CAP
# The longest record (characters) published on its channel as it is: a longer one is
# announced by ``NOTICE`` and read by its waiters. A pub/sub message is queued whole in the
# subscriber's output buffer, which Redis caps (``client-output-buffer-limit pubsub``, 32 MB
# hard, 8 MB for 60 s by default, often less): over it, Redis drops the connection and its
# waiters hear nothing. Results this small are the common case, kept at one round trip.
ANNOUNCE_INLINE = 8_192
# What announces a record too long to publish: "stored, read it" (a JSON object that is no
# outcome, so an older waiter, taking it for an unreadable announcement, reads the record too).
NOTICE = '{"stored":true}'


@dataclass(frozen=True)
class Outcome:
    """The stored outcome of a job's last run."""

    jid: str
    status: Status
    value: Any = None  # the JSON return value, when succeeded
    error_class: str | None = None  # when failed: ``ValueError``, ``billing.CardDeclined``…
    error_message: str | None = None
    retries_remain: bool = False  # when failed: a retry is due, so a later run may succeed
    backtrace: list[str] | None = None  # when failed and the job keeps backtraces
    job_class: str | None = None  # the job's name (the payload's ``class``)
    started_at: float | None = None  # epoch seconds; None for a job cancelled unrun
    finished_at: float | None = None
    deleted_from: str | None = None  # when cancelled by a deletion: "retry set", "queue x"…
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # fields of later versions

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    def unwrap(self) -> Any:
        """The return value; ``wurk.JobFailed`` for a failure, ``wurk.JobCancelled`` for a
        cancelled job."""
        if self.status == "succeeded":
            return self.value
        if self.status == "cancelled" and self.deleted_from is not None:
            raise JobDeleted(f"job {self.jid} was deleted from the {self.deleted_from}: no "
                             "result will come", jid=self.jid,
                             deleted_from=self.deleted_from)
        if self.status == "cancelled":
            raise JobCancelled(f"job {self.jid} was cancelled", jid=self.jid)
        raise JobFailed(self.jid, self.error_class or "", self.error_message or "",
                        retries_remain=self.retries_remain, backtrace=self.backtrace)

    def to_dict(self) -> dict[str, Any]:
        """The record as stored (and as ``--json`` / the dashboard's API show it)."""
        document: dict[str, Any] = {"status": self.status}
        if self.status == "succeeded":
            document["value"] = self.value
        elif self.status == "failed":
            document.update(error_class=self.error_class, error_message=self.error_message,
                            retries_remain=self.retries_remain)
            if self.backtrace is not None:
                document["backtrace"] = self.backtrace
        for name, value in (("class", self.job_class), ("started_at", self.started_at),
                            ("finished_at", self.finished_at),
                            ("deleted_from", self.deleted_from)):
            if value is not None:
                document[name] = value
        return {**self.extra, **document}


# -- the outcomes a run comes to ----------------------------------------------------------------
def _run(payload: P.Payload, started_at: float | None) -> dict[str, Any]:
    job_class = payload.get(P.CLASS)
    return {"job_class": job_class if isinstance(job_class, str) else None,
            "started_at": started_at, "finished_at": time.time()}


def succeeded(payload: P.Payload, value: Any, started_at: float) -> Outcome:
    """A run that returned ``value``; ``wurk.InvalidArguments`` when JSON cannot carry it
    (the recorder makes that the job's failure)."""
    P.check_value(value, f"the return value of job {payload.get(P.CLASS)!r}")
    return Outcome(jid=str(payload[P.JID]), status="succeeded", value=value,
                   **_run(payload, started_at))


def failed(payload: P.Payload, exc: BaseException, started_at: float | None, *,
           retries_remain: bool, backtrace: list[str] | None) -> Outcome:
    return Outcome(jid=str(payload[P.JID]), status="failed",
                   error_class=P.error_class_name(exc), error_message=P.error_message(exc),
                   retries_remain=retries_remain, backtrace=backtrace,
                   **_run(payload, started_at))


def cancelled(payload: P.Payload, started_at: float | None) -> Outcome:
    return Outcome(jid=str(payload[P.JID]), status="cancelled", **_run(payload, started_at))


def deleted(payload: P.Payload, where: str) -> Outcome:
    """A job deleted from ``where`` before it ran: "cancelled", saying where from."""
    return Outcome(jid=str(payload[P.JID]), status="cancelled", deleted_from=where,
                   **_run(payload, None))


# -- writing ------------------------------------------------------------------------------------
def ttl_of(payload: P.Payload) -> int | None:
    """The seconds ``payload``'s result is kept, or None: no ``result_ttl``, or one wurk
    never writes (a payload from elsewhere: warned, and no result is kept)."""
    value = payload.get(P.RESULT_TTL)
    if value is None:
        return None
    if type(value) is int and 0 < value < P.ABSOLUTE_EPOCH_FLOOR:
        jid = payload.get(P.JID)
        return value if isinstance(jid, str) and jid else None
    log.warning("job %s: result_ttl=%.80r is not a whole number of seconds from 1 to %d; "
                "its result is not kept", payload.get(P.JID), value,
                P.ABSOLUTE_EPOCH_FLOOR - 1)
    return None


def stored_text(config: Config, outcome: Outcome) -> str:
    """The record of ``outcome`` as stored; ``wurk.UnstorableResult`` when it is larger than
    ``config``'s server takes in one value (sent, it would cut the connection: the run
    would fail as if Redis were down)."""
    text = P.dumps(outcome.to_dict())
    _refuse_oversize(outcome, writers.oversize(config, text))
    return text


async def astored_text(config: Config, outcome: Outcome) -> str:
    """``stored_text`` for async code (the server's limit, if asked, asked on the loop's
    pool)."""
    text = P.dumps(outcome.to_dict())
    _refuse_oversize(outcome, await writers.aoversize(config, text))
    return text


def _refuse_oversize(outcome: Outcome, over: tuple[int, int] | None) -> None:
    if over is not None:
        size, limit = over
        raise UnstorableResult(
            f"the result of job {outcome.job_class} (jid {outcome.jid}) is {size:,} bytes of "
            f"JSON, over the {limit:,} bytes the Redis server takes in one value (its "
            "proto-max-bulk-len): it was not stored. Return a reference to the data (a key, "
            "a URL, a row id) rather than the data")


def record_commands(config: Config, payload: P.Payload, outcome: Outcome, ttl: int,
                    text: str | None = None) -> list[tuple[Any, ...]]:
    """The commands that store ``outcome`` (``text``: its record, when ``stored_text``
    made it already): the record, its announcement, a batch's index."""
    keys, jid = config.keys, outcome.jid
    if text is None:
        text = stored_text(config, outcome)
    announced = text if len(text) <= ANNOUNCE_INLINE else NOTICE
    commands: list[tuple[Any, ...]] = [("SET", keys.result(jid), text, "EX", ttl),
                                       ("PUBLISH", keys.result_channel(jid), announced)]
    bid = payload.get(P.BID)
    if isinstance(bid, str) and bid:
        index = keys.batch_results(bid)
        # The index lives as long as its longest-kept result: NX sets a first expiry, GT
        # only lengthens it.
        commands += [("ZADD", index, P.score(outcome.finished_at or time.time()), jid),
                     ("EXPIRE", index, ttl, "NX"), ("EXPIRE", index, ttl, "GT")]
    return commands


def _checked(replies: list[Any], outcome: Outcome) -> None:
    """The record and its announcement must have been taken (else the run is not done: it
    fails and runs again); a batch index that refused (a key of another type) is logged."""
    for reply in replies[:2]:
        if isinstance(reply, Exception):
            raise RedisUnavailable(f"the result of job {outcome.jid} could not be stored: "
                                   f"{reply}")
    for reply in replies[2:]:
        if isinstance(reply, Exception):
            log.warning("job %s: its batch's result index could not be written: %s",
                        outcome.jid, reply)


def record(config: Config, payload: P.Payload, outcome: Outcome, ttl: int,
           text: str | None = None) -> None:
    """Store ``outcome`` for ``ttl`` seconds and announce it, in one round trip (on the
    processor's own connection in a worker); ``text`` is its record when ``stored_text``
    made it already."""
    commands = record_commands(config, payload, outcome, ttl, text)
    with lent_redis(config) as conn:
        _checked(conn.pipeline(commands), outcome)


async def arecord(config: Config, payload: P.Payload, outcome: Outcome, ttl: int,
                  text: str | None = None) -> None:
    """``record`` on the running loop (an async job's)."""
    if text is None:
        text = await astored_text(config, outcome)
    commands = record_commands(config, payload, outcome, ttl, text)
    async with lent_redis(config) as conn:
        _checked(await conn.pipeline(commands), outcome)


def record_cancelled(config: Config, payload: P.Payload) -> None:
    """A job removed before it ran (``wurk.cancel`` took it from its queue, the schedule or
    the retry set): its result says "cancelled"; nothing when it keeps no result."""
    ttl = ttl_of(payload)
    if ttl is not None:
        record(config, payload, cancelled(payload, None), ttl)


def record_deleted(config: Config, raws: Iterable[bytes | str], where: str) -> int:
    """Jobs the API deleted (their stored payloads) from ``where`` (``queue default``,
    ``scheduled set``, ``retry set``): each that keeps its result has it say "cancelled",
    ``deleted_from`` ``where``, and its waiters told, in one round trip for all; returns how
    many. The jobs are gone already: a failed write is logged, never raised (their waiters
    then wait out their timeouts, as before). What is no job payload is skipped."""
    found: list[tuple[P.Payload, Outcome, int]] = []
    for payload in keeping(raws):
        ttl = ttl_of(payload)
        if ttl is not None:
            found.append((payload, deleted(payload, where), ttl))
    return record_gone(config, found, "deleted jobs")


def keeping(raws: Iterable[bytes | str]) -> list[P.Payload]:
    """The payloads among ``raws`` (stored entries, untrusted) that name a ``result_ttl``;
    what is no job payload is skipped."""
    found: list[P.Payload] = []
    for raw in raws:
        if f'"{P.RESULT_TTL}"' not in stored.text(raw):
            continue  # the cheap test first: most jobs keep no result
        try:
            payload = P.loads(raw)
        except InvalidPayload:
            continue
        if isinstance(payload, dict) and P.RESULT_TTL in payload:
            found.append(payload)
    return found


def record_gone(config: Config, outcomes: Iterable[tuple[P.Payload, Outcome, int]],
                what: str) -> int:
    """Store each ``(payload, outcome, ttl)`` and announce it, in one round trip for all;
    returns how many were sent. For jobs already gone (``what``: "deleted jobs", "killed
    jobs"), so nothing is raised: an outcome that cannot be stored is skipped and a failed
    write logged (their waiters then wait out their timeouts, as before)."""
    commands: list[tuple[Any, ...]] = []
    sent = 0
    for payload, outcome, ttl in outcomes:
        try:
            commands += record_commands(config, payload, outcome, ttl)
        except Exception as exc:  # too large for the server, or its limit unreadable
            log.warning("job %s: its result could not be recorded: %s", outcome.jid, exc)
            continue
        sent += 1
    if not commands:
        return 0
    try:
        with lent_redis(config) as conn:
            replies = conn.pipeline(commands)
    except Exception as exc:
        log.warning("could not record the results of %s: %s", what, exc)
        return 0
    failures = [reply for reply in replies if isinstance(reply, Exception)]
    if failures:
        log.warning("could not record the results of %s: %s", what, failures[0])
    return sent


# -- kept in memory (wurk.testing) --------------------------------------------------------------
_kept: dict[str, Outcome] = {}  # jid -> the outcome of a job a testing mode ran
kept_changed = threading.Condition()  # notified at each ``keep``


def keep(outcome: Outcome) -> None:
    """Keep the outcome of a job ``wurk.testing`` ran, in this process's memory."""
    with kept_changed:
        _kept[outcome.jid] = outcome
        kept_changed.notify_all()


def kept(jid: str) -> Outcome | None:
    with kept_changed:
        return _kept.get(jid)


def kept_here(jid: str) -> bool:
    """Whether ``jid``'s outcome is read from memory: it was kept there, or this thread is
    under a testing mode that keeps or runs pushes here (whose jobs write no Redis)."""
    with kept_changed:
        if jid in _kept:
            return True
    return isinstance(writers.beneath(), writers.KeepingWriter)


def forget_kept() -> None:
    """Forget every outcome kept in memory (``wurk.testing.clear_all()``)."""
    with kept_changed:
        _kept.clear()


# -- reading ------------------------------------------------------------------------------------
def _problem(found: dict[str, Any]) -> str | None:
    """What makes a stored record not one ``record`` writes, or None."""
    status = found.get("status")
    if status not in STATUSES:
        return f"status {status!r} is none of {', '.join(STATUSES)}"
    if status == "failed":
        for name in ("error_class", "error_message"):
            if not isinstance(found.get(name), str):
                return f"{name} is not text"
        if not isinstance(found.get("retries_remain"), bool):
            return "retries_remain is not true or false"
        backtrace = found.get("backtrace")
        if backtrace is not None and not (isinstance(backtrace, list) and all(
                isinstance(line, str) for line in backtrace)):
            return "backtrace is not a list of lines"
    if status == "succeeded" and "value" not in found:
        return "a success without a value"
    if found.get("class") is not None and not isinstance(found.get("class"), str):
        return "class is not text"
    for name in ("started_at", "finished_at"):
        value = found.get(name)
        if value is not None and not _is_time(value):
            return f"{name} is not a time"
    where = found.get("deleted_from")
    if where is not None and (status != "cancelled" or not isinstance(where, str)
                              or not where):
        return "deleted_from is not where a cancelled job was deleted from (text)"
    return None


def _is_time(value: Any) -> bool:
    """A finite number of epoch seconds (an integer past a float's range is none: it would
    raise ``OverflowError`` where it is read)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


_KNOWN = {"status", "value", "error_class", "error_message", "retries_remain", "backtrace",
          "class", "started_at", "finished_at", "deleted_from"}


def decode(jid: str, raw: Any) -> Outcome | Invalid | None:
    """The outcome stored (or announced) for ``jid``: None when there is none, ``Invalid``
    naming what is wrong with one that cannot be read."""
    if raw is None:
        return None
    if isinstance(raw, Invalid):
        return raw
    if isinstance(raw, Exception):  # an error reply: a key of another Redis type
        found_error: Invalid = stored.checked(raw, "a stored result")
        return found_error
    found = stored.json_object(raw)
    if found is None:
        return None
    if isinstance(found, Invalid):
        return stored.invalid(raw, "a stored result (a JSON object)")
    problem = _problem(found)
    if problem is not None:
        return stored.invalid(raw, f"a stored result ({problem})")
    return Outcome(
        jid=jid, status=found["status"], value=found.get("value"),
        error_class=found.get("error_class"), error_message=found.get("error_message"),
        retries_remain=bool(found.get("retries_remain", False)),
        backtrace=found.get("backtrace"), job_class=found.get("class"),
        started_at=_time(found.get("started_at")), finished_at=_time(found.get("finished_at")),
        deleted_from=found.get("deleted_from"),
        extra={k: v for k, v in found.items() if k not in _KNOWN})


def _time(value: Any) -> float | None:
    return None if value is None else float(value)


def raise_unreadable(jid: str, found: Invalid) -> NoReturn:
    """``wurk.UnreadableResult`` for a stored record ``decode`` could not read."""
    raise UnreadableResult(f"the result stored for job {jid} cannot be read: expected "
                           f"{found.expected}, found {found.raw}")


def _reads(config: Config, jids: list[str]) -> list[Any]:
    """The stored records of ``jids``, one GET each in one round trip (a GET, unlike an
    MGET, answers a key of another type with an error in its own place)."""
    keys = config.keys

    def read(r: Any) -> list[Any]:
        pipe = r.pipeline(transaction=False)
        for jid in jids:
            pipe.get(keys.result(jid))
        return list(pipe.execute(raise_on_error=False))

    return list(config.pool("api").run(read, idempotent=True))


def find(config: Config, jid: str) -> Outcome | Invalid | None:
    """The outcome stored for ``jid``: None when it keeps none (no ``result_ttl``, not
    finished, or expired), ``Invalid`` when the record cannot be read."""
    if not isinstance(jid, str) or not jid:
        raise ValueError(f"a jid is a non-empty string, not {jid!r}")
    if kept_here(jid):
        return kept(jid)
    return decode(jid, _reads(config, [jid])[0])


async def afind(config: Config, jid: str) -> Outcome | Invalid | None:
    """``find`` on the running loop's connections."""
    if not isinstance(jid, str) or not jid:
        raise ValueError(f"a jid is a non-empty string, not {jid!r}")
    if kept_here(jid):
        return kept(jid)
    key = config.keys.result(jid)
    async with lent_redis(config) as conn:
        replies = await conn.pipeline([("GET", key)])  # an error reply comes back in place
    return decode(jid, replies[0])


def find_many(config: Config, jids: Iterable[Any]) -> dict[str, Outcome | Invalid]:
    """The outcomes stored for those of ``jids`` that have one, a page a round trip."""
    wanted = list(dict.fromkeys(j for j in jids if isinstance(j, str) and j))
    found: dict[str, Outcome | Invalid] = {}
    for start in range(0, len(wanted), READ_PAGE):
        page = wanted[start:start + READ_PAGE]
        for jid, raw in zip(page, _reads(config, page), strict=True):
            outcome = decode(jid, raw)
            if outcome is not None:
                found[jid] = outcome
    return found


def batch_outcomes(config: Config, bid: str, *, limit: int = BATCH_READ_CAP
                   ) -> dict[str, Outcome | Invalid]:
    """The stored outcomes of batch ``bid``'s jobs, in the order they finished (at most
    ``limit``; a job whose result expired is not among them)."""
    key = config.keys.batch_results(bid)
    # The reading client takes an index of another Redis type as an empty one.
    listed = config.pool("api").run(lambda r: r.zrange(key, 0, max(limit, 1) - 1),
                                    idempotent=True)
    return find_many(config, (stored.text(jid) for jid in listed))
