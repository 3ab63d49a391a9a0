"""Each tab of ``wurk top``, driven headless against a Redis holding jobs in every state:
what it shows, paging and filtering, a job's own screen, the help, the masthead, and a
refresh that changes the table in place."""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import threading
import time
from typing import Any

import pytest
import redis

import wurk

pytest.importorskip("textual", reason="wurk top needs the tui extra: pip install 'wurk[tui]'")

from textual.pilot import Pilot
from textual.widgets import Sparkline

from tests.helpers.faults import config_for
from tests.helpers.metrics import tracked
from tests.helpers.proxy import FaultProxy
from tests.helpers.server import Server
from tests.tui.drive import (
    confirm,
    drive,
    press,
    refresh,
    settle,
    sheet_rows,
    shown,
    tab,
    type_filter,
)
from tests.tui.world import ITERATING, LEADER, World
from wurk.api import RetrySet
from wurk.tui import TopApp
from wurk.tui import reads as tui_reads
from wurk.tui.iteration import iterations, summary
from wurk.tui.screens import BatchScreen, EntryScreen, HelpScreen, LoopScreen, QueueScreen
from wurk.tui.sheet import Sheet


def test_the_masthead_names_the_redis_and_home_shows_rates_the_server_and_the_queues(
        config: wurk.Config, world: World, r: redis.Redis) -> None:
    """At 80x24: the masthead, the numbers every screen shows, the tabs, then the Home tab:
    rates with a live sparkline, the server, the queues."""

    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        screen = shown(app)
        assert f"Redis {config.redis_url}" in screen
        assert "updated " in screen and "every 3600s" in screen
        for number in ("Processed 1,234", "Failed 56", "Busy 3", "Enqueued 8",
                       "Scheduled 2", "Retries 3", "Dead 2"):
            assert number in screen, number
        for name in ("Home", "Busy", "Queues", "Scheduled", "Retries", "Dead", "Metrics",
                     "Batches", "Periodic"):
            assert f" {name} " in screen.splitlines()[3], name
        screen = shown(app)
        assert "per second, from the next refresh on" in screen
        assert "Valkey " in screen or "Redis " in screen
        assert "clients" in screen and "noeviction" in screen
        assert sheet_rows(app, "#home-queues") == [
            ["default", "6", sheet_rows(app, "#home-queues")[0][2], ""],
            ["critical", "2", sheet_rows(app, "#home-queues")[1][2], "paused"]]
        r.incrby("stat:processed", 500)
        r.incrby("stat:failed", 7)
        await refresh(app, pilot)
        processed, failed = app.rates[-1]
        assert processed > 0 and failed > 0
        assert processed / failed == pytest.approx(500 / 7)  # both over one elapsed time
        spark = app.screen.query_one("#processed-spark", Sparkline)
        assert list(spark.data or []) == [0.0] * 119 + [processed]  # zeros before
        await refresh(app, pilot)
        assert list(spark.data or [])[-2:] == [processed, 0.0]
        assert "the last 2 refreshes below" in shown(app)
        assert "Processed 1,734" in shown(app)

    drive(config, scenario, size=(80, 24))


