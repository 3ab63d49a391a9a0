"""A thousand async jobs awaited at once from one event loop: every result arrives, over one
pub/sub connection, and nothing is sent to Redis while they wait (counted by the server's
``INFO commandstats``, not by wurk). A connection lost mid-wait is said to every waiter."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.proxy import FaultProxy
from tests.helpers.wait import wait_until
from wurk.results import store, waiting
from wurk.runtime.clock import ManualClock

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
        # Its clock stands still: the read every RECHECK (5 s) of waiting is not what this
        # counts, and on a loaded machine it came due inside the quiet second below.
        listener.clock = ManualClock(start=listener.clock.monotonic())
        # Every channel confirmed (each waiter's record read since) and the MGET answered:
        # nothing left to send (a fixed pause here was overtaken by the MGET under load).
        def sending() -> bool:  # a subscribe or a records' read still due or on its way
            return listener._sync_due or listener._check_due or bool(listener.to_check) \
                or bool(listener.unlooked) or any(
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


def test_the_connection_closes_linger_seconds_after_its_last_waiter(
        config: wurk.Config, r: redis.Redis) -> None:
    """docs/results.md: "The connection closes 10 s after its last waiter." On a clock the
    test moves: still open just before 10 s after the last waiter left, closed at 10 s; a
    waiter that comes meanwhile keeps it, and the 10 s count again from when that one left
    (however it left: its outcome, or cancelled).
    The pump is woken by a message on a channel it still holds (its read blocks in real
    time); each assertion waits for a wake-up that came after the clock moved."""
    assert waiting.LINGER == 10.0
    clock = ManualClock(start=1000.0)

    async def main() -> None:
        listener = waiting.Listener(config, clock=clock)

        async def until(predicate: Callable[[], object], what: str) -> None:
            deadline = time.monotonic() + 10  # generous: fails only when it never happens
            while not predicate():
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                await asyncio.sleep(0.005)

        def wait_on(jid: str) -> asyncio.Future[Any]:
            return asyncio.ensure_future(listener.wait(jid, None))

        async def answer(jid: str, waiter: asyncio.Future[Any]) -> None:
            """Store and announce ``jid``'s outcome; its waiter takes it and leaves."""
            payload = {"jid": jid, "class": "Linger", "args": [], "queue": "default"}
            await until(lambda: listener.session is not None
                        and jid in listener.session.subscribed, f"{jid} subscribed")
            await store.arecord(config, payload, store.succeeded(payload, jid, 0.0), 60)
            assert (await waiter).value == jid
            assert not listener.waiters

        async def open_after(seconds: float) -> bool:
            """Move the clock, wake the pump, and say whether the connection is still open
            (checked on the server too)."""
            clock.advance(seconds)
            woke = listener.wakes
            r.publish(config.keys.result_channel("a"), "nudge")  # "a" stays subscribed
            await until(lambda: listener.wakes > woke, "the pump to wake")
            if listener.session is not None:
                assert len(subscribers(r)) == 1
                return True
            await until(lambda: subscribers(r) == [], "the connection closed")
            return False

        first = wait_on("a")
        await answer("a", first)                      # the last waiter leaves at 1000
        assert await open_after(9.9375)               # 1009.9375: just before 10 s
        second = wait_on("b")                         # a new waiter comes
        await until(lambda: listener.session is not None
                    and "b" in listener.session.subscribed, "b subscribed")
        assert await open_after(0.125)                # 1010.0625: past 10 s, b waits
        await answer("b", second)                     # the last waiter leaves at 1010.0625
        assert await open_after(9.9375)               # 1020.0: just before 10 s after b
        # A waiter that leaves with no message (cancelled, or its timeout): the count starts
        # when it left, not when the pump last heard something.
        woke = listener.wakes
        third = wait_on("c")                          # comes at 1020.0
        await until(lambda: listener.wakes > woke and not listener.to_check,
                    "c's subscription confirmed")
        clock.advance(5)
        third.cancel()                                # leaves at 1025.0
        with pytest.raises(asyncio.CancelledError):
            await third
        assert not listener.waiters
        assert await open_after(9.9375)               # 1034.9375: just before 10 s after c
        assert not await open_after(0.0625)           # 1035.0: 10 s after c: closed
        assert listener.session is None

    asyncio.run(main())


