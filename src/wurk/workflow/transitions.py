"""Every change to a workflow's state, as one Lua script call each (``scripts/workflow_*.lua``).

1. ``start``: the graph written and the steps that wait for nothing pushed, in one call,
   inside the first jobs block of the workflow's batch (same id): the batch is created
   first and closed after, so nothing fires while the workflow is still being written.
2. ``finish``: a step ended — succeeded (its value and the children it added go with it) or
   died. Counted once per step: whatever is replayed (an ACK lost, a worker killed after the
   count, a death reported after the success), a step no longer queued changes nothing.
   Its dependants whose dependencies are all met are pushed by the same call, their
   arguments filled with the results' JSON text, byte for byte.
3. ``cancel``: the workflow pushes nothing more; its waiting and queued steps are cancelled,
   the queued ones still in a queue taken out of it (the others are the caller's to cancel).

Each script includes ``batch_lib.lua``: the steps it pushes are registered with the batch as
``batch_push.lua`` would register them, before the batch counts the step that pushed them,
so the batch never sees a moment with nothing pending while the workflow goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis

from ..batch import accounting
from ..connections.lending import redis as lent_redis
from ..errors import RedisUnavailable, WorkflowError
from ..scripts import Script
from ..stored import shown, text

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["CANCEL_SCAN", "COUNT_RETRIES", "Child", "cancel", "finish", "finish_retried",
           "start"]

log = logging.getLogger("wurk")

_LIB = ("batch_lib.lua", "workflow_lib.lua")
_START = Script("workflow_start.lua", prelude=_LIB)
_STEP = Script("workflow_step.lua", prelude=_LIB)
_CANCEL = Script("workflow_cancel.lua", prelude=_LIB)
# Waits between the attempts to count a step while Redis cannot be reached (as a batch
# count does): about 3.5 s, enough for a restart or a failover.
COUNT_RETRIES = (0.1, 0.25, 0.5, 1.0, 1.5)
# Queue entries a cancel's script reads at most, in all, looking for the queued steps: a
# step past them is cancelled with ``wurk.cancel`` instead (which pages through the queue
# from the client), never by one script reading a queue of a million jobs.
CANCEL_SCAN = 10_000

# A child a step added at run time: (name, queue, jid, payload text).
Child = tuple[str, str, str, str]


def _common(config: Config) -> list[object]:
    return [config.keys.prefix, config.timestamp_format, int(config.dead_timeout), ""]


def start(conn: Any, config: Config, *, wid: str, name: str, policy: str, ttl: int,
          steps: Sequence[tuple[str, str, int]], then: dict[str, list[str]],
          subs: Sequence[tuple[str, str, list[str], int]] = ()) -> int:
    """Write the graph (steps: name, template, dependencies; subs: each nested workflow's
    name, policy, leaves and job steps) and push its first steps; returns how many were
    pushed. ``WorkflowError`` when the id is taken, or when the workflow's batch or the
    queue of a step it would push now holds another Redis type (nothing written)."""
    args: list[object] = [*_common(config), wid, name, policy, ttl, config.keys.workflows]
    for step in steps:
        args += list(step)
    args.append("--")
    for node, dependants in then.items():
        args += [node, " ".join(dependants)]
    args.append("--")
    for sub, policy, leaves, count in subs:
        args += [sub, policy, " ".join(leaves), count]
    try:
        return int(_START.call(conn, [], args))
    except redis.ResponseError as exc:
        if str(exc).startswith(("WORKFLOWEXISTS", "WORKFLOWBROKEN")):
            raise WorkflowError(str(exc).split(" ", 1)[1]) from None
        raise


def finish(conn: Any, config: Config, wid: str, step: str, outcome: str, value: str = "",
           children: Sequence[Child] = ()) -> bool:
    """Count a step's end (``success`` with its value's JSON, or ``death``); True when it
    changed the workflow, False when it was counted already. What the script found stored
    that wurk never writes (a key of another Redis type: nothing was counted; a count that
    is none, a step template that is none: what depends on it waits) is named in a
    warning."""
    args: list[object] = [*_common(config), wid, step, outcome, value]
    for child in children:
        args += list(child)
    reply = _STEP.call(conn, [], args)
    counted, problems = int(reply[0]), reply[1:]
    for problem in problems:
        found = text(problem)  # the batch's (batch_lib.lua's) say by what already
        log.warning("workflow %s, step %s: %s%s%s", wid, shown(step, 200), shown(found, 500),
                    "" if "written by something else" in found
                    else " (written by something else)",
                    "" if counted else "; the step's end is not counted")
    return bool(counted)


def finish_retried(config: Config, wid: str, step: str, outcome: str, value: str = "",
                   children: Sequence[Child] = ()) -> bool:
    """``finish``, sent again while Redis is unreachable (it is idempotent per step); raises
    the last ``RedisUnavailable`` when it never got through."""
    for wait in COUNT_RETRIES:
        try:
            with lent_redis(config) as conn:
                return finish(conn, config, wid, step, outcome, value, children)
        except RedisUnavailable:
            time.sleep(wait)  # a restart or a failover: safe to send again
    with lent_redis(config) as conn:
        return finish(conn, config, wid, step, outcome, value, children)


def cancel(conn: Any, config: Config, wid: str) -> tuple[str, list[str], list[str]]:
    """Cancel workflow ``wid``: (its state before, jids taken out of their queue, jids of
    queued steps not found in a queue — running, retrying or scheduled, or past the
    ``CANCEL_SCAN`` entries the script reads). A workflow that
    had ended already is left as it was; one that does not exist, or one of whose keys holds
    another Redis type (nothing is changed), raises ``WorkflowError``."""
    try:
        reply = [text(part) for part in _CANCEL.call(conn, [], [*_common(config), wid,
                                                                CANCEL_SCAN])]
    except redis.ResponseError as exc:
        if str(exc).startswith("WORKFLOWBROKEN"):
            raise WorkflowError(str(exc).split(" ", 1)[1]) from None
        raise
    if not reply[0]:
        raise WorkflowError(f"workflow {wid} does not exist (expired, or never started)")
    split = reply.index("--")
    end = reply.index("--", split + 1) if "--" in reply[split + 1:] else len(reply)
    removed, others = reply[1:split], reply[split + 1:end]
    if end < len(reply):  # the batch's side (the script took those out of it too): what it
        accounting.fired(config, wid, reply[end + 1:])  # fired, what it found stored
    return reply[0], removed, others
