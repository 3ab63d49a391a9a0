"""The observability parts without Redis: settings, the health probe, label bounds, extras."""

from __future__ import annotations

import socket
import sys

import pytest

import wurk
from wurk.errors import ConfigError
from wurk.metrics.health import WorkerHealth
from wurk.metrics.instruments import _listen
from wurk.runtime.outage import Outage


@pytest.mark.parametrize(("settings", "message"), [
    ({"health_port": 70000}, "health_port must be a TCP port"),
    ({"metrics_port": "9191"}, "metrics_port must be a TCP port"),
    ({"history_interval": 0}, "history_interval must be a number of seconds > 0"),
    ({"retain_history": -1}, "retain_history must be a number of seconds ≥ 0"),
    ({"statsd": "host:port"}, "statsd must be HOST:PORT"),
    ({"statsd_tags": "env:prod"}, "statsd_tags must be a list of text"),
    ({"metrics": "yes"}, "metrics must be true or false"),
])
def test_bad_settings_are_named(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        wurk.Config.from_mapping(settings)


def probe(*, age: float | None = 1.0, quiet: bool = False, stopping: bool = False,
          outages: tuple[Outage, ...] = (),
          stalled: tuple[str, ...] = ()) -> tuple[bool, dict[str, object]]:
    """A worker of one shard's probe."""
    return WorkerHealth(beat_ages=lambda: [("default", age)], interval=10.0,
                        quiet=lambda: quiet, stopping=lambda: stopping,
                        outages=lambda: [("default", outage) for outage in outages],
                        stalled=lambda: [("default", name) for name in stalled])()


def test_the_health_probe_says_why() -> None:
    config = wurk.Config()
    cut = Outage(config, "fetch (capsule default)")
    cut.failed(ConnectionError("reset"))
    assert probe() == (True, {"beat_age": 1.0, "status": "ok"})
    assert probe(age=None)[1]["status"] == "heartbeat stale"  # before the first beat
    assert probe(age=31.0)[1]["status"] == "heartbeat stale"
    assert probe(outages=(cut,)) == (False, {"beat_age": 1.0, "status": "redis unreachable",
                                             "failing": ["fetch (capsule default)"]})
    assert probe(stalled=("mail",)) == (False, {"beat_age": 1.0, "status": "processors dead",
                                                "capsules": ["mail"]})
    assert probe(outages=(cut,), stalled=("mail",))[1]["status"] == "redis unreachable"
    assert probe(quiet=True)[1]["status"] == "quiet"
    assert probe(stopping=True, quiet=True)[1]["status"] == "stopping"
    cut.ended()
    assert probe(outages=(cut,))[0] is True and cut.count == 1


def test_a_sharded_worker_s_probe_names_the_shard_at_fault() -> None:
    """metrics.md: a worker serving several shards is healthy only while every shard's
    heartbeat lands and every shard's capsules fetch; what fails is named with its shard
    ("<shard>: <part>", and ``shards``), ``beat_age`` is the oldest shard's."""
    config = wurk.Config()
    home_beat, eu_beat = Outage(config, "heartbeat"), Outage(config, "heartbeat")
    eu_fetch = Outage(config, "fetch (capsule europe)")
    ages: dict[str, float | None] = {"default": 1.0, "eu": 2.0}
    stalled: list[tuple[str, str]] = []
    sharded = WorkerHealth(
        beat_ages=lambda: list(ages.items()), interval=10.0, quiet=lambda: False,
        stopping=lambda: False, stalled=lambda: stalled,
        outages=lambda: [("default", home_beat), ("eu", eu_beat), ("eu", eu_fetch)],
        sharded=True)
    assert sharded() == (True, {"beat_age": 2.0, "status": "ok"})
    eu_beat.failed(ConnectionError("refused"))
    eu_fetch.failed(ConnectionError("refused"))
    assert sharded() == (False, {"beat_age": 2.0, "status": "redis unreachable",
                                 "failing": ["eu: heartbeat", "eu: fetch (capsule europe)"],
                                 "shards": ["eu"]})
    eu_beat.ended()
    eu_fetch.ended()
    stalled.append(("eu", "europe"))
    assert sharded()[1] == {"beat_age": 2.0, "status": "processors dead",
                            "capsules": ["eu: europe"], "shards": ["eu"]}
    stalled.clear()
    ages["eu"] = 31.0
    assert sharded()[1] == {"beat_age": 31.0, "status": "heartbeat stale", "shards": ["eu"]}
    ages["eu"] = None  # its first beat not written yet
    assert sharded()[1] == {"beat_age": None, "status": "heartbeat stale", "shards": ["eu"]}


def test_a_port_in_use_names_the_setting() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    from wurk.metrics.health import HealthServer

    with pytest.raises(ConfigError, match=f"health_port {port}: cannot listen"):
        _listen("health_port", "127.0.0.1", port,
                lambda: HealthServer("127.0.0.1", port, lambda: (True, {})))
    taken.close()


@pytest.mark.parametrize("server", ["health", "metrics"])
def test_the_listeners_bind_an_ipv6_address(server: str) -> None:
    """``--health-host ::1`` (or ``--metrics-host``) failed with "Address family not
    supported" and was told to choose another port: both listeners were IPv4 only."""
    import http.client

    from wurk.metrics.health import HealthServer
    from wurk.metrics.prometheus import WorkerExporter

    if server == "health":
        health = HealthServer("::1", 0, lambda: (True, {"status": "ok"})).start()
        port, stop = health.port, health.stop
    else:
        exporter = WorkerExporter(outages=lambda: (), busy=lambda: 0, concurrency=1)
        port, stop = exporter.start("::1", 0), exporter.stop
    try:
        conn = http.client.HTTPConnection("::1", port, timeout=5)
        try:
            conn.request("GET", "/")
            assert conn.getresponse().status == 200
        finally:
            conn.close()
    finally:
        stop()


def test_an_address_that_cannot_be_bound_is_not_called_a_busy_port() -> None:
    from wurk.metrics.health import HealthServer

    with pytest.raises(ConfigError) as caught:  # TEST-NET-1: never this machine's
        _listen("health_port", "192.0.2.1", 0,
                lambda: HealthServer("192.0.2.1", 0, lambda: (True, {})))
    message = str(caught.value)
    assert "health_host 192.0.2.1" in message and "another port" not in message


def test_job_labels_are_bounded() -> None:
    from wurk.metrics import prometheus

    exporter = prometheus.WorkerExporter(outages=list, busy=lambda: 0, concurrency=1)
    for n in range(prometheus.MAX_JOB_LABELS + 10):
        exporter.observe(f"Job{n}", "q", {}, 1.0, None)
    assert exporter.executed.labels("other", "q")._value.get() == 10
    assert exporter.executed.labels("Job0", "q")._value.get() == 1


def test_reaper_queue_labels_are_cut_as_other_names() -> None:
    """metrics.md: a queue name past 200 characters "is cut to 200 in ... labels". The
    reaper's recovered and poisoned counters took the stored queue whole (10,000
    characters per series here), and a lone surrogate failed every later scrape."""
    from prometheus_client import generate_latest

    from wurk.metrics import prometheus

    exporter = prometheus.WorkerExporter(outages=list, busy=lambda: 0, concurrency=1)
    exporter.recovered("r" * 10_000, 2)
    exporter.poisoned({"klass": "Poison", "queue": "p" * 10_000})
    exporter.poisoned({"klass": "Poison", "queue": "bad\ud800"})
    text = generate_latest(exporter.registry).decode()
    lines = [line for line in text.splitlines() if "_total{" in line]
    assert len(lines) == 3 and all(len(line) < 300 for line in lines)
    assert 'wurk_jobs_poisoned_total{queue="bad?"} 1.0' in text


def test_reaper_queue_labels_are_bounded() -> None:
    """The reaper's queues are read from in-flight list names, every queue's once an hour
    (per-tenant queues, or anyone's to write): each new one added a series for the life of
    the process. Past ``MAX_QUEUE_LABELS`` they are counted as ``other``, as job names are."""
    from prometheus_client import generate_latest

    from wurk.metrics import prometheus

    exporter = prometheus.WorkerExporter(outages=list, busy=lambda: 0, concurrency=1)
    for n in range(prometheus.MAX_QUEUE_LABELS + 10):
        exporter.recovered(f"tenant-{n}", 1)
    for n in range(prometheus.MAX_QUEUE_LABELS + 5):
        exporter.poisoned({"klass": "Poison", "queue": f"tenant-{n}"})
    text = generate_latest(exporter.registry).decode()
    recovered = [line for line in text.splitlines()
                 if line.startswith("wurk_jobs_recovered_total{")]
    poisoned = [line for line in text.splitlines()
                if line.startswith("wurk_jobs_poisoned_total{")]
    assert len(recovered) == len(poisoned) == prometheus.MAX_QUEUE_LABELS + 1
    assert 'wurk_jobs_recovered_total{queue="other"} 10.0' in recovered
    assert 'wurk_jobs_poisoned_total{queue="other"} 5.0' in poisoned
    assert 'wurk_jobs_recovered_total{queue="tenant-0"} 1.0' in recovered


def test_a_swarm_child_opens_no_health_or_metrics_port(
        caplog: pytest.LogCaptureFixture) -> None:
    """metrics.md: the health check and a worker's Prometheus port are "not offered by
    wurk swarm" (each child would need its own port): a child (a launcher with a slot)
    binds neither and says why, once."""
    from types import SimpleNamespace

    from wurk.metrics.instruments import Instruments

    config = wurk.Config(metrics_port=0, health_port=0, retain_history=0)
    instruments = Instruments(SimpleNamespace(config=config, slot=2))  # type: ignore[arg-type]
    with caplog.at_level("WARNING", logger="wurk"):
        instruments.start()
    try:
        assert instruments.exporter is None and instruments.health is None
        assert [r.getMessage() for r in caplog.records].count(
            "health_port and metrics_port are ignored in a swarm's children (they would "
            "share one port); run wurk worker for them") == 1
    finally:
        instruments.stop()


def test_missing_extras_say_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from wurk.metrics import prometheus
    from wurk.metrics.statsd import StatsdSink

    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ConfigError, match=r"pip install 'wurk\[prometheus\]'"):
        prometheus.require_client()
    monkeypatch.setitem(sys.modules, "datadog.dogstatsd.base", None)
    with pytest.raises(ConfigError, match=r"pip install 'wurk\[statsd\]'"):
        StatsdSink(wurk.Config(statsd="127.0.0.1:8125"))


