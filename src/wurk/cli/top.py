"""``wurk top``: the terminal UI over the jobs in Redis, as Sidekiq 8.1's ``kiq``.

1. Settings: the worker's ``-C`` file (with its ``-e`` section) when given, else the
   process-wide configuration (``REDIS_URL``, else the project's embedded server). It never
   starts the embedded server: where none runs it says so and exits 1, as ``wurk stats``
   does.
2. ``--read-only`` shows everything and offers no action; ``--interval`` sets how often the
   numbers are read again (default 2 s).
3. Checked before anything is drawn, each failure one line and exit 1: a terminal on stdin
   and stderr, which Textual draws on (scripts have ``wurk stats`` and ``--json``), the
   ``tui`` extra, a Redis that answers.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from ..config import Config
from ..errors import ConfigError
from .inspect import default_config, friendly, server_name
from .worker import build_config

__all__ = ["top_command"]

DEFAULT_INTERVAL = 2.0


@click.command("top")
@click.option("-C", "--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="YAML configuration file (the worker's).")
@click.option("-e", "--environment", default=None, help="Section of the config file.")
@click.option("--read-only", is_flag=True, help="Show everything, change nothing.")
@click.option("--interval", type=click.FloatRange(min=0.5, max=3600), default=DEFAULT_INTERVAL,
              show_default=True, help="Seconds between refreshes.")
@friendly
def top_command(read_only: bool, interval: float, **options: Any) -> None:
    """A terminal UI: busy, queues, retries, dead, metrics… (kiq for wurk)."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):  # Textual draws on stderr
        raise click.ClickException(
            "wurk top needs a terminal (it reads keys from stdin and draws on stderr); for "
            "scripts use `wurk stats`, `wurk queues`, `wurk retries` (each with --json)")
    try:
        from ..tui import TopApp
    except ImportError as exc:
        raise click.ClickException(f"wurk top needs the tui extra ({exc.name} is missing): "
                                   "pip install 'wurk[tui]'") from None
    config = _config(options)
    try:
        config.pool("api").run(lambda r: r.ping(), idempotent=True)
        TopApp(config, server=server_name(config), read_only=read_only,
               interval=interval).run()
    finally:
        if options.get("config_file"):
            config.close()


def _config(options: dict[str, Any]) -> Config:
    if not options.get("config_file") and not options.get("environment"):
        return default_config()
    try:
        config, _ = build_config(options)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    if not config.frozen:
        config.start_embedded = False  # look at the jobs that exist; a new server has none
    return config
