"""Rate limiters against the real server: each kind's rule, waits, stats, crashes, bad data."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.server import Server
from wurk.api.values import Invalid
from wurk.limiter import OverLimit
from wurk.limiter.base import forget_registrations


@pytest.fixture(autouse=True)
def _registrations_forgotten() -> None:
    forget_registrations()  # every test starts on a flushed server


def refused(block: Any) -> OverLimit:
    with pytest.raises(OverLimit) as caught, block:
        pass
    return caught.value


# -- concurrent -------------------------------------------------------------------------------
def test_concurrent_lets_size_blocks_in_and_refuses_the_next(config: wurk.Config) -> None:
    erp = wurk.limiter.concurrent("erp", 2, wait_timeout=0)
    with erp.within_limit(), erp.within_limit():
        error = refused(erp.within_limit())
    assert error.limiter is erp and error.retry_after is None
    assert "concurrent limiter 'erp' is over its limit" in str(error)
    with erp.within_limit():  # both slots came back
        pass
    stats = erp.stats()
    assert (stats["held"], stats["immediate"], stats["refused"]) == (3, 3, 1)


def test_a_waiter_is_woken_by_a_release(config: wurk.Config) -> None:
    mutex = wurk.limiter.concurrent("mutex", 1, wait_timeout=10)
    entered, go, leaving = threading.Event(), threading.Event(), threading.Event()

    def hold() -> None:
        with mutex.within_limit():
            entered.set()
            go.wait(10)
            time.sleep(0.3)
            leaving.set()

    holder = threading.Thread(target=hold)
    holder.start()
    assert entered.wait(10)
    started = time.monotonic()
    go.set()  # the slot is given back 0.3 s from now at the earliest
    with mutex.within_limit() as handle:
        waited = time.monotonic() - started
        assert leaving.is_set(), "in before the holder left"
    holder.join()
    assert 0.3 <= waited < 5  # woken by the release, long before its 10 s wait ran out
    assert 0 < handle.waited <= waited
    stats = mutex.stats()
    assert stats["waited"] == 1 and stats["wait_ms"] == int(handle.waited * 1000)
    assert stats["held_ms"] >= 300


def test_inside_a_processor_a_waiter_blocks_on_the_wake_up_list(config: wurk.Config,
                                                                 r: redis.Redis) -> None:
    from wurk.connections.lending import lend_from

    mutex = wurk.limiter.concurrent("lent", 1, wait_timeout=3)
    holder = mutex.within_limit()
    holder.__enter__()
    threading.Timer(0.3, holder.__exit__, (None, None, None)).start()
    r.config_resetstat()
    with lend_from(config.pool("processor", size=1)), mutex.within_limit():
        pass
    stats = r.info("commandstats")
    assert stats["cmdstat_blpop"]["calls"] >= 1  # woken by the release, not polling
    assert stats["cmdstat_evalsha"]["calls"] <= 6


def test_many_more_waiters_than_pool_connections(config: wurk.Config) -> None:
    gate = wurk.limiter.window("crowd", 5, 0.2, wait_timeout=5)  # all in within 1.2 s
    errors: list[BaseException] = []

    def call() -> None:
        try:
            with gate.within_limit():
                pass
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(30)]  # the pool has 10
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_never_more_than_size_at_once_across_threads(config: wurk.Config) -> None:
    pool = wurk.limiter.concurrent("pool", 3, wait_timeout=10, lock_timeout=10)
    running, most, lock = 0, 0, threading.Lock()

    def work() -> None:
        nonlocal running, most
        for _ in range(5):
            with pool.within_limit():
                with lock:
                    running += 1
                    most = max(most, running)
                time.sleep(0.01)
                with lock:
                    running -= 1

    threads = [threading.Thread(target=work) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most == 3
    assert pool.stats()["held"] == 50


def test_a_vanished_holders_slot_is_reclaimed_after_lock_timeout(config: wurk.Config) -> None:
    erp = wurk.limiter.concurrent("erp", 1, wait_timeout=0, lock_timeout=0.5)
    erp.within_limit().__enter__()  # a holder that never leaves (its process died)
    refused(erp.within_limit())
    time.sleep(0.6)
    with erp.within_limit():
        pass
    assert erp.stats()["reclaimed"] == 1


def test_a_waiter_gets_a_reclaimed_slot_without_any_release(config: wurk.Config) -> None:
    erp = wurk.limiter.concurrent("erp", 1, wait_timeout=10, lock_timeout=0.4)
    started = time.monotonic()
    erp.within_limit().__enter__()  # a holder that never leaves
    with erp.within_limit():
        # Not before the lock's 0.4 s; long before its own 10 s wait ends: the earliest
        # expiry bounds its sleep.
        assert 0.4 <= time.monotonic() - started < 5
    assert erp.stats()["reclaimed"] == 1


def test_a_block_that_outlives_its_lock_counts_an_overage(config: wurk.Config) -> None:
    erp = wurk.limiter.concurrent("erp", 1, wait_timeout=0, lock_timeout=0.2)
    with erp.within_limit():
        time.sleep(0.3)
    assert erp.stats()["overages"] == 1
    with erp.within_limit():  # the late release gave nothing away it did not hold
        pass


# -- bucket, window, leaky, points ------------------------------------------------------------
def test_bucket_counts_per_wall_clock_second(config: wurk.Config, r: redis.Redis) -> None:
    for attempt in range(5):  # until the three uses and the refusal fall in one second
        api = wurk.limiter.bucket(f"api{attempt}", 3, "second", wait_timeout=0)
        second = r.time()[0]
        for _ in range(3):
            with api.within_limit():
                pass
        error = refused(api.within_limit())
        if r.time()[0] == second:
            break
    assert error.retry_after is not None and 0 < error.retry_after <= 1.0
    time.sleep(error.retry_after + 0.02)  # Redis's clock is in the next second now
    with api.within_limit(used=3):  # a fresh interval holds all of it
        pass


def test_bucket_waits_for_the_next_interval(config: wurk.Config) -> None:
    api = wurk.limiter.bucket("api", 2, 1, wait_timeout=5)
    started = time.monotonic()
    for _ in range(5):  # 2 now, 2 in the next second, 1 in the one after
        with api.within_limit():
            pass
    # At least one second boundary passed, at most two: 2 s at most, 5 s on a busy machine.
    assert 1.0 < time.monotonic() - started < 5.0
    assert api.stats()["waited"] >= 2


def test_window_slides(config: wurk.Config) -> None:
    # The second use comes 0.4 s after the first: it stays in the 0.6 s window that long
    # after the first left, time enough for the last two calls on a busy machine.
    search = wurk.limiter.window("search", 2, 0.6, wait_timeout=0)
    with search.within_limit():
        pass
    time.sleep(0.4)
    with search.within_limit():
        pass
    first = refused(search.within_limit())
    assert first.retry_after is not None and 0 < first.retry_after <= 0.2
    time.sleep(first.retry_after + 0.03)
    with search.within_limit():  # the first use left the window; the second has not
        pass
    refused(search.within_limit())


def test_window_used_charges_several_units(config: wurk.Config) -> None:
    mail = wurk.limiter.window("mail", 10, "minute", wait_timeout=0)
    with mail.within_limit(used=7):
        pass
    refused(mail.within_limit(used=4))
    with mail.within_limit(used=3):
        pass
    with pytest.raises(ValueError, match="can never fit"):
        mail.within_limit(used=11)


def test_leaky_bursts_then_drips(config: wurk.Config) -> None:
    stripe = wurk.limiter.leaky("stripe", 4, 2, wait_timeout=0)  # one use per 0.5 s
    for _ in range(4):
        with stripe.within_limit():
            pass
    error = refused(stripe.within_limit())
    assert error.next_drip is not None and 0 < error.next_drip <= 0.51
    time.sleep(error.next_drip + 0.02)  # one drip, and the next is half a second away
    with stripe.within_limit():
        pass
    refused(stripe.within_limit())


def test_leaky_waits_one_drip_per_use(config: wurk.Config) -> None:
    stripe = wurk.limiter.leaky("stripe", 2, 0.4, wait_timeout=5)  # one per 0.2 s
    started = time.monotonic()
    for _ in range(6):
        with stripe.within_limit():
            pass
    # 2 at once, then 4 drips of 0.2 s: never sooner than 0.8 s, and each waiter wakes for
    # its drip (3x that on a busy machine), not at its 5 s timeout.
    assert 0.79 < time.monotonic() - started < 2.4


def test_points_refuse_at_once_and_take_the_correction(config: wurk.Config,
                                                      r: redis.Redis) -> None:
    llm = wurk.limiter.points("llm", 100, 10)
    with llm.within_limit(used=60) as handle:
        handle.points_used(20)  # cheaper than estimated: 40 points come back
    with llm.within_limit(used=70):
        pass
    r.config_resetstat()
    error = refused(llm.within_limit(used=50))
    assert r.info("commandstats")["cmdstat_evalsha"]["calls"] == 1  # one try: no wait
    assert error.retry_after is not None and 3.5 < error.retry_after < 4.5  # 40 short, 10/s
    with llm.within_limit(used=5) as handle:
        handle.points_used(30)  # dearer than estimated: a debt the next calls wait out
    refused(llm.within_limit(used=5))


def test_unlimited_takes_anything_and_never_limits(config: wurk.Config, r: redis.Redis) -> None:
    free = wurk.limiter.unlimited("anything at all", 3, "minute", wait_timeout=0)
    for _ in range(100):
        with free.within_limit(used=50) as handle:
            handle.points_used(7)
    assert r.dbsize() == 0  # it never talks to Redis


# -- the shared surface -----------------------------------------------------------------------
def test_dynamic_names_are_separate_limits(config: wurk.Config) -> None:
    def per_account(account: int) -> wurk.limiter.Concurrent:
        return wurk.limiter.concurrent(f"stripe-{account}", 1, wait_timeout=0)

    with per_account(1).within_limit(), per_account(2).within_limit():
        refused(per_account(1).within_limit())


@pytest.mark.parametrize("call, message", [
    (lambda: wurk.limiter.concurrent("bad name", 1), "letters, digits"),
    (lambda: wurk.limiter.concurrent("", 1), "letters, digits"),
    (lambda: wurk.limiter.concurrent("x", 0), "size must be a whole number"),
    (lambda: wurk.limiter.bucket("x", 5, "fortnight"), "not a unit"),
    (lambda: wurk.limiter.bucket("x", 5, 1.5), "whole seconds"),
    (lambda: wurk.limiter.window("x", 5, -1), "positive number of seconds"),
    (lambda: wurk.limiter.leaky("x", 5, 1, wait_timeout=-1), "wait_timeout"),
    (lambda: wurk.limiter.concurrent("x", 1, lock_timeout=0), "lock_timeout"),
    (lambda: wurk.limiter.concurrent("x", 1, policy="ignore"), "policy"),
    (lambda: wurk.limiter.points("x", 10, 0), "refill_per_second"),
])
def test_bad_options_name_themselves(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("call, message", [
    # Below a millisecond the scripts' whole milliseconds rounded to 0: never limited.
    (lambda: wurk.limiter.window("x", 1, 0.0004), "interval"),
    (lambda: wurk.limiter.leaky("x", 1, timedelta(microseconds=400)), "drain_period"),
    (lambda: wurk.limiter.concurrent("x", 1, lock_timeout=0.0004), "lock_timeout"),
    # Past Redis's range every use failed on the key's expiry, after the script had written.
    (lambda: wurk.limiter.window("x", 1, 1e300), "interval"),
    (lambda: wurk.limiter.bucket("x", 1, 10**20), "interval"),
    (lambda: wurk.limiter.leaky("x", 1, 1e300), "drain_period"),
    (lambda: wurk.limiter.concurrent("x", 1, lock_timeout=1e300), "lock_timeout"),
    (lambda: wurk.limiter.window("x", 1, 10, ttl=1e300), "ttl"),
    (lambda: wurk.limiter.points("x", 10, 1, ttl=timedelta(days=10**6)), "ttl"),
])
def test_an_interval_lock_or_ttl_redis_cannot_keep_is_refused_at_definition(
        call: Any, message: str) -> None:
    """A window, drain period or lock below a millisecond was accepted and the limiter let
    every call in; one of 1e300 s (or a ttl as long) was accepted and then every use raised
    Redis's "value is not an integer or out of range". Both are refused when defined."""
    bounds = "at most" if message == "ttl" else "between 1 ms and"
    with pytest.raises(ValueError, match=f"{message} must be {bounds} 100 years"):
        call()


