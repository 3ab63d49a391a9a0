"""The worker process's parts, started and stopped in order under one deadline.

1. Built: the built-in server middleware and death handlers join the configuration, in
   the order ``BUILT_IN`` lists, ahead of the application's (``install_built_ins``). At the
   start each capsule's runner is given its chain, once (``server_chain``): the
   configuration's, and a capsule's own links after the application's, inside the time
   limits' link pinned innermost.
   ``start``: freeze the configuration; check the server (``wurk.connections.preflight``: Redis ≥ 7,
   a warning unless ``maxmemory-policy`` is ``noeviction``); fire ``startup``; write the
   first heartbeat (before any fetch); start the heartbeat thread (none with
   ``async_beat=False``: the host calls ``beat`` from its own timer), the leader election and
   the periodic poller (``wurk.periodic.leader``, ``wurk.periodic.poller``), the scheduler and one
   manager per capsule. The periodic duties (scheduler, reaper, leader election, periodic
   poller, history, slow-job and affinity samplers, log flush, the outbox's poll with
   ``client="outbox"``) share one thread
   (``wurk.runtime.timer.Timers``), each on its own interval; the heartbeat keeps its own, so no
   duty's slow tick can delay it.
2. ``quiet``: stop fetching everywhere, stop the scheduler and the periodic poller and step
   down as leader; fire ``quiet``; the heartbeat reports ``quiet="true"``. One-way, as in
   Sidekiq.
3. ``stop``: fire ``shutdown``; quiet; give running jobs until ``timeout`` seconds after the
   stop began; then each manager requeues its unfinished jobs and interrupts its threads;
   last stats flush; remove the process record; fire ``exit``. ``hurry`` (a second Ctrl-C)
   ends the wait for running jobs at once: they go back to their queues, then the rest of
   the stop runs as ever. ``working``: whether a job still runs (what ``wurk worker
   --drain`` waits for, with no deadline, between ``quiet`` and ``stop``).
4. The launcher owns every thread it starts; nothing here installs signal handlers (the CLI
   does, through a self-pipe; the in-process worker leaves signals to its host).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from . import log as wurk_log
from ._version import __version__
from .asyncjobs import EventLoop, helper_count, sync_server_links
from .batch import open_batch
from .batch.middleware import BatchDeathHandler, BatchServerMiddleware
from .batch.middleware import install_client as install_batch_client
from .client.outbox import OutboxDuty
from .client.reliable import writer_for
from .config import DEFAULT_SHARD, Capsule, Config
from .connections.locate import describe_url
from .connections.preflight import check_server
from .control.handler import CancelHandler
from .control.worker import WorkerStops
from .crypto import Opener, check_active_key
from .errors import ConfigError
from .fetch.basic import BasicFetch, Fetcher
from .fetch.partitioned import PartitionedFetch
from .fetch.pause import PausedCache
from .fetch.reaper import Reaper, return_own_lists
from .fetch.reliable import Claims, ReliableFetch, private_list_name
from .heartbeat import Heartbeat
from .iteration.handler import InterruptHandler
from .job import open_batches_with, registry
from .limiter.middleware import LimitsMiddleware
from .manager import Manager, capsule_pool, stop_all
from .metrics.counters import Counters
from .metrics.instruments import Instruments, execution_metrics
from .metrics.slow import SlowJobs
from .metrics.tracking import ExecutionMetrics
from .middleware import Chain, Middleware
from .periodic.leader import Leadership
from .periodic.poller import PeriodicPoller
from .processor import JobRunner
from .profiling.middleware import JobProfiler
from .reporting import fire, report_error
from .results.recorder import ResultDeathHandler, ResultRecorder
from .runtime import affinity
from .runtime.busy import Busy
from .runtime.identity import Identity
from .runtime.loopwatch import LoopWatch
from .runtime.proctitle import set_title
from .runtime.timer import TimerLoop, Timers
from .scheduled import Scheduler
from .unique import LockRelease
from .workflow.middleware import WorkflowMiddleware
from .workflow.middleware import install as install_workflow_handler

__all__ = ["Launcher", "server_chain"]

log = logging.getLogger("wurk")

# Job log lines are flushed by time, not per line (wurk.log): this bounds how late the last
# lines of a burst reach the log when the worker then goes idle.
LOG_FLUSH_INTERVAL = 0.5
# How often a stop looks whether the running jobs have finished; ``hurry`` wakes it at once.
IDLE_CHECK_INTERVAL = 0.1
POLLER_THREAD = "wurk-poller"


# The built-in server middleware, outermost first, ahead of the application's links: the one
# place their order is decided.
#   1. execution metrics (``wurk.metrics``): outermost, so an execution a later link stops (a
#      limiter, a unique lock, an expired job) is counted too; only when metrics are on;
#   2. interruptions (``wurk.iteration``): a job that raised ``Interrupted`` (an iterable
#      job stopping between items) is pushed again and its execution ends as handled —
#      outside the batch link, which counts nothing for it, and outside the opener, so the
#      payload pushed again holds the envelope;
#   2b. cancels (``wurk.control``): a job ``wurk.cancel`` stopped (``JobCancelled``) ends as
#      cancelled, counted and acknowledged, never retried — outside the batch link, which
#      counts it as dead;
#   3. batches (``wurk.batch``): each attempt of a batch job counted toward its batch;
#   4. limits (``wurk.limiter``): over a rate limit → rescheduled, unique locks released,
#      expired jobs dropped — inside the batch link, so a rescheduled job is not counted;
#   4a. workflows (``wurk.workflow``): a step counted once, its ready dependants pushed —
#      inside the limits (a rescheduled step has not run), inside the batch link (what it
#      pushes joins the batch before the batch counts the step), outside the results (the
#      step's result is stored before it counts); a job of no workflow pays one dict lookup;
#   4b. results (``wurk.results``): a job with ``result_ttl`` stores its run's outcome —
#      inside the cancel link (it records "cancelled" and lets ``JobCancelled`` go on),
#      inside the limits, so a job rescheduled, expired or skipped stores nothing, and
#      inside the batch link, so a result is stored before the count that completes its
#      batch; a job without ``result_ttl`` pays one dict lookup;
#   5. the encrypted argument opened (``wurk.crypto``): so what stores the payload outside
#      it (a reschedule, a retry, the dead set) stores the envelope, never the value;
#   6. the profiler (``wurk.profiling``): innermost, so a profile is of the job (and the
#      application's links) only; a job without ``profile`` pays one dict lookup.
# And their death handlers: a dead batch job is counted; a dead unique job frees its lock; a
# dead job that keeps its result stores its final failure; a dead workflow step is counted
# (before its batch counts it).
BUILT_IN = (ExecutionMetrics, InterruptHandler, CancelHandler, BatchServerMiddleware,
            LimitsMiddleware, WorkflowMiddleware, ResultRecorder, Opener, JobProfiler)


def install_built_ins(config: Config) -> None:
    """Put the built-in links at the head of ``config``'s server chain in ``BUILT_IN``'s
    order (reusing any already there), and their death handlers after the application's."""
    if config.frozen:  # as it was left: by an earlier worker (all in place), or by hand
        installed = {type(link) for link in config.server_middleware
                     if isinstance(link, BUILT_IN)}
        if any(kind not in installed for kind in BUILT_IN if kind is not ExecutionMetrics):
            log.warning("the configuration was frozen before its worker was built: batch "
                        "counts, rate limits, unique locks, expiry and execution metrics are "
                        "off; build the worker before freezing it")
        return
    chain = config.server_middleware
    found = {type(link): link for link in chain if isinstance(link, BUILT_IN)}
    made: dict[type, Middleware | None] = {
        ExecutionMetrics: found.get(ExecutionMetrics) or execution_metrics(config),
        InterruptHandler: found.get(InterruptHandler) or InterruptHandler(config),
        CancelHandler: found.get(CancelHandler) or CancelHandler(config),
        BatchServerMiddleware: found.get(BatchServerMiddleware) or BatchServerMiddleware(config),
        LimitsMiddleware: found.get(LimitsMiddleware) or LimitsMiddleware(config),
        WorkflowMiddleware: found.get(WorkflowMiddleware) or WorkflowMiddleware(config),
        ResultRecorder: found.get(ResultRecorder) or ResultRecorder(config),
        Opener: found.get(Opener) or Opener(config),
        JobProfiler: found.get(JobProfiler) or JobProfiler(config)}
    for present in found.values():
        chain.remove(present)
    for kind in reversed(BUILT_IN):
        link = made[kind]
        if link is not None:
            chain.prepend(link)
    install_batch_client(config)
    for handler in (BatchDeathHandler, LockRelease, ResultDeathHandler):
        if not any(isinstance(h, handler) for h in config.death_handlers):
            config.death_handlers.append(handler(config))
    install_workflow_handler(config)
    open_batches_with(open_batch)


