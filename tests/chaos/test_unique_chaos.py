"""Unique jobs under the chaos suite's faults: SIGKILLed workers and Redis restarts.

A pusher pushes every key's unique job again and again while two workers run them and the
faults strike. Then, from the ledger (a Redis the faults never touch):

- no second job of a key was let in while the first was pending: every job accepted for a
  key was pushed after the previous one first completed (a job run twice because a fault hit
  it between its end and its ACK is a repeat of one job, which reliable fetch allows);
- every refused push was refused while a job of its key was pending — or its lock not yet
  released because Redis was down as it ended — or by a lock a fault kept from release;
- no job was lost, and no lock outlives its job by more than ``unique_for``: every lock
  left has a lifetime, and expires at most ``unique_for`` after its job first completed.
"""

from __future__ import annotations

import itertools
import json
import random
import signal
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import redis

import wurk
from tests.chaos import jobs
from tests.chaos.run import DOWN_FOR, WORKER_SETTINGS, Plan, Worker
from tests.helpers.faults import Restartable, config_for
from tests.helpers.server import start_server
from wurk.keys import Keys
from wurk.unique import RELEASE_RETRIES

KEYS = 16
PAUSE = 0.15  # each job's run: long enough that a fault finds some in flight
FAULTS = ("kill", "restart", "kill", "kill", "restart", "kill")
STRIKE_EVERY = (1.0, 1.8)
DRAIN_DEADLINE = 90.0
# How long after a run's end (stamped before the job records it in the ledger) its worker
# may take to release the lock on a loaded 2-core machine: a ledger write, the job's return
# and the release's round trip, each behind nine other busy threads (a full suite run at
# load 8 once took longer than 0.5 s; a job's run is 0.15 s, so a push refused more than
# 1.5 s after any end of its key still fails the check).
RELEASE_LAG = 1.5


@dataclass
class Push:
    key: int
    jid: str | None  # None: refused as a duplicate, or failed (``failed``)
    sent: float
    answered: float
    failed: bool = False


@dataclass
class Runs:
    key: int
    first_start: float
    first_end: float
    last_end: float  # a repeat (a fault between the end and the ACK) holds the lock longer
    count: int


class UniqueChaos:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.redis = Restartable(directory / "redis")
        self.ledger_server = start_server(directory / "ledger")
        self.ledger = redis.Redis(port=self.ledger_server.port)
        (directory / "wurk.yml").write_text(WORKER_SETTINGS)
        self.env = {"REDIS_URL": self.redis.url, "PYTHONUNBUFFERED": "1",
                    jobs.LEDGER_ENV: f"redis://127.0.0.1:{self.ledger_server.port}/0"}
        self.plan = Plan(workers=2, concurrency=10)
        self.workers: list[Worker] = []
        self.serial = 0
        self.pushes: list[Push] = []
        self.outages: list[tuple[float, float]] = []  # Redis down from, up again at
        self.stopping = threading.Event()

    def spawn(self) -> None:
        import os

        self.serial += 1
        self.workers.append(Worker(self.serial, self.directory, {**os.environ, **self.env},
                                   self.plan))

    def push_forever(self) -> None:
        client = wurk.Client(config_for(self.redis.url))
        try:
            while not self.stopping.is_set():
                for key in range(KEYS):
                    sent = time.time()
                    try:
                        jid = client.push({"class": "Chaos::Unique", "args": [key, PAUSE],
                                           "unique_for": jobs.UNIQUE_FOR})
                        self.pushes.append(Push(key, jid, sent, time.time()))
                    except wurk.RedisUnavailable:
                        self.pushes.append(Push(key, None, sent, time.time(), failed=True))
                self.stopping.wait(0.03)
        finally:
            client.config.close()

    def strike(self, fault: str, rng: random.Random) -> None:
        if fault == "kill":
            victim = self.workers.pop(rng.randrange(len(self.workers)))
            victim.stop(signal.SIGKILL, timeout=10)
            self.spawn()
        else:
            down = time.time()
            self.redis.restart(down_for=DOWN_FOR)
            self.outages.append((down, time.time()))

    def release_delayed(self, ended: float, refused_at: float) -> bool:
        """Whether an outage struck as this run ended, so its worker could release the lock
        only once Redis was back (it keeps trying for a few seconds, RELEASE_RETRIES)."""
        patience = sum(RELEASE_RETRIES) + RELEASE_LAG
        return any(down <= ended + RELEASE_LAG and up >= ended and refused_at <= up + patience
                   for down, up in self.outages)

    def runs(self) -> dict[str, Runs]:
        found: dict[str, Runs] = {}
        for raw in self.ledger.lrange(jobs.UNIQUE_RUNS, 0, -1):
            key, jid, _, started, ended = json.loads(raw)
            seen = found.get(jid)
            if seen is None:
                found[jid] = Runs(key, started, ended, ended, 1)
            else:
                seen.count += 1
                seen.last_end = max(seen.last_end, ended)
                if ended < seen.first_end:
                    seen.first_start, seen.first_end = started, ended
        return found

    def drained(self, direct: redis.Redis) -> bool:
        keys = Keys()  # the scheduler's claims too: a due job taken out, not yet pushed
        if any(direct.zcard(name) for name in (keys.retry, keys.schedule, keys.retry_claims,
                                               keys.schedule_claims)):
            return False
        return not any(direct.llen(key) for key in direct.scan_iter(match="queue:*"))

    def close(self) -> None:
        for worker in self.workers:
            worker.stop(signal.SIGKILL, timeout=10)
        self.redis.stop()
        self.ledger_server.stop()


