"""The Metrics and History tabs and the dashboard's Prometheus endpoint."""

from __future__ import annotations

import datetime as dt
import sys
import time

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

import wurk
from tests.helpers.metrics import tracked
from tests.web.conftest import XSS, seed_process, seed_sets
from wurk import deploy
from wurk.metrics.history import HistorySampler

HTML = {"accept": "text/html,application/xhtml+xml"}


def flushed(config: wurk.Config, minutes_ago: int = 0, **jobs: tuple[list[float], int]) -> None:
    tracker = tracked(**jobs)
    when = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=minutes_ago)
    tracker.flush(config.pool(), config.keys, now=when)


def test_the_metrics_page_lists_jobs_sorted_and_filtered(config: wurk.Config,
                                                         client: TestClient) -> None:
    flushed(config, HardJob=([10.0] * 4, 2), EasyJob=([1.0] * 9, 0))
    flushed(config, 3, HardJob=([30.0], 0))
    page = client.get("/metrics", headers=HTML)
    assert page.status_code == 200 and 'aria-current="page">Metrics' in page.text
    text = page.text
    assert text.index('data-job="EasyJob"') < text.index('data-job="HardJob"')  # by executions
    assert '<td class="num" data-metric="processed">7</td>' in text
    assert '<polyline class="s0"' in text
    by_name = client.get("/metrics/?sort=name&direction=asc").text
    assert by_name.index('data-job="EasyJob"') < by_name.index('data-job="HardJob"')
    by_failures = client.get("/metrics/?sort=failed").text
    assert by_failures.index('data-job="HardJob"') < by_failures.index('data-job="EasyJob"')
    only = client.get("/metrics/?substr=hard").text
    assert 'data-job="HardJob"' in only and 'data-job="EasyJob"' not in only
    assert client.get("/metrics/?period=24h").status_code == 200
    assert client.get("/metrics/?period=nonsense&sort=%3Cx%3E").status_code == 200


def test_a_jobs_page_has_counts_a_histogram_and_deploy_marks(config: wurk.Config,
                                                              client: TestClient) -> None:
    flushed(config, 2, **{"Billing::Invoice": ([5.0, 25.0, 40.0, 2000.0], 1)})
    deploy.mark("v2 <b>deploy</b>", config=config,
                at=dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=1))
    page = client.get("/metrics/Billing%3A%3AInvoice", headers=HTML)
    assert page.status_code == 200
    assert '<span class="value" data-metric="processed">5</span>' in page.text
    assert '<span class="value" data-metric="failed">1</span>' in page.text
    assert 'data-bucket="20ms" data-count="1"' in page.text
    assert 'data-bucket="30ms" data-count="1"' in page.text
    assert 'data-bucket="2.5s" data-count="1"' in page.text
    assert '<line class="mark"' in page.text
    assert "v2 &lt;b&gt;deploy&lt;/b&gt;" in page.text and "<b>deploy" not in page.text
    long = client.get("/metrics/Billing%3A%3AInvoice?period=72h").text
    assert "Histograms are kept 8 hours" in long


def test_hostile_stored_metrics_never_break_a_page(config: wurk.Config, r: redis.Redis,
                                                   client: TestClient) -> None:
    now = dt.datetime.now(dt.timezone.utc)
    minute = config.keys.metrics_minute(now)
    r.hset(minute, mapping={f"{XSS}|p": "3", f"{XSS}|ms": "x" * 10, "Bad|f": "-9",
                            "|p": "1", "no-bar": "1", "Bad|p": "1e400"})
    r.lpush(config.keys.metrics_ten_minutes(now), "a list")
    r.sadd(config.keys.histogram(XSS, now), "a set")
    r.hset(config.keys.deploy_marks(now.date()), mapping={"garbage": XSS, now.isoformat(): XSS})
    for path in ("/metrics", "/metrics/?period=24h", f"/metrics/{XSS}",
                 "/metrics/%3Cscript%3E?period=8h", "/metrics/Bad"):
        page = client.get(path, headers=HTML)
        assert page.status_code == 200, path
        assert "<script>alert" not in page.text
    listed = client.get("/metrics", headers=HTML).text
    assert 'id="metrics-invalid"' in listed and "invalid (xxxxxxxxxx)" in listed
    assert "invalid (1e400)" in client.get("/metrics/Bad", headers=HTML).text


