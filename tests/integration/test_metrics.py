"""Execution metrics in Sidekiq 8's keys: written, read back, and bad stored values survived."""

from __future__ import annotations

import datetime as dt
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.faults import config_for
from tests.helpers.metrics import tracked
from tests.helpers.proxy import FaultProxy
from wurk import deploy
from wurk.connections.pool import RedisPool
from wurk.metrics import BUCKET_LABELS, ExecutionMetrics, ExecutionTracker, Query, bucket_of

NOW = dt.datetime(2025, 2, 14, 8, 3, 27, tzinfo=dt.timezone.utc)


def test_buckets_follow_sidekiqs_bounds() -> None:
    assert [bucket_of(ms) for ms in (0, 19.9, 20, 29, 30, 334_999, 335_000, 10**9)] == \
        [0, 0, 1, 1, 2, 24, 25, 25]
    assert len(BUCKET_LABELS) == 26 and BUCKET_LABELS[-1] == "Slow"


def test_flush_writes_sidekiq_8_keys(config: wurk.Config, r: redis.Redis) -> None:
    tracker = tracked(HardJob=([10.4, 25.0, 700.2], 2))
    assert tracker.flush(config.pool(), config.keys, now=NOW) == 1
    for key in ("j|250214|8:03", "j|250214|8:0"):
        assert r.hgetall(key) == {"HardJob|p": "5", "HardJob|f": "2", "HardJob|ms": "736"}
    assert 8 * 3600 - 5 < r.ttl("j|250214|8:03") <= 8 * 3600
    assert 3 * 86400 - 5 < r.ttl("j|250214|8:0") <= 3 * 86400
    reads = [part for i in range(26) for part in ("GET", "u16", f"#{i}")]
    histogram = r.execute_command("BITFIELD_RO", "h|HardJob-14-8:3", *reads)
    assert histogram[0] == 1 and histogram[1] == 1 and histogram[9] == 1
    assert sum(histogram) == 3  # failures contribute no time
    assert 8 * 3600 - 5 < r.ttl("h|HardJob-14-8:3") <= 8 * 3600
    assert tracker.flush(config.pool(), config.keys, now=NOW) == 0  # nothing new: no writes


def test_flush_adds_up_and_saturates(config: wurk.Config, r: redis.Redis) -> None:
    for _ in range(2):
        tracked(HardJob=([5.0] * 3, 1)).flush(config.pool(), config.keys, now=NOW)
    assert r.hget("j|250214|8:03", "HardJob|p") == "8"
    tracker = ExecutionTracker()
    tracker.put_back({"Busy": _counts(70_000)})
    tracker.flush(config.pool(), config.keys, now=NOW)
    assert r.execute_command("BITFIELD_RO", "h|Busy-14-8:3", "GET", "u16", "#0") == [65535]


def _counts(n: int) -> Any:
    from wurk.metrics.tracking import JobCounts

    counts = JobCounts(processed=n, ms=float(n))
    counts.histogram[0] = n
    return counts


def test_sidekiq_7_keys_when_asked(config: wurk.Config, r: redis.Redis) -> None:
    tracker = ExecutionTracker(compat_v7=True)
    tracker.succeeded("HardJob", 50)
    tracker.flush(config.pool(), config.keys, now=NOW)
    assert r.hgetall("j|20250214|8:3") == {"HardJob|p": "1", "HardJob|ms": "50"}
    assert r.execute_command("BITFIELD_RO", "HardJob-14-08:3", "GET", "u16", "#3") == [1]


def test_a_refused_flush_keeps_the_counts(config: wurk.Config, r: redis.Redis) -> None:
    tracker = tracked(HardJob=([5.0], 1))
    dead = RedisPool("redis://127.0.0.1:1/0", size=1, socket_timeout=0.5)
    with pytest.raises(Exception):  # noqa: B017 - whichever connection error redis-py raises
        tracker.flush(dead, config.keys, now=NOW)
    dead.close()
    assert tracker.pending()["HardJob"].processed == 2
    tracker.flush(config.pool(), config.keys, now=NOW)
    assert r.hget("j|250214|8:03", "HardJob|p") == "2"


