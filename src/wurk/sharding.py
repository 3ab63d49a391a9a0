"""One worker process serving several shards: a launcher per shard its capsules name.

1. ``launcher_for(config)`` is a plain ``Launcher`` when every capsule serves the default
   shard, else a ``ShardedLauncher``: the configuration's own launcher for the capsules of
   the default shard, and one per other shard for the capsules bound to it
   (``Capsule.shard``). Each is a whole worker on its shard's Redis — its heartbeat and
   process record, fetch, retries and dead set, scheduler, reaper, metrics and history —
   so each shard's dashboard shows this process serving it, and a job's retry or death is
   booked on the shard it came from.
2. A shard's launcher runs on ``worker_view(config, name)``: the configuration's view of
   that shard with what belongs to the process, not to a shard, left to the default one —
   it holds no leader election (periodic jobs are pushed by the default shard's leader),
   fires no lifecycle hooks, binds no health or metrics port, and keeps the process title
   alone; its server middleware and death handlers are the application's, with built-in
   links of its own (a batch count or a unique lock of its jobs lands on its shard). Its
   StatsD metrics carry the tag ``shard:<name>``. The default shard's health check and
   Prometheus exporter read every shard's launcher and the shared processors of point 4
   (``Instruments.watch``): another shard's outage makes the probe fail naming that shard,
   and its series carry the label ``shard``.
3. ``ShardedLauncher`` answers as a ``Launcher`` does (``start``, ``quiet``, ``stop``,
   ``hurry``, ``working``): it starts the default shard's launcher first, quiets them all, and stops
   them together under one deadline. A shard that cannot be reached at boot is waited for
   by its own loops, as one Redis is.
4. On Redis Cluster (``Config.is_cluster``) every queue is a keyspace of its own
   (``docs/scaling.md``): ``cluster_capsules`` gives each queue a launcher, with a capsule
   serving that queue alone; the queue ``default`` is the configuration's own keyspace,
   whose launcher (serving it, or no queue) keeps the process's duties. With reliable
   fetch those launchers start no processor: each capsule has one set of ``concurrency``
   processors shared by its queues (``wurk.fetch.keyspaces``), every fetch picking a queue
   in the capsule's order (strict or weighted) and taking from that queue's keyspace; they
   are stopped before any launcher gives back its in-flight lists. With basic fetch or a
   partitioned queue a capsule's threads are shared out between its queues once, by weight
   (an unweighted queue counts 1), at least one each.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from .config import DEFAULT_SHARD, Capsule, Config
from .fetch.basic import Fetcher
from .fetch.keyspaces import Keyspace, KeyspaceFetch, KeyspaceRunner
from .fetch.reliable import ReliableFetch
from .launcher import BUILT_IN, IDLE_CHECK_INTERVAL, Launcher
from .manager import Manager, capsule_pool, stop_all
from .middleware import Chain
from .runtime.identity import Identity
from .runtime.timer import Timers

__all__ = ["ShardedLauncher", "launcher_for", "worker_view"]


def launcher_for(config: Config, **options: Any) -> Launcher | ShardedLauncher:
    """The worker for ``config``: one launcher, or one per shard its capsules serve."""
    if config.is_cluster:
        return ShardedLauncher(config, **options)
    if all(capsule.shard in (None, DEFAULT_SHARD) for capsule in config.capsules):
        return Launcher(config, **options)
    return ShardedLauncher(config, **options)


def shares_processors(config: Config) -> bool:
    """Whether a capsule's processors are shared by its queues on a cluster (point 4):
    reliable fetch of queues none of which is partitioned."""
    return config.fetch == "reliable" and not any(
        queue in config.partitions for c in config.all_capsules() for queue in c.queue_names)


def cluster_capsules(config: Config) -> dict[str, list[Capsule]]:
    """Each queue's capsules on a cluster (point 4): keyspace name -> capsules. Shared
    processors: each keeps its capsule's concurrency (the share of a queue each of them
    fetches ahead, and what the queue's process record says); else the threads split."""
    config.check_periodic_on_cluster()
    shared = shares_processors(config)
    by_queue: dict[str, list[Capsule]] = {}
    for capsule in config.all_capsules():
        weights = {queue: max(weight, 1) for queue, weight in capsule.queues}
        total = sum(weights.values())
        for queue, weight in weights.items():
            threads = capsule.concurrency if shared \
                else max(1, round(capsule.concurrency * weight / total))
            by_queue.setdefault(queue, []).append(Capsule(
                name=capsule.name, queues=[(queue, 0)], concurrency=threads,
                async_concurrency=capsule.async_concurrency,
                server_middleware=capsule.server_middleware))
    return by_queue