def test_unique_pushes_hold_through_worker_kills_and_redis_restarts(tmp_path: Path) -> None:
    chaos = UniqueChaos(tmp_path)
    rng = random.Random()
    pusher = threading.Thread(target=chaos.push_forever, name="unique-pusher")
    try:
        for _ in range(2):
            chaos.spawn()
        pusher.start()
        for fault in FAULTS:
            threading.Event().wait(rng.uniform(*STRIKE_EVERY))
            chaos.strike(fault, rng)
        threading.Event().wait(1.0)
        chaos.stopping.set()
        pusher.join(30)
        direct = chaos.redis.client(socket_timeout=10)
        accepted = {push.jid: push for push in chaos.pushes if push.jid}
        deadline = time.monotonic() + DRAIN_DEADLINE
        while not (set(accepted) <= set(chaos.runs()) and chaos.drained(direct)):
            assert time.monotonic() < deadline, "the accepted jobs did not all run"
            threading.Event().wait(0.2)
        locks = {key: (direct.get(key), direct.pttl(key)) for key in direct.scan_iter("unique:*")}
        checked_at = time.time()
        runs = chaos.runs()
    finally:
        chaos.stopping.set()
        chaos.close()

    refused = [push for push in chaos.pushes if push.jid is None and not push.failed]
    failed = [push for push in chaos.pushes if push.failed]
    repeats = sum(run.count - 1 for run in runs.values())
    print(f"\nunique chaos: pushes={len(chaos.pushes)} accepted={len(accepted)} "
          f"refused={len(refused)} failed={len(failed)} jobs_run={len(runs)} "
          f"repeats={repeats} locks_left={len(locks)}")
    assert len(accepted) >= KEYS and len(refused) > len(accepted)  # duplicates were refused

    # Nothing lost; anything that ran was pushed (accepted, or a push whose reply a fault
    # cut off after Redis took it).
    assert set(accepted) <= set(runs)
    assert not (set(runs) - set(accepted)) or failed

    # One pending job per key at a time.
    by_key: dict[int, list[tuple[str, Runs]]] = defaultdict(list)
    for jid, run in runs.items():
        by_key[run.key].append((jid, run))
    for key, entries in by_key.items():
        entries.sort(key=lambda entry: entry[1].first_start)
        for (_, earlier), (jid, later) in itertools.pairwise(entries):
            pushed_by = accepted[jid].answered if jid in accepted else later.first_start
            assert pushed_by > earlier.first_end, (
                f"key {key}: {jid} was let in while an earlier job of its key was pending")

    # Every refusal had a reason: a pending job of its key (its lock is released a moment
    # after its run ends, by the worker, so "pending" stretches a little past the end; longer
    # when Redis was down then), or a lock a fault kept from being released.
    holders = {holder.decode() for holder, _ in locks.values() if holder}
    for push in refused:
        reasons = [jid for jid, run in runs.items() if run.key == push.key
                   and (jid not in accepted or accepted[jid].sent <= push.answered)
                   and (run.last_end >= push.sent - RELEASE_LAG or jid in holders
                        or chaos.release_delayed(run.last_end, push.sent))]
        assert reasons, f"a push of key {push.key} at {push.sent:.3f} was refused with no " \
                        "job of its key pending"

    # No lock outlives its job by more than unique_for.
    for key, (holder, pttl) in locks.items():
        assert holder is not None and pttl > 0, f"{key} has no lifetime"
        run = runs[holder.decode()]
        assert checked_at + pttl / 1000 <= run.first_end + jobs.UNIQUE_FOR + 1
