"""Periodic loops as the cluster's leader registered them (``periodic``, ``loops:<lid>``,
``loop-history:<lid>``), for the dashboard, the CLI and tests.

1. ``PeriodicSet.loops()`` — every loop, each a ``LoopRecord`` read through the checked
   readers (``values``): a field that cannot be read (a next-run mark that is not a time,
   options that are not a JSON object) becomes an ``Invalid`` and a line in ``problems``; a
   cron string that does not parse or an unknown zone, a line in ``problems`` — never an
   exception: the data may have been written by Ruby, by hand or by an attacker. Text is
   made printable and cut.
2. ``history(lid)`` — its recent pushes, newest first.
3. ``pause`` / ``unpause`` (the leader passes the ticks of a paused loop over) and
   ``enqueue_now`` (one job pushed at once through the client, recorded in the history;
   the loop's own ticks are untouched).
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from .. import payload as P
from .. import scripts
from .. import stored as values
from ..client.core import Client
from ..config import Config, default_config
from ..errors import ConfigError, InspectionError, InvalidArguments, InvalidPayload
from ..job import registry
from ..periodic.cron import Schedule
from ..periodic.loops import HISTORY_LIMIT, epoch_field
from ..stored import Invalid
from .queues import sscan_page

__all__ = ["LoopRecord", "PeriodicSet"]

# What a page shows of a text field at most: a hostile multi-megabyte cron string is cut.
# Loops listed at most: a deployment has tens; a ``periodic`` set of a million members costs
# a page what this many do.
LOOP_CAP = 2_000
TEXT_LIMIT = 200
FIELDS = ("schedule", "klass", "options", "tz", "paused", "lf", "nf")


def _shown(raw: Any) -> str:
    return values.shown(raw, TEXT_LIMIT)


def _mark(raw: Any) -> int | Invalid | None:
    """``lf`` / ``nf``: whole epoch seconds as the leader writes them (not Sidekiq's
    milliseconds), or ``Invalid``."""
    if raw is None:
        return None
    found = epoch_field(raw)
    return found if found is not None else values.invalid(raw, "a time (epoch seconds)")


@dataclass
class LoopRecord:
    """One loop as stored; every field checked."""

    lid: str
    schedule: str
    klass: str
    tz: str
    options: dict[str, Any]
    paused: bool
    last_run: int | Invalid | None
    next_run: int | Invalid | None
    problems: list[str] = field(default_factory=list)
    next_run_local: str | None = None
    history: list[tuple[int, str]] = field(default_factory=list)

    @classmethod
    def read(cls, lid: str, values: list[Any]) -> LoopRecord:
        schedule, klass, options, tz, paused, lf, nf = values
        record = cls(lid, _shown(schedule), _shown(klass), _shown(tz), {}, _shown(paused) == "1",
                     _mark(lf), _mark(nf))
        record._check(options)
        return record

    def _check(self, options: Any) -> None:
        parsed = values.json_object(options)
        if isinstance(parsed, Invalid):
            self.problems.append("options are not a JSON object")
        else:
            self.options = parsed or {}
        if not self.klass:
            self.problems.append("no job class")
        if isinstance(self.next_run, Invalid):
            self.problems.append("the next run is not a time")
        if isinstance(self.last_run, Invalid):
            self.problems.append("the last run is not a time")
        zone = self._zone()
        if zone is not None and isinstance(self.next_run, int):
            self.next_run_local = dt.datetime.fromtimestamp(self.next_run, zone).isoformat()

    def _zone(self) -> dt.tzinfo | None:
        try:
            return Schedule.parse(self.schedule, self.tz, seconds=True).zone
        except Exception as exc:  # any text at all may be stored: never a failed page
            self.problems.append(f"cannot be read: {_shown(str(exc))}")
            return None

    @property
    def args(self) -> list[Any]:
        args = self.options.get(P.ARGS)
        return args if isinstance(args, list) else []

    @property
    def queue(self) -> str:
        queue = self.options.get(P.QUEUE)
        return queue if isinstance(queue, str) and queue else P.DEFAULT_QUEUE

    def to_dict(self) -> dict[str, Any]:
        return {
            "lid": self.lid, "schedule": self.schedule, "klass": self.klass, "tz": self.tz,
            "queue": self.queue, "args": self.args, "options": self.options,
            "paused": self.paused, "last_run": self.last_run, "next_run": self.next_run,
            "next_run_local": self.next_run_local, "problems": self.problems,
            "history": [{"fired_at": at, "jid": jid} for at, jid in self.history],
        }


class PeriodicSet:
    """The loops in Redis, in Ruby wurk's layout (docs/periodic.md)."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config if config is not None else default_config()
        self.pool = self.config.pool("api")

    def lids(self) -> list[str]:
        """The loops' ids, sorted; at most ``LOOP_CAP`` of them."""
        found: set[str] = set()
        cursor = 0
        key = self.config.keys.periodic
        while len(found) < LOOP_CAP:
            cursor, names = self.pool.run(partial(sscan_page, key, cursor), idempotent=True)
            found.update(names)
            if cursor == 0:
                break
        return sorted(found)[:LOOP_CAP]

    def loops(self, *, history: int = 0) -> list[LoopRecord]:
        """Every loop (at most ``LOOP_CAP``), ordered by next run (unknown last), with
        ``history`` recent pushes."""
        return self._read(self.lids(), history)

    def _read(self, lids: list[str], history: int) -> list[LoopRecord]:
        keys = self.config.keys

        def read(r: Any) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for lid in lids:
                pipe.hmget(keys.loop(lid), *FIELDS)
                pipe.lrange(keys.loop_history(lid), 0, max(history, 1) - 1)
            return list(pipe.execute(raise_on_error=False))

        replies = self.pool.run(read, idempotent=True) if lids else []
        records = []
        for lid, stored, past in zip(lids, replies[0::2], replies[1::2], strict=True):
            record = self._record(lid, stored)
            if history and not isinstance(past, Exception):
                record.history = [entry for raw in past if (entry := _entry(raw))]
            records.append(record)
        return sorted(records, key=_by_next_run)

    def loop(self, lid: str, *, history: int = HISTORY_LIMIT) -> LoopRecord | None:
        """One loop, by id; None when the ``periodic`` set does not list it."""
        key = self.config.keys.periodic
        if not self.pool.run(lambda r: r.sismember(key, lid), idempotent=True):
            return None
        return self._read([lid], history)[0]

    @staticmethod
    def _record(lid: str, stored: Any) -> LoopRecord:
        if isinstance(stored, Exception):  # the key holds another type
            record = LoopRecord(lid, "", "", "", {}, False, None, None)
            record.problems.append("the loop's key is not a hash")
            return record
        return LoopRecord.read(lid, list(stored))

    # -- actions ----------------------------------------------------------------------------
    def pause(self, lid: str) -> bool:
        return self._set_paused(lid, True)

    def unpause(self, lid: str) -> bool:
        return self._set_paused(lid, False)

    def _set_paused(self, lid: str, paused: bool) -> bool:
        script = self.pool.client.register_script(scripts.source("periodic_pause.lua"))
        key = self.config.keys.loop(lid)
        done = self.pool.run(lambda r: script(keys=[key], args=["1" if paused else "0"],
                                              client=r))
        return bool(done)

    def enqueue_now(self, lid: str) -> str | None:
        """Push the loop's job once, now; its jid (None when a middleware stopped it)."""
        record = self.loop(lid, history=0)
        if record is None:
            raise InspectionError(f"no periodic loop {lid!r}")
        if "options are not a JSON object" in record.problems or not record.klass:
            raise InspectionError(f"periodic loop {lid!r} cannot be pushed: "
                                  + "; ".join(record.problems))
        item = {**self._defaults(record.klass),
                **{k: v for k, v in record.options.items() if k != P.ARGS},
                P.CLASS: record.klass, P.ARGS: record.args}
        for reserved in (P.JID, P.AT):
            item.pop(reserved, None)
        try:
            jid = Client(self.config, pool=self.pool).push(item)
        except (InvalidPayload, InvalidArguments, ConfigError) as exc:  # stored, so untrusted
            raise InspectionError(f"periodic loop {lid!r} cannot be pushed: {exc}") from None
        if jid is not None:
            self._remember(lid, jid)
        return jid

    @staticmethod
    def _defaults(klass: str) -> dict[str, Any]:
        """The job's own options when this process has it registered (a dashboard process
        may not load the job modules: then the loop's options alone)."""
        return dict(registry.lookup(klass).options) if klass in registry else {}

    def _remember(self, lid: str, jid: str) -> None:
        key = self.config.keys.loop_history(lid)

        def send(r: Any) -> None:
            pipe = r.pipeline(transaction=True)
            pipe.lpush(key, P.dumps([int(time.time()), jid]))
            pipe.ltrim(key, 0, HISTORY_LIMIT - 1)
            pipe.execute()

        try:
            self.pool.run(send)
        except Exception:  # the job is pushed; a history line missing is not worth failing
            return


def _by_next_run(record: LoopRecord) -> tuple[bool, int, str]:
    """Soonest first; a loop whose next run is unknown or unreadable last."""
    known = isinstance(record.next_run, int)
    return (not known, record.next_run if isinstance(record.next_run, int) else 0, record.lid)


def _entry(raw: Any) -> tuple[int, str] | None:
    try:  # nesting deeper than Python parses is a ValueError here, not a RecursionError
        at, jid = P.loads_json(raw)
    except (ValueError, TypeError):
        return None
    when = epoch_field(str(at)) if isinstance(at, (int, float)) and not isinstance(at, bool) \
        else None
    return (when, _shown(jid)) if when is not None and isinstance(jid, str) else None