@pytest.mark.parametrize("call, option", [
    # A wait this long made the first attempt's int(remaining ms) overflow: OverflowError
    # out of within_limit(), not a ValueError where the limiter was defined.
    (lambda: wurk.limiter.concurrent("x", 1, wait_timeout=1e306), "wait_timeout"),
    (lambda: wurk.limiter.window("x", 1, 10, wait_timeout=timedelta.max), "wait_timeout"),
    (lambda: wurk.limiter.leaky("x", 1, 10, wait_timeout=101 * 365 * 86400), "wait_timeout"),
    # An integer no float holds: float() raised OverflowError inside the check itself.
    (lambda: wurk.limiter.bucket("x", 1, 10, wait_timeout=10**400), "wait_timeout"),
    (lambda: wurk.limiter.window("x", 1, 10, ttl=10**400), "ttl"),
    (lambda: wurk.limiter.concurrent("x", 1, lock_timeout=10**400), "lock_timeout"),
    (lambda: wurk.limiter.points("x", 10**400, 1), "capacity"),
    (lambda: wurk.limiter.points("x", 10, 10**400), "refill_per_second"),
    (lambda: wurk.limiter.points("x", 10, 1).within_limit(used=10**400), "used"),
])
def test_every_duration_past_100_years_is_refused_naming_the_option(call: Any,
                                                                    option: str) -> None:
    with pytest.raises(ValueError, match=rf"^{option}\b.*must be .*not "):
        call()


