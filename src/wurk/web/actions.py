"""What the dashboard's buttons do, shared by the pages' forms and the JSON API.

1. Job-set entries: retry now, add to queue, kill, delete — one, the selected ones, or all.
2. Queues: pause, unpause, clear; delete one job by its key (``<index>-<sha1>``, what the
   page lists) or, for API clients written before keys, by its stored text.
3. Processes: quiet or stop one, or every process that is not embedded in another program.
4. Cancel a job by its jid (``wurk.cancel``): from a running job's row, or the selected
   retries.

Each returns how many things it acted on. An entry another process moved first is simply
not counted (an action acts only on what is still there: two admins may click at once). An
action name a kind does not allow raises ``UnknownAction``; its message is fixed text, safe to show.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ..api import DeadSet, ProcessSet, Queue, RetrySet, ScheduledSet, SortedEntry
from ..config import Config
from ..control.cancelling import cancel
from ..errors import InspectionError
from ..iteration.control import check_jid
from .data import SetKind, entry, parse_queue_key

__all__ = ["QUEUE_ACTIONS", "UnknownAction", "cancel_jobs", "delete_queue_job",
           "delete_queue_text", "process_action", "queue_action", "set_action", "set_bulk"]

log = logging.getLogger("wurk.web")

QUEUE_ACTIONS = ("pause", "unpause", "clear")
PROCESS_ACTIONS = ("quiet", "stop")


class UnknownAction(ValueError):
    """An action the target does not offer."""


def check(action: str, allowed: tuple[str, ...]) -> None:
    if action not in allowed:
        raise UnknownAction(f"Unknown action; choose one of: {', '.join(allowed)}.")


# -- job sets ---------------------------------------------------------------------------------
def set_action(config: Config, kind: SetKind, action: str, keys: Iterable[str]) -> int:
    """``action`` on each entry named in ``keys`` that is still there."""
    check(action, kind.actions)
    done = 0
    for key in keys:
        found = entry(config, kind, key)
        if found is not None and act_on(found, action):
            done += 1
    return done


def act_on(found: SortedEntry, action: str) -> bool:
    """One entry; an entry that cannot be pushed (not a job payload) is logged and skipped."""
    try:
        if action == "retry":
            return found.retry()
        if action == "add_to_queue":
            return found.add_to_queue()
        if action == "kill":
            return found.kill()
        if action == "cancel":
            return cancel_jobs(found.parent.config, [found.jid]) == 1
        return found.delete()
    except InspectionError as exc:
        log.warning("dashboard: %s on %s refused: %s", action, found.entry_id, exc)
        return False


def set_bulk(config: Config, kind: SetKind, action: str) -> int:
    """``action`` on every entry of the set."""
    check(action, kind.bulk)
    job_set = kind.job_set(config)
    if action == "delete":
        return job_set.clear()
    if action == "kill" and isinstance(job_set, RetrySet):
        return job_set.kill_all()
    if action == "add_to_queue" and isinstance(job_set, ScheduledSet):
        return job_set.add_all_to_queue()
    if action == "retry" and isinstance(job_set, (RetrySet, DeadSet)):
        return job_set.retry_all()
    raise UnknownAction(f"{kind.title} offers no bulk {action}.")


# -- queues -----------------------------------------------------------------------------------
def named_queue(config: Config, name: str) -> Queue:
    try:
        return Queue(name, config)
    except ValueError:
        raise UnknownAction("That is not a queue's name.") from None


def queue_action(config: Config, name: str, action: str) -> int:
    """Pause, unpause (1 either way) or clear (the number of jobs deleted)."""
    check(action, QUEUE_ACTIONS)
    queue = named_queue(config, name)
    if action == "clear":
        return queue.clear()
    if action == "pause":
        queue.pause()
    else:
        queue.unpause()
    return 1


def delete_queue_job(config: Config, name: str, key: str) -> int:
    """Delete the job a queue page listed under ``key``; 0 when it is gone (or moved out of
    reach, or the key is not one)."""
    parsed = parse_queue_key(key)
    queue = named_queue(config, name)
    return 0 if parsed is None else int(queue.delete_listed(*parsed))


def delete_queue_text(config: Config, name: str, raw: str) -> int:
    """Delete one job whose stored text is exactly ``raw``."""
    return int(named_queue(config, name).delete(raw))


# -- processes --------------------------------------------------------------------------------
def process_action(config: Config, action: str, identity: str | None) -> int:
    """Quiet or stop the process ``identity``, or every non-embedded one when None."""
    check(action, PROCESS_ACTIONS)
    done = 0
    for process in ProcessSet(config).iterate(clean=False):
        if identity is not None and process.identity != identity:
            continue
        if process.embedded:
            continue  # only its host can stop it (the API refuses, with reason)
        if action == "quiet":
            process.quiet()
        else:
            process.stop()
        done += 1
    return done


# -- cancelling -------------------------------------------------------------------------------
def cancel_jobs(config: Config, jids: Iterable[object]) -> int:
    """Cancel each of ``jids`` that can be a jid; how many."""
    done = 0
    for jid in jids:
        try:
            cancel(check_jid(jid), config=config)
        except ValueError:
            continue
        done += 1
    return done
