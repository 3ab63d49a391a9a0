"""``Workflow``: steps, what each waits for, and the start that writes them to Redis.

1. ``wf.step(job, *args, **kwargs)`` adds a step: a job (an ``@wurk.job`` function, a
   ``wurk.Job`` class, or either's ``.set(...)`` with options) and its arguments. A ``Step``
   among the arguments — anywhere in them, inside lists and dicts too — stands for that
   step's return value; ``step.children`` for the list of the return values of the children
   it adds at run time (``fan_out``). Either makes the new step wait for it. ``.after(*steps)``
   adds dependencies that pass no data; ``.named(name)`` names it (``fetch``, ``fetch-2``…
   by default).
2. ``start()`` checks the graph (no cycle, every dependency in it), builds each step's
   payload as a push would (the client's normalisation and middleware; the arguments
   that are results stay placeholders), cuts its JSON where the results go, and writes it
   all in one script call (``transitions.start``) inside the first block of the workflow's
   batch.
3. ``on(event, target, options)``: callbacks of that batch — ``success`` once every step
   succeeded, ``complete`` once every step that was pushed has run, ``death`` at the first
   step that dies — with the batch's rules (docs/batches.md).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from .. import payload as P
from ..batch import accounting
from ..batch.model import CALLBACK_CLASS, Batch
from ..client.default import default_client
from ..config import Config, default_config
from ..connections.lending import redis as lent_redis
from ..errors import WorkflowError
from ..job import Job, JobSetter
from . import transitions

__all__ = ["DEFAULT_TTL", "POLICIES", "STEP", "WORKFLOW", "Children", "Policy", "Step",
           "Workflow", "new_wid", "prepare", "setter_of"]

Policy = Literal["stop", "continue"]
POLICIES: tuple[Policy, ...] = ("stop", "continue")
# How long a workflow's record and its steps' results are kept: three days, long enough to
# look at a failed run after a weekend.
DEFAULT_TTL = 3 * 24 * 3600
# The payload fields of a step's job: its workflow's id and its step's name.
WORKFLOW = "wf"
STEP = "wf_step"
# A step's name: what the Lua's patterns and space-separated lists can carry. A child is
# named by the runtime ``<parent>[<n>]``, so brackets are not a user's to use.
_NAME = re.compile(r"[A-Za-z0-9_.:@-]{1,200}")


def new_wid() -> str:
    return f"wf-{uuid.uuid4().hex[:20]}"


class Children:
    """``step.children`` as an argument: the list of the values its children returned."""

    __slots__ = ("step",)

    def __init__(self, step: Step) -> None:
        self.step = step


class Step:
    """One step of a workflow: a job, its arguments, what it waits for."""

    def __init__(self, workflow: Workflow, job: JobSetter[Any, Any], args: list[Any],
                 name: str) -> None:
        self.workflow = workflow
        self.job = job
        self.args = args
        self.name = name
        self.waits_for: list[Step | Children] = []

    def __repr__(self) -> str:
        return f"<wurk.workflow.Step {self.name}>"

    @property
    def children(self) -> Children:
        """The children this step adds at run time, as one dependency: a step after them
        waits for every one, and receives their return values as a list (in the order
        they were added)."""
        return Children(self)

    def named(self, name: str) -> Step:
        """Name the step (its key in ``WorkflowStatus.steps``)."""
        self.workflow._rename(self, name)
        return self

    def after(self, *steps: Step | Children) -> Step:
        """Wait for ``steps`` (or a step's ``children``) too, without their results."""
        for step in steps:
            if not isinstance(step, (Step, Children)):
                raise WorkflowError(f"step {self.name} can wait only for steps of its "
                                    f"workflow, not {step!r}")
            self.waits_for.append(step)
        return self


def setter_of(job: Any) -> JobSetter[Any, Any]:
    """The job (and options) a step runs: an ``@wurk.job`` function, a ``wurk.Job`` class,
    or either's ``.set(...)``."""
    if isinstance(job, JobSetter):
        return job
    if isinstance(job, type) and issubclass(job, Job):
        return job.set()
    raise WorkflowError(f"a step runs a job (an @wurk.job function, a wurk.Job class, or "
                        f"their .set(...)), not {job!r}")


class Workflow:
    """Steps that run as jobs, each once its dependencies have succeeded."""

    def __init__(self, name: str = "", *, on_death: Policy = "stop", ttl: int = DEFAULT_TTL,
                 callback_queue: str = P.DEFAULT_QUEUE, config: Config | None = None) -> None:
        if on_death not in POLICIES:
            raise WorkflowError(f"on_death must be one of {POLICIES}, not {on_death!r}")
        if isinstance(ttl, bool) or not isinstance(ttl, int) or not 60 <= ttl < 10**9:
            raise WorkflowError(f"ttl is whole seconds from 60, not {ttl!r}")
        self.id = new_wid()
        self.name = name
        self.on_death = on_death
        self.ttl = ttl
        self._config = config
        self._batch = Batch(self.id, description=name or self.id,
                            callback_queue=callback_queue, config=config)
        self._batch._exists = False  # created by start(), with the workflow's id as its bid
        self.steps: list[Step] = []
        self._names: dict[str, Step] = {}
        self.started = False

    def __repr__(self) -> str:
        return f"<wurk.workflow.Workflow {self.id}>"

    @property
    def config(self) -> Config:
        return self._config if self._config is not None else default_config()

    # -- describing -------------------------------------------------------------------------
    def step(self, job: Any, *args: Any, **kwargs: Any) -> Step:
        """Add a step running ``job(*args, **kwargs)``; a ``Step`` or ``step.children`` in
        the arguments is that result, and a dependency."""
        self._check_open()
        setter = setter_of(job)
        positional = setter.definition.positional(args, kwargs)
        base = setter.definition.name.rsplit(".", 1)[-1].rsplit(":", 1)[-1] or "step"
        step = Step(self, setter, positional, self._free_name(_clean(base)))
        self.steps.append(step)
        self._names[step.name] = step
        return step

    def on(self, event: str, target: Any, options: Mapping[str, Any] | None = None
           ) -> Workflow:
        """A callback of the workflow's batch (``success``, ``complete``, ``death``)."""
        self._check_open()
        self._batch.on(event, target, options)
        return self

    def _check_open(self) -> None:
        if self.started:
            raise WorkflowError(f"workflow {self.id} has started: it takes no more steps")

    def _free_name(self, base: str) -> str:
        name, n = base, 1
        while name in self._names:
            n += 1
            name = f"{base}-{n}"
        return name

    def _rename(self, step: Step, name: str) -> None:
        self._check_open()
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise WorkflowError(f"a step name is 1 to 200 of A-Z a-z 0-9 _ . : @ -, not "
                                f"{name!r}")
        if name in self._names and self._names[name] is not step:
            raise WorkflowError(f"workflow {self.id} has a step named {name!r} already")
        del self._names[step.name]
        step.name = name
        self._names[name] = step

    # -- starting ---------------------------------------------------------------------------
    def start(self) -> str:
        """Write the workflow to Redis and push its first steps; returns its id."""
        self._check_open()
        if not self.steps:
            raise WorkflowError("a workflow needs at least one step")
        ordered = _ordered(self.steps)
        config = self.config
        templates = [(step.name, *self._template(step, config)) for step in ordered]
        then: dict[str, list[str]] = {}
        for step in ordered:
            for node in _nodes(step):
                then.setdefault(node, []).append(step.name)
        batch = self._batch
        with lent_redis(config) as conn:
            accounting.create(conn, config, bid=self.id, description=batch.description,
                              callback_queue=batch.callback_queue, callback_class=CALLBACK_CLASS,
                              parent_bid=None, tags=(), linger=None, callbacks=batch.callbacks)
            self.started = True
            try:
                transitions.start(conn, config, wid=self.id, name=self.name,
                                  policy=self.on_death, ttl=self.ttl, steps=templates,
                                  then=then)
            finally:
                accounting.close(conn, config, self.id)
        return self.id

    def _template(self, step: Step, config: Config) -> tuple[str, int]:
        """The step's payload cut where results go, and how many dependencies it waits for."""
        refs: list[str] = []
        token = uuid.uuid4().hex

        def mark(value: Any) -> Any:
            if isinstance(value, Step):
                _check_member(self, step, value)
                refs.append(value.name)
                return f"wurk-ref:{token}:{len(refs) - 1}"
            if isinstance(value, Children):
                _check_member(self, step, value.step)
                refs.append(f"{value.step.name}[*]")
                return f"wurk-ref:{token}:{len(refs) - 1}"
            if isinstance(value, list):
                return [mark(item) for item in value]
            if isinstance(value, tuple):
                return [mark(item) for item in value]
            if isinstance(value, dict):
                return {key: mark(item) for key, item in value.items()}
            return value

        args = [mark(arg) for arg in step.args]
        for waited in step.waits_for:
            _check_member(self, step, waited.step if isinstance(waited, Children) else waited)
        payload = prepare(config, step.job, args, wid=self.id, step=step.name, ttl=self.ttl)
        pieces = re.split(f'"wurk-ref:{token}:([0-9]+)"', P.dumps(payload))
        parts = [payload[P.QUEUE], payload[P.JID]]
        for index, piece in enumerate(pieces):
            parts.append(refs[int(piece)] if index % 2 else piece)
        return "\0".join(parts), len(_nodes(step))


def prepare(config: Config, job: JobSetter[Any, Any], args: list[Any], *, wid: str,
            step: str, ttl: int) -> P.Payload:
    """A step's payload, as a push makes it (normalised, through the client middleware),
    without its ``enqueued_at``: the script that pushes it writes that."""
    item = {**job.definition.options, **job.options, P.CLASS: job.definition.name,
            P.ARGS: args, P.BID: wid, WORKFLOW: wid, STEP: step}
    item.setdefault(P.RESULT_TTL, ttl)
    payload = default_client(config).prepare(item)
    if payload is None:
        raise WorkflowError(f"step {step}: a client middleware stopped its job")
    payload.pop(P.ENQUEUED_AT, None)
    return payload


def _clean(base: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.:@-]", "_", base)[:180]
    return cleaned or "step"


def _check_member(workflow: Workflow, step: Step, other: Step) -> None:
    if other.workflow is not workflow:
        raise WorkflowError(f"step {step.name} waits for {other.name}, a step of another "
                            "workflow")


def _nodes(step: Step) -> list[str]:
    """What a step waits for, as the Lua's nodes: ``X`` and ``X[*]``, each once."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, Step):
            found.append(value.name)
        elif isinstance(value, Children):
            found.append(f"{value.step.name}[*]")
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)

    walk(step.args)
    walk(step.waits_for)
    return list(dict.fromkeys(found))


def _ordered(steps: Sequence[Step]) -> list[Step]:
    """The steps with each after what it waits for; ``WorkflowError`` naming a cycle."""
    by_name = {step.name: step for step in steps}
    done: set[str] = set()
    visiting: list[str] = []
    out: list[Step] = []

    def visit(step: Step) -> None:
        if step.name in done:
            return
        if step.name in visiting:
            cycle = [*visiting[visiting.index(step.name):], step.name]
            raise WorkflowError(f"the workflow's steps wait for each other: "
                                f"{' -> '.join(cycle)}")
        visiting.append(step.name)
        for node in _nodes(step):
            other = by_name.get(node.removesuffix("[*]"))
            if other is None:
                raise WorkflowError(f"step {step.name} waits for {node}, which is not a step "
                                    "of this workflow")
            visit(other)
        visiting.pop()
        done.add(step.name)
        out.append(step)

    for step in steps:
        visit(step)
    return out
