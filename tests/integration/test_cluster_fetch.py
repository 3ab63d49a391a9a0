"""A capsule's processors shared by its queues on a real cluster (``wurk.fetch.keyspaces``,
docs/scaling.md): each fetch picks a queue in the capsule's order, strict or weighted, and
takes from that queue's keyspace; the job's ACK, retry and death land in its keyspace; a
``kill -9`` leaves jobs of every keyspace to their keyspace's reaper; the worker runs the
capsule's concurrency in processor threads, not a share per queue."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import wurk
from tests.helpers import cluster_jobs
from tests.helpers.cluster import Cluster
from tests.helpers.server import free_port
from tests.helpers.wait import wait_until
from wurk.client import core
from wurk.config import Capsule
from wurk.fetch.keyspaces import KeyspaceFetch
from wurk.fetch.reliable import ReliableFetch
from wurk.inprocess import InProcessWorker
from wurk.runtime.identity import Identity

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = dict(heartbeat_interval=0.5, poll_interval_average=0.2, scheduler_initial_wait=0,
                fetch_timeout=0.5, reaper_interval=1)
failures: list[str] = []


@wurk.job(name="ClusterFetch::Failing", retry=1, retry_in=lambda count, exc: 0.1)
def failing() -> None:
    failures.append(str(wurk.current_job()["queue"]))  # type: ignore[index]
    raise RuntimeError("fails on purpose")


@wurk.job(name="ClusterFetch::Counts")
def counts(queue: str) -> None:
    with wurk.redis() as conn:  # lent from the job's own keyspace: no MOVED
        conn.call("INCR", f"{{{queue}}}:probe")


@pytest.fixture
def cluster(redis_cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    redis_cluster.flush()
    core._indexed.clear()
    cluster_jobs.ran.clear()
    failures.clear()
    monkeypatch.setenv("REDIS_URL", redis_cluster.url)
    monkeypatch.delenv(cluster_jobs.SLEEP_ENV, raising=False)
    yield redis_cluster


def _configure(queues: list[str], **settings: Any) -> wurk.Config:
    return wurk.configure(queues=queues, **{**SETTINGS, **settings})


def _in_flight(cluster: Cluster, queue: str) -> int:
    """Jobs in every in-flight list of ``queue``'s keyspace, read on its primary."""
    direct = cluster.primary_of(queue).client()
    try:
        return sum(int(direct.llen(key)) for key in direct.scan_iter(
            match=f"{{{queue}}}:queue:{queue}|*", count=1000))
    finally:
        direct.close()


def _push(queue: str, count: int) -> None:
    cluster_jobs.record.set(queue=queue).perform_bulk([[] for _ in range(count)])


