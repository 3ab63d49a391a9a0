"""``wurk worker``: load the job modules, start a launcher, obey signals until stopped.

1. Flags mirror Sidekiq's CLI. Settings come from defaults < the ``-C`` YAML file (with its
   ``-e`` section) < flags. A bad flag or config value exits 2 with one line naming it.
2. A job module that fails while imported is reported with its own traceback (its frames,
   not wurk's or click's) and exits 1.
3. At boot the worker says what a newcomer gets wrong without noticing: no job registered
   (every job it fetches would fail), a queue to work (``-q``, or the YAML file's queues
   and capsules) that Redis has never seen (a typo waits forever). ``wurk web`` shares the
   loading (``prepare``) but not the worker's warnings: the dashboard runs no job.
4. Logging: wurk's handler serves the application's loggers too, unless the job modules
   configured logging themselves (``wurk.log.route_application_logs``).
5. ``--drain``: a stop (TERM, INT) waits for every running job with no deadline, then
   exits; a second one stops within ``-t`` (``wurk.runtime.signals``). ``--health`` turns
   the health check on at ``DEFAULT_HEALTH_PORT`` (as ``--health-host`` alone does);
   ``--health-port`` (or the file's ``health_port``) names another port.
6. Under systemd (``Type=notify``, ``wurk.runtime.sdnotify``): ``READY=1`` once the launcher
   has started, ``STOPPING=1`` when the first stop signal is acted on, ``STATUS=`` when it
   changes and ``WATCHDOG=1`` from a duty on the poller thread; nothing without
   ``NOTIFY_SOCKET``.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType, TracebackType
from typing import IO, Any

import click
import redis

from .. import log as wurk_log
from .. import stored
from ..batch.callback import BUILTIN_JOBS
from ..config import DEFAULT_HEALTH_PORT, EVENT_LOOPS, Config, configure
from ..configfile import load_file
from ..crypto import check_active_key
from ..errors import ConfigError, WurkError
from ..job import registry
from ..payload import DEFAULT_QUEUE
from ..runtime import affinity
from ..runtime.collector import tune_collector
from ..runtime.malloc import limit_arenas
from ..runtime.sdnotify import Notifier, Reporter
from ..runtime.signals import SignalPipe

__all__ = ["load_module", "run_worker", "worker"]

logger = logging.getLogger("wurk")

# How long the main loop waits on the signal pipe before looking again; it only bounds
# how stale a check can be, signals themselves wake it at once.
MAIN_LOOP_TICK = 1.0


def load_module(spec: str, *, flag: str = "-r") -> ModuleType:
    """Import a dotted module path or a file path (made dotted relative to the cwd), for
    any flag that names the application's code (``-r``, ``wurk web --extension``): the cwd
    is searched first, a module not found is a bad ``flag`` (exit 2), a module that raises
    while imported is ``ImportFailed`` (its own traceback, exit 1)."""
    name = _module_name(spec, flag)
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise click.BadParameter(f"cannot load {spec!r}: no module named {exc.name!r} "
                                     f"(looked in {cwd} and sys.path)",
                                     param_hint=f"'{flag}'") from None
        raise ImportFailed(spec, exc) from None
    except Exception as exc:
        raise ImportFailed(spec, exc) from None


class ImportFailed(click.ClickException):
    """A job module raised while imported: its traceback from its own first frame on, then
    one ``Error:`` line; exit 1 (the module is wrong, not the command line)."""

    def __init__(self, spec: str, error: BaseException) -> None:
        super().__init__(f"loading {spec!r} failed: {type(error).__name__}: {error}")
        self.error = error

    def show(self, file: IO[Any] | None = None) -> None:
        lines = traceback.format_exception(type(self.error), self.error,
                                           _own_frames(self.error.__traceback__))
        click.echo("".join(lines).rstrip(), err=True)
        super().show(file)


# Frames of the import machinery and of the CLI itself, above the module's own.
_MACHINERY = (os.path.dirname(os.path.dirname(__file__)), os.path.dirname(click.__file__),
              os.path.dirname(importlib.__file__), "<frozen importlib")


def _own_frames(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without its leading frames from wurk, click and importlib."""
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_MACHINERY):
        tb = tb.tb_next
    return tb


