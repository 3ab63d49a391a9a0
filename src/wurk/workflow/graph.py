"""``Workflow``: steps, what each waits for, and the start that writes them to Redis.

1. ``wf.step(job, *args, **kwargs)`` adds a step: a job (an ``@wurk.job`` function, a
   ``wurk.Job`` class, or either's ``.set(...)`` with options) and its arguments. A ``Step``
   among the arguments — anywhere in them, inside lists and dicts too — stands for that
   step's return value; ``step.children`` for the list of the return values of the children
   it adds at run time (``fan_out``). Either makes the new step wait for it. ``.after(*steps)``
   adds dependencies that pass no data; ``.named(name)`` names it (``fetch``, ``fetch-2``…
   by default).
   ``wf.step(inner)``, ``inner`` a ``Workflow`` not started, nests it: a step done when all
   of its steps are, whose result is an object of its leaves' values (its steps no other of
   its steps waits for). ``start()`` flattens it into this workflow (``Flat``): its steps
   named by path (``outer/inner``), ``.after`` on it a dependency of each of its steps.
2. ``start()`` checks the graph (no cycle, every dependency in it), builds each step's
   payload as a push would (the client's normalisation and middleware; the arguments
   that are results stay placeholders), cuts its JSON where the results go, and writes it
   all in one script call (``transitions.start``) inside the first block of the workflow's
   batch. A start the script refuses (nothing written) deletes that batch instead of
   closing it, and the workflow may start again.
3. ``on(event, target, options)``: callbacks of that batch — ``success`` once every step
   succeeded, ``complete`` once every step that was pushed has run, ``death`` at the first
   step that dies — with the batch's rules (docs/batches.md).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .. import context
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
# The payload fields of a step's job: its workflow's id and its step's name (payload.py's).
WORKFLOW = P.WORKFLOW
STEP = P.WORKFLOW_STEP
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

    def __init__(self, workflow: Workflow, job: JobSetter[Any, Any] | None, args: list[Any],
                 name: str, sub: Workflow | None = None) -> None:
        self.workflow = workflow
        self.job = job
        self.args = args
        self.name = name
        self.sub = sub  # a nested workflow: this step is done when all of its steps are
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
        self.nested_in: Workflow | None = None  # the workflow this one is a step of

    def __repr__(self) -> str:
        return f"<wurk.workflow.Workflow {self.id}>"

    @property
    def config(self) -> Config:
        return self._config if self._config is not None else default_config()

    # -- describing -------------------------------------------------------------------------
    def step(self, job: Any, *args: Any, **kwargs: Any) -> Step:
        """Add a step running ``job(*args, **kwargs)``; a ``Step`` or ``step.children`` in
        the arguments is that result, and a dependency. ``job`` may be a ``Workflow`` not
        started: a nested workflow, done when all of its steps are (no arguments)."""
        self._check_open()
        if isinstance(job, Workflow):
            return self._nest(job, args, kwargs)
        setter = setter_of(job)
        positional = setter.definition.positional(args, kwargs)
        base = setter.definition.name.rsplit(".", 1)[-1].rsplit(":", 1)[-1] or "step"
        step = Step(self, setter, positional, self._free_name(_clean(base)))
        self.steps.append(step)
        self._names[step.name] = step
        return step

    def _nest(self, inner: Workflow, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Step:
        if args or kwargs:
            raise WorkflowError("a nested workflow takes no arguments: its own steps take "
                                "them (and may take this workflow's steps' results)")
        if inner.started or inner.nested_in is not None:
            raise WorkflowError(f"workflow {inner.id} has started or is nested already")
        if inner is self or self in _lineage(inner) or inner in _lineage(self):
            raise WorkflowError("a workflow cannot be nested in itself")
        if not inner.steps:
            raise WorkflowError("a nested workflow needs at least one step")
        if inner._batch.callbacks:
            raise WorkflowError("a nested workflow has no callbacks of its own: register "
                                "them on the outermost workflow")
        inner.nested_in = self
        step = Step(self, None, [], self._free_name(_clean(inner.name or "workflow")), inner)
        self.steps.append(step)
        self._names[step.name] = step
        return step

    def on(self, event: str, target: Any, options: Mapping[str, Any] | None = None
           ) -> Workflow:
        """A callback of the workflow's batch (``success``, ``complete``, ``death``)."""
        self._check_open()
        if self.nested_in is not None:
            raise WorkflowError(f"workflow {self.id} is nested: register callbacks on the "
                                "outermost workflow")
        self._batch.on(event, target, options)
        return self

    def _check_open(self) -> None:
        if self.started:
            raise WorkflowError(f"workflow {self.id} has started: it takes no more steps")
        if self.nested_in is not None and self.nested_in.started:
            raise WorkflowError(f"workflow {self.id} is nested in one that has started")

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
        """Write the workflow (and those nested in it) to Redis and push its first steps;
        returns its id."""
        self._check_open()
        if self.nested_in is not None:
            raise WorkflowError(f"workflow {self.id} is nested in {self.nested_in.id}: start "
                                "that one")
        if not self.steps:
            raise WorkflowError("a workflow needs at least one step")
        flat = _flatten(self)
        config = self.config
        templates = [(full, *self._template(step, full, deps, flat.names, config))
                     for step, full, deps in flat.steps]
        then: dict[str, list[str]] = {}
        for _, full, deps in flat.steps:
            for node in deps:
                then.setdefault(node, []).append(full)
        batch = self._batch
        with lent_redis(config) as conn:
            accounting.create(conn, config, bid=self.id, description=batch.description,
                              callback_queue=batch.callback_queue, callback_class=CALLBACK_CLASS,
                              parent_bid=None, tags=(), linger=None, callbacks=batch.callbacks,
                              context=context.current(config))
            self.started = True
            refused = False
            try:
                transitions.start(conn, config, wid=self.id, name=self.name,
                                  policy=self.on_death, ttl=self.ttl, steps=templates,
                                  then=then, subs=flat.subs)
            except WorkflowError:
                refused = True  # before any write: no step was pushed
                raise
            finally:
                if refused:
                    # Closed, the batch would have nothing pending: it would succeed at
                    # once and push the callbacks of a workflow that never started.
                    batch.delete()
                    self.started = False  # nothing written: it may start once mended
                else:
                    accounting.close(conn, config, self.id)
        return self.id

    def _template(self, step: Step, full: str, deps: list[str], names: dict[int, str],
                  config: Config) -> tuple[str, int]:
        """The step's payload cut where results go, and how many dependencies it waits for."""
        refs: list[str] = []
        token = uuid.uuid4().hex

        def mark(value: Any) -> Any:
            if isinstance(value, Step):
                refs.append(names[id(value)])
                return f"wurk-ref:{token}:{len(refs) - 1}"
            if isinstance(value, Children):
                refs.append(f"{names[id(value.step)]}[*]")
                return f"wurk-ref:{token}:{len(refs) - 1}"
            if isinstance(value, list):
                return [mark(item) for item in value]
            if isinstance(value, tuple):
                return [mark(item) for item in value]
            if isinstance(value, dict):
                return {key: mark(item) for key, item in value.items()}
            return value

        args = [mark(arg) for arg in step.args]
        assert step.job is not None  # a nested workflow's step has no template
        payload = prepare(config, step.job, args, wid=self.id, step=full, ttl=self.ttl)
        pieces = re.split(f'"wurk-ref:{token}:([0-9]+)"', P.dumps(payload))
        if len(pieces) // 2 != len(refs):
            # An ``encrypt`` job's last argument is sealed as the step is made ready: a
            # result filled in later, in Redis, cannot go inside the envelope.
            raise WorkflowError(
                f"step {full} ({payload[P.CLASS]}): its job has encrypt=True, which seals its "
                "last argument when the workflow starts, so an earlier step's result cannot "
                "go in that last argument: pass it in an earlier one")
        parts = [payload[P.QUEUE], payload[P.JID]]
        for index, piece in enumerate(pieces):
            parts.append(refs[int(piece)] if index % 2 else piece)
        return "\0".join(parts), len(deps)


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


