"""The leader failover run: worker processes share one periodic loop while the leader is
killed (and paused), and every tick's pushes are counted.

1. ``FailoverPlan``: how many workers, how long, the loop's tick (``* * * * *``, or a
   seconds-field cron for the fast run), the leader timings, and the faults — each strikes
   the process holding ``dear-leader`` a little before a tick: ``kill`` (SIGKILL, a fresh
   worker started in its place) or ``pause`` (SIGSTOP past its key's life, then SIGCONT:
   an old leader that wakes believing it leads).
2. The loop pushes to a queue no worker serves, so every push stays countable. Each job's
   jid is the digest of the loop and its tick (``wurk.periodic.loops.tick_jid``), so the count
   per tick is exact: ``FailoverResult`` has pushes per tick, the ticks doubled, skipped,
   and pushes matching no tick, and each tick's lateness.
3. The short run is ``tests/system/test_periodic.py`` (a 3-second tick, ~40 s); the long
   one, with a real minute cron and the default leader timings, is a command::

       python -m tests.chaos.leader_run --minutes 5
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.helpers.server import start_server
from wurk import payload as P
from wurk.periodic.loops import tick_jid

ROOT = Path(__file__).resolve().parents[2]
KILL, PAUSE = "kill", "pause"
TICK_QUEUE = "ticks"
# A fault strikes this share of a tick before the tick: the leader dies with the tick due
# and its key still alive, the hardest moment for "never skip".
STRIKE_BEFORE = 0.1
# Ticks before the first one read that are still looked for among the pushes.
EARLIER_TICKS = 10
# Ticks after the last counted one that stopping workers may still push (30 s of 3 s ticks).
AFTER_TICKS = 10


@dataclass
class FailoverPlan:
    workers: int = 3
    seconds: float = 300.0
    tick: int = 60  # seconds between ticks
    faults: tuple[str, ...] = (KILL, KILL)
    renew: float = 15.0  # leader_renew_interval: dear-leader lives twice as long
    check: float = 60.0  # leader_check_interval
    poll: float = 5.0  # periodic_poll_interval

    @property
    def cron(self) -> str:
        return "* * * * *" if self.tick == 60 else f"*/{self.tick} * * * * *"

    def settings(self) -> str:
        return f"""\
heartbeat_interval: 1
scheduler_initial_wait: 0
fetch_timeout: 0.5
queues: [work]
leader_renew_interval: {self.renew}
leader_check_interval: {self.check}
periodic_poll_interval: {self.poll}
periodic_seconds_field: {'true' if self.tick < 60 else 'false'}
periodic:
  - {{cron: "{self.cron}", job: Sys::Incr, args: [failover], queue: {TICK_QUEUE}}}
