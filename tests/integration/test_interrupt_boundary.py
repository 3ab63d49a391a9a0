"""The shutdown interrupt lands only inside a job's own frame: stopped at the deadline over and
over, at random moments around the job boundary, a processor loses and doubles no ACK."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from typing import ClassVar

import pytest
import redis

import wurk
from wurk.config import Capsule
from wurk.fetch.basic import Fetcher, UnitOfWork
from wurk.fetch.reliable import Claims, ReliableFetch
from wurk.manager import Manager, capsule_pool
from wurk.metrics.counters import Counters
from wurk.processor import JobRunner
from wurk.runtime.busy import Busy
from wurk.runtime.identity import Identity

QUEUE = "boundary"
RAN = "boundary:ran"


@wurk.job(name="Boundary::Mark", queue=QUEUE)
def mark() -> None:
    time.sleep(0.0005)  # long enough that a stop often catches the job at its very end
    with wurk.redis() as conn:
        conn.call("RPUSH", RAN, wurk.current_jid())


class Recording(Manager):
    """A manager that remembers which jobs it gave back at the deadline."""

    given_back: ClassVar[Counter[str]] = Counter()

    def _requeue(self, units: list[UnitOfWork]) -> None:
        for unit in units:
            Recording.given_back[json.loads(unit.raw)["jid"]] += 1
        super()._requeue(units)


def private_entries(r: redis.Redis) -> int:
    return sum(int(r.llen(key)) for key in r.scan_iter(match=f"queue:{QUEUE}|*"))


# An interrupt may land in a weakref callback the job's frame runs (a WeakSet's ``_remove``
# as an object dies): the interpreter reports it as unraisable and the job runs on. The
# guard still counts it sent, so that job's end is not acknowledged — what is asserted here.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_interrupts_at_the_job_boundary_lose_and_double_no_ack(
    config: wurk.Config, r: redis.Redis
) -> None:
    capsule = Capsule(queues=[(QUEUE, 0)], concurrency=1)
    identity, claims = Identity.current(), Claims()

    def make_fetcher(capsule: Capsule, slot: int) -> Fetcher:
        return ReliableFetch(config, capsule, capsule_pool(config, capsule),
                             identity=identity, capsule_index=0, slot=slot, claims=claims)

    runner = JobRunner(config, counters=Counters(), busy=Busy())
    pushed = mark.perform_bulk([[] for _ in range(600)])
    Recording.given_back.clear()
    rng = random.Random(16)
    rounds = interrupted = 0
    # 150 stops send about 80 interrupts at job boundaries (400 sent 223 in 42 s)
    while r.llen(f"queue:{QUEUE}") and rounds < 150:
        rounds += 1
        manager = Recording(config, capsule, runner, make_fetcher)
        manager.start()
        time.sleep(rng.uniform(0.0005, 0.004))
        busy = manager.processors
        manager.stop(time.monotonic())  # the deadline is now: give back, then interrupt
        interrupted += sum(1 for p in busy if p._guard.interrupted)
        assert not manager.processors, "the interrupted processor did not end"
        leftover = private_entries(r)
        assert leftover == 0, f"round {rounds}: {leftover} job(s) left in the private list " \
                              "(an ACK or a give-back was lost)"
    runner.close()
    ran = Counter(r.lrange(RAN, 0, -1))
    lost = set(pushed) - set(ran)
    doubled = {jid: n for jid, n in ran.items() if n > 1 + Recording.given_back[jid]}
    print(f"\ninterrupt boundary: {rounds} stops, {interrupted} interrupts sent, "
          f"{sum(Recording.given_back.values())} jobs given back, {len(ran)} ran")
    assert rounds >= 50 and interrupted >= 10
    assert not doubled, f"ran more often than given back: {doubled}"
    if not r.llen(f"queue:{QUEUE}"):
        assert not lost
    else:  # the round cap came first: what has not run is still queued, none lost
        queued = {json.loads(x)["jid"] for x in r.lrange(f"queue:{QUEUE}", 0, -1)}
        assert lost <= queued