def test_the_longest_wait_timeout_works(config: wurk.Config) -> None:
    century = timedelta(days=100 * 365)
    for limiter in (wurk.limiter.window("w", 1, 10, wait_timeout=century),
                    wurk.limiter.concurrent("c", 1, wait_timeout=century)):
        with limiter.within_limit() as handle:
            assert handle.waited < 1


def test_the_shortest_and_longest_intervals_work(config: wurk.Config, r: redis.Redis) -> None:
    """The bounds themselves are limits Redis keeps."""
    century = timedelta(days=100 * 365)
    for limiter in (wurk.limiter.window("w", 1, 0.001, wait_timeout=0),
                    wurk.limiter.window("W", 1, century, ttl=century, wait_timeout=0),
                    wurk.limiter.bucket("B", 1, century, wait_timeout=0),
                    wurk.limiter.leaky("L", 1, century, wait_timeout=0),
                    wurk.limiter.concurrent("C", 1, lock_timeout=century, wait_timeout=0)):
        block = limiter.within_limit()
        block.__enter__()
        if limiter.name != "w":
            refused(limiter.within_limit())
        block.__exit__(None, None, None)
    assert r.ttl("lmtr-w:{W}") > 99 * 365 * 86400


def test_creating_a_limiter_does_no_io(config: wurk.Config, r: redis.Redis) -> None:
    wurk.limiter.concurrent("erp", 5)
    wurk.limiter.window("w", 5, "hour")
    assert r.dbsize() == 0
    with wurk.limiter.concurrent("erp", 5).within_limit():
        pass
    assert r.sismember("lmtr-list", "erp")
    meta = r.hgetall("lmtr:erp")
    assert meta["type"] == "concurrent" and '"size":5' in meta["options"]
    assert len(meta["fingerprint"]) == 64 and 0 < r.ttl("lmtr:erp") <= 90 * 86400