def test_strict_order_holds_across_keyspaces(cluster: Cluster,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """``queues: [mail, exports]`` on two primaries: every job of mail is taken before any
    of exports, though exports' were pushed first (each job takes 20 ms, so a thread of
    exports' own would have run some meanwhile)."""
    assert cluster.primary_port("mail") != cluster.primary_port("exports")
    monkeypatch.setenv(cluster_jobs.SLEEP_ENV, "0.02")
    config = _configure(["mail", "exports"], concurrency=1)
    _push("exports", 20)
    _push("mail", 20)
    worker = InProcessWorker(config).start()
    try:
        wait_until(lambda: len(cluster_jobs.ran) == 40, timeout=30, what="40 jobs run")
    finally:
        worker.stop()
        config.close()
    assert cluster_jobs.ran == ["mail"] * 20 + ["exports"] * 20


def test_weights_share_the_processors_between_keyspaces(cluster: Cluster) -> None:
    """``mail,3`` and ``exports,1``, both with work all along: mail's share of the first
    100 jobs is about 3/4 (75; the bounds are beyond 3.5 standard deviations)."""
    config = _configure(["mail,3", "exports,1"], concurrency=1, prefetch=1)
    _push("exports", 200)
    _push("mail", 200)
    worker = InProcessWorker(config).start()
    try:
        wait_until(lambda: len(cluster_jobs.ran) >= 100, timeout=60, what="100 jobs run")
    finally:
        worker.stop()
        config.close()
    first = cluster_jobs.ran[:100]
    assert 60 <= first.count("mail") <= 90, first.count("mail")


def test_ack_retry_and_death_land_in_the_job_s_own_keyspace(cluster: Cluster) -> None:
    """And ``wurk.redis()`` inside a job reaches the job's keyspace, whichever queue the
    processor fetched from before."""
    config = _configure(["mail", "exports"], concurrency=2)
    _push("mail", 5)
    failing.set(queue="exports").perform_async()
    for queue in ("mail", "exports", "mail"):
        counts.set(queue=queue).perform_async(queue)
    mail, exports, home = config.shard("mail"), config.shard("exports"), config

    def count(view: wurk.Config, key: str) -> int:
        return int(view.pool("api").run(lambda r: r.zcard(key)))

    def processed(view: wurk.Config) -> int:
        return int(view.pool("api").run(lambda r: r.get(view.keys.stat_processed)) or 0)

    worker = InProcessWorker(config).start()
    try:
        wait_until(lambda: len(cluster_jobs.ran) == 5 and count(exports, exports.keys.dead)
                   == 1, timeout=30, what="mail's jobs run, the failing one dead")
        # The ACKs reached each keyspace while the worker runs; the counts were booked in it.
        wait_until(lambda: _in_flight(cluster, "mail") == 0
                   and _in_flight(cluster, "exports") == 0, what="every ACK through")
        wait_until(lambda: processed(mail) == 7 and processed(exports) == 3,
                   what="each keyspace's processed count")
    finally:
        worker.stop()
        config.close()
    assert failures == ["exports", "exports"]  # run, retried once in exports, then dead
    assert count(mail, mail.keys.dead) == 0 and count(home, home.keys.dead) == 0
    assert count(mail, mail.keys.retry) == 0 and count(exports, exports.keys.retry) == 0
    probes = {queue: int(config.shard(queue).pool("api").run(
        lambda r, q=queue: r.get(f"{{{q}}}:probe")) or 0) for queue in ("mail", "exports")}
    assert probes == {"mail": 2, "exports": 1}


def test_a_worker_killed_leaves_each_keyspace_s_jobs_to_its_reaper(
        cluster: Cluster, tmp_path: Path) -> None:
    """A ``wurk worker`` whose two shared processors hold a job of mail and one of exports
    is SIGKILLed; a new worker's reapers give each back in its own keyspace, and it runs."""
    settings = tmp_path / "wurk.yml"
    settings.write_text("queues: [mail, exports]\nconcurrency: 2\nheartbeat_interval: 0.5\n"
                        "fetch_timeout: 0.5\n")
    log = (tmp_path / "worker.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "wurk", "worker", "-r", "tests.helpers.cluster_jobs",
         "-C", str(settings)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, cluster_jobs.SLEEP_ENV: "120", "PYTHONUNBUFFERED": "1"})
    try:
        config = _configure(["mail", "exports"], concurrency=2)
        _push("mail", 1)
        _push("exports", 1)
        wait_until(lambda: _in_flight(cluster, "mail") == 1
                   and _in_flight(cluster, "exports") == 1, timeout=30,
                   what="the worker holding a job of each keyspace")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        log.close()
    worker = InProcessWorker(config).start()
    try:
        wait_until(lambda: sorted(cluster_jobs.ran) == ["exports", "mail"], timeout=30,
                   what=f"both jobs recovered and run (worker log: {settings.parent})")
        wait_until(lambda: _in_flight(cluster, "mail") == 0
                   and _in_flight(cluster, "exports") == 0, what="nothing left in flight")
    finally:
        worker.stop()
        config.close()


def test_the_worker_runs_the_capsule_s_concurrency_in_processor_threads(
        cluster: Cluster) -> None:
    """Six queues: ``concurrency`` processor threads, shared (the split this replaces gave
    ``concurrency: 2`` six, at least one a queue), and two threads per keyspace."""
    queues = ["default", "critical", "mail", "reports", "exports", "low"]
    others: dict[int, list[str]] = {}
    for concurrency in (12, 2):
        config = _configure(queues, concurrency=concurrency)
        before = set(threading.enumerate())
        worker = InProcessWorker(config).start()
        try:
            started = set(threading.enumerate()) - before
        finally:
            worker.stop()
            config.close()
        processors = [t for t in started if t.name.startswith("wurk-default-")]
        assert len(processors) == concurrency, sorted(t.name for t in processors)
        others[concurrency] = sorted(t.name for t in started if t not in processors)
    # Beside them, whatever the size: each keyspace's heartbeat and its pollers' thread.
    assert others[12] == others[2] == ["wurk-heartbeat"] * 6 + ["wurk-poller"] * 6


