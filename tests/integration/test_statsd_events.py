"""StatsD names beyond the per-execution ones: expired jobs, batch events, the push-side
recovery count, each reaching a real UDP listener (``tests/integration/test_statsd.py`` has
the per-execution names)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest
import redis

import wurk
from tests.helpers.server import Server
from tests.helpers.wait import wait_until
from wurk.batch import accounting
from wurk.metrics.statsd import StatsdSink


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    yield sock
    sock.close()


def received(sock: socket.socket, until: str, timeout: float = 10) -> list[str]:
    """Lines the listener got, read until one contains ``until`` (or the timeout)."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not any(until in line for line in lines):
        try:
            lines += sock.recv(65536).decode().splitlines()
        except TimeoutError:
            continue
    return lines


def statsd_config(server: Server, port: int) -> wurk.Config:
    return wurk.configure(redis_url=server.url, statsd=f"127.0.0.1:{port}",
                          heartbeat_interval=0.2, fetch_timeout=0.2, timeout=1, concurrency=2,
                          retain_history=0, shutdown_grace=0.5, statsd_datadog_extensions=False)


@wurk.job(name="StatsdEvents::noop")
def noop(n: int) -> None:
    """Does nothing: the batch's jobs."""


def test_an_expired_job_sends_jobs_expired(redis_server: Server, r: redis.Redis,
                                           listener: socket.socket) -> None:
    config = statsd_config(redis_server, listener.getsockname()[1])
    past = int((time.time() - 60) * 1000)
    r.lpush("queue:default", json.dumps({"class": "StatsdEvents::noop", "args": [1],
                                         "queue": "default", "jid": "e" * 24,
                                         "created_at": past, "expires_at": past}))
    with wurk.InProcessWorker(config):
        lines = received(listener, "jobs.expired")
    assert "wurk.jobs.expired:1|c|#worker:StatsdEvents::noop,queue:default" in lines
    assert not any(line.startswith("wurk.jobs.success") for line in lines)  # never ran


def test_a_batch_sends_created_complete_success_and_duration(
        redis_server: Server, r: redis.Redis, listener: socket.socket) -> None:
    config = statsd_config(redis_server, listener.getsockname()[1])
    batch = wurk.Batch(config=config)
    with batch.jobs():  # created here, in a process that is not (yet) a worker
        noop.perform_bulk([[1], [2], [3]])
    lines = received(listener, "batch.created")
    assert "wurk.batch.created:1|c" in lines
    with wurk.InProcessWorker(config):  # the worker whose count completes it sends the rest
        lines = received(listener, "batch.duration")
    assert "wurk.batch.complete:1|c" in lines and "wurk.batch.success:1|c" in lines
    (duration,) = [line for line in lines if line.startswith("wurk.batch.duration:")]
    status = wurk.BatchStatus(batch.bid, config=config)
    expected = (status.success_at - status.created_at) * 1000  # type: ignore[operator]
    assert duration.endswith("|ms")
    assert float(duration.split(":")[1].split("|")[0]) == pytest.approx(expected, abs=2)
    assert not any("batch.duration_dist" in line for line in lines)  # extensions off


def test_a_batch_success_sends_duration_dist_tagged_from_its_success_callbacks(
        redis_server: Server, r: redis.Redis, listener: socket.socket) -> None:
    """``batch.duration`` and ``batch.duration_dist`` (Sidekiq Pro
    8.0.2), tagged with the ``tags`` of the batch's success callback options."""
    config = wurk.configure(redis_url=redis_server.url,
                            statsd=f"127.0.0.1:{listener.getsockname()[1]}")
    batch = wurk.Batch(config=config)
    batch.on("success", noop, {"tags": ["import:users", "tenant:acme"], "other": 1})
    batch.on("complete", noop, {"tags": ["not:this"]})
    with batch.jobs():
        jid = noop.perform_async(1)
    with wurk.redis() as conn:
        accounting.record(conn, config, batch.bid, str(jid), "success")
    lines = received(listener, "batch.duration_dist")
    (dist,) = [line for line in lines if line.startswith("wurk.batch.duration_dist:")]
    (duration,) = [line for line in lines if line.startswith("wurk.batch.duration:")]
    assert dist.endswith("|d|#import:users,tenant:acme")
    assert duration.endswith("|ms|#import:users,tenant:acme")


