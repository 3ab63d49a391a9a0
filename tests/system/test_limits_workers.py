"""A concurrent limiter across two worker processes, one of them SIGKILLed mid-hold."""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Callable

import redis

from tests.system.conftest import Worker, wait_for
from tests.system.limit_jobs import LOCK_TIMEOUT, LOG

JOBS = 60
SETTINGS = """
reaper_interval: 0.5
socket_timeout: 3
skip_default_job_logging: true
"""

Interval = tuple[float, float]


def runs(r: redis.Redis) -> tuple[list[Interval], list[tuple[int, float]], set[str]]:
    """The (start, end) of every run that ended; the (pid, start) of every run that did not;
    the jids that ran to their end."""
    started: dict[tuple[str, int], float] = {}
    done: list[Interval] = []
    finished: set[str] = set()
    for line in r.lrange(LOG, 0, -1):
        what, jid, pid, at = line.split()
        if what == "start":
            started[jid, int(pid)] = float(at)
        elif what == "end":
            done.append((started.pop((jid, int(pid))), float(at)))
            finished.add(jid)
    return done, [(pid, start) for (_, pid), start in started.items()], finished


def most_at_once(intervals: list[Interval], within: Interval | None = None) -> int:
    """How many intervals overlap at once at most (at any instant inside ``within``)."""
    low, high = within if within is not None else (-math.inf, math.inf)
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = most = 0
    for index, (at, step) in enumerate(events):
        running += step
        until = events[index + 1][0] if index + 1 < len(events) else math.inf
        if at <= high and until >= low:  # this count held over part of the window
            most = max(most, running)
    return most


def test_concurrent_3_across_two_workers_holds_through_a_sigkill(
        r: redis.Redis, start_worker: Callable[..., Worker]) -> None:
    workers = [start_worker("-r", "tests.system.limit_jobs", "-c", "10", settings=SETTINGS)
               for _ in range(2)]
    r.delete(LOG)
    from tests.system.limit_jobs import erp_call

    erp_call.perform_bulk([[0.3] for _ in range(JOBS)])
    # Kill whichever worker process holds a slot once a few jobs have run.
    wait_for(lambda: len(runs(r)[2]) >= 6, timeout=30, message="the first runs")
    victim_pid, holding = None, (0.0, 0.0)
    while victim_pid is None:
        for pid, started in runs(r)[1]:
            if pid in (w.process.pid for w in workers):
                victim_pid, holding = pid, (started, started)
                break
        time.sleep(0.01)
    os.kill(victim_pid, signal.SIGKILL)
    killed_at = time.time()
    next(w for w in workers if w.process.pid == victim_pid).wait(10)  # reaped: pid gone
    survivor = next(w for w in workers if w.process.pid != victim_pid)
    wait_for(lambda: len(runs(r)[2]) >= JOBS, timeout=90, message="every job to run to its end")
    assert survivor.process.poll() is None, survivor.output()

    done, unfinished, _ = runs(r)
    killed = [(start, killed_at) for pid, start in unfinished if pid == victim_pid]
    assert killed and all(pid == victim_pid for pid, _ in unfinished)
    intervals = [*done, *killed]  # the killed runs ended at the kill
    assert most_at_once(intervals) <= 3
    # While the dead holder's lock lived (until lock_timeout after it was taken), it kept its
    # slot: the others never ran more than two at once; afterwards they ran three again.
    lock_expiry = holding[0] + LOCK_TIMEOUT
    others = done
    assert most_at_once(others, within=(killed_at + 0.05, lock_expiry - 0.1)) <= 2
    assert most_at_once(others, within=(lock_expiry + 0.1, time.time())) == 3
    assert int(r.hget("lmtr-s:{erp}", "reclaimed") or 0) >= 1
