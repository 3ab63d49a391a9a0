"""StatsD / DogStatsD: Sidekiq Pro's metric names and tags, sent over UDP (``wurk[statsd]``).

1. ``StatsdSink(config)`` is on when ``statsd = "host:port"`` is set. Its client is Datadog's
   ``DogStatsd`` (tags in the DogStatsD form, which StatsD servers with tag support read);
   the socket is connected once, so the name is resolved once, not per packet.
2. Per execution (an observer of the execution-metrics middleware): ``jobs.count``, then
   ``jobs.success`` + ``jobs.perform`` (ms) + ``jobs.perform_dist`` (a Datadog distribution,
   unless ``statsd_datadog_extensions`` is off), or ``jobs.failure`` tagged
   ``error_type:<class>``; tags ``worker:<job>`` and ``queue:<queue>``, plus whatever
   ``statsd_job_options(job, payload, queue)`` adds (``tags``, ``sample_rate``).
3. ``jobs.recovered.fetch`` per job the reaper recovers, ``jobs.poison`` per poison kill,
   ``jobs.expired`` per expiring job dropped unrun (tagged ``worker`` and ``queue``), and
   the history sampler's gauges (``processed``, ``failures``, ``enqueued``, ``retries``,
   ``dead``, ``scheduled``, ``busy``, ``queue.size`` per queue, ``queue.latency`` for
   ``default``) with those ``history_extra`` gives (``ExtraGauges``), one batch a tick.
   Names take ``statsd_prefix`` (``wurk``; ``sidekiq`` for Pro's dashboards).
4. ``jobs.recovered.push`` (``recovered_push``): Sidekiq Pro's count of pushes a client
   buffered while Redis was down and sent later, sent by the process whose reliable push
   (``wurk.client.reliable``) sent them.
5. Batches (``batch``): ``batch.created``, ``batch.complete``, ``batch.success``,
   ``batch.duration`` (ms from creation to success) and ``batch.duration_dist`` (its
   distribution, a Datadog extension), the two durations tagged with the ``tags`` of the
   batch's success callback options, sent by the process whose script call
   made the change. ``sink_for(config)`` is the one sink per configuration a process that
   is not a worker (an app creating batches) sends them through.
6. Sending never fails a job: a send error is dropped by the client (UDP is fire-and-forget);
   an agent that is not listening costs neither a warning nor a new lookup per packet.
   A name that does not resolve is looked up again at most every ``LOOKUP_RETRY`` seconds:
   packets in between are dropped, not each one a lookup (and a warning) on a job's thread.
"""

from __future__ import annotations

import math
import re
import socket
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from .. import payload as P
from ..config import Config, statsd_address
from ..errors import ConfigError, DecryptionError
from ..reporting import report_error
from .tracking import job_name, stored_name

__all__ = ["EXTRA_GAUGE_LIMIT", "ExtraGauges", "StatsdSink", "sink_for"]

LOOKUP_RETRY = 30.0
# ``history_extra`` sends at most this many gauges a tick: a hook looping over something
# unbounded (a row per customer) must not flood the agent every interval.
EXTRA_GAUGE_LIMIT = 100
MAX_GAUGE_NAME = 200
_NAME_BREAKS = re.compile(r"[:|@#,\s]")
_TAG_BREAKS = re.compile(r"[|#,\r\n]")
_now = time.monotonic
_client_class: type | None = None

_sinks: weakref.WeakKeyDictionary[Config, StatsdSink] = weakref.WeakKeyDictionary()
_sinks_lock = threading.Lock()


def sink_for(config: Config) -> StatsdSink:
    """This process's sink for ``config``, made on first use and shared (a worker's
    instruments and the batch events of the same configuration send through one socket).
    ``ConfigError`` when StatsD is off or its client is not installed."""
    with _sinks_lock:
        sink = _sinks.get(config)
        if sink is None:
            sink = _sinks[config] = StatsdSink(config)
        return sink


class _Datagram(socket.socket):
    """The client's connected UDP socket, quiet about an agent that is not listening: the
    kernel reports the ICMP "port unreachable" a datagram earned at the next send, and the
    client then logged a warning, closed the socket and looked the name up again (every
    other packet, on the job's thread, while an agent restarts). The packet is dropped, as
    UDP drops it, and the socket kept."""

    def send(self, data: Any, flags: int = 0) -> int:
        try:
            return super().send(data, flags)
        except ConnectionRefusedError:
            return 0