def test_a_metrics_key_of_another_type_costs_its_own_counts_not_double_others(
        config: wurk.Config, r: redis.Redis) -> None:
    """A minute key holding another type refused its ``HINCRBY`` while the ten-minute key
    and the histogram took theirs, yet every count was kept for the next flush: each
    heartbeat of that minute added them again there. The key that refused is named, and
    the others are counted once."""
    r.set("j|250214|8:03", "not a hash")
    tracker = tracked(HardJob=([5.0], 1))
    with pytest.raises(redis.ResponseError, match=r"j\|250214\|8:03"):
        tracker.flush(config.pool(), config.keys, now=NOW)
    assert tracker.flush(config.pool(), config.keys, now=NOW) == 0
    assert r.hgetall("j|250214|8:0") == {"HardJob|p": "2", "HardJob|f": "1", "HardJob|ms": "5"}
    assert r.execute_command("BITFIELD_RO", "h|HardJob-14-8:3", "GET", "u16", "#0") == [1]


def test_query_reads_back_what_was_flushed(config: wurk.Config) -> None:
    tracked(HardJob=([10.0, 30.0], 1), EasyJob=([1.0], 0)).flush(
        config.pool(), config.keys, now=NOW - dt.timedelta(minutes=2))
    tracked(HardJob=([50.0], 0)).flush(config.pool(), config.keys, now=NOW)
    top = Query(config, now=NOW).top_jobs(minutes=5)
    assert top.granularity == "minutely" and len(top.buckets) == 5
    hard = top.jobs["HardJob"]
    assert (hard.total_processed, hard.total_failed, hard.total_ms) == (4, 1, 90)
    assert hard.average_ms == 30.0
    assert hard.processed == [0, 0, 3, 0, 1]
    assert Query(config, now=NOW).top_jobs(minutes=5, class_filter="easy").jobs.keys() == \
        {"EasyJob"}
    one = Query(config, now=NOW).for_job("HardJob", minutes=5)
    assert one.jobs["HardJob"].histogram == [1, 0, 1, 1] + [0] * 22
    hours = Query(config, now=NOW).top_jobs(hours=1)
    assert hours.granularity == "ten_minutes" and len(hours.buckets) == 6
    assert hours.jobs["HardJob"].processed[-1] == 4  # both flushes fell in 08:00-08:09


def test_periods_are_clamped_as_sidekiq_clamps_them(config: wurk.Config) -> None:
    assert len(Query(config, now=NOW).top_jobs(minutes=10_000).buckets) == 60
    assert len(Query(config, now=NOW).top_jobs(hours=500).buckets) == 72 * 6


def test_hostile_stored_values_read_as_nothing(config: wurk.Config, r: redis.Redis) -> None:
    r.hset("j|250214|8:03", mapping={"Bad|p": "many", "Bad|ms": "-5", "nobar": "3",
                                     "Odd|x": "1", "<script>|p": "2", "Big|p": "9" * 5000})
    r.lpush("j|250214|8:02", "a list, not a hash")
    r.hset("h|Bad-14-8:3", "not", "a string")
    r.hset("20250214-marks", mapping={"not a time": "x", "2025-02-14T08:01:00Z": "v1" * 500})
    top = Query(config, now=NOW).top_jobs(minutes=5)
    assert top.jobs["Bad"].total_processed == 0 and top.jobs["Bad"].total_ms == 0
    assert top.jobs["<script>"].total_processed == 2
    assert top.jobs["Big"].total_processed == 0
    assert "nobar" not in top.jobs and "Odd" not in top.jobs
    assert Query(config, now=NOW).for_job("Bad", minutes=5).jobs["Bad"].histogram == [0] * 26
    assert [len(m.label) for m in top.marks] == [200]


def test_deploy_marks_once_per_label(config: wurk.Config, r: redis.Redis) -> None:
    at = dt.datetime(2025, 2, 14, 8, 1, 42, tzinfo=dt.timezone.utc)
    assert deploy.mark("v1.2 deploy", config=config, at=at) is True
    assert deploy.mark("v1.2 deploy", config=config, at=at) is False  # another process's call
    assert r.hgetall("20250214-marks") == {"2025-02-14T08:01:00Z": "v1.2 deploy"}
    assert 89 * 86400 < r.ttl("20250214-marks") <= 90 * 86400
    assert 0 < r.ttl("deploylock-v1.2 deploy") <= 60
    marks = Query(config, now=NOW).top_jobs(minutes=5).marks
    assert [(m.at, m.label) for m in marks] == [(at.replace(second=0), "v1.2 deploy")]
    with pytest.raises(ValueError, match="label"):
        deploy.mark("  ", config=config)


