"""A Sentinel failover under load: the primary SIGKILLed mid-drain, and what it cost.

1. ``SentinelRun`` starts a real deployment (``tests.helpers.sentinel``: one primary, one
   replica, three sentinels), a ledger Redis no fault touches, and ``wurk worker``
   processes given the ``redis+sentinel://`` URL. It pushes part of the jobs up front, then
   keeps pushing the rest from two pushers in this process — one sync, one async (the
   client's ``apush_bulk``), both through the Sentinel URL — while the workers drain.
2. Once about half of the pushers' share is acknowledged, the primary is SIGKILLed (with
   ``replica_lag``, after the replication stream was held back that long at the replica's
   link: a lagging replica, the case in which a failover loses writes). The sentinels
   promote the replica; the killed node is started again as a replica of the new primary
   (with ``push_replicas`` on, a push can be confirmed again only then). The pushers go
   on until ``jobs`` pushes were acknowledged.
3. ``Result``: acknowledged pushes lost (never ran), duplicated runs, pushes that failed
   and whether they ran anyway, the failover's time (kill → the sentinels name the new
   primary) and how long after the kill each process followed it: each worker's first job
   finished after the promotion, each pusher's first push that reached the new primary.
   Jobs record their runs in the ledger (``tests.chaos.jobs``), never in the Redis under
   test.

The suite's test is ``tests/chaos/test_sentinel.py``; the figures with the knob off and on
(docs/sentinel.md) come from the command::

    python -m tests.chaos.sentinel_run --runs 3 --push-replicas 0 --replica-lag 0.5
    python -m tests.chaos.sentinel_run --runs 3 --push-replicas 1 --replica-lag 0.5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

import wurk
from tests.chaos import jobs
from tests.helpers.faults import WORKER_SETTINGS as CHAOS_SETTINGS
from tests.helpers.faults import config_for, ledger_runs, spawn_worker
from tests.helpers.sentinel import Node, Topology
from tests.helpers.server import Server, start_server
from wurk.keys import Keys

ROOT = Path(__file__).resolve().parents[2]
WORKER_SETTINGS = CHAOS_SETTINGS + "leader_renew_interval: 1\nleader_check_interval: 2\n"
PAUSE = 0.001  # each job's work, seconds
# A finished job's ACK reaches Redis within this: the kernel holds a lone ACK up to 0.2 s
# (docs/guarantees.md), and the ledger records the run just before the ACK is sent.
ACK_FLUSH = 0.25
BULK = 20  # jobs per push of a pusher
# How long the figures wait for a leader on the new primary after the drain.
LEADER_PATIENCE = 20.0
# Seconds between two pushes of one pusher: up to 2,000 jobs/s each, so the live pushes span
# the failover rather than ending before it.
PUSH_EVERY = 0.01
SCHEDULED_SHARE = 0.02  # pushed to run 1–3 s later
DRAIN_DEADLINE = 120.0
# A push that failed for want of replicas reached the primary (the writer's message says so):
# its pusher had followed the new primary.
REACHED_PRIMARY = "replica(s) push_replicas asks for"


@dataclass
class Pushed:
    """What one pusher did: the jids of acknowledged pushes, and of pushes that raised."""

    acknowledged: list[str] = field(default_factory=list)
    failed: int = 0  # jobs of pushes that raised (some may have reached Redis)
    errors: list[str] = field(default_factory=list)
    followed_at: float | None = None  # wall time of its first push to reach the new primary


@dataclass
class Result:
    jobs: int
    push_replicas: int
    replica_lag: float
    lost: int  # acknowledged pushes that never ran
    duplicated: int  # runs beyond the first, of any job
    failed_pushes: int  # jobs of pushes that raised
    failed_that_ran: int
    failover_seconds: float  # kill → the sentinels name the new primary
    followed_after: dict[str, float]  # process → seconds from the kill to its following
    in_flight_bound: int
    unreplicated_acks: int  # jobs that finished while the replica got nothing more
    seconds: float
    processor_deaths: int
    leader: str | None
    leftovers: dict[str, int]
    failovers: int = 1  # the sentinels' count: more than the one the run made
    account: str = ""  # what the sentinels logged of each primary's downs and switches
    drained_after: float | None = None  # seconds; None: not drained within DRAIN_DEADLINE
    undrained: tuple[int, dict[str, int]] | None = None  # (port, what was left) if not
    missing: list[str] = field(default_factory=list)

    @property
    def bound(self) -> int:
        """What the guarantee allows to repeat (docs/guarantees.md: a failover that loses
        writes repeats each job whose move or ACK it lost)."""
        return self.in_flight_bound + self.unreplicated_acks

    def line(self) -> str:
        followed = " ".join(f"{name}={after:.1f}s" for name, after in
                            sorted(self.followed_after.items()))
        return (f"sentinel failover: push_replicas={self.push_replicas} replica_lag="
                f"{self.replica_lag}s acknowledged="
                f"{self.jobs} lost={self.lost} duplicated={self.duplicated} (bound "
                f"{self.bound} = in flight {self.in_flight_bound} + finished unreplicated "
                f"{self.unreplicated_acks}) failed_pushes={self.failed_pushes} (of which ran "
                f"{self.failed_that_ran}) failover={self.failover_seconds:.1f}s followed: "
                f"{followed} processor_deaths={self.processor_deaths} "
                f"failovers={self.failovers} drained_after="
                f"{'never' if self.drained_after is None else f'{self.drained_after:.1f}s'} "
                f"seconds={self.seconds:.1f}")


class SentinelRun:
    def __init__(self, directory: Path, *, jobs_total: int = 10_000, workers: int = 2,
                 concurrency: int = 10, push_replicas: int = 1,
                 replica_lag: float = 0.0) -> None:
        self.directory = directory
        self.jobs_total = jobs_total
        self.concurrency = concurrency
        self.push_replicas = push_replicas
        self.replica_lag = replica_lag
        self.topology = Topology.start(directory / "sentinel", replica_link=replica_lag > 0)
        self.ledger_server: Server = start_server(directory / "ledger")
        self.ledger = redis.Redis(port=self.ledger_server.port)
        (directory / "wurk.yml").write_text(WORKER_SETTINGS)
        self.env = {**os.environ, "REDIS_URL": self.topology.url, "PYTHONUNBUFFERED": "1",
                    jobs.LEDGER_ENV: f"redis://127.0.0.1:{self.ledger_server.port}/0"}
        # Generous: a replica on a loaded 2-core machine may take a second to confirm.
        self.config = config_for(self.topology.url, push_replicas=push_replicas,
                                 push_replica_timeout=2.0, socket_timeout=5.0)
        self.workers = [self._worker(serial) for serial in range(1, workers + 1)]
        self.up_front: list[str] = []
        self.pushers = [Pushed(), Pushed()]
        self._stop_pushing = threading.Event()
        self._promoted_wall: float | None = None
        self._killed_wall: float | None = None
        self._held_wall = 0.0  # since when the replica got nothing more (the kill, or lag)
        # How long the drain took once the pushers were done; or, if it never came, the
        # port the drain was read on and what was left there.
        self._drained_after: float | None = None
        self._undrained: tuple[int, dict[str, int]] | None = None

    # -- the run ------------------------------------------------------------------------------
    def run(self) -> Result:
        started = time.monotonic()
        up_front = self.jobs_total // 2
        self.up_front = self._push(wurk.Client(self.config), up_front)
        self._until(lambda: self.ledger.llen(jobs.RAN) > 0, 60, "the workers running jobs")
        share = (self.jobs_total - up_front) // 2
        targets = [share, self.jobs_total - up_front - share]
        threads = [threading.Thread(target=self._sync_pusher, args=(targets[0],),
                                    name="sentinel-pusher-sync"),
                   threading.Thread(target=lambda: asyncio.run(self._async_pusher(targets[1])),
                                    name="sentinel-pusher-async")]
        for thread in threads:
            thread.start()
        try:
            self._until(lambda: self._acknowledged() >= up_front + sum(targets) // 2, 60,
                        "half the live pushes acknowledged")
            old, killed_mono, killed_wall = self._strike()
            promoted_mono = self.topology.wait_for_promotion(old)
            self._promoted_wall = killed_wall + (promoted_mono - killed_mono)
            self._restart(old)
            for thread in threads:
                thread.join(timeout=DRAIN_DEADLINE)
            self._wait_for_drain()
        finally:
            self._stop_pushing.set()
            for thread in threads:
                thread.join(timeout=30)
            deaths, leader = self._worker_health()
            self._stop_workers()
        return self._result(started, killed_wall, promoted_mono - killed_mono, deaths, leader)

    def _strike(self) -> tuple[Node, float, float]:
        """SIGKILL the primary — with ``replica_lag``, after holding the replication stream
        back that long at the replica's link: a replica lagging that far behind (a slow
        link, a busy host). The kill takes what the link held with it, as a dead host takes
        its unsent buffers: the primary acknowledged it, the replica never gets it."""
        link = self.topology.link
        self._held_wall = time.time()
        if link is not None:
            link.blackhole()
            threading.Event().wait(self.replica_lag)
        try:
            old, killed = self.topology.kill_primary()
        finally:
            self._killed_wall = time.time()
            if link is not None:
                link.cut()
                link.restore()
        return old, killed, self._killed_wall

    def close(self) -> None:
        for process, _ in self.workers:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        self.config.close()
        self.topology.stop()
        self.ledger_server.stop()

    # -- pushing ------------------------------------------------------------------------------
    def _push(self, client: wurk.Client, count: int) -> list[str]:
        scheduled = int(count * SCHEDULED_SHARE)
        jids = client.push_bulk({"class": "Chaos::Mark",
                                 "args": [[PAUSE]] * (count - scheduled)})
        jids += client.push_bulk({"class": "Chaos::Mark", "args": [[PAUSE]] * scheduled,
                                  "at": time.time() + 2})
        return [jid for jid in jids if jid]

    @staticmethod
    def _item(serial: int, left: int) -> dict[str, Any]:
        """Every 30th push scheduled jobs (1 s later): the scheduler's work spans the
        failover. (No failing jobs: a retry's jitter, up to 9 s, would only lengthen the
        run; retries go through the same scheduler.)"""
        item: dict[str, Any] = {"class": "Chaos::Mark", "args": [[PAUSE]] * min(BULK, left)}
        if serial % 30 == 0:
            item["at"] = time.time() + 1
        return item

    def _sync_pusher(self, target: int) -> None:
        record = self.pushers[0]
        client = wurk.Client(self.config)
        serial = 0
        while len(record.acknowledged) < target and not self._stop_pushing.is_set():
            serial += 1
            item = self._item(serial, target - len(record.acknowledged))
            began = time.time()
            try:
                jids = client.push_bulk(item)
            except wurk.RedisUnavailable as exc:
                self._failed(record, len(item["args"]), exc, began)
            else:
                self._acknowledge(record, jids, began)
            self._stop_pushing.wait(PUSH_EVERY)

    async def _async_pusher(self, target: int) -> None:
        record = self.pushers[1]
        client = wurk.Client(self.config)
        serial = 0
        try:
            while len(record.acknowledged) < target and not self._stop_pushing.is_set():
                serial += 1
                item = self._item(serial, target - len(record.acknowledged))
                began = time.time()
                try:
                    jids = await client.apush_bulk(item)
                except wurk.RedisUnavailable as exc:
                    self._failed(record, len(item["args"]), exc, began)
                else:
                    self._acknowledge(record, jids, began)
                await asyncio.sleep(PUSH_EVERY)
        finally:
            await self.config.aclose_async_pool()

    def _acknowledge(self, record: Pushed, jids: list[str | None], began: float) -> None:
        record.acknowledged += [jid for jid in jids if jid]
        self._note_followed(record, began)

    def _failed(self, record: Pushed, count: int, exc: Exception, began: float) -> None:
        record.failed += count
        record.errors.append(str(exc))
        if REACHED_PRIMARY in str(exc):  # it reached the new primary, which waited for WAIT
            self._note_followed(record, began)

    def _note_followed(self, record: Pushed, began: float) -> None:
        """A push begun after the kill reached a primary — the new one: its pusher had
        followed when it began it (a push with push_replicas then waits for replicas, up to
        push_replica_timeout: not the pusher's delay)."""
        killed = self._killed_wall
        if record.followed_at is None and killed is not None and began > killed:
            record.followed_at = began

    def _acknowledged(self) -> int:
        return len(self.up_front) + sum(len(record.acknowledged) for record in self.pushers)

    def _all_acknowledged(self) -> set[str]:
        return {*self.up_front, *(jid for record in self.pushers for jid in record.acknowledged)}

    # -- the deployment -----------------------------------------------------------------------
    def _worker(self, serial: int) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.directory / f"worker-{serial}.log"
        return spawn_worker(log, self.directory / "wurk.yml", self.env, self.concurrency), log

    def _restart(self, node: Node) -> None:
        """The killed node back on its port as a replica of the new primary, as a deploy
        whose configuration follows the sentinels starts it (left to themselves, the
        sentinels would turn it into one about 8 s after it came back)."""
        node.start(["--replicaof", "127.0.0.1", str(self.topology.primary().port)])

    def _wait_for_drain(self) -> None:
        """Until nothing is left to run (the pushers are done): every queue, private list,
        the retry and the scheduled set empty. A lost job never comes: no waiting for it."""
        began = time.monotonic()
        deadline = began + DRAIN_DEADLINE
        primary = self.topology.primary()
        direct = primary.client(socket_timeout=5)
        while not _drained(direct):
            for process, log in self.workers:
                if process.poll() is not None:
                    raise RuntimeError(f"a worker exited:\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                # The figures will say what was lost; what was left, and where, is kept.
                self._undrained = (primary.port, _leftovers(direct))
                return
            threading.Event().wait(0.2)
        self._drained_after = time.monotonic() - began

    def _worker_health(self) -> tuple[int, str | None]:
        """Processor deaths the workers' records report, and who holds the leadership."""
        direct = self.topology.primary().client(socket_timeout=5, decode_responses=True)
        deaths = 0
        for identity in direct.smembers("processes"):
            deaths += int(direct.hget(identity, "processor_deaths") or 0)
        # The election goes on on the new primary: a term lapses (2 s here) and a follower
        # checks every 2 s, which a loaded machine may stretch past the drain's end.
        deadline = time.monotonic() + LEADER_PATIENCE
        leader = direct.get("dear-leader")
        while leader is None and time.monotonic() < deadline:
            threading.Event().wait(0.2)
            leader = direct.get("dear-leader")
        return deaths, leader

    def _stop_workers(self) -> None:
        for process, _ in self.workers:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process, _ in self.workers:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)

    # -- the figures ----------------------------------------------------------------------------
    def _result(self, started: float, killed_wall: float, failover: float, deaths: int,
                leader: str | None) -> Result:
        runs = ledger_runs(self.ledger)
        acknowledged = self._all_acknowledged()
        missing = sorted(acknowledged - set(runs))
        followed = {f"worker-{serial}": after - killed_wall
                    for serial, after in enumerate(self._workers_followed(), start=1)}
        for name, record in zip(("pusher-sync", "pusher-async"), self.pushers, strict=True):
            if record.followed_at is not None:
                followed[name] = record.followed_at - killed_wall
        prefetch = wurk.Config().prefetch
        return Result(
            jobs=len(acknowledged), push_replicas=self.push_replicas,
            replica_lag=self.replica_lag, lost=len(missing),
            duplicated=sum(n - 1 for n in runs.values() if n > 1),
            # Every job in Redis came from a push: one that ran and was never acknowledged
            # came from a push that raised.
            failed_pushes=sum(record.failed for record in self.pushers),
            failed_that_ran=len(set(runs) - acknowledged),
            failover_seconds=failover, followed_after=followed,
            # What a fault may repeat: the jobs in flight (two per processor thread, each move
            # carrying up to prefetch), and every job that finished after the replica got its
            # last write — the ACK the new primary never saw (ACKs are sent within
            # ACK_FLUSH of a job's end, and its run is recorded just before).
            in_flight_bound=2 * self.concurrency * prefetch * len(self.workers),
            unreplicated_acks=self._runs_between(self._held_wall - ACK_FLUSH, killed_wall),
            seconds=time.monotonic() - started, processor_deaths=deaths, leader=leader,
            leftovers=_leftovers(self.topology.primary().client(socket_timeout=5)),
            failovers=self.topology.failovers(), account=self.topology.account(),
            drained_after=self._drained_after,
            undrained=self._undrained, missing=missing)

    def _runs_between(self, since: float, until: float) -> int:
        """Runs the ledger recorded between two wall times."""
        return sum(since <= float(line.decode().split()[2]) <= until
                   for line in self.ledger.lrange(jobs.WHO, 0, -1))

    def _workers_followed(self) -> list[float]:
        """Each worker's first finished job after the promotion (wall time), from the
        ledger's ``[jid pid time]`` records; inf for one that never finished one."""
        promoted = self._promoted_wall or 0.0
        first: dict[int, float] = {}
        for line in self.ledger.lrange(jobs.WHO, 0, -1):
            _, pid, when = line.decode().split()
            at = float(when)
            if at > promoted and at < first.get(int(pid), float("inf")):
                first[int(pid)] = at
        return [first.get(process.pid, float("inf")) for process, _ in self.workers]

    @staticmethod
    def _until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
            threading.Event().wait(0.02)


def _drained(direct: redis.Redis) -> bool:
    """Nothing left to run: the sets, the scheduler's claims (a due job taken out of its set,
    not yet pushed: a queue empty meanwhile is not drained), every queue and private list."""
    keys = Keys()
    try:
        if any(direct.zcard(name) for name in (keys.retry, keys.schedule, keys.retry_claims,
                                               keys.schedule_claims)):
            return False
        return not any(direct.llen(key) for key in direct.scan_iter(match="queue:*", count=1000))
    except redis.RedisError:
        return False


def _leftovers(direct: redis.Redis) -> dict[str, int]:
    counts = {"dead": int(direct.zcard("dead")), "retry": int(direct.zcard("retry")),
              "schedule": int(direct.zcard("schedule"))}
    for key in direct.scan_iter(match="queue:*", count=1000):
        counts[key.decode()] = int(direct.llen(key))
    return {name: n for name, n in counts.items() if n}


def failover(directory: Path | None = None, **options: Any) -> Result:
    """One run in ``directory`` (a temporary one by default)."""
    with tempfile.TemporaryDirectory(prefix="wurk-sentinel-") as scratch:
        run = SentinelRun(directory or Path(scratch), **options)
        try:
            return run.run()
        finally:
            run.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.sentinel_run",
                                     description="wurk through a Sentinel failover")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--push-replicas", type=int, default=1,
                        help="replicas each push waits for (0: the knob off)")
    parser.add_argument("--replica-lag", type=float, default=0.0,
                        help="hold the replication stream back this many seconds before the "
                             "kill (a lagging replica)")
    args = parser.parse_args(argv)
    ok = True
    for _ in range(args.runs):
        result = failover(jobs_total=args.jobs, push_replicas=args.push_replicas,
                          replica_lag=args.replica_lag)
        print(result.line(), flush=True)
        if result.missing:
            print(f"  lost jids (first 10): {result.missing[:10]}", flush=True)
        if result.leftovers:
            print(f"  left in Redis: {result.leftovers}", flush=True)
        ok = ok and (result.lost == 0 or args.push_replicas == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
