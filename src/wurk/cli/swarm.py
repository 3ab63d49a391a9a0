"""``wurk swarm``: load the app once, fork N worker children, supervise them.

Takes every ``wurk worker`` flag, plus ``-n`` (children), ``--max-memory`` (MB of RSS per
child) and ``--max-jobs`` (replace a child after that many jobs); the config file's
``swarm:`` section and ``WURK_COUNT`` / ``WURK_MAXMEM_MB`` give the same settings
(flags > file > environment > defaults). See ``docs/swarm.md``.
"""

from __future__ import annotations

from typing import Any

import click

from ..errors import ConfigError
from ..runtime.sdnotify import Notifier
from .worker import build_config, prepare, worker_options

__all__ = ["swarm"]

_SWARM_FLAGS = ("count", "max_memory_mb", "max_jobs")


@click.command()
@worker_options
@click.option("-n", "--count", type=click.IntRange(min=1), default=None, metavar="N",
              help="Children to fork (default: swarm.count, WURK_COUNT, else CPU cores).")
@click.option("--max-memory", "max_memory_mb", type=click.IntRange(min=0), default=None,
              metavar="MB", help="Replace a child whose RSS reaches this many MB (0: off).")
@click.option("--max-jobs", type=click.IntRange(min=0), default=None, metavar="N",
              help="Replace a child after it has run N jobs (0: off).")
def swarm(**options: Any) -> None:
    """Run N worker processes under one supervising parent."""
    from ..swarm.settings import resolve
    from ..swarm.supervisor import Supervisor

    flags = {name: options.pop(name) for name in _SWARM_FLAGS}
    config = prepare(options)
    try:
        _, section = build_config(options)
        settings = resolve(section, flags, source=options.get("config_file") or "flags")
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    # systemd's Type=notify: the parent speaks for the swarm; a no-op without NOTIFY_SOCKET.
    Supervisor(config, settings, notifier=Notifier.from_environment()).run()
