"""Workflows: steps that run as jobs once the steps they depend on have succeeded, and
receive those steps' results as arguments.

    wf = wurk.workflow.Workflow("report")
    pages = wf.step(list_pages, "https://example.com")      # fans out: one child per page
    total = wf.step(add_up, pages.children)                # fan-in: every child's result
    wf.step(send_report, total).named("send")             # a Step as argument: its result
    wid = wf.start()
    wurk.workflow.WorkflowStatus(wid).join().result("send")

1. ``graph``: ``Workflow`` and ``Step`` — what each step runs and waits for — and the start
   that writes it all in one script call.
2. ``transitions``: every change of state in Lua (``scripts/workflow_*.lua``), counted once
   per step, however often a step's job is redelivered.
3. ``middleware``: where it attaches to a worker (a server middleware link, a death
   handler), and ``fan_out``, by which a running step adds children.
4. ``status``: ``WorkflowStatus``, each step's state and stored result.

A step may be a whole workflow (``wf.step(inner)``): flattened into the outer one at
``start()``, its steps named by path (``outer/inner``), done when all of them are, its
result an object of its leaves' values; the dashboard's Workflows tab draws the graph.

Built on batches and results: a workflow is a batch of the same id (its steps are the
batch's jobs, its callbacks fire once), and each step keeps its result (``result_ttl``,
``wurk.results``). ``docs/workflows.md`` tells the whole story, and how a Celery canvas
(chain, group, chord) becomes a workflow.
"""

from __future__ import annotations

from ..config import Config, default_config
from ..connections.lending import redis as lent_redis
from ..errors import WorkflowError
from .graph import DEFAULT_TTL, POLICIES, Children, Policy, Step, Workflow
from .middleware import fan_out, running_step
from .status import StepStatus, WorkflowStatus
from .transitions import cancel as _cancel_script

__all__ = ["DEFAULT_TTL", "POLICIES", "Children", "Policy", "Step", "StepStatus", "Workflow",
           "WorkflowError", "WorkflowStatus", "cancel", "fan_out", "running_step"]


def cancel(wid: str, *, config: Config | None = None) -> str:
    """Cancel workflow ``wid``: nothing more is pushed, its waiting and queued steps are
    cancelled — taken out of their queue, or (running, retrying, scheduled) cancelled with
    ``wurk.cancel``. Returns its state before: ``running``, or the state it had ended in
    (then nothing changes). ``WorkflowError`` when it does not exist."""
    from ..control.withdraw import withdraw  # the admin side: read only here

    cfg = config if config is not None else default_config()
    with lent_redis(cfg) as conn:
        before, _, others = _cancel_script(conn, cfg, wid)
    for jid in others:
        withdraw(jid, config=cfg)  # no step death: the workflow is cancelled whole
    return before