def test_the_history_tab_charts_what_the_sampler_kept(config: wurk.Config, r: redis.Redis,
                                                      client: TestClient) -> None:
    assert "No samples yet" in client.get("/history/").text
    seed_sets(config)
    seed_process(r)
    # Intervals are numbered by Redis's clock; day-long ones, so two looks a moment apart
    # fall in the same one. The next interval is made by marking the claimed one as older.
    cfg = wurk.Config(redis_url=config.redis_url, history_interval=86400.0)
    sampler = HistorySampler(cfg)
    first = sampler.tick()
    assert first is not None and first["retries"] == 3 and first["dead"] == 3
    assert sampler.tick() is None  # the same interval: another process's turn was taken
    r.incrby("stat:processed", 40)
    r.set(cfg.keys.history_lock, "0")  # the last claim was for an interval long past
    assert sampler.tick() is not None
    r.zadd(config.keys.history, {"not json": time.time(), '{"processed": "NaN"}': time.time()})
    page = client.get("/history/")
    assert page.status_code == 200 and "No samples yet" not in page.text
    assert page.text.count('<polyline class="processed"') == 1
    # Two real samples, and the object with a bad number (read as zeros); not the non-JSON.
    assert "3 samples shown" in page.text
    cfg.close()


def test_prometheus_scrapes_the_cluster_from_redis(config: wurk.Config, r: redis.Redis,
                                                   client: TestClient) -> None:
    seed_sets(config, 2)
    seed_process(r, busy=3)
    r.set("stat:processed", 1234)
    r.set("stat:failed", 56)
    r.set("wurk:stat:recovered", 7)
    r.set("wurk:stat:poisoned", "junk")  # a hand-edited counter reads as 0, not a 500
    r.sadd("queues", "default", "low")
    r.lpush("queue:low", *["{}"] * 4)
    reply = client.get("/metrics", headers={"accept": "text/plain;version=0.0.4;q=0.5,*/*"})
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(reply.text)
               for s in family.samples}
    assert samples["wurk_processed_total", ()] == 1234
    assert samples["wurk_failed_total", ()] == 56
    assert samples["wurk_retries", ()] == 2 and samples["wurk_dead", ()] == 2
    assert samples["wurk_scheduled", ()] == 2
    assert samples["wurk_busy", ()] == 3 and samples["wurk_processes", ()] == 1
    assert samples["wurk_queue_size", (("queue", "low"),)] == 4
    assert samples["wurk_queue_size", (("queue", "default"),)] == 0
    assert samples["wurk_enqueued", ()] == 4
    assert samples["wurk_reaper_recoveries_total", ()] == 7
    assert samples["wurk_poison_kills_total", ()] == 0
    open_metrics = client.get("/metrics", headers={"accept": "application/openmetrics-text"})
    assert open_metrics.headers["content-type"].startswith("application/openmetrics-text")


def test_without_the_prometheus_extra_the_dashboards_metrics_answers_501_saying_so(
        config: wurk.Config, client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """metrics.md: "the dashboard's /metrics answers 501 saying so" when prometheus-client
    is missing; the page for a browser still draws."""
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # its import now fails
    reply = client.get("/metrics", headers={"accept": "text/plain;version=0.0.4"})
    assert reply.status_code == 501
    assert reply.text == ("the Prometheus endpoint needs prometheus-client: "
                          "pip install 'wurk[prometheus]'")
    assert client.get("/metrics", headers=HTML).status_code == 200
