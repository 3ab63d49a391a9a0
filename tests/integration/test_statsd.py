"""StatsD / DogStatsD: Sidekiq Pro's names and tags reach a real UDP listener."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

import wurk
from tests.helpers.server import Server
from wurk.errors import ConfigError
from wurk.metrics.statsd import StatsdSink


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    yield sock
    sock.close()


def received(sock: socket.socket, until: str, timeout: float = 10) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not any(until in line for line in lines):
        try:
            lines += sock.recv(65536).decode().splitlines()
        except TimeoutError:
            continue
    return lines


def test_a_workers_jobs_are_sent_with_pros_names_and_tags(
        redis_server: Server, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    config = wurk.configure(redis_url=redis_server.url, statsd=f"127.0.0.1:{port}",
                            statsd_prefix="sidekiq", statsd_tags=["env:test"],
                            heartbeat_interval=0.2, fetch_timeout=0.2, timeout=1,
                            concurrency=1, retain_history=0,
                            statsd_job_options=lambda name, job, queue: {"tags": ["team:a"]})
    wurk.job(name="Stats::Ok")(lambda: None)

    def boom() -> None:
        raise KeyError("x")

    wurk.job(name="Stats::Boom", retry=False)(boom)
    try:
        wurk.push({"class": "Stats::Ok", "args": []})
        wurk.push({"class": "Stats::Boom", "args": [], "queue": "default"})
        with wurk.InProcessWorker(config):
            lines = received(listener, "sidekiq.jobs.failure")
    finally:
        wurk.registry.unregister("Stats::Ok")
        wurk.registry.unregister("Stats::Boom")
    tags = "worker:Stats::Ok,queue:default,team:a,env:test"
    assert f"sidekiq.jobs.count:1|c|#{tags}" in lines
    assert f"sidekiq.jobs.success:1|c|#{tags}" in lines
    assert any(line.startswith("sidekiq.jobs.perform:") and line.endswith(f"|ms|#{tags}")
               for line in lines)
    assert any(line.startswith("sidekiq.jobs.perform_dist:") and f"|d|#{tags}" in line
               for line in lines)
    assert "sidekiq.jobs.failure:1|c|#worker:Stats::Boom,queue:default,team:a," \
           "error_type:KeyError,env:test" in lines
    assert not any(line.startswith("sidekiq.jobs.perform:") and "Stats::Boom" in line
                   for line in lines)  # a failure sends no timing


def test_history_gauges_and_reliability_counts(redis_server: Server,
                                               listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    config = wurk.configure(redis_url=redis_server.url, statsd=f"127.0.0.1:{port}")
    sink = StatsdSink(config)
    sink.gauges({"processed": 5, "failed": 1, "enqueued": 2, "retries": 0, "dead": 3,
                 "scheduled": 0, "busy": 1, "queues": {"default": 2},
                 "latency": {"default": 0.5}})
    sink.recovered("default", 4)
    sink.poisoned({"klass": "HardJob", "queue": "default"})
    sink.close()
    lines = received(listener, "wurk.jobs.poison")
    for expected in ("wurk.processed:5|g", "wurk.failures:1|g", "wurk.dead:3|g",
                     "wurk.queue.size:2|g|#queue:default",
                     "wurk.queue.latency:0.5|g|#queue:default",
                     "wurk.jobs.recovered.fetch:4|c|#queue:default",
                     "wurk.jobs.poison:1|c|#worker:HardJob,queue:default"):
        assert expected in lines


def test_stored_names_are_cut_in_reaper_and_expiry_tags(listener: socket.socket) -> None:
    """metrics.md: a job or queue name past 200 characters "is cut to 200 in ... tags". The
    poison, recovery and expiry counts sent the stored names whole: a packet of kilobytes,
    past what a StatsD agent reads of one datagram."""
    port = listener.getsockname()[1]
    sink = StatsdSink(wurk.Config(statsd=f"127.0.0.1:{port}", statsd_prefix="cut"))
    try:
        sink.recovered("r" * 5_000, 2)
        sink.poisoned({"klass": "K" * 5_000, "queue": "p" * 5_000})
        sink.expired({"class": "E" * 5_000, "queue": "e" * 5_000})
        sink.client.flush()
        lines = received(listener, "cut.jobs.expired")
    finally:
        sink.close()
    sent = [line for line in lines if line.startswith(("cut.jobs.recovered.fetch",
                                                       "cut.jobs.poison", "cut.jobs.expired"))]
    assert len(sent) == 3
    for line in sent:
        tags = line.split("|#", 1)[1].split(",")
        assert all(len(tag.split(":", 1)[1]) <= 200 for tag in tags), line


def test_a_name_that_does_not_resolve_is_not_looked_up_per_packet(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A StatsD host whose name does not resolve was looked up again for every packet, on
    the job's thread, with no timeout (four lookups and four warnings per job). A failed
    lookup is now retried once ``LOOKUP_RETRY`` has passed; the packets between are dropped."""
    from wurk.metrics import statsd

    lookups: list[object] = []

    def failing(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        lookups.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    clock = [1000.0]
    monkeypatch.setattr(socket, "getaddrinfo", failing)
    monkeypatch.setattr(statsd, "_now", lambda: clock[0])
    sink = StatsdSink(wurk.Config(statsd="statsd.invalid:8125"))
    try:
        for n in range(10):
            sink.observe("Stats::Nowhere", "default", {}, float(n), None)  # never raises
        assert lookups == ["statsd.invalid"]
        clock[0] += statsd.LOOKUP_RETRY + 1
        sink.observe("Stats::Nowhere", "default", {}, 1.0, None)
        assert lookups == ["statsd.invalid"] * 2
    finally:
        sink.close()


@pytest.mark.parametrize("rate", ["half", float("nan"), 2.0, 0, -1, None, True])
def test_a_sample_rate_that_is_no_rate_sends_every_time(listener: socket.socket,
                                                        rate: object) -> None:
    """metrics.md: ``statsd_job_options`` returns ``{"sample_rate": 0.5}``. A text there
    failed every metric of the job unseen; NaN or 2 went out as ``|@nan`` or ``|@2.0``
    (rejected, or the count scaled down). A rate not in (0, 1] now means 1: always sent."""
    port = listener.getsockname()[1]
    config = wurk.Config(statsd=f"127.0.0.1:{port}", statsd_prefix="rate",
                         statsd_job_options=lambda job, payload, queue: {"sample_rate": rate,
                                                                         "tags": ["t:1"]})
    sink = StatsdSink(config)
    try:
        sink.observe("Stats::Rate", "default", {}, 5.0, None)
        sink.client.flush()
        lines = received(listener, "rate.jobs.perform:")
    finally:
        sink.close()
    assert "rate.jobs.count:1|c|#worker:Stats::Rate,queue:default,t:1" in lines
    assert not any("|@" in line for line in lines)


def test_a_bad_address_is_named() -> None:
    with pytest.raises(ConfigError, match="statsd must be HOST:PORT"):
        wurk.Config(statsd="localhost")


def test_an_envelope_no_key_opens_is_counted_as_an_encryption_error(
        redis_server: Server, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    config = wurk.configure(redis_url=redis_server.url, statsd=f"127.0.0.1:{port}",
                            heartbeat_interval=0.2, fetch_timeout=0.2, timeout=1,
                            concurrency=1, retain_history=0)
    wurk.crypto.enable(active_version=1, key_for={1: b"k" * 32}.get, config=config)
    wurk.job(name="Stats::Secret", encrypt=True)(lambda order, card: None)
    try:
        wurk.push({"class": "Stats::Secret", "args": [1, {"card": "x"}], "encrypt": True})
        wurk.crypto.enable(active_version=2, key_for={2: b"j" * 32}.get, config=config)
        with wurk.InProcessWorker(config):
            lines = received(listener, "wurk.jobs.encryption_error")
    finally:
        wurk.registry.unregister("Stats::Secret")
    assert "wurk.jobs.encryption_error:1|c|#worker:Stats::Secret,queue:default" in lines
    assert any(line.startswith("wurk.jobs.failure:1|c|") and "DecryptionError" in line
               for line in lines)


def test_the_socket_is_connected_once_with_one_name_lookup(
        listener: socket.socket, monkeypatch: pytest.MonkeyPatch) -> None:
    """metrics.md: "its UDP socket is connected once (one name lookup, not one per
    packet)". Every lookup of the address goes through ``socket.getaddrinfo``: counted."""
    port = listener.getsockname()[1]
    lookups: list[tuple[object, object]] = []
    real_getaddrinfo = socket.getaddrinfo

    def counted(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        lookups.append((host, port))
        return real_getaddrinfo(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", counted)
    sink = StatsdSink(wurk.Config(statsd=f"127.0.0.1:{port}", statsd_prefix="once"))
    try:
        for n in range(30):
            sink.observe("Stats::Once", "default", {}, float(n), None)
            sink.client.flush()  # one packet each: each could have looked the name up
        lines = received(listener, "once.jobs.count")
        first = sink.client.socket
        sink.observe("Stats::Once", "default", {}, 1.0, None)
        sink.client.flush()
        assert sink.client.socket is first
    finally:
        sink.close()
    assert any(line.startswith("once.jobs.count:1|c|") for line in lines)
    assert lookups == [("127.0.0.1", port)]


def test_an_agent_that_is_not_listening_costs_no_lookup_and_no_warning_per_packet(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A StatsD agent down (restarting, not started yet) answers each datagram with an ICMP
    "port unreachable", which the connected socket reports at the next send: the client
    logged a warning, closed the socket and looked the name up again — every other packet,
    on the job's thread (metrics.md: "one name lookup, not one per packet"). The packets
    are dropped, as UDP drops them, on the one socket and the one lookup."""
    free = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()  # nothing listens on it now
    lookups: list[object] = []
    real_getaddrinfo = socket.getaddrinfo

    def counted(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        lookups.append(host)
        return real_getaddrinfo(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", counted)
    sink = StatsdSink(wurk.Config(statsd=f"localhost:{port}"))
    try:
        with caplog.at_level(logging.DEBUG, logger="datadog"):
            for n in range(20):
                sink.observe("Stats::Down", "default", {}, float(n), None)  # never raises
                sink.client.flush()
    finally:
        sink.close()
    assert lookups == ["localhost"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


def history_config(port: int, **settings: Any) -> wurk.Config:
    return wurk.configure(statsd=f"127.0.0.1:{port}", statsd_datadog_extensions=False,
                          **settings)


SAMPLE = {"processed": 5, "failed": 1, "enqueued": 2, "retries": 0, "dead": 3, "scheduled": 0,
          "busy": 1, "queues": {"default": 2, "low": 0}, "latency": {"default": 0.5}}


def test_a_history_tick_sends_its_gauges_and_the_extra_hooks_in_one_batch(
        listener: socket.socket) -> None:
    """The built-in gauges and those ``history_extra`` gives go out together: one datagram
    here, not one per gauge."""
    calls: list[int] = []

    def extra(gauge: Any) -> None:
        calls.append(1)
        gauge("payments.pending", 7, tags=["team:pay"])
        gauge("payments.oldest", 1.5)

    sink = StatsdSink(history_config(listener.getsockname()[1], history_extra=extra))
    sink.gauges(SAMPLE)
    sink.close()
    first = listener.recv(65536).decode().splitlines()
    assert calls == [1]
    for expected in ("wurk.processed:5|g", "wurk.busy:1|g", "wurk.queue.size:2|g|#queue:default",
                     "wurk.queue.size:0|g|#queue:low", "wurk.queue.latency:0.5|g|#queue:default",
                     "wurk.payments.pending:7|g|#team:pay", "wurk.payments.oldest:1.5|g"):
        assert expected in first


def test_a_failing_extra_hook_is_logged_and_the_ticks_other_gauges_are_sent(
        listener: socket.socket, caplog: pytest.LogCaptureFixture) -> None:
    def extra(gauge: Any) -> None:
        gauge("before.failure", 1)
        raise RuntimeError("the payments database is down")

    sink = StatsdSink(history_config(listener.getsockname()[1], history_extra=extra))
    with caplog.at_level(logging.ERROR, logger="wurk"):
        sink.gauges(SAMPLE)
    sink.close()
    lines = received(listener, "wurk.queue.latency")
    assert "wurk.processed:5|g" in lines and "wurk.before.failure:1|g" in lines
    assert any("history_extra" in r.getMessage() and "payments database" in r.getMessage()
               for r in caplog.records)


def test_the_extra_hooks_gauges_are_bounded_and_checked(
        listener: socket.socket, caplog: pytest.LogCaptureFixture) -> None:
    """A hook that loops over something unbounded sends at most ``EXTRA_GAUGE_LIMIT`` gauges a
    tick; a name or value the line protocol cannot carry is refused with its reason."""
    from wurk.metrics.statsd import EXTRA_GAUGE_LIMIT

    def many(gauge: Any) -> None:
        for n in range(EXTRA_GAUGE_LIMIT + 50):
            gauge(f"extra.g{n}", n)

    sink = StatsdSink(history_config(listener.getsockname()[1], history_extra=many))
    with caplog.at_level(logging.ERROR, logger="wurk"):
        sink.gauges(SAMPLE)
    lines = received(listener, f"wurk.extra.g{EXTRA_GAUGE_LIMIT - 1}:")
    assert not any(line.startswith(f"wurk.extra.g{EXTRA_GAUGE_LIMIT}:") for line in lines)
    assert any(f"more than {EXTRA_GAUGE_LIMIT} gauges" in r.getMessage()
               for r in caplog.records)
    for bad, reason in ((("a|b", 1), "name"), (("ok", float("nan")), "finite"),
                        (("ok", True), "number"), (("ok", 1, ["x|y"]), "tag")):
        caplog.clear()

        def hook(gauge: Any, bad: tuple[Any, ...] = bad) -> None:
            gauge(*bad)

        sink.config.history_extra = hook
        with caplog.at_level(logging.ERROR, logger="wurk"):
            sink.gauges(SAMPLE)
        assert any(reason in r.getMessage() for r in caplog.records), bad
    sink.close()


def test_history_extra_without_statsd_or_history_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"history_extra.*statsd"):
        wurk.configure(history_extra=lambda gauge: None)
    with pytest.raises(ConfigError, match=r"history_extra.*retain_history"):
        wurk.configure(statsd="127.0.0.1:8125", retain_history=0,
                       history_extra=lambda gauge: None)
    with pytest.raises(ConfigError, match="history_extra must be a function"):
        wurk.configure(statsd="127.0.0.1:8125", history_extra="gauges")


def test_every_queue_read_is_sent_while_a_sample_keeps_the_largest(
        redis_server: Server, listener: socket.socket) -> None:
    """Sixty queues: sixty ``queue.size`` gauges go to StatsD; the stored sample, which the
    History tab draws, keeps the 50 largest."""
    import redis

    from wurk import payload as P
    from wurk.metrics.history import HistorySampler

    config = history_config(listener.getsockname()[1], redis_url=redis_server.url)
    r = redis.Redis.from_url(redis_server.url, decode_responses=True)
    pipe = r.pipeline(transaction=False)
    for n in range(1, 61):
        pipe.sadd("queues", f"q{n:02}")
        pipe.rpush(f"queue:q{n:02}", *["{}"] * n)
    pipe.execute()
    sink = StatsdSink(config)
    assert HistorySampler(config, on_sample=sink.gauges).tick() is not None
    sink.close()
    lines = received(listener, "wurk.queue.size:1|g|#queue:q01")  # the smallest: sent last
    sizes = [line for line in lines if line.startswith("wurk.queue.size:")]
    assert sorted(sizes) == sorted(f"wurk.queue.size:{n}|g|#queue:q{n:02}" for n in range(1, 61))
    [stored] = r.zrange(config.keys.history, 0, -1)
    assert P.loads(stored)["queues"] == {f"q{n:02}": n for n in range(11, 61)}
    r.close()