def worker_view(config: Config, name: str) -> Config:
    """``config`` seen through shard ``name``, for that shard's launcher (point 2)."""
    view = copy.copy(config.shard(name))
    view._connections = type(config._connections)(view)  # pools of its own, closed by us
    view._leadership = []
    view.leader = False
    view.health_port = None
    view.metrics_port = None
    view.statsd_tags = [*config.statsd_tags, f"shard:{name}"]
    view.lifecycle = {event: [] for event in config.lifecycle}
    view.server_middleware = _without_built_ins(config.server_middleware, config)
    view.client_middleware = config.client_middleware.copy()
    view.death_handlers = [handler for handler in config.death_handlers
                           if getattr(handler, "config", None) is not config]
    if view.client == "outbox":  # the application's outbox is relayed once, by the default
        view.client = "default"
    return view


def _without_built_ins(chain: Chain, config: Config) -> Chain:
    """``chain``'s links but the built-in ones (and any other bound to ``config``): the
    shard's launcher puts in links of its own."""
    kept = chain.copy()
    for link in list(kept):
        if isinstance(link, BUILT_IN) or getattr(link, "config", None) is config:
            kept.remove(link)
    return kept


class _Counts:
    """The processed count of every shard's launcher, as one launcher's ``counters``."""

    def __init__(self, launchers: list[Launcher]) -> None:
        self._launchers = launchers

    @property
    def total_processed(self) -> int:
        return sum(launcher.counters.total_processed for launcher in self._launchers)


