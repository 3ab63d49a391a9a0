"""A real ``wurk worker`` process against the test server: the issue's acceptance points."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

import psutil
import pytest
import redis

import wurk
from tests.helpers.libc import glibc
from tests.system import worker_jobs as jobs
from tests.system.conftest import Worker, wait_for
from wurk import payload as P

StartWorker = Callable[..., Worker]


def test_a_thousand_jobs_all_run(config: wurk.Config, r: redis.Redis,
                                 start_worker: StartWorker) -> None:
    jobs.incr.perform_bulk([["sys:count"] for _ in range(1000)])
    worker = start_worker("-c", "10")
    wait_for(lambda: r.get("sys:count") == "1000", message="1000 jobs")
    wait_for(lambda: r.get("stat:processed") == "1000", message="stats flushed")
    day = time.strftime("%Y-%m-%d", time.gmtime())
    assert r.get(f"stat:processed:{day}") == "1000"
    assert r.get("stat:failed") == "0"
    assert 0 < r.ttl(f"stat:processed:{day}") <= 5 * 365 * 86400
    worker.signal("TERM")
    assert worker.wait(15) == 0
    assert r.llen("queue:default") == 0


def test_failing_job_retries_then_dies_with_death_handlers(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    jid = jobs.Failing.perform_async("sys:fails")
    start_worker()
    wait_for(lambda: r.zcard("retry") == 1 or r.zcard("dead") == 1, message="first failure")
    retried = json.loads(r.zrange("retry", 0, -1)[0]) if r.zcard("retry") else None
    if retried is not None:
        assert retried["jid"] == jid
        assert retried["error_class"] == "ValueError"
        assert retried["error_message"] == "boom sys:fails"
        assert isinstance(retried["failed_at"], int) and retried["retry_count"] >= 0
        assert P.decode_backtrace(retried["error_backtrace"])
    # Sidekiq's jitter adds up to 10·(count+1) s to every retry; rather than wait it out, the
    # test makes each booked retry due at once (its member is kept byte for byte).
    def rescore_and_check() -> bool:
        for member in r.zrange("retry", 0, -1):
            r.zadd("retry", {member: 0}, xx=True)
        return r.zcard("dead") == 1

    wait_for(rescore_and_check, message="death after retries")
    dead = json.loads(r.zrange("dead", 0, -1)[0])
    assert dead["jid"] == jid and dead["retry_count"] == 2 and "retried_at" in dead
    assert r.get("sys:fails") == "3"  # retry: 2 means three executions
    wait_for(lambda: r.llen("sys:deaths") == 1, message="death handler")
    assert json.loads(r.lindex("sys:deaths", 0)) == [jid, "ValueError", "boom sys:fails"]
    wait_for(lambda: r.get("stat:failed") == "3", message="failures counted")


def test_scheduled_job_runs_after_its_time_not_before(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    start_worker()
    pushed = time.time()
    jobs.record.perform_in(2, "sys:scheduled", "later")
    jobs.record.perform_async("sys:scheduled", "now")
    wait_for(lambda: r.llen("sys:scheduled") == 2, timeout=15, message="scheduled job")
    entries = [json.loads(x) for x in r.lrange("sys:scheduled", 0, -1)]
    ran = {value: at for value, at in entries}
    # Not before its time; soon after it (a poll every 0.2 s), with room for a busy machine.
    assert ran["now"] < pushed + 5
    assert pushed + 2 <= ran["later"] < pushed + 2 + 5


def test_term_during_long_jobs_requeues_them_and_exits_in_time(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    jobs.sleep_job.perform_bulk([[30, "sys:long"] for _ in range(3)])
    worker = start_worker("-c", "3", "-t", "2")
    wait_for(lambda: r.llen("sys:long:started") == 3, message="long jobs started")
    started = time.monotonic()
    worker.signal("TERM")
    assert worker.wait(30) == 0
    elapsed = time.monotonic() - started
    assert elapsed < 2 * (2 + 3), elapsed  # twice the timeout and the grace, not the 30 s
    back = [json.loads(x) for x in r.lrange("queue:default", 0, -1)]
    assert len(back) == 3 and {j["class"] for j in back} == {"Sys::Sleep"}
    assert r.llen("sys:long:done") == 0
    assert r.scard("processes") == 0  # record removed at exit
    assert "pushing 3 unfinished job(s) back" in worker.output()


def test_tstp_stops_fetching_while_running_jobs_finish(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    jobs.sleep_job.perform_bulk([[1.5, "sys:quiet"] for _ in range(2)])
    worker = start_worker("-c", "2")
    wait_for(lambda: r.llen("sys:quiet:started") == 2, message="jobs started")
    worker.signal("TSTP")
    identity = next(iter(r.smembers("processes")))
    wait_for(lambda: r.hget(identity, "quiet") == "true", message="quiet in heartbeat")
    jobs.incr.perform_bulk([["sys:after-quiet"]] * 5)
    wait_for(lambda: r.llen("sys:quiet:done") == 2, message="running jobs finished")
    # A processor still fetching would take the five jobs within milliseconds of its job's
    # end; half a second is a hundred times that.
    time.sleep(0.5)
    assert r.get("sys:after-quiet") is None and r.llen("queue:default") == 5
    worker.signal("TERM")
    assert worker.wait(15) == 0
    assert r.llen("queue:default") == 5


def test_bad_payloads_go_where_they_belong_and_the_worker_goes_on(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    r.lpush("queue:default", "{not json")
    wurk.push({"class": "Nobody::Knows", "args": [1]})
    r.lpush("queue:default",  # a client would refuse this; a raw LPUSH cannot
            '{"class":"Sys::Incr","args":{},"jid":"bad-args-jid","queue":"default"}')
    jobs.incr.perform_async("sys:survivor")
    start_worker()
    wait_for(lambda: r.get("sys:survivor") == "1", message="a good job after bad ones")
    wait_for(lambda: r.zcard("dead") == 2 and r.zcard("retry") == 1, message="bad jobs booked")
    dead = dict(r.zrange("dead", 0, -1, withscores=True))
    assert "{not json" in dead
    invalid = next(json.loads(m) for m in dead if m.startswith('{"class"'))
    assert invalid["error_class"] == "wurk.InvalidPayload"
    assert "'args'" in invalid["error_message"] and "expected an array" in invalid[
        "error_message"]
    unknown = json.loads(r.zrange("retry", 0, -1)[0])
    assert unknown["class"] == "Nobody::Knows"
    assert unknown["error_class"] == "wurk.JobNotRegistered"
    assert "Nobody::Knows" in unknown["error_message"] and unknown["retry_count"] == 0


def test_strict_queue_order(config: wurk.Config, r: redis.Redis,
                            start_worker: StartWorker) -> None:
    for queue in ("low", "high"):
        jobs.record.set(queue=queue).perform_bulk([["sys:order", queue]] * 30)
    start_worker("-c", "1", "-q", "high", "-q", "low")
    wait_for(lambda: r.llen("sys:order") == 60, message="all ran")
    order = [json.loads(x)[0] for x in r.lrange("sys:order", 0, -1)]
    assert order == ["high"] * 30 + ["low"] * 30


def test_weighted_queue_order_holds_statistically(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    for queue in ("a", "b"):
        jobs.record.set(queue=queue).perform_bulk([["sys:weighted", queue]] * 200)
    # One job per fetch: the weights are drawn per fetch, and a batch taken ahead comes from
    # one queue, so with prefetch 160 jobs would be only 20 draws (too few for the bounds).
    start_worker("-c", "1", "-q", "a,3", "-q", "b,1", settings="prefetch: 1\n")
    wait_for(lambda: r.llen("sys:weighted") >= 160, message="jobs ran")
    first = [json.loads(x)[0] for x in r.lrange("sys:weighted", 0, 159)]
    share = first.count("a") / len(first)
    assert 0.62 <= share <= 0.88, share  # expected 0.75 while both queues hold jobs


def test_heartbeat_and_busy_map_use_sidekiqs_field_names(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    worker = start_worker("-c", "4", "-g", "systest", "-q", "default", "-q", "other,2")
    jobs.sleep_job.perform_async(3, "sys:busy")
    identity = next(iter(r.smembers("processes")))
    _host, pid, nonce = identity.split(":")
    assert int(pid) == worker.process.pid and len(nonce) == 12
    wait_for(lambda: r.hget(identity, "busy") == "1", message="busy in heartbeat")
    record = r.hgetall(identity)
    assert {"info", "concurrency", "busy", "beat", "rtt_us", "quiet", "rss"} <= set(record)
    assert record["concurrency"] == "4" and record["quiet"] == "false"
    assert int(record["rss"]) > 1000 and float(record["beat"]) > time.time() - 5
    assert 0 < r.ttl(identity) <= 60
    info = json.loads(record["info"])
    assert info["identity"] == identity and info["tag"] == "systest"
    assert info["concurrency"] == 4 and info["queues"] == ["default", "other"]
    assert info["capsules"]["default"]["mode"] == "weighted"
    assert info["framework"] == "wurk" and info["embedded"] is False
    assert info["event_loop"] == "uvloop"  # the default where it is installed
    assert isinstance(info["started_at"], float)
    for suffix in (":work", ":workers"):
        work = r.hgetall(identity + suffix)
        assert len(work) == 1
        entry = json.loads(next(iter(work.values())))
        assert entry["queue"] == "default" and isinstance(entry["run_at"], int)
        assert json.loads(entry["payload"])["class"] == "Sys::Sleep"


def test_the_event_loop_flag_is_used_and_shown(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    """``--event-loop asyncio``: async jobs run on asyncio's own loop, and the process
    record says which."""
    start_worker("--event-loop", "asyncio")
    identity = next(iter(r.smembers("processes")))
    assert json.loads(r.hget(identity, "info") or "{}")["event_loop"] == "asyncio"
    jobs.loop_kind.perform_async("sys:loop")
    wait_for(lambda: r.llen("sys:loop") == 1, message="the async job")
    assert r.lrange("sys:loop", 0, -1) == ["asyncio.unix_events._UnixSelectorEventLoop"]


def test_remote_quiet_through_the_signals_list(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    worker = start_worker()
    identity = next(iter(r.smembers("processes")))
    r.lpush(f"{identity}-signals", "TSTP")
    wait_for(lambda: r.hget(identity, "quiet") == "true", message="remote quiet")
    r.lpush(f"{identity}-signals", "TERM")
    assert worker.wait(15) == 0


def test_async_jobs_run(config: wurk.Config, r: redis.Redis, start_worker: StartWorker) -> None:
    jobs.async_job.perform_bulk([["sys:async"]] * 20)
    start_worker("-c", "5")
    wait_for(lambda: r.get("sys:async") == "20", message="async jobs")


# What a default worker never runs, so never keeps in memory: the other subcommands (the
# server commands bring the embedded server's code), the health check's HTTP server, the
# time zone database's module (a periodic job with a named zone loads it), and the parts
# of the inspection model neither the limiters (its checked values) nor the leader's
# history sampler (the processes, queues and numbers) read.
NOT_IN_A_WORKER = {"wurk.cli.server", "wurk.cli.web", "wurk.cli.inspect", "wurk.cli.swarm",
                   "wurk.cli.demo", "wurk.connections.server", "wurk.metrics.health", "http.server",
                   "zoneinfo", "wurk.api.sets", "wurk.api.periodic",
                   # import wurk brings wurk.testing (three small modules), never its plugin
                   "wurk.testing.plugin", "pytest"}


def test_a_worker_keeps_only_the_code_it_runs(config: wurk.Config, r: redis.Redis,
                                               start_worker: StartWorker) -> None:
    start_worker("-c", "2")
    jobs.modules.perform_async("sys:modules")
    wait_for(lambda: r.llen("sys:modules") > 0, message="the modules job")
    loaded = set(r.lrange("sys:modules", 0, -1))
    assert {"wurk.cli.worker", "wurk.processor", "wurk.launcher"} <= loaded
    assert loaded & NOT_IN_A_WORKER == set()


@pytest.mark.skipif(not glibc(), reason="the arena limit is glibc's")
def test_a_worker_process_keeps_two_malloc_arenas(config: wurk.Config, r: redis.Redis,
                                                  start_worker: StartWorker) -> None:
    jobs.incr.perform_bulk([["sys:arena"]] * 500)
    worker = start_worker("-c", "10")
    wait_for(lambda: r.get("sys:arena") == "500", message="the jobs")
    jobs.malloc_stats.perform_async()
    wait_for(lambda: "Total (incl. mmap)" in worker.output(), message="malloc_stats")
    arenas = [line for line in worker.output().splitlines() if line.startswith("Arena ")]
    assert 1 <= len(arenas) <= 2


def _thread_affinities(worker: Worker) -> list[set[int]]:
    return [os.sched_getaffinity(t.id) for t in psutil.Process(worker.process.pid).threads()]


def test_cpu_affinity_auto_pins_processor_threads_while_jobs_run_at_once(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    allowed = os.sched_getaffinity(0)
    worker = start_worker("-c", "4", "--cpu-affinity", "auto")
    assert all(cpus == allowed for cpus in _thread_affinities(worker))  # idle: anywhere
    jobs.sleep_job.perform_bulk([[3.0, "sys:slept"] for _ in range(4)])  # four at once

    def pinned() -> list[set[int]]:
        return [cpus for cpus in _thread_affinities(worker) if len(cpus) == 1]

    if len(allowed) > 1:
        wait_for(lambda: len(pinned()) >= 4, message="processor threads pinned")
        assert len({frozenset(c) for c in pinned()}) == 1  # all on the same CPU
        assert any(cpus == allowed for cpus in _thread_affinities(worker))  # main, heartbeat
        wait_for(lambda: r.llen("sys:slept:done") == 4, timeout=15, message="four sleeps")
        wait_for(lambda: not pinned(), message="unpinned once quiet")
    worker.signal("TERM")
    assert worker.wait(15) == 0
    assert "processor threads pinned to CPU" in worker.output()


def test_cpu_affinity_by_number_holds_processor_threads_always(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    cpu = max(os.sched_getaffinity(0))
    worker = start_worker("-c", "3", "--cpu-affinity", str(cpu))
    jobs.incr.perform_bulk([["sys:count"] for _ in range(50)])
    wait_for(lambda: r.get("sys:count") == "50", message="50 jobs")
    assert sum(cpus == {cpu} for cpus in _thread_affinities(worker)) >= 3
    worker.signal("TERM")
    assert worker.wait(15) == 0


def test_a_bad_cpu_affinity_is_named_and_nothing_starts(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    worker = start_worker("--cpu-affinity", "first", wait_ready=False)
    assert worker.wait(15) == 2
    assert "cpu_affinity 'first': 'first' is not a CPU number" in worker.output()


def test_term_gives_stuck_jobs_of_every_capsule_one_grace_not_one_each(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    # Four capsules, each running a job the interrupt cannot reach (a sleep in C): the
    # stop is -t plus one grace (docs/deploying.md), not one grace per capsule in turn.
    queues = ["default", "qa", "qb", "qc"]
    for queue in queues:
        jobs.sleep_job.set(queue=queue).perform_async(60, "sys:stuck")
    worker = start_worker("-c", "1", "-t", "0.5", settings="""
