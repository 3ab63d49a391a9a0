"""Every action of ``wurk top``, each asked first and done through the dashboard's own
operations, against a Redis holding jobs in every state; read-only refuses them all.

No second implementation: the ``dashboard`` fixture records each call of the functions the
dashboard's buttons call, and every test says which of them its keys called."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

import wurk
import wurk.web.actions
import wurk.web.batches
import wurk.web.periodic

pytest.importorskip("textual", reason="wurk top needs the tui extra: pip install 'wurk[tui]'")

from textual.pilot import Pilot

from tests.tui.drive import confirm, drive, press, sheet_rows, shown, tab, type_filter
from tests.tui.world import LEADER, LID, QUIET, World
from wurk.api import DeadSet, Queue, RetrySet, ScheduledSet
from wurk.batch import BatchStatus, accounting
from wurk.tui import TopApp
from wurk.tui.screens import ConfirmScreen, EntryScreen, QueueScreen
from wurk.tui.sheet import Sheet

# What the dashboard's buttons call, by the name the record gives each.
DASHBOARD = [(wurk.web.actions, "actions", name) for name in (
    "set_action", "set_bulk", "queue_action", "delete_queue_job", "process_action")] + [
    (wurk.web.periodic, "periodic", "act"), (wurk.web.batches, "batches", "act"),
    (wurk.web.batches, "batches", "retry_dead")]


@pytest.fixture
def dashboard(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The dashboard's action functions called, in order (``actions.set_action``...)."""
    called: list[str] = []

    def spy(module: Any, label: str, name: str) -> None:
        real = getattr(module, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            called.append(f"{label}.{name}")
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, recorded)

    for module, label, name in DASHBOARD:
        spy(module, label, name)
    return called


def test_retries_retry_kill_and_delete_one_the_selected_or_all(
        config: wurk.Config, world: World, r: redis.Redis, dashboard: list[str]) -> None:
    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "retries")
        question = await confirm(app, pilot, "R", "n")  # asked, answered no: nothing done
        assert RetrySet(config).size() == 3 and Queue("default", config).size() == 6
        await confirm(app, pilot, "R")
        assert RetrySet(config).size() == 2 and Queue("default", config).size() == 7
        pushed = json.loads(r.lindex("queue:default", 0) or "{}")
        # the question named the job the answer then acted on
        assert question == f"Retry {pushed['class']} (jid {pushed['jid']}) under the cursor " \
                           "in Retries?"
        assert pushed["args"] == [0, "two"] and pushed["retry_count"] == 1  # a run on us
        assert "Retried 1 job." in app.done
        await press(app, pilot, "x", "j", "x")
        assert await confirm(app, pilot, "K") == "Kill the 2 selected jobs in Retries?"
        assert app.done[-1] == "Killed 2 jobs."
        assert RetrySet(config).size() == 0 and DeadSet(config).size() == 4
        assert sheet_rows(app, "#retries-list") == []

    drive(config, scenario)
    assert dashboard == ["actions.set_action"] * 2


def test_a_retry_confirmation_offers_the_whole_set(config: wurk.Config, world: World,
                                                   dashboard: list[str]) -> None:
    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "retries")
        await pilot.press("D")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.everything_label == "all 3 in Retries"
        assert "a all 3 in Retries" in shown(app)
        await press(app, pilot, "a")
        assert app.done == ["Deleted 3 jobs."] and RetrySet(config).size() == 0
        await tab(app, pilot, "morgue")
        await press(app, pilot, "x", "escape")  # Escape clears the selection
        assert app.screen.query_one("#morgue-list", Sheet).selected == set()
        await type_filter(app, pilot, "Legacy")
        await pilot.press("D")  # filtered: the whole set is not offered, as on the dashboard
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and app.screen.everything_label is None
        await press(app, pilot, "a")  # not offered: nothing happens
        assert isinstance(app.screen, ConfirmScreen)
        await press(app, pilot, "n")
        assert DeadSet(config).size() == 2

    drive(config, scenario)
    assert dashboard == ["actions.set_bulk"]


