"""Prometheus (``wurk[prometheus]``): the cluster's numbers on the dashboard, a worker's own
on its ``--metrics-port``. Every name starts with ``wurk_``.

1. ``ClusterCollector`` reads Redis on every scrape (never one process's memory), so any
   dashboard reports the whole cluster: ``wurk_processed_total``, ``wurk_failed_total``,
   ``wurk_enqueued``, ``wurk_scheduled``, ``wurk_retries`` (the retry set), ``wurk_dead``,
   ``wurk_busy``, ``wurk_processes``, ``wurk_queue_size{queue}``,
   ``wurk_queue_latency_seconds{queue}``, ``wurk_queue_paused{queue}``,
   ``wurk_reaper_recoveries_total`` and ``wurk_poison_kills_total``.
2. ``WorkerExporter`` is one worker process's figures, served by prometheus-client's own
   HTTP server on its thread: ``wurk_job_duration_seconds{job,queue}`` (a histogram of
   successful executions, on Sidekiq's bucket bounds), ``wurk_jobs_executed_total`` and
   ``wurk_jobs_failed_total{job,queue}``, ``wurk_jobs_recovered_total{queue}`` and
   ``wurk_jobs_poisoned_total{queue}`` (this process's reaper), ``wurk_redis_outages_total``
   and ``wurk_redis_outage{component}`` (1 while it lasts), ``wurk_busy_threads`` and
   ``wurk_concurrency``. Job names past ``MAX_JOB_LABELS`` are counted as ``other``: a
   payload's ``wrapped`` name is anyone's to write, a label set must stay bounded. So are
   the reaper's queues past ``MAX_QUEUE_LABELS``: read from in-flight list names, every
   queue's (per-tenant queues, or anyone's) at the hourly full sweep.
3. A worker serving several shards (``shard_label``) counts every shard's parts: each
   outage series also carries ``shard`` (a component is in every shard: each has its
   heartbeat), and ``wurk_busy_threads``, ``wurk_concurrency`` and ``wurk_jobs_stuck`` are
   the whole process's. A worker of one shard has no ``shard`` label.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from ..api import Stats
from ..config import Config
from ..errors import ConfigError
from ..hosts import HostNames, server_class
from ..runtime.outage import Outage
from ..stored import Invalid, count
from .tracking import BUCKET_BOUNDS, NAME_LIMIT, cut_name, stored_name

__all__ = ["ClusterCollector", "WorkerExporter", "cluster_exposition", "require_client"]

MAX_JOB_LABELS = 500
MAX_QUEUE_LABELS = 500
# A scrape connection that sends no request within this long is closed (as the health
# check's): each open connection holds a thread.
CLIENT_TIMEOUT = 5.0
OTHER = "other"
DURATION_BUCKETS = tuple(bound / 1000 for bound in BUCKET_BOUNDS)


def require_client() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise ConfigError("the Prometheus endpoint needs prometheus-client: "
                          "pip install 'wurk[prometheus]'") from None
    return prometheus_client


class ClusterCollector:
    """Cluster-wide figures read from Redis at each scrape."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def describe(self) -> list[Any]:
        return []  # no Redis reads when registered; families are known at collect time

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        stats = Stats(self.config)
        # A counter Redis holds unreadable (hand-edited) is left out, not a failed scrape.
        yield CounterMetricFamily("wurk_processed", "Jobs processed, every process together",
                                  value=_valid(stats.processed()))
        yield CounterMetricFamily("wurk_failed", "Executions that raised, every process "
                                  "together (each failed retry counts)",
                                  value=_valid(stats.failed()))
        for name, help_text, value in (
                ("wurk_enqueued", "Jobs waiting in every queue", stats.enqueued()),
                ("wurk_scheduled", "Jobs in the scheduled set", stats.scheduled_size()),
                ("wurk_retries", "Jobs in the retry set", stats.retry_size()),
                ("wurk_dead", "Jobs in the dead set", stats.dead_size()),
                ("wurk_busy", "Jobs running now", stats.busy()),
                ("wurk_processes", "Worker processes alive", stats.processes_size())):
            yield GaugeMetricFamily(name, help_text, value=_valid(value))
        yield from self._queues(stats)
        recovered, poisoned, cancelled = self._reliability()
        yield CounterMetricFamily("wurk_reaper_recoveries", "Jobs the reapers returned from "
                                  "dead processes to their queues", value=recovered)
        yield CounterMetricFamily("wurk_poison_kills", "Jobs killed as poison pills",
                                  value=poisoned)
        yield CounterMetricFamily("wurk_jobs_cancelled", "Jobs wurk.cancel removed or stopped",
                                  value=cancelled)

    def _queues(self, stats: Stats) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        size = GaugeMetricFamily("wurk_queue_size", "Jobs waiting", labels=["queue"])
        latency = GaugeMetricFamily("wurk_queue_latency_seconds",
                                    "Age of the oldest waiting job", labels=["queue"])
        paused = GaugeMetricFamily("wurk_queue_paused", "1 while the queue is paused",
                                   labels=["queue"])
        labels: set[str] = set()
        for queue in stats.queue_summaries():
            name = _unique(queue.name, labels)  # anyone's to write: a label must stay small
            if not isinstance(queue.size, Invalid):
                size.add_metric([name], queue.size)
            if not isinstance(queue.latency, Invalid):
                latency.add_metric([name], queue.latency)
            paused.add_metric([name], 1 if queue.paused else 0)
        yield from (size, latency, paused)

    def _reliability(self) -> tuple[int, int, int]:
        keys = self.config.keys
        values = self.config.pool("api").run(
            lambda r: r.mget(keys.stat_recovered, keys.stat_poisoned, keys.stat_cancelled),
            idempotent=True)
        return _whole(values[0]), _whole(values[1]), _whole(values[2])


