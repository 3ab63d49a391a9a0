"""What ``wurk top``'s action keys do: the dashboard's own actions, called with what was
confirmed, off the UI thread.

1. ``Act``: one action a tab offers — its key, its name in the dashboard's actions, what a
   person calls it, whether the confirmation may widen it to everything of its kind.
2. The operations (``on_set``, ``on_queue``, ``on_queue_job``, ``on_processes``,
   ``on_loop``, ``on_batch``) call exactly what the dashboard's buttons call —
   ``wurk.web.actions``, ``wurk.web.periodic.act``, ``wurk.web.batches.act`` and
   ``retry_dead`` — so a job retried here is retried the way the dashboard retries it. There
   is no second implementation of an action.
3. Each returns one sentence for the person ("Retried 3 jobs."), counting what was acted on:
   an entry another process moved first is simply not counted, as on the dashboard. An
   action a target refuses (a loop whose definition cannot be read, a name that cannot be a
   queue's) is an ``Refused`` with a fixed sentence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from starlette.exceptions import HTTPException

from ..config import Config
from ..web import actions
from ..web import batches as web_batches
from ..web import periodic as web_periodic
from ..web.data import SET_KINDS

__all__ = ["BATCH_DELETE", "CLEAR", "DELETE", "DELETE_JOB", "ENQUEUE", "INVALIDATE", "KILL",
           "PAUSE", "PUSH_NOW", "QUIET", "RETRY", "RETRY_DEAD", "SET_ACTS", "STOP", "UNPAUSE",
           "Act", "Refused", "on_batch", "on_loop", "on_processes", "on_queue", "on_queue_job",
           "on_set", "set_acts"]


@dataclass(frozen=True)
class Act:
    """An action key of a tab."""

    key: str  # the key that asks for it: upper case, as kiq's (Shift means "I mean it")
    action: str  # its name in the dashboard's actions
    verb: str  # "Retry"
    done: str  # "Retried"
    bulk: bool = False  # the confirmation offers "all of them"


# What each tab offers (the names are the dashboard's actions).
RETRY = Act("R", "retry", "Retry", "Retried", bulk=True)
DELETE = Act("D", "delete", "Delete", "Deleted", bulk=True)
KILL = Act("K", "kill", "Kill", "Killed", bulk=True)
ENQUEUE = Act("E", "add_to_queue", "Enqueue", "Enqueued", bulk=True)
SET_ACTS = {act.action: act for act in (RETRY, ENQUEUE, KILL, DELETE)}
QUIET = Act("Q", "quiet", "Quiet", "Quieted")
STOP = Act("T", "stop", "Stop", "Stopped")
PAUSE = Act("P", "pause", "Pause", "Paused")
UNPAUSE = Act("P", "unpause", "Unpause", "Unpaused")
CLEAR = Act("D", "clear", "Clear", "Cleared")
DELETE_JOB = Act("D", "delete", "Delete", "Deleted")
PUSH_NOW = Act("E", "enqueue", "Push now", "Pushed")
BATCH_DELETE = Act("D", "delete", "Delete", "Deleted")
INVALIDATE = Act("I", "invalidate", "Invalidate", "Invalidated")
RETRY_DEAD = Act("R", "retry", "Retry the dead jobs of", "Retried")


def set_acts(actions: Sequence[str]) -> tuple[Act, ...]:
    """The keys for the actions the dashboard offers on a job set's entries (an action it
    gained that has no key here yet is not offered, rather than guessed at)."""
    return tuple(SET_ACTS[action] for action in actions if action in SET_ACTS)


class Refused(Exception):
    """The target refused the action; the message is fixed text, safe to show."""


def _things(number: int, one: str, many: str) -> str:
    return f"{number:,} {one if number == 1 else many}"


def on_set(config: Config, kind: str, act: Act, keys: Sequence[str], everything: bool) -> str:
    """Retry, add to queue, kill or delete entries of a job set, or all of them."""
    found = SET_KINDS[kind]
    try:
        if everything:
            number = actions.set_bulk(config, found, act.action)
        else:
            number = actions.set_action(config, found, act.action, keys)
    except actions.UnknownAction as exc:
        raise Refused(str(exc)) from None
    return f"{act.done} {_things(number, 'job', 'jobs')}."


def on_queue(config: Config, name: str, act: Act) -> str:
    """Pause, unpause or clear a queue."""
    try:
        number = actions.queue_action(config, name, act.action)
    except actions.UnknownAction as exc:
        raise Refused(str(exc)) from None
    if act.action == "clear":
        return f"Deleted {_things(number, 'job', 'jobs')} from the queue."
    return f"Queue {act.done.lower()}."


def on_queue_job(config: Config, name: str, keys: Sequence[str]) -> str:
    """Delete jobs of a queue by the keys its page listed them under."""
    try:
        number = sum(actions.delete_queue_job(config, name, key) for key in keys)
    except actions.UnknownAction as exc:
        raise Refused(str(exc)) from None
    return f"Deleted {_things(number, 'job', 'jobs')}."


def on_processes(config: Config, act: Act, identities: Sequence[str]) -> str:
    """Quiet or stop processes (an embedded one refuses: only its host can)."""
    number = sum(actions.process_action(config, act.action, identity)
                 for identity in identities)
    told = _things(number, "process", "processes")
    skipped = len(identities) - number
    note = f" ({_things(skipped, 'process', 'processes')} embedded in another program or " \
           "gone: only its host can stop it)" if skipped > 0 else ""
    return f"Told {told} to {act.verb.lower()}; each hears it at its next heartbeat.{note}"


def on_loop(config: Config, lid: str, act: Act) -> str:
    """Pause, unpause or push now a periodic loop."""
    try:
        outcome, jid = web_periodic.act(config, lid, act.action)
    except HTTPException as exc:
        raise Refused(str(exc.detail)) from None
    if outcome == "gone":
        return "That loop is gone: the leader pruned it."
    if outcome == "stopped":
        return "A client middleware stopped the push."
    if act.action == "enqueue":
        return f"Job pushed now (jid {jid})."
    return f"Loop {act.done.lower()}."


def on_batch(config: Config, bid: str, act: Act) -> str:
    """Delete or invalidate a batch, or send its dead jobs back to their queues."""
    try:
        if act.action == "retry":
            outcome = web_batches.retry_dead(config, bid)
        else:
            outcome = web_batches.act(config, bid, act.action)
    except HTTPException as exc:
        raise Refused(str(exc.detail)) from None
    if outcome == "gone":
        return "That batch is gone: it expired or was deleted."
    if act.action == "retry":
        return "Its dead jobs were sent back to their queues."
    return f"Batch {act.done.lower()}."
