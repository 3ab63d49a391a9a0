"""The least an asyncio worker does per job of the async row: the yardstick of
``--async-row``'s ``bare_async`` rows, run as its own process so its CPU is measured as a
worker's is.

    python -m benchmarks.bare_async [--concurrency 100] [--jobs N] [--counter KEY]
                                    [--loop uvloop|asyncio] [--from-memory]
                                    (the server: REDIS_URL)

One thread, one event loop (uvloop where it is installed, as wurk's default). Once a
quarter of the places (at most eight) are free, a fetch moves that many jobs from
``queue:default`` into a private list in one Lua call (reliable fetch, as wurk's with its
default prefetch), carrying in the same round trip the ACKs (LREM) of the jobs ended since
the last one; on an empty queue it waits 10 ms. Each job is a task of its own (asyncio's
unit of context, as in wurk): it parses its payload, awaits 50 ms, INCRs the counter
through a shared redis-py asyncio client whose pool holds ``2 × concurrency + 20``
connections (the row's job body, as wurk's, arq's and SAQ's), and frees its place. No
middleware, retries, metrics, heartbeat, busy map, log lines, shutdown handling or payload
checks: what a worker adds over this is the price of those. Exits when the counter reaches
N; with none it runs until stopped.

``--from-memory`` is the floor beneath it (the ``body_async`` rows): the whole queue taken
in one round trip at start (LRANGE and DEL in one MULTI), then the same tasks started in
the same batches from that list, with no fetch and no ACK: what the row's job body costs
on its own, in a task of its own, on this machine. No worker of any shape spends less a
job on this row.

It imports nothing of wurk and trusts the payloads the benchmark pushed: a yardstick, not a
worker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Awaitable, Callable

import redis.asyncio as aredis

WAIT_SECONDS = 0.05  # benchmarks.peers.shared.WAIT_SECONDS, the row's job
# Moves up to ARGV[1] jobs into the private list, after the ACKs in ARGV[2..].
FETCH = """for i = 2, #ARGV do redis.call('LREM', KEYS[2], 1, ARGV[i]) end
local jobs = {}
for _ = 1, tonumber(ARGV[1]) do
  local job = redis.call('RPOPLPUSH', KEYS[1], KEYS[2])
  if not job then break end
  jobs[#jobs + 1] = job
end
return jobs"""
PREFETCH = 8
IDLE_WAIT = 0.01


class Worker:
    def __init__(self, url: str, concurrency: int, counter: str) -> None:
        self.client = aredis.from_url(url, max_connections=2 * concurrency + 20)
        self.fetch = self.client.register_script(FETCH)
        self.counter = counter
        self.free = concurrency
        # Fetch once this many places are free, as wurk's slots wake its fetchers in batches.
        self.batch = max(1, min(PREFETCH, concurrency // 4))
        self.acks: list[bytes] = []
        self.wake = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()

    async def job(self, raw: bytes) -> None:
        json.loads(raw)
        await asyncio.sleep(WAIT_SECONDS)
        await self.client.incr(self.counter)
        self.acks.append(raw)
        self.free += 1
        if self.free == self.batch:
            self.wake.set()

    async def take(self, count: int) -> list[bytes]:
        """Up to ``count`` jobs moved into the private list, the ACKs riding along."""
        acks, self.acks = self.acks, []
        raws: list[bytes] = await self.fetch(keys=["queue:default", "bare:async"],
                                             args=[count, *acks])
        return raws

    async def take_all(self) -> Callable[[int], Awaitable[list[bytes]]]:
        """``--from-memory``: the queue, whole, in one round trip; then ``take`` slices it."""
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.lrange("queue:default", 0, -1)
            pipe.delete("queue:default")
            held: list[bytes] = (await pipe.execute())[0]
        # LPUSHed, so the oldest is last: taken from the end, as RPOPLPUSH takes them.

        async def take(count: int) -> list[bytes]:
            self.acks.clear()  # nothing to ACK: no private list
            taken = held[-count:]
            del held[-count:]
            return taken

        return take

    async def run(self, done: Callable[[], bool],
                  take: Callable[[int], Awaitable[list[bytes]]] | None = None) -> None:
        take = take or self.take
        while not done():
            if self.free < self.batch:
                await self.wake.wait()
                self.wake.clear()
                continue
            raws = await take(min(self.free, PREFETCH))
            if not raws:
                await asyncio.sleep(IDLE_WAIT)
                continue
            for raw in raws:
                self.free -= 1
                task = asyncio.create_task(self.job(raw))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)


async def main_async(options: argparse.Namespace) -> None:
    worker = Worker(options.url, options.concurrency, options.counter)
    watch = aredis.from_url(options.url)
    seen = {"at": 0}

    async def poll() -> None:  # the counter, every 5 ms, while a target is set
        while True:
            seen["at"] = int(await watch.get(options.counter) or 0)
            await asyncio.sleep(0.005)

    poller = asyncio.create_task(poll()) if options.jobs else None
    try:
        take = await worker.take_all() if options.from_memory else None
        await worker.run(lambda: bool(options.jobs) and seen["at"] >= options.jobs, take)
    finally:  # what is still running (a job of someone else's queue) ends with the loop
        for task in [*worker.tasks, *([poller] if poller is not None else [])]:
            task.cancel()
        await asyncio.gather(*worker.tasks, return_exceptions=True)
        await worker.client.aclose()
        await watch.aclose()


def loop_factory(kind: str) -> Callable[[], asyncio.AbstractEventLoop]:
    if kind == "uvloop":
        try:
            import uvloop
        except ImportError:
            return asyncio.new_event_loop
        return uvloop.new_event_loop
    return asyncio.new_event_loop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=0, help="exit once this many are done")
    parser.add_argument("--counter", default="bench:count", help="the key each job INCRs")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument("--from-memory", action="store_true",
                        help="take the queue whole at start and run it with no fetch or ACK")
    options = parser.parse_args()
    options.url = os.environ["REDIS_URL"]
    loop = loop_factory(options.loop)()
    try:
        loop.run_until_complete(main_async(options))
    finally:
        loop.close()


if __name__ == "__main__":
    main()