def _unique(name: str, taken: set[str]) -> str:
    """``name`` cut as metrics keep it, told apart from the labels already ``taken``: two
    long queue names that share their first 200 characters would otherwise make two series
    of one label set, a duplicate a scraper rejects."""
    label = cut = cut_name(name)
    tries = 0
    while label in taken:
        seed = f"{tries}:{name}".encode("utf-8", "replace")
        label = f"{cut[:NAME_LIMIT - 14]}…{hashlib.blake2b(seed, digest_size=6).hexdigest()}"
        tries += 1
    taken.add(label)
    return label


def _valid(value: float | Invalid) -> float | None:
    return None if isinstance(value, Invalid) else value


def _whole(value: Any) -> int:
    found = count(value)
    return 0 if isinstance(found, Invalid) else found  # a hand-edited counter reads 0


def cluster_exposition(config: Config, accept: str = "") -> tuple[bytes, str]:
    """The cluster's figures in the text format the scraper asked for; (body, type)."""
    client = require_client()
    registry = client.CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector(config))
    encode, content_type = client.exposition.choose_encoder(accept)
    return encode(registry), content_type


class _Process:
    """This process's gauges and outage counts, read at scrape time."""

    def __init__(self, outages: Callable[[], Sequence[tuple[str, Outage]]],
                 busy: Callable[[], int], concurrency: int,
                 stuck: Callable[[], int] | None = None, shard_label: bool = False) -> None:
        self._outages, self._busy, self._concurrency = outages, busy, concurrency
        self._stuck = stuck
        self._shard_label = shard_label

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        labels = ["component", "shard"] if self._shard_label else ["component"]
        total = CounterMetricFamily("wurk_redis_outages", "Redis outages this process rode "
                                    "out, per component", labels=labels)
        now = GaugeMetricFamily("wurk_redis_outage", "1 while the component cannot reach "
                                "Redis", labels=labels)
        for shard, outage in self._outages():
            values = [outage.component, shard] if self._shard_label else [outage.component]
            total.add_metric(values, outage.count)
            now.add_metric(values, 1 if outage.active else 0)
        yield from (total, now)
        yield GaugeMetricFamily("wurk_busy_threads", "Jobs this process runs now",
                                value=self._busy())
        yield GaugeMetricFamily("wurk_concurrency", "Processor threads of this process",
                                value=self._concurrency)
        if self._stuck is not None:
            yield GaugeMetricFamily("wurk_jobs_stuck", "Jobs running past a time limit or a "
                                    "cancel they were told of (in C code?)",
                                    value=self._stuck())


