"""The least a worker of wurk's shape does per job: the yardstick of ``benchmarks.throughput
--bare``, run as its own process so its CPU is measured as a worker's is.

    python -m benchmarks.bare_worker [--jobs N] [--concurrency 10] [--cpu N] [--redis-py]
                                     [--counter KEY]     (the server: REDIS_URL)

Processor threads, each with its own connection, held to one CPU under the SCHED_BATCH
policy (what ``cpu_affinity: auto`` settles on for jobs that hold the GIL). Each thread
fetches up to eight jobs in one Lua call that moves them to its private list (reliable
fetch, as wurk's; on an empty queue, a BRPOPLPUSH of one waits up to a second), and per job:
parses the payload, runs the body (one INCR of ``bench:count`` on the thread's connection,
or through a shared redis-py client with ``--redis-py``), appends a ``done`` line to a
buffer written every 0.25 s, and writes the ACK (LREM from the private list) without
waiting for its reply, which the next fetch reads. No middleware, retries, metrics,
heartbeat, busy map, shutdown handling or payload checks: what wurk adds over this is the
price of those. Exits when the counter reaches N; with none it runs until stopped (the
peer comparison's "bare" rows, where the latency job, ``BenchLatency``, RPUSHes its start
time minus its push time to ``bench:latency`` as every system's does).

It imports nothing of wurk (its own ten-line socket reader rather than
``wurk.connections.lease``), so none of wurk's code or import cost comes along, and it
trusts the payloads the benchmark pushed: a yardstick, not a worker.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from typing import Any

import hiredis
import redis

# Pops up to eight jobs into the private list: one round trip per eight jobs, as wurk's
# reliable fetch does with its default prefetch.
FETCH = """local jobs = {}
for _ = 1, 8 do
  local job = redis.call('RPOPLPUSH', KEYS[1], KEYS[2])
  if not job then break end
  jobs[#jobs + 1] = job
end
return jobs"""
LATENCY = "bench:latency"
FLUSH_EVERY = 0.25


class Wire:
    """One connection spoken to directly: commands packed by hiredis, replies parsed by it."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = hiredis.Reader()
        self.unread = 0

    def send(self, *command: Any) -> None:
        self.sock.sendall(hiredis.pack_command(command))
        self.unread += 1

    def call(self, *command: Any) -> Any:
        self.send(*command)
        replies = [self._read() for _ in range(self.unread)]
        self.unread = 0
        return replies[-1]

    def _read(self) -> Any:
        while (reply := self.reader.gets()) is False:
            self.reader.feed(self.sock.recv(65536))
        return reply


class Log:
    """``done`` lines gathered and written together, as wurk's handler does."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.kept: list[str] = []
        self.last = time.monotonic()

    def done(self, job: dict[str, Any], elapsed: float) -> None:
        now = time.time()
        text = (f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(now))}."
                f"{int(now % 1 * 1000):03d}Z pid={os.getpid()} tid={threading.get_ident():x} "
                f"class={job['class']} jid={job['jid']} elapsed={elapsed:.3f} INFO: done\n")
        with self.lock:
            self.kept.append(text)
            if time.monotonic() - self.last >= FLUSH_EVERY:
                sys.stderr.write("".join(self.kept))
                self.kept.clear()
                self.last = time.monotonic()


def processor(url: str, index: int, log: Log, body: redis.Redis | None, counter: str) -> None:
    parts = redis.connection.parse_url(url)
    wire = Wire(parts.get("host", "127.0.0.1"), int(parts.get("port", 6379)))
    private = f"bare:private:{index}"
    script = wire.call("SCRIPT", "LOAD", FETCH)
    while True:
        jobs = wire.call("EVALSHA", script, 2, "queue:default", private)
        if not jobs:  # an empty queue: wait for the next job in Redis, as wurk's fetch does
            job = wire.call("BRPOPLPUSH", "queue:default", private, 1)
            jobs = [job] if job else []
        for raw in jobs:
            job = json.loads(raw)
            started = time.monotonic()
            if job["class"] == "BenchLatency":
                command: tuple[Any, ...] = ("RPUSH", LATENCY, time.time() - job["args"][0])
            else:
                command = ("INCR", counter)
            if body is None:
                wire.call(*command)
            else:
                body.execute_command(*command)
            log.done(job, time.monotonic() - started)
            wire.send("LREM", private, 1, raw)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=0, help="exit once this many are done")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)))
    parser.add_argument("--redis-py", action="store_true",
                        help="the body INCRs through a shared redis-py client")
    parser.add_argument("--counter", default="bench:count", help="the key each job INCRs")
    options = parser.parse_args()
    options.url = os.environ["REDIS_URL"]
    os.sched_setaffinity(0, {options.cpu})
    # As wurk's threads held to their CPU: a woken thread waits for the running one to block
    # rather than preempting the GIL's holder. Threads started after inherit both.
    os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    body = redis.Redis.from_url(options.url, socket_timeout=10) if options.redis_py else None
    log = Log()
    for index in range(options.concurrency):
        threading.Thread(target=processor, args=(options.url, index, log, body, options.counter),
                         name=f"processor-{index}", daemon=True).start()
    if not options.jobs:  # until stopped: nothing to poll, so no CPU or commands of its own
        while True:
            time.sleep(3600)
    watch = redis.Redis.from_url(options.url)
    while int(watch.get(options.counter) or 0) < options.jobs:
        time.sleep(0.005)


if __name__ == "__main__":
    main()
