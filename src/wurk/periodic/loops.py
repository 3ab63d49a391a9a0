"""Periodic (cron) jobs: what is registered, and what is due — no Redis here.

1. ``Loop``: one registration — a ``Schedule`` (``wurk.periodic.cron``), the job's wire name and its
   options (``args`` among them). ``lid`` is the loop's id in Redis, the first 16 hex
   digits of SHA-1 over ``"<cron>|<job>|<options JSON, keys sorted>"`` (Ruby wurk's rule;
   ``"|<zone>"`` is appended when the loop has a zone, so one cron in two zones is two
   loops), so registering the same loop again changes nothing.
2. ``Periodic``: ``config.periodic`` — ``register(cron, job, tz=…, args=[…], **options)``
   at boot, or the YAML ``periodic:`` list. A bad cron, zone or option fails at once with
   every offending entry named; job names are checked once the job modules are loaded
   (``check_jobs``: at boot and by ``wurk periodic check``).
3. ``plan``: given a loop's stored next tick (``nf``), last fired tick (``lf``) and Redis's
   time, what the leader does now. The rule that makes failover skip nothing without
   backfilling an outage: of the ticks passed since ``nf``, the newest fires if it is less
   than ``catch_up`` seconds old; the others are counted, warned about, never pushed.
   A paused loop passes its ticks over silently.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Container, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import payload as P
from ..errors import ConfigError, InvalidArguments
from ..options import validate_options
from .cron import Schedule

__all__ = ["CLOCK_SLACK", "HISTORY_LIMIT", "Due", "Loop", "Periodic", "epoch_field", "plan",
           "tick_jid"]

# Options a loop may not set: the job's identity and timing belong to the loop itself.
RESERVED_OPTIONS = frozenset({P.CLASS, P.JID, P.AT, "wait", "wait_until", "sync",
                              P.CREATED_AT, P.ENQUEUED_AT})
# What a YAML entry may say; anything else is a typo until proven otherwise (custom options
# for middleware go under ``options:``).
ENTRY_KEYS = ("cron", "job", "tz", "args", P.QUEUE, P.RETRY, P.RETRY_FOR, P.RETRY_QUEUE,
              P.DEAD, P.BACKTRACE, P.TAGS, "options")
# Missed ticks counted one by one at most; past this a warning says "more than".
MISSED_COUNT_LIMIT = 10_000
# Entries kept in loop-history:<lid> (Ruby wurk's cap).
HISTORY_LIMIT = 25
# Epoch seconds outside (0, this) are not a time any loop fired or will fire at.
EPOCH_LIMIT = 10**11
# A last fired tick (lf) later than Redis's time by more than this is no tick that fired
# (none fires before its time; this much allows Redis's clock to be set back): it is
# disregarded, here and in periodic_fence.lua (the same 3600).
CLOCK_SLACK = 3600


@dataclass(frozen=True)
class Loop:
    """One periodic registration."""

    schedule: Schedule
    job: str
    options: Mapping[str, Any]

    @property
    def cron(self) -> str:
        return self.schedule.text

    @property
    def tz(self) -> str:
        return self.schedule.tz

    @property
    def args(self) -> list[Any]:
        return list(self.options.get(P.ARGS, []))

    @property
    def options_json(self) -> str:
        """The ``options`` field in Redis: compact JSON, top-level keys sorted."""
        return P.dumps(dict(sorted(self.options.items())))

    @property
    def lid(self) -> str:
        text = f"{self.cron}|{self.job}|{self.options_json}"
        if self.tz:
            text += f"|{self.tz}"
        return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]

    def item(self, defaults: Mapping[str, Any]) -> dict[str, Any]:
        """What to push: the job's own options, then the loop's, its class and args."""
        options = {k: v for k, v in self.options.items() if k != P.ARGS}
        return {**defaults, **options, P.CLASS: self.job, P.ARGS: self.args}

    def describe(self) -> str:
        zone = f" ({self.tz})" if self.tz else ""
        return f"{self.cron!r}{zone} → {self.job}"


def epoch_field(raw: object) -> int | None:
    """A stored epoch second (``"1700000000"``, ``"1700000000.5"``), or None when it is
    anything else: the field may have been written by Ruby, by hand or by an attacker."""
    if isinstance(raw, bytes):
        raw = raw.decode("ascii", "replace")
    if not isinstance(raw, str):
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    if not math.isfinite(value) or not 0 < value < EPOCH_LIMIT:
        return None
    return int(value)


def tick_jid(lid: str, tick: int) -> str:
    """The jid of a loop's job for one tick: a function of both, so a tick pushed twice
    by any path would carry one jid twice, which unique-job middleware can refuse."""
    return hashlib.sha1(f"{lid}:{tick}".encode()).hexdigest()[:24]


class Periodic:
    """The loops this process registers (``config.periodic``)."""

    def __init__(self, *, seconds_field: bool = False, tz: str | None = None) -> None:
        self.seconds_field = seconds_field
        self.tz = tz  # the zone of a loop registered without one (``periodic_tz``)
        self._loops: dict[str, Loop] = {}
        self._frozen = False

    def register(self, cron: str, job: Any, *, tz: str | None = None,
                 args: Sequence[Any] = (), **options: Any) -> Loop:
        """Push ``job`` (a ``@wurk.job`` function, a ``wurk.Job`` class or a wire name) on
        every tick of ``cron`` in zone ``tz`` (default ``periodic_tz``, else UTC), with
        ``args`` and ``options`` (``queue``, ``retry``…) over the job's own."""
        if self._frozen:
            raise ConfigError("periodic loops are registered before the worker starts; "
                              "the configuration is frozen")
        loop = make_loop(cron, job, tz=self.tz if tz is None else tz, args=args,
                         options=options,
                         seconds=self.seconds_field)
        self._loops.setdefault(loop.lid, loop)  # the same loop twice is one loop
        return loop

    def load(self, entries: object, *, source: str = "configuration") -> None:
        """The YAML ``periodic:`` section: a list of ``{cron:, job:, tz:, args:, …}``.
        Every bad entry is named in one ``ConfigError``."""
        if not isinstance(entries, list):
            raise ConfigError(f"{source}: periodic must be a list of entries such as "
                              "{cron: '*/5 * * * *', job: CleanupJob}")
        problems = []
        for index, entry in enumerate(entries, start=1):
            try:
                _register_entry(self, entry_arguments(entry))
            except ConfigError as exc:
                problems.append(f"periodic entry {index} ({describe_entry(entry)}): {exc}")
        if problems:
            raise ConfigError(f"{source}: " + "; ".join(problems))

    def check_jobs(self, known: Container[str]) -> None:
        """Every loop's job must be registered in this process (the leader builds the
        payload from its definition); raises naming each loop whose job is not."""
        unknown = [loop for loop in self._loops.values() if loop.job not in known]
        if unknown:
            raise ConfigError("; ".join(
                f"periodic loop {loop.describe()}: no job named {loop.job!r} is registered "
                "(load its module with -r, or check the name)" for loop in unknown))

    def check_seconds(self) -> None:
        if self.seconds_field:
            return
        for loop in self._loops.values():
            if loop.schedule.has_seconds:
                raise ConfigError(f"periodic loop {loop.describe()} has a seconds field; "
                                  "set periodic_seconds_field: true to allow one")

    def freeze(self) -> None:
        self._frozen = True

    def loops(self) -> list[Loop]:
        return list(self._loops.values())

    def __iter__(self) -> Iterator[Loop]:
        return iter(self.loops())

    def __len__(self) -> int:
        return len(self._loops)


