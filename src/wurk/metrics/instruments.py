"""A worker's observers, attached to its launcher in one place.

1. Execution metrics: ``execution_metrics(config)`` makes the server middleware
   (``wurk.metrics.tracking.ExecutionMetrics``) the launcher puts at the head of the
   configuration's server chain (``wurk.launcher.BUILT_IN``); it is the only hook into job
   execution, and ``Instruments`` finds it there. The launcher calls ``after_beat`` after
   each heartbeat (a flush) and ``stop`` at exit (the last flush).
2. Optional parts, each started with the launcher and stopped at its exit: the health check
   (``health_port``), the Prometheus endpoint (``metrics_port``), StatsD (``statsd``) and the
   history sampler (``retain_history`` > 0). Each owns its thread; ``stop`` joins them.
3. Reaper recoveries and poison kills reach the Prometheus and StatsD counters through the
   reaper's observers and ``on_poison``; expired jobs reach StatsD through ``on_expired``.
   (Batch events reach it through ``wurk.batch``'s own hook, in workers and apps alike.)
4. A worker serving several shards (``wurk.sharding``) binds its ports once, in the default
   shard's launcher, whose instruments ``watch`` every shard's launcher and the processors a
   cluster's capsules share: the health check and the exporter read them all, each part
   named with its shard (a ``shard`` label, ``"<shard>: <part>"`` in a health answer), so
   every shard's heartbeat and fetch count and no series is written twice. A worker of one
   shard is read as ever: no ``shard`` label, no shard in its answers.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..config import Config
from ..errors import ConfigError
from ..expiry import on_expired
from ..fetch.poison import Registration, on_poison
from ..heartbeat import Heartbeat
from ..hosts import HostNames
from ..manager import Manager
from ..runtime.busy import Busy
from ..runtime.outage import Outage
from ..runtime.timer import Timers
from .tracking import ExecutionMetrics, ExecutionTracker, Observer

if TYPE_CHECKING:
    # Imported where they start: the health check's HTTP server alone is about 1 MB of a
    # worker's memory, and most workers run without it.
    from .health import HealthServer, WorkerHealth
    from .history import HistorySampler
    from .prometheus import WorkerExporter
    from .statsd import StatsdSink

__all__ = ["Host", "Instruments", "execution_metrics"]

log = logging.getLogger("wurk")

def execution_metrics(config: Config) -> ExecutionMetrics | None:
    """The metrics middleware a worker of ``config`` needs, or None when nothing reads it
    (no execution metrics, no StatsD, no Prometheus)."""
    if not (config.metrics or config.statsd is not None or config.metrics_port is not None):
        return None
    tracker = ExecutionTracker(compat_v7=config.metrics_compat_v7) if config.metrics else None
    return ExecutionMetrics(tracker)


class Host(Protocol):
    """What the instruments read of the launcher that owns them."""

    config: Config
    heartbeat: Heartbeat
    busy: Busy
    slot: int | None
    timers: Timers  # the thread the periodic parts run on
    threads: bool  # False: its managers start no processor (a cluster's are shared)

    @property
    def managers(self) -> Sequence[Manager]: ...

    @property
    def concurrency(self) -> int: ...

    @property
    def stopping(self) -> bool: ...


class Instruments:
    """Owned by the launcher: started after its checks, stopped after its processors."""

    def __init__(self, launcher: Host) -> None:
        self.launcher = launcher
        self.config = launcher.config
        self.metrics = next((link for link in self.config.server_middleware
                             if isinstance(link, ExecutionMetrics)), None)
        self.health: HealthServer | None = None
        self.exporter: WorkerExporter | None = None
        self.statsd: StatsdSink | None = None
        self.history: HistorySampler | None = None
        self._flush_outage = Outage(self.config, "metrics flush")
        self._observers: list[Observer] = []
        self._poison: Registration | None = None
        self._expired: Registration | None = None
        self._recovery: list[Callable[[str, int], None]] = []
        # Point 4: every shard's launcher by shard name (this one among them) and the shared
        # processors, once ``watch`` was called; else this launcher alone.
        self._launchers: dict[str, Host] = {self.config.shard_name: launcher}
        self._shared: list[Manager] = []
        self.sharded = False

    def watch(self, launchers: Mapping[str, Host], shared: Sequence[Manager] = ()) -> None:
        """Read every one of ``launchers`` (by shard name, this one among them) and the
        processors ``shared`` by a cluster's queues (booked to this launcher's shard) as
        parts of this worker (point 4). Before ``start``."""
        self._launchers = dict(launchers)
        self._shared = list(shared)
        self.sharded = True

    # -- what the parts read ----------------------------------------------------------------
    def fetching(self) -> list[tuple[str, Manager]]:
        """(shard, manager) of every capsule whose processors this worker runs."""
        own = [(name, manager) for name, launcher in self._launchers.items()
               if launcher.threads for manager in launcher.managers]
        return own + [(self.config.shard_name, manager) for manager in self._shared]

    def outages(self) -> list[tuple[str, Outage]]:
        """(shard, outage) of every heartbeat and fetch: one per component and shard."""
        beats = [(name, launcher.heartbeat.outage) for name, launcher in self._launchers.items()]
        return beats + [(name, manager.outage) for name, manager in self.fetching()]

    def probe(self) -> WorkerHealth:
        from .health import WorkerHealth

        launcher = self.launcher
        launchers = self._launchers
        return WorkerHealth(
            beat_ages=lambda: [(name, each.heartbeat.beat_age())
                               for name, each in launchers.items()],
            interval=self.config.heartbeat_interval,
            quiet=lambda: launcher.heartbeat.quiet, stopping=lambda: launcher.stopping,
            outages=self.outages,
            stalled=lambda: [(name, m.capsule.name) for name, m in self.fetching()
                             if m.stalled],
            sharded=self.sharded)

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        cfg = self.config
        # A swarm's children would all bind the same port: those listeners are the worker's.
        swarmed = self.launcher.slot is not None
        if swarmed and (cfg.metrics_port is not None or cfg.health_port is not None):
            log.warning("health_port and metrics_port are ignored in a swarm's children "
                        "(they would share one port); run wurk worker for them")
        if cfg.statsd is not None:
            self._start_statsd()
        if cfg.metrics_port is not None and not swarmed:
            self._start_exporter(cfg.metrics_host, cfg.metrics_port)
        if cfg.health_port is not None and not swarmed:
            from .health import HealthServer

            self.health = _listen("health_port", cfg.health_host, cfg.health_port,
                                  lambda: HealthServer(cfg.health_host, cfg.health_port or 0,
                                                       self.probe(),
                                                       HostNames(cfg.web_allowed_hosts)))
            self.health.start()
        if cfg.retain_history > 0:
            self._start_history()
        if self._recovery or self.statsd is not None:
            self._poison = on_poison(self._poisoned)

    def _start_statsd(self) -> None:
        from .statsd import sink_for

        self.statsd = sink_for(self.config)
        self._observe(self.statsd.observe)
        self._recovery.append(self.statsd.recovered)
        self._expired = on_expired(self.statsd.expired)

    def _start_exporter(self, host: str, port: int) -> None:
        from .prometheus import WorkerExporter

        launchers = list(self._launchers.values())
        exporter = WorkerExporter(
            outages=self.outages, busy=lambda: sum(len(each.busy) for each in launchers),
            concurrency=sum(manager.capsule.concurrency for _, manager in self.fetching()),
            stuck=lambda: sum(each.busy.marked() for each in launchers),
            shard_label=self.sharded)
        hosts = HostNames(self.config.web_allowed_hosts)
        bound = _listen("metrics_port", host, port, lambda: exporter.start(host, port, hosts))
        log.info("Prometheus metrics on port %d", bound)
        self.exporter = exporter
        self._observe(exporter.observe)
        self._recovery.append(exporter.recovered)

    def _start_history(self) -> None:
        from .history import HistorySampler

        statsd = self.statsd
        self.history = HistorySampler(self.config,
                                      on_sample=statsd.gauges if statsd is not None else None,
                                      timers=self.launcher.timers)
        self.history.start()

    def _observe(self, observer: Observer) -> None:
        if self.metrics is None:
            return
        self.metrics.add_observer(observer)
        self._observers.append(observer)

    def after_beat(self) -> None:
        """Write the execution metrics counted since the last beat."""
        tracker = self.metrics.tracker if self.metrics is not None else None
        if tracker is None:
            return
        try:
            tracker.flush(self.launcher.heartbeat.pool, self.config.keys)
        except Exception as exc:
            self._flush_outage.failed(exc)  # kept: the next beat sends them
        else:
            self._flush_outage.ended()

    def recovered(self, queue: str, count: int) -> None:
        for observer in self._recovery:
            observer(queue, count)

    def _poisoned(self, pill: dict[str, Any]) -> None:
        for sink in (self.statsd, self.exporter):
            if sink is not None:
                sink.poisoned(pill)

    def stop(self) -> None:
        """After the processors: the last flush, then every part's thread."""
        if self.history is not None:
            self.history.stop(timeout=self.config.shutdown_grace)
        for observer in self._observers:
            if self.metrics is not None:
                self.metrics.remove_observer(observer)
        if self._poison is not None:
            self._poison.remove()
        if self._expired is not None:
            self._expired.remove()
        self.after_beat()
        if self.health is not None:
            self.health.stop()
        if self.exporter is not None:
            self.exporter.stop()
        if self.statsd is not None:
            self.statsd.close()


def _listen(setting: str, host: str, port: int, bind: Callable[[], Any]) -> Any:
    """Bind a listener; a port in use, or an address not this machine's, is a configuration
    error naming the setting to change."""
    try:
        return bind()
    except OSError as exc:
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        reason = exc.strerror or exc
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"{setting} {port}: cannot listen on {where} ({reason}); "
                              "choose another port") from None
        raise ConfigError(f"{setting.replace('_port', '_host')} {host}: cannot listen on "
                          f"{where} ({reason}); give an address of this machine (127.0.0.1, "
                          "::1, or 0.0.0.0 / :: for every one)") from None
