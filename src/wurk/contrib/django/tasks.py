"""A ``django.tasks`` backend on wurk: ``@task`` + ``.enqueue()`` run in a wurk worker.

``TASKS = {"default": {"BACKEND": "wurk.contrib.django.tasks.WurkBackend",
"QUEUES": ["default"], "OPTIONS": {"RETRY": 5, "RESULT_TTL": 86400}}}``

1. Django 6's ``django.tasks``, or the ``django_tasks`` backport with the same API.
2. A task is a wurk job named by its module path (the payload's ``class``), registered
   when its ``@task`` decorator runs (``task.using(...)`` makes a variant that replaces
   neither the task nor its job's options): the worker loads each app's ``tasks.py``, and never
   imports what a payload names. The job names the backend it was enqueued through
   (``wurk_task_backend``, its alias): ``task.using(backend="other")`` pushes with that
   backend's ``OPTIONS`` (its ``SHARD``), and the worker, the death handler and
   ``get_result`` keep the task's record on that backend's shard, beside the job; a result
   read carries the task as it was enqueued (its backend, its queue). Its args travel as
   ``[args, kwargs]``; ``run_after`` schedules it; ``queue_name`` is its queue, one a
   worker can be given (checked for ``QUEUES`` at startup, for any other at ``@task`` and
   enqueue). ``OPTIONS`` other than
   ``RESULT_TTL`` are wurk job options (``TASK_OPTIONS``: ``RETRY``, ``DEAD``, ``TAGS``…);
   another key is an error at startup.
3. The result id is the jid. A task keeps its result as any wurk job does: the job carries
   ``result_ttl`` (``RESULT_TTL``, a day by default), so the worker stores the outcome in
   ``wurk.results``' store (``wurk:result:<jid>``: the return value, JSON-normalised, or
   the final error) and ``wurk.ResultHandle(result.id).result(timeout=...)`` waits for it
   from any process, woken by Redis. Beside it, the task's own record
   (``wurk.contrib.django.results``) keeps what ``django.tasks`` shows and wurk's outcome
   does not: ``READY`` → ``RUNNING`` → ``SUCCESSFUL`` or, after a failed attempt, ``READY``
   again with the error's traceback while a retry is due, ``FAILED`` once none is (death
   handler); ``READY`` again, with no error, when the worker's shutdown gives the job back
   to its queue; the times, the worker ids, the arguments. ``get_result`` / ``refresh()`` read
   both: the return value, and a final status the record has not caught up with, come from
   the outcome.
4. Inside ``atomic()`` the push is a row of the outbox table (``client="outbox"``, this
   app's default), relayed after the commit, and the record is written at the commit; with
   ``client="transactional"`` both wait for the commit in memory.
5. ``task_enqueued`` / ``task_started`` / ``task_finished`` are sent as Django's own
   backends send them.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import socket
import traceback
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from django.conf import settings

from ... import payload as P
from ...client import writers
from ...client.default import default_client
from ...config import default_config
from ...errors import ConfigError, Unretryable, is_shutdown
from ...job import JobDefinition, current_job, registry, validate_options
from ...options import SHARD, parse_queue
from ...results import store as outcomes
from . import results as R

try:  # Django 6
    from django.tasks import exceptions as task_exceptions
    from django.tasks import task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.tasks.utils import normalize_json
except ImportError:  # the backport, for Django < 6
    from django_tasks import exceptions as task_exceptions
    from django_tasks import task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

__all__ = ["WurkBackend", "WurkTask"]

log = logging.getLogger("wurk")

# Django 6.0 names a success SUCCESSFUL, later versions SUCCEEDED.
_SUCCESS = getattr(TaskResultStatus, "SUCCESSFUL", None) or TaskResultStatus.SUCCEEDED
# Django 6 names a task it refuses InvalidTask, the backport InvalidTaskError.
InvalidTask: type[Exception] = getattr(task_exceptions, "InvalidTask", None) or \
    task_exceptions.InvalidTaskError
_STATUSES = {R.READY: TaskResultStatus.READY, R.RUNNING: TaskResultStatus.RUNNING,
             R.FAILED: TaskResultStatus.FAILED, R.SUCCESSFUL: _SUCCESS}
_RESULT_FIELDS = {f.name for f in dataclasses.fields(TaskResult) if f.init}
# The wurk job options a backend's OPTIONS may give its tasks (RESULT_TTL aside): another key
# is a typo (RETRIES) or one the backend sets itself (QUEUE, JID…), refused at startup.
TASK_OPTIONS = (P.RETRY, P.RETRY_FOR, P.RETRY_QUEUE, P.DEAD, P.BACKTRACE, P.TAGS,
                P.LOG_LEVEL, P.TIMEOUT, P.ENCRYPT, P.EXPIRES_IN, P.UNIQUE_FOR,
                P.UNIQUE_UNTIL, P.PARTITION, P.PROFILE, P.PROFILER_OPTIONS, SHARD)
_tasks: dict[str, Task[Any, Any]] = {}  # module path → the task, as its @task made it


def _store_of(job: Mapping[str, Any]) -> R.ResultStore | None:
    """The store of the records of a task's job (the shard of the backend it was enqueued
    through), for the death handler; None for a job of no task known here."""
    path = job.get(P.CLASS)
    task = _tasks.get(path) if isinstance(path, str) else None
    return _backend_of(task, job).store if task is not None else None


def _backend_of(task: Task[Any, Any], job: Mapping[str, Any]) -> WurkBackend:
    """The backend a task's job was enqueued through: the one its payload names (read from
    Redis, so checked), or the task's own for a job pushed before jobs named one."""
    alias = job.get(P.TASK_BACKEND)
    if alias is None:
        backend = task.get_backend()
    else:
        # ``in settings`` first: the handler looks an alias up as an attribute (``__class__``)
        backend = task_backends[alias] if isinstance(alias, str) and \
            alias in task_backends.settings else None
    if not isinstance(backend, WurkBackend):
        named = f"the django.tasks backend {alias!r}" if alias is not None else \
            f"its task's backend {task.backend!r}"
        raise Unretryable(f"task {task.module_path}: its job names {named}, not one of "
                          "TASKS' WurkBackends")
    return backend


