"""``wurk.InProcessWorker`` / ``wurk.embed`` in this very process, against the test server."""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
import redis

import wurk
from tests.helpers.server import Server
from tests.helpers.wait import wait_until
from wurk import inprocess

ran: list[int] = []
release = threading.Event()


@pytest.fixture
def fast(redis_server: Server) -> Iterator[wurk.Config]:
    """A fast configuration made the process default, and the jobs these tests push."""
    config = wurk.configure(redis_url=redis_server.url, heartbeat_interval=0.2,
                            fetch_timeout=0.2, timeout=1, shutdown_grace=0.5,
                            scheduler_initial_wait=0, concurrency=2, tag="embed-mode")
    wurk.job(name="EmbedMode::Record")(ran.append)

    def wait(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not release.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)  # short sleeps: the shutdown interrupt lands between them

    wurk.job(name="EmbedMode::Wait")(wait)
    ran.clear()
    release.clear()
    yield config
    release.set()
    for name in ("EmbedMode::Record", "EmbedMode::Wait"):
        wurk.registry.unregister(name)


def push(name: str, *args: Any) -> None:
    wurk.push({"class": name, "args": list(args)})


def test_embed_runs_jobs_on_threads_and_stop_removes_the_record(
    fast: wurk.Config, r: redis.Redis
) -> None:
    title = " ".join(psutil.Process().cmdline())
    worker = wurk.embed(fast)
    try:
        assert worker.running and worker.identity is not None
        info = json.loads(r.hget(worker.identity, "info"))
        assert info["embedded"] is True and info["tag"] == "embed-mode"
        push("EmbedMode::Record", 1)
        push("EmbedMode::Record", 2)
        wait_until(lambda: sorted(ran) == [1, 2])
        assert " ".join(psutil.Process().cmdline()) == title  # the host keeps its title
    finally:
        worker.stop()
    assert not worker.running
    assert not r.exists(worker.identity) and r.scard("processes") == 0
    worker.stop()  # twice is fine


def test_stop_drains_then_pushes_unfinished_jobs_back(fast: wurk.Config,
                                                      r: redis.Redis) -> None:
    worker = wurk.InProcessWorker(fast).start()
    push("EmbedMode::Wait", 30)
    wait_until(lambda: r.hget(worker.identity, "busy") == "1")
    started = time.monotonic()
    worker.stop(timeout=0.3)
    # The timeout and the grace, not the job's 30 s: 0.8 s, 5 s on a busy machine.
    assert time.monotonic() - started < 5
    (back,) = [json.loads(raw) for raw in r.lrange("queue:default", 0, -1)]
    assert back["class"] == "EmbedMode::Wait"


def test_remote_quiet_and_stop_are_refused(fast: wurk.Config, r: redis.Redis,
                                           caplog: pytest.LogCaptureFixture) -> None:
    with wurk.InProcessWorker(fast) as worker:
        r.lpush(f"{worker.identity}-signals", "TERM")
        r.lpush(f"{worker.identity}-signals", "TSTP")  # the dashboard's quiet
        wait_until(lambda: "ignoring remote TERM" in caplog.text)
        wait_until(lambda: "ignoring remote TSTP" in caplog.text)
        assert worker.running and r.hget(worker.identity, "quiet") == "false"
        r.lpush(f"{worker.identity}-signals", "TTIN")  # a remote TTIN still dumps threads
        wait_until(lambda: "thread MainThread (" in caplog.text)
        assert worker.running
        worker.quiet()
        wait_until(lambda: r.hget(worker.identity, "quiet") == "true")
    assert not worker.running