def test_success_callback_tags_that_are_no_list_of_names_are_left_out(
        redis_server: Server, r: redis.Redis, listener: socket.socket) -> None:
    config = wurk.configure(redis_url=redis_server.url,
                            statsd=f"127.0.0.1:{listener.getsockname()[1]}")
    batch = wurk.Batch(config=config)
    batch.on("success", noop, {"tags": "import:users"})  # a string, not a list
    batch.on("success", noop, {"tags": [1, "ok:yes"]})
    with batch.jobs():
        jid = noop.perform_async(1)
    with wurk.redis() as conn:
        accounting.record(conn, config, batch.bid, str(jid), "success")
    lines = received(listener, "batch.duration_dist")
    (dist,) = [line for line in lines if line.startswith("wurk.batch.duration_dist:")]
    assert dist.endswith("|d|#ok:yes")


def test_each_event_is_announced_once_whatever_is_replayed(config: wurk.Config) -> None:
    seen: list[tuple[str, str]] = []
    registration = accounting.on_transition(lambda t: seen.append((t.bid, t.event)))
    try:
        batch = wurk.Batch()
        with batch.jobs():
            jid = noop.perform_async(1)
        with wurk.redis() as conn:
            for _ in range(3):  # an ACK replayed: the batch changes once
                accounting.record(conn, config, batch.bid, str(jid), "success")
    finally:
        registration.remove()
    assert seen == [(batch.bid, "created"), (batch.bid, "complete"), (batch.bid, "success")]


def test_statsd_down_never_fails_a_job_or_a_batch(redis_server: Server, r: redis.Redis) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nothing listens there once this closes
    config = statsd_config(redis_server, port)
    batch = wurk.Batch(config=config)
    with batch.jobs():
        noop.perform_bulk([[n] for n in range(5)])
    with wurk.InProcessWorker(config):
        wait_until(lambda: wurk.BatchStatus(batch.bid, config=config).succeeded)
    assert r.get("stat:failed") in (None, "0") and r.zcard("retry") == 0


def test_the_push_side_recovery_count_has_pros_name(redis_server: Server,
                                                    listener: socket.socket) -> None:
    """Nothing sends it yet (wurk has no reliable push); the name is Sidekiq Pro's."""
    config = wurk.configure(redis_url=redis_server.url,
                            statsd=f"127.0.0.1:{listener.getsockname()[1]}",
                            statsd_prefix="sidekiq")
    sink = StatsdSink(config)
    sink.recovered_push(3)
    sink.close()
    assert "sidekiq.jobs.recovered.push:3|c" in received(listener, "recovered.push")


def test_a_process_that_only_removes_jobs_sends_what_that_completes(
        redis_server: Server, listener: socket.socket) -> None:
    """A separate process (an admin script) that never opened a jobs block: its
    ``remove_jobs`` completes the batch, and it is that process that sends the events."""
    import subprocess
    import sys

    batch = wurk.Batch()
    with batch.jobs():
        jid = noop.perform_async(1)
    port = listener.getsockname()[1]
    code = (f"import wurk; config = wurk.configure(redis_url={redis_server.url!r}, "
            f"statsd='127.0.0.1:{port}');"
            f"assert wurk.Batch({batch.bid!r}, config=config).remove_jobs({jid!r}) == 1")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    lines = received(listener, "batch.duration")
    assert "wurk.batch.complete:1|c" in lines and "wurk.batch.success:1|c" in lines


def test_a_missing_statsd_client_is_reported_and_the_batch_still_succeeds(
        redis_server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """batches.md: "a missing datadog package (pip install 'wurk[statsd]') is reported to
    the error handlers" — and, being UDP's metric only, costs the batch nothing."""
    import sys

    monkeypatch.setitem(sys.modules, "datadog.dogstatsd.base", None)
    reported: list[tuple[BaseException, dict[str, object]]] = []
    config = wurk.configure(redis_url=redis_server.url, statsd="127.0.0.1:9")
    config.error_handlers.append(lambda exc, context: reported.append((exc, context)))
    batch = wurk.Batch(config=config)
    with batch.jobs():
        jid = noop.perform_async(1)
    with wurk.redis() as conn:
        assert accounting.record(conn, config, batch.bid, str(jid), "success")
    assert wurk.BatchStatus(batch.bid, config=config).succeeded
    events = [context["event"] for exc, context in reported]
    assert events == ["created", "complete", "success"]
    assert all(isinstance(exc, wurk.ConfigError) and "pip install 'wurk[statsd]'" in str(exc)
               for exc, _ in reported)