def make_loop(cron: object, job: Any, *, tz: object = None, args: object = (),
              options: Mapping[str, Any] | None = None, seconds: bool = False) -> Loop:
    """A checked ``Loop``; ``ConfigError`` names the field and the fix."""
    schedule = Schedule.parse(cron, tz, seconds=seconds)
    name = job_name(job)
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise ConfigError(f"args {args!r} must be a list of job arguments")
    opts = dict(options or {})
    reserved = sorted(RESERVED_OPTIONS & set(opts))
    if reserved:
        raise ConfigError(f"option {reserved[0]!r} cannot be set on a periodic loop: the "
                          "loop decides the job's class, jid and time")
    checked = validate_options(opts, where=f"periodic loop for {name}")
    try:
        P.check_args(list(args))
    except InvalidArguments as exc:
        raise ConfigError(f"args of periodic loop for {name}: {exc}") from None
    checked[P.ARGS] = list(args)
    return Loop(schedule, name, checked)


def job_name(job: Any) -> str:
    """The wire name of a job function or class, or the name given as text."""
    if isinstance(job, str):
        if not job:
            raise ConfigError("job must name a job; it is empty")
        return job
    definition = getattr(job, "definition", None)
    name = getattr(definition, "name", None)
    if isinstance(name, str):
        return name
    raise ConfigError(f"job {job!r} must be a @wurk.job function, a wurk.Job class or a "
                      "job's wire name")