def test_quiet_stops_fetching_and_lets_running_jobs_finish(fast: wurk.Config,
                                                           r: redis.Redis) -> None:
    """in-process-worker.md: ".quiet() — stop fetching; running jobs finish (one-way)"."""
    with wurk.InProcessWorker(fast) as worker:
        push("EmbedMode::Wait", 30)
        wait_until(lambda: r.hget(worker.identity, "busy") == "1")
        worker.quiet()
        wait_until(lambda: r.hget(worker.identity, "quiet") == "true")
        push("EmbedMode::Record", 1)
        release.set()  # the running job finishes...
        wait_until(lambda: r.hget(worker.identity, "busy") == "0")
        assert r.lrange("queue:default", 0, -1) != []  # ...and nothing more is fetched
        assert ran == [] and worker.running
        # Quiet ends each processor's fetch loop (a job fetched as it came goes back first):
        # once none is left, nothing more can be fetched.
        wait_until(lambda: not [t for t in threading.enumerate()
                                if re.fullmatch(r"wurk-default-\d+", t.name)],
                   what="every processor's fetch loop ended")
        assert ran == [] and r.llen("queue:default") == 1
        assert int(r.get("stat:processed") or 0) <= 1  # the Wait job's count, no other
    assert ran == []


def test_a_failed_start_stops_what_started_and_raises_and_can_be_tried_again(
        fast: wurk.Config, r: redis.Redis) -> None:
    """A start that failed stops what it started and raises; once the cause is gone, the same
    worker starts (it said "already started" and could never run)."""
    database = {"up": False}

    def connect() -> None:
        if not database["up"]:
            raise RuntimeError("no database")

    fast.on("startup", connect)
    worker = wurk.InProcessWorker(fast)
    with pytest.raises(RuntimeError, match="no database"):
        worker.start()
    assert not worker.running and r.scard("processes") == 0
    database["up"] = True
    try:
        worker.start()
        assert worker.running
        wait_until(lambda: r.scard("processes") == 1, 10, "its heartbeat")
        with pytest.raises(RuntimeError, match="already started"):
            worker.start()
    finally:
        worker.stop(timeout=1)


def test_a_cpu_this_process_may_not_use_stops_the_start_before_anything_runs(
        fast: wurk.Config, r: redis.Redis) -> None:
    """worker.md: a CPU list naming one this process may not use is an error — told before
    the boot begins, not after its hooks ran and its threads and record were made."""
    fired: list[str] = []
    fast.on("startup", lambda: fired.append("startup"))
    fast.cpu_affinity = str(max(os.sched_getaffinity(0)) + 1)
    worker = wurk.InProcessWorker(fast)
    with pytest.raises(wurk.ConfigError, match="is not available to this process"):
        worker.start()
    assert fired == [] and not worker.running and r.scard("processes") == 0


def test_lifecycle_hooks_fire_in_order_and_one_that_raises_is_reported(
        fast: wurk.Config, r: redis.Redis) -> None:
    """worker.md: quiet, shutdown and exit run in reverse registration order; a hook that
    raises is reported to the error handlers and the others still run; ``heartbeat`` fires
    once, at the first beat (not again when a beat writes an expired record anew),
    ``beat`` at every one; ``exit`` once the process record is gone."""
    fired: list[str] = []
    reported: list[tuple[str, str]] = []
    fast.error_handlers.append(
        lambda exc, ctx, config: reported.append((str(exc), ctx.get("context", ""))))
    worker = wurk.InProcessWorker(fast)

    def hook(event: str, n: int) -> Any:
        def run() -> None:
            if event == "exit":
                fired.append(f"exit{n}:record={r.exists(str(worker.identity))}")
                return
            fired.append(f"{event}{n}")
            if n == 2 and event != "startup":
                raise RuntimeError(f"{event} hook fails")
        return run

    for event in ("startup", "quiet", "shutdown", "exit", "heartbeat", "beat"):
        for n in (1, 2, 3):
            fast.on(event, hook(event, n))
    worker.start()
    wait_until(lambda: fired.count("beat1") >= 2)
    r.delete(str(worker.identity))  # the record expired: the next beat writes it anew
    beats = fired.count("beat1")
    wait_until(lambda: fired.count("beat1") >= beats + 2 and r.exists(str(worker.identity)))
    worker.stop()
    assert fired.count("heartbeat1") == 1  # once a process life, not per record written
    assert fired[:3] == ["startup1", "startup2", "startup3"]
    assert [e for e in fired if e.startswith(("heartbeat", "beat"))][:6] == [
        "heartbeat1", "heartbeat2", "heartbeat3", "beat1", "beat2", "beat3"]
    assert [e for e in fired if e.startswith(("quiet", "shutdown", "exit"))] == [
        "shutdown3", "shutdown2", "shutdown1", "quiet3", "quiet2", "quiet1",  # a stop began
        "exit3:record=0", "exit2:record=0", "exit1:record=0"]
    assert ("quiet hook fails", "lifecycle event quiet") in reported
    assert ("shutdown hook fails", "lifecycle event shutdown") in reported


