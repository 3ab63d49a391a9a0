"""A thousand async jobs awaited at once from one event loop: every result arrives, over one
pub/sub connection, and nothing is sent to Redis while they wait (counted by the server's
``INFO commandstats``, not by wurk). A connection lost mid-wait is said to every waiter."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.wait import wait_until
from wurk.results import waiting

JOBS = 1_000
RELEASE = threading.Event()
# The commands a waiter sends, which the worker never does (so INFO's counts are the
# waiters'): the worker's own GET, PING or EXISTS (its heartbeat, its fetch script) are not
# counted here; the subscriber connection's own count (CLIENT LIST tot-cmds) covers them.
WAITER_COMMANDS = ("subscribe", "unsubscribe", "psubscribe", "mget", "blpop", "brpop")


@wurk.job(name="waiters.held", result_ttl=600)
async def held(n: int) -> int:
    while not RELEASE.is_set():  # in-process: the test lets every job end at once
        await asyncio.sleep(0.01)
    return n * n


@pytest.fixture
def worker(redis_server: Any) -> Iterator[wurk.Config]:
    RELEASE.clear()
    config = wurk.configure(redis_url=redis_server.url, concurrency=2, fetch_timeout=0.2,
                            timeout=2, async_concurrency=JOBS)
    running = wurk.InProcessWorker(config).start()
    yield config
    RELEASE.set()
    running.stop()


def calls(r: redis.Redis) -> dict[str, int]:
    return {name.removeprefix("cmdstat_"): int(stat["calls"])
            for name, stat in r.info("commandstats").items()}


def waiter_calls(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {name: after.get(name, 0) - before.get(name, 0) for name in WAITER_COMMANDS
            if after.get(name, 0) != before.get(name, 0)}


def subscribers(r: redis.Redis) -> list[dict[str, Any]]:
    return [c for c in r.client_list() if int(c.get("sub", 0)) > 0]


def test_a_thousand_waiters_share_one_connection_and_poll_nothing(
        worker: wurk.Config, r: redis.Redis) -> None:
    async def main() -> list[int]:
        handles = await held.aperform_bulk([[n] for n in range(JOBS)])
        results = asyncio.gather(*handles)  # each a task awaiting its handle
        listener = waiting.listener(worker)
        # Every channel confirmed and the MGET of their records answered: nothing left to
        # send (a fixed pause here was overtaken by the MGET on a loaded machine).
        def sending() -> bool:  # a subscribe or a records' read still due or on its way
            return listener._sync_due or listener._check_due or bool(listener.to_check) or any(
                task.get_coro().__name__ in ("_sync", "_check")  # type: ignore[union-attr]
                for task in listener._tasks)

        while listener.session is None or len(listener.session.subscribed) < JOBS \
                or sending():
            await asyncio.sleep(0.01)
        [one] = subscribers(r)  # one connection for every waiter of the loop
        assert int(one["sub"]) == JOBS
        waiting_since = calls(r)
        await asyncio.sleep(1.0)  # nothing may be sent meanwhile (a negative check)
        assert waiter_calls(waiting_since, calls(r)) == {}
        [still] = subscribers(r)  # the same connection, which sent nothing either
        assert (still["id"], still["tot-cmds"]) == (one["id"], one["tot-cmds"])
        RELEASE.set()
        return list(await results)

    before = calls(r)
    started = time.monotonic()
    assert asyncio.run(main()) == [n * n for n in range(JOBS)]
    sent = waiter_calls(before, calls(r))
    print(f"\n{JOBS} waiters: {sent} in {time.monotonic() - started:.1f} s")
    assert sent.get("subscribe", 0) <= 2  # a batch per loop turn (1,000 channels a command)
    assert sent.get("mget", 0) <= 2  # the records stored before the subscriptions held
    # stale channels are unsubscribed UNSUBSCRIBE_AT at a time (never down to none)
    assert sent.get("unsubscribe", 0) <= JOBS // waiting.UNSUBSCRIBE_AT
    assert sent.get("blpop", 0) == 0 and sent.get("brpop", 0) == 0
    after = calls(r)
    assert after["publish"] - before.get("publish", 0) == JOBS


def test_results_stored_before_the_wait_are_found_with_one_read(
        worker: wurk.Config, r: redis.Redis) -> None:
    RELEASE.set()
    handles = held.perform_bulk([[n] for n in range(200)])
    wait_until(lambda: len(r.keys("wurk:result:*")) == 200, what="200 results")
    before = calls(r)

    async def main() -> list[int]:
        return list(await asyncio.gather(*handles))

    assert asyncio.run(main()) == [n * n for n in range(200)]
    assert waiter_calls(before, calls(r)) == {"subscribe": 1, "mget": 1}


def test_waiters_on_one_jid_all_hear_it_and_a_late_one_finds_it(worker: wurk.Config) -> None:
    handle = held.perform_async(7)
    assert handle is not None

    async def main() -> list[int]:
        first = [asyncio.ensure_future(handle.aresult(timeout=20)) for _ in range(5)]
        await asyncio.sleep(0.2)
        RELEASE.set()
        values = list(await asyncio.gather(*first))
        return [*values, await handle]

    assert asyncio.run(main()) == [49] * 6
    # and a sync waiter, in another thread meanwhile
    assert handle.result(timeout=5) == 49


def test_a_connection_lost_mid_wait_is_said_to_every_waiter(
        worker: wurk.Config, r: redis.Redis) -> None:
    handles = held.perform_bulk([[n] for n in range(3)])

    async def main() -> list[BaseException | int]:
        tasks = [asyncio.ensure_future(h.aresult(timeout=20)) for h in handles]  # type: ignore[union-attr]
        wait = waiting.listener(worker)
        while wait.session is None or len(wait.session.subscribed) < 3:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        r.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
        found = await asyncio.gather(*tasks, return_exceptions=True)
        RELEASE.set()
        again = await handles[0]  # type: ignore[misc]  # a new wait opens a new connection
        return [*found, again]

    *lost, again = asyncio.run(main())
    assert all(isinstance(e, wurk.RedisUnavailable) for e in lost), lost
    assert again == 0


def test_a_sync_wait_holds_one_connection_for_its_time(worker: wurk.Config,
                                                       r: redis.Redis) -> None:
    handle = held.perform_async(3)
    assert handle is not None
    found: list[int] = []
    thread = threading.Thread(target=lambda: found.append(handle.result(timeout=20)))
    thread.start()
    wait_until(lambda: len(subscribers(r)) == 1, what="the waiter's subscription")
    RELEASE.set()
    thread.join(20)
    assert found == [9]
    wait_until(lambda: subscribers(r) == [], what="its connection given back")
    # from the configuration's "results" pool: 100 waits at once (docs/results.md)
    assert worker.pool("results").size == 100
