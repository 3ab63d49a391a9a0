"""Where ``django.tasks`` results live: one JSON record per task in Redis, with a TTL.

1. ``ResultStore.save`` / ``load`` / ``update`` read and write the record at
   ``wurk:task-result:<id>`` (the id is the job's jid); each write renews the TTL. A
   backend naming a shard keeps its records on that shard, where its jobs go.
2. A record read back is untrusted: one that is not a JSON object, or lacks its task path,
   is reported as missing (``load`` returns None) and logged, never an exception in a view.
3. Under a testing mode that keeps or runs pushes in this process (``wurk.testing``'s fake
   and inline), records are kept in this process's memory, not in Redis: those modes never
   talk to Redis (docs/testing.md). ``in_memory()`` says which.
4. ``mark_dead`` is a death handler: a task whose retries ran out (or that had none) is
   recorded ``FAILED``; until then a failed attempt leaves it ``READY`` for the retry. The
   payload names the task (its ``class``) and the backend it was enqueued through (else the
   task's own), and so the store (the shard) its record lives in; a payload of no task known
   here, the default shard's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import ResponseError, WatchError

from ... import payload as P
from ... import stored
from ...client import writers
from ...config import Config, default_config
from ...errors import UnparseablePayload

__all__ = ["DEFAULT_RESULT_TTL", "ResultStore", "in_memory", "mark_dead"]

log = logging.getLogger("wurk")

# A result is kept a day after its last change: long enough to be read back, short enough
# that Redis does not fill with the results of every task ever run.
DEFAULT_RESULT_TTL = 24 * 60 * 60
READY, RUNNING, FAILED, SUCCESSFUL = "READY", "RUNNING", "FAILED", "SUCCESSFUL"

Record = dict[str, Any]

# Records written under a testing mode (fake, inline): key → the JSON Redis would hold.
_kept: dict[str, str] = {}
_kept_lock = threading.Lock()
_updating = threading.Lock()  # ``update`` of kept records: one at a time
# Reads and writes of one update, tried again when another wrote the record between them.
UPDATE_TRIES = 10
# A task's job → the store of the backend it was enqueued through (its payload names it), or
# None for no task known here: set by ``wurk.contrib.django.tasks``'s backend when one is
# made (this module does not need django.tasks).
store_of: Callable[[dict[str, Any]], ResultStore | None] | None = None


def in_memory() -> bool:
    """Whether a testing mode keeps this thread's pushes (and so the task records) here."""
    return isinstance(writers.beneath(), writers.KeepingWriter)