def test_the_exit_hook_is_removed_by_stop_and_does_nothing_in_a_forked_child(
        fast: wurk.Config) -> None:
    """in-process-worker.md: ``start()`` registers the drain with ``atexit``; ``stop()``
    removes that hook; it does nothing in a forked child."""
    worker = wurk.InProcessWorker(fast).start()
    try:
        pid = os.fork()
        if pid == 0:  # the child: the hook must not stop the parent's worker from here
            try:
                worker._at_exit()
                assert worker.launcher is not None and not worker.launcher.stopping
            except BaseException:
                os._exit(1)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0 and worker.running
    finally:
        worker.stop()
    left = atexit._ncallbacks()
    atexit.unregister(worker._at_exit)  # removes nothing: stop() has removed it
    assert atexit._ncallbacks() == left
    assert id(worker) not in inprocess._armed  # nor is it drained by threading's exit hook


def test_a_forked_child_neither_sees_the_worker_running_nor_stops_the_parents(
        fast: wurk.Config, r: redis.Redis) -> None:
    """Threads do not survive fork(): in the child the parent's worker is not running, and
    its quiet()/stop() (a gunicorn worker_exit of a preloaded app) must not push the jobs
    the parent is running back to their queue, nor remove the parent's process record."""
    worker = wurk.InProcessWorker(fast).start()
    try:
        push("EmbedMode::Wait", 30)
        wait_until(lambda: r.hget(worker.identity, "busy") == "1", what="the job running")
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                code = 2 if worker.running else 0
                worker.quiet()
                worker.stop(timeout=0)
            except BaseException:
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the child saw the worker running"
        assert worker.running
        assert r.exists(worker.identity) and r.hget(worker.identity, "quiet") == "false"
        assert r.llen("queue:default") == 0  # the parent's job was not pushed back
        assert r.hget(worker.identity, "busy") == "1"
    finally:
        release.set()
        worker.stop()


def test_a_worker_made_before_a_fork_and_started_after_it_belongs_to_the_child(
        fast: wurk.Config) -> None:
    """Made in a preloading master, started in the forked worker (post_fork): the child
    owns it, so its stop() and its exit hook drain it there."""
    worker = wurk.InProcessWorker(fast)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            worker.start()
            code = 0 if worker.running else 2
            worker.stop(timeout=0)
            code = code or (3 if worker.running else 0)
            code = code or (4 if worker.launcher is None or
                            not worker.launcher.stopping else 0)
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize(("host_logging", "wurk_handlers"), [
    ("", 1), ("import logging; logging.basicConfig()", 0)])
