"""Cron maths and the leader's decision, driven by an injected clock.

The DST tables are written out by hand (wall-clock time and UTC offset of every expected
fire); ``simulate`` plays the leader's polls over the window with a fake Redis time and
collects what ``plan`` would push."""

from __future__ import annotations

import datetime as dt

import pytest

from wurk.errors import ConfigError
from wurk.periodic.cron import Schedule
from wurk.periodic.loops import Due, plan

# The leader looks at its loops this often in the simulation (not a divisor of a minute, so
# polls drift across tick boundaries as real ones do).
POLL_STEP = 17
CATCH_UP = 300


def epoch(text: str) -> int:
    return int(dt.datetime.fromisoformat(text).timestamp())


def simulate(schedule: Schedule, start: str, end: str, *, step: int = POLL_STEP,
             gaps: tuple[tuple[str, str], ...] = ()) -> tuple[list[int], list[Due]]:
    """Poll from ``start`` to ``end`` every ``step`` s (none inside a gap, as while no
    process leads); the ticks pushed and every decision with missed ticks."""
    now, stop = epoch(start), epoch(end)
    nf: int | None = None
    lf: int | None = None
    fired: list[int] = []
    missing: list[Due] = []
    holes = [(epoch(a), epoch(b)) for a, b in gaps]
    while now <= stop:
        if not any(a <= now < b for a, b in holes):
            due = plan(schedule, nf=nf, lf=lf, paused=False, now=now, catch_up=CATCH_UP)
            if due is not None:
                if due.fire is not None:
                    assert due.fire <= now and now - due.fire <= CATCH_UP
                    fired.append(due.fire)
                    lf = due.fire
                if due.missed:
                    missing.append(due)
                assert due.next_fire > now
                nf = due.next_fire
        now += step
    return fired, missing


def shown(ticks: list[int], tz: str) -> list[str]:
    zone = Schedule.parse("* * * * *", tz).zone
    return [dt.datetime.fromtimestamp(t, zone).isoformat() for t in ticks]