"""


@dataclass
class FailoverResult:
    per_tick: dict[int, int]  # tick → pushes
    stray: int  # pushes whose jid is no tick's of the loop
    lateness: dict[int, float]  # tick → seconds from the tick to its push
    faults: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def doubled(self) -> list[int]:
        return [tick for tick, n in self.per_tick.items() if n > 1]

    @property
    def skipped(self) -> list[int]:
        return [tick for tick, n in self.per_tick.items() if n == 0]

    @property
    def ok(self) -> bool:
        return bool(self.per_tick) and not self.doubled and not self.skipped and not self.stray

    def table(self) -> str:
        lines = []
        for tick, count in sorted(self.per_tick.items()):
            when = dt.datetime.fromtimestamp(tick, dt.timezone.utc).strftime("%H:%M:%S")
            late = self.lateness.get(tick)
            lines.append(f"  tick {when} UTC  pushes={count}"
                         + (f"  pushed {late:.1f} s after the tick" if late is not None else ""))
        return "\n".join(lines)

    def line(self) -> str:
        worst = max(self.lateness.values(), default=0.0)
        return (f"failover: ticks={len(self.per_tick)} pushed={sum(self.per_tick.values())} "
                f"doubled={len(self.doubled)} skipped={len(self.skipped)} stray={self.stray} "
                f"faults={','.join(self.faults)} worst_lateness={worst:.1f}s "
                f"seconds={self.seconds:.0f}")


class Worker:
    """One ``wurk worker`` subprocess."""

    def __init__(self, serial: int, directory: Path, env: dict[str, str]) -> None:
        self.log = directory / f"worker-{serial}.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "wurk", "worker", "-r", "tests.system.worker_jobs",
             "-C", str(directory / "wurk.yml"), "-c", "2"],
            cwd=ROOT, env=env, stdout=self.log.open("w"), stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


class Failover:
    def __init__(self, plan: FailoverPlan, directory: Path, url: str) -> None:
        self.plan = plan
        self.directory = directory
        self.redis = redis.Redis.from_url(url, decode_responses=True)
        self.env = {**os.environ, "REDIS_URL": url, "PYTHONUNBUFFERED": "1"}
        (directory / "wurk.yml").write_text(plan.settings())
        self.workers: list[Worker] = []
        self.serial = 0
        self.done_faults: list[str] = []

    def run(self) -> FailoverResult:
        started = time.monotonic()
        try:
            for _ in range(self.plan.workers):
                self._spawn()
            lid, first = self._wait_for_the_loop()
            last = self._strike_and_wait(first)
        finally:
            for worker in self.workers:
                worker.stop()
        result = self._count(lid, first, last)
        result.faults, result.seconds = self.done_faults, time.monotonic() - started
        return result

    def _spawn(self) -> None:
        self.serial += 1
        self.workers.append(Worker(self.serial, self.directory, self.env))

    def _wait_for_the_loop(self) -> tuple[str, int]:
        """The loop's id and its first tick, once a leader has registered it."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            lids = self.redis.smembers("periodic")
            nf = self.redis.hget(f"loops:{next(iter(lids))}", "nf") if lids else None
            if nf:
                return next(iter(lids)), int(nf)
            time.sleep(0.1)
        raise AssertionError("no leader registered the loop within 60 s:\n" + self._logs())

    def _strike_and_wait(self, first: int) -> int:
        """Strike each fault before an evenly spread tick; the last tick counted."""
        plan = self.plan
        ticks = max(1, int(plan.seconds // plan.tick))
        for number, fault in enumerate(plan.faults, start=1):
            index = max(1, round(number * ticks / (len(plan.faults) + 1)))
            self._sleep_until(first + index * plan.tick - STRIKE_BEFORE * plan.tick)
            self._strike(fault)
        last = first + (ticks - 1) * plan.tick
        self._sleep_until(last + plan.tick / 2)  # the last tick has been pushed by then
        return last

    def _strike(self, fault: str) -> None:
        leader = self._leader()
        if leader is None:
            print(f"  no leader to {fault} at {time.strftime('%H:%M:%S')}", flush=True)
            return
        if fault == KILL:
            leader.process.send_signal(signal.SIGKILL)
            leader.process.wait(timeout=10)
            self._spawn()
        else:  # paused past its key's life, then it wakes
            leader.process.send_signal(signal.SIGSTOP)
            time.sleep(2 * self.plan.renew + 1.5)
            leader.process.send_signal(signal.SIGCONT)
        self.done_faults.append(fault)
        print(f"  {fault} of the leader (pid {leader.pid}) at {time.strftime('%H:%M:%S')}",
              flush=True)

    def _leader(self) -> Worker | None:
        holder = self.redis.get("dear-leader") or ""
        parts = holder.split(":")
        pid = int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None
        return next((w for w in self.workers if w.pid == pid and w.process.poll() is None),
                    None)

    def _sleep_until(self, epoch: float) -> None:
        while (left := epoch - self._redis_now()) > 0:
            time.sleep(min(left, 1.0))

    def _redis_now(self) -> float:
        seconds, micros = self.redis.time()
        return float(seconds) + micros / 1_000_000

    def _count(self, lid: str, first: int, last: int) -> FailoverResult:
        jobs = [json.loads(raw) for raw in self.redis.lrange(f"queue:{TICK_QUEUE}", 0, -1)]
        pushes = Counter(job["jid"] for job in jobs)
        # The first tick may have been pushed before its nf was read (a slow machine): count
        # from the earliest tick pushed, if that is earlier.
        tick = self.plan.tick
        earlier = [t for t in range(first - EARLIER_TICKS * tick, first, tick)
                   if tick_jid(lid, t) in pushes]
        start = min(earlier, default=first)
        expected = {tick_jid(lid, t): t for t in range(start, last + 1, tick)}
        per_tick = {tick: pushes.get(jid, 0) for jid, tick in expected.items()}
        # Workers stopping after the last counted tick may push the ticks that follow (a
        # stop takes seconds on a loaded machine): those are the loop's own, each pushed
        # once or counted as doubled, never stray.
        later = {tick_jid(lid, t): t for t in range(last + tick, last + AFTER_TICKS * tick, tick)}
        for jid, when in later.items():
            if pushes.get(jid, 0) > 1:
                per_tick[when] = pushes[jid]
        stray = sum(n for jid, n in pushes.items() if jid not in expected and jid not in later)
        lateness = {}
        for job in jobs:
            tick = expected.get(job["jid"])
            enqueued = P.read_time(job.get("enqueued_at"))
            if tick is not None and enqueued is not None:
                lateness[tick] = max(lateness.get(tick, 0.0), enqueued - tick)
        return FailoverResult(per_tick, stray, lateness)

    def _logs(self) -> str:
        return "\n".join(w.log.read_text()[-2000:] for w in self.workers if w.log.exists())


def failover(plan: FailoverPlan, directory: Path, url: str) -> FailoverResult:
    return Failover(plan, directory, url).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--kills", type=int, default=2)
    parser.add_argument("--pauses", type=int, default=0)
    options = parser.parse_args(argv)
    plan = FailoverPlan(workers=options.workers, seconds=options.minutes * 60,
                        faults=(KILL,) * options.kills + (PAUSE,) * options.pauses)
    with tempfile.TemporaryDirectory(prefix="wurk-failover-") as folder:
        server = start_server(Path(folder) / "redis")
        try:
            print(f"{plan.workers} workers, loop {plan.cron!r}, {options.minutes:g} min, "
                  f"faults: {', '.join(plan.faults)}", flush=True)
            result = failover(plan, Path(folder), server.url)
        finally:
            server.stop()
    print(result.table())
    print(result.line())
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