def test_a_job_opened_from_its_set_is_acted_on_there(config: wurk.Config, world: World,
                                                     dashboard: list[str]) -> None:
    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "morgue")
        await press(app, pilot, "enter")
        assert isinstance(app.screen, EntryScreen)
        question = await confirm(app, pilot, "R")
        assert question.startswith("Retry this job (Legacy::Sync")
        assert not isinstance(app.screen, EntryScreen)  # back to the list
        assert DeadSet(config).size() == 1 and app.done == ["Retried 1 job."]
        await press(app, pilot, "enter")
        await confirm(app, pilot, "D")
        assert DeadSet(config).size() == 0

    drive(config, scenario)
    assert dashboard == ["actions.set_action"] * 2


def test_scheduled_jobs_enqueue_now_and_delete(config: wurk.Config, world: World,
                                               dashboard: list[str]) -> None:
    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "scheduled")
        await confirm(app, pilot, "E")
        assert ScheduledSet(config).size() == 1 and Queue("default", config).size() == 7
        assert app.done == ["Enqueued 1 job."]
        await confirm(app, pilot, "D")
        assert ScheduledSet(config).size() == 0 and app.done[-1] == "Deleted 1 job."
        await pilot.press("K")  # the scheduled set offers no kill: nothing is asked
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)

    drive(config, scenario)
    assert dashboard == ["actions.set_action"] * 2


def test_queues_pause_unpause_clear_and_delete_one_job(config: wurk.Config, world: World,
                                                       r: redis.Redis,
                                                       dashboard: list[str]) -> None:
    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "queues")  # critical (paused) first, then default
        question = await confirm(app, pilot, "P")
        assert question == "Unpause queue “critical”? Workers fetch its jobs again."
        assert not Queue("critical", config).paused() and app.done == ["Queue unpaused."]
        await press(app, pilot, "j")
        question = await confirm(app, pilot, "P")
        assert question.startswith("Pause queue “default”?")
        assert Queue("default", config).paused()
        await press(app, pilot, "enter")
        assert isinstance(app.screen, QueueScreen)
        newest = r.lindex("queue:default", 0)
        await confirm(app, pilot, "D")
        assert Queue("default", config).size() == 5 and newest not in r.lrange(
            "queue:default", 0, -1)
        await press(app, pilot, "escape")
        question = await confirm(app, pilot, "D")
        assert question == "Delete all 5 jobs in queue “default”? This cannot be undone."
        assert Queue("default", config).size() == 0
        assert app.done[-1] == "Deleted 5 jobs from the queue."

    drive(config, scenario)
    assert dashboard == ["actions.queue_action"] * 2 + [
        "actions.delete_queue_job", "actions.queue_action"]


def test_processes_are_told_to_quiet_and_to_stop(config: wurk.Config, world: World,
                                                 r: redis.Redis, dashboard: list[str]) -> None:
    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "busy")
        question = await confirm(app, pilot, "Q")
        assert question.startswith(f"Quiet {LEADER}? Each will stop fetching jobs")
        assert r.lrange(f"{LEADER}-signals", 0, -1) == ["TSTP"]
        await press(app, pilot, "A")  # every process
        await confirm(app, pilot, "T")
        assert r.lrange(f"{LEADER}-signals", 0, -1) == ["TERM", "TSTP"]
        assert r.lrange(f"{QUIET}-signals", 0, -1) == ["TERM"]
        assert app.done[-1].startswith("Told 2 processes to stop")

    drive(config, scenario)
    assert dashboard == ["actions.process_action"] * 3


def test_periodic_loops_push_now_pause_and_unpause(config: wurk.Config, world: World,
                                                    r: redis.Redis, dashboard: list[str]) -> None:
    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "periodic")
        question = await confirm(app, pilot, "E")
        assert question == "Push a Per::Cleanup job now? The loop's own schedule is untouched."
        pushed = json.loads(r.lindex("queue:low", 0) or "{}")
        assert pushed["class"] == "Per::Cleanup" and pushed["args"] == [1]
        assert app.done[-1] == f"Job pushed now (jid {pushed['jid']})."
        await confirm(app, pilot, "P")
        assert r.hget(f"loops:{LID}", "paused") == "1"
        assert sheet_rows(app, "#loop-list")[0][5] == "paused"
        question = await confirm(app, pilot, "P")
        assert question.startswith("Unpause the Per::Cleanup loop?")
        assert r.hget(f"loops:{LID}", "paused") == "0"

    drive(config, scenario)
    assert dashboard == ["periodic.act"] * 3


