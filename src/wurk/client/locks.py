"""The unique lock a push takes, and the script that pushes a job with it.

1. ``job_digest``: the lock's name — base64url(sha256(JSON ``[class, queue, args]``)), or of
   the list a job's ``unique_context`` hook returns (``use_context``, recorded by the job
   registry, so this module needs no import of it). Stored in the payload
   (``unique_digest``), so any process can release the lock.
2. ``lock_for``: the lock and its lifetime (``unique_for``, plus the delay of a scheduled
   job). The push scripts add that delay themselves, on Redis's clock (``lock_ttl`` in
   ``scripts/owned.lua``), the one the scheduler finds a job due by: they are given
   ``unique_for`` alone.
3. ``push`` / ``apush``: the Redis writer's route for unique jobs — each job pushed with its
   lock by ``scripts/unique_push.lua``, so a job is never pushed without its lock nor its
   lock taken without the job; the jids refused as duplicates come back.

The unique-jobs feature (``wurk.unique``: the option, releasing, ``locked``) builds on this;
the client reaches it only through its Redis writer (``wurk.client.writers``).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from redis import exceptions as redis_errors

from .. import payload as P
from .. import scripts, stored
from ..errors import InvalidPayload

if TYPE_CHECKING:
    import redis

    from ..keys import Keys

__all__ = ["ContextHook", "Locked", "apush", "apush_each", "coming_back", "digest",
           "job_digest", "lock_for", "push", "push_calls", "push_each", "refused", "stamp",
           "use_context"]

log = logging.getLogger("wurk")

_PUSH = scripts.Script("unique_push.lua", prelude=("owned.lua",))


# -- the lock's name --------------------------------------------------------------------------
def digest(parts: Sequence[Any]) -> str:
    """base64url (no padding) of SHA-256 of the compact JSON of ``parts``."""
    raw = hashlib.sha256(P.dumps(list(parts)).encode("utf-8")).digest()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


ContextHook = Callable[[P.Payload], Any]
# Job name → its ``unique_context`` hook. The job registry keeps it (``use_context``) so this
# module needs no import of the registry, which builds on the client.
_contexts: dict[str, ContextHook] = {}


def use_context(name: str, hook: ContextHook | None) -> None:
    """Record the ``unique_context`` hook of the job named ``name`` (None forgets it)."""
    if hook is None:
        _contexts.pop(name, None)
    else:
        _contexts[name] = hook


def job_digest(job: P.Payload) -> str:
    """The digest naming ``job``'s lock: of its ``unique_context`` when its job defines one,
    else of its class, queue and args."""
    hook = _contexts.get(str(job.get(P.CLASS)))
    context = hook(job) if hook is not None else None
    if context is None:
        return digest([job.get(P.CLASS), job.get(P.QUEUE), job.get(P.ARGS)])
    if not isinstance(context, (list, tuple)):
        raise InvalidPayload(f"{job.get(P.CLASS)}.unique_context must return a list, not "
                             f"{type(context).__name__}", field=P.UNIQUE_FOR)
    return digest(context)


# -- pushing ----------------------------------------------------------------------------------
# The jid of a job pushed again by wurk itself — a retry or a scheduled job come due (the
# scheduler's client mode), an interrupted iterable job — while such a push is made here.
_coming_back: ContextVar[str | None] = ContextVar("wurk_unique_coming_back", default=None)


@contextmanager
def coming_back(jid: str) -> Iterator[None]:
    """Pushes made inside this block of the job ``jid`` are that job coming back, accepted
    long ago: no lock refuses it — not its own, nor a later push's (taken once its own was
    released at its start, or expired), which it leaves alone. Refusing it as a duplicate
    would drop a job that was never run to its end (the atomic scheduler moves it as is)."""
    token = _coming_back.set(jid)
    try:
        yield
    finally:
        _coming_back.reset(token)


# A unique job to push: its payload, when it runs (None: now), and its JSON — made once by
# the writer, after ``stamp``, and both checked for size and pushed.
Locked = tuple[P.Payload, float | None, str]


def stamp(job: P.Payload) -> None:
    """Store the job's digest in its payload unless it has one: its JSON is made after."""
    if not isinstance(job.get(P.UNIQUE_DIGEST), str) or not job[P.UNIQUE_DIGEST]:
        job[P.UNIQUE_DIGEST] = job_digest(job)