def _lineage(workflow: Workflow) -> list[Workflow]:
    """The workflow and those it is nested in, innermost first."""
    out = [workflow]
    while out[-1].nested_in is not None:
        out.append(out[-1].nested_in)
    return out


def _nodes(step: Step) -> list[Step | Children]:
    """What a step waits for (its arguments' steps and ``after``), each once."""
    found: list[Step | Children] = []

    def walk(value: Any) -> None:
        if isinstance(value, (Step, Children)):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)

    walk(step.args)
    walk(step.waits_for)
    unique: dict[tuple[int, bool], Step | Children] = {}
    for node in found:
        unique.setdefault((id(node.step if isinstance(node, Children) else node),
                           isinstance(node, Children)), node)
    return list(unique.values())


@dataclass
class Flat:
    """A workflow and those nested in it as one graph: names are paths (``outer/inner``).

    ``steps``: each job step, its full name and the nodes it waits for (``X``, ``X[*]``,
    or a nested workflow's name, done when all its steps are); ``subs``: each nested
    workflow, its policy, its leaves (the steps of it no other of its steps waits for:
    its result is their values, by their names in it) and how many job steps it holds."""

    names: dict[int, str] = field(default_factory=dict)
    steps: list[tuple[Step, str, list[str]]] = field(default_factory=list)
    subs: list[tuple[str, str, list[str], int]] = field(default_factory=list)


