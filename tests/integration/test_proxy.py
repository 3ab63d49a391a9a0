"""The fault-injection proxy itself: it forwards faithfully, and each fault does what it says."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.helpers.proxy import FaultProxy
from tests.helpers.server import Server, start_server
from tests.helpers.wait import wait_until


@pytest.fixture
def proxy(redis_server: Server) -> Iterator[FaultProxy]:
    with FaultProxy(redis_server.port) as running:
        yield running


def client(proxy: FaultProxy, timeout: float = 1.0) -> redis.Redis:
    return redis.Redis.from_url(proxy.url, socket_timeout=timeout,
                                socket_connect_timeout=timeout)


def test_forwards_commands_and_large_values_on_many_connections(proxy: FaultProxy) -> None:
    big = b"x" * 3_000_000
    clients = [client(proxy) for _ in range(5)]
    for index, c in enumerate(clients):
        c.set(f"k{index}", big)
    assert all(c.get(f"k{i}") == big for i, c in enumerate(clients))
    assert proxy.open_connections == 5 and proxy.accepted == 5


def test_latency_delays_each_round_trip(proxy: FaultProxy) -> None:
    c = client(proxy)
    c.ping()
    proxy.latency(0.3)
    started = time.monotonic()
    c.ping()
    assert time.monotonic() - started >= 0.6  # 0.3 s each way
    proxy.restore()
    started = time.monotonic()
    c.ping()
    assert time.monotonic() - started < 0.3  # not delayed, even one way


def test_drop_resets_new_connections_and_spares_open_ones(proxy: FaultProxy) -> None:
    kept = client(proxy)
    kept.ping()
    proxy.drop()
    with pytest.raises(redis.ConnectionError):
        client(proxy).ping()
    assert kept.ping() is True
    proxy.restore()
    assert client(proxy).ping() is True


def blocked_clients(r: redis.Redis) -> int:
    return int(r.info("clients")["blocked_clients"])


def test_cut_resets_open_connections_even_mid_command(proxy: FaultProxy,
                                                     r: redis.Redis) -> None:
    blocked = client(proxy, timeout=10)
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            blocked.blpop(["never"], timeout=8)
        except redis.ConnectionError as exc:
            errors.append(exc)

    already = blocked_clients(r)
    waiter = threading.Thread(target=wait)
    waiter.start()
    wait_until(lambda: blocked_clients(r) > already, what="the BLPOP to block on the server")
    started = time.monotonic()
    assert proxy.cut() == 1
    waiter.join(timeout=5)
    assert errors and time.monotonic() - started < 1.0
    assert client(proxy).ping() is True  # new connections are fine


def test_blackhole_stalls_new_and_open_connections_until_restore(proxy: FaultProxy) -> None:
    open_one = client(proxy, timeout=0.5)
    open_one.ping()
    proxy.blackhole()
    with pytest.raises(redis.TimeoutError):
        client(proxy, timeout=0.5).ping()
    with pytest.raises(redis.TimeoutError):
        open_one.ping()
    proxy.restore()
    assert client(proxy).ping() is True


def test_a_connection_made_during_a_blackhole_goes_through_after_restore(
    proxy: FaultProxy
) -> None:
    patient = client(proxy, timeout=5)
    proxy.blackhole()
    answers: list[object] = []
    asker = threading.Thread(target=lambda: answers.append(patient.ping()))
    asker.start()
    wait_until(lambda: proxy.accepted == 1, what="the connection")
    assert answers == []  # accepted in the blackhole: nothing can be forwarded yet
    proxy.restore()
    asker.join(timeout=5)
    assert answers == [True]


def test_retarget_sends_new_connections_to_another_server(
    proxy: FaultProxy, tmp_path: Path
) -> None:
    other: Server = start_server(tmp_path / "other")
    try:
        redis.Redis(port=other.port).set("where", "other")
        before = client(proxy)
        before.ping()  # connected to the first server
        proxy.retarget(other.port)
        assert client(proxy).get("where") == b"other"
        assert before.get("where") is None  # an open connection stays where it was
    finally:
        other.stop()


def test_close_ends_every_thread(redis_server: Server) -> None:
    proxy = FaultProxy(redis_server.port).start()
    clients = [client(proxy) for _ in range(3)]
    for c in clients:
        c.ping()
    proxy.close()
    wait_until(lambda: not [t for t in threading.enumerate() if t.name.startswith("proxy-")],
               what="every proxy thread to end")
    with pytest.raises(redis.ConnectionError):
        clients[0].ping()


def test_sever_leaves_open_connections_half_open(proxy: FaultProxy, r: redis.Redis) -> None:
    severed = client(proxy, timeout=0.3)
    severed.client_setname("severed")
    proxy.sever()
    wait_until(lambda: "severed" not in [c.get("name") for c in r.client_list()],
               what="the server to forget the client")
    with pytest.raises(redis.TimeoutError):  # no reset: the client hears nothing
        severed.ping()
    assert client(proxy).ping() is True  # new connections are fine