@pytest.mark.parametrize("server", ["health", "metrics"])
def test_a_foreign_host_name_is_refused_and_an_ip_address_served(server: str) -> None:
    """metrics.md: on the health port and the worker's metrics port "a Host name other than
    a loopback or web_allowed_hosts one is refused with 403, an IP address always
    answered" (a rebinding page's name is refused; a kubelet or a scraper by IP is not)."""
    import http.client

    from wurk.hosts import HostNames
    from wurk.metrics.health import HealthServer
    from wurk.metrics.prometheus import WorkerExporter

    hosts = HostNames(["jobs.example.com"])
    if server == "health":
        health = HealthServer("127.0.0.1", 0, lambda: (True, {"status": "ok"}), hosts).start()
        port, stop = health.port, health.stop
    else:
        exporter = WorkerExporter(outages=lambda: (), busy=lambda: 0, concurrency=1)
        port, stop = exporter.start("127.0.0.1", 0, hosts), exporter.stop

    def status(host: str) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            conn.putrequest("GET", "/", skip_host=True)
            conn.putheader("Host", host)
            conn.endheaders()
            return conn.getresponse().status
        finally:
            conn.close()

    try:
        for refused in ("evil.example", f"evil.example:{port}", "example.com"):
            assert status(refused) == 403, refused
        for served in (f"localhost:{port}", f"127.0.0.1:{port}", "[::1]", "jobs.example.com",
                       "10.1.2.3:7434", "192.168.0.9", "[fd00::1]:9191"):
            assert status(served) == 200, served
    finally:
        stop()


@pytest.mark.parametrize("server", ["health", "metrics"])
def test_a_client_that_sends_nothing_is_let_go(server: str,
                                               capfd: pytest.CaptureFixture[str]) -> None:
    """The worker's metrics port kept a thread for each connection that sent no request, for
    as long as the client kept it open: a scanner's or a stuck scraper's idle connections
    piled up threads without end. Both listeners close such a connection after
    ``CLIENT_TIMEOUT`` seconds (real time: the kernel's socket timeout), saying nothing."""
    from wurk.metrics.health import CLIENT_TIMEOUT, HealthServer
    from wurk.metrics.prometheus import WorkerExporter

    if server == "health":
        health = HealthServer("127.0.0.1", 0, lambda: (True, {})).start()
        port, stop = health.port, health.stop
    else:
        exporter = WorkerExporter(outages=lambda: (), busy=lambda: 0, concurrency=1)
        port, stop = exporter.start("127.0.0.1", 0), exporter.stop
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=6 * CLIENT_TIMEOUT) as idle:
            assert idle.recv(1) == b""  # closed by the server, well before this side's timeout
    finally:
        stop()
    assert "Traceback" not in capfd.readouterr().err
