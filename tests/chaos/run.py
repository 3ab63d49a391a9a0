"""The chaos run: a workload worked off through repeated faults, and one line of figures.

1. ``Plan``: how many jobs, worker processes and threads, and faults — a repeating cycle of
   SIGKILLs of a worker, Redis restarts (append-only file on, stopped with SIGTERM so it
   flushes, started again on the same port) and cuts of every connection at the proxy.
2. ``ChaosRun`` starts its own Redis, a ledger Redis the faults never touch (jobs record
   each run there, ``tests.chaos.jobs``), the fault proxy and ``wurk worker`` processes
   connected through it. Each round pushes a wave of jobs (straight to Redis: the client's
   own faults are tested elsewhere), lets them get in flight, then strikes.
3. With ``Plan.batches``, each wave is pushed as that many batches (``wurk.Batch``, their
   callbacks recorded in the ledger) and ``BatchFigures`` counts batches created, callbacks
   fired, callbacks fired twice, callbacks missing, and whether a sampled pending count was
   ever negative.
4. With ``Plan.reliable_push`` (``memory``, ``disk`` or both), a ``Pusher`` per kind pushes
   jobs from a thread of this process *through the fault proxy* with reliable push on, all
   through the run: pushes made while Redis restarts or every connection is cut are kept
   and sent once it answers. ``PushFigures`` counts them: pushed (jids returned), sent from
   the buffer, pushes that raised, and how many of those jids never ran.
5. ``Result`` has the figures: pushed, completed, duplicated, lost; the bound on duplicates
   the guarantee gives (``docs/guarantees.md``: two per processor thread the fault hit);
   the jobs seen in flight when each fault struck, and how many duplicates were of a job
   not among them (``unexplained``). The in-flight snapshots are exact: a killed worker is
   frozen while its lists are read; around a restart or a cut no worker can reach Redis
   until the lists are read again, after Redis has done with every connection it had.

The short run is ``tests/chaos/test_chaos.py``; the long one is a command::

    python -m tests.chaos.run --jobs 100000 --minutes 10
    python -m tests.chaos.run --jobs 40000 --minutes 4 --reliable-push memory,disk
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import redis

import wurk
from tests.chaos import jobs
from tests.helpers.faults import (
    WORKER_SETTINGS,
    Figures,
    Restartable,
    config_for,
    figures,
    ledger_runs,
    spawn_worker,
)
from tests.helpers.proxy import FaultProxy
from tests.helpers.server import Server, start_server
from wurk.client.default import default_client
from wurk.client.reliable import ReliableWriter
from wurk.keys import Keys

ROOT = Path(__file__).resolve().parents[2]
KILL, RESTART, CUT = "kill", "restart", "cut"
# Five kills, two restarts and three cuts in every ten faults.
CYCLE = (KILL, CUT, KILL, RESTART, KILL, CUT, KILL, RESTART, KILL, CUT)
# How long a restarted Redis stays down: long enough that every worker sees it gone.
DOWN_FOR = 0.5
# A long run strikes about this often (a wave, its settle time, the fault), and its jobs
# take longer, so that a fault finds the waves half done, as the short run's do.
LONG_ROUND_SECONDS = 0.8
LONG_JOB_PAUSE = 0.02


# The guarantee (docs/guarantees.md): a fault repeats at most the job a processor thread
# runs and the one it just finished, whose ACK the kernel may still hold for the connection's
# next write (sent when the process dies, but a reaper can overtake it through the proxy).
REPEATS_PER_THREAD = 2


@dataclass
class Plan:
    jobs: int = 10_000
    rounds: int = len(CYCLE)
    workers: int = 2
    concurrency: int = 10
    pause: float = 0.001  # each job's work, seconds
    flaky_share: float = 0.01  # fail once, then pass through retry and the scheduler
    timed_share: float = 0.002  # run past the time limit once (JobTimeout), then pass
    # Cancelled right after the wave is pushed (``wurk.cancel``): waiting, running or done by
    # then; each runs at most once and is not counted as pushed.
    cancel_share: float = 0.01
    scheduled_share: float = 0.05  # pushed to run 1–5 s later
    settle: tuple[float, float] = (0.2, 0.8)  # wait after a wave before striking, seconds
    seed: int = field(default_factory=lambda: random.randrange(1 << 30))
    deadline: float = 120.0  # for every job to have run once the faults stop
    minutes: float | None = None  # strike until then (rounds only spreads the jobs)
    batches: int = 0  # batches per wave; 0: the wave is pushed as plain jobs
    # Before each fault, wait up to this long for a job in flight: workers booting slowly on
    # a loaded machine would otherwise meet every fault idle. 0: strike after the settle.
    wait_in_flight: float = 0.0
    # Pushers through the proxy with reliable push on, one per kind ("memory", "disk"),
    # each pushing one job every ``push_interval`` seconds (10 % scheduled 1–3 s ahead).
    reliable_push: tuple[str, ...] = ()
    push_interval: float = 0.01

    @classmethod
    def long(cls, jobs: int, minutes: float, **options: object) -> Plan:
        rounds = max(len(CYCLE), int(minutes * 60 / LONG_ROUND_SECONDS))
        return cls(jobs=jobs, rounds=rounds, pause=LONG_JOB_PAUSE, deadline=300.0,
                   minutes=minutes, **options)  # type: ignore[arg-type]


EVENTS = ("complete", "success")
# The name of the connection that samples pending counts: a reader of the run, not a worker.
SAMPLER = "chaos-pending-sampler"  # what each batch of the run must fire (no job dies)


@dataclass
class BatchFigures:
    created: int = 0
    fired: int = 0  # distinct (event, batch) callbacks that ran
    duplicates: int = 0  # callbacks fired more than once (distinct jobs for one event)
    missing: int = 0  # expected callbacks that never ran
    negative_pending: int = 0  # samples of a pending count below zero
    samples: int = 0

    def line(self) -> str:
        never = "never" if not self.negative_pending else f"{self.negative_pending} times"
        return (f"batches created={self.created} callbacks fired={self.fired} "
                f"duplicates={self.duplicates} missing={self.missing} pending<0={never} "
                f"(of {self.samples} samples)")


@dataclass
class PushFigures:
    kind: str
    pushed: int = 0  # jids the pusher was given back
    sent_from_buffer: int = 0  # of those, kept while Redis could not be reached, sent later
    raised: int = 0  # pushes that raised (the caller knows): none expected
    lost: int = 0  # jids given back that never ran: must be 0
    errors: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"reliable push {self.kind}: pushed={self.pushed} "
                f"sent_from_buffer={self.sent_from_buffer} raised={self.raised} "
                f"lost={self.lost}")


class Pusher:
    """Pushes one job every ``interval`` from a thread, through the proxy, with reliable
    push of one ``kind`` on: the pushes meet every fault the workers meet."""

    def __init__(self, kind: str, url: str, directory: Path, plan: Plan, seed: int) -> None:
        self.figures = PushFigures(kind)
        self.config = config_for(url, reliable_push=kind, reliable_push_size=100_000,
                                 reliable_push_dir=str(directory / f"push-buffer-{kind}"))
        self.client = default_client(self.config)
        self.pause = plan.pause
        self.interval = plan.push_interval
        self.rng = random.Random(seed)
        self.jids: list[str] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"chaos-pusher-{kind}",
                                       daemon=True)

    @property
    def writer(self) -> ReliableWriter:
        writer = self.client.writer
        assert isinstance(writer, ReliableWriter)
        return writer

    def start(self) -> Pusher:
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            job: dict[str, object] = {"class": "Chaos::Mark", "args": [self.pause]}
            if self.rng.random() < 0.1:
                job["at"] = time.time() + self.rng.uniform(1, 3)
            try:
                jid = self.client.push(job)
            except Exception as exc:  # the caller is told: not a loss, but not expected
                self.figures.raised += 1
                self.figures.errors.append(repr(exc))
                continue
            if jid:
                self.jids.append(jid)

    def finish(self, timeout: float = 60) -> None:
        """Stop pushing, and wait for the buffer to be sent (the background flush)."""
        self._stop.set()
        self.thread.join(timeout=10)
        deadline = time.monotonic() + timeout
        while len(self.writer.buffer) and time.monotonic() < deadline:
            threading.Event().wait(0.1)
        self.figures.pushed = len(self.jids)
        self.figures.sent_from_buffer = self.writer.sent

    def close(self) -> None:
        self._stop.set()
        self.thread.join(timeout=10)
        self.writer.close()
        self.config.close()


@dataclass
class Result:
    figures: Figures
    faults: dict[str, int]
    in_flight_at_faults: int
    unexplained: int
    bound: int
    seconds: float
    seed: int
    leftovers: dict[str, int]
    batches: BatchFigures | None = None
    cancelled: int = 0  # jobs cancelled during the run (not counted as pushed)
    cancelled_waiting: int = 0  # of those, removed before they ran
    cancelled_ran: int = 0  # of those, how many ran anyway (done before the cancel came)
    # Of those, how many ran more than once with no fault to explain it: must be 0. (One
    # that ran to its end before its cancel came is a job like any other: a kill before its
    # ACK runs it again, at least once.)
    cancelled_twice: int = 0
    pushes: list[PushFigures] = field(default_factory=list)  # the reliable pushers'
    # For a job left dead: its entry, its runs and the faults, to tell how it got there.
    dead_story: str = ""

    def line(self) -> str:
        counts = " ".join(f"{name}s={self.faults.get(name, 0)}" for name in (KILL, RESTART, CUT))
        pushers = "".join(f"\n{figures.line()}" for figures in self.pushes)
        return (f"{self.figures.line()} bound={self.bound} in_flight_at_faults="
                f"{self.in_flight_at_faults} unexplained={self.unexplained} {counts} "
                f"cancelled={self.cancelled} (waiting {self.cancelled_waiting}, ran to its end "
                f"{self.cancelled_ran}, twice "
                f"{self.cancelled_twice}) seconds={self.seconds:.1f} seed={self.seed}"
                f"{pushers}")

    @property
    def ok(self) -> bool:
        figures = self.figures
        batches_ok = self.batches is None or not (
            self.batches.duplicates or self.batches.missing or self.batches.negative_pending)
        pushes_ok = not any(push.lost or push.raised for push in self.pushes)
        return (figures.lost == 0 and figures.duplicated <= self.bound and not self.unexplained
                and batches_ok and not self.cancelled_twice and pushes_ok)


class Worker:
    """One ``wurk worker`` process."""

    def __init__(self, serial: int, directory: Path, env: dict[str, str], plan: Plan) -> None:
        self.log = directory / f"worker-{serial}.log"
        self.process = spawn_worker(self.log, directory / "wurk.yml", env, plan.concurrency)

    def stop(self, how: int = signal.SIGTERM, timeout: float = 30) -> None:
        if self.process.poll() is None:
            self.process.send_signal(how)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


class ChaosRun:
    def __init__(self, plan: Plan, directory: Path) -> None:
        self.plan = plan
        self.directory = directory
        self.rng = random.Random(plan.seed)
        self.redis = Restartable(directory / "redis")
        self.ledger_server: Server = start_server(directory / "ledger")
        self.ledger = redis.Redis(port=self.ledger_server.port)
        self.direct = redis.Redis(port=self.redis.port, socket_timeout=10)
        self.proxy = FaultProxy(self.redis.port).start()
        (directory / "wurk.yml").write_text(WORKER_SETTINGS)
        self.env = {**os.environ, "REDIS_URL": self.proxy.url, "PYTHONUNBUFFERED": "1",
                    jobs.LEDGER_ENV: f"redis://127.0.0.1:{self.ledger_server.port}/0"}
        self.workers: list[Worker] = []
        self.serial = itertools.count(1)
        self.pushed: list[str] = []
        self.cancelled: list[str] = []  # run at most once; not in ``pushed``
        self.cancelled_waiting = 0  # of those, removed from their queue (the rest ran)
        self.faults: dict[str, int] = {}
        self.strikes: list[str] = []  # "time fault [victim pid]", in order
        self.in_flight: set[str] = set()  # jids in flight when a fault struck
        self.bound = 0  # REPEATS_PER_THREAD for each processor thread each fault hit
        self.bids: list[str] = []
        self.batch_figures = BatchFigures() if plan.batches else None
        self._sampling = threading.Event()
        self.pushers = [Pusher(kind, self.proxy.url, directory, plan, plan.seed + serial)
                        for serial, kind in enumerate(plan.reliable_push)]

    # -- the run ------------------------------------------------------------------------------
    def run(self) -> Result:
        started = time.monotonic()
        sampler = threading.Thread(target=self._sample_pending, name="chaos-pending",
                                   daemon=True)
        if self.batch_figures is not None:
            sampler.start()
        try:
            for _ in range(self.plan.workers):
                self._spawn()
            for pusher in self.pushers:
                pusher.start()
            for round_number in itertools.count():
                last = self._last_round(round_number, started)
                self._push_wave(round_number, everything_left=last)
                threading.Event().wait(self.rng.uniform(*self.plan.settle))
                self._until_in_flight(self.plan.wait_in_flight)
                self._strike(CYCLE[round_number % len(CYCLE)])
                if last:
                    break
            for pusher in self.pushers:
                pusher.finish()
                self.pushed += pusher.jids
            self._wait_for_every_job()
            self._wait_for_callbacks()
        finally:
            self._sampling.set()
            self._stop_workers()
        if sampler.is_alive():
            sampler.join(timeout=10)
        result = figures(self.pushed, self.ledger)
        runs = ledger_runs(self.ledger)
        unexplained = sum(n - 1 for jid, n in runs.items() if n > 1 and jid not in self.in_flight)
        return Result(result, dict(self.faults), len(self.in_flight), unexplained,
                      self.bound, time.monotonic() - started, self.plan.seed,
                      self._leftovers(), self._batch_figures(),
                      cancelled=len(self.cancelled), cancelled_waiting=self.cancelled_waiting,
                      cancelled_ran=sum(runs[jid] > 0 for jid in self.cancelled),
                      cancelled_twice=sum(runs[jid] > 1 and jid not in self.in_flight
                                          for jid in self.cancelled),
                      pushes=[self._push_figures(pusher, runs) for pusher in self.pushers],
                      dead_story=self._dead_story())

    @staticmethod
    def _push_figures(pusher: Pusher, runs: Counter[str]) -> PushFigures:
        found = pusher.figures
        found.lost = sum(1 for jid in pusher.jids if not runs[jid])
        return found

    def close(self) -> None:
        for worker in self.workers:
            worker.stop(signal.SIGKILL, timeout=10)
        for pusher in self.pushers:
            pusher.close()
        self.proxy.close()
        self.redis.stop()
        self.ledger_server.stop()

    # -- pushing ------------------------------------------------------------------------------
    def _last_round(self, round_number: int, started: float) -> bool:
        minutes = self.plan.minutes
        if minutes is None:
            return round_number == self.plan.rounds - 1
        return time.monotonic() - started >= minutes * 60

    def _push_wave(self, round_number: int, *, everything_left: bool) -> None:
        plan = self.plan
        size = plan.jobs // plan.rounds + (1 if round_number < plan.jobs % plan.rounds else 0)
        left = plan.jobs - len(self.pushed)
        size = left if everything_left else min(size, left)
        flaky = int(size * plan.flaky_share)
        scheduled = int(size * plan.scheduled_share)
        client = wurk.Client(config_for(self.redis.url))
        try:
            if not plan.batches:
                cancelling = self._push_cancellable(client, int(size * plan.cancel_share))
                self._wave(client, size, flaky, scheduled)
                self._cancel(client, cancelling)
                return
            for part in range(plan.batches):  # the wave's jobs spread over its batches
                share = range(part, size, plan.batches)
                with self._batch(client.config).jobs():
                    self._wave(client, len(share), len(range(part, flaky, plan.batches)),
                               len(range(part, scheduled, plan.batches)))
        finally:
            client.config.close()

    def _wave(self, client: wurk.Client, size: int, flaky: int, scheduled: int) -> None:
        timed = int(size * self.plan.timed_share) if not self.plan.batches else 0
        self._bulk(client, "Chaos::Mark", size - flaky - scheduled - timed)
        self._bulk(client, "Chaos::Flaky", flaky, retry=5)
        self._bulk(client, "Chaos::Timed", timed, retry=5, timeout=jobs.TIMED_LIMIT)
        self._bulk(client, "Chaos::Mark", scheduled,
                   at=[time.time() + self.rng.uniform(1, 5) for _ in range(scheduled)])

    def _push_cancellable(self, client: wurk.Client, count: int) -> list[str]:
        """Jobs of 0.3 s pushed ahead of the wave, to be cancelled once it is pushed: some
        are done by then, some run, some wait — none may run twice (but one done before
        its cancel came, which a fault then caught in flight), and they are left out of the
        others' count."""
        if not count:
            return []
        return [jid for jid in client.push_bulk({"class": "Chaos::Mark",
                                                 "args": [[0.3]] * count}) if jid]

    def _cancel(self, client: wurk.Client, jids: list[str]) -> None:
        for jid in jids:
            try:
                if wurk.cancel(jid, config=client.config).removed_from:
                    self.cancelled_waiting += 1
            except (wurk.RedisUnavailable, redis.RedisError):
                pass  # a fault meanwhile: the job runs, once
            self.cancelled.append(jid)

    def _batch(self, config: wurk.Config) -> wurk.Batch:
        batch = wurk.Batch(description="chaos", config=config)
        for event in EVENTS:
            batch.on(event, "Chaos::BatchCallback", {"event": event})
        self.bids.append(batch.bid)
        return batch

    def _bulk(self, client: wurk.Client, name: str, count: int, **options: object) -> None:
        if count:
            jids = client.push_bulk({"class": name, "args": [[self.plan.pause]] * count,
                                     **options})
            self.pushed += [jid for jid in jids if jid]

    # -- faults -------------------------------------------------------------------------------
    def _strike(self, fault: str) -> None:
        self.faults[fault] = self.faults.get(fault, 0) + 1
        self.strikes.append(f"{time.time():.3f} {fault}"
                            + (f" {self.workers[0].process.pid}" if fault == KILL else ""))
        if fault == KILL:
            victim = self.workers.pop(0)  # the oldest: it has been busy longest
            # Frozen first, so its lists can be read as the kill finds them (another
            # worker's reaper may return them the moment it is gone).
            victim.process.send_signal(signal.SIGSTOP)
            self.in_flight |= self._in_flight(f"|{victim.process.pid}|")
            victim.stop(signal.SIGKILL, timeout=10)
            self.bound += REPEATS_PER_THREAD * self.plan.concurrency
            self._spawn()
            return
        # In flight at the fault: what the lists hold just before, and just after. No worker
        # reaches Redis from the fault until the lists are read again (new connections are
        # refused), and they are read only once Redis has done with every connection it had:
        # a move still on its way when the fault struck has landed by then, or never will.
        self.in_flight |= self._in_flight("")
        self.bound += REPEATS_PER_THREAD * self.plan.concurrency * len(self.workers)
        self.proxy.drop()
        try:
            if fault == RESTART:
                self.redis.restart(down_for=DOWN_FOR)
                self.direct = redis.Redis(port=self.redis.port, socket_timeout=10)
            else:
                self.proxy.cut()
            self._until_only_this_client()
            self.in_flight |= self._in_flight("")
        finally:
            self.proxy.restore()

    def _until_in_flight(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._in_flight(""):
            threading.Event().wait(0.02)

    def _until_only_this_client(self) -> None:
        """Until Redis holds no connection but the one reading the lists (a link the proxy
        admitted in the instant before it began refusing is cut again)."""
        me = self.direct.client_id()
        deadline = time.monotonic() + 30
        while any(int(c["id"]) != me and c.get("name") != SAMPLER
                  for c in self.direct.client_list()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"Redis still holds connections: {self.direct.client_list()}")
            self.proxy.cut()
            threading.Event().wait(0.02)

    def _in_flight(self, owner: str) -> set[str]:
        """jids in the private lists (of one owner, by ``|pid|``) right now."""
        keys = [k for k in self.direct.scan_iter(match="queue:*|*", count=1000)
                if owner.encode() in k]
        return {json.loads(raw)["jid"] for key in keys for raw in self.direct.lrange(key, 0, -1)}

    def _spawn(self) -> None:
        self.workers.append(Worker(next(self.serial), self.directory, self.env, self.plan))

    # -- the end ------------------------------------------------------------------------------
    def _wait_for_every_job(self) -> None:
        """Until every job ran and nothing is left to run: a repeat still due (a retry
        booked twice, say) must run before the figures are taken."""
        wanted = set(self.pushed)
        deadline = time.monotonic() + self.plan.deadline
        while not (wanted <= set(ledger_runs(self.ledger)) and self._drained()):
            for worker in self.workers:
                if worker.process.poll() is not None:
                    raise RuntimeError(f"a worker exited:\n{worker.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                return  # the figures will say what was lost
            threading.Event().wait(0.2)

    def _wait_for_callbacks(self) -> None:
        """Until every batch fired complete and success (or the deadline)."""
        if not self.bids:
            return
        deadline = time.monotonic() + 60
        while len(self._callback_runs()) < len(self.bids) * len(EVENTS):
            if time.monotonic() > deadline:
                return  # the figures will say what is missing
            threading.Event().wait(0.2)

    def _callback_runs(self) -> dict[str, set[str]]:
        """event:bid → the distinct callback jobs that ran for it."""
        runs: dict[str, set[str]] = {}
        for line in self.ledger.lrange(jobs.CALLBACKS, 0, -1):
            key, _, jid = line.decode().rpartition(":")
            runs.setdefault(key, set()).add(jid)
        return runs

    def _sample_pending(self) -> None:
        """Read every batch's pending count over and over while the faults strike."""
        assert self.batch_figures is not None
        reader = redis.Redis(port=self.redis.port, socket_timeout=2, client_name=SAMPLER)
        while not self._sampling.wait(0.1):
            try:
                values = [reader.hget(f"b-{bid}", "pending") for bid in list(self.bids)]
            except redis.RedisError:
                continue  # Redis is restarting
            for value in values:
                if value is not None:
                    self.batch_figures.samples += 1
                    self.batch_figures.negative_pending += int(value) < 0

    def _batch_figures(self) -> BatchFigures | None:
        found = self.batch_figures
        if found is None:
            return None
        runs = self._callback_runs()
        found.created = len(self.bids)
        found.fired = len(runs)
        found.duplicates = sum(len(jids) - 1 for jids in runs.values())
        found.missing = sum(1 for bid in self.bids for event in EVENTS
                            if f"{event}:{bid}" not in runs)
        for bid in self.bids:
            value = self.direct.hget(f"b-{bid}", "pending")
            found.samples += 1
            found.negative_pending += value is not None and int(value) < 0
        return found

    def _drained(self) -> bool:
        """Nothing left to run, the scheduler's claims (due jobs taken out of their set, not
        yet pushed) included."""
        keys = Keys()
        if any(self.direct.zcard(name) for name in (keys.retry, keys.schedule,
                                                    keys.retry_claims, keys.schedule_claims)):
            return False
        return not any(self.direct.llen(key)
                       for key in self.direct.scan_iter(match="queue:*", count=1000))

    def _stop_workers(self) -> None:
        for worker in self.workers:
            worker.process.send_signal(signal.SIGTERM)
        for worker in self.workers:
            worker.stop(timeout=30)

    def _dead_story(self, most: int = 3) -> str:
        """Each of the first few jobs in the dead set: its class, jid, error and retry count,
        the runs the ledger has of it (pid, time), when a timed job first started, and every
        fault with its time (a kill with its victim's pid)."""
        lines = []
        for raw in self.direct.zrange("dead", 0, most - 1):
            try:
                job = json.loads(raw)
            except ValueError:
                lines.append(f"dead, unparseable: {raw[:200]!r}")
                continue
            jid = str(job.get("jid"))
            runs = [line.decode() for line in self.ledger.lrange(jobs.WHO, 0, -1)
                    if line.decode().startswith(f"{jid} ")]
            first = self.ledger.get(f"{jobs.TIMED_STARTED}{jid}")
            lines.append(f"dead: {job.get('class')} {jid} {job.get('error_class')}: "
                         f"{job.get('error_message')} retry_count={job.get('retry_count')} "
                         f"runs={runs} first_start={first.decode() if first else None}")
        if lines:
            lines.append(f"faults: {self.strikes}")
        return "\n".join(lines)

    def _leftovers(self) -> dict[str, int]:
        """What is still in Redis once the workers are gone: nothing, when all went well."""
        counts = {"dead": self.direct.zcard("dead"), "retry": self.direct.zcard("retry"),
                  "schedule": self.direct.zcard("schedule")}
        for key in self.direct.scan_iter(match="queue:*", count=1000):
            counts[key.decode()] = int(self.direct.llen(key))
        return {name: n for name, n in counts.items() if n}


def chaos(plan: Plan, directory: Path | None = None) -> Result:
    """Run ``plan`` in ``directory`` (a temporary one by default)."""
    with tempfile.TemporaryDirectory(prefix="wurk-chaos-") as scratch:
        run = ChaosRun(plan, directory or Path(scratch))
        try:
            return run.run()
        finally:
            run.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.run",
                                     description="wurk under repeated faults")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--minutes", type=float, default=None,
                        help="strike every few seconds for this long (default: one cycle "
                             "of ten faults)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--batches", type=int, default=0,
                        help="push each wave as this many batches (with callbacks)")
    parser.add_argument("--reliable-push", default="",
                        help="push through the faults as well, with reliable push of these "
                             "kinds: memory, disk or memory,disk (one pushing thread each)")
    parser.add_argument("--push-interval", type=float, default=0.01,
                        help="seconds between two pushes of a reliable pusher")
    args = parser.parse_args(argv)
    kinds = tuple(kind for kind in args.reliable_push.split(",") if kind)
    if set(kinds) - {"memory", "disk"}:
        parser.error(f"--reliable-push takes memory, disk or both, not {args.reliable_push!r}")
    options: dict[str, object] = {"workers": args.workers, "concurrency": args.concurrency,
                                  "batches": args.batches, "reliable_push": kinds,
                                  "push_interval": args.push_interval}
    if args.seed is not None:
        options["seed"] = args.seed
    plan = Plan.long(args.jobs, args.minutes, **options) if args.minutes \
        else Plan(jobs=args.jobs, **options)  # type: ignore[arg-type]
    result = chaos(plan)
    print(result.line())
    if result.batches is not None:
        print(result.batches.line())
    for push in result.pushes:
        if push.errors:
            print(f"reliable push {push.kind} raised (first 3): {push.errors[:3]}")
    if result.leftovers:
        print(f"left in Redis: {result.leftovers}")
    if result.figures.missing:
        print(f"lost jids (first 10): {result.figures.missing[:10]}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