def test_wurk_installs_a_log_handler_only_in_a_host_without_logging(
        redis_server: Server, host_logging: str, wurk_handlers: int) -> None:
    """in-process-worker.md: if neither the ``wurk`` logger nor the root logger has a
    handler, wurk installs its own; otherwise the host's logging configuration decides."""
    code = (f"{host_logging}\nimport logging, wurk\n"
            f"config = wurk.Config(redis_url={redis_server.url!r}, heartbeat_interval=0.2)\n"
            "worker = wurk.embed(config)\n"
            # One write: print's text and its newline are two, and a line the worker's
            # threads log (to stdout too) could land between them.
            "import sys; sys.stdout.write("
            "'handlers: %d\\n' % len(logging.getLogger('wurk').handlers))\n"
            "worker.stop(timeout=0)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert f"handlers: {wurk_handlers}\n" in done.stdout


@pytest.mark.parametrize("setting", ["health_port", "metrics_port"])
def test_a_port_in_use_stops_the_start_naming_the_setting_and_the_port(
        fast: wurk.Config, r: redis.Redis, setting: str) -> None:
    """metrics.md: a port in use stops the worker at start, naming the setting and the port."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        setattr(fast, setting, port)
        worker = wurk.InProcessWorker(fast)
        with pytest.raises(wurk.ConfigError, match=rf"{setting} {port}: cannot listen on "
                                                   rf"127\.0\.0\.1:{port}"):
            worker.start()
        assert not worker.running and r.scard("processes") == 0
    finally:
        taken.close()


def test_a_configuration_serves_a_second_worker_after_the_first_stopped(
        fast: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """A test suite or a benchmark starts a worker, stops it and starts another on the same
    configuration: the second starts (the configuration, frozen by the first, is not
    validated into a change again) with the built-in links the first put in place — not
    said to be off — and runs jobs."""
    first = wurk.InProcessWorker(fast).start()
    push("EmbedMode::Record", 1)
    wait_until(lambda: ran == [1])
    first.stop()
    with caplog.at_level(logging.WARNING, logger="wurk"), wurk.InProcessWorker(fast):
        push("EmbedMode::Record", 2)
        wait_until(lambda: ran == [1, 2])
        assert r.scard("processes") == 1
    assert r.scard("processes") == 0
    assert "frozen before its worker was built" not in caplog.text


def test_a_configuration_frozen_by_hand_says_its_built_in_links_are_off(
        fast: wurk.Config, caplog: pytest.LogCaptureFixture) -> None:
    fast.freeze()
    with caplog.at_level(logging.WARNING, logger="wurk"):
        wurk.InProcessWorker(fast).start().stop()
    assert "frozen before its worker was built: batch counts" in caplog.text


def test_stop_before_start_does_nothing(fast: wurk.Config) -> None:
    worker = wurk.InProcessWorker(fast)
    worker.stop()
    assert worker.identity is None and not worker.running


def test_async_jobs_of_an_embedded_worker_run_on_its_own_loop_not_the_hosts(
        fast: wurk.Config) -> None:
    """A host application on asyncio's loop embeds a worker: the worker's async jobs run on
    its own loop thread (uvloop by default), and the host's loop is left as it was."""
    seen: list[str] = []

    async def where() -> None:
        loop = asyncio.get_running_loop()
        seen.append(f"{type(loop).__module__}:{threading.current_thread().name}")

    wurk.job(name="EmbedMode::Where")(where)

    async def host() -> str:
        worker = wurk.embed(fast)
        try:
            push("EmbedMode::Where")
            deadline = time.monotonic() + 10
            while not seen:
                assert time.monotonic() < deadline, "the async job never ran"
                await asyncio.sleep(0.02)  # the host's loop keeps running meanwhile
        finally:
            worker.stop()
        return type(asyncio.get_running_loop()).__module__

    try:
        assert asyncio.run(host()) == "asyncio.unix_events"
    finally:
        wurk.registry.unregister("EmbedMode::Where")
    assert seen == ["uvloop:wurk-asyncio"]


def _heartbeat_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "wurk-heartbeat"]


def _beats(config: wurk.Config) -> list[str]:
    """The thread of each beat the worker on ``config`` writes, from now on."""
    beats: list[str] = []
    config.on("beat", lambda: beats.append(threading.current_thread().name))
    return beats


def test_async_beat_false_starts_no_heartbeat_thread_and_still_runs_jobs(
        fast: wurk.Config, r: redis.Redis) -> None:
    """Sidekiq's ``async_beat: false``: the host drives the heartbeat. The start writes the
    first beat itself, so the processors, which fetch only once a record vouches for them,
    do not wait for the host's first call."""
    assert _heartbeat_threads() == []
    beats = _beats(fast)
    worker = wurk.embed(fast, async_beat=False)
    try:
        assert worker.running and _heartbeat_threads() == []
        assert beats == ["MainThread"]  # the start's own beat, on the starting thread
        assert r.hget(worker.identity, "beat") is not None
        push("EmbedMode::Record", 1)
        push("EmbedMode::Record", 2)
        wait_until(lambda: sorted(ran) == [1, 2])
        assert _heartbeat_threads() == [] and beats == ["MainThread"]
    finally:
        worker.stop()
    assert not r.exists(worker.identity) and r.scard("processes") == 0


