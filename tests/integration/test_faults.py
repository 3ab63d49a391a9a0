"""Redis faults against a running worker, its scheduler and heartbeat, and the client.

Each test runs a real worker (a launcher in this process, so its threads can be watched)
against a private server, often through the fault proxy, and asserts what the issue asks:
no job lost, no thread dead, one log line when an outage starts and one with its length
when it ends, a capped backoff rather than a spin, and a clear error from a push.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import wurk
from tests.chaos import jobs
from tests.helpers.faults import (
    InProcessWorker,
    Restartable,
    all_ran,
    config_for,
    figures,
    outage_lines,
    replicated,
    use_ledger,
    wait_until,
    whereabouts,
)
from tests.helpers.proxy import FaultProxy
from tests.helpers.server import Server
from wurk.runtime.outage import FIRST_WAIT, MAX_WAIT

CONCURRENCY = 4


@pytest.fixture
def ledger(monkeypatch: pytest.MonkeyPatch, redis_server: Server) -> Iterator[redis.Redis]:
    client = use_ledger(monkeypatch, redis_server.url)
    yield client
    client.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Restartable]:
    restartable = Restartable(tmp_path / "faulted")
    yield restartable
    restartable.stop()


@pytest.fixture
def proxy(server: Restartable) -> Iterator[FaultProxy]:
    with FaultProxy(server.port) as running:
        yield running


@pytest.fixture
def worker_at() -> Iterator[list[InProcessWorker]]:
    started: list[InProcessWorker] = []
    yield started
    for worker in started:
        worker.stop()


def start(worker_at: list[InProcessWorker], url: str, **settings: object) -> InProcessWorker:
    worker = InProcessWorker(url, concurrency=CONCURRENCY, **settings).start()
    worker_at.append(worker)
    return worker


def push(url: str, count: int, pause: float = 0.002, *, flaky: int = 0,
         scheduled: int = 0) -> list[str]:
    """``count`` marks, ``flaky`` jobs that fail once, ``scheduled`` marks due in 1 s."""
    client = wurk.Client(config_for(url))
    pushed = [jid for jid in client.push_bulk(
        {"class": "Chaos::Mark", "args": [[pause]] * count}) if jid]
    if flaky:
        pushed += [jid for jid in client.push_bulk(
            {"class": "Chaos::Flaky", "args": [[pause]] * flaky, "retry": 5}) if jid]
    if scheduled:
        pushed += [jid for jid in client.push_bulk(
            {"class": "Chaos::Mark", "args": [[pause]] * scheduled,
             "at": time.time() + 1}) if jid]
    client.config.close()
    return pushed


def assert_outages_logged_once(caplog: pytest.LogCaptureFixture) -> dict[str, tuple[int, int]]:
    """Each component that reported an outage logged its end, once each. A component that
    was backing off notices Redis is back within ``MAX_WAIT`` (or its interval): waited for
    three times that, for a busy machine."""
    wait_until(lambda: all(ended for _, ended in outage_lines(caplog.records).values()),
               3 * MAX_WAIT, "every outage to end")
    lines = outage_lines(caplog.records)
    assert lines, "no outage was logged"
    for component, (started, ended) in lines.items():
        assert (started, ended) == (1, 1), f"{component}: {started} start(s), {ended} end(s)"
    return lines


def heartbeat_of(server_url: str) -> float:
    client = redis.Redis.from_url(server_url)
    try:
        names = [n.decode() for n in client.smembers("processes")]
        return max(float(client.hget(n, "beat") or 0) for n in names) if names else 0.0
    finally:
        client.close()


# -- a restart --------------------------------------------------------------------------------
def test_redis_restarted_with_aof_mid_run_loses_nothing(
    server: Restartable, ledger: redis.Redis, worker_at: list[InProcessWorker],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="wurk")
    pushed = push(server.url, 1500, scheduled=50)
    worker = start(worker_at, server.url)
    wait_until(lambda: ledger.llen(jobs.RAN) >= 300, 30, "work under way")
    server.restart(down_for=1.0)
    restarted = time.time()
    wait_until(all_ran(pushed, ledger), 60, "every job after the restart")
    result = figures(pushed, ledger)
    print("\n" + result.line("restart"))
    assert result.lost == 0 and result.duplicated <= CONCURRENCY
    worker.assert_healthy(CONCURRENCY)
    lines = assert_outages_logged_once(caplog)
    assert "fetch (capsule default)" in lines
    wait_until(lambda: heartbeat_of(server.url) > restarted, 10, "a heartbeat after")


# -- 30 seconds unreachable -------------------------------------------------------------------
OUTAGE_SECONDS = 30.0
# Each try of a backing-off thread opens at most this many connections: a fetch reads the
# paused set then fetches; the scheduler counts processes (a read, tried twice) then polls.
CONNECTIONS_PER_TRY = 3


def tries_within(seconds: float) -> int:
    """How many tries one thread makes in ``seconds`` when its waits double from
    ``FIRST_WAIT`` up to ``MAX_WAIT``."""
    tries, waited, wait = 1, 0.0, FIRST_WAIT
    while waited < seconds:
        waited += wait
        tries += 1
        wait = min(MAX_WAIT, wait * 2)
    return tries


@pytest.mark.timeout(360)  # real time, 25-60 s here: more on a slower machine
def test_redis_unreachable_for_30_seconds(
    server: Restartable, proxy: FaultProxy, ledger: redis.Redis,
    worker_at: list[InProcessWorker], caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="wurk")
    before = push(server.url, 200)
    worker = start(worker_at, proxy.url)
    wait_until(all_ran(before, ledger), 20, "work before the outage")
    waiting = push(server.url, 200)  # queued while the worker is cut off…
    waiting += push(server.url, 0, scheduled=50)  # …and due while it is (the scheduler's)
    client = wurk.Client(config_for(proxy.url))
    attempts_before = proxy.accepted
    with proxy.outage():
        began = time.monotonic()
        with pytest.raises(wurk.RedisUnavailable, match=r"could not push Chaos::Mark \(jid "
                           r"[0-9a-f]{24}\): .*Nothing was kept.*push again once Redis"):
            client.push({"class": "Chaos::Mark", "args": [0]})
        threading.Event().wait(OUTAGE_SECONDS - (time.monotonic() - began))
        attempts = proxy.accepted - attempts_before
        lasted = time.monotonic() - began
    client.config.close()
    wait_until(all_ran(waiting, ledger), 20, "the queued jobs after the outage")
    # Loops that retry Redis, each with its own backoff: the processors, the heartbeat, and
    # the poller thread's scheduler, reaper, leader election, periodic poller and history.
    threads = CONCURRENCY + 6
    # Twice the tries the outage allows (the waits are drawn below their ceiling).
    bound = threads * tries_within(2 * lasted) * CONNECTIONS_PER_TRY
    print(f"\n30 s outage: {attempts} connection attempts by {threads} threads "
          f"(bound {bound}; a spin would make thousands)")
    assert attempts <= bound
    worker.assert_healthy(CONCURRENCY)
    lines = assert_outages_logged_once(caplog)
    looping = {"fetch (capsule default)", "heartbeat", "scheduler", "reaper"}
    assert looping <= set(lines)
    # The parts that try Redis all along saw the whole outage, from within a few seconds of
    # its start (a part on a long interval, the history sampler's 30 s, may first try near
    # its end and see a short one).
    lengths = [float(r.getMessage().split("back after ")[1].split(" s")[0])
               for r in caplog.records if "Redis is back after" in r.getMessage()
               and r.getMessage().split(": Redis is back")[0] in looping]
    assert len(lengths) == len(looping) and min(lengths) >= OUTAGE_SECONDS - 5


# -- connections cut mid-command --------------------------------------------------------------
def test_connections_cut_mid_command_lose_no_job(
    server: Restartable, proxy: FaultProxy, ledger: redis.Redis,
    worker_at: list[InProcessWorker], caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="wurk")
    pushed = push(server.url, 3000, pause=0.001, scheduled=100)
    worker = start(worker_at, proxy.url)
    cuts = 0
    done = all_ran(pushed, ledger)
    while cuts < 6 or (not done() and cuts < 12):
        threading.Event().wait(0.25)
        cuts += 1 if proxy.cut() else 0
    wait_until(done, 30, "every job after the cuts")
    result = figures(pushed, ledger)
    returned = sum("went back to" in r.getMessage() for r in caplog.records)
    print(f"\n{result.line('cuts')} cuts={cuts} strays_returned={returned}")
    assert cuts >= 5
    assert result.lost == 0 and result.duplicated <= cuts * CONCURRENCY
    worker.assert_healthy(CONCURRENCY)


def test_a_push_cut_mid_command_raises_a_clear_error(
    server: Restartable, proxy: FaultProxy
) -> None:
    client = wurk.Client(config_for(proxy.url))
    client.push({"class": "Chaos::Mark", "args": [0]})  # connected
    proxy.latency(0.5)  # the next command waits in the proxy…
    errors: list[BaseException] = []

    def push_one() -> None:
        try:
            client.push({"class": "Chaos::Mark", "args": [1]})
        except wurk.RedisUnavailable as exc:
            errors.append(exc)

    pusher = threading.Thread(target=push_one)
    pusher.start()
    threading.Event().wait(0.2)
    proxy.cut()  # …and is cut on its way
    pusher.join(timeout=5)
    assert len(errors) == 1
    assert "could not push Chaos::Mark" in str(errors[0])
    assert "the push may have reached Redis" in str(errors[0])
    client.config.close()


# -- LOADING ----------------------------------------------------------------------------------
def test_loading_replies_are_waited_out(
    tmp_path: Path, ledger: redis.Redis, worker_at: list[InProcessWorker],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="wurk")
    server = Restartable(tmp_path / "loading", extra=["--enable-debug-command", "local"])
    try:
        admin = server.client(socket_timeout=30)
        admin.mset({f"filler:{i}": "x" for i in range(2000)})
        pushed = push(server.url, 400, pause=0.005)
        worker = start(worker_at, server.url)
        wait_until(lambda: ledger.llen(jobs.RAN) >= 50, 20, "work under way")
        # Reloading the dataset 1 ms per key, answering LOADING meanwhile (~2 s).
        admin.config_set("key-load-delay", 1000)
        admin.config_set("loading-process-events-interval-bytes", 1024)
        reload = threading.Thread(target=lambda: admin.execute_command("DEBUG", "RELOAD"))
        reload.start()
        probe = server.client(socket_timeout=2, retry=Retry(NoBackoff(), 0))
        wait_until(lambda: _answers_loading(probe), 10, "a LOADING reply")
        with pytest.raises(wurk.RedisUnavailable, match="LOADING"):
            push(server.url, 1)
        reload.join(timeout=30)
        admin.config_set("key-load-delay", 0)
        wait_until(all_ran(pushed, ledger), 30, "every job after loading")
        result = figures(pushed, ledger)
        assert result.lost == 0 and result.duplicated <= CONCURRENCY
        worker.assert_healthy(CONCURRENCY)
        lines = assert_outages_logged_once(caplog)
        assert any("LOADING" in r.getMessage() for r in caplog.records
                   if r.getMessage().startswith(tuple(lines)))
    finally:
        for worker in worker_at:
            worker.stop()
        worker_at.clear()
        server.stop()


def _answers_loading(client: redis.Redis) -> bool:
    try:
        client.ping()
    except redis.exceptions.BusyLoadingError:
        return True
    return False


# -- READONLY: a failover ---------------------------------------------------------------------
def test_a_failover_leaves_no_thread_talking_to_the_old_master(
    tmp_path: Path, ledger: redis.Redis, worker_at: list[InProcessWorker],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="wurk")
    old, new = Restartable(tmp_path / "a"), Restartable(tmp_path / "b")
    proxy = FaultProxy(old.port).start()
    try:
        new.client().replicaof("127.0.0.1", old.port)
        wait_until(lambda: new.client().info("replication")["master_link_status"] == "up",
                   10, "the replica in sync")
        pushed = push(old.url, 1500, pause=0.002)
        worker = start(worker_at, proxy.url)
        wait_until(lambda: ledger.llen(jobs.RAN) >= 300, 20, "work under way")
        replicated(old.client())  # the replica has every push
        new.client().replicaof("NO", "ONE")  # promoted
        proxy.retarget(new.port)  # new connections reach the new master
        old.client().replicaof("127.0.0.1", new.port)  # demoted: refuses writes now
        try:
            wait_until(all_ran(pushed, ledger), 30, "every job on the new master")
        except AssertionError as exc:  # say where the jobs that never ran are
            missing = figures(pushed, ledger).missing
            raise AssertionError(f"{exc}: {len(missing)} never ran; on the new master: "
                                 f"{whereabouts(missing, new.client())}; the worker holds "
                                 f"{worker.held()}") from None
        result = figures(pushed, ledger)
        print("\n" + result.line("failover"))
        # The writes the old master took after the replica stopped following are gone: the
        # moves (each up to `prefetch` jobs per processor) and ACKs of that moment repeat.
        prefetch = wurk.Config().prefetch
        assert result.lost == 0 and result.duplicated <= 2 * CONCURRENCY * prefetch
        worker.assert_healthy(CONCURRENCY)
        said = " ".join(r.getMessage() for r in caplog.records)
        assert "READONLY" in said or "UNBLOCKED" in said
        assert redis.Redis(port=new.port).llen("queue:default") == 0
    finally:
        for worker in worker_at:
            worker.stop()
        worker_at.clear()
        proxy.close()
        old.stop()
        new.stop()


def test_a_push_to_a_replica_raises_a_clear_error(tmp_path: Path, server: Restartable) -> None:
    replica = Restartable(tmp_path / "replica")
    try:
        replica.client().replicaof("127.0.0.1", server.port)
        with pytest.raises(wurk.RedisUnavailable, match="READONLY"):
            push(replica.url, 1)
    finally:
        replica.stop()


# -- OOM and BUSY -----------------------------------------------------------------------------
def rejected_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(entry.get("rejected_calls", 0)) for entry in stats.values())


def refusal_round(server: Restartable, ledger: redis.Redis, worker_at: list[InProcessWorker],
                  caplog: pytest.LogCaptureFixture, begin: Callable[[], None],
                  end: Callable[[], None], code: str) -> tuple[int, float]:
    """Run a workload, refuse commands with ``code`` for ~2 s, end it; the calls refused,
    and for how long they were."""
    caplog.set_level(logging.INFO, logger="wurk")
    pushed = push(server.url, 600, pause=0.003)
    worker = start(worker_at, server.url)
    wait_until(lambda: ledger.llen(jobs.RAN) >= 100, 20, "work under way")
    admin = server.client(socket_timeout=30)
    rejected_before = rejected_calls(admin)
    began = time.monotonic()
    begin()
    with pytest.raises(wurk.RedisUnavailable, match=code):
        push(server.url, 1)
    threading.Event().wait(2.0)
    end()
    lasted = time.monotonic() - began
    rejected = rejected_calls(admin) - rejected_before
    wait_until(all_ran(pushed, ledger), 30, f"every job after {code}")
    result = figures(pushed, ledger)
    print(f"\n{result.line(code)} rejected_calls={rejected}")
    assert result.lost == 0 and result.duplicated <= CONCURRENCY
    worker.assert_healthy(CONCURRENCY)
    assert "fetch (capsule default)" in assert_outages_logged_once(caplog)
    return rejected, lasted


# Calls one thread may send per try (a pipeline of ACKs and a fetch; a heartbeat's MULTI),
# for the bound that tells backing off from spinning.
CALLS_PER_TRY = 8


def refusal_bound(seconds: float) -> int:
    """Refused calls a worker may make in ``seconds`` of refusals without spinning. Besides
    CALLS_PER_TRY per thread and try, each processor may hold up to ``prefetch`` refused
    ACKs (LREM + DEL each): jobs taken ahead go on running, and their ACKs ride every try."""
    prefetch = wurk.Config().prefetch
    tries = tries_within(seconds)
    return (CONCURRENCY + 3) * tries * CALLS_PER_TRY + CONCURRENCY * tries * 2 * prefetch


def test_oom_replies_are_waited_out(
    server: Restartable, ledger: redis.Redis, worker_at: list[InProcessWorker],
    caplog: pytest.LogCaptureFixture,
) -> None:
    admin = server.client()
    rejected, lasted = refusal_round(server, ledger, worker_at, caplog,
                                     begin=lambda: admin.config_set("maxmemory", 1),
                                     end=lambda: admin.config_set("maxmemory", 0), code="OOM")
    assert 0 < rejected <= refusal_bound(2 * lasted)  # twice what the refusals allow


def test_busy_replies_are_waited_out(
    server: Restartable, ledger: redis.Redis, worker_at: list[InProcessWorker],
    caplog: pytest.LogCaptureFixture,
) -> None:
    admin = server.client()
    admin.config_set("busy-reply-threshold", 100)  # BUSY after 0.1 s of script, not 5 s
    looping = threading.Thread(target=_run_endless_script, args=(server,))
    probe = server.client(socket_timeout=5, retry=Retry(NoBackoff(), 0))

    def begin() -> None:
        looping.start()
        wait_until(lambda: _answers_busy(probe), 10, "a BUSY reply")

    def end() -> None:
        admin.script_kill()
        looping.join(timeout=10)

    rejected, lasted = refusal_round(server, ledger, worker_at, caplog, begin, end,
                                     code="BUSY")
    assert 0 < rejected <= refusal_bound(2 * lasted)  # twice what the refusals allow


def _answers_busy(client: redis.Redis) -> bool:
    try:
        client.ping()
    except redis.exceptions.ResponseError as exc:
        return str(exc).startswith("BUSY")
    return False


def _run_endless_script(server: Restartable) -> None:
    with contextlib.suppress(redis.ResponseError):  # killed by SCRIPT KILL, as intended
        server.client(socket_timeout=30).eval("while true do end", 0)
