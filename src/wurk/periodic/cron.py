"""Cron schedules as pure functions of time: no Redis, no clock of their own.

1. ``Schedule.parse(text, tz)``: a standard 5-field crontab line or an ``@hourly``-style
   alias, in an IANA zone (``zoneinfo``; UTC when none is given), parsed by ``cronsim``.
   A leading seconds field (6 fields) is accepted only when asked for: Sidekiq Enterprise
   and Ruby wurk read 5 fields.
2. ``next_after(t)``: the first tick strictly after epoch second ``t``. Ticks are whole
   epoch seconds and strictly increasing, whatever the wall clock does.
3. ``ticks(since, until, limit=…)``: the ticks in a window, up to a cap, so a loop that
   missed a month of minutes costs a bounded amount of work to reason about.

Daylight saving time follows Debian cron (as ``cronsim`` does): a loop with a fixed minute
and hour (``30 1 * * *``) follows the wall clock — it fires once in a repeated hour (at its
first occurrence) and, when its time falls in a skipped hour, once at the first valid
minute after the jump. A loop with ``*`` in the minute or hour (``@hourly``, ``*/5 * * * *``)
follows real elapsed time: an hourly loop fires in each real hour, so twice at local 01:30
when 01:00–02:00 repeats, and not at all at 02:30 when that hour does not exist.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from cronsim import CronSim, CronSimError

from ..errors import ConfigError

__all__ = ["ALIASES", "Schedule"]

# The ``@`` spellings Vixie cron accepts, as the 5-field lines they stand for.
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
UTC = dt.timezone.utc


@dataclass(frozen=True)
class Schedule:
    """A cron line in a zone; ``text`` and ``tz`` are kept exactly as registered."""

    text: str
    tz: str = ""
    expression: str = field(default="", compare=False)
    zone: dt.tzinfo = field(default=UTC, compare=False, repr=False)

    @classmethod
    def parse(cls, text: object, tz: object = None, *, seconds: bool = False) -> Schedule:
        """The schedule of ``text`` in zone ``tz``; ``ConfigError`` names what is wrong."""
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"cron {text!r} must be a crontab line such as '*/5 * * * *' "
                              f"or an alias ({', '.join(ALIASES)})")
        zone_name = _zone_name(tz)
        expression = ALIASES.get(text.strip().lower(), text.strip())
        fields = len(expression.split())
        if fields != 5 and not (seconds and fields == 6):
            allowed = "5 fields (or 6 with a leading seconds field)" if seconds else "5 fields"
            hint = "" if seconds else \
                "; a seconds field needs the setting periodic_seconds_field: true"
            raise ConfigError(f"cron {text!r} has {fields} fields; write {allowed}: "
                              f"minute hour day-of-month month day-of-week{hint}")
        schedule = cls(text, zone_name, expression, _zone(zone_name))
        schedule._first_tick(text)
        return schedule

    @property
    def has_seconds(self) -> bool:
        return len(self.expression.split()) == 6

    def _first_tick(self, text: str) -> None:
        """Parse now, so a bad line fails at registration, not in the leader's thread."""
        try:
            self.next_after(0)
        except CronSimError as exc:
            raise ConfigError(f"cron {text!r} is not valid: {exc}") from None
        except StopIteration:
            raise ConfigError(f"cron {text!r} never fires (no date matches it)") from None

    # -- ticks ------------------------------------------------------------------------------
    def next_after(self, when: float) -> int:
        """The first tick strictly after epoch second ``when``.

        ``cronsim`` computes a fixed-time loop in naive local time, so the instant it
        returns can fall at or before the start (a repeated hour); those are skipped, which
        is what makes a repeated 01:30 fire once.
        """
        start = dt.datetime.fromtimestamp(int(when), self.zone)
        iterator = CronSim(self.expression, start)
        for candidate in iterator:
            tick = int(candidate.timestamp())
            if tick > when:
                return tick
        raise StopIteration  # pragma: no cover - cronsim raises it itself after 50 years

    def ticks(self, since: float, until: float, *, limit: int) -> tuple[list[int], bool]:
        """The first ``limit`` ticks ``t`` with ``since <= t <= until``, oldest first, and
        whether more were left out (the work stays bounded however long the window)."""
        found: list[int] = []
        tick = self.next_after(since - 1)
        while tick <= until:
            if len(found) == limit:
                return found, True
            found.append(tick)
            tick = self.next_after(tick)
        return found, False

    def local(self, when: float) -> dt.datetime:
        """Epoch second ``when`` on this schedule's wall clock."""
        return dt.datetime.fromtimestamp(when, self.zone)


def _zone_name(tz: object) -> str:
    if tz is None or tz == "":
        return ""
    if not isinstance(tz, str):
        raise ConfigError(f"tz {tz!r} must be an IANA zone name such as 'Europe/Berlin'")
    return tz


def _zone(name: str) -> dt.tzinfo:
    if not name:
        return UTC
    import zoneinfo  # only for a named zone: a worker without one does not keep it in memory

    try:
        return zoneinfo.ZoneInfo(name)
    # OSError: a name that is a directory of zones ('Europe') or too long for a file name
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise ConfigError(f"tz {name!r} is not a known IANA zone; write one such as "
                          "'Europe/Berlin', 'America/New_York' or 'UTC'") from None