def test_the_index_forgets_limiters_whose_metadata_expired(config: wurk.Config,
                                                          r: redis.Redis) -> None:
    # Dynamic names (f"stripe-{account_id}") each added a member to lmtr-list, which has no
    # expiry: their metadata and counters vanished after `ttl`, their names stayed for good.
    # A registration now drops the names it samples whose metadata is gone.
    with wurk.limiter.window("live", 5, 10).within_limit():
        pass
    r.sadd("lmtr-list", *(f"account-{i}" for i in range(15)))  # expired: no lmtr:<name>
    with wurk.limiter.concurrent("new-one", 1).within_limit():
        pass
    assert r.smembers("lmtr-list") == {"live", "new-one"}


def test_a_block_entered_again_while_in_use_is_refused_and_leaks_no_slot(
        config: wurk.Config, r: redis.Redis) -> None:
    # One Block shared like a lock (`GUARD = L.within_limit()`, then `with GUARD:` in several
    # threads) kept one handle: the second entry overwrote the first's, the first exit gave
    # back the second's slot while it still ran, and the first's slot leaked until its lock
    # expired. Entering a Block in use is now a clear error that takes nothing.
    erp = wurk.limiter.concurrent("shared", 2, wait_timeout=0)
    guard = erp.within_limit()
    with guard:
        with pytest.raises(RuntimeError, match="within_limit"), guard:
            pass
        assert r.zcard("lmtr-c:{shared}") == 1
    assert r.zcard("lmtr-c:{shared}") == 0
    with guard:  # free again once left
        assert r.zcard("lmtr-c:{shared}") == 1

    async def twice() -> None:
        async with guard:
            with pytest.raises(RuntimeError, match="within_limit"):
                async with guard:
                    pass
    asyncio.run(twice())
    assert r.zcard("lmtr-c:{shared}") == 0


def test_policy_skip_skips_the_call_with_run(config: wurk.Config) -> None:
    once = wurk.limiter.concurrent("once", 1, wait_timeout=0, policy="skip")
    calls: list[int] = []
    with once.within_limit():
        assert once.run(calls.append, 1) is None
        with pytest.raises(OverLimit), once.within_limit():  # a with block raises
            pass
    once.run(calls.append, 2)
    assert calls == [2]


def test_async_with_waits_without_blocking_the_loop(config: wurk.Config) -> None:
    mutex = wurk.limiter.concurrent("amutex", 1, wait_timeout=3)
    order: list[str] = []

    async def user(name: str, hold: float) -> None:
        async with mutex.within_limit():
            order.append(f"{name} in")
            await asyncio.sleep(hold)
            order.append(f"{name} out")

    async def ticker() -> int:
        ticks = 0
        for _ in range(10):
            await asyncio.sleep(0.03)
            ticks += 1
        return ticks

    async def main() -> int:
        first = asyncio.create_task(user("a", 0.3))
        for _ in range(1000):  # until a holds the slot: its acquire may take a while here
            if order:
                break
            await asyncio.sleep(0.005)
        results = await asyncio.gather(user("b", 0), ticker(), first)
        return int(results[1])

    assert asyncio.run(main()) == 10  # the loop ticked while b waited
    assert order == ["a in", "a out", "b in", "b out"]