def _module_name(spec: str, flag: str) -> str:
    if not spec.endswith(".py") and "/" not in spec:
        return spec
    path = Path(spec).resolve()
    if not path.exists():
        raise click.BadParameter(f"file {spec!r} does not exist", param_hint=f"'{flag}'")
    try:
        relative = path.relative_to(Path.cwd())
    except ValueError:
        sys.path.insert(0, str(path.parent))
        return path.stem
    parts = relative.with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def build_config(options: dict[str, Any]) -> tuple[Config, dict[str, Any]]:
    """Merge file and flags into a ``Config``; returns it and the file's ``swarm`` section."""
    settings: dict[str, Any] = {}
    if options.get("config_file"):
        settings = load_file(options["config_file"], options.get("environment"))
    elif options.get("environment"):
        settings["environment"] = options["environment"]
    swarm = settings.pop("swarm", None) or {}
    for flag, setting in (("concurrency", "concurrency"), ("timeout", "timeout"),
                          ("async_concurrency", "async_concurrency"),
                          ("event_loop", "event_loop"),
                          ("tag", "tag"), ("fetch", "fetch"), ("log_format", "log_format"),
                          ("cpu_affinity", "cpu_affinity"), ("health_port", "health_port"),
                          ("metrics_port", "metrics_port"), ("health_host", "health_host"),
                          ("metrics_host", "metrics_host")):
        if options.get(flag) is not None:
            settings[setting] = options[flag]
    if options.get("queues"):
        settings["queues"] = list(options["queues"])
    # --health, or an address for it, with no port from a flag or the file: its default one.
    if settings.get("health_port") is None and (options.get("health")
                                                or options.get("health_host") is not None):
        settings["health_port"] = DEFAULT_HEALTH_PORT
    # systemd sets DEBUG_INVOCATION=1 when a unit is restarted in debug mode (Sidekiq 8
    # reads it as -v).
    if options.get("verbose") or os.environ.get("DEBUG_INVOCATION") == "1":
        settings["log_level"] = "DEBUG"
    return Config.from_mapping(settings, source=options.get("config_file") or "flags"), swarm


def worker_options(fn: Any) -> Any:
    """The flags shared by ``worker`` and ``swarm``."""
    decorators = [
        click.option("-r", "--require", "modules", multiple=True, metavar="MODULE",
                     help="Module path or file defining jobs (repeatable)."),
        click.option("-q", "--queue", "queues", multiple=True, metavar="QUEUE[,WEIGHT]",
                     help="Queue to process, with an optional weight (repeatable)."),
        click.option("-c", "--concurrency", type=click.IntRange(min=1), default=None,
                     help="Processor threads (default 5)."),
        click.option("--async-concurrency", type=click.IntRange(min=1), default=None,
                     help="async def jobs running at once on the event loop (default 100)."),
        click.option("--event-loop", type=click.Choice(EVENT_LOOPS),
                     default=None, help="The event loop of async def jobs: 'auto' (the "
                     "default: uvloop where installed), 'uvloop' or 'asyncio'."),
        click.option("-t", "--timeout", type=click.FloatRange(min=0), default=None,
                     help="Shutdown timeout in seconds (default 25)."),
        click.option("-C", "--config", "config_file", type=click.Path(dir_okay=False),
                     default=None, help="YAML configuration file."),
        click.option("-e", "--environment", default=None, help="Section of the config file."),
        click.option("-g", "--tag", default=None, help="Tag shown in the process list."),
        click.option("-v", "--verbose", is_flag=True, help="Log at DEBUG level."),
        click.option("--fetch", type=click.Choice(["reliable", "basic"]), default=None,
                     help="Fetch strategy."),
        click.option("--cpu-affinity", default=None, metavar="auto|none|CPUS",
                     help="Pin processor threads: 'auto' (the default: one CPU while "
                          "busy and not computing in parallel; a swarm spreads its "
                          "children), CPUs such as '1' or '0,2-3', or 'none'."),
        click.option("--log-format", type=click.Choice(["pretty", "plain", "json"]),
                     default=None, help="Log line format."),
        click.option("--logfile", type=click.Path(dir_okay=False), default=None,
                     help="Log to this file (reopened on USR2) instead of stdout."),
    ]
    for decorate in reversed(decorators):
        fn = decorate(fn)
    return fn


def prepare(options: dict[str, Any], *, worker: bool = True) -> Config:
    """Config + logging + job modules; raises click errors for bad input. ``worker``: also
    the boot warnings of a process that runs jobs (what it would fail or wait for)."""
    try:
        config, _ = build_config(options)
        config.check_worker()  # the encryption key once the modules had their say
        if worker:  # a CPU this machine does not give us: a bad flag, before anything starts
            affinity.check(config.cpu_affinity)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    logfile = options.get("logfile")
    try:
        handler = wurk_log.setup(fmt=config.log_format, level=config.log_level,
                                 logfile=logfile)
    except OSError as exc:  # a folder that does not exist, a file that cannot be written
        raise click.BadParameter(f"cannot open {logfile!r} to log to: "
                                 f"{exc.strerror or exc}; give a file in a folder that "
                                 "exists and this user can write", param_hint="'--logfile'") \
            from None
    # Job modules see the worker's configuration as the process default, so they can add
    # middleware and handlers to it (Sidekiq's configure_server) while being imported.
    configure(config)
    modules = options.get("modules") or ()
    for spec in modules:
        load_module(spec)
    try:
        config.periodic.check_jobs(registry)  # job names can be checked once jobs are loaded
        if worker:  # a module may have called crypto.enable; the dashboard needs no key
            check_active_key(config)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    # After the modules: logging they configured while imported is theirs to keep.
    if not wurk_log.route_application_logs(handler, config.log_level):
        logger.debug("the application configured logging itself; wurk leaves it as it is")
    if worker:
        warn_unregistered(modules)
        mention_unseen_queues(config)
    return config


