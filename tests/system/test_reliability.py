"""Reliable fetch with real worker processes: SIGKILL loses nothing, poison pills die,
pauses reach every process, an idle worker picks a job up at once."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable

import redis

import wurk
from tests.system import worker_jobs as jobs
from tests.system.conftest import Worker, idle, wait_for

StartWorker = Callable[..., Worker]
RELIABLE = """
reaper_interval: 1
paused_cache_ttl: 1
"""


def private_lists(r: redis.Redis) -> list[str]:
    return [k for k in r.scan_iter(match="queue:*|*")]


def in_flight(r: redis.Redis) -> list[str]:
    """jids in every private list right now."""
    return [json.loads(raw)["jid"] for key in private_lists(r) for raw in r.lrange(key, 0, -1)]


def kill_mid_run(r: redis.Redis, worker: Worker, after: int) -> list[str]:
    wait_for(lambda: r.llen("rel:marks") >= after, timeout=60, message=f"{after} marks")
    worker.signal("KILL")
    worker.wait(10)
    return in_flight(r)


def test_sigkill_loses_nothing_and_recovers_fast(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    pushed = jobs.mark.perform_bulk([["rel:marks", 0.005] for _ in range(2000)])
    worker = start_worker("-c", "10", settings=RELIABLE)
    held = kill_mid_run(r, worker, 400)
    assert held, "the kill should catch jobs in flight"
    restarted = time.monotonic()
    start_worker("-c", "10", settings=RELIABLE)
    wait_for(lambda: set(held) <= set(r.lrange("rel:marks", 0, -1)), timeout=30,
             message="in-flight jobs run again")
    recovery = time.monotonic() - restarted
    wait_for(lambda: set(pushed) <= set(r.lrange("rel:marks", 0, -1)), timeout=60,
             message="every job")
    ran = Counter(r.lrange("rel:marks", 0, -1))
    duplicated = sum(n - 1 for n in ran.values())
    lost = len(set(pushed) - set(ran))
    print(f"\nkill test: pushed={len(pushed)} completed={len(ran)} in_flight_at_kill="
          f"{len(held)} duplicated={duplicated} lost={lost} recovery={recovery:.2f}s")
    assert lost == 0 and duplicated <= len(held)
    assert recovery < 10


def test_five_kills_in_a_row(config: wurk.Config, r: redis.Redis,
                             start_worker: StartWorker) -> None:
    pushed = jobs.mark.perform_bulk([["rel:marks", 0.005] for _ in range(2000)])
    held_total = 0
    for round_number in range(5):
        worker = start_worker("-c", "10", settings=RELIABLE)
        held_total += len(kill_mid_run(r, worker, 250 * (round_number + 1)))
    start_worker("-c", "10", settings=RELIABLE)
    wait_for(lambda: set(pushed) <= set(r.lrange("rel:marks", 0, -1)), timeout=90,
             message="every job after five kills")
    ran = Counter(r.lrange("rel:marks", 0, -1))
    duplicated = sum(n - 1 for n in ran.values())
    lost = len(set(pushed) - set(ran))
    print(f"\nfive kills: pushed={len(pushed)} completed={len(ran)} in_flight_at_kills="
          f"{held_total} duplicated={duplicated} lost={lost}")
    assert lost == 0 and duplicated <= held_total


def test_a_job_that_kills_its_worker_dies_as_a_poison_pill(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    jobs.mark.perform_bulk([["rel:marks", 0] for _ in range(20)])
    jid = jobs.crash.perform_async("rel:crashes")
    for _ in range(6):
        worker = start_worker("-c", "1", settings=RELIABLE)
        while worker.process.poll() is None and r.zcard("dead") == 0:
            time.sleep(0.05)
        if r.zcard("dead"):
            break
        assert worker.process.returncode == 17
    dead = [json.loads(m) for m in r.zrange("dead", 0, -1)]
    assert [d["jid"] for d in dead] == [jid]
    assert dead[0]["error_class"] == "wurk.Poisoned"
    assert "recovered 3 times without completing" in dead[0]["error_message"]
    assert r.get("rel:crashes") == "3"
    # The kill is counted just after the job is buried (its own command): wait for it.
    wait_for(lambda: r.get("wurk:stat:poisoned") is not None, timeout=10,
             message="the poison kill's count")
    assert r.get("wurk:stat:poisoned") == "1"  # the dashboard's wurk_poison_kills_total
    assert int(r.get("wurk:stat:recovered") or 0) >= 2  # the pill's two recoveries at least
    wait_for(lambda: r.llen("rel:marks") == 20, message="the other jobs")
    wait_for(lambda: r.llen("sys:deaths") == 1, message="death handler for the pill")
    assert json.loads(r.lindex("sys:deaths", 0))[1] == "Poisoned"


def test_a_job_finished_before_term_does_not_run_again(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    worker = start_worker("-c", "2", settings=RELIABLE)
    jobs.mark.perform_async("rel:marks", 0)
    wait_for(lambda: r.llen("rel:marks") == 1, message="the job ran")
    worker.signal("TERM")
    assert worker.wait(15) == 0
    assert private_lists(r) == [] and r.llen("queue:default") == 0
    again = start_worker("-c", "2", settings=RELIABLE)
    wait_for(lambda: idle(r, 2), message="the second worker idle after its boot sweep")
    again.signal("TERM")
    assert again.wait(15) == 0
    assert r.llen("rel:marks") == 1


def test_pausing_a_queue_stops_it_in_every_process(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    cache_ttl, fetch_timeout = 0.2, 0.5
    quick = RELIABLE.replace("paused_cache_ttl: 1", f"paused_cache_ttl: {cache_ttl}")
    for _ in range(2):
        start_worker("-c", "2", "-q", "held", "-q", "free", settings=quick)
    from wurk.api import Queue

    Queue("held", config=config).pause()
    paused_at = time.monotonic()
    # Every process has seen the pause by now: its cache expired, and a fetch begun just
    # before that has returned.
    time.sleep(cache_ttl + fetch_timeout + 0.1)
    jobs.mark.set(queue="held").perform_bulk([["rel:held", 0]] * 10)
    jobs.mark.set(queue="free").perform_bulk([["rel:free", 0]] * 10)
    wait_for(lambda: r.llen("rel:free") == 10, message="the free queue ran")
    time.sleep(0.5)
    assert r.llen("rel:held") == 0 and r.llen("queue:held") == 10
    print(f"\npause seen by all processes within {time.monotonic() - paused_at:.1f}s")
    Queue("held", config=config).unpause()
    wait_for(lambda: r.llen("rel:held") == 10, timeout=10, message="unpaused queue ran")


def test_an_idle_worker_picks_a_job_up_within_milliseconds(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    start_worker("-c", "3", "-q", "a", "-q", "b", "-q", "c", settings=RELIABLE)
    wait_for(lambda: idle(r, 3), message="every processor blocked in BLMOVE")
    latencies = []
    for queue in ["a", "b", "c"] * 3:
        pushed = time.time()
        jobs.record.set(queue=queue).perform_async("rel:latency", queue)
        wait_for(lambda: r.llen("rel:latency") == len(latencies) + 1, message="pickup")
        _, ran = json.loads(r.lindex("rel:latency", -1))
        latencies.append(ran - pushed)
        time.sleep(0.2)
    print(f"\nidle pickup latency: max {max(latencies) * 1000:.1f} ms, "
          f"median {sorted(latencies)[len(latencies) // 2] * 1000:.1f} ms")
    assert max(latencies) < 0.25


def test_pro_layout_registers_with_super_fetch(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    worker = start_worker(settings=RELIABLE + "private_list_layout: pro\n")
    identity = next(iter(r.smembers("processes")))
    # Registration follows the first heartbeat, which is what makes the process visible.
    wait_for(lambda: r.smembers("super_processes") == {identity}, message="registration")
    assert r.smembers(f"{identity}:super_queues") == {f"queue:sq|{identity}|default"}
    worker.signal("TERM")
    assert worker.wait(15) == 0
    assert not r.exists("super_processes") and not r.exists(f"{identity}:super_queues")


def test_a_lost_foreign_owner_is_recovered_within_ttl_plus_one_sweep(
    config: wurk.Config, r: redis.Redis, start_worker: StartWorker
) -> None:
    ttl = 3
    owner = "otherhost:4242:abcdefabcdef"
    key = "queue:default|otherhost|4242|abcdefabcdef|0"
    r.lpush(key, *[json.dumps({"class": "Sys::Mark", "args": ["rel:marks", 0],
                               "jid": f"foreign{i:017d}"}) for i in range(5)])
    # The owner beats every half second while the worker boots and looks, however slow a
    # loaded machine makes the boot, then stops: its last beat starts the clock.
    stop_beating = threading.Event()

    def beat() -> None:
        while not stop_beating.is_set():
            r.hset(owner, "info", "{}")
            r.expire(owner, ttl)
            stop_beating.wait(0.5)

    beater = threading.Thread(target=beat, name="foreign-owner")
    beater.start()
    try:
        start_worker("-c", "2", settings=RELIABLE)
        wait_for(lambda: idle(r, 2), message="the worker idle after its boot sweep")
        assert r.llen(key) == 5  # its heartbeat is alive: untouched
    finally:
        stop_beating.set()
        beater.join(5)
    last_beat = time.monotonic()
    wait_for(lambda: r.llen("rel:marks") == 5, timeout=15, message="foreign jobs recovered")
    took = time.monotonic() - last_beat
    print(f"\nforeign owner recovered {took:.1f}s after its last beat (TTL {ttl}s + sweep 1s)")
    assert took <= 2 * (ttl + 1)  # twice the TTL and one sweep, for a busy machine