def test_a_sync_wait_past_the_pools_size_waits_its_own_time_for_a_connection(
        config: wurk.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool's own wait for a free connection took socket_timeout (3 s) whatever the
    wait's timeout, then said Redis was unavailable: a wait of 0.3 s raised
    ``RedisUnavailable`` after 3 s."""
    monkeypatch.setattr(waiting, "WAIT_POOL_SIZE", 2)
    holders = [wurk.ResultHandle(f"{n}" * 24, config) for n in (1, 2)]
    heard: list[Any] = []
    threads = [threading.Thread(target=lambda h=h: heard.append(h.result(timeout=10)))
               for h in holders]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(subscribers(r)) == 2, what="both waits subscribed")
    late = wurk.ResultHandle("3" * 24, config)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"within 0\.3 s"):
        late.result(timeout=0.3)
    assert time.monotonic() - started < 1.5
    # A longer wait takes the first connection given back.
    r.set("wurk:result:" + "3" * 24, '{"status": "succeeded", "value": 3}')
    queued: list[Any] = []
    thread = threading.Thread(target=lambda: queued.append(late.result(timeout=10)))
    thread.start()
    time.sleep(0.1)
    assert queued == []
    text = '{"status": "succeeded", "value": 1}'
    r.set("wurk:result:" + "1" * 24, text)
    r.publish("wurk:result-ready:" + "1" * 24, text)
    thread.join(5)
    assert queued == [3]
    r.publish("wurk:result-ready:" + "2" * 24, text)
    for held_thread in threads:
        held_thread.join(5)
    assert heard == [1, 1]


def test_an_announcement_that_cannot_be_read_is_no_outcome(config: wurk.Config,
                                                           r: redis.Redis) -> None:
    """Anything published on a result's channel that is not what wurk publishes failed the
    wait with "the result stored ... cannot be read" though nothing was stored: it now
    reads the stored record instead, and waits on while there is none."""
    jid = "m" * 24
    channel, key = "wurk:result-ready:" + jid, "wurk:result:" + jid
    text = '{"status": "succeeded", "value": 4}'
    handle = wurk.ResultHandle(jid, config)
    found: list[Any] = []
    thread = threading.Thread(target=lambda: found.append(handle.result(timeout=10)))
    thread.start()
    wait_until(lambda: len(subscribers(r)) == 1, what="the sync wait subscribed")
    r.publish(channel, "[" * 5000)
    r.publish(channel, "not json")
    time.sleep(0.1)
    assert found == [] and thread.is_alive()
    r.set(key, text)
    r.publish(channel, "not json either")  # the stored record is read, not this
    thread.join(5)
    assert found == [4]
    r.delete(key)

    async def main() -> Any:
        waited = asyncio.ensure_future(handle.aresult(timeout=10))
        wait = waiting.listener(config)
        while wait.session is None or jid not in wait.session.subscribed:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        r.publish(channel, "[" * 5000)
        await asyncio.sleep(0.1)
        assert not waited.done()
        r.set(key, text)
        r.publish(channel, "not json")
        return await waited

    assert asyncio.run(main()) == 4


# -- a half-open pub/sub connection ----------------------------------------------------------
@pytest.fixture
def proxied(redis_server: Any, monkeypatch: pytest.MonkeyPatch
            ) -> Iterator[tuple[FaultProxy, wurk.Config]]:
    """A configuration reaching the server through a proxy the test controls."""
    with FaultProxy(redis_server.port) as proxy:
        monkeypatch.setenv("REDIS_URL", proxy.url)  # the environment wins over redis_url
        config = wurk.Config()
        monkeypatch.setenv("REDIS_URL", redis_server.url)
        try:
            yield proxy, config
        finally:
            config.close()


def store_directly(redis_server: Any, jid: str) -> None:
    """Store and announce ``jid``'s outcome on the server itself, past the proxy."""
    direct = wurk.Config(redis_url=redis_server.url)
    try:
        payload = {"jid": jid, "class": "HalfOpen", "args": [], "queue": "default"}
        store.record(direct, payload, store.succeeded(payload, 42, 0.0), 60)
    finally:
        direct.close()


def test_a_sync_wait_on_a_half_open_connection_finds_the_stored_result(
        proxied: tuple[FaultProxy, wurk.Config], redis_server: Any, r: redis.Redis,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/results.md: a wait without a timeout reads the record again every RECHECK
    seconds: an announcement lost on a silently dropped connection still ends it."""
    assert waiting.RECHECK == 5.0
    monkeypatch.setattr(waiting, "RECHECK", 0.2)
    proxy, config = proxied
    found: list[Any] = []
    thread = threading.Thread(
        target=lambda: found.append(wurk.ResultHandle("half-open", config).result()),
        daemon=True)
    thread.start()
    wait_until(lambda: len(subscribers(r)) == 1, what="the waiter's subscription")
    assert proxy.sever() >= 1
    wait_until(lambda: subscribers(r) == [], what="the server to forget the subscriber")
    store_directly(redis_server, "half-open")  # announced to nobody
    thread.join(5)
    assert found == [42]


def test_an_async_wait_on_a_half_open_connection_finds_the_stored_result(
        proxied: tuple[FaultProxy, wurk.Config], redis_server: Any, r: redis.Redis,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waiting, "RECHECK", 0.2)
    proxy, config = proxied

    async def main() -> Any:
        listener = waiting.Listener(config)
        task = asyncio.ensure_future(listener.wait("half-open-async", None))
        deadline = time.monotonic() + 5
        while len(subscribers(r)) != 1:
            assert time.monotonic() < deadline, "the listener never subscribed"
            await asyncio.sleep(0.01)
        assert proxy.sever() >= 1
        while subscribers(r):
            assert time.monotonic() < deadline, "the server kept the subscriber"
            await asyncio.sleep(0.01)
        store_directly(redis_server, "half-open-async")  # announced to nobody
        outcome = await asyncio.wait_for(task, 5)
        session = listener.session
        if session is not None:
            await listener._end(session)
        return outcome.value

    assert asyncio.run(main()) == 42


def test_an_error_reply_to_the_listeners_subscription_reaches_its_waiters(
        redis_server: Any, r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user without channel permissions (Redis 7's default for a new ACL user) has its
    SUBSCRIBE refused: the refusal killed the listener's pump, and ``await handle`` hung
    for good — though the result was stored before the wait. Every waiter now hears it."""
    user = "wurk-no-channels"
    r.execute_command("ACL", "SETUSER", user, "on", ">pw", "~*", "+@all", "resetchannels")
    try:
        monkeypatch.setenv("REDIS_URL", redis_server.url.replace("redis://", f"redis://{user}:pw@"))
        config = wurk.Config()
        r.set("wurk:result:refused", '{"status": "succeeded", "value": 4}')

        async def main() -> BaseException | None:
            try:
                await asyncio.wait_for(wurk.ResultHandle("refused", config).aresult(), 10)
            except BaseException as exc:  # what the waiter heard
                return exc
            return None

        heard = asyncio.run(main())
        assert isinstance(heard, redis.exceptions.NoPermissionError), repr(heard)
        config.close()
    finally:
        r.execute_command("ACL", "DELUSER", user)