def test_async_waiters_hold_no_thread_so_a_release_is_never_queued_behind_them(
        config: wurk.Config) -> None:
    # An application's loop has a small default executor (min(32, cpus + 4) threads). Async
    # waiters that each held a thread of it for their whole wait left the holder's release
    # queued behind them: the slot stayed taken until their waits ran out, all refused.
    from concurrent.futures import ThreadPoolExecutor

    mutex = wurk.limiter.concurrent("few-threads", 1, wait_timeout=2)
    order: list[str] = []

    async def user(name: str) -> None:
        async with mutex.within_limit():
            order.append(name)
            await asyncio.sleep(0.02)

    async def main() -> None:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(2))
        await asyncio.gather(*(user(str(i)) for i in range(5)))

    asyncio.run(main())  # OverLimit when the waiters starved the release
    assert sorted(order) == ["0", "1", "2", "3", "4"]
    assert mutex.stats()["refused"] == 0


def test_an_async_waiter_cancelled_gives_back_the_slot_it_took_later(
        config: wurk.Config) -> None:
    mutex = wurk.limiter.concurrent("cancelled", 1, wait_timeout=2)

    async def main() -> None:
        holder = mutex.within_limit()
        holder.__enter__()
        waiter = asyncio.create_task(mutex.within_limit().__aenter__())
        await asyncio.sleep(0.1)
        waiter.cancel()
        holder.__exit__(None, None, None)  # the waiter's thread takes the slot now
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(main())
    deadline = time.monotonic() + 10
    while True:  # the abandoned slot is given back by a thread of its own
        try:
            with mutex.within_limit():
                break
        except OverLimit:
            assert time.monotonic() < deadline, "the cancelled waiter kept its slot"


def test_the_local_clock_decides_nothing(config: wurk.Config,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    search = wurk.limiter.window("skewed", 2, 60, wait_timeout=0)
    with search.within_limit():
        pass
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3 * 3600)  # this host is hours ahead
    with search.within_limit():
        pass
    refused(search.within_limit())  # the first use still counts: Redis's clock says so


# -- untrusted data ---------------------------------------------------------------------------
def test_corrupt_stored_state_does_not_wedge_a_limiter(config: wurk.Config,
                                                       r: redis.Redis) -> None:
    stripe = wurk.limiter.leaky("stripe", 2, 1, wait_timeout=0)
    r.hset("lmtr-l:{stripe}", mapping={"level": "nan", "ts": "yesterday"})
    with stripe.within_limit():
        pass
    llm = wurk.limiter.points("llm", 10, 1)
    r.hset("lmtr-p:{llm}", mapping={"points": "inf", "ts": "-inf"})
    with llm.within_limit(used=5):
        pass
    api = wurk.limiter.bucket("api", 2, "hour", wait_timeout=0)
    start = int(r.time()[0]) // 3600 * 3600
    r.set(f"lmtr-b:{{api}}:{start}", "lots")
    with api.within_limit():
        pass
    r.hset("lmtr-s:{api}", "held", "many")
    held = api.stats()["held"]  # a counter that is not a count reads as what it holds
    assert isinstance(held, Invalid) and held.raw == "many"


KINDS: dict[str, Any] = {
    "concurrent": lambda: wurk.limiter.concurrent("L", 2, wait_timeout=0),
    "bucket": lambda: wurk.limiter.bucket("L", 5, "hour", wait_timeout=0),
    "window": lambda: wurk.limiter.window("L", 5, 60, wait_timeout=0),
    "leaky": lambda: wurk.limiter.leaky("L", 5, 60, wait_timeout=0),
    "points": lambda: wurk.limiter.points("L", 10, 1),
}


def restarted(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]


def said(what: str) -> str:
    return (f"limiter L: {what} held what wurk never writes there (written by something "
            "else); started again")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("field", "value"), [("held", "many"), ("held", str(2**63 - 1)),
                                              ("immediate", "1.5")])
def test_a_stats_counter_that_holds_no_count_starts_again_and_stops_no_use(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture, kind: str,
        field: str, value: str) -> None:
    """Every use HINCRBYs the stats hash: one field holding text, 1.5 or 2^63-1 made every
    use of the limiter, in every process, raise Redis's "hash value is not an integer"
    (naming no key) until the hash expired — a counter for the dashboard stopped the limit
    itself. The counter starts again, with a warning naming it."""
    limiter = KINDS[kind]()
    r.hset("lmtr-s:{L}", mapping={field: value, "refused": "7"})
    with caplog.at_level(logging.WARNING, logger="wurk"), \
            limiter.within_limit():
        pass
        with limiter.within_limit():
            pass
    stats = limiter.stats()
    assert stats["held"] == 2 and stats["immediate"] == 2 and stats["refused"] == 7
    assert restarted(caplog) == [said(f"lmtr-s:{{L}} field {field} (not a count)")]