class ShardedLauncher:
    """A worker process serving several shards (point 3)."""

    def __init__(self, config: Config, **options: Any) -> None:
        self.config = config
        by_shard: dict[str, list[Capsule]] = {}
        shared = False
        if config.is_cluster:
            by_shard = cluster_capsules(config)
            shared = shares_processors(config)
        else:
            for capsule in config.all_capsules():
                by_shard.setdefault(capsule.shard or DEFAULT_SHARD, []).append(capsule)
        stop_first = self._stop_shared if shared else None
        self.home = Launcher(config, capsules=by_shard.pop(DEFAULT_SHARD, []),
                             threads=not shared, stop_first=stop_first, **options)
        self.shards = {name: Launcher(worker_view(config, name), capsules=capsules,
                                      owns_title=False, threads=not shared,
                                      stop_first=stop_first, **options)
                       for name, capsules in by_shard.items()}
        self.launchers = [self.home, *self.shards.values()]
        self.counters = _Counts(self.launchers)
        # A cluster's processors, shared by each capsule's queues (point 4).
        self.shared = [self._shared_manager(capsule, index)
                       for index, capsule in enumerate(config.all_capsules())] if shared else []
        self.home.instruments.watch({DEFAULT_SHARD: self.home, **self.shards}, self.shared)
        self._shared_lock = threading.Lock()
        self._shared_stopped = False
        self._hurried = threading.Event()

    def _launcher_of(self, queue: str) -> Launcher:
        return self.home if queue == DEFAULT_SHARD else self.shards[queue]

    def _shared_manager(self, capsule: Capsule, index: int) -> Manager:
        """``capsule``'s processors, each fetching through every queue's launcher."""
        launchers = {queue: self._launcher_of(queue) for queue in capsule.queue_names}
        managers = {queue: next(m for m in launcher.managers if m.capsule.name == capsule.name)
                    for queue, launcher in launchers.items()}
        keyspaces = {queue: Keyspace(runner=manager.runner, lane=manager.lane,
                                     pool=capsule_pool(launchers[queue].config, manager.capsule),
                                     visible=launchers[queue].heartbeat.wait_visible)
                     for queue, manager in managers.items()}

        def make_fetcher(_capsule: Capsule, slot: int) -> Fetcher:
            fetchers: dict[str, ReliableFetch] = {}
            for queue, launcher in launchers.items():
                fetcher = launcher.fetcher_for(managers[queue].capsule, slot)
                assert isinstance(fetcher, ReliableFetch)  # shares_processors says so
                fetchers[queue] = fetcher
            return KeyspaceFetch(capsule, fetchers, slot=slot,
                                 visible={q: k.visible for q, k in keyspaces.items()})

        return Manager(self.config, capsule, KeyspaceRunner(self.home.runner, keyspaces),
                       make_fetcher, index=index, lend=False)

    def _stop_shared(self, deadline: float) -> None:
        """Stop the shared processors, once, before any launcher stops its own managers:
        wait for their jobs until ``deadline`` (or ``hurry``), then each job unfinished goes
        back to its keyspace's queue (``Manager.stop``)."""
        with self._shared_lock:
            if self._shared_stopped:
                return
            self._shared_stopped = True
            for manager in self.shared:
                manager.quiet()
            while any(manager.processors for manager in self.shared):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._hurried.wait(min(remaining, IDLE_CHECK_INTERVAL)):
                    break
            deadline = time.monotonic() if self._hurried.is_set() else deadline
            stop_all(self.shared, deadline)

    @property
    def identity(self) -> Identity:
        return self.home.identity

    @property
    def stopping(self) -> bool:
        return self.home.stopping

    @property
    def managers(self) -> list[Any]:
        return [*(manager for launcher in self.launchers for manager in launcher.managers),
                *self.shared]

    @property
    def timers(self) -> Timers:
        """The home launcher's periodic duties' thread: where a process-wide duty goes."""
        return self.home.timers

    def status(self) -> str:
        """One line on what this worker does (systemd's ``STATUS=``), every shard counted."""
        busy = sum(len(launcher.busy) for launcher in self.launchers)
        threads = sum(capsule.concurrency for capsule in self.config.all_capsules())
        return f"{self.home.state}: {busy} of {threads} busy"

    @property
    def working(self) -> bool:
        return any(manager.working for manager in self.managers)

    def fire(self, event: str, *, reverse: bool | None = None,
             raise_errors: bool = False) -> None:
        self.home.fire(event, reverse=reverse, raise_errors=raise_errors)

    def start(self) -> None:
        started: list[Launcher] = []
        try:
            for launcher in self.launchers:
                launcher.start()
                started.append(launcher)
            for manager in self.shared:  # every keyspace's heartbeat written first
                manager.start()
        except BaseException:
            self._together([partial(launcher.stop, 0) for launcher in started])
            raise

    def quiet(self) -> None:
        for manager in self.shared:
            manager.quiet()
        for launcher in self.launchers:
            launcher.quiet()

    def beat(self) -> bool:
        """One heartbeat of every shard's launcher (``Launcher.beat``); True when each
        landed."""
        beats = [launcher.beat() for launcher in self.launchers]
        return all(beats)

    def hurry(self) -> None:
        self._hurried.set()
        for launcher in self.launchers:
            launcher.hurry()

    def stop(self, timeout: float | None = None, *, hint: str = "") -> None:
        """Stop every shard's launcher at once, each within ``timeout`` (one deadline for
        the process, as one launcher's); then close the shards' pools."""
        self._together([partial(launcher.stop, timeout, hint=hint)
                        for launcher in self.launchers])
        for launcher in self.shards.values():
            launcher.config.close()

    @staticmethod
    def _together(calls: list[Callable[[], None]]) -> None:
        """Run ``calls`` in threads of their own and wait for all; the first error is
        raised once every call has ended."""
        errors: list[BaseException] = []

        def run(call: Callable[[], None]) -> None:
            try:
                call()
            except BaseException as exc:  # reported once every stop has ended
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(call,), name="wurk-shard-stop")
                   for call in calls]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