def _client() -> Any:
    """Datadog's ``DogStatsd``, but a failed name lookup is not repeated for every packet:
    the client looks the name up again on each send while it has no socket, and a lookup
    has no timeout (a DNS server that does not answer held every job's thread seconds per
    metric). Within ``LOOKUP_RETRY`` of a failed lookup a packet is dropped at once."""
    global _client_class
    try:
        from datadog.dogstatsd.base import DogStatsd
    except ImportError:
        raise ConfigError("statsd is set, but its client is not installed: "
                          "pip install 'wurk[statsd]'") from None
    if _client_class is not None and issubclass(_client_class, DogStatsd):
        return _client_class

    class Client(DogStatsd):
        _lookup_after = 0.0

        def get_socket(self, telemetry: bool = False) -> Any:
            if self.socket is None and self.socket_path is None and not telemetry:
                if _now() < self._lookup_after:
                    # The client drops a packet whose send times out, without a warning.
                    raise TimeoutError("StatsD name lookup failed; retried later")
                try:
                    return super().get_socket(telemetry)
                except (OSError, ValueError):
                    self._lookup_after = _now() + LOOKUP_RETRY
                    raise
            return super().get_socket(telemetry)

        @classmethod
        def _get_udp_socket(cls, host: Any, port: Any, timeout: Any) -> Any:
            found = super()._get_udp_socket(host, port, timeout)
            quiet = _Datagram(fileno=found.detach())
            quiet.settimeout(timeout)
            return quiet

    _client_class = Client
    return Client


def _rate(value: Any) -> float:
    """A ``sample_rate`` as the line protocol takes it: a number in (0, 1]. Anything else
    is 1 (sent every time): a text failed every metric of the job unseen, and NaN or 2 went
    out as ``|@nan`` / ``|@2``, which agents reject or scale the count down by."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 1.0
    rate = float(value)
    return rate if 0.0 < rate <= 1.0 else 1.0


class StatsdSink:
    """The process's StatsD client and the metrics wurk sends through it."""

    def __init__(self, config: Config) -> None:
        if config.statsd is None:
            raise ConfigError("StatsD is off: set statsd to 'host:port'")
        host, port = statsd_address(config.statsd)
        self.config = config
        self.client = _client()(host=host, port=port, namespace=config.statsd_prefix or None,
                                constant_tags=list(config.statsd_tags), disable_telemetry=True,
                                origin_detection_enabled=False)
        self._options = config.statsd_job_options
        self._distribution = config.statsd_datadog_extensions

    def close(self) -> None:
        self.client.close_socket()

    # -- per execution ----------------------------------------------------------------------
    def observe(self, name: str, queue: str, payload: P.Payload, ms: float | None,
                error: BaseException | None) -> None:
        tags, rate = self._tags(name, queue, payload)
        client = self.client
        client.increment("jobs.count", tags=tags, sample_rate=rate)
        if error is not None:
            failure = [*tags, f"error_type:{P.error_class_name(error)}"]
            client.increment("jobs.failure", tags=failure, sample_rate=rate)
            if isinstance(error, DecryptionError):  # an envelope no key opens (wurk.crypto)
                client.increment("jobs.encryption_error", tags=tags)
            return
        client.increment("jobs.success", tags=tags, sample_rate=rate)
        if ms is not None:
            client.timing("jobs.perform", ms, tags=tags, sample_rate=rate)
            if self._distribution:
                client.distribution("jobs.perform_dist", ms, tags=tags)

    def _tags(self, name: str, queue: str, payload: P.Payload) -> tuple[list[str], float]:
        tags = [f"worker:{name}", f"queue:{queue}"]
        if self._options is None:
            return tags, 1.0
        options: Mapping[str, Any] = self._options(name, payload, queue) or {}
        extra = options.get("tags") or []
        return [*tags, *(str(tag) for tag in extra)], _rate(options.get("sample_rate", 1.0))

    # -- reliability ------------------------------------------------------------------------
    def recovered(self, queue: str, count: int) -> None:
        self.client.increment("jobs.recovered.fetch", count,
                              tags=[f"queue:{stored_name(queue)}"])

    def recovered_push(self, count: int) -> None:
        """Pushes a client kept while Redis was down and sent once it was back (Sidekiq
        Pro's reliable push; ``wurk.client.reliable``)."""
        self.client.increment("jobs.recovered.push", count)

    def poisoned(self, pill: Mapping[str, Any]) -> None:
        self.client.increment("jobs.poison", tags=[f"worker:{stored_name(pill.get('klass'))}",
                                                   f"queue:{stored_name(pill.get('queue'))}"])

    def expired(self, payload: P.Payload) -> None:
        """An expiring job dropped unrun (an ``on_expired`` callback)."""
        self.client.increment("jobs.expired", tags=[f"worker:{job_name(payload)}",
                                                    f"queue:{stored_name(payload.get(P.QUEUE))}"])

    # -- batches ----------------------------------------------------------------------------
    def batch(self, event: str, duration_ms: float | None = None,
              tags: Sequence[str] = ()) -> None:
        """A batch was created, completed or succeeded (Sidekiq Pro's names); a success
        also sends ``batch.duration``, the ms since its creation, and ``batch.duration_dist``
        (a Datadog distribution, unless ``statsd_datadog_extensions`` is off), both with
        ``tags`` (its success callbacks' ``tags`` options)."""
        if event not in ("created", "complete", "success"):
            return
        self.client.increment(f"batch.{event}")
        if event == "success" and duration_ms is not None:
            shown = list(tags) or None
            self.client.timing("batch.duration", duration_ms, tags=shown)
            if self._distribution:
                self.client.distribution("batch.duration_dist", duration_ms, tags=shown)

    # -- history ----------------------------------------------------------------------------
    def gauges(self, sample: Mapping[str, Any]) -> None:
        """The cluster's numbers, as Sidekiq Enterprise's history sends them, then the
        ``history_extra`` hook's gauges: one batch (as few datagrams as the packet size
        allows), not a datagram per gauge."""
        extra = self._extra_gauges()
        client = self.client
        with client:  # the client's buffer: flushed when full and at the end
            for name, field in (("processed", "processed"), ("failures", "failed"),
                                ("enqueued", "enqueued"), ("retries", "retries"),
                                ("dead", "dead"), ("scheduled", "scheduled"), ("busy", "busy")):
                client.gauge(name, sample.get(field, 0))
            for queue, size in (sample.get("queues") or {}).items():
                client.gauge("queue.size", size, tags=[f"queue:{queue}"])
            for queue, latency in (sample.get("latency") or {}).items():
                client.gauge("queue.latency", latency, tags=[f"queue:{queue}"])
            for name, value, tags in extra:
                client.gauge(name, value, tags=tags)

    def _extra_gauges(self) -> list[tuple[str, float, list[str] | None]]:
        """What ``history_extra`` gives, asked before the batch opens (the hook may read a
        database; the client is not held meanwhile). A hook that raises is reported; the
        gauges it gave before are kept."""
        hook = self.config.history_extra
        if hook is None:
            return []
        gauge = ExtraGauges()
        try:
            hook(gauge)
        except Exception as exc:
            report_error(self.config, exc, {"context": "history_extra (its gauges so far "
                                                       "are sent with the history's)"})
        return gauge.kept