def test_a_second_label_in_the_same_minute_is_not_said_to_be_marked(
        config: wurk.Config, r: redis.Redis) -> None:
    """One mark a minute (Sidekiq's rounding): a second label that minute writes nothing,
    and mark() must say so rather than return True."""
    at = dt.datetime(2025, 2, 14, 8, 1, 42, tzinfo=dt.timezone.utc)
    assert deploy.mark("v1.2", config=config, at=at) is True
    assert deploy.mark("v1.3", config=config, at=at) is False
    assert r.hgetall("20250214-marks") == {"2025-02-14T08:01:00Z": "v1.2"}


@pytest.mark.parametrize("label", ["v1\nv2", "v1\x1b[31m", "x" * 201])
def test_a_deploy_label_of_several_lines_control_characters_or_too_long_is_refused(
        config: wurk.Config, r: redis.Redis, label: str) -> None:
    with pytest.raises(ValueError, match="label"):
        deploy.mark(label, config=config)
    assert r.keys("*marks") == [] and r.keys("deploylock-*") == []


def test_a_deploy_marks_key_of_another_type_is_named_and_the_lock_left_free(
        config: wurk.Config, r: redis.Redis) -> None:
    at = dt.datetime(2025, 2, 14, 8, 1, 42, tzinfo=dt.timezone.utc)
    r.set("20250214-marks", "by hand")
    with pytest.raises(ValueError, match=r"'20250214-marks' holds a string.*DEL 20250214-marks"):
        deploy.mark("v1.3", config=config, at=at)
    assert r.exists("deploylock-v1.3") == 0
    r.delete("20250214-marks")
    assert deploy.mark("v1.3", config=config, at=at) is True  # once repaired, it marks