shutdown_grace: 3
capsules:
  a: {concurrency: 1, queues: [qa]}
  b: {concurrency: 1, queues: [qb]}
  c: {concurrency: 1, queues: [qc]}
""")
    wait_for(lambda: r.llen("sys:stuck:started") == 4, message="four stuck jobs started")
    started = time.monotonic()
    worker.signal("TERM")
    assert worker.wait(60) == 0
    elapsed = time.monotonic() - started
    # One grace: about 3.5 s; a grace per capsule: 12.5 s and more.
    assert elapsed < 2 * (0.5 + 3), elapsed
    assert all(r.llen(f"queue:{queue}") == 1 for queue in queues)
    assert r.scard("processes") == 0


def test_a_cpu_this_process_may_not_use_is_a_bad_flag_and_nothing_starts(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    missing = max(os.sched_getaffinity(0)) + 1
    worker = start_worker("--cpu-affinity", str(missing), wait_ready=False)
    assert worker.wait(15) == 2
    assert f"CPU {missing} is not available to this process" in worker.output()
    assert "starting" not in worker.output()
    assert r.smembers("processes") == set()  # no record of a worker that never ran


def test_a_boot_that_fails_after_the_first_heartbeat_stops_what_started(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    # The startup hook makes the last step of the boot raise: the heartbeat was written,
    # its thread, the leader election and the scheduler were running.
    worker = start_worker("-r", "tests.system.boot_fails_jobs", wait_ready=False)
    assert worker.wait(30) == 1
    output = worker.output()
    assert "boot failed after the first heartbeat" in output
    assert "starting" in output  # the boot got as far as the first heartbeat
    pid = worker.process.pid
    # The dashboard shows no process that is gone, and no one holds the leader lease.
    assert r.smembers("processes") == set()
    assert [key for key in r.keys("*") if f":{pid}:" in key] == []
    assert r.get("dear-leader") is None