def test_batches_retry_their_dead_jobs_invalidate_and_delete(config: wurk.Config,
                                                            world: World,
                                                            dashboard: list[str]) -> None:
    dead = world.batch_jids[0]
    with wurk.redis() as conn:
        accounting.record(conn, config, world.bid, dead, "death")
    DeadSet(config).schedule(time.time(), {"class": "Tui::BatchWork", "args": [0],
                                           "queue": "default", "jid": dead, "bid": world.bid})

    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "batches")
        question = await confirm(app, pilot, "R")
        assert question == f"Send the dead jobs of batch {world.bid} back to their queues?"
        assert DeadSet(config).find_job(dead) is None
        assert app.done[-1] == "Its dead jobs were sent back to their queues."
        await press(app, pilot, "enter")
        await confirm(app, pilot, "I")
        assert BatchStatus(world.bid, config=config).invalidated
        await confirm(app, pilot, "D")
        assert not BatchStatus(world.bid, config=config).exists
        assert app.done[-1] == "Batch deleted."
        assert sheet_rows(app, "#batch-list") == []

    drive(config, scenario)
    assert dashboard == ["batches.retry_dead", "batches.act", "batches.act"]


def test_read_only_offers_no_action_and_does_none(config: wurk.Config, world: World,
                                                   r: redis.Redis,
                                                   dashboard: list[str]) -> None:
    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        assert "READ-ONLY" in shown(app)
        # each kind of tab (the scheduled and dead sets are the retries' kind)
        for name, keys in (("retries", "RDKE"), ("queues", "PD"), ("busy", "QT"),
                           ("periodic", "EP"), ("batches", "RID")):
            await tab(app, pilot, name)
            footer = shown(app).splitlines()[-1]
            assert "Retry" not in footer and "Delete" not in footer, footer
            for key in keys:
                await pilot.press(key)
                await pilot.pause()
                assert not isinstance(app.screen, ConfirmScreen), (name, key)
        await tab(app, pilot, "retries")
        await press(app, pilot, "enter")
        await pilot.press("R")
        await pilot.pause()
        assert isinstance(app.screen, EntryScreen)
        await press(app, pilot, "question_mark")
        assert "read-only: actions are off" in shown(app)
        assert app.done == []

    before = {key: r.dump(key) for key in r.keys("*") if not key.startswith("process")}
    drive(config, scenario, read_only=True)
    after = {key: r.dump(key) for key in r.keys("*") if not key.startswith("process")}
    assert after == before and dashboard == []


def test_enter_answers_yes_escape_no_and_a_job_moved_first_is_not_counted(
        config: wurk.Config, world: World) -> None:
    """tui.md: answered "`y` (or Enter) or `n` (or Escape)"; what was done counts "only what
    was still there: a job a worker moved first is not counted"."""

    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "retries")
        await confirm(app, pilot, "D", "escape")
        assert RetrySet(config).size() == 3 and app.done == []
        await press(app, pilot, "x", "j", "x")  # the two soonest selected
        assert RetrySet(config).page(0, 1)[0].delete()  # a worker took the first meanwhile
        assert await confirm(app, pilot, "R", "enter") == \
            "Retry the 2 selected jobs in Retries?"
        assert app.done == ["Retried 1 job."]
        assert RetrySet(config).size() == 1 and Queue("default", config).size() == 7

    drive(config, scenario)


