"""``wurk worker``: load the job modules, start a launcher, obey signals until stopped.

Flags mirror Sidekiq's CLI. Settings come from defaults < the ``-C`` YAML file (with its
``-e`` section) < flags. A bad flag or config value exits 2 with one line naming it.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from pathlib import Path
from typing import Any

import click

from .. import log as wurk_log
from ..config import Config, configure
from ..configfile import load_file
from ..errors import ConfigError, WurkError

__all__ = ["load_module", "worker"]

logger = logging.getLogger("wurk")

# How long the main loop waits on the signal pipe before looking again; it only bounds
# how stale a check can be, signals themselves wake it at once.
MAIN_LOOP_TICK = 1.0


def load_module(spec: str) -> None:
    """Import a dotted module path or a file path (made dotted relative to the cwd)."""
    name = _module_name(spec)
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise click.BadParameter(f"cannot load {spec!r}: no module named {exc.name!r} "
                                     f"(looked in {cwd} and sys.path)",
                                     param_hint="'-r'") from None
        raise


def _module_name(spec: str) -> str:
    if not spec.endswith(".py") and "/" not in spec:
        return spec
    path = Path(spec).resolve()
    if not path.exists():
        raise click.BadParameter(f"file {spec!r} does not exist", param_hint="'-r'")
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
                          ("tag", "tag"), ("fetch", "fetch"), ("log_format", "log_format"),
                          ("cpu_affinity", "cpu_affinity")):
        if options.get(flag) is not None:
            settings[setting] = options[flag]
    if options.get("queues"):
        settings["queues"] = list(options["queues"])
    if options.get("verbose"):
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


def prepare(options: dict[str, Any]) -> Config:
    """Config + logging + job modules; raises click errors for bad input."""
    try:
        config, _ = build_config(options)
        config.check_worker()
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    wurk_log.setup(fmt=config.log_format, level=config.log_level,
                   logfile=options.get("logfile"))
    # Job modules see the worker's configuration as the process default, so they can add
    # middleware and handlers to it (Sidekiq's configure_server) while being imported.
    configure(config)
    for spec in options.get("modules") or ():
        load_module(spec)
    return config


@click.command()
@worker_options
def worker(**options: Any) -> None:
    """Run a worker process (the default command)."""
    from ..launcher import Launcher
    from ..signals import SignalPipe, act_on

    config = prepare(options)
    pipe = SignalPipe()
    pipe.install()
    try:
        launcher = Launcher(config, on_remote_signal=pipe.push)
        launcher.start()
    except WurkError as exc:
        pipe.close()
        raise click.ClickException(str(exc)) from None
    try:
        while True:
            for name in pipe.wait(MAIN_LOOP_TICK):
                if act_on(launcher, name):
                    launcher.stop()
                    return
    finally:
        pipe.close()