def test_busy_lists_processes_and_running_jobs_with_runtime_and_iteration_state(
        config: wurk.Config, world: World) -> None:
    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "busy")
        processes = sheet_rows(app, "#processes")
        assert [row[1] for row in processes] == ["host-a:101 web", "host-b:202 batch"]
        assert processes[0][4:] == ["10/10", "default, critical", "leader"] or \
            processes[0][4] == "2/10"
        assert processes[0][4] == "2/10" and processes[0][6] == "leader"
        assert processes[1][4] == "1/10" and processes[1][6] == "quiet"
        assert processes[0][3] == "50.0 MB" and processes[0][2] == "1h 00m ago"
        jobs = {row[1]: row for row in sheet_rows(app, "#jobs")}
        assert set(jobs) == {"Export::Csv", "Mail::Deliver", "Video::Encode"}
        export = jobs["Export::Csv"]
        assert export[0] == "host-a:101" and export[2] == '[1, "two"]'
        # started 95 s before the world was seeded: read later on a loaded machine, more
        runtime = re.fullmatch(r"(\d+)m (\d+)s", export[4])
        assert runtime is not None, export[4]
        assert 95 <= int(runtime[1]) * 60 + int(runtime[2]) <= 95 + 60, export[4]
        assert export[5] == 'run 2 · cursor {"offset": 500} · 12.5s iterating'
        assert jobs["Mail::Deliver"][5] == ""  # not an iterable job: no it-<jid> hash
        screen = shown(app)
        assert "Processes 2  Threads 20  Busy 3 (15%)  RSS 100.0 MB" in screen
        assert "Running jobs 3" in screen

    drive(config, scenario, size=(200, 50))


def test_queues_list_sizes_latency_and_paused_and_open_a_queues_jobs(
        config: wurk.Config, world: World) -> None:
    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "queues")
        rows = sheet_rows(app, "#queue-list")
        assert [(row[0], row[1], row[3]) for row in rows] == [
            ("critical", "2", "paused"), ("default", "6", "")]
        assert all(row[2].startswith("1m ") for row in rows)  # enqueued 60 s ago
        assert "Queues 2  Enqueued 8  Paused 1" in shown(app)
        await press(app, pilot, "enter")
        assert isinstance(app.screen, QueueScreen)
        jobs = sheet_rows(app, "#queue-jobs")
        assert [row[1] for row in jobs] == ["Billing::Charge", "Billing::Charge"]
        assert "Queue critical  size 2" in shown(app) and "paused" in shown(app)
        await press(app, pilot, "escape")
        assert not isinstance(app.screen, QueueScreen)

    drive(config, scenario)


def test_each_job_set_lists_its_jobs_and_opens_one_with_its_error_and_backtrace(
        config: wurk.Config, world: World) -> None:
    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "scheduled")
        rows = sheet_rows(app, "#scheduled-list")
        assert [row[3] for row in rows] == ["Report::Nightly"] * 2
        assert rows[0][1].startswith("in 4m") or rows[0][1].startswith("in 5m")
        await tab(app, pilot, "retries")
        rows = sheet_rows(app, "#retries-list")
        assert [row[3] for row in rows] == ["Import::Row"] * 3  # soonest first
        assert rows[0][5] == "Net::ReadTimeout: read timed out 0"
        await press(app, pilot, "enter")
        assert isinstance(app.screen, EntryScreen)
        screen = shown(app)
        for line in ("Retries: Import::Row", "Arguments    [0, \"two\"]",
                     "Error        Net::ReadTimeout", "read timed out 0", "Retry count  2",
                     "app/jobs/import_row.rb:12:in `perform'", "lib/net/http.rb:99:in `read'"):
            assert line in screen, line
        await press(app, pilot, "escape")
        await tab(app, pilot, "morgue")
        rows = sheet_rows(app, "#morgue-list")
        assert [row[3] for row in rows] == ["Legacy::Sync"] * 2
        assert rows[0][5] == "NoMethodError: undefined method `sync' 1"  # latest death first
        await press(app, pilot, "enter")
        assert "Dead: Legacy::Sync" in shown(app) and "Died" in shown(app)

    drive(config, scenario, size=(160, 50))