def test_a_deploy_mark_broken_off_by_a_lost_connection_is_written_by_the_retry(
        redis_server: Any, r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis goes away before each command mark() sends in turn (cut, new connections
    refused): the lock and the mark are one step, so whatever the break, the retry once
    Redis is back finds either both written or neither, and the mark is there."""
    at = dt.datetime(2025, 2, 14, 8, 1, 42, tzinfo=dt.timezone.utc)
    original = redis.connection.AbstractConnection.send_packed_command
    with FaultProxy(redis_server.port) as proxy:
        cfg = config_for(proxy.url)
        for breaking in range(1, 10):
            r.flushdb()
            cfg.pool("client").run(lambda c: c.ping())  # connected: no handshake counted
            sent = 0

            def send(connection: Any, *args: Any, breaking: int = breaking,
                     **kwargs: Any) -> Any:
                nonlocal sent
                sent += 1
                if sent == breaking:
                    proxy.drop()
                    proxy.cut()
                return original(connection, *args, **kwargs)

            monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command",
                                send)
            try:
                first = deploy.mark("v1.4", config=cfg, at=at)
            except wurk.RedisUnavailable:
                first = None
            finally:
                monkeypatch.undo()
                proxy.restore()
            if first is not None and sent < breaking:
                assert first is True  # no command left to break: the whole list was tried
                break
            assert first is None, f"the break before command {breaking} went unnoticed"
            again = deploy.mark("v1.4", config=cfg, at=at)
            assert r.hgetall("20250214-marks") == {"2025-02-14T08:01:00Z": "v1.4"}, (
                f"broken before command {breaking}: the retry returned {again} and the mark "
                "is missing")
        else:
            pytest.fail("mark() sent more commands than expected")


def git_answering(tmp_path: Path, body: str) -> str:
    """A PATH whose git is this shell script (and nothing else)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "git"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(bin_dir)


@pytest.mark.parametrize("body, said", [
    ("echo 'fatal: detected dubious ownership in repository' >&2; exit 128", "dubious ownership"),
    ("/bin/sleep 30", "timed out"),  # its child keeps the pipes open
])
def test_a_failing_or_hanging_git_is_named_and_the_label_asked_for(
        config: wurk.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str,
        said: str) -> None:
    monkeypatch.setenv("PATH", git_answering(tmp_path, body))
    monkeypatch.setattr(deploy, "GIT_TIMEOUT", 0.5)
    started = time.monotonic()
    with pytest.raises(ValueError, match=f"{said}.*pass a label"):
        deploy.mark(config=config)
    assert time.monotonic() - started < 3


def test_without_git_the_label_is_asked_for(config: wurk.Config, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ValueError, match="pass a label"):
        deploy.mark(config=config)


def test_a_long_git_subject_is_cut_to_what_the_dashboards_show(
        config: wurk.Config, r: redis.Redis, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", git_answering(tmp_path, "printf 'abc1234 %0300d\\n' 0"))
    at = dt.datetime(2025, 2, 14, 8, 1, 42, tzinfo=dt.timezone.utc)
    assert deploy.mark(config=config, at=at) is True
    (label,) = r.hvals("20250214-marks")
    assert label.startswith("abc1234 000") and len(label) == deploy.LABEL_LIMIT


def test_the_middleware_counts_what_the_job_did(config: wurk.Config) -> None:
    tracker = ExecutionTracker()
    middleware = ExecutionMetrics(tracker)
    seen: list[tuple[str, float | None, str | None]] = []
    middleware.add_observer(lambda name, queue, payload, ms, error: seen.append(
        (name, ms, type(error).__name__ if error else None)))
    middleware.add_observer(lambda *args: 1 / 0)  # a broken observer changes nothing
    assert middleware(None, {"class": "Wrapper", "wrapped": "RealJob"}, "q", lambda: 7) == 7
    with pytest.raises(KeyError):
        middleware(None, {"class": "Plain"}, "q", lambda: {}["x"])
    counts = tracker.pending()
    assert (counts["RealJob"].processed, counts["RealJob"].failed) == (1, 0)
    assert (counts["Plain"].processed, counts["Plain"].failed, counts["Plain"].ms) == (1, 1, 0)
    assert [(name, error) for name, _, error in seen] == [("RealJob", None), ("Plain", "KeyError")]


def test_recoveries_and_poison_kills_are_counted_and_told(redis_server: Any,
                                                          r: redis.Redis) -> None:
    from wurk import payload as P
    from wurk.fetch.reaper import Reaper
    from wurk.runtime.identity import Identity

    told: list[tuple[str, Any]] = []
    cfg = wurk.configure(redis_url=redis_server.url,
                         on_recover=lambda raw, pill: told.append((raw, pill)))
    reaper = Reaper(cfg, Identity.current(), ["default"])
    counted: list[tuple[str, int]] = []
    reaper.observers.append(lambda queue, n: counted.append((queue, n)))
    reaper.observers.append(lambda queue, n: 1 / 0)  # reported, the sweep goes on
    pill = P.dumps({"class": "X", "args": [], "queue": "default", "jid": "p" * 24})
    safe = [P.dumps({"class": "X", "args": [n], "queue": "default", "jid": f"{n:024d}"})
            for n in range(2)]
    r.set(cfg.keys.poison_counter("p" * 24), 2)  # recovered twice already
    r.lpush(cfg.keys.private("default", "gone", 9, "ffffffffffff", 0), pill, *safe)
    assert reaper.sweep() == 2
    assert r.get("wurk:stat:recovered") == "2" and r.get("wurk:stat:poisoned") == "1"
    assert counted == [("default", 2)]
    assert sorted(raw for raw, pill_seen in told if pill_seen is None) == sorted(safe)
    assert [(raw, p["count"]) for raw, p in told if p is not None] == [(pill, 3)]
    own = cfg.keys.private("default", "gone", 9, "ffffffffffff", 0)
    r.lpush(own, safe[0])
    from wurk.fetch.reaper import return_own_lists

    assert return_own_lists(cfg, [(own, "default")]) == 1  # a clean return is no recovery
    assert r.get("wurk:stat:recovered") == "2"


def test_what_ran_since_the_last_beat_is_written_at_exit(redis_server: Any,
                                                         r: redis.Redis) -> None:
    import time

    cfg = wurk.configure(redis_url=redis_server.url, heartbeat_interval=3600,
                         heartbeat_ttl=7200,
                         fetch_timeout=0.2, timeout=1, concurrency=2, retain_history=0)
    wurk.job(name="Metrics::AtExit")(lambda key: r.incr(key))
    try:
        for _ in range(3):
            wurk.push({"class": "Metrics::AtExit", "args": ["exit:ran"]})
        embedded = wurk.InProcessWorker(cfg).start()
        deadline = time.monotonic() + 10
        while r.get("exit:ran") != "3" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert Query(cfg).top_jobs(minutes=2).jobs == {}  # no beat since: nothing written yet
        embedded.stop()
    finally:
        wurk.registry.unregister("Metrics::AtExit")
    assert Query(cfg).top_jobs(minutes=2).jobs["Metrics::AtExit"].total_processed == 3


def test_a_history_sample_keeps_the_50_largest_queues(config: wurk.Config,
                                                      r: redis.Redis) -> None:
    """A stored sample holds the 50 largest queues' sizes (StatsD is sent every queue read)."""
    from wurk.metrics.history import stored_sample, take_sample

    pipe = r.pipeline(transaction=False)
    for n in range(1, 61):  # q01 holds 1 job … q60 holds 60
        pipe.sadd("queues", f"q{n:02}")
        pipe.rpush(f"queue:q{n:02}", *["{}"] * n)
    pipe.execute()
    sample = take_sample(config, time.time())
    assert list(sample["queues"].values()) == list(range(60, 0, -1))  # all, largest first
    assert stored_sample(sample)["queues"] == {f"q{n:02}": n for n in range(11, 61)}


def test_the_first_history_sample_waits_one_full_interval(config: wurk.Config) -> None:
    """A worker that just started samples nothing until a whole ``history_interval`` has
    passed (then every interval): a fleet restarted at once does not all read the cluster
    the moment it boots."""
    from tests.helpers.wait import step
    from wurk.metrics.history import HistorySampler
    from wurk.runtime.clock import ManualClock
    from wurk.runtime.timer import Timers

    clock = ManualClock()
    started = clock.monotonic()
    timers = Timers("t-history", clock=clock)
    taken: list[float] = []
    each = threading.Semaphore(0)

    def on_sample(sample: dict[str, Any]) -> None:
        taken.append(clock.monotonic())
        each.release()

    cfg = wurk.Config(redis_url=config.redis_url, history_interval=60.0)
    sampler = HistorySampler(cfg, on_sample=on_sample, timers=timers)
    sampler.start()
    try:
        step(clock, 59.0)  # not yet: a sample now would be stamped 59 s after the start
        step(clock, 1.0)
        assert each.acquire(timeout=10), "no sample one interval after the start"
        assert taken == [started + 60.0]
    finally:
        sampler.stop(10)
        assert timers.stop(10)
        cfg.close()


def test_a_job_name_utf8_cannot_carry_is_counted_and_scraped(config: wurk.Config,
                                                             r: redis.Redis) -> None:
    """A payload's ``wrapped`` may hold a lone surrogate (``"\\ud800"`` in its JSON, which
    Python reads and UTF-8 cannot write; ``P.loads`` now refuses such a payload, so here
    the job is made directly): it made every flush of every job's counts fail, and every
    scrape of the worker's endpoint answer 500, for the life of the process."""
    import urllib.request

    from wurk.metrics.prometheus import WorkerExporter
    from wurk.metrics.tracking import job_name

    name = job_name({"class": "HardJob", "wrapped": "Bad\ud800Job", "args": []})
    tracker = ExecutionTracker()
    tracker.succeeded(name, 5.0)
    tracker.succeeded("HardJob", 5.0)
    assert tracker.flush(config.pool(), config.keys, now=NOW) == 2
    assert r.hgetall("j|250214|8:03") == {"HardJob|p": "1", "HardJob|ms": "5",
                                           "Bad?Job|p": "1", "Bad?Job|ms": "5"}
    exporter = WorkerExporter(outages=list, busy=lambda: 0, concurrency=1)
    port = exporter.start("127.0.0.1", 0)
    try:
        exporter.observe(name, "default", {}, 5.0, None)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as scrape:
            assert scrape.status == 200
            assert 'wurk_jobs_executed_total{job="Bad?Job",queue="default"} 1.0' in \
                scrape.read().decode()
    finally:
        exporter.stop()


def test_queue_names_are_cut_in_history_samples_and_cluster_labels(config: wurk.Config,
                                                                   r: redis.Redis) -> None:
    """Queue names are anyone's to write into ``queues``: fifty of 10,000 characters made
    each history sample half a megabyte, kept every 30 s for a day (over a gigabyte of
    Redis), and every dashboard scrape megabytes of labels. They are cut as job names are."""
    from wurk import payload as P
    from wurk.metrics.history import take_sample
    from wurk.metrics.prometheus import cluster_exposition

    pipe = r.pipeline(transaction=False)
    for n in range(50):
        name = f"{n:02}" + "q" * 10_000
        pipe.sadd("queues", name)
        pipe.rpush(f"queue:{name}", "{}")
    pipe.execute()
    assert len(P.dumps(take_sample(config, time.time()))) < 50 * 250
    body, _ = cluster_exposition(config)
    assert len(body) < 3 * 50 * 300


def test_long_queue_names_cut_alike_stay_apart_in_cluster_labels(config: wurk.Config,
                                                                 r: redis.Redis) -> None:
    """Two queue names sharing their first 200 characters were cut to one label: the scrape
    held two series of one label set (a duplicate sample, which a scraper rejects)."""
    from prometheus_client.parser import text_string_to_metric_families

    from wurk.metrics.prometheus import cluster_exposition

    for name in ("x" * 250 + "a", "x" * 250 + "b", "short"):
        r.sadd("queues", name)
        r.rpush(f"queue:{name}", "{}")
    body, _ = cluster_exposition(config)
    series = [(sample.name, tuple(sorted(sample.labels.items())))
              for family in text_string_to_metric_families(body.decode())
              for sample in family.samples]
    assert len(series) == len(set(series))
    sizes = [s for s in series if s[0] == "wurk_queue_size"]
    assert len(sizes) == 3 and all(len(dict(labels)["queue"]) <= 200 for _, labels in sizes)


def test_an_execution_the_shutdown_cut_is_not_counted_even_wrapped(config: wurk.Config) -> None:
    """A job whose cleanup raised its own error while the shutdown interrupted it goes back
    to its queue (the processor sees the ``Shutdown`` in the chain): counting it here too
    counted it twice, once as a failure now and again when it runs."""
    tracker = ExecutionTracker()
    middleware = ExecutionMetrics(tracker)
    seen: list[Any] = []
    middleware.add_observer(lambda *args: seen.append(args))

    def interrupted() -> None:
        try:
            raise wurk.Shutdown("interrupted at the shutdown deadline")
        finally:
            raise RuntimeError("cleanup failed")  # as a job's finally may

    with pytest.raises(RuntimeError):
        middleware(None, {"class": "CutJob"}, "q", interrupted)
    with pytest.raises(RuntimeError):
        middleware._after("CutJob", "q", {"class": "CutJob"}, time.perf_counter(), None,
                          _wrapped_shutdown())
    assert tracker.pending() == {} and seen == []


def _wrapped_shutdown() -> RuntimeError:
    error = RuntimeError("cleanup failed")
    error.__context__ = wurk.Shutdown("interrupted at the shutdown deadline")
    return error


def test_a_history_longer_than_a_read_spans_the_whole_period(config: wurk.Config,
                                                              r: redis.Redis) -> None:
    """A day sampled every 5 s is 17,280 samples, past ``READ_LIMIT``: the read kept the
    period's oldest 10,000, so the 24 h chart ended ten hours ago and its throughput missed
    them. The samples read are spread over the whole period, the newest among them."""
    import itertools
    import json

    from wurk.metrics.history import READ_LIMIT, read_history

    now = NOW.timestamp()
    interval, count = 5, 24 * 3600 // 5
    assert count > READ_LIMIT
    stamps = [now - interval * (count - 1 - i) for i in range(count)]
    r.zadd(config.keys.history, {json.dumps({"t": at, "processed": i}): at
                                 for i, at in enumerate(stamps)})
    samples = read_history(config, 24 * 3600, now=now)
    assert len(samples) <= READ_LIMIT + 1
    assert (samples[0].at, samples[-1].at) == (stamps[0], stamps[-1])
    assert samples[-1].get("processed") == count - 1
    assert [s.at for s in samples] == sorted({s.at for s in samples})  # in order, no repeat
    gaps = {b.at - a.at for a, b in itertools.pairwise(samples)}
    assert max(gaps) <= 2 * interval  # evenly spread, no hole
