"""Where workflows attach to the worker: a server middleware link and a death handler.

1. ``WorkflowMiddleware`` (``wurk.launcher.BUILT_IN``): around a step's job, inside the
   limits link (a job a rate limiter rescheduled has not run) and outside the result
   recorder (the step's result is stored before the step counts), inside the batch link
   (the dependants it pushes join the batch before the batch counts the step). A step
   that returned counts as a success with its value and the children it added
   (``fan_out``); one ``wurk.cancel`` stopped counts as dead; a failure with a retry due
   counts as nothing (it runs again). One the limits link dropped unrun as expired never
   reaches it: the limits link counts it dead (``expired_step``).
2. ``WorkflowDeathHandler``: a step that died — retries used up, ``retry: false``, killed,
   a poison pill — counts as dead and the workflow's policy applies. It runs before the
   batch's death handler, so the dependants a ``continue`` policy pushes join the batch
   before it counts the death.
3. ``fan_out(job, args_list)``: a running step adds children, one job per argument list.
   They are held until the step returns and written by the same script call that counts
   it: a step that runs twice (its worker killed) adds its children once.
4. A count Redis refuses is sent again for a few seconds (it is idempotent per step); one
   that still fails fails the run, which runs again.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import payload as P
from ..asyncjobs import bookkeeping
from ..batch.middleware import BatchDeathHandler
from ..errors import InvalidArguments, JobCancelled, UnstorableResult, WorkflowError
from ..job import current_job
from ..middleware import AWAIT
from ..reporting import report_error
from .graph import STEP, WORKFLOW, prepare, setter_of
from .transitions import Child, finish_retried

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["WorkflowDeathHandler", "WorkflowMiddleware", "expired_step", "fan_out", "install",
           "running_step"]


@dataclass
class _Running:
    """The step a worker thread (or task) runs, and the children it added so far."""

    config: Config
    wid: str
    step: str
    ttl: int
    children: list[Child] = field(default_factory=list)


_RUNNING: contextvars.ContextVar[_Running | None] = contextvars.ContextVar(
    "wurk_workflow_step", default=None)


def _step_of(payload: P.Payload) -> tuple[str, str] | None:
    wid, step = payload.get(WORKFLOW), payload.get(STEP)
    if isinstance(wid, str) and wid and isinstance(step, str) and step:
        return wid, step
    return None


def fan_out(job: Any, args_list: Iterable[Sequence[Any]]) -> list[str]:
    """Add one child step per argument list to the running step (``job`` as a step takes
    it: an ``@wurk.job`` function, a ``wurk.Job`` class, or their ``.set(...)``); returns
    their jids. They are pushed when the step returns, with it counted; a step after
    ``step.children`` receives their return values as a list, in this order."""
    running = _RUNNING.get()
    if running is None:
        raise WorkflowError("fan_out adds children to a running workflow step; this code "
                            "does not run in one")
    setter = setter_of(job)
    jids = []
    for args in args_list:
        name = f"{running.step}[{len(running.children)}]"
        payload = prepare(running.config, setter, list(args), wid=running.wid, step=name,
                          ttl=running.ttl)
        payload[P.ENQUEUED_AT] = P.write_time(running.config.timestamp_format)
        running.children.append((name, str(payload[P.QUEUE]), str(payload[P.JID]),
                                 P.dumps(payload)))
        jids.append(str(payload[P.JID]))
    return jids


def _value_text(payload: P.Payload, value: Any) -> str:
    try:
        P.check_value(value, f"the return value of step {payload.get(STEP)!r}")
    except InvalidArguments as exc:
        raise UnstorableResult(f"{exc}; a workflow step passes its result on, which must be "
                               "JSON") from None
    return P.dumps(value)


def _ttl(payload: P.Payload) -> int:
    ttl = payload.get(P.RESULT_TTL)
    return ttl if type(ttl) is int and ttl > 0 else 24 * 3600


class WorkflowMiddleware:
    """Server middleware: counts each step of a workflow once."""

    # Only a workflow's step has anything to do here (``wurk.middleware``).
    wurk_keys = frozenset({WORKFLOW, STEP})

    def __init__(self, config: Config) -> None:
        self.config = config

    def __call__(self, job: Any, payload: P.Payload, queue: str,
                 call_next: Callable[[], Any]) -> Any:
        found = _step_of(payload)
        if found is None:
            return call_next()
        running = _Running(self.config, *found, _ttl(payload))
        token = _RUNNING.set(running)
        try:
            value = call_next()
        except JobCancelled:
            finish_retried(self.config, running.wid, running.step, "death")
            raise
        finally:
            _RUNNING.reset(token)
        finish_retried(self.config, running.wid, running.step, "success",
                       _value_text(payload, value), running.children)
        return value

    async def acall(self, job: Any, payload: P.Payload, queue: str,
                    call_next: Callable[[], Any]) -> Any:
        """The same around an async job; the count on a bookkeeping thread."""
        found = _step_of(payload)
        if found is None:
            return await call_next()
        running = _Running(self.config, *found, _ttl(payload))
        token = _RUNNING.set(running)
        try:
            value = await call_next()
        except JobCancelled:
            await bookkeeping(finish_retried, self.config, running.wid, running.step, "death")
            raise
        finally:
            _RUNNING.reset(token)
        await bookkeeping(finish_retried, self.config, running.wid, running.step, "success",
                          _value_text(payload, value), running.children)
        return value


    def wurk_plan(self, job: Any, payload: P.Payload, queue: str) -> object | None:
        """A step: ``acall``; any other job: nothing (no frame on its await chain)."""
        return None if _step_of(payload) is None else AWAIT


def expired_step(config: Config, payload: P.Payload) -> bool:
    """A job the limits link dropped unrun as expired: when it is a workflow step, it is
    dead — it will never run, and what waits for it must not wait for ever — so its
    workflow's policy applies, and its batch counts it dead (``payload.DEAD_UNRUN``), never as
    success that would fire the workflow's ``success``. Whether it was a step. A count Redis
    refuses raises: the run fails and is retried, to be dropped (and counted) again."""
    found = _step_of(payload)
    if found is None:
        return False
    finish_retried(config, *found, "death")
    payload[P.DEAD_UNRUN] = True
    return True


class WorkflowDeathHandler:
    """Death handler: a step that died counts as dead, once."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def __call__(self, job: dict[str, Any], exc: BaseException) -> None:
        if not isinstance(job, dict):
            return
        found = _step_of(job)
        if found is None:
            return
        try:
            finish_retried(self.config, *found, "death")
        except Exception as error:  # the death is booked; the workflow waits for its count
            report_error(self.config, error, {"context": "counting a dead workflow step",
                                              "job": job})


def running_step() -> tuple[str, str] | None:
    """(workflow id, step name) of the running job, when it is a workflow's step."""
    job = current_job()
    return None if job is None else _step_of(job)


def install(config: Config) -> None:
    """Put the death handler before the batch's (the launcher places the link itself)."""
    handlers = config.death_handlers
    if any(isinstance(h, WorkflowDeathHandler) for h in handlers):
        return
    at = next((i for i, h in enumerate(handlers) if isinstance(h, BatchDeathHandler)),
              len(handlers))
    handlers.insert(at, WorkflowDeathHandler(config))