# (zone, cron, window start, window end, expected fires) — every expected fire by hand.
DST_TABLE = [
    # America/New_York, spring: 2024-03-10 02:00 EST jumps to 03:00 EDT.
    ("America/New_York", "30 1 * * *", "2024-03-09T12:00:00-05:00", "2024-03-11T12:00:00-04:00",
     ["2024-03-10T01:30:00-05:00", "2024-03-11T01:30:00-04:00"]),
    ("America/New_York", "30 2 * * *", "2024-03-09T12:00:00-05:00", "2024-03-11T12:00:00-04:00",
     ["2024-03-10T03:00:00-04:00", "2024-03-11T02:30:00-04:00"]),
    ("America/New_York", "30 * * * *", "2024-03-09T23:00:00-05:00", "2024-03-10T06:00:00-04:00",
     ["2024-03-09T23:30:00-05:00", "2024-03-10T00:30:00-05:00", "2024-03-10T01:30:00-05:00",
      "2024-03-10T03:30:00-04:00", "2024-03-10T04:30:00-04:00", "2024-03-10T05:30:00-04:00"]),
    ("America/New_York", "@hourly", "2024-03-10T00:30:00-05:00", "2024-03-10T05:30:00-04:00",
     ["2024-03-10T01:00:00-05:00", "2024-03-10T03:00:00-04:00", "2024-03-10T04:00:00-04:00",
      "2024-03-10T05:00:00-04:00"]),
    # America/New_York, autumn: 2024-11-03 02:00 EDT falls back to 01:00 EST.
    ("America/New_York", "30 1 * * *", "2024-11-02T12:00:00-04:00", "2024-11-04T12:00:00-05:00",
     ["2024-11-03T01:30:00-04:00", "2024-11-04T01:30:00-05:00"]),
    ("America/New_York", "30 2 * * *", "2024-11-02T12:00:00-04:00", "2024-11-04T12:00:00-05:00",
     ["2024-11-03T02:30:00-05:00", "2024-11-04T02:30:00-05:00"]),
    ("America/New_York", "30 * * * *", "2024-11-02T23:00:00-04:00", "2024-11-03T06:00:00-05:00",
     ["2024-11-02T23:30:00-04:00", "2024-11-03T00:30:00-04:00", "2024-11-03T01:30:00-04:00",
      "2024-11-03T01:30:00-05:00", "2024-11-03T02:30:00-05:00", "2024-11-03T03:30:00-05:00",
      "2024-11-03T04:30:00-05:00", "2024-11-03T05:30:00-05:00"]),
    # Europe/Berlin, spring: 2024-03-31 02:00 CET jumps to 03:00 CEST.
    ("Europe/Berlin", "30 1 * * *", "2024-03-30T12:00:00+01:00", "2024-04-01T12:00:00+02:00",
     ["2024-03-31T01:30:00+01:00", "2024-04-01T01:30:00+02:00"]),
    ("Europe/Berlin", "30 2 * * *", "2024-03-30T12:00:00+01:00", "2024-04-01T12:00:00+02:00",
     ["2024-03-31T03:00:00+02:00", "2024-04-01T02:30:00+02:00"]),
    ("Europe/Berlin", "30 * * * *", "2024-03-30T23:00:00+01:00", "2024-03-31T06:00:00+02:00",
     ["2024-03-30T23:30:00+01:00", "2024-03-31T00:30:00+01:00", "2024-03-31T01:30:00+01:00",
      "2024-03-31T03:30:00+02:00", "2024-03-31T04:30:00+02:00", "2024-03-31T05:30:00+02:00"]),
    # Europe/Berlin, autumn: 2024-10-27 03:00 CEST falls back to 02:00 CET.
    ("Europe/Berlin", "30 1 * * *", "2024-10-26T12:00:00+02:00", "2024-10-28T12:00:00+01:00",
     ["2024-10-27T01:30:00+02:00", "2024-10-28T01:30:00+01:00"]),
    ("Europe/Berlin", "30 2 * * *", "2024-10-26T12:00:00+02:00", "2024-10-28T12:00:00+01:00",
     ["2024-10-27T02:30:00+02:00", "2024-10-28T02:30:00+01:00"]),
    ("Europe/Berlin", "30 * * * *", "2024-10-26T23:00:00+02:00", "2024-10-27T06:00:00+01:00",
     ["2024-10-26T23:30:00+02:00", "2024-10-27T00:30:00+02:00", "2024-10-27T01:30:00+02:00",
      "2024-10-27T02:30:00+02:00", "2024-10-27T02:30:00+01:00", "2024-10-27T03:30:00+01:00",
      "2024-10-27T04:30:00+01:00", "2024-10-27T05:30:00+01:00"]),
]


@pytest.mark.parametrize(("tz", "cron", "start", "end", "expected"), DST_TABLE,
                         ids=[f"{row[0]}-{row[1]}-{row[2][:10]}" for row in DST_TABLE])
def test_dst_fires_match_the_hand_written_table(tz: str, cron: str, start: str, end: str,
                                                expected: list[str]) -> None:
    fired, missing = simulate(Schedule.parse(cron, tz), start, end)
    assert shown(fired, tz) == expected
    assert [epoch(t) for t in expected] == fired
    assert missing == []


def test_a_tick_missed_by_less_than_catch_up_fires_once_late() -> None:
    """A leader gap of two minutes around 10:00: the tick fires when a leader is back."""
    schedule = Schedule.parse("0 10 * * *", "Europe/Berlin")
    fired, missing = simulate(schedule, "2024-06-01T09:50:00+02:00", "2024-06-01T10:20:00+02:00",
                              gaps=(("2024-06-01T09:59:00+02:00", "2024-06-01T10:02:00+02:00"),))
    assert shown(fired, "Europe/Berlin") == ["2024-06-01T10:00:00+02:00"]
    assert missing == []


def test_after_a_long_gap_only_the_newest_recent_tick_fires_and_the_rest_are_counted() -> None:
    schedule = Schedule.parse("*/5 * * * *")
    fired, missing = simulate(schedule, "2024-06-01T09:00:00+00:00", "2024-06-01T10:30:00+00:00",
                              step=10,
                              gaps=(("2024-06-01T09:03:00+00:00", "2024-06-01T10:02:00+00:00"),))
    # 09:05 … 10:00 were due during the gap: 10:00 is within catch_up, the 11 before it not.
    assert "2024-06-01T10:00:00+00:00" in shown(fired, "UTC")
    assert not {"2024-06-01T09:05:00+00:00", "2024-06-01T09:55:00+00:00"} & set(
        shown(fired, "UTC"))
    assert [(d.missed, d.fire) for d in missing] == [(11, epoch("2024-06-01T10:00:00+00:00"))]