def entry_arguments(entry: object) -> tuple[Any, ...]:
    """(cron, job, tz, args, options) of a YAML entry."""
    if not isinstance(entry, dict):
        raise ConfigError("an entry must be a mapping such as {cron: '0 * * * *', job: Name}")
    entry = {str(k).lstrip(":"): v for k, v in entry.items()}
    unknown = sorted(set(entry) - set(ENTRY_KEYS))
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}; an entry takes {', '.join(ENTRY_KEYS)} "
                          "(custom job options go under options:)")
    for needed in ("cron", "job"):
        if needed not in entry:
            raise ConfigError(f"the entry needs {needed}:")
    extra = entry.pop("options", None) or {}
    if not isinstance(extra, dict):
        raise ConfigError(f"options must be a mapping, not {extra!r}")
    cron, job = entry.pop("cron"), entry.pop("job")
    if not isinstance(job, str):
        raise ConfigError(f"job {job!r} must be a job's wire name")
    tz, args = entry.pop("tz", None), entry.pop("args", [])
    return cron, job, tz, args, {**{str(k): v for k, v in extra.items()}, **entry}


def _register_entry(periodic: Periodic, arguments: tuple[Any, ...]) -> Loop:
    cron, job, tz, args, options = arguments
    return periodic.register(cron, job, tz=tz, args=args, **options)


def describe_entry(entry: object) -> str:
    if isinstance(entry, dict):
        return f"cron {entry.get('cron')!r}, job {entry.get('job')!r}"
    return repr(entry)


# -- what is due ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Due:
    """What the leader does with one loop now."""

    next_fire: int  # the ``nf`` to store
    fire: int | None = None  # the tick to push, if any
    missed: int = 0  # ticks passed over without a push (besides ``fire``)
    more_missed: bool = False  # ``missed`` is a lower bound


def plan(schedule: Schedule, *, nf: int | None, lf: int | None, paused: bool, now: float,
         catch_up: float) -> Due | None:
    """The decision for one loop at Redis time ``now``; None when nothing is due."""
    if nf is None:  # new, or its mark unreadable: it starts from now, firing nothing past
        return Due(schedule.next_after(now))
    if nf > now:
        return None
    following = schedule.next_after(now)
    if paused:
        return Due(following)
    window = max(nf, math.ceil(now - catch_up))
    recent, _ = schedule.ticks(window, now, limit=max(1, math.ceil(catch_up)) + 1)
    older, more = schedule.ticks(nf, window - 1, limit=MISSED_COUNT_LIMIT) \
        if window > nf else ([], False)
    missed = len(older) + max(0, len(recent) - 1)
    latest = recent[-1] if recent else None
    if latest is None or (lf is not None and lf >= latest):
        return Due(following, missed=missed, more_missed=more)
    return Due(following, fire=latest, missed=missed, more_missed=more)
