"""The async client on redis-py's asyncio client: no thread, the loop never waits on Redis,
and every push writes what the sync push writes."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
import warnings
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
import redis

import wurk
import wurk.testing
from tests.helpers.faults import config_for
from tests.helpers.proxy import FaultProxy
from tests.helpers.server import Server, free_port
from wurk import payload as P
from wurk.asyncjobs import loop_factory

QUEUE = "asyncclient"
RAN: list[Any] = []


@wurk.job(name="AsyncClient::Plain", queue=QUEUE)
def plain(n: Any) -> None:
    RAN.append(n)


@wurk.job(name="AsyncClient::Once", queue=QUEUE, unique_for=60)
def once(n: Any) -> None:
    RAN.append(n)


@wurk.job(name="AsyncClient::Brief", queue=QUEUE, expires_in=300)
def brief(n: Any) -> None:
    RAN.append(n)


@wurk.job(name="AsyncClient::Waits", queue=QUEUE)
async def waits(n: Any) -> None:
    await asyncio.sleep(0)
    RAN.append(("async", n))


def run(coro: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    return asyncio.run(coro())


def async_clients(r: redis.Redis) -> list[dict[str, Any]]:
    return [c for c in r.client_list() if c.get("name") == "wurk-async"]


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    RAN.clear()
    yield
    wurk.testing.clear_all()


@pytest.fixture
def proxy(redis_server: Server) -> Iterator[FaultProxy]:
    with FaultProxy(redis_server.port) as running:
        yield running


# -- the loop is never blocked ----------------------------------------------------------------
def test_apush_starts_no_thread(config: wurk.Config, r: redis.Redis) -> None:
    async def pushes() -> tuple[int, int, bool]:
        await plain.aperform_async(0)  # the pool's first connection, outside the count
        before = threading.active_count()
        await plain.aperform_async(1)
        await plain.aperform_in(60, 2)
        await plain.aperform_bulk([[3], [4]])
        await once.aperform_async(5)
        await wurk.apush({"class": "RubyJob", "args": [6], "queue": QUEUE})
        during = threading.active_count()
        loop = asyncio.get_running_loop()
        return before, during, getattr(loop, "_default_executor", None) is None

    before, during, no_executor = run(pushes)
    assert during == before and no_executor
    assert r.llen(f"queue:{QUEUE}") == 6 and r.zcard("schedule") == 1


def test_the_loop_keeps_ticking_while_a_push_waits_on_a_slow_redis(
        proxy: FaultProxy, r: redis.Redis) -> None:
    config = config_for(proxy.url, socket_timeout=5)
    client = wurk.Client(config)
    delay = 0.4

    async def scenario() -> tuple[int, float, str | None]:
        await client.apush({"class": "Warm", "args": [], "queue": QUEUE})  # connect first
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        proxy.latency(delay)  # each direction: a push waits at least 2 * delay
        started = time.monotonic()
        jid = await client.apush({"class": "Slow", "args": [1], "queue": QUEUE})
        took = time.monotonic() - started
        task.cancel()
        await config.aclose()
        return ticks, took, jid

    try:
        ticks, took, jid = run(scenario)
    finally:
        config.close()
    assert jid is not None and took >= 2 * delay * 0.9
    # A blocked loop would not tick at all; a loaded machine still ticks many times.
    assert ticks >= 10, ticks
    assert any(json.loads(raw)["jid"] == jid for raw in r.lrange(f"queue:{QUEUE}", 0, -1))


# -- the same bytes -------------------------------------------------------------------------
FIXED = {"jid": "0123456789abcdef01234567", "created_at": 1700000000.125}


def written(r: redis.Redis) -> dict[str, list[Any]]:
    found = {key: r.lrange(key, 0, -1) for key in r.scan_iter("queue:*")}
    found["schedule"] = r.zrange("schedule", 0, -1, withscores=True)
    found["queues"] = sorted(r.smembers("queues"))
    found["locks"] = sorted((k, r.get(k)) for k in r.scan_iter("unique:*"))
    return found


@pytest.mark.parametrize("item", [
    {"class": "AsyncClient::Plain", "args": [1, {"a": [1.5, None]}], "queue": QUEUE},
    {"class": "AsyncClient::Plain", "args": ["later"], "queue": QUEUE, "at": 4102444800.5},
    {"class": "AsyncClient::Once", "args": [7], "queue": QUEUE, "unique_for": 60},
    {"class": "AsyncClient::Brief", "args": [8], "queue": QUEUE, "expires_in": 300},
    {"class": "AsyncClient::Once", "args": [9], "queue": QUEUE, "unique_for": 60,
     "at": 4102444800.5},
], ids=["now", "scheduled", "unique", "expiring", "unique-scheduled"])
def test_apush_writes_the_bytes_push_writes(config: wurk.Config, r: redis.Redis,
                                            monkeypatch: pytest.MonkeyPatch,
                                            item: dict[str, Any]) -> None:
    monkeypatch.setattr(P, "write_time", lambda fmt, *when: 1700000001.25)  # enqueued_at
    client = wurk.Client(config)
    assert client.push({**item, **FIXED}) == FIXED["jid"]
    by_push = written(r)
    r.flushdb()
    assert run(lambda: client.apush({**item, **FIXED})) == FIXED["jid"]
    assert written(r) == by_push


def test_apush_bulk_writes_the_bytes_push_bulk_writes(config: wurk.Config, r: redis.Redis,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(P, "write_time", lambda fmt, *when: 1700000001.25)
    jids = iter(f"{n:024x}" for n in range(100))
    monkeypatch.setattr(P, "new_jid", lambda: next(jids))
    client = wurk.Client(config)
    item = {"class": "AsyncClient::Plain", "args": [[n] for n in range(5)], "queue": QUEUE,
            "created_at": 1700000000.0, "batch_size": 2}
    scheduled = {**item, "at": [4102444800.0 + n for n in range(5)]}
    first = [client.push_bulk(item), client.push_bulk(scheduled)]
    by_push = written(r)
    r.flushdb()
    jids = iter(f"{n:024x}" for n in range(100))

    async def both() -> list[list[str | None]]:
        return [await client.apush_bulk(item), await client.apush_bulk(scheduled)]

    assert run(both) == first
    assert written(r) == by_push
    assert len(by_push[f"queue:{QUEUE}"]) == 5 and len(by_push["schedule"]) == 5


# -- what the pushes do -----------------------------------------------------------------------
def test_aperform_in_at_and_bulk_schedule_and_slice(config: wurk.Config,
                                                    r: redis.Redis) -> None:
    async def pushes() -> list[Any]:
        return [await plain.aperform_in(3600, "in"),
                await plain.aperform_at(time.time() + 7200, "at"),
                await plain.aperform_at(time.time() - 5, "past"),  # due: pushed now
                await plain.aperform_bulk([[n] for n in range(7)], batch_size=3)]

    in_jid, at_jid, past_jid, bulk = run(pushes)
    scheduled = {json.loads(raw)["jid"]: score
                 for raw, score in r.zrange("schedule", 0, -1, withscores=True)}
    assert set(scheduled) == {in_jid, at_jid}
    assert scheduled[in_jid] == pytest.approx(time.time() + 3600, abs=60)
    queued = [json.loads(raw) for raw in r.lrange(f"queue:{QUEUE}", 0, -1)]
    assert {job["jid"] for job in queued} == {past_jid, *bulk} and len(bulk) == 7
    assert sorted(job["args"][0] for job in queued if job["jid"] in bulk) == list(range(7))


def test_a_unique_duplicate_pushed_async_returns_none(config: wurk.Config,
                                                      r: redis.Redis) -> None:
    async def pushes() -> list[Any]:
        return [await once.aperform_async(1), await once.aperform_async(1),
                await once.aperform_async(2),
                await once.aperform_bulk([[1], [3]])]

    first, duplicate, other, bulk = run(pushes)
    assert first and other and duplicate is None and bulk[0] is None and bulk[1]
    assert r.llen(f"queue:{QUEUE}") == 3
    assert wurk.unique.locked(QUEUE, "AsyncClient::Once", [1]) == first


def test_an_expiring_job_pushed_async_gets_its_deadline(config: wurk.Config,
                                                        r: redis.Redis) -> None:
    jid = run(lambda: brief.aperform_async(1))
    (raw,) = r.lrange(f"queue:{QUEUE}", 0, -1)
    job = json.loads(raw)
    assert job["jid"] == jid and job["expires_at"] > time.time() + 200


def test_async_pushes_in_a_jobs_block_join_the_batch_and_unique_ones_are_checked(
        config: wurk.Config, r: redis.Redis) -> None:
    batch = wurk.Batch()

    async def pushes() -> list[Any]:
        with batch.jobs():
            return [await plain.aperform_async("a"), await once.aperform_async("u"),
                    await once.aperform_async("u"),  # a duplicate: not pushed nor counted
                    *(await plain.aperform_bulk([["b"], ["c"]]))]

    jids = run(pushes)
    assert jids[2] is None and all(j for i, j in enumerate(jids) if i != 2)
    status = wurk.BatchStatus(batch.bid)
    assert status.total == 4 and status.pending == 4
    queued = [json.loads(raw) for raw in r.lrange(f"queue:{QUEUE}", 0, -1)]
    assert {job["bid"] for job in queued} == {batch.bid} and len(queued) == 4
    assert set(r.smembers(f"b-{batch.bid}-jids")) == {j for j in jids if j}


# -- middleware -------------------------------------------------------------------------------
def test_client_middleware_runs_on_the_loop_in_order(config: wurk.Config,
                                                     r: redis.Redis) -> None:
    events: list[str] = []

    def sync_link(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        events.append(f"sync:{threading.current_thread() is threading.main_thread()}")
        payload["sync"] = True
        return call_next()

    async def async_link(job: str, payload: dict[str, Any], queue: str,
                         call_next: Any) -> Any:
        events.append("async-before")
        await asyncio.sleep(0)
        payload["async"] = True
        result = await call_next()
        events.append("async-after")
        return result

    def stops(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        return None if payload["args"] == ["stop"] else call_next()

    config.client_middleware.add(sync_link)
    config.client_middleware.add(async_link)
    config.client_middleware.add(stops)

    async def pushes() -> list[str | None]:
        return [await plain.aperform_async("go"), await plain.aperform_async("stop")]

    go, stopped = run(pushes)
    assert stopped is None and go is not None
    assert events == ["sync:True", "async-before", "async-after"] * 2
    (raw,) = r.lrange(f"queue:{QUEUE}", 0, -1)
    assert json.loads(raw)["sync"] is True and json.loads(raw)["async"] is True


def test_a_sync_link_not_returning_call_next_still_runs_the_rest(config: wurk.Config,
                                                                 r: redis.Redis) -> None:
    async def stamp(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        payload["stamped"] = True
        return await call_next()

    def careless(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        call_next()
        return True

    config.client_middleware.add(careless)
    config.client_middleware.add(stamp)
    assert run(lambda: plain.aperform_async(1))
    (raw,) = r.lrange(f"queue:{QUEUE}", 0, -1)
    assert json.loads(raw)["stamped"] is True


def test_a_sync_link_calling_call_next_twice_runs_the_rest_twice_on_either_path(
        config: wurk.Config, r: redis.Redis) -> None:
    # A sync push runs the rest of the chain at each call_next(); the async push ran only
    # the call whose awaitable the link returned, the other's coroutine never awaited
    # (Python warned). Both run the rest at each call now, and push the job once.
    inner: list[str] = []

    async def counts(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        inner.append(payload["args"][0])
        return await call_next()

    def twice(job: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        call_next()
        return call_next()

    config.client_middleware.add(twice)
    config.client_middleware.add(counts)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert plain.perform_async("sync")
        assert run(lambda: plain.aperform_async("async"))
        gc.collect()
    assert inner == ["sync", "sync", "async", "async"]
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert sorted(json.loads(raw)["args"][0] for raw in r.lrange(f"queue:{QUEUE}", 0, -1)) \
        == ["async", "sync"]  # each pushed once


# -- failures ---------------------------------------------------------------------------------
def test_apush_with_redis_down_names_the_job() -> None:
    config = config_for(f"redis://127.0.0.1:{free_port()}/0", socket_timeout=1)
    client = wurk.Client(config)
    try:
        with pytest.raises(wurk.RedisUnavailable,
                           match=r"could not push AsyncClient::Plain \(jid [0-9a-f]{24}\)"):
            run(lambda: client.apush({"class": "AsyncClient::Plain", "args": [1]}))
        with pytest.raises(wurk.RedisUnavailable, match=r"could not push 3 jobs, the first"):
            run(lambda: client.apush_bulk({"class": "AsyncClient::Plain",
                                           "args": [[1], [2], [3]]}))
    finally:
        config.close()


def test_a_push_cut_mid_reply_is_not_sent_again(proxy: FaultProxy, r: redis.Redis) -> None:
    config = config_for(proxy.url, socket_timeout=3)
    client = wurk.Client(config)

    async def scenario() -> tuple[BaseException | None, int]:
        await client.apush({"class": "Warm", "args": [], "queue": "warm"})
        proxy.latency(0.5)
        push = asyncio.create_task(client.apush({"class": "Cut", "args": [], "queue": QUEUE}))
        while not r.llen(f"queue:{QUEUE}"):  # the command has reached Redis…
            await asyncio.sleep(0.005)
        proxy.cut()  # …and its reply, half a second behind, is lost
        connections = proxy.accepted
        try:
            await push
        except wurk.RedisUnavailable as exc:
            return exc, connections
        return None, connections

    try:
        failure, connections = run(scenario)
    finally:
        config.close()
    assert isinstance(failure, wurk.RedisUnavailable) and "Cut (jid" in str(failure)
    # Sending it again would take a new connection (the cut closed the only one): none was
    # opened, so nothing can still be on its way.
    assert proxy.accepted == connections
    assert r.llen(f"queue:{QUEUE}") == 1  # applied once, never twice


# -- connections ------------------------------------------------------------------------------
def wait_for_no_async_clients(r: redis.Redis) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 5
    while async_clients(r) and time.monotonic() < deadline:
        time.sleep(0.02)
    return async_clients(r)


def test_config_close_leaves_no_async_connection(redis_server: Server,
                                                 r: redis.Redis) -> None:
    config = config_for(redis_server.url)

    async def pushes() -> None:
        await asyncio.gather(*(wurk.Client(config).apush({"class": "X", "args": [n]})
                               for n in range(8)))

    run(pushes)
    first = {c["id"] for c in async_clients(r)}
    run(pushes)  # a second loop: its own pool; the first loop's is closed on the way
    deadline = time.monotonic() + 5
    while first & {c["id"] for c in async_clients(r)}:
        assert time.monotonic() < deadline, "the closed loop's connections stayed open"
        time.sleep(0.02)
    assert async_clients(r)
    config.close()
    assert wait_for_no_async_clients(r) == []


def test_aclose_closes_the_loops_connections(redis_server: Server, r: redis.Redis) -> None:
    config = config_for(redis_server.url)

    async def scenario() -> int:
        await asyncio.gather(*(wurk.Client(config).apush({"class": "X", "args": [n]})
                               for n in range(4)))
        async with wurk.redis(config) as conn:
            await conn.call("PING")
        opened = len(async_clients(r))
        await config.aclose()
        return opened

    assert run(scenario) >= 1
    assert wait_for_no_async_clients(r) == []
    assert r.llen("queue:default") == 4


def test_pools_are_per_loop(config: wurk.Config) -> None:
    def in_thread() -> Any:
        box: list[Any] = []
        thread = threading.Thread(target=lambda: box.append(asyncio.run(pool_of())))
        thread.start()
        thread.join(10)
        return box[0]

    async def pool_of() -> Any:
        pool = config.async_pool()
        assert pool is config.async_pool()
        await plain.aperform_async(1)
        return pool

    assert run(pool_of) is not in_thread()


# -- testing modes ----------------------------------------------------------------------------
def test_fake_mode_keeps_async_pushes(config: wurk.Config, r: redis.Redis) -> None:
    async def pushes() -> list[Any]:
        with wurk.testing.fake():
            return [await plain.aperform_async(1), await plain.aperform_in(60, 2),
                    *(await plain.aperform_bulk([[3], [4]])),
                    await wurk.apush({"class": "RubyJob", "args": [5], "queue": QUEUE})]

    jids = run(pushes)
    kept = wurk.testing.jobs()
    assert [job["jid"] for job in kept] == jids
    assert [job["args"] for job in plain.jobs] == [[1], [2], [3], [4]]
    assert r.dbsize() == 0 and RAN == []
    assert plain.drain() == 4 and sorted(RAN) == [1, 2, 3, 4]


def test_inline_mode_runs_async_pushes(config: wurk.Config, r: redis.Redis) -> None:
    async def pushes() -> None:
        with wurk.testing.inline():
            await plain.aperform_async(1)
            await plain.aperform_bulk([[2], [3]])
            await waits.aperform_async(4)  # an async job inline: on a loop of its own

    run(pushes)
    assert RAN == [1, 2, 3, ("async", 4)] and r.dbsize() == 0


# -- the transactional client -----------------------------------------------------------------
class Transaction:
    """A transaction adapter with one transaction open until ``commit``."""

    def __init__(self) -> None:
        self.open = True
        self.callbacks: list[Callable[[], None]] = []

    def after_commit(self, callback: Callable[[], None]) -> bool:
        if not self.open:
            return False
        self.callbacks.append(callback)
        return True

    def commit(self) -> None:
        self.open = False
        for callback in self.callbacks:
            callback()


def test_transactional_apush_waits_for_the_commit(redis_server: Server,
                                                  r: redis.Redis) -> None:
    transaction = Transaction()
    config = config_for(redis_server.url, client="transactional", transaction=transaction)
    wurk.config._default = config  # default_client follows the default configuration

    async def in_transaction() -> list[str | None]:
        return [await plain.aperform_async(1),
                await plain.set(transactional=False).aperform_async(2)]

    deferred, at_once = run(in_transaction)
    assert [json.loads(raw)["jid"] for raw in r.lrange(f"queue:{QUEUE}", 0, -1)] == [at_once]
    transaction.commit()
    assert {json.loads(raw)["jid"] for raw in r.lrange(f"queue:{QUEUE}", 0, -1)} == \
        {deferred, at_once}
    assert run(lambda: plain.aperform_async(3))  # no transaction open: at once
    assert r.llen(f"queue:{QUEUE}") == 3


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_config_close_from_another_thread_cuts_a_command_in_flight(
        redis_server: Server, r: redis.Redis, kind: str) -> None:
    """As the worker closes its connections while its event loop (asyncio's or uvloop's,
    whose transports refuse a socket's ``shutdown``) waits on Redis: the wait ends at once
    and Redis drops the client."""
    config = config_for(redis_server.url, socket_timeout=30)
    loop = loop_factory(kind)[1]()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def waits() -> Any:
        async with wurk.redis(config) as conn:
            return await conn.call("BLPOP", "nothing-comes", 20)

    future = asyncio.run_coroutine_threadsafe(waits(), loop)
    try:
        deadline = time.monotonic() + 5
        while not any(c.get("cmd") == "blpop" for c in async_clients(r)):
            assert time.monotonic() < deadline, "the BLPOP never reached Redis"
            time.sleep(0.01)
        started = time.monotonic()
        config.close()
        with pytest.raises(wurk.RedisUnavailable):
            future.result(timeout=10)
        assert time.monotonic() - started < 5
        assert wait_for_no_async_clients(r) == []
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_a_close_between_a_blocks_pool_and_its_kept_connections_keeps_them_together(
        redis_server: Server) -> None:
    """Another thread's close lands just after an async ``wurk.redis()`` block found its pool
    (forced here: the close is made right after that look). The connection it takes must go
    back where it came from: kept with the pool made anew since, it fails the next block
    that cuts a command short, released to a pool that never lent it."""
    config = config_for(redis_server.url)
    looks = 0
    find_pool = config.async_pool

    def closed_after_the_first_look() -> Any:
        nonlocal looks
        pool = find_pool()
        looks += 1
        if looks == 1:
            config.close()  # as another thread's close, between this look and the next
        return pool

    config.async_pool = closed_after_the_first_look  # type: ignore[method-assign]

    async def two_blocks() -> None:
        async with wurk.redis(config) as conn:
            assert await conn.call("SET", "asyncclient:k", "v") == b"OK"
        async with wurk.redis(config) as conn:
            with pytest.raises(TimeoutError):  # cut short: its connection is closed
                await asyncio.wait_for(conn.call("BLPOP", "nothing-comes", 5), 0.05)

    try:
        run(two_blocks)
    finally:
        config.close()