def test_the_record_beats_only_when_the_host_calls_heartbeat(fast: wurk.Config,
                                                             r: redis.Redis) -> None:
    """Each ``heartbeat()`` is one whole tick of the heartbeat thread's: the process record
    with its TTL, the work map, the stats flushed; between the host's calls nothing beats."""
    beats = _beats(fast)
    beaten = threading.Event()
    fast.on("beat", beaten.set)
    worker = wurk.InProcessWorker(fast, async_beat=False).start()
    try:
        first = float(r.hget(worker.identity, "beat"))
        beaten.clear()
        push("EmbedMode::Record", 1)
        launcher = worker.launcher
        assert launcher is not None
        wait_until(lambda: launcher.counters.total_processed == 1)
        # Five heartbeat intervals: a heartbeat thread would have beaten by now.
        assert not beaten.wait(5 * fast.heartbeat_interval)
        assert float(r.hget(worker.identity, "beat")) == first
        assert r.get("stat:processed") is None  # the job's count waits for a beat
        r.persist(worker.identity)

        assert worker.heartbeat() is True
        assert beats == ["MainThread", "MainThread"]
        assert float(r.hget(worker.identity, "beat")) > first
        assert 0 < r.ttl(worker.identity) <= fast.heartbeat_ttl  # its expiry set again
        assert r.get("stat:processed") == "1"
        assert r.sismember("processes", worker.identity)
    finally:
        worker.stop()


def test_a_remote_signal_is_popped_by_the_hosts_heartbeat(
        fast: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """Remote signals ride the beat: with no heartbeat thread, the host's call pops one."""
    with caplog.at_level(logging.INFO, logger="wurk"), \
            wurk.InProcessWorker(fast, async_beat=False) as worker:
        signals = f"{worker.identity}-signals"
        r.lpush(signals, "TSTP")  # the dashboard's quiet
        r.lpush(signals, "TTIN")
        assert r.llen(signals) == 2 and "ignoring remote TSTP" not in caplog.text
        assert worker.heartbeat() is True
        assert r.lrange(signals, 0, -1) == ["TTIN"]
        assert "ignoring remote TSTP" in caplog.text  # the host owns quiet, as ever
        assert worker.running and r.hget(worker.identity, "quiet") == "false"
        assert worker.heartbeat() is True
        assert r.llen(signals) == 0 and "thread MainThread (" in caplog.text


def test_heartbeat_before_start_and_after_stop_does_nothing(fast: wurk.Config,
                                                            r: redis.Redis) -> None:
    """A host's timer may fire before the worker started or after it stopped: nothing is
    written (the record a stop removed is not written again), and it says so."""
    beats = _beats(fast)
    worker = wurk.InProcessWorker(fast, async_beat=False)
    assert worker.heartbeat() is False
    assert beats == [] and r.scard("processes") == 0
    worker.start()
    identity = worker.identity
    assert worker.heartbeat() is True
    worker.stop()
    assert not worker.running and not r.exists(identity)
    assert worker.heartbeat() is False
    assert beats == ["MainThread", "MainThread"]
    assert not r.exists(identity) and r.scard("processes") == 0
    assert _heartbeat_threads() == []


def test_heartbeat_on_a_worker_whose_thread_beats_is_one_beat_more(fast: wurk.Config,
                                                                   r: redis.Redis) -> None:
    beats = _beats(fast)
    with wurk.InProcessWorker(fast) as worker:
        assert _heartbeat_threads() == ["wurk-heartbeat"]
        wait_until(lambda: "wurk-heartbeat" in beats)
        before = beats.count("MainThread")
        assert worker.heartbeat() is True
        assert beats.count("MainThread") == before + 1
    assert _heartbeat_threads() == []