def test_a_gap_longer_than_catch_up_fires_nothing_late() -> None:
    schedule = Schedule.parse("0 * * * *")
    fired, missing = simulate(schedule, "2024-06-01T08:30:00+00:00", "2024-06-01T10:30:00+00:00",
                              gaps=(("2024-06-01T08:59:00+00:00", "2024-06-01T09:10:00+00:00"),))
    assert shown(fired, "UTC") == ["2024-06-01T10:00:00+00:00"]
    assert [(d.missed, d.fire) for d in missing] == [(1, None)]


def test_a_new_loop_fires_nothing_from_before_it_was_registered() -> None:
    due = plan(Schedule.parse("0 * * * *"), nf=None, lf=None, paused=False,
               now=epoch("2024-06-01T10:01:00+00:00"), catch_up=CATCH_UP)
    assert due == Due(epoch("2024-06-01T11:00:00+00:00"))


def test_a_tick_already_fired_is_not_fired_again_whatever_nf_says() -> None:
    tick = epoch("2024-06-01T10:00:00+00:00")
    due = plan(Schedule.parse("0 * * * *"), nf=tick, lf=tick, paused=False, now=tick + 5,
               catch_up=CATCH_UP)
    assert due is not None and due.fire is None and due.next_fire == tick + 3600


def test_a_paused_loop_passes_its_ticks_silently() -> None:
    tick = epoch("2024-06-01T10:00:00+00:00")
    due = plan(Schedule.parse("0 * * * *"), nf=tick, lf=None, paused=True, now=tick + 5,
               catch_up=CATCH_UP)
    assert due == Due(tick + 3600)


def test_a_month_behind_costs_a_bounded_count() -> None:
    start = epoch("2024-05-01T00:00:00+00:00")
    due = plan(Schedule.parse("* * * * *"), nf=start, lf=None, paused=False,
               now=start + 31 * 86400 + 30, catch_up=CATCH_UP)
    assert due is not None and due.more_missed and due.fire == start + 31 * 86400


def test_ticks_strictly_increase_through_a_repeated_hour() -> None:
    schedule = Schedule.parse("0 1-3 * * *", "America/New_York")
    tick = epoch("2024-11-03T00:00:00-04:00")
    seen = []
    for _ in range(6):
        tick = schedule.next_after(tick)
        seen.append(tick)
    assert seen == sorted(set(seen))
    assert shown(seen[:3], "America/New_York") == [
        "2024-11-03T01:00:00-04:00", "2024-11-03T02:00:00-05:00", "2024-11-03T03:00:00-05:00"]


@pytest.mark.parametrize(("alias", "expression"), [
    ("@hourly", "0 * * * *"), ("@daily", "0 0 * * *"), ("@midnight", "0 0 * * *"),
    ("@weekly", "0 0 * * 0"), ("@monthly", "0 0 1 * *"), ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *")])
def test_aliases(alias: str, expression: str) -> None:
    start = epoch("2024-06-01T10:17:00+00:00")
    assert Schedule.parse(alias).next_after(start) == Schedule.parse(expression).next_after(start)
    assert Schedule.parse(alias).text == alias  # stored as registered


@pytest.mark.parametrize(("cron", "tz", "message"), [
    ("61 * * * *", None, "is not valid: Bad minute"),
    ("* * * *", None, "has 4 fields"),
    ("* * * * * *", None, "periodic_seconds_field"),
    ("", None, "must be a crontab line"),
    (5, None, "must be a crontab line"),
    ("0 0 31 2 *", None, "is not valid"),
    ("@reboot", None, "has 1 fields"),
    ("* * * * *", "Mars/Olympus", "not a known IANA zone"),
    ("* * * * *", "../../etc/passwd", "not a known IANA zone"),
    ("* * * * *", "Europe", "not a known IANA zone"),  # a directory of zones, no zone
    ("* * * * *", "A" * 5000, "not a known IANA zone"),  # longer than a file name can be
    ("* * * * *", 3, "must be an IANA zone name"),
])
def test_bad_schedules_name_the_problem(cron: object, tz: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        Schedule.parse(cron, tz)


def test_a_seconds_field_when_allowed() -> None:
    schedule = Schedule.parse("*/3 * * * * *", seconds=True)
    assert schedule.has_seconds and schedule.next_after(9) == 12
