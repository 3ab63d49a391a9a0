"""The live stream over a real socket, and the dashboard's own small Redis pool."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator

import anyio
import pytest
import redis
from starlette.applications import Starlette
from starlette.routing import Route

import wurk
from tests.web.conftest import browse
from tests.web.live import serve
from wurk.web import create_app
from wurk.web.context import STATE_ATTRIBUTE, Dashboard
from wurk.web.sse import EventStream, LiveStats
from wurk.web.templating import build_templates


def events(response: http.client.HTTPResponse) -> Iterator[tuple[str, str]]:
    """``(event, data)`` pairs as they arrive."""
    name, data = "message", ""
    while True:
        line = response.readline().decode()
        if not line:
            return
        if line == "\n":
            if data:
                yield name, data
            name, data = "message", ""
        elif line.startswith("event: "):
            name = line[7:].strip()
        elif line.startswith("data: "):
            data = line[6:].strip()


def test_stream_sends_live_numbers_as_they_change(r: redis.Redis) -> None:
    config = wurk.configure(web_stream_interval=0.1)
    with serve(create_app(config)) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        connection.request("GET", "/stats/stream")
        response = connection.getresponse()
        assert response.status == 200
        assert response.getheader("content-type").startswith("text/event-stream")
        assert response.getheader("content-security-policy")
        stream = events(response)
        name, data = next(stream)
        assert name == "stats" and json.loads(data)["sidekiq"]["processed"] == 0
        r.set("stat:processed", 42)
        for _, data in stream:
            if json.loads(data)["sidekiq"]["processed"] == 42:
                break
        else:
            raise AssertionError("the stream ended before showing the new number")
        connection.close()  # the server notices and ends the stream (the stop below waits)


def test_stream_ends_after_its_lifetime_and_shares_snapshots(config: wurk.Config) -> None:
    dash = Dashboard.for_config(config, read_only=False, stream_interval=0.05,
                                templates=build_templates(()))
    # A second of life at 20 updates a second: two at least, however loaded the machine.
    app = Starlette(routes=[Route("/s", EventStream(LiveStats(), max_seconds=1.0))])
    setattr(app.state, STATE_ATTRIBUTE, dash)
    with browse(app) as client:
        started = time.monotonic()
        body = client.get("/s").text  # returns: the stream ended by itself
    assert time.monotonic() - started < 5
    assert body.startswith("retry: 2000") and body.count("event: stats") >= 2

    async def twice() -> bool:
        live = LiveStats()
        slow = Dashboard.for_config(config, read_only=False, stream_interval=60,
                                    templates=build_templates(()))
        return await live.get(slow) is await live.get(slow)

    assert anyio.run(twice)


def test_stream_reports_redis_unavailable_and_lives_on() -> None:
    down = wurk.Config(socket_timeout=0.2, web_stream_interval=0.05)
    down.redis_url = "redis://127.0.0.1:1/0"
    dash = Dashboard.for_config(down, read_only=False, stream_interval=0.05,
                                templates=build_templates(()))
    # A second of life at 20 updates a second: two at least, however loaded the machine.
    app = Starlette(routes=[Route("/s", EventStream(LiveStats(), max_seconds=1.0))])
    setattr(app.state, STATE_ATTRIBUTE, dash)
    with browse(app) as client:
        body = client.get("/s").text
    assert body.count("event: unavailable") >= 2 and "127.0.0.1" not in body
    down.close()


def test_dashboard_reads_through_its_own_small_pool(r: redis.Redis) -> None:
    config = wurk.configure(web_pool_size=2)
    app = create_app(config)
    dash: Dashboard = getattr(app.state, STATE_ATTRIBUTE)
    assert dash.config.pool("api") is config.pool("web")
    assert dash.config.pool("api") is not config.pool("api")
    assert config.pool("web").size == 2
    assert dash.config.pool("client") is config.pool("client")  # everything else is shared


def web_connections(r: redis.Redis) -> int:
    return sum(1 for client in r.client_list() if client.get("name") == "wurk-web")


def test_a_burst_of_requests_never_takes_more_than_the_pool(r: redis.Redis) -> None:
    config = wurk.configure(web_pool_size=2, web_stream_interval=0.05)
    worker_pool = config.pool("client")
    seen: list[int] = []
    failures: list[BaseException] = []
    with serve(create_app(config)) as server:
        def fetch(path: str) -> None:
            try:
                connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
                connection.request("GET", path)
                assert connection.getresponse().status == 200
                connection.close()
            except BaseException as exc:  # reported to the test below
                failures.append(exc)

        threads = [threading.Thread(target=fetch, args=(path,))
                   for path in ["/", "/queues", "/retries", "/busy", "/api/dashboard"] * 6]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            seen.append(web_connections(r))
            time.sleep(0.01)
        for thread in threads:
            thread.join(10)
        # Meanwhile the worker side's own pool is untouched and answers at once.
        assert worker_pool.run(lambda c: c.ping())
    assert not failures, failures
    assert max(seen) <= 2


@pytest.mark.parametrize("value", [0, -1, True, "2"])
def test_bad_pool_size_is_a_clear_error(value: object) -> None:
    with pytest.raises(wurk.errors.ConfigError, match="web_pool_size"):
        wurk.Config(web_pool_size=value)  # type: ignore[arg-type]