def server_chain(config: Config, capsule: Capsule) -> Chain:
    """The server chain of ``capsule``'s jobs, made once (at the worker's start): the
    configuration's — the built-in links, the application's — then the capsule's own, still
    outside the links pinned innermost (the time limits and cancels); the configuration's
    chain itself for a capsule with no links of its own."""
    if not capsule.server_middleware:
        return config.server_middleware
    chain = config.server_middleware.then(capsule.server_middleware)
    chain.freeze()
    return chain


def _refuse_shards(config: Config) -> None:
    """A capsule bound to another shard needs a launcher per shard (``wurk.sharding``): a
    lone launcher would serve its queues on the wrong Redis."""
    if config.is_cluster and config.shard_name == DEFAULT_SHARD:
        raise ConfigError("on Redis Cluster each queue is served from its own keyspace: start "
                          "this worker with wurk.sharding.launcher_for(config), which runs a "
                          "launcher per queue (the wurk command, the swarm and "
                          "InProcessWorker do)")
    bound = [c for c in config.capsules if c.shard not in (None, DEFAULT_SHARD)]
    if bound:
        raise ConfigError(f"capsule {bound[0].name!r} serves shard {bound[0].shard!r}: start "
                          "this worker with wurk.sharding.launcher_for(config), which runs a "
                          "launcher per shard (the wurk command, the swarm and "
                          "InProcessWorker do)")