class ResultStore:
    """``shard``: the shard (of ``shards``) a backend's tasks are pushed to (its
    ``OPTIONS['SHARD']``): its records live there, beside the jobs and their outcomes."""

    def __init__(self, config: Config | None = None, *, ttl: int = DEFAULT_RESULT_TTL,
                 shard: str | None = None) -> None:
        self._config = config
        self.ttl = ttl
        self.shard = shard

    @property
    def config(self) -> Config:
        config = self._config if self._config is not None else default_config()
        return config if self.shard is None else config.shard(self.shard)

    def save(self, result_id: str, record: Record, *, only_new: bool = False) -> None:
        """Write the record; ``only_new``: unless one is there (the job's own, written
        when it started)."""
        ttl = record.get("ttl") if isinstance(record.get("ttl"), int) else self.ttl
        key, value = self.config.keys.task_result(result_id), P.dumps(record)
        if in_memory():
            with _kept_lock:
                if not (only_new and key in _kept):
                    _kept[key] = value
            return
        self.config.pool("client").run(lambda redis: redis.set(key, value, ex=ttl,
                                                               nx=only_new))

    def load(self, result_id: str) -> Record | None:
        key = self.config.keys.task_result(result_id)
        # The reading pool: a key of another Redis type reads as absent, with a warning.
        if in_memory():
            with _kept_lock:
                raw: Any = _kept.get(key)
        else:
            raw = self.config.pool("api").run(lambda redis: redis.get(key))
        return self._parsed(result_id, raw)

    def _parsed(self, result_id: str, raw: Any) -> Record | None:
        """A stored record as ``load`` reads it: None when absent or unreadable."""
        if raw is None:
            return None
        try:
            record = P.loads(raw)
        except UnparseablePayload as exc:
            log.warning("task result %s is unreadable: %s", result_id, exc)
            return None
        if not isinstance(record.get("task"), str):
            log.warning("task result %s names no task; ignoring it", result_id)
            return None
        wrong = [name for name, kind in _SHAPES.items()
                 if name in record and record[name] is not None
                 and not _fits(record[name], kind)]
        if wrong:
            log.warning("task result %s: %s not of its type; read as absent", result_id,
                        ", ".join(wrong))
            for name in wrong:
                del record[name]
        return record

    def update(self, result_id: str, change: Callable[[Record], None]) -> Record | None:
        """Read, change and write back, as one step: a write by another (a death handler,
        a second run of the task after a recovery) between the read and the write makes
        the change run again on what that one wrote (``WATCH``), never overwrites it."""
        if in_memory():
            with _updating:
                record = self.load(result_id)
                if record is not None:
                    change(record)
                    self.save(result_id, record)
                return record
        key = self.config.keys.task_result(result_id)

        def attempt(redis: Any) -> Record | None:
            with redis.pipeline(transaction=True) as pipe:
                for _ in range(UPDATE_TRIES):
                    try:
                        pipe.watch(key)
                        try:
                            raw = pipe.get(key)
                        except ResponseError as exc:  # another type: no record, as ``load``
                            if str(exc).startswith("WRONGTYPE"):
                                return None
                            raise
                        record = self._parsed(result_id, raw)
                        if record is None:
                            return None
                        change(record)
                        ttl = record.get("ttl") if isinstance(record.get("ttl"), int) \
                            else self.ttl
                        pipe.multi()
                        pipe.set(key, P.dumps(record), ex=ttl)
                        pipe.execute()
                        return record
                    except WatchError:
                        continue  # written meanwhile: read it again
            raise WatchError(f"task result {result_id} changed under each of "
                             f"{UPDATE_TRIES} tries to update it")

        result: Record | None = self.config.pool("client").run(attempt)
        return result


# A record's fields a reader or a worker relies on, and their types: a field of another
# shape (written by hand or by something else) is read as absent, not a failure of every
# attempt of the task (``worker_ids.append``) or a view's 500 (a time no date holds).
_SHAPES: dict[str, type | tuple[type, ...]] = {
    "worker_ids": list, "errors": list, "args": list, "kwargs": dict, "ttl": int,
    "enqueued_at": float, "started_at": float, "finished_at": float,
    "last_attempted_at": float,
}
# Seconds a record is kept at most (Redis refuses an expiry past its range).
_MAX_TTL = 10 ** 9


def _fits(value: Any, kind: type | tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return False
    if kind is float:  # a time: seconds since the epoch that a date holds
        return isinstance(value, (int, float)) and 0 <= value < stored.EPOCH_MAX
    if kind is int:
        return isinstance(value, int) and 1 <= value <= _MAX_TTL
    return isinstance(value, kind)


def now() -> float:
    return time.time()


def mark_dead(payload: dict[str, Any], exc: BaseException) -> None:
    """Death handler: the task will not run again, so its result is final."""
    jid = payload.get(P.JID)
    if not isinstance(jid, str) or not jid:
        return
    def failed(record: Record) -> None:
        record["status"] = FAILED
        record["finished_at"] = now()

    try:
        found = store_of(payload) if store_of is not None else None
        store = found if found is not None else ResultStore()
        store.update(jid, failed)
    except Exception as error:  # a death handler must not break the death it reports
        log.warning("could not record task %s as failed: %s", jid, error)
