"""``wurk worker --drain``: a stop that waits for every running job, with no deadline (a
rolling restart of a single process), and a second stop signal that falls back to the
bounded stop; and ``--health``, the health check on its default port. Each a real worker
subprocess."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import redis

import wurk
from tests.system import worker_jobs as jobs
from tests.system.conftest import Worker, wait_for
from tests.system.test_newcomer_worker import wait_for_line

StartWorker = Callable[..., Worker]


def test_drain_lets_a_job_outlast_the_timeout_then_exits_0(
        config: wurk.Config, r: redis.Redis, start_worker: StartWorker) -> None:
    jobs.gated.perform_async("drain:long")
    # -t 0: a normal stop would push the job back at once.
    worker = start_worker("-c", "1", "-t", "0", "--drain")
    wait_for(lambda: r.llen("drain:long:started") == 1, message="the job started")
    worker.signal("TERM")
    wait_for_line(worker, r"draining: waiting for the running jobs to finish, with no "
                          r"time limit")
    identity = next(iter(r.smembers("processes")))
    wait_for(lambda: r.hget(identity, "quiet") == "true", message="quiet in the heartbeat")
    jobs.incr.perform_async("drain:after")  # a quiet worker takes no new job
    # Pushed back, the job would be on its queue within milliseconds of the TERM; the quiet
    # heartbeat came after it, and a few tenths more are a hundred times that.
    time.sleep(0.3)
    assert worker.process.poll() is None
    assert r.llen("drain:long:done") == 0 and r.llen("queue:default") == 1
    assert "unfinished job(s)" not in worker.output()

    r.rpush("drain:long:gate", "open")  # the job ends when the test says, not a clock
    assert worker.wait(20) == 0
    assert r.llen("drain:long:done") == 1  # it finished, it was not pushed back
    assert r.llen("queue:default") == 1  # only the job pushed after the drain began
    assert r.get("drain:after") is None
    assert r.scard("processes") == 0
    assert "unfinished job(s)" not in worker.output()


def test_a_second_term_during_a_drain_stops_within_the_timeout(
        config: wurk.Config, r: redis.Redis, start_worker: StartWorker) -> None:
    jobs.gated.perform_async("drain:cut")
    worker = start_worker("-c", "1", "-t", "0", "--drain")
    wait_for(lambda: r.llen("drain:cut:started") == 1, message="the job started")
    worker.signal("TERM")
    wait_for_line(worker, r"draining: ")
    # A second stop signal counts a second or more after the first (one relayed twice is
    # one): pressed again every few tenths until the worker takes it.
    pressed = time.monotonic()
    while "ending the drain" not in worker.output():
        assert time.monotonic() - pressed < 20, worker.output()
        worker.signal("TERM")
        time.sleep(0.2)
    assert worker.wait(20) == 0
    took = time.monotonic() - pressed
    assert took < 15, took  # -t 0 and the 3 s interrupt grace, not the job's minute
    output = worker.output()
    assert "stopping: waiting up to 0 s for 1 running job(s)" in output
    back = [json.loads(x) for x in r.lrange("queue:default", 0, -1)]
    assert [job["class"] for job in back] == ["Sys::Gated"]  # back, not lost
    assert r.llen("drain:cut:done") == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_health_with_no_port_listens_on_7434_and_a_given_port_still_wins(
        config: wurk.Config, r: redis.Redis, start_worker: StartWorker) -> None:
    from wurk.cli.worker import build_config

    assert build_config({"health": True})[0].health_port == 7434
    assert build_config({"health_host": "0.0.0.0"})[0].health_port == 7434
    assert build_config({"health": True, "health_port": 9000})[0].health_port == 9000
    assert build_config({})[0].health_port is None  # off unless asked for

    port = _free_port()
    worker = start_worker("--health", "--health-port", str(port))

    def status() -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as reply:
                return int(reply.status)
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return 0

    wait_for(lambda: status() == 200, message="the health check answering 200")
    worker.signal("TERM")
    assert worker.wait(20) == 0