def test_a_job_screen_shows_the_masthead_and_totals_while_its_own_read_is_under_way(
        config: wurk.Config, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a blank screen until the job is read: the app's masthead and totals at once, and
    a title saying the read is under way; then the job."""
    held, reading = threading.Event(), threading.Event()
    real = tui_reads.entry

    def entry(*args: Any) -> Any:
        reading.set()
        assert held.wait(20), "the test never let the read go"
        return real(*args)

    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "retries")
        monkeypatch.setattr(tui_reads, "entry", entry)
        await pilot.press("enter")
        deadline = time.monotonic() + 20
        while not reading.is_set():
            assert time.monotonic() < deadline, "the job's read never started"
            await pilot.pause(0.02)
        await pilot.pause()
        assert isinstance(app.screen, EntryScreen)
        screen = shown(app)
        assert f"Redis {config.redis_url}" in screen and "updated " in screen
        assert "Processed 1,234" in screen and "Retries 3" in screen
        assert "Reading…" in screen and "Import::Row" not in screen
        held.set()
        await settle(app, pilot)
        screen = shown(app)
        assert "Retries: Import::Row" in screen and "Reading…" not in screen

    drive(config, scenario)


def test_a_set_pages_by_rank_and_filters_by_substring(config: wurk.Config, world: World) -> None:
    now = time.time()
    for n in range(3, 60):
        RetrySet(config).schedule(now + 100 + n, {"class": "Import::Row", "args": [n],
                                                  "jid": f"{n:024x}", "queue": "default",
                                                  "error_class": "E", "error_message": "m"})

    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "retries")
        assert "Retries 60  page 1 of 3" in shown(app)
        await press(app, pilot, "l")
        assert "page 2 of 3" in shown(app)
        assert sheet_rows(app, "#retries-list")[0][4] == "[25]"
        await press(app, pilot, "G")
        assert "page 3 of 3" in shown(app)
        assert [row[4] for row in sheet_rows(app, "#retries-list")] == \
            [f"[{n}]" for n in range(50, 60)]
        await press(app, pilot, "l")  # past the last page: stays
        assert "page 3 of 3" in shown(app)
        await press(app, pilot, "h", "g")
        assert "page 1 of 3" in shown(app)
        await type_filter(app, pilot, "[42]")
        assert "Retries 1 matching “[42]”" in shown(app)
        assert [row[4] for row in sheet_rows(app, "#retries-list")] == ["[42]"]
        await press(app, pilot, "escape")
        assert "Retries 60  page 1 of 3" in shown(app)

    drive(config, scenario)


def test_metrics_show_each_jobs_runs_failures_mean_and_percentiles(
        config: wurk.Config, world: World) -> None:
    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "metrics")
        rows = {row[0]: row for row in sheet_rows(app, "#metrics-list")}
        # 20 successes (19 at 120 ms, one at 9 s) and 3 failures; 4 successes and 1 failure
        assert rows["Import::Row"][1:] == ["23", "3", "564.0ms", "<150ms", "<150ms"]
        assert rows["Mail::Deliver"][1:] == ["5", "1", "517.5ms", "<30ms", "<2.5s"]
        assert "Metrics over the last 1h  jobs 2" in shown(app)
        await type_filter(app, pilot, "mail")
        assert list({row[0] for row in sheet_rows(app, "#metrics-list")}) == ["Mail::Deliver"]
        await press(app, pilot, "escape")
        await press(app, pilot, *"pppp")  # 2h 4h 8h 24h
        assert "over the last 24h" in shown(app)
        assert "p50/p95 need 8h or less" in shown(app)
        rows = {row[0]: row for row in sheet_rows(app, "#metrics-list")}
        assert rows["Import::Row"][1:] == ["23", "3", "564.0ms", "-", "-"]

    drive(config, scenario)


def test_batches_and_periodic_loops_list_and_open_one(config: wurk.Config, world: World) -> None:
    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "batches")
        rows = sheet_rows(app, "#batch-list")
        assert [(row[0], row[1], row[3], row[4]) for row in rows] == [
            (world.bid, "nightly import", "0%", "3 of 3")]
        await type_filter(app, pilot, "nothing-tagged-so")
        assert sheet_rows(app, "#batch-list") == []
        await press(app, pilot, "escape")
        assert sheet_rows(app, "#batch-list") != []
        await press(app, pilot, "enter")
        assert isinstance(app.screen, BatchScreen)
        screen = shown(app)
        for line in (f"Batch {world.bid}", "Description  nightly import", "Total        3",
                     "Pending      3", "Tags         import"):
            assert line in screen, line
        await press(app, pilot, "escape")
        await tab(app, pilot, "periodic")
        rows = sheet_rows(app, "#loop-list")
        assert [(row[0], row[1], row[4], row[5]) for row in rows] == [
            ("Per::Cleanup", "30 2 * * * Europe/Berlin", "low", "")]
        assert rows[0][2].startswith("in 59m") or rows[0][2].startswith("in 1h")
        await press(app, pilot, "enter")
        assert isinstance(app.screen, LoopScreen)
        screen = shown(app)
        assert "Schedule     30 2 * * * Europe/Berlin" in screen
        assert "Recent pushes" in screen and "c" * 24 in screen

    drive(config, scenario)


def test_help_lists_every_key_of_the_view_and_closes(config: wurk.Config, world: World) -> None:
    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "retries")
        await press(app, pilot, "question_mark")
        assert isinstance(app.screen, HelpScreen)
        screen = shown(app)
        for line in ("This view: Retries", "R             Retry (asks first)",
                     "K             Kill (asks first)", "h / l", "/", "x / A",
                     "← / →, 1-9", "q             quit"):
            assert line in screen, line
        await press(app, pilot, "escape")
        assert not isinstance(app.screen, HelpScreen)

    drive(config, scenario)


def test_a_refresh_changes_cells_in_place_and_the_cursor_stays_on_its_row(
        config: wurk.Config, world: World, r: redis.Redis) -> None:
    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "retries")
        await press(app, pilot, "j", "j")
        table = app.screen.query_one("#retries-list", Sheet)
        chosen, built = table.current(), table.rebuilds
        await refresh(app, pilot)
        # the same rows: only cells that changed were rewritten (the "in 31.0s"), in place
        assert table.rebuilds == built and table.current() == chosen
        assert table.cursor_row == 2
        # the first entry goes (a worker retried it): the cursor follows its row up
        first = RetrySet(config).page(0, 1)[0]
        assert first.delete()
        await refresh(app, pilot)
        assert table.rebuilds == built + 1
        assert table.current() == chosen and table.cursor_row == 1
        r.set("stat:processed", 99_999)
        await refresh(app, pilot)
        assert "Processed 99,999" in shown(app)

    drive(config, scenario)


def test_the_tick_refreshes_on_its_own(config: wurk.Config, world: World,
                                       r: redis.Redis) -> None:
    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        r.set("stat:processed", 4321)
        deadline = time.monotonic() + 10
        while "Processed 4,321" not in shown(app):
            assert time.monotonic() < deadline, "no refresh came"
            await pilot.pause(0.1)

    drive(config, scenario, interval=0.5)


def test_redis_out_of_reach_is_said_in_the_masthead_and_the_ui_carries_on(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL")  # it would win over the URL given here
    gone = wurk.Config(redis_url="redis://127.0.0.1:9/0")

    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        assert app.problem is not None and "Redis cannot be reached right now" in app.problem
        assert "Redis cannot be reached right now" in shown(app)
        await tab(app, pilot, "retries")
        await press(app, pilot, "question_mark", "escape")
        assert app.is_running

    try:
        drive(gone, scenario, size=(200, 30))
    finally:
        gone.close()


@pytest.mark.parametrize("step", ["read", "shown"])
def test_a_view_that_fails_otherwise_is_named_and_the_rest_goes_on(
        config: wurk.Config, world: World, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """tui.md: a read or a value that fails for another reason than Redis: the top line
    names it ("Could not show this view: …"); the other tabs and the keys go on working."""
    from wurk.tui.panes import MetricsPane

    def broken(self: Any, *args: Any) -> Any:
        raise TypeError("a value no view expected")

    monkeypatch.setattr(MetricsPane, step, broken)

    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "metrics")
        assert app.problem == "Could not show this view: TypeError: a value no view expected"
        assert "Could not show this view" in shown(app)
        await tab(app, pilot, "retries")
        await press(app, pilot, "question_mark", "escape")  # the keys answer
        assert app.problem is None

    drive(config, scenario)


def test_the_masthead_names_a_url_without_its_password(
        redis_server: Server, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """tui.md: "The top line names the Redis it reads (a URL without its password …)"."""
    monkeypatch.delenv("REDIS_URL")  # it would win over the URL given here
    url = f"redis://default:s3cret-pw@127.0.0.1:{redis_server.port}/0"
    with_password = wurk.Config(redis_url=url)

    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        top = shown(app).splitlines()[0]
        assert f"Redis redis://default:***@127.0.0.1:{redis_server.port}/0" in top, top
        assert "s3cret" not in shown(app)
        assert "Processed 1,234" in shown(app)  # the password was used: Redis answered

    try:
        drive(with_password, scenario)
    finally:
        with_password.close()


def test_redis_lost_while_it_runs_keeps_the_last_numbers_until_it_answers_again(
        redis_server: Server, world: World, r: redis.Redis) -> None:
    """tui.md: "Redis lost while it runs": the top line says so, "the last numbers stay on
    screen, every tick tries again and the line goes once Redis answers; an action asked
    meanwhile says it failed, and did nothing"."""
    with FaultProxy(redis_server.port) as proxy:
        through = config_for(proxy.url)

        async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
            await tab(app, pilot, "retries")
            with proxy.outage():
                await refresh(app, pilot)
                assert app.problem is not None
                assert app.problem.startswith("Redis cannot be reached right now (")
                assert app.problem.endswith("); retrying")
                screen = shown(app)
                assert "Redis cannot be reached right now" in screen.splitlines()[0]
                assert "Processed 1,234" in screen and "Import::Row" in screen  # kept
                await confirm(app, pilot, "R")
                assert app.done[-1].startswith("Retry failed: Redis cannot be reached (")
                # the masthead's reads are retried; an action is not, and says so
                assert app.done[-1].endswith("); not tried again"), app.done[-1]
                assert r.zcard("retry") == 3 and r.llen("queue:default") == 6  # nothing
            r.set("stat:processed", 4321)
            app.request_refresh()  # a tick
            await settle(app, pilot)
            assert app.problem is None
            screen = shown(app)
            assert "cannot be reached" not in screen and "Processed 4,321" in screen

        try:
            drive(through, scenario)
        finally:
            through.close()


def test_iteration_state_is_read_where_an_it_hash_exists_and_checked(
        config: wurk.Config, world: World, r: redis.Redis) -> None:
    found = iterations(config, [ITERATING, "b" * 24, "x\nnot a jid", "y" * 300])
    assert list(found) == [ITERATING]
    assert summary(found[ITERATING]) == 'run 2 · cursor {"offset": 500} · 12.5s iterating'
    r.hset(f"it-{ITERATING}", "cancelled", "1700000000")
    assert summary(iterations(config, [ITERATING])[ITERATING]).endswith(" · cancelled")
    r.hset(f"it-{ITERATING}", "ex", "\x1b[2J many")
    odd = iterations(config, [ITERATING])[ITERATING]
    assert summary(odd).startswith("invalid (") and "\x1b" not in summary(odd)
    r.delete(f"it-{ITERATING}")
    r.set(f"it-{ITERATING}", json.dumps("a string: the wrong type"))
    assert summary(iterations(config, [ITERATING])[ITERATING]).startswith("invalid (")
    assert LEADER  # the world's running jobs belong to its processes


def test_a_tick_during_a_read_is_not_a_second_read(config: wurk.Config, world: World,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from wurk.tui import reads

    real, reading, release = reads.totals, threading.Event(), threading.Event()
    calls: list[float] = []

    def slow(config: wurk.Config) -> reads.Totals:
        calls.append(time.monotonic())
        reading.set()
        release.wait(10)
        return real(config)

    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        monkeypatch.setattr(reads, "totals", slow)
        app.request_refresh()
        while not reading.is_set():
            await pilot.pause(0.01)
        for _ in range(5):  # ticks while Redis is slow to answer
            app.request_refresh()
        release.set()
        await settle(app, pilot)
        assert len(calls) == 1

    drive(config, scenario)


def test_metrics_are_read_once_a_minute_or_when_asked(config: wurk.Config, world: World) -> None:
    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "metrics")
        assert sheet_rows(app, "#metrics-list")[0][1] == "23"
        tracked(**{"Import::Row": ([120.0] * 10, 0)}).flush(
            config.pool(), config.keys, now=dt.datetime.now(dt.timezone.utc))
        app.request_refresh()  # a tick: the numbers of the second line, not the metrics
        await settle(app, pilot)
        assert sheet_rows(app, "#metrics-list")[0][1] == "23"
        await refresh(app, pilot)  # r: read now
        assert sheet_rows(app, "#metrics-list")[0][1] == "33"

    drive(config, scenario)


def test_warnings_while_it_runs_are_kept_bounded(config: wurk.Config) -> None:
    """tui.md: wurk's warnings while it runs "become notifications at the bottom of the
    screen". Each was also kept in a list that only grew: a hostile record warned about at
    every refresh (an unreadable work entry, every 2 s on the Busy tab) grew it for as long
    as ``wurk top`` ran. The newest 200 are kept."""

    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        warn = logging.getLogger("wurk.api.processes").warning
        for n in range(1_000):
            warn("skipping %d unreadable work entries of %s", n, "host:1")
        await settle(app, pilot)
        assert len(app.logged) == 200
        assert list(app.logged)[-1] == "skipping 999 unreadable work entries of host:1"

    drive(config, scenario)


@pytest.mark.parametrize(("error", "said"), [
    (wurk.RedisUnavailable("redis://h:6379/0: Connection refused"),
     "Redis cannot be reached right now (redis://h:6379/0: Connection refused); retrying"),
    (redis.TimeoutError("Timeout reading from socket"), "Redis cannot be reached right now"),
    (redis.AuthenticationError("invalid username-password pair"),
     "Redis refused the credentials (invalid username-password pair)"),
    (redis.ResponseError("OOM command not allowed when used memory > 'maxmemory'."),
     "Redis refused (OOM command not allowed"),
    (wurk.ConfigError("redis_url: 'x' is no Redis URL"), "redis_url: 'x' is no Redis URL; "),
])
def test_a_failure_is_named_as_what_it_is(error: Exception, said: str) -> None:
    """Every Redis or wurk error was "Redis cannot be reached right now": a refused password,
    an out-of-memory reply and a bad setting sent the reader to look at the network."""
    from wurk.tui.app import describe

    assert describe(error).startswith(said)
    if not isinstance(error, (wurk.RedisUnavailable, redis.TimeoutError)):
        assert "cannot be reached" not in describe(error)


def test_a_warning_repeated_at_every_refresh_is_shown_once_while_it_is_on_screen(
        config: wurk.Config) -> None:
    """A hostile record warned about at every refresh popped the same notification every 2 s,
    and they piled up over the table."""

    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        shown: list[str] = []
        app.notify = lambda message, **kw: shown.append(message)  # type: ignore[method-assign]
        warn = logging.getLogger("wurk.api.processes").warning
        for _ in range(5):
            warn("skipping %d unreadable work entries of %s", 3, "host:1")
        warn("another warning")
        await settle(app, pilot)
        assert shown == ["skipping 3 unreadable work entries of host:1", "another warning"]
        assert len(app.logged) == 6  # each kept, all the same

    drive(config, scenario)
