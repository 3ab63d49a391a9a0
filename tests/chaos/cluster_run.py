"""Redis Cluster under load: jobs over six queues spread on three primaries, drained by
``wurk worker`` processes through faults, and what it cost.

1. ``ClusterRun`` starts a real cluster (``tests.helpers.cluster``: 3 primaries, 3 replicas),
   a ledger Redis no fault touches (jobs record each run there, ``tests.chaos.jobs``), pushes
   every job up front through the ``redis+cluster://`` URL (a share fails once and goes
   through the retry set and the scheduler, a share is scheduled a second or two ahead),
   waits until each primary's replica has it all (``WAIT``), records where each queue's
   keyspace lives (``CLUSTER KEYSLOT`` and ``CLUSTER COUNTKEYSINSLOT`` on its primary) and
   starts the workers, each serving all six queues.
2. Once a share of the jobs has run, each fault of ``faults`` strikes in turn, each after
   more jobs ran: ``primary`` SIGKILLs the primary of the first queue (its replica is
   promoted: the cluster's own failover), ``worker`` SIGKILLs a worker process and starts
   another, ``cut`` closes every client connection of every primary (``CLIENT KILL TYPE
   normal``), ``restart`` stops a primary with SIGTERM and starts it again on its port (its
   append-only file brings its data back, before the cluster would fail it over).
3. ``Result``: jobs pushed, lost (never ran), duplicated runs, the bound the guarantee gives
   (``docs/guarantees.md``: two fetches of ``prefetch`` jobs per processor thread a fault
   hit, and, for a primary killed, the runs finished just before the kill whose ACK its
   replica may not have had), the failover's time, processor threads that died, what is
   left in any keyspace, and the placement of each queue.

The suite's tests are ``tests/system/test_cluster_drain.py`` and
``tests/chaos/test_cluster_chaos.py``; the command runs a plan by hand::

    python -m tests.chaos.cluster_run --jobs 20000 --faults primary
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

import wurk
from tests.chaos import jobs
from tests.helpers.cluster import Cluster, slot_of
from tests.helpers.faults import WORKER_SETTINGS, config_for, ledger_runs, replicated, spawn_worker
from tests.helpers.server import Server, start_server

ROOT = Path(__file__).resolve().parents[2]
PRIMARY, WORKER, CUT, RESTART = "primary", "worker", "cut", "restart"
# Six queues whose keyspaces land two on each primary of a 3-primary cluster made by
# ``redis-cli --cluster create`` (slots 0-5460, 5461-10922, 10923-16383).
QUEUES = ("default", "critical", "mail", "reports", "exports", "low")
ACK_FLUSH = 0.25  # docs/guarantees.md: a finished job's ACK reaches Redis within this
REPEATS_PER_THREAD = 2
DOWN_FOR = 0.3  # a restarted primary stays down this long (well under the node timeout)
BULK = 1000
AFTER = 20  # jobs of each kind pushed to each queue of a promoted replica
DIED = re.compile(r"processor \S+ died")  # wurk.manager's report of a processor's death


@dataclass
class Placement:
    queue: str
    slot: int
    node: int  # the port of the primary serving it when the jobs were pushed
    keys: int  # CLUSTER COUNTKEYSINSLOT on that primary then


@dataclass
class Result:
    pushed: int
    pushed_after_failover: int
    leader: str | None  # who holds the leadership once the drain is done
    lost: int
    duplicated: int
    bound: int
    faults: list[str]
    failover_seconds: float | None
    processor_deaths: int
    leftovers: dict[str, int]
    placements: list[Placement]
    seconds: float
    missing: list[str] = field(default_factory=list)

    @property
    def primaries_used(self) -> int:
        return len({p.node for p in self.placements})

    def line(self) -> str:
        where = " ".join(f"{p.queue}=slot{p.slot}@{p.node}({p.keys} keys)"
                         for p in self.placements)
        failover = "-" if self.failover_seconds is None else f"{self.failover_seconds:.1f}s"
        return (f"cluster: pushed={self.pushed} (after a failover "
                f"{self.pushed_after_failover}) leader={self.leader} lost={self.lost} "
                f"duplicated={self.duplicated} "
                f"(bound {self.bound}) faults={','.join(self.faults) or '-'} "
                f"failover={failover} processor_deaths={self.processor_deaths} "
                f"seconds={self.seconds:.1f} placement: {where}")


@dataclass
class ClusterPlan:
    jobs: int = 20_000
    workers: int = 2
    concurrency: int = 12  # per worker process, its processors shared by the six queues
    faults: tuple[str, ...] = (PRIMARY,)
    pause: float = 0.0005  # each job's work, seconds
    flaky_share: float = 0.01
    scheduled_share: float = 0.02
    strike_every: float = 0.12  # share of the jobs run between two faults (and before one)
    deadline: float = 120.0


class ClusterRun:
    def __init__(self, plan: ClusterPlan, directory: Path) -> None:
        self.plan = plan
        self.directory = directory
        self.cluster = Cluster.start(directory / "cluster",
                                     appendonly=RESTART in plan.faults)
        self.ledger_server: Server = start_server(directory / "ledger")
        self.ledger = redis.Redis.from_url(self.ledger_server.url)
        self.workers: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.threads_hit = 0
        self.late_jids: list[str | None] = []  # pushed after a failover

    # -- the run ----------------------------------------------------------------------------
    def run(self) -> Result:
        started = time.monotonic()
        os.environ[jobs.LEDGER_ENV] = self.ledger_server.url
        pushed = self._push()
        placements = self._placements()
        self.placements = placements
        for _ in range(self.plan.workers):
            self._start_worker()
        failover: float | None = None
        ran_before = 0
        for fault in self.plan.faults:
            ran_before += int(self.plan.jobs * self.plan.strike_every)
            self._until(lambda n=ran_before: self.ledger.llen(jobs.RAN) >= n,
                        self.plan.deadline, f"{ran_before} runs before a fault")
            seconds = self._strike(fault)
            failover = seconds if seconds is not None else failover
        pushed += [jid for jid in self.late_jids if jid]
        self._until(lambda: set(pushed) <= set(ledger_runs(self.ledger)), self.plan.deadline,
                    "every job to run")
        runs = ledger_runs(self.ledger)
        missing = sorted(set(pushed) - set(runs))
        leftovers = self._leftovers()
        leader = self._leader()  # before the workers stop: a stopping leader resigns
        deaths = self._stop_workers()
        return Result(pushed=len(pushed),
                      pushed_after_failover=len([j for j in self.late_jids if j]),
                      leader=leader, lost=len(missing),
                      duplicated=sum(n - 1 for jid, n in runs.items() if n > 1),
                      bound=self.threads_hit * REPEATS_PER_THREAD * wurk.Config().prefetch
                      + self._late_runs, faults=list(self.plan.faults),
                      failover_seconds=failover, processor_deaths=deaths,
                      leftovers=leftovers, placements=placements,
                      seconds=time.monotonic() - started, missing=missing[:10])

    _late_runs = 0

    def _push(self) -> list[str]:
        config = config_for(self.cluster.url)
        client = wurk.Client(config)
        jids: list[str] = []
        per_queue = self.plan.jobs // len(QUEUES)
        for index, queue in enumerate(QUEUES):
            count = per_queue + (self.plan.jobs % len(QUEUES) if index == 0 else 0)
            flaky = int(count * self.plan.flaky_share)
            scheduled = int(count * self.plan.scheduled_share)
            plain = count - flaky - scheduled
            for start in range(0, plain, BULK):
                size = min(BULK, plain - start)
                jids += client.push_bulk({"class": "Chaos::Mark", "queue": queue,
                                          "args": [[self.plan.pause]] * size})
            if flaky:
                jids += client.push_bulk({"class": "Chaos::Flaky", "queue": queue,
                                          "retry": 5, "args": [[self.plan.pause]] * flaky})
            if scheduled:
                jids += client.push_bulk({"class": "Chaos::Mark", "queue": queue,
                                          "at": time.time() + 1.5,
                                          "args": [[self.plan.pause]] * scheduled})
        config.close()
        for node in self.cluster.primaries():  # every push on the replica before any fault
            client_ = node.client(socket_timeout=10)
            replicated(client_)
            client_.close()
        return [jid for jid in jids if jid]

    def _placements(self) -> list[Placement]:
        found = []
        for queue in QUEUES:
            node = self.cluster.primary_of(queue)
            direct = node.client(socket_timeout=5)
            slot = int(direct.execute_command("CLUSTER KEYSLOT", f"{{{queue}}}:queue:{queue}"))
            keys = int(direct.execute_command("CLUSTER COUNTKEYSINSLOT", slot))
            direct.close()
            assert slot == slot_of(queue)
            found.append(Placement(queue, slot, node.port, keys))
        return found

    def _start_worker(self) -> None:
        settings = self.directory / "wurk.yml"
        settings.write_text(WORKER_SETTINGS + f"queues: [{', '.join(QUEUES)}]\n"
                            f"concurrency: {self.plan.concurrency}\n")
        log = self.directory / f"worker-{len(self.workers)}.log"
        process = spawn_worker(log, settings, {**os.environ, "REDIS_URL": self.cluster.url,
                                               "PYTHONUNBUFFERED": "1",
                                               jobs.LEDGER_ENV: self.ledger_server.url})
        self.workers.append((process, log))

    def _strike(self, fault: str) -> float | None:
        live = [process for process, _ in self.workers if process.poll() is None]
        # A worker's processors are shared by the six queues (wurk.fetch.keyspaces): any of
        # them may hold jobs of any keyspace, those fetched ahead in one at a time.
        threads = self.plan.concurrency
        if fault == PRIMARY:
            victim = self.cluster.primary_of(QUEUES[0])
            served = [q for q in QUEUES if self.cluster.primary_port(q) == victim.port]
            killed = time.time()
            victim.kill()
            # Its ACKs of the last moments may not have reached its replica.
            self._late_runs += self._runs_between(killed - ACK_FLUSH - 0.05, killed)
            self.threads_hit += threads * len(live)
            seconds = self.cluster.wait_for_promotion(victim, QUEUES[0])
            self._after_failover(served)
            return seconds
        if fault == WORKER:
            live[0].send_signal(signal.SIGKILL)
            live[0].wait(timeout=10)
            self.threads_hit += threads
            self._start_worker()
        elif fault == CUT:
            for node in self.cluster.primaries():
                direct = node.client(socket_timeout=5)
                direct.execute_command("CLIENT KILL TYPE normal SKIPME yes")
                direct.close()
            self.threads_hit += threads * len(live)
        elif fault == RESTART:
            victim = self.cluster.primary_of(QUEUES[2])
            victim.stop()
            threading.Event().wait(DOWN_FOR)
            victim.start()
            self._until(self.cluster.healthy, 60, "the cluster ok after a restart")
            self.threads_hit += threads * len(live)
        else:
            raise ValueError(f"unknown fault {fault!r}")
        return None

    def _after_failover(self, queues: list[str]) -> None:
        """Jobs pushed to the promoted replica's queues once it serves them: a share fails
        once and a share is scheduled a second ahead, so their running shows the retry and
        the scheduler of those keyspaces carried on after the failover."""
        config = config_for(self.cluster.url)
        client = wurk.Client(config)
        for queue in queues:
            self.late_jids += client.push_bulk({"class": "Chaos::Flaky", "queue": queue,
                                                "retry": 5,
                                                "args": [[self.plan.pause]] * AFTER})
            self.late_jids += client.push_bulk({"class": "Chaos::Mark", "queue": queue,
                                                "at": time.time() + 1.0,
                                                "args": [[self.plan.pause]] * AFTER})
        config.close()

    def _runs_between(self, since: float, until: float) -> int:
        return sum(since <= float(line.decode().split()[2]) <= until
                   for line in self.ledger.lrange(jobs.WHO, 0, -1))

    def _leader(self) -> str | None:
        """The leader's identity in the ``default`` keyspace, waited for a while: after a
        failover of its primary the election goes on on the promoted replica."""
        config = config_for(self.cluster.url)
        key = config.keys.leader
        found: str | None = None
        deadline = time.monotonic() + 20
        while found is None and time.monotonic() < deadline:
            value = config.pool("api").run(lambda r: r.get(key), idempotent=True)
            found = value.decode() if isinstance(value, bytes) else value
            if found is None:
                threading.Event().wait(0.2)
        config.close()
        return found

    def _leftovers(self) -> dict[str, int]:
        found: dict[str, int] = {}
        config = config_for(self.cluster.url)
        for queue in QUEUES:
            view = config.shard(queue)
            keys = view.keys

            def count(r: redis.Redis, q: str = queue, k: wurk.Config = view) -> list[int]:
                return [int(r.llen(k.keys.queue(q))), int(r.zcard(k.keys.retry)),
                        int(r.zcard(k.keys.schedule)), int(r.zcard(k.keys.dead))]

            for name, n in zip(("queue", "retry", "schedule", "dead"),
                               view.pool("api").run(count, idempotent=True), strict=True):
                if n:
                    found[f"{keys.prefix}{name}"] = n
        config.close()
        return found

    def _stop_workers(self) -> int:
        deaths = 0
        for process, log in self.workers:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=10)
            deaths += len(DIED.findall(log.read_text(errors="replace")))
        return deaths

    def stop(self) -> None:
        for process, _ in self.workers:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        self.ledger.close()
        self.ledger_server.stop()
        self.cluster.stop()

    @staticmethod
    def _until(predicate: object, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():  # type: ignore[operator]
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
            threading.Event().wait(0.05)


def cluster_chaos(plan: ClusterPlan, directory: Path | None = None) -> Result:
    place = directory or Path(tempfile.mkdtemp(prefix="wurk-cluster-"))
    run = ClusterRun(plan, place)
    try:
        return run.run()
    finally:
        run.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--faults", default=PRIMARY,
                        help="comma-separated: primary, worker, cut, restart")
    options = parser.parse_args(argv)
    faults = tuple(f for f in options.faults.split(",") if f)
    print(cluster_chaos(ClusterPlan(jobs=options.jobs, workers=options.workers,
                                    faults=faults)).line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
