"""A real worker's execution metrics, health check and Prometheus endpoint."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.proxy import FaultProxy
from tests.helpers.server import Server
from tests.system import worker_jobs as jobs
from tests.system.conftest import Worker, wait_for
from wurk.metrics import Query

StartWorker = Callable[..., Worker]


def listening_port(worker: Worker, what: str) -> int:
    found: list[int] = []

    def seen() -> bool:
        match = re.search(rf"{what} on port (\d+)", worker.output())
        if match:
            found.append(int(match.group(1)))
        return bool(found)

    wait_for(seen, message=f"the {what} port in the log")
    return found[0]


def get(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_a_workers_jobs_land_in_sidekiqs_metrics_keys(
        config: wurk.Config, r: redis.Redis, start_worker: StartWorker) -> None:
    start_worker("-c", "4")
    jobs.incr.perform_bulk([["obs:count"] for _ in range(30)])
    for n in range(3):
        jobs.Failing.set(retry=False).perform_async(f"obs:fail:{n}")
    wait_for(lambda: r.get("obs:count") == "30" and
             all(r.get(f"obs:fail:{n}") == "1" for n in range(3)), message="the jobs")

    def flushed() -> bool:
        found = Query(config).top_jobs(minutes=5).jobs
        return "Sys::Incr" in found and "Sys::Fail" in found and \
            found["Sys::Incr"].total_processed == 30 and found["Sys::Fail"].total_processed == 3

    wait_for(flushed, message="the metrics flushed with a heartbeat")
    result = Query(config).for_job("Sys::Incr", minutes=5).jobs["Sys::Incr"]
    assert result.total_failed == 0 and result.histogram is not None
    assert sum(result.histogram) == 30
    fail = Query(config).top_jobs(minutes=5).jobs["Sys::Fail"]
    assert (fail.total_processed, fail.total_failed, fail.total_ms) == (3, 3, 0)


def test_health_flips_to_503_when_redis_is_cut_and_back(
        redis_server: Server, r: redis.Redis, start_worker: StartWorker,
        monkeypatch: pytest.MonkeyPatch) -> None:
    with FaultProxy(redis_server.port) as proxy:
        monkeypatch.setenv("REDIS_URL", proxy.url)
        worker = start_worker("--health-port", "0")
        port = listening_port(worker, "health check")
        wait_for(lambda: get(port)[0] == 200, message="healthy")
        assert get(port)[1]["status"] == "ok"
        proxy.drop()  # no new connection gets through…
        proxy.cut()  # …and every open one is reset
        wait_for(lambda: get(port)[0] == 503, timeout=15, message="unhealthy when cut")
        assert get(port)[1]["status"] in ("redis unreachable", "heartbeat stale")
        proxy.restore()
        wait_for(lambda: get(port)[0] == 200, timeout=20, message="healthy again")
        worker.signal("TSTP")
        wait_for(lambda: get(port)[1]["status"] == "quiet", message="quiet")
        assert get(port)[0] == 503
        worker.signal("TERM")
        assert worker.wait(20) == 0


def test_the_workers_prometheus_endpoint(
        config: wurk.Config, r: redis.Redis, start_worker: StartWorker) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    worker = start_worker("--metrics-port", "0")
    port = listening_port(worker, "Prometheus metrics")
    jobs.incr.perform_bulk([["obs:count"] for _ in range(12)])
    jobs.Failing.set(retry=False).perform_async("obs:fail")
    wait_for(lambda: r.get("obs:count") == "12" and r.get("obs:fail") == "1",
             message="the jobs")
    incr = (("job", "Sys::Incr"), ("queue", "default"))
    fail = (("job", "Sys::Fail"), ("queue", "default"))
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def scraped() -> bool:
        """The job's own INCR comes before its failure reaches the middleware: scrape until
        the failure is counted."""
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        samples.clear()
        samples.update({(s.name, tuple(sorted(s.labels.items()))): s.value
                        for family in text_string_to_metric_families(text)
                        for s in family.samples})
        return samples.get(("wurk_jobs_failed_total", fail)) == 1

    wait_for(scraped, message="the failure counted")
    assert samples["wurk_jobs_executed_total", incr] == 12
    assert samples["wurk_jobs_executed_total", fail] == 1
    assert samples["wurk_jobs_failed_total", fail] == 1
    assert samples["wurk_job_duration_seconds_count", incr] == 12
    assert samples["wurk_job_duration_seconds_bucket", tuple(sorted((*incr, ("le", "+Inf"))))] == 12
    assert ("wurk_job_duration_seconds_count", fail) not in samples  # successes only
    assert samples["wurk_concurrency", ()] == 5
    assert samples["wurk_redis_outages_total", (("component", "heartbeat"),)] == 0