def test_a_queues_own_screen_pages_to_either_end_selects_all_and_escape_clears_first(
        config: wurk.Config, world: World, r: redis.Redis) -> None:
    """Help lists ``g / G`` and ``x / A`` on a queue's screen, and tui.md says Escape clears
    the selection before it goes back: each does what it says there too."""
    r.rpush("queue:default", *(json.dumps({"class": "Bulk", "args": [n], "queue": "default",
                                           "jid": f"{n:024x}", "enqueued_at": time.time()})
                               for n in range(30)))  # 36 jobs: two pages

    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "queues")
        await press(app, pilot, "j", "enter")
        assert isinstance(app.screen, QueueScreen) and app.screen.page == 1
        await press(app, pilot, "G")
        assert app.screen.page == 2 and "page 2 of 2" in shown(app)
        await press(app, pilot, "g")
        assert app.screen.page == 1 and "page 1 of 2" in shown(app)
        await press(app, pilot, "A", "escape")  # the selection cleared; still here
        assert isinstance(app.screen, QueueScreen) and not app.screen.table.selected
        await press(app, pilot, "A")
        assert len(app.screen.table.selected) == 25
        question = await confirm(app, pilot, "D")
        assert question == "Delete these 25 jobs from queue default?"
        assert Queue("default", config).size() == 11 and app.done[-1] == "Deleted 25 jobs."
        await press(app, pilot, "escape")
        assert not isinstance(app.screen, QueueScreen)

    drive(config, scenario)


def test_a_selected_job_a_refresh_moves_off_the_page_is_still_the_one_acted_on(
        config: wurk.Config, world: World, r: redis.Redis) -> None:
    """Actions are exact: 25 retries due sooner arrive after a job was selected, pushing it
    to page 2; the selection still names it, and the cursor's new row is left alone."""

    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "retries")
        chosen = RetrySet(config).page(0, 1)[0].jid
        await press(app, pilot, "x")
        soon = time.time() - 1000
        r.zadd("retry", {json.dumps({"class": "Early", "args": [n], "queue": "default",
                                     "jid": f"e{n:023x}", "retry_count": 1,
                                     "error_class": "E", "error_message": "m"}): soon + n
                         for n in range(25)})
        await press(app, pilot, "r")
        assert sheet_rows(app, "#retries-list")[0][3] == "Early"  # the page moved on
        assert await confirm(app, pilot, "D") == "Delete the selected job in Retries?"
        assert app.done[-1] == "Deleted 1 job."
        left = {entry.jid for entry in RetrySet(config).page(0, 100)}
        assert chosen not in left and len(left) == 27

    drive(config, scenario)


def test_a_push_while_a_queue_is_open_leaves_the_cursor_and_the_action_on_its_job(
        config: wurk.Config, world: World, r: redis.Redis) -> None:
    """tui.md: "the cursor stays on the row it was on": a queue's screen lists newest first,
    so each push shifts every job's place; the cursor keeps to its job, and D deletes it."""

    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "queues")
        await press(app, pilot, "j", "enter", "down", "down")
        assert isinstance(app.screen, QueueScreen)
        looked_at = r.lindex("queue:default", 2)
        r.lpush("queue:default", json.dumps({"class": "Newer", "args": [], "jid": "n" * 24,
                                             "queue": "default"}))
        await press(app, pilot, "r")
        assert sheet_rows(app, "#queue-jobs")[0][1] == "Newer"
        await confirm(app, pilot, "D")
        assert app.done[-1] == "Deleted 1 job."
        left = r.lrange("queue:default", 0, -1)
        assert looked_at not in left and len(left) == 6

    drive(config, scenario)


def test_j_and_k_move_between_a_queues_jobs_and_d_deletes_the_one_reached(
        config: wurk.Config, world: World, r: redis.Redis) -> None:
    """Help lists "↑ ↓, j / k: move between rows" everywhere; a queue's screen too."""

    async def scenario(app: TopApp, pilot: Pilot[None]) -> None:
        await tab(app, pilot, "queues")
        await press(app, pilot, "j", "enter", "j", "j", "j", "k")
        assert isinstance(app.screen, QueueScreen) and app.screen.table.cursor_row == 2
        reached = r.lindex("queue:default", 2)
        await confirm(app, pilot, "D")
        left = r.lrange("queue:default", 0, -1)
        assert reached not in left and len(left) == 5

    drive(config, scenario)
