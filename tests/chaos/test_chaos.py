"""The short chaos run, part of the normal suite: 10,000 jobs through five SIGKILLs of a
worker, two Redis restarts and three cuts of every connection, while two threads push
through the same faults with reliable push on (``memory`` and ``disk``). The long run is a
command: ``python -m tests.chaos.run --jobs 100000 --minutes 10 --reliable-push memory,disk``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.run import CUT, KILL, RESTART, Plan, chaos


@pytest.mark.timeout(360)  # real time, 25-60 s here: more on a slower machine
def test_ten_thousand_jobs_through_kills_restarts_and_cuts(tmp_path: Path) -> None:
    result = chaos(Plan(jobs=10_000, workers=2, concurrency=10,
                        reliable_push=("memory", "disk")), tmp_path)
    print("\n" + result.line())
    # What the README and docs/guarantees.md say this run proves, each asserted.
    assert result.faults[KILL] >= 5 and result.faults[RESTART] >= 2 and result.faults[CUT] >= 3
    # The push side: pushes made while Redis restarted or every connection was cut were
    # kept (sent from the buffer later), none raised, and every jid given back ran. Their
    # repeats are bounded with the others' below (a push is never sent twice by the buffer).
    memory, disk = result.pushes
    for pushes in (memory, disk):
        assert pushes.pushed > 500 and pushes.sent_from_buffer > 0, pushes.line()
        assert pushes.raised == 0, pushes.errors[:3]
        assert pushes.lost == 0, pushes.line()
    assert result.figures.pushed == 10_000 + memory.pushed + disk.pushed
    assert result.figures.lost == 0, f"lost: {result.figures.missing[:10]}"
    assert result.figures.completed == result.figures.pushed
    assert result.figures.duplicated <= result.bound
    # Every repeat is of a job that was in flight when a fault struck (the snapshots are
    # exact, tests/chaos/run.py): a repeat of any other job is a bug.
    assert result.unexplained == 0, result.line()
    assert result.leftovers == {}, f"left in Redis: {result.leftovers}\n{result.dead_story}"
    # Jobs that ran past their time limit once (JobTimeout, then a retry) are among the
    # completed above; jobs cancelled mid-run ran at most once each.
    assert result.cancelled >= 50 and result.cancelled_twice == 0, result.line()


def test_batches_through_kills_and_a_restart(tmp_path: Path) -> None:
    """Four waves of three batches each (jobs of 50 ms; each fault waits for some to run),
    through kills, a cut and a Redis restart: every batch fires complete and success exactly
    once, and no pending count goes negative."""
    result = chaos(Plan(jobs=3_000, rounds=4, workers=2, concurrency=10, batches=3,
                        pause=0.05, wait_in_flight=20), tmp_path)
    assert result.batches is not None
    print("\n" + result.line() + "\n" + result.batches.line())
    assert result.faults[KILL] >= 2 and result.faults[RESTART] >= 1
    assert result.in_flight_at_faults > 0  # the faults struck batches mid-run
    assert result.figures.lost == 0, f"lost: {result.figures.missing[:10]}"
    assert result.batches.created == 12
    assert result.batches.fired == 24 and result.batches.missing == 0
    assert result.batches.duplicates == 0
    assert result.batches.negative_pending == 0 and result.batches.samples > 0
    assert result.leftovers == {}, f"left in Redis: {result.leftovers}\n{result.dead_story}"