def warn_unregistered(modules: tuple[str, ...]) -> None:
    """A worker with no job registered fails every job it fetches: say so at boot."""
    if set(registry.names()) - set(BUILTIN_JOBS):  # wurk's own jobs run no one's code
        return
    if not modules:
        logger.warning("no jobs are registered: the worker was started without -r, so every "
                       "job it fetches fails with JobNotRegistered; load the module that "
                       "defines your jobs, e.g. `wurk -r myapp.jobs`")
    else:
        logger.warning("no jobs are registered: %s defined none (no @wurk.job or wurk.Job "
                       "subclass ran while importing), so every job fetched fails with "
                       "JobNotRegistered", ", ".join(modules))


def mention_unseen_queues(config: Config) -> None:
    """Name each queue to work (flags, file, capsules) that Redis has never seen: a typo
    would wait forever. ``default`` is never named (every new project waits on it), nor is
    anything on a Redis where no job was ever pushed (there is nothing to compare with)."""
    asked = [name for capsule in config.all_capsules() for name in capsule.queue_names
             if name != DEFAULT_QUEUE]
    if not asked:
        return
    try:
        known = sorted(config.pool("internal").run(
            lambda r: [stored.text(name) for name in r.smembers(config.keys.queues)],
            idempotent=True))
    except (WurkError, redis.RedisError):
        return  # the launcher's boot check reports an unreachable Redis
    if not known:
        return
    for name in dict.fromkeys(asked):
        if name in known:
            continue
        import difflib  # here: only a queue never pushed to needs it (a worker keeps it)

        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        logger.log(logging.WARNING if close else logging.INFO,
                   "queue %r has never had a job pushed to it (it is not in Redis's "
                   "'queues' set); the worker waits on it anyway%s", name, hint)


@click.command()
@worker_options
@click.option("--drain", is_flag=True,
              help="On TERM or INT, stop fetching and wait for every running job to finish, "
                   "with no time limit, then exit (a rolling restart); a second TERM or INT "
                   "stops within -t instead.")
@click.option("--health", is_flag=True,
              help=f"Turn the health check on at port {DEFAULT_HEALTH_PORT} (see "
                   "--health-port).")
@click.option("--health-port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
              help="Answer GET / with 200 while beating and fetching, 503 otherwise "
                   f"(a Kubernetes probe); --health alone listens on {DEFAULT_HEALTH_PORT}.")
@click.option("--health-host", default=None, metavar="ADDRESS",
              help="Address the health check binds (default 127.0.0.1; 0.0.0.0 for a "
                   f"Kubernetes probe of the pod's address); turns it on, at port "
                   f"{DEFAULT_HEALTH_PORT} unless --health-port says another.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
              help="Serve this process's Prometheus metrics (needs wurk[prometheus]).")
@click.option("--metrics-host", default=None, metavar="ADDRESS",
              help="Address the metrics endpoint binds (default 127.0.0.1; 0.0.0.0 for a "
                   "scraper outside the pod).")
def worker(**options: Any) -> None:
    """Run a worker process (the default command)."""
    run_worker(prepare(options), drain=options["drain"])


def run_worker(config: Config, pipe: SignalPipe | None = None, *, drain: bool = False) -> None:
    """Run a worker for ``config`` in this process until TERM or INT (the main thread only:
    it traps signals). A framework's command passes its own ``pipe`` to stop it from
    another thread with ``pipe.push("TERM")``. ``drain``: the stop waits for every running
    job, with no deadline, before it stops (``wurk.runtime.signals.drain_watched``)."""
    from ..runtime.signals import serve
    from ..sharding import launcher_for

    limit_arenas()  # this process is the worker's: before its threads start
    notifier = Notifier.from_environment()  # systemd's Type=notify; a no-op without it
    pipe = pipe if pipe is not None else SignalPipe()
    pipe.install()
    try:
        launcher = launcher_for(config, on_remote_signal=pipe.push)
    except BaseException as exc:
        pipe.close()
        notifier.close()
        if isinstance(exc, WurkError):
            raise click.ClickException(str(exc)) from None
        raise
    try:
        tune_collector(config.gc_threshold)  # the application is loaded, no job has run
        launcher.start()
    except BaseException as exc:
        # A boot that failed part-way (a startup hook, an error after the first heartbeat)
        # stops what did start: the process record, the leader lease, the threads.
        try:
            launcher.stop(timeout=0)
        except Exception:  # the boot's own error is the one to show
            logger.exception("stopping the worker whose boot failed failed too")
        finally:
            pipe.close()
            notifier.close()
        if isinstance(exc, WurkError):
            raise click.ClickException(str(exc)) from None
        raise
    # Booted: processors fetch, the heartbeat is written. The watchdog pings from the
    # poller thread, so a worker whose duties cannot run stops pinging.
    systemd = Reporter(notifier, launcher.status)
    systemd.ready()
    systemd.duty(launcher.timers)
    stopping = "draining: waiting for running jobs, no time limit" if drain \
        else f"stopping: running jobs get up to {config.timeout:g} s"
    try:
        serve(launcher, pipe, tick=MAIN_LOOP_TICK, drain=drain,
              on_stop=lambda: systemd.stopping(stopping))
    finally:
        pipe.close()
        notifier.close()