def lock_for(keys: Keys, job: P.Payload, at: float | None, now: float) -> tuple[str, int]:
    """The lock a unique job's push takes, and its lifetime in ms (``unique_for`` plus the
    delay of a scheduled job); stores the digest in the payload."""
    stamp(job)
    delay = max(0.0, at - now) if at is not None else 0.0
    ttl_ms = max(1, math.ceil((float(job[P.UNIQUE_FOR]) + delay) * 1000))
    return keys.unique(job[P.UNIQUE_DIGEST]), ttl_ms


def push(r: redis.Redis, keys: Keys, entries: Sequence[Locked]) -> set[str]:
    """Push unique jobs, each with its lock; returns the jids refused as duplicates."""
    return refused(_jobs(entries), _PUSH.call_many(r, push_calls(keys, entries)))


async def apush(r: Any, keys: Keys, entries: Sequence[Locked]) -> set[str]:
    """``push`` on redis-py's asyncio client: the same script calls."""
    return refused(_jobs(entries), await _PUSH.acall_many(r, push_calls(keys, entries)))


def push_each(r: redis.Redis, keys: Keys, entries: Sequence[Locked]) -> set[str]:
    """``push`` one script call at a time on ``r`` (a client of one connection, whose WAIT
    then covers them: a pipeline would take a connection of its own)."""
    caller = _Calls(r)
    return refused(_jobs(entries), [_PUSH.call(caller, lock_keys, args)
                             for lock_keys, args in push_calls(keys, entries)])


async def apush_each(r: Any, keys: Keys, entries: Sequence[Locked]) -> set[str]:
    """``push_each`` on redis-py's asyncio client."""
    replies = []
    for lock_keys, args in push_calls(keys, entries):
        try:
            replies.append(await r.execute_command(*_PUSH.evalsha(lock_keys, args)))
        except redis_errors.NoScriptError:  # nothing ran: safe to send again
            await r.execute_command(*_PUSH.load())
            replies.append(await r.execute_command(*_PUSH.evalsha(lock_keys, args)))
    return refused(_jobs(entries), replies)


class _Calls:
    """A redis-py client seen as a connection with ``call`` (``Script.call``'s caller)."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client

    def call(self, *args: Any) -> Any:
        return self._client.execute_command(*args)  # type: ignore[no-untyped-call]


def push_calls(keys: Keys, entries: Sequence[Locked]) -> list[tuple[list[str], list[object]]]:
    """The push script's keys and arguments, one call per job."""
    now = time.time()
    back = _coming_back.get()
    calls: list[tuple[list[str], list[object]]] = []
    for job, at, raw in entries:
        # unique_for alone: the script adds a scheduled job's wait on Redis's clock
        lock, ttl_ms = lock_for(keys, job, None, now)
        again = "1" if back is not None and job.get(P.JID) == back else ""
        if at is None:
            calls.append(([lock, keys.queues, keys.queue(job[P.QUEUE])],
                          [job[P.JID], ttl_ms, raw, job[P.QUEUE], "", again]))
        else:
            calls.append(([lock, keys.queues, keys.schedule],
                          [job[P.JID], ttl_ms, raw, "", P.score(at), again]))
    return calls


def _jobs(entries: Sequence[Locked]) -> list[P.Payload]:
    return [job for job, _, _ in entries]


def refused(jobs: Sequence[P.Payload], replies: Sequence[Any]) -> set[str]:
    """The jids the push script refused as duplicates (its reply: the holder's jid)."""
    duplicates: set[str] = set()
    for job, reply in zip(jobs, replies, strict=True):
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, (list, tuple)):  # a lock of another type, replaced
            lock, kind = (stored.shown(part, 200) for part in (*reply, "?", "?")[:2])
            log.warning("unique job %s (jid %s): its lock %s was a %s, not a jid (written "
                        "by something else); replaced by this push's lock",
                        job.get(P.CLASS), job.get(P.JID), lock, kind)
        elif reply is not None:
            holder = stored.text(reply)
            log.info("duplicate of unique job %s (jid %s) not pushed: jid %s holds its lock",
                     job.get(P.CLASS), job.get(P.JID), holder)
            duplicates.add(str(job[P.JID]))
    return duplicates


