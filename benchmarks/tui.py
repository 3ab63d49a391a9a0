"""``wurk top`` at rest: what the UI costs while it is open on a cluster of 10 processes and
50 queues, and what a page of a 100,000-entry retry set costs.

    python -m benchmarks.tui [--seconds 20] [--interval 2]

Seeds 10 worker processes' heartbeat records (10 threads each, 3 of them running a job),
50 queues of 100 jobs, 100,000 entries in the retry set, a dead set, a batch-free metrics
minute, then runs the installed ``wurk top`` in a pseudo-terminal of 200×60 and, on each of
the Home, Busy, Queues, Retries and Metrics tabs, after a few seconds to settle, measures
for ``--seconds``: the UI process's CPU (user + system, as a share of one core), its RSS,
and the Redis commands per second it sends (the server's ``total_commands_processed``,
less the benchmark's own ``INFO`` calls; nothing else talks to the server). No worker
runs: the records are what ten running workers leave, so every command counted is the
UI's.

Then the paging figures: the read behind a page turn of the Retries tab
(``wurk.tui.reads.set_page``, what the UI's thread runs) for page 1 and for page 4,000 —
time, and bytes the server sent — beside what reading the set whole would send.

Uses REDIS_URL when set (its data is flushed!), else starts a private server.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import statistics
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import psutil
import redis

from benchmarks._server import redis_url

PROCESSES = 10
THREADS = 10
RUNNING = 3
QUEUES = 50
JOBS_PER_QUEUE = 100
RETRIES = 100_000
SIZE = (200, 60)
TABS = [("1", "Home"), ("2", "Busy"), ("3", "Queues"), ("5", "Retries"), ("7", "Metrics")]
SETTLE = 4.0


def job(n: int, queue: str, now: float) -> str:
    return json.dumps({"class": "Billing::InvoiceJob", "args": [n, "customer-4711"],
                       "queue": queue, "jid": f"{n:024x}", "retry": True,
                       "created_at": int(now * 1000), "enqueued_at": int(now * 1000)})


def seed(r: redis.Redis) -> None:
    now = time.time()
    r.flushall()
    pipe = r.pipeline(transaction=False)
    for q in range(QUEUES):
        name = f"queue-{q:02d}"
        pipe.sadd("queues", name)
        pipe.lpush(f"queue:{name}", *(job(n, name, now) for n in range(JOBS_PER_QUEUE)))
    for p in range(PROCESSES):
        identity = f"worker-{p}:{1000 + p}:{p:012x}"
        info = {"hostname": f"worker-{p}", "pid": 1000 + p, "tag": "app", "concurrency": THREADS,
                "queues": [f"queue-{q:02d}" for q in range(QUEUES)], "labels": [],
                "started_at": now - 3600, "version": "0.1.0", "identity": identity}
        pipe.sadd("processes", identity)
        pipe.hset(identity, mapping={"info": json.dumps(info), "busy": RUNNING, "beat": now,
                                     "quiet": "false", "rss": 40_000, "rtt_us": 200,
                                     "concurrency": THREADS})
        for t in range(RUNNING):
            work = {"queue": "queue-00", "run_at": now - 5,
                    "payload": job(p * 100 + t, "queue-00", now)}
            pipe.hset(f"{identity}:work", f"tid-{t}", json.dumps(work))
    pipe.set("dear-leader", f"worker-0:1000:{0:012x}")
    pipe.set("stat:processed", 1_000_000)
    pipe.set("stat:failed", 1_234)
    pipe.execute()
    for start in range(0, RETRIES, 5_000):
        r.zadd("retry", {job(n, "default", now).replace('"retry": true', f'"retry_count": 3, '
                                                         f'"error_class": "Net::ReadTimeout", '
                                                         f'"error_message": "timed out {n}", '
                                                         f'"retry": true'): now + 60 + n
                         for n in range(start, start + 5_000)})


def commands(r: redis.Redis) -> int:
    return int(r.info("stats")["total_commands_processed"])


def drain(fd: int, stop: threading.Event) -> None:
    """Read what the UI draws, as a terminal would (a full pty would block it)."""
    while not stop.is_set():
        try:
            if not os.read(fd, 65536):
                return
        except OSError:
            return


def start_top(url: str, interval: float) -> tuple[subprocess.Popen[bytes], int]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", SIZE[1], SIZE[0], 0, 0))
    env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES")}
    env.update(REDIS_URL=url, TERM="xterm-256color")
    wurk = str(Path(sys.executable).with_name("wurk"))
    process = subprocess.Popen([wurk, "top", "--interval", str(interval)], stdin=slave,
                               stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    return process, master


def measure(r: redis.Redis, process: psutil.Process, seconds: float) -> tuple[float, float, float]:
    """(CPU % of one core, Redis commands/s, RSS MB) over ``seconds``."""
    cpu0 = process.cpu_times()
    before = commands(r)
    started = time.monotonic()
    time.sleep(seconds)
    after = commands(r)
    took = time.monotonic() - started
    cpu1 = process.cpu_times()
    cpu = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / took * 100
    own = 1  # the first INFO is counted between the two readings
    return cpu, (after - before - own) / took, process.memory_info().rss / 1e6


def paging(url: str) -> list[tuple[str, float, int]]:
    """(what, median ms, bytes sent) of the read behind a page turn, and of the whole set."""
    import wurk
    from wurk.tui import reads

    config = wurk.Config(redis_url=url)
    r = redis.Redis.from_url(url)
    found = []
    for label, page in (("page 1", 1), ("page 4,000 (the last)", 4_000)):
        times, sent = [], []
        for _ in range(20):
            out = int(r.info("stats")["total_net_output_bytes"])
            started = time.perf_counter()
            reads.set_page(config, "retries", page, "")
            times.append((time.perf_counter() - started) * 1000)
            sent.append(int(r.info("stats")["total_net_output_bytes"]) - out)
        found.append((label, statistics.median(times), int(statistics.median(sent))))
    out = int(r.info("stats")["total_net_output_bytes"])
    started = time.perf_counter()
    r.zrange("retry", 0, -1)
    found.append(("the whole set, for scale (one ZRANGE 0 -1)",
                  (time.perf_counter() - started) * 1000,
                  int(r.info("stats")["total_net_output_bytes"]) - out))
    config.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=2.0)
    args = parser.parse_args()
    with redis_url() as url:
        r = redis.Redis.from_url(url)
        seed(r)
        process, master = start_top(url, args.interval)
        stop = threading.Event()
        threading.Thread(target=drain, args=(master, stop), daemon=True).start()
        rows = []
        try:
            watched = psutil.Process(process.pid)
            time.sleep(SETTLE + 2)  # start-up: imports, the first frame
            for key, name in TABS:
                os.write(master, key.encode())
                time.sleep(SETTLE)
                rows.append((name, *measure(r, watched, args.seconds)))
        finally:
            os.write(master, b"q")
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
            stop.set()
            os.close(master)
        print(f"wurk top at rest, refresh every {args.interval:g}s, {SIZE[0]}x{SIZE[1]}: "
              f"{PROCESSES} processes ({PROCESSES * RUNNING} running jobs), {QUEUES} queues, "
              f"{RETRIES:,} retries; {args.seconds:g}s per tab; load average "
              f"{os.getloadavg()[0]:.1f}")
        print(f"{'tab':<10}{'CPU % of a core':>17}{'Redis cmds/s':>14}{'RSS MB':>9}")
        for name, cpu, rate, rss in rows:
            print(f"{name:<10}{cpu:>17.1f}{rate:>14.1f}{rss:>9.0f}")
        print()
        print(f"{'the read behind a page turn':<44}{'ms':>8}{'bytes sent':>12}")
        for label, ms, sent in paging(url):
            print(f"{label:<44}{ms:>8.1f}{sent:>12,}")


if __name__ == "__main__":
    main()