class WorkerExporter:
    """One worker's metrics and the HTTP server that serves them."""

    def __init__(self, *, outages: Callable[[], Sequence[tuple[str, Outage]]],
                 busy: Callable[[], int], concurrency: int,
                 stuck: Callable[[], int] | None = None, shard_label: bool = False) -> None:
        """``outages`` gives (shard, outage) pairs; ``shard_label`` (a worker serving
        several shards, point 3) puts the shard in a label of their series."""
        client = require_client()
        self.registry = registry = client.CollectorRegistry(auto_describe=False)
        self.duration = client.Histogram(
            "wurk_job_duration_seconds", "Time of successful executions",
            ["job", "queue"], buckets=DURATION_BUCKETS, registry=registry)
        self.executed = client.Counter("wurk_jobs_executed", "Executions, failed or not",
                                       ["job", "queue"], registry=registry)
        self.failed = client.Counter("wurk_jobs_failed", "Executions that raised",
                                     ["job", "queue"], registry=registry)
        self.recovered_jobs = client.Counter(
            "wurk_jobs_recovered", "Jobs this process's reaper returned from dead processes",
            ["queue"], registry=registry)
        self.poisoned_jobs = client.Counter("wurk_jobs_poisoned", "Jobs killed as poison "
                                            "pills by this process", ["queue"],
                                            registry=registry)
        registry.register(_Process(outages, busy, concurrency, stuck, shard_label))
        self._label = _Bounded(MAX_JOB_LABELS).label  # called on every job
        self._queues = _Bounded(MAX_QUEUE_LABELS)  # the reaper's (the jobs' are configured)
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def observe(self, name: str, queue: str, payload: Mapping[str, Any], ms: float | None,
                error: BaseException | None) -> None:
        # ``name`` is cut at its source (``tracking.job_name``); a queue a Ruby process
        # named is cut here, so no label holds a megabyte.
        labels = (self._label(name), queue[:NAME_LIMIT])
        self.executed.labels(*labels).inc()
        if error is not None:
            self.failed.labels(*labels).inc()
        elif ms is not None:
            self.duration.labels(*labels).observe(ms / 1000)

    def recovered(self, queue: str, count: int) -> None:
        self.recovered_jobs.labels(self._queues.label(stored_name(queue))).inc(count)

    def poisoned(self, pill: Mapping[str, Any]) -> None:
        self.poisoned_jobs.labels(self._queues.label(stored_name(pill.get("queue")))).inc()

    # -- the endpoint -----------------------------------------------------------------------
    def start(self, host: str, port: int, hosts: HostNames | None = None) -> int:
        """Serve on ``host:port`` (0 picks a free port); returns the port. A scrape whose
        ``Host`` is a name other than a loopback or allowed one is refused (403); one by
        IP address is served (``HostNames.allows_probe``)."""
        client = require_client()
        app = _guarded(client.make_wsgi_app(self.registry),
                       hosts if hosts is not None else HostNames())
        self._server = make_server(host, port, app, server_class(_ThreadingServer, host),
                                   handler_class=_Quiet)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="wurk-metrics", daemon=True)
        self._thread.start()
        return int(self._server.server_address[1])

    def stop(self, timeout: float = 5.0) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout)


class _Bounded:
    """The values one label takes: the first ``limit`` as they are, any later one ``other``."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._taken: set[str] = set()
        self._lock = threading.Lock()

    def label(self, name: str) -> str:
        if name in self._taken:  # the usual case, on every job: no lock
            return name
        with self._lock:
            if len(self._taken) >= self._limit:
                return OTHER
            self._taken.add(name)
        return name


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went quiet (``CLIENT_TIMEOUT``) or away is no error to print."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Quiet(WSGIRequestHandler):
    timeout = CLIENT_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes come every few seconds: not one log line each."""


def _guarded(app: Any, hosts: HostNames) -> Any:
    def serve(environ: dict[str, Any], start_response: Any) -> Any:
        if not hosts.allows_probe(environ.get("HTTP_HOST")):
            start_response("403 Forbidden", [("Content-Type", "text/plain")])
            return [b"Host not allowed (wurk web_allowed_hosts)\n"]
        return app(environ, start_response)

    return serve