class WurkTask(Task):
    """A ``Task`` that registers itself as a wurk job when it is made."""

    __slots__ = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        made = _tasks.get(self.module_path)
        if made is not None and made.func is self.func:
            return  # a variant by using(): the task (and job) @task made stays the one
        backend = self.get_backend()
        _tasks[self.module_path] = self
        registry.register(JobDefinition(self.module_path, _TaskJob(self.module_path),
                                        backend.job_options))


class _TaskJob:
    """What the worker calls for a task's job: runs it and keeps its result current."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.__module__ = __name__
        self.__qualname__ = f"task {path}"

    def __call__(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        job = current_job() or {}
        result_id = str(job.get(P.JID, ""))
        made = _tasks[self.path]
        backend = _backend_of(made, job)  # where the task's record lives
        record = backend.store.update(result_id, _attempt_started)
        task = _as_enqueued(backend, made, result_id,
                            record.get("queue") if record is not None else job.get(P.QUEUE))
        if record is None:  # expired, or written by hand: run it anyway, with a new record
            record = backend.new_record(task, args, kwargs)
            _attempt_started(record)
            backend.store.save(result_id, record)
        result = backend.to_result(result_id, record, task)
        task_started.send(sender=type(backend), task_result=result)
        try:
            value = task.call(TaskContext(task_result=result), *args, **kwargs) \
                if task.takes_context else task.call(*args, **kwargs)
            value = normalize_json(value)
        except BaseException as exc:
            if not isinstance(exc, Exception) or is_shutdown(exc):
                # The shutdown (or the process's end) cut the attempt short: its job is back
                # on its queue, waiting to run, so its record is READY again, not RUNNING
                # until then. No failure: no error, no task_finished.
                _given_back(backend, result_id)
                raise
            record = backend.store.update(result_id, functools.partial(_attempt_failed, exc=exc))
            if record is not None:
                task_finished.send(sender=type(backend),
                                   task_result=backend.to_result(result_id, record, task))
            raise
        # Under a testing mode no worker stores the outcome: the record keeps the value.
        record = backend.store.update(result_id, functools.partial(
            _attempt_succeeded, value=value, keep_value=R.in_memory()))
        if record is not None:
            task_finished.send(sender=type(backend), task_result=backend.to_result(
                result_id, record, task, value=value))
        return value  # stored by the worker's result link (``wurk.results``)


def _worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _attempt_started(record: R.Record) -> None:
    at = R.now()
    record["status"] = R.RUNNING
    record["started_at"] = record.get("started_at") or at
    record["last_attempted_at"] = at
    record.setdefault("worker_ids", []).append(_worker_id())


def _given_back(backend: WurkBackend, result_id: str) -> None:
    try:
        backend.store.update(result_id, _attempt_given_back)
    except Exception as exc:  # the interruption goes on; the next attempt writes RUNNING again
        log.warning("task result %s: could not mark it READY again: %s", result_id, exc)


def _attempt_given_back(record: R.Record) -> None:
    if record.get("status") == R.RUNNING:  # not over a final status another wrote meanwhile
        record["status"] = R.READY


def _attempt_failed(record: R.Record, *, exc: BaseException) -> None:
    record["status"] = R.READY  # a retry may follow; the death handler says FAILED if not
    record.setdefault("errors", []).append({
        "exception_class_path": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "traceback": "".join(traceback.format_exception(exc)),
    })


def _attempt_succeeded(record: R.Record, *, value: Any, keep_value: bool) -> None:
    record["status"] = R.SUCCESSFUL
    record["finished_at"] = R.now()
    if keep_value:
        record["return_value"] = value


def _when(value: Any) -> datetime | None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    moment = datetime.fromtimestamp(value, tz=timezone.utc)
    return moment if settings.USE_TZ else moment.astimezone().replace(tzinfo=None)


class WurkBackend(BaseTaskBackend):
    task_class = WurkTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = False

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        where = f"TASKS[{alias!r}]"
        for name in self.queues:
            _check_queue(name, where=f"{where}['QUEUES']")
        options = {str(k).lower(): v for k, v in (params.get("OPTIONS") or {}).items()}
        ttl = options.pop("result_ttl", R.DEFAULT_RESULT_TTL)
        if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 1:
            raise ValueError(f"{where}['OPTIONS']['RESULT_TTL'] must be a number of "
                             f"seconds ≥ 1, not {ttl!r}")
        if P.QUEUE in options:
            raise ConfigError(f"{where}['OPTIONS']: QUEUE is not an option here; a task's "
                              "queue is its queue_name (@task(queue_name=...)), one of QUEUES")
        unknown = sorted(key.upper() for key in options if key not in TASK_OPTIONS)
        if unknown:
            raise ConfigError(f"{where}['OPTIONS']: unknown option {', '.join(unknown)}; "
                              f"the options are RESULT_TTL and "
                              f"{', '.join(k.upper() for k in TASK_OPTIONS)}")
        self.job_options = validate_options(options, where=f"{where}['OPTIONS']")
        # Its tasks' jobs go to OPTIONS' SHARD, and so their outcomes: the records too, so
        # that the worker there and get_result here find them on one Redis.
        shard = self.job_options.get(SHARD)
        self.store = R.ResultStore(ttl=ttl, shard=shard if isinstance(shard, str) else None)
        # Once a backend exists, the death handler finds a task's store through it (not at
        # import: importing this module changes nothing elsewhere).
        R.store_of = _store_of

    def validate_task(self, task: Task[Any, Any]) -> None:
        super().validate_task(task)
        # Django takes any queue name (any at all with QUEUES empty); a worker does not.
        try:
            _check_queue(task.queue_name, where=f"task {task.module_path}")
        except ConfigError as exc:
            raise InvalidTask(str(exc)) from None

    # -- enqueueing -------------------------------------------------------------------------
    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        self.validate_task(task)
        result_id = P.new_jid()
        record = self.new_record(task, list(args), dict(kwargs))
        item: dict[str, Any] = {**self.job_options, P.CLASS: task.module_path,
                                P.ARGS: [record["args"], record["kwargs"]],
                                P.QUEUE: task.queue_name, P.JID: result_id,
                                P.TASK_BACKEND: self.alias,
                                P.RESULT_TTL: self.store.ttl, P.TRANSACTIONAL: False}
        if task.run_after is not None and task.run_after.timestamp() > R.now():
            item[P.AT] = task.run_after.timestamp()

        config = default_config()
        if config.client == "outbox" and writers.selected() is None and \
                config.transaction.in_transaction():
            # The outbox's path: the job is a row of this transaction, relayed after the
            # commit; the record is written at the commit (before the relay is woken), and
            # never over one the job itself wrote first.
            config.transaction.after_commit(
                lambda: self.store.save(result_id, record, only_new=True))
            default_client().push({**item, P.TRANSACTIONAL: True})
        else:
            def send() -> None:
                self.store.save(result_id, record)
                default_client().push(item)

            deferred = config.client in ("transactional", "outbox") and \
                config.transaction.after_commit(send)
            if not deferred:
                send()
        result = self.to_result(result_id, record, task)
        task_enqueued.send(sender=type(self), task_result=result)
        return result

    def new_record(self, task: Task[Any, Any], args: list[Any],
                   kwargs: Mapping[str, Any]) -> R.Record:
        return {"task": task.module_path, "backend": self.alias, "queue": task.queue_name,
                "status": R.READY, "enqueued_at": R.now(), "started_at": None,
                "finished_at": None, "last_attempted_at": None,
                "args": normalize_json(args), "kwargs": normalize_json(dict(kwargs)),
                "errors": [], "worker_ids": [], "ttl": self.store.ttl}

    # -- results ----------------------------------------------------------------------------
    def get_result(self, result_id: str) -> TaskResult[Any]:
        # The outcome first: the job's writes to its record (its attempt, its worker) come
        # before its outcome is stored, so a record read after an outcome holds them. Read
        # the other way round, a job run between the two reads gave a finished result with
        # the record of before it started (no attempt).
        outcome = None if R.in_memory() else outcomes.find(self.store.config, result_id)
        record = self.store.load(result_id)
        task = _tasks.get(record["task"]) if record is not None else None
        if record is None or task is None:
            raise TaskResultDoesNotExist(result_id)
        try:
            task = _as_enqueued(self, task, result_id, record.get("queue"))
        except InvalidTask as exc:  # its @task's queue too, refused here since (QUEUES)
            log.warning("task result %s: %s", result_id, exc)
            raise TaskResultDoesNotExist(result_id) from None
        if isinstance(outcome, outcomes.Outcome):
            return self.to_result(result_id, _caught_up(record, outcome), task,
                                  value=outcome.value)
        if outcome is not None:  # a record wurk did not write: the task's own record stands
            log.warning("task result %s: %s", result_id, outcome.expected)
        elif record.get("status") == R.SUCCESSFUL and "return_value" not in record:
            # The task's record is marked inside the job, its value stored by the result link
            # just outside it: until the value lands the task is still finishing, not finished
            # with None.
            record = {**record, "status": R.RUNNING, "finished_at": None}
        return self.to_result(result_id, record, task)

    def own(self, task: Task[Any, Any], queue: str | None = None) -> Task[Any, Any]:
        """``task`` as one of this backend's, on ``queue`` (else its own):
        ``task.using(backend=alias, queue_name=queue)``, checked (``InvalidTask``). The task
        of the results this backend reads, whose ``refresh()`` reads through it again."""
        queue = task.queue_name if queue is None else queue
        if task.backend == self.alias and task.queue_name == queue:
            return task
        return task.using(backend=self.alias, queue_name=queue)

    def to_result(self, result_id: str, record: R.Record, task: Task[Any, Any], *,
                  value: Any = None) -> TaskResult[Any]:
        errors = [TaskError(exception_class_path=str(e.get("exception_class_path", "")),
                            traceback=str(e.get("traceback", "")))
                  for e in record.get("errors") or [] if isinstance(e, dict)]
        values: dict[str, Any] = {
            "task": task, "id": result_id,
            "status": _STATUSES.get(str(record.get("status")), TaskResultStatus.READY),
            "enqueued_at": _when(record.get("enqueued_at")),
            "started_at": _when(record.get("started_at")),
            "finished_at": _when(record.get("finished_at")),
            "last_attempted_at": _when(record.get("last_attempted_at")),
            "args": record.get("args") or [], "kwargs": record.get("kwargs") or {},
            "backend": record.get("backend") or self.alias, "errors": errors,
            "worker_ids": [str(w) for w in record.get("worker_ids") or []], "metadata": {},
        }
        result = TaskResult(**{k: v for k, v in values.items() if k in _RESULT_FIELDS})
        # ``return_value`` in the record: written by releases before wurk.results kept it
        object.__setattr__(result, "_return_value",
                           record.get("return_value") if value is None else value)
        return result


def _as_enqueued(backend: WurkBackend, task: Task[Any, Any], result_id: str,
                 queue: object) -> Task[Any, Any]:
    """The task as it was enqueued through ``backend``, on ``queue`` (its record's, read from
    Redis): the task its results carry. A queue the backend refuses (written by hand, or
    dropped from QUEUES since) is logged, and the task's own stands."""
    if isinstance(queue, str):
        try:
            return backend.own(task, queue)
        except InvalidTask as exc:
            log.warning("task result %s: %s; read with its task's queue", result_id, exc)
    return backend.own(task)


def _check_queue(name: object, *, where: str) -> None:
    """A queue name a worker can be given: no ``|``, no space, no ``,`` (``-q`` reads what
    follows a comma as the queue's weight)."""
    if not isinstance(name, str):
        raise ConfigError(f"{where}: a queue name is a string, not {name!r}")
    try:
        if parse_queue(name) != (name, 0) or "," in name:
            raise ConfigError(f"queue name {name!r} has a ',' in it (a worker's -q reads "
                              "what follows it as a weight)")
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _caught_up(record: R.Record, outcome: outcomes.Outcome) -> R.Record:
    """The task's record with the final status wurk's outcome gives, when the record has not
    been brought to it (a write that failed, or a worker stopped between the two)."""
    final = R.SUCCESSFUL if outcome.succeeded else R.FAILED if (
        outcome.status == "cancelled" or not outcome.retries_remain) else None
    if final is None or record.get("status") == final:
        return record
    return {**record, "status": final,
            "finished_at": record.get("finished_at") or outcome.finished_at}