def test_the_health_check_and_metrics_count_every_keyspace_and_the_shared_processors(
        cluster: Cluster) -> None:
    """metrics.md: on a cluster the worker's health check reads every keyspace's heartbeat,
    its exporter has a series per keyspace (label ``shard``) and one per shared capsule,
    none twice, and ``wurk_concurrency`` is the threads it runs (not a capsule per queue)."""
    health, metrics = free_port(), free_port()
    config = _configure(["default", "mail", "exports"], concurrency=2, health_port=health,
                        metrics_port=metrics)
    worker = InProcessWorker(config).start()
    try:
        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{health}/", timeout=5) as got:
                    return bool(got.status == 200)
            except urllib.error.HTTPError:
                return False

        wait_until(healthy, what="every keyspace's heartbeat")
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as got:
            text = got.read().decode()
    finally:
        worker.stop()
    assert "wurk_concurrency 2.0" in text
    series = sorted(line.rsplit(" ", 1)[0] for line in text.splitlines()
                    if line.startswith("wurk_redis_outage{"))
    assert series == sorted(
        [f'wurk_redis_outage{{component="heartbeat",shard="{queue}"}}'
         for queue in ("default", "mail", "exports")]
        + ['wurk_redis_outage{component="fetch (capsule default)",shard="default"}'])


def test_a_job_unfinished_at_the_stop_deadline_goes_back_to_its_own_queue(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shared processors running a job of mail and one of exports when the stop's deadline
    passes: each job is pushed back to its own queue, in its own keyspace."""
    monkeypatch.setenv(cluster_jobs.SLEEP_ENV, "30")
    config = _configure(["mail", "exports"], concurrency=2, shutdown_grace=0.5)
    _push("mail", 1)
    _push("exports", 1)
    worker = InProcessWorker(config).start()
    try:
        wait_until(lambda: _in_flight(cluster, "mail") == 1
                   and _in_flight(cluster, "exports") == 1, timeout=30,
                   what="a job of each keyspace running")
    finally:
        worker.stop(timeout=0.5)
        config.close()
    for queue in ("mail", "exports"):
        view = config.shard(queue)
        assert view.pool("api").run(lambda r, v=view, q=queue: r.llen(v.keys.queue(q))) == 1
        assert _in_flight(cluster, queue) == 0
    assert cluster_jobs.ran == []  # interrupted, never finished


def test_the_ack_of_a_paused_queue_s_job_is_not_held_back_by_the_pause(
        config: wurk.Config, r: Any) -> None:
    """A keyspace whose queue was paused after its job ended was never asked again: its
    ``poll`` returned at once, so the job's ACK waited in the processor for the unpause (a
    crash meanwhile ran the finished job again), also when every queue was paused. It goes
    with the pass, as a paused capsule's fetch on one Redis sends it."""
    paused: set[str] = set()
    capsule = Capsule(queues=[("mail", 0), ("exports", 0)])
    fetchers = {queue: ReliableFetch(config, Capsule(queues=[(queue, 0)]), config.pool("t"),
                                     identity=Identity.current(), capsule_index=0, slot=0,
                                     paused=lambda: frozenset(paused))
                for queue in ("mail", "exports")}
    fetch = KeyspaceFetch(capsule, fetchers, slot=0,
                          visible={queue: lambda wait: True for queue in fetchers})
    mail = fetchers["mail"].private_lists["mail"]
    r.lpush(config.keys.queue("mail"), "m1")
    unit = fetch.fetch(0.1)
    assert unit is not None and unit.queue == "mail"
    unit.acknowledge()
    paused.add("mail")
    r.lpush(config.keys.queue("exports"), "e1")
    other = fetch.fetch(0.1)
    assert other is not None and other.queue == "exports"
    assert r.llen(mail) == 0, "the paused queue's ACK was held back"
    r.lpush(config.keys.queue("mail"), "m2")
    paused.clear()
    unit = fetch.fetch(0.1)
    assert unit is not None and unit.raw == b"m2"
    unit.acknowledge()
    paused.update(fetchers)  # every queue paused: nothing is asked, the ACK still goes
    assert fetch.fetch(0.05) is None
    assert r.llen(mail) == 0, "the ACK waited for an unpause"
    fetch.flush()


linked: list[tuple[str, str]] = []


def capsule_link(job: Any, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
    linked.append(("link", queue))
    return call_next()


@wurk.job(name="ClusterFetch::Linked")
def linked_job(queue: str) -> None:
    linked.append(("job", queue))


def test_a_capsules_own_links_run_around_its_jobs_in_each_of_its_keyspaces(
        cluster: Cluster) -> None:
    """A capsule's processors are shared by its queues' keyspaces; each job runs through the
    chain of its capsule in its keyspace's launcher: the capsule's link for its queues',
    not for the default capsule's."""
    linked.clear()
    config = _configure(["default"])
    config.capsule("low", queues=["mail", "exports"], concurrency=2,
                   server_middleware=[capsule_link])
    worker = InProcessWorker(config).start()
    try:
        for queue in ("default", "mail", "exports"):
            linked_job.set(queue=queue).perform_async(queue)
        wait_until(lambda: len([e for e in linked if e[0] == "job"]) == 3, what="the jobs")
    finally:
        worker.stop()
        config.close()
    assert sorted(queue for what, queue in linked if what == "link") == ["exports", "mail"]