@pytest.mark.parametrize("kind", KINDS)
def test_a_limiter_key_of_another_type_starts_again_and_stops_no_use(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture,
        kind: str) -> None:
    """A limiter's keys of another Redis type (its state, its stats, its metadata, the
    index of limiters, a concurrent limiter's wake-up list) made every use raise WRONGTYPE
    until the key expired — one written without a TTL, for good. Each is deleted and
    starts again, with a warning naming it."""
    state = {"concurrent": ["lmtr-c:{L}", "lmtr-cw:{L}"], "bucket": [],
             "window": ["lmtr-w:{L}"], "leaky": ["lmtr-l:{L}"], "points": ["lmtr-p:{L}"]}
    for key in ("lmtr:L", "lmtr-list", "lmtr-s:{L}", *state[kind]):
        r.flushall()
        forget_registrations()
        kind_of = {"lmtr:L": "hash", "lmtr-list": "set", "lmtr-s:{L}": "hash",
                   "lmtr-cw:{L}": "list", "lmtr-l:{L}": "hash", "lmtr-p:{L}": "hash"}.get(
                       key, "zset")
        found = "string" if kind_of == "list" else "list"
        if found == "string":
            r.set(key, "x")
        else:
            r.rpush(key, "x")
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="wurk"), KINDS[kind]().within_limit():
            pass
        assert restarted(caplog) == [said(f"{key} (a {found}, not a {kind_of})")], key
        assert r.type(key) in ("none", kind_of)


@pytest.mark.parametrize("kind", ["window", "concurrent"])
def test_stats_of_another_type_read_as_none_with_a_warning_not_an_error(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture,
        kind: str) -> None:
    """``L.stats()`` met a stats key of another Redis type with Redis's bare WRONGTYPE error,
    naming no key (the dashboard showed the same limiter fine). It reads as no stats, with
    a warning naming the key, as every other read of a key of the wrong type."""
    name = f"stats-{kind}"  # a key is warned about once per process
    limiter = {"window": lambda: wurk.limiter.window(name, 5, 60),
               "concurrent": lambda: wurk.limiter.concurrent(name, 2)}[kind]()
    r.rpush(f"lmtr-s:{{{name}}}", "x")
    with caplog.at_level(logging.WARNING, logger="wurk"):
        stats = limiter.stats()
    assert stats["held"] == 0 and stats["refused"] == 0
    assert f"'lmtr-s:{{{name}}}' holds a value of another type" in caplog.text
    assert r.lrange(f"lmtr-s:{{{name}}}", 0, -1) == ["x"]  # a read repairs nothing


@pytest.mark.parametrize("value", ["1.5", "0x10", " 5", "-100", "nan", "1e400", "9" * 30,
                                   "007", "00"])
def test_a_bucket_counter_that_is_no_count_starts_the_interval_afresh(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture,
        value: str) -> None:
    """Lua reads more than INCRBY writes: '0x10', ' 5', 'nan', '1e400' were believed (over
    the limit for the rest of the interval, an hour or a day), '1.5' passed and then failed
    INCRBY (every use raised), as did '007' and '00' (Redis reads no leading zero), '-100'
    let 105 uses in. Only digits INCRBY could go on from count; anything else starts the
    interval afresh, with a warning."""
    api = wurk.limiter.bucket("L", 2, "hour", wait_timeout=0)
    start = int(r.time()[0]) // 3600 * 3600
    counter = f"lmtr-b:{{L}}:{start}"
    r.set(counter, value)
    with caplog.at_level(logging.WARNING, logger="wurk"):
        for _ in range(2):
            with api.within_limit():
                pass
        refused(api.within_limit())
    assert r.get(counter) == "2"
    assert restarted(caplog) == [said(f"{counter} (not a count)")]


@pytest.mark.parametrize(("kind", "key"), [("concurrent", "lmtr-c:{L}"),
                                           ("window", "lmtr-w:{L}")])
@pytest.mark.parametrize("score", ["+inf", "1e300"])
def test_a_use_stamped_beyond_any_lifetime_does_not_fill_a_limiter_forever(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture, kind: str,
        key: str, score: str) -> None:
    """rate-limiting.md: corrupt state is "never 'full forever'". A lock (concurrent) or a
    use (window) stamped +inf or far in the future is never old enough to be dropped: it
    held its slot for good — each use refused, with no warning — once the key had no TTL.
    A stamp later than any this limiter could write (past its keys' lifetime, or one
    window ahead) is dropped, with a warning naming the key."""
    limiter = {"concurrent": lambda: wurk.limiter.concurrent("L", 1, wait_timeout=0),
               "window": lambda: wurk.limiter.window("L", 1, 60, wait_timeout=0)}[kind]()
    r.zadd(key, {"written-by-hand": score})
    with caplog.at_level(logging.WARNING, logger="wurk"), limiter.within_limit():
        pass
    assert restarted(caplog) == [said(f"{key} (1 stamped in the future)")]
    assert r.zscore(key, "written-by-hand") is None
    if kind == "window":
        refused(limiter.within_limit())  # the rule itself is untouched


