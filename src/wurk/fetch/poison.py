"""Poison pills: a job that keeps taking its worker down is killed, not requeued again.

1. The reaper's recovery script counts each recovery of a jid in
   ``super_fetch:recovered:<jid>`` (72 h TTL); the ACK deletes the counter, so only
   consecutive recoveries without a completion count.
2. At the third, ``kill_poisoned`` takes the job out of its in-flight list and into the
   dead set with a ``wurk.Poisoned`` error in one script (``Morgue.take_listed``), honouring
   ``dead: false`` (discard), then runs the death handlers, so batch callbacks are not
   stranded, and tells the poison callbacks ``{jid, klass, count, queue}``. Only the reaper
   that took it does: another reaper racing it finds the list without it.
3. ``on_poison(fn)`` registers a callback (``wurk.reporting.Callbacks``): the same callable twice is
   one registration; the returned handle's ``remove()`` is idempotent. The configuration's
   ``on_recover`` hook gets ``(job text, pill)`` too, and ``wurk:stat:poisoned`` counts kills
   cluster-wide.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .. import payload as P
from ..config import Config
from ..errors import Poisoned, UnparseablePayload
from ..morgue import Morgue
from ..reporting import Callbacks, Registration, report_error, run_death_handlers

__all__ = ["POISON_THRESHOLD", "POISON_TTL", "Registration", "kill_poisoned", "on_poison"]

log = logging.getLogger("wurk")

# Three recoveries within three days: a crash that follows a job that often is its doing.
POISON_THRESHOLD = 3
# Sidekiq Pro's counter lives 72 h; tools watching `super_fetch:recovered:*` expect that.
POISON_TTL = 72 * 60 * 60

PoisonCallback = Callable[[dict[str, Any]], None]
_callbacks: Callbacks[dict[str, Any]] = Callbacks()


def on_poison(callback: PoisonCallback) -> Registration:
    return _callbacks.add(callback)


def kill_poisoned(config: Config, morgue: Morgue, raw: bytes, queue: str, count: int, *,
                  source: str) -> bool:
    """Out of the in-flight list ``source`` and into the dead set (or discarded) with a
    ``Poisoned`` error, then death handlers and poison callbacks; False when ``raw`` was no
    longer in ``source`` (another reaper took it): nothing done."""
    try:
        job = P.loads(raw)
    except UnparseablePayload:
        if morgue.take_listed(source, raw, raw):
            log.warning("killed an unparseable poison pill from queue %s", queue)
            return True
        return False
    klass = str(job.get(P.WRAPPED) or job.get(P.CLASS) or "?")
    error = Poisoned(f"{klass} was recovered {count} times without completing")
    job[P.ERROR_CLASS] = P.error_class_name(error)
    job[P.ERROR_MESSAGE] = str(error)
    job.setdefault(P.FAILED_AT, P.write_time(config.timestamp_format))
    discard = job.get(P.DEAD) is False
    if discard:
        job[P.DISCARDED_AT] = P.write_time(config.timestamp_format)
    if not morgue.take_listed(source, raw, None if discard else P.dumps(job)):
        return False
    run_death_handlers(config, job, error)
    log.warning("%s (jid %s) killed as a poison pill after %d recoveries", klass,
                job.get(P.JID), count)
    pill = {"jid": job.get(P.JID), "klass": klass, "count": count, "queue": queue}
    _count_kill(config)
    _tell_hook(config, raw, pill)
    _notify(pill, config)
    return True


def _count_kill(config: Config) -> None:
    try:
        config.pool("internal").run(lambda r: r.incr(config.keys.stat_poisoned))
    except Exception as exc:  # the kill is done; only its count is lost
        report_error(config, exc, {"context": "counting a poison kill"})


def _tell_hook(config: Config, raw: bytes, pill: dict[str, Any]) -> None:
    hook = config.on_recover
    if hook is None:
        return
    try:
        hook(raw.decode("utf-8", "replace"), pill)
    except Exception as exc:
        report_error(config, exc, {"context": "on_recover hook", "pill": pill})


def _notify(pill: dict[str, Any], config: Config) -> None:
    _callbacks.notify(config, pill, {"context": "poison callback", "pill": pill})