class ExtraGauges:
    """The ``gauge(name, value, tags=())`` function ``history_extra`` is given: each gauge
    checked (the StatsD line cannot carry its separators in a name or tag) and kept, at most
    ``EXTRA_GAUGE_LIMIT`` a tick."""

    def __init__(self) -> None:
        self.kept: list[tuple[str, float, list[str] | None]] = []

    def __call__(self, name: str, value: float, tags: Sequence[str] = ()) -> None:
        if len(self.kept) >= EXTRA_GAUGE_LIMIT:
            raise ValueError(f"history_extra gave more than {EXTRA_GAUGE_LIMIT} gauges in one "
                             "tick; the rest are not sent")
        if not isinstance(name, str) or not 0 < len(name) <= MAX_GAUGE_NAME \
                or _NAME_BREAKS.search(name):
            raise ValueError(f"a gauge name is text of 1-{MAX_GAUGE_NAME} characters without "
                             f"':', '|', '@', '#', ',' or spaces, not {name!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"gauge {name!r}: its value must be a number, not {value!r}")
        try:
            finite = math.isfinite(value)
        except OverflowError:  # an int no float holds
            finite = False
        if not finite:
            raise ValueError(f"gauge {name!r}: its value must be a finite number, "
                             f"not {value!r}")
        if isinstance(tags, str) or not isinstance(tags, Sequence):
            raise ValueError(f"gauge {name!r}: tags must be a list of text, not {tags!r}")
        for tag in tags:
            if not isinstance(tag, str) or not tag or _TAG_BREAKS.search(tag):
                raise ValueError(f"gauge {name!r}: a tag is text without '|', '#', ',' or "
                                 f"line breaks, not {tag!r}")
        self.kept.append((name, value, list(tags) or None))