def test_a_concurrent_lock_of_another_process_with_a_longer_lock_timeout_is_kept(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """Only stamps past any lifetime are dropped: a live lock another process took with a
    longer ``lock_timeout`` still holds its slot."""
    now_ms = r.time()[0] * 1000
    r.zadd("lmtr-c:{L}", {"other-process": now_ms + 3600_000})
    with caplog.at_level(logging.WARNING, logger="wurk"):
        refused(wurk.limiter.concurrent("L", 1, wait_timeout=0).within_limit())
    assert restarted(caplog) == []


# -- one name, two definitions ---------------------------------------------------------------
def test_a_second_definition_with_another_rule_is_told_naming_both(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """Two definitions of one name (two deploys, two modules) each run the scripts with
    their own size and lock, and undo each other while both are in use: this used to pass
    in silence. The registration that writes over the other's rule warns, naming both; the
    newest is stored (a deploy that changes the limit takes effect) and each keeps its own."""
    first = wurk.limiter.concurrent("erp", 1, lock_timeout=30, wait_timeout=0)
    with first.within_limit():
        pass
    second = wurk.limiter.concurrent("erp", 3, lock_timeout=1, wait_timeout=0)
    with caplog.at_level(logging.WARNING, logger="wurk"), second.within_limit():
        pass
    warned = [m for m in restarted(caplog) if "'erp'" in m]
    assert len(warned) == 1, restarted(caplog)
    assert "size=3, lock_timeout=1" in warned[0] and "size=1, lock_timeout=30" in warned[0]
    assert '"size":3' in r.hget("lmtr:erp", "options")
    assert (second.size, second.lock_timeout) == (3, 1)
    caplog.clear()
    # The same definition again (another instance, one built per call) is no news.
    with caplog.at_level(logging.WARNING, logger="wurk"), \
            wurk.limiter.concurrent("erp", 3, lock_timeout=1, wait_timeout=0).within_limit():
        pass
    assert restarted(caplog) == []


def test_a_window_defined_twice_is_told_with_both_sizes_and_intervals(
        config: wurk.Config, caplog: pytest.LogCaptureFixture) -> None:
    with wurk.limiter.window("w", 2, 60, wait_timeout=0).within_limit():
        pass
    second = wurk.limiter.window("w", 5, 1, wait_timeout=0)
    with caplog.at_level(logging.WARNING, logger="wurk"), second.within_limit():
        pass
    assert "size=5, interval=1" in caplog.text and "size=2, interval=60" in caplog.text
    assert (second.size, second.interval) == (5, 1)


def test_options_that_differ_only_in_the_wait_are_no_conflict(
        config: wurk.Config, caplog: pytest.LogCaptureFixture) -> None:
    with wurk.limiter.window("w", 2, 60, wait_timeout=0).within_limit():
        pass
    with caplog.at_level(logging.WARNING, logger="wurk"), \
            wurk.limiter.window("w", 2, 60, wait_timeout=3, policy="skip").within_limit():
        pass
    assert restarted(caplog) == []


@pytest.mark.parametrize("options", ["not json", '{"size": "many", "interval": 60}',
                                     '{"size": 1e999, "interval": 60}', "[1, 2]", "{}"])
def test_stored_options_that_are_no_limiters_are_written_over(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture,
        options: str) -> None:
    r.hset("lmtr:w", mapping={"type": "window", "options": options, "fingerprint": "x"})
    with caplog.at_level(logging.WARNING, logger="wurk"), \
            wurk.limiter.window("w", 2, 60, wait_timeout=0).within_limit():
        pass
    assert restarted(caplog) == []
    assert '"size":2' in r.hget("lmtr:w", "options")


def test_a_name_made_as_another_kind_is_told(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    with wurk.limiter.bucket("x", 2, 60).within_limit():
        pass
    with caplog.at_level(logging.WARNING, logger="wurk"), \
            wurk.limiter.window("x", 2, 60).within_limit():
        pass
    assert "limiter 'x'" in caplog.text and "bucket" in caplog.text
    assert r.hget("lmtr:x", "type") == "window"


# -- Redis unreachable ------------------------------------------------------------------------
def test_entering_while_redis_is_unreachable_raises_redis_unavailable(
        tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    from tests.helpers.faults import config_for
    from tests.helpers.server import start_server

    server = start_server(tmp_path / "private")
    config = config_for(server.url)
    erp = wurk.limiter.concurrent("erp", 1, wait_timeout=0, config=config)
    block = erp.within_limit()
    block.__enter__()
    server.stop()
    with caplog.at_level("WARNING", logger="wurk"):
        block.__exit__(None, None, None)  # the release Redis cannot take: logged, not raised
    assert "could not give back a slot" in caplog.text
    with pytest.raises(wurk.RedisUnavailable):
        erp.within_limit().__enter__()
    config.close()


def test_names_are_1_to_200_characters_and_the_ttl_at_least_a_day(
        config: wurk.Config, r: redis.Redis) -> None:
    """rate-limiting.md: names are 1 to 200 letters, digits, '-' and '_'; ``ttl`` is at
    least a day; ``handle.granted_at`` is when Redis let the call in, by Redis's clock."""
    with pytest.raises(ValueError, match="1 to 200"):
        wurk.limiter.concurrent("x" * 201, 1)
    longest = wurk.limiter.window("A-_9" * 50, 5, 10, ttl=60)
    assert longest.ttl == 86400
    with longest.within_limit() as handle:
        seconds, micros = r.time()
        assert handle.granted_at is not None
        assert abs(handle.granted_at - (seconds + micros / 1e6)) < 1
    assert 86400 - 5 < r.ttl(f"lmtr:{'A-_9' * 50}") <= 86400


def test_each_key_lives_as_long_as_the_keys_table_says(config: wurk.Config,
                                                         r: redis.Redis) -> None:
    """rate-limiting.md's keys table: a bucket's counter lives two intervals, a window's uses
    one interval; metadata, stats and the other kinds' state live ``ttl``."""
    day, hour = 86400, 3600
    wurk.limiter.concurrent("c", 2, lock_timeout=30, ttl=2 * day).within_limit().__enter__()
    kinds = (wurk.limiter.bucket("b", 5, "hour", ttl=2 * day),
             wurk.limiter.window("w", 5, 600, ttl=2 * day),
             wurk.limiter.leaky("l", 5, 60, ttl=2 * day),
             wurk.limiter.points("p", 10, 1, ttl=2 * day))
    for limiter in kinds:
        with limiter.within_limit():
            pass
    start = int(r.time()[0]) // hour * hour
    assert 2 * hour - 5 < r.ttl(f"lmtr-b:{{b}}:{start}") <= 2 * hour
    assert 600_000 - 5000 < r.pttl("lmtr-w:{w}") <= 600_000
    for key in ("lmtr:c", "lmtr-c:{c}", "lmtr-l:{l}", "lmtr-p:{p}",
                *(f"lmtr-s:{{{name}}}" for name in "cbwlp")):
        assert 2 * day - 5 < r.ttl(key) <= 2 * day, key


def test_a_processs_metadata_is_written_again_an_hour_after(
        config: wurk.Config, r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """rate-limiting.md: a limiter's first use in a process, and one an hour after, also
    writes its metadata — not every use."""
    erp = wurk.limiter.concurrent("erp", 5)
    with erp.within_limit():
        pass
    r.delete("lmtr:erp")
    with erp.within_limit():
        pass
    assert not r.exists("lmtr:erp")  # within the hour: not written again
    real = time.monotonic
    monkeypatch.setattr(time, "monotonic", lambda: real() + 3601)
    with erp.within_limit():
        pass
    assert r.hget("lmtr:erp", "type") == "concurrent"


def test_every_key_takes_the_key_prefix(redis_server: Server, r: redis.Redis) -> None:
    """rate-limiting.md: with ``key_prefix`` each key is ``<prefix>:<key>``."""
    wurk.configure(redis_url=redis_server.url, key_prefix="app")
    for limiter in (wurk.limiter.concurrent("pc", 1), wurk.limiter.window("pw", 5, 10),
                    wurk.limiter.bucket("pb", 5, "hour"), wurk.limiter.leaky("pl", 5, 10),
                    wurk.limiter.points("pp", 10, 1)):
        with limiter.within_limit():
            pass
    keys = set(r.keys("*"))
    assert keys and all(key.startswith("app:") for key in keys), keys
    assert {"app:lmtr-list", "app:lmtr:pc", "app:lmtr-s:{pc}", "app:lmtr-w:{pw}",
            "app:lmtr-l:{pl}", "app:lmtr-p:{pp}"} <= keys
    assert any(key.startswith("app:lmtr-b:{pb}:") for key in keys)


def test_a_limiter_given_a_config_uses_its_pool_even_inside_a_job(
        config: wurk.Config, r: redis.Redis, tmp_path: Any) -> None:
    """rate-limiting.md: "config — which Redis; a limiter given one uses that
    configuration's client pool even inside a job" (not the connection the job is lent)."""
    from tests.helpers.faults import config_for
    from tests.helpers.server import start_server
    from wurk.connections.lending import lend_from

    other = start_server(tmp_path / "other")
    elsewhere = config_for(other.url)
    try:
        mine = wurk.limiter.window("mine", 5, 10)
        theirs = wurk.limiter.window("theirs", 5, 10, config=elsewhere)
        with lend_from(config.pool("processor", size=1)), mine.within_limit(), \
                theirs.within_limit():
            pass
        there = redis.Redis(port=other.port, decode_responses=True)
        assert there.zcard("lmtr-w:{theirs}") == 1 and there.exists("lmtr:theirs")
        assert not r.exists("lmtr-w:{theirs}", "lmtr:theirs")
        assert r.zcard("lmtr-w:{mine}") == 1  # the default limiter takes the lent one
        there.close()
    finally:
        elsewhere.close()
        other.stop()