class Launcher:
    """One worker process: heartbeat, scheduler and a manager per capsule."""

    def __init__(self, config: Config, *, embedded: bool = False,
                 on_remote_signal: Callable[[str], None] | None = None,
                 title: str = "", slot: int | None = None,
                 capsules: list[Capsule] | None = None, owns_title: bool = True,
                 threads: bool = True,
                 stop_first: Callable[[float], None] | None = None,
                 async_beat: bool = True) -> None:
        """``capsules`` (default: the configuration's) and ``owns_title`` are for a process
        serving several shards (``wurk.sharding``): a launcher per shard, each with that
        shard's capsules, one of them keeping the process title. ``threads=False`` starts
        no processor of its own: on Redis Cluster a capsule's processors are shared by its
        queues' launchers (``wurk.fetch.keyspaces``), which fetch through ``fetcher_for``;
        ``stop_first(deadline)`` stops those processors before this launcher's managers and
        its in-flight lists are given back. ``async_beat=False`` starts no heartbeat thread:
        after the first beat, written by ``start``, the host calls ``beat`` (an in-process
        worker driven by its host's timer)."""
        self.threads = threads
        self.async_beat = async_beat
        self.stop_first = stop_first
        config.check_worker()
        check_active_key(config)  # a missing key fails at start, not at the first push
        if capsules is None:
            _refuse_shards(config)
        install_built_ins(config)
        self.config = config
        self.embedded = embedded
        self.slot = slot  # a swarm child's slot: cpu_affinity "auto" spreads children by it
        self.title = title  # extra words for the process title (a swarm child's slot)
        self.owns_title = owns_title
        self.identity = Identity.current()
        self.busy = Busy()
        self.counters = Counters()
        self.timers = Timers(POLLER_THREAD)  # every periodic duty's thread, stopped last
        # Time limits and cancels: the tail link, the deadline thread, the cancel poller.
        self.stops = WorkerStops(config, str(self.identity), self.busy, self.timers)
        self.stops.install()
        self.capsules = capsules if capsules is not None else config.all_capsules()
        self.runner = JobRunner(config, counters=self.counters, busy=self.busy,
                                loop=EventLoop(helper_count(self.capsules),
                                               LoopWatch(config.loop_lag_warning),
                                               config.event_loop))
        self.heartbeat = Heartbeat(config, self.identity, busy=self.busy,
                                   counters=self.counters, info=self.info(),
                                   on_signal=on_remote_signal, on_beat=self._beaten,
                                   health=self.health)
        # A runner per capsule, each given its capsule's chain at the start (``server_chain``).
        self.managers = [Manager(config, capsule, self.runner.for_capsule(), self._make_fetcher,
                                 index=index, visible=self.heartbeat.wait_visible)
                         for index, capsule in enumerate(self.capsules)]
        self.scheduler = Scheduler(config, timers=self.timers)
        self.leadership = Leadership(config, str(self.identity),
                                     on_change=self._leadership_changed, timers=self.timers)
        self.periodic = PeriodicPoller(config, self.leadership, timers=self.timers)
        self.paused = PausedCache(config)
        self._log_flusher = TimerLoop("wurk-log-flush", wurk_log.flush, LOG_FLUSH_INTERVAL,
                                      host=self.timers)
        self.slow_jobs = SlowJobs(config, self.busy, timers=self.timers)
        self._pin_sampler: TimerLoop | None = None  # cpu_affinity "auto" only
        served = list(dict.fromkeys(q for c in self.capsules for q in c.queue_names))
        self.claims = Claims()  # what this process's processors hold (wurk.fetch.reliable)
        self.reaper = Reaper(config, self.identity, served, claims=self.claims,
                             own_lists=self.private_lists(), timers=self.timers) \
            if config.fetch == "reliable" else None
        # The outbox's fallback poll (``client="outbox"``): rows no commit hook relayed.
        self.outbox = OutboxDuty(config, self.timers) if config.client == "outbox" else None
        # Metrics, health check, Prometheus, StatsD, history: their one attachment point.
        self.instruments = Instruments(self)
        if self.reaper is not None:
            self.reaper.observers.append(self.instruments.recovered)
        self._state_lock = threading.Lock()
        self._started = False
        self._quiet = False
        self._stopped = False
        self._hurried = threading.Event()

    # -- what the process hash says about us --------------------------------------------
    @property
    def total_processed(self) -> int:
        """Jobs this process ran (successes and failures) since it started."""
        return self.counters.total_processed

    @property
    def concurrency(self) -> int:
        return sum(c.concurrency for c in self.capsules)

    def info(self) -> dict[str, Any]:
        queues = list(dict.fromkeys(q for c in self.capsules for q in c.queue_names))
        return {
            "hostname": self.identity.hostname,
            "started_at": self.identity.started_at,
            "pid": self.identity.pid,
            "boot_id": self.identity.boot_id,
            "pid_namespace": self.identity.pid_namespace,
            "tag": self.config.tag,
            "concurrency": self.concurrency,
            "async_concurrency": sum(c.async_concurrency for c in self.capsules),
            "event_loop": self.runner.loop.kind,
            "queues": queues,
            "weights": [c.weights for c in self.capsules],
            "capsules": {c.name: {"concurrency": c.concurrency,
                                  "async_concurrency": c.async_concurrency, "mode": c.mode,
                                  "weights": c.weights} for c in self.capsules},
            "labels": list(self.config.labels),
            "identity": str(self.identity),
            "version": __version__,
            "framework": "wurk",
            "embedded": self.embedded,
            **({"env": self.config.environment} if self.config.environment else {}),
        }

    def health(self) -> dict[str, Any]:
        """Live fields of the process record beside Sidekiq's: the event loop's worst lag
        since the last beat, and processor deaths (``processor_deaths``; ``respawning`` 1
        while a burst of them is being replaced with backoff)."""
        deaths = [m.health() for m in self.managers]
        return {"loop_lag_us": int(self.runner.loop.take_lag() * 1e6),
                "processor_deaths": sum(d["deaths"] for d in deaths),
                "respawning": max((d["bursting"] for d in deaths), default=0)}

    def fetcher_for(self, capsule: Capsule, slot: int) -> Fetcher:
        """The fetcher of processor ``slot`` of ``capsule`` (one of this launcher's), on this
        launcher's Redis, its in-flight lists and its claims."""
        return self._make_fetcher(capsule, slot)

    def _make_fetcher(self, capsule: Capsule, slot: int) -> Fetcher:
        pool = capsule_pool(self.config, capsule)
        if self.config.fetch == "basic":
            return BasicFetch(self.config, capsule, pool, paused=self.paused.get)
        kind = PartitionedFetch if any(q in self.config.partitions
                                       for q in capsule.queue_names) else ReliableFetch
        return kind(self.config, capsule, pool, identity=self.identity,
                    capsule_index=self.capsules.index(capsule), slot=slot,
                    paused=self.paused.get, claims=self.claims)

    def private_lists(self) -> list[tuple[str, str]]:
        """(private list, queue) of every in-flight list this process may own."""
        return [(private_list_name(self.config, self.identity, queue, index), queue)
                for index, capsule in enumerate(self.capsules)
                for queue in capsule.queue_names]

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        with self._state_lock:
            if self._started:
                raise RuntimeError("this launcher was already started")
            self._started = True
        try:
            self._start()
        except BaseException:
            # A boot that failed part-way (a startup hook, an error after the first
            # heartbeat) stops what did start, whoever started it (a worker, a swarm child,
            # a shard of a process, an in-process worker): the process record, the leader
            # lease and the threads are not left to outlive the boot.
            try:
                self.stop(timeout=0)
            except Exception:  # the boot's own error is the one to raise
                log.exception("stopping the worker whose boot failed failed too")
            raise

    def _start(self) -> None:
        # Before anything starts: a CPU this process may not use is refused with no process
        # record written, no hook fired and no thread left behind.
        cpus = affinity.choose(self.config.cpu_affinity, slot=self.slot) \
            if self.threads else None
        self.config.freeze()
        # The chains are final now: each capsule's, once; a helper thread for each of its
        # sync links, a slot of that capsule.
        self.runner.server_middleware = self.config.server_middleware
        for manager in self.managers:
            manager.runner.server_middleware = server_chain(self.config, manager.capsule)
        self.runner.loop.reserve_helpers(helper_count(
            self.capsules, [sync_server_links(manager.runner.server_middleware)
                            for manager in self.managers]))
        self.config.periodic.check_jobs(registry)
        check_server(self.config)
        self.fire("startup", reverse=False, raise_errors=True)
        self.instruments.start()
        log.info("wurk %s starting: %s, %d thread(s) over %s; Redis %s%s", __version__,
                 self.identity, self.concurrency,
                 ", ".join(f"{c.name}={c.queue_names}" for c in self.capsules),
                 describe_url(self.config.pool("internal").url),
                 f"; environment {self.config.environment}" if self.config.environment else "")
        if not self.heartbeat.beat() and not self.config.unreached.active:
            log.warning("first heartbeat failed; starting anyway: no job is taken until it is "
                        "written (%s)", "it is retried" if self.async_beat
                        else "at the host's next heartbeat()")
        if self.async_beat:
            self.heartbeat.start()
        self._log_flusher.start()
        self.slow_jobs.start()
        self._start_reliability()
        self.config._leadership[:] = [self.leadership]  # what config.is_leader() asks
        self.leadership.start()
        self.periodic.start()
        self.scheduler.start()
        self.stops.start()
        if self.outbox is not None:
            self.outbox.start()
        writer_for(self.config)  # reliable push: a disk buffer looks for what a dead one left
        if not self.threads:
            return  # processors of its own: none (a cluster's shared ones fetch through it)
        pinning = self._pinning(cpus)
        self.runner.loop.pinning = pinning
        for manager in self.managers:
            manager.start(pinning)

    def _pinning(self, cpus: frozenset[int] | None) -> affinity.Pinning | None:
        """The processor threads' placement on ``cpus`` (``affinity.choose``); ``auto``
        adapts to load."""
        if cpus is None:
            return None
        adaptive = self.config.cpu_affinity == affinity.AUTO
        pinning = affinity.Pinning(cpus, lambda: len(self.busy), adaptive=adaptive,
                                   done=lambda: self.counters.total_processed)
        log.info("processor threads pinned to CPU %s%s", ",".join(map(str, sorted(cpus))),
                 " while two or more jobs run at once and it is measured to pay "
                 "(cpu_affinity auto; none turns it off)" if adaptive else "")
        if adaptive:
            self._pin_sampler = TimerLoop("wurk-affinity", pinning.sample,
                                          affinity.SAMPLE_INTERVAL, host=self.timers)
            self._pin_sampler.start()
        return pinning

    def _start_reliability(self) -> None:
        if self.reaper is None:
            return
        if self.config.private_list_layout == "pro":
            self._register_pro(True)
        try:
            self.reaper.sweep()  # at boot: jobs a crashed predecessor held run again now
        except Exception as exc:
            report_error(self.config, exc, {"context": "reaper at boot"})
        self.reaper.start()

    def _register_pro(self, register: bool) -> None:
        """Sidekiq Pro treats unregistered ``queue:sq|…`` lists as orphans."""
        keys, name = self.config.keys, str(self.identity)
        lists = [key for key, _ in self.private_lists()]

        def send(r: Any) -> None:
            pipe = r.pipeline(transaction=True)
            if register:
                pipe.sadd(keys.super_processes, name)
                pipe.sadd(keys.super_queues(name), *lists)
            else:
                pipe.srem(keys.super_processes, name)
                pipe.delete(keys.super_queues(name))
            pipe.execute()

        try:
            self.config.pool("internal").run(send)
        except Exception as exc:
            report_error(self.config, exc, {"context": "super_fetch registration"})

    def quiet(self) -> None:
        with self._state_lock:
            if self._quiet:
                return
            self._quiet = True
        log.info("quiet: no new jobs will be fetched")
        # First: each stop below may wait up to the grace for a tick under way.
        for manager in self.managers:
            manager.quiet()
        self.scheduler.stop(timeout=self.config.shutdown_grace)
        # A quiet process is on its way out (a deploy): it hands its loops to a process that
        # stays, rather than running the old schedule until it exits.
        self.periodic.stop(timeout=self.config.shutdown_grace)
        self.leadership.stop(timeout=self.config.shutdown_grace)
        self.heartbeat.quiet = True
        self._update_title()
        self.fire("quiet")

    def stop(self, timeout: float | None = None, *, hint: str = "") -> None:
        """Stop within ``timeout`` (default ``config.timeout``) seconds + the interrupt grace;
        ``hint`` ends the line that says so (how to hurry it, where that is possible)."""
        with self._state_lock:
            if self._stopped:
                return
            self._stopped = True
        timeout = self.config.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        self.fire("shutdown")
        self.quiet()
        log.info("stopping: waiting up to %.0f s for %d running job(s)%s", timeout,
                 len(self.busy), f"; {hint}" if hint else "")
        deadline = self._wait_for_jobs(deadline)
        if self.stop_first is not None:
            self.stop_first(deadline)
        stop_all(self.managers, deadline)
        self.stops.stop(timeout=1.0)
        if self._pin_sampler is not None:
            self._pin_sampler.stop(timeout=1.0)
        self.slow_jobs.stop(timeout=1.0)
        self._stop_reliability()
        self.heartbeat.stop()
        self.instruments.stop()
        self.runner.close()
        self.heartbeat.clear()
        self.fire("exit")
        log.info("bye")
        self._log_flusher.stop(timeout=1.0)
        self.timers.stop(timeout=self.config.shutdown_grace)
        wurk_log.flush()

    def beat(self) -> bool:
        """One heartbeat now, on the caller's thread: what the heartbeat thread does each
        tick (``async_beat=False``: the host's timer calls this). False, writing nothing,
        before ``start`` and from ``stop`` on; False too when Redis refused it (logged)."""
        with self._state_lock:
            if not self._started or self._stopped:
                return False
        return self.heartbeat.beat()

    def hurry(self) -> None:
        """End the stop's wait for running jobs now: they go back to their queues and their
        threads are interrupted (a second Ctrl-C). Safe from any thread, at any time."""
        if self._hurried.is_set():
            return
        self._hurried.set()
        log.info("stopping now: pushing %d unfinished job(s) back to their queues",
                 len(self.busy))

    def _wait_for_jobs(self, deadline: float) -> float:
        """Wait until the processors are done, ``deadline`` passes or ``hurry`` is called;
        returns the deadline the managers get (now, once hurried). Async jobs count: their
        processors end at quiet while they run on."""
        while any(manager.working for manager in self.managers):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if self._hurried.wait(min(remaining, IDLE_CHECK_INTERVAL)):
                return time.monotonic()
        return time.monotonic() if self._hurried.is_set() else deadline

    def _stop_reliability(self) -> None:
        if self.reaper is None:
            return
        self.reaper.stop(timeout=self.config.shutdown_grace)
        try:
            returned = return_own_lists(self.config, self.private_lists())
        except Exception as exc:
            report_error(self.config, exc, {"context": "returning in-flight lists"})
        else:
            if returned:
                log.info("returned %d in-flight job(s) to their queues", returned)
        if self.config.private_list_layout == "pro":
            self._register_pro(False)

    @property
    def stopping(self) -> bool:
        return self._stopped

    @property
    def working(self) -> bool:
        """Whether a job runs (a processor alive, an async job under way): what a drain
        (``wurk worker --drain``) waits for before it stops."""
        return any(manager.working for manager in self.managers)

    def fire(self, event: str, *, reverse: bool | None = None,
             raise_errors: bool = False) -> None:
        """Run lifecycle hooks (``wurk.reporting.fire``)."""
        fire(self.config, event, reverse=reverse, raise_errors=raise_errors)

    @property
    def state(self) -> str:
        """``processing``, ``quiet`` or ``stopping``."""
        return "stopping" if self._stopped else "quiet" if self._quiet else "processing"

    def status(self) -> str:
        """One line on what this worker does (systemd's ``STATUS=``)."""
        return f"{self.state}: {len(self.busy)} of {self.concurrency} busy"

    def _leadership_changed(self, leading: bool) -> None:
        self._update_title()
        self.fire("leader" if leading else "follower")

    def _beaten(self) -> None:
        self._update_title()
        self.instruments.after_beat()

    def _update_title(self) -> None:
        if self.embedded or not self.owns_title:
            return  # the host's process keeps the host's title
        set_title(self.config.tag, f"[{len(self.busy)} of {self.concurrency} busy]",
                  self.title, "leader" if self.leadership.is_leader() else "",
                  "stopping" if self._quiet else "")
