"""``WorkflowStatus``: a workflow's state and each step's, read from Redis.

1. The workflow: ``state`` — ``running``, ``succeeded`` (every step succeeded), ``failed``
   (one died; the policy said what happened to the rest) or ``cancelled`` — its policy,
   how many steps it has and how many are not finished, when it was created and finished.
2. Each step (``steps``, by name, children as ``<parent>[<n>]``): ``state`` — ``waiting``
   (for a dependency), ``queued`` (pushed: in a queue, running or waiting for a retry),
   ``succeeded``, ``dead``, ``stopped`` (after a step that died, policy ``stop``) or
   ``cancelled`` — its jid, and its stored outcome (``wurk.results``: the value, or the
   error of its last failure), read with ``find_many``, a page a round trip.
3. A nested workflow is a step too (``kind`` ``"workflow"``), its steps named by their path
   (``outer/inner``, ``within`` says which it is in, ``members`` lists them): ``waiting``,
   ``running``, ``succeeded`` (its ``value`` an object of its leaves' values), ``failed``
   (one of its steps died or was stopped), ``stopped`` (none ran) or ``cancelled``.
4. What is stored is untrusted: a field that cannot be read shows as absent, never raises.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from ..config import Config, default_config
from ..errors import WorkflowError
from ..results.store import Outcome, find_many
from ..stored import Invalid, count_or_zero, epoch, text

__all__ = ["JOIN_POLL", "STATES", "STEP_STATES", "StepStatus", "WorkflowStatus"]

STATES = ("running", "succeeded", "failed", "cancelled")
STEP_STATES = ("waiting", "queued", "running", "succeeded", "failed", "dead", "stopped",
               "cancelled")
# How often ``join`` looks again (it is for tests and scripts).
JOIN_POLL = 0.05


@dataclass(frozen=True)
class StepStatus:
    """One step: its state, jid and stored outcome (None: none yet, or expired)."""

    name: str
    state: str
    jid: str
    outcome: Outcome | Invalid | None
    kind: str = "job"  # or "workflow": a nested workflow
    sub_value: Any = None  # a nested workflow's value, once it succeeded

    @property
    def value(self) -> Any:
        """The step's return value (None unless it succeeded and its result is kept)."""
        if self.kind == "workflow":
            return self.sub_value
        outcome = self.outcome
        return outcome.value if isinstance(outcome, Outcome) and outcome.succeeded else None

    @property
    def parent(self) -> str | None:
        """The step that added this one (``fan_out``), or None."""
        return self.name.rsplit("[", 1)[0] if self.name.endswith("]") else None

    @property
    def within(self) -> str | None:
        """The nested workflow this step is a step of, or None (the outermost)."""
        return self.name.rsplit("/", 1)[0] if "/" in self.name else None


class WorkflowStatus:
    """A workflow as Redis holds it now; ``refresh()`` reads it again."""

    def __init__(self, wid: str, *, config: Config | None = None) -> None:
        if not isinstance(wid, str) or not wid:
            raise WorkflowError(f"a workflow id is a non-empty string, not {wid!r}")
        self.wid = wid
        self.config = config if config is not None else default_config()
        self.refresh()

    def __repr__(self) -> str:
        return f"<wurk.workflow.WorkflowStatus {self.wid} {self.state}>"

    def refresh(self) -> WorkflowStatus:
        keys = self.config.keys

        def read(r: Any) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for part in ("", "state", "jids", "subs"):
                pipe.hgetall(keys.workflow(self.wid, part))
            return list(pipe.execute(raise_on_error=False))

        def read_values(r: Any) -> Any:
            return r.hmget(keys.workflow(self.wid, "values"), subs) if subs else []

        meta, states, jids, subs_found = (_texts(reply) for reply in
                                          self.config.pool("api").run(read, idempotent=True))
        subs = sorted(subs_found)
        sub_values = dict(zip(subs, self.config.pool("api").run(read_values, idempotent=True),
                              strict=False))
        if not meta:
            raise WorkflowError(f"workflow {self.wid} does not exist (expired, or never "
                                "started)")
        self.name = meta.get("name", "")
        self.state = meta.get("state", "")
        self.policy = meta.get("policy", "")
        self.total = _int(meta.get("total"))
        self.pending = _int(meta.get("pending"))
        self.dead = _int(meta.get("dead"))
        self.created_at = _time(meta.get("created_at"))
        self.finished_at = _time(meta.get("finished_at"))
        outcomes = find_many(self.config, jids.values())
        self.steps = {name: StepStatus(name, state, jids.get(name, ""),
                                       outcomes.get(jids.get(name, "")) if name in jids
                                       else None,
                                       "workflow" if name in subs_found else "job",
                                       _json(sub_values.get(name)))
                      for name, state in sorted(states.items(), key=lambda kv: _order(kv[0]))}
        return self

    def members(self, sub: str | None = None) -> list[StepStatus]:
        """The steps of nested workflow ``sub`` (None: of the outermost), children after
        their parent."""
        return [step for step in self.steps.values() if step.within == sub]

    @property
    def done(self) -> bool:
        return self.state in ("succeeded", "failed", "cancelled")

    def result(self, step: str) -> Any:
        """A step's return value; ``wurk.JobFailed`` / ``wurk.JobCancelled`` as its
        handle would raise, ``WorkflowError`` when it has no outcome stored."""
        found = self.steps.get(step)
        if found is None:
            raise WorkflowError(f"workflow {self.wid} has no step {step!r}")
        if found.kind == "workflow":
            if found.state != "succeeded":
                raise WorkflowError(f"nested workflow {step} of workflow {self.wid} has no "
                                    f"value (it is {found.state})")
            return found.value
        if not isinstance(found.outcome, Outcome):
            raise WorkflowError(f"step {step} of workflow {self.wid} has no readable outcome "
                                f"(it is {found.state})")
        return found.outcome.unwrap()

    def join(self, timeout: float = 30.0) -> WorkflowStatus:
        """Wait until the workflow ended; for tests and scripts (it looks every 50 ms)."""
        deadline = time.monotonic() + timeout
        while not self.done:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"workflow {self.wid} still {self.state} after {timeout} s "
                                   f"({self.pending} of {self.total} steps not finished)")
            time.sleep(JOIN_POLL)
            self.refresh()
        return self


def _texts(reply: Any) -> dict[str, str]:
    if not isinstance(reply, dict):
        return {}
    return {text(k): text(v) for k, v in reply.items()}


def _json(value: Any) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return None


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def _time(value: str | None) -> float | None:
    found = epoch(value or None)
    return found if isinstance(found, float) else None


def _order(name: str) -> tuple[Any, ...]:
    """Children after their parent, in the order they were added."""
    return tuple((part.split("[")[0], *(count_or_zero(p) for p in
                                         part.replace("]", "").split("[")[1:]))
                 for part in name.split("/"))