def _flatten(top: Workflow) -> Flat:
    flat = Flat()

    def name_all(workflow: Workflow, prefix: str) -> None:
        for step in workflow.steps:
            flat.names[id(step)] = prefix + step.name
            if step.sub is not None:
                name_all(step.sub, prefix + step.name + "/")

    name_all(top, "")
    graph: dict[str, list[str]] = {}

    def node_of(step: Step, waited: Step | Children) -> str:
        other = waited.step if isinstance(waited, Children) else waited
        if id(other) not in flat.names or other.workflow not in _lineage(step.workflow):
            raise WorkflowError(f"step {step.name} waits for {other.name}, which is not a "
                                "step of this workflow (or of one it is nested in)")
        if isinstance(waited, Children):
            if other.sub is not None:
                raise WorkflowError(f"{other.name} is a nested workflow: it adds no children")
            return f"{flat.names[id(other)]}[*]"
        return flat.names[id(other)]

    def walk(workflow: Workflow, inherited: list[str]) -> tuple[int, list[str]]:
        """(its job steps, its leaves)"""
        count = 0
        waited_inside: set[int] = set()
        for step in workflow.steps:
            full = flat.names[id(step)]
            nodes = [node_of(step, waited) for waited in _nodes(step)]
            for waited in _nodes(step):
                waited_inside.add(id(waited.step if isinstance(waited, Children) else waited))
            deps = list(dict.fromkeys([*nodes, *inherited]))
            graph[full] = [node.removesuffix("[*]") for node in deps]
            if step.sub is None:
                flat.steps.append((step, full, deps))
                count += 1
                continue
            inner, leaves = walk(step.sub, deps)
            graph[full] = [flat.names[id(member)] for member in step.sub.steps]
            flat.subs.append((full, step.sub.on_death, leaves, inner))
            count += inner
        return count, [flat.names[id(step)] for step in workflow.steps
                       if id(step) not in waited_inside]

    walk(top, [])
    _check_acyclic(graph)
    return flat


def _check_acyclic(graph: dict[str, list[str]]) -> None:
    """``WorkflowError`` naming a cycle of the flattened graph."""
    done: set[str] = set()
    for first in graph:
        if first in done:
            continue
        stack: list[tuple[str, int]] = [(first, 0)]
        path: list[str] = [first]
        on_path = {first}
        while stack:
            node, index = stack[-1]
            following = graph.get(node, [])
            if index < len(following):
                stack[-1] = (node, index + 1)
                after = following[index]
                if after in on_path:
                    cycle = [*path[path.index(after):], after]
                    raise WorkflowError(f"the workflow's steps wait for each other: "
                                        f"{' -> '.join(cycle)}")
                if after not in done:
                    stack.append((after, 0))
                    path.append(after)
                    on_path.add(after)
            else:
                stack.pop()
                path.pop()
                on_path.discard(node)
                done.add(node)
