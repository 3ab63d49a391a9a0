"""``wurk periodic check | list``: periodic loops from the command line.

1. ``check -r MODULE -C FILE``: what a worker would check at boot, without starting one —
   every loop of the file's ``periodic:`` section and every loop the modules register:
   cron syntax, zone and job name. Each offending entry is printed on its own line and the
   command exits 2; otherwise it prints each loop's next run and exits 0 (for CI).
2. ``list``: the loops the cluster's leader registered in Redis — next run in the loop's
   zone, last run, paused — as a table, or ``--json``.
"""

from __future__ import annotations

import time
from typing import Any

import click

from .. import default_config
from ..api import PeriodicSet
from ..config import Config, configure
from ..configfile import load_file
from ..errors import ConfigError
from ..job import registry
from ..periodic.loops import Loop, describe_entry, entry_arguments, make_loop
from ..stored import printable
from . import tables
from .inspect import emit_json, friendly, json_option
from .worker import load_module

__all__ = ["periodic"]

EXIT_BAD = 2


@click.group("periodic")
def periodic() -> None:
    """Check or list periodic (cron) loops."""


@periodic.command("check")
@click.option("-r", "--require", "modules", multiple=True, metavar="MODULE",
              help="Module path or file defining jobs (repeatable).")
@click.option("-C", "--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="YAML configuration file.")
@click.option("-e", "--environment", default=None, help="Section of the config file.")
@click.pass_context
def check_command(ctx: click.Context, modules: tuple[str, ...], config_file: str | None,
                  environment: str | None) -> None:
    """Validate every loop's cron, zone and job name; exit 2 naming each bad one."""
    settings = load_file(config_file, environment) if config_file else {}
    settings.pop("swarm", None)
    entries = settings.pop("periodic", None) or []
    try:
        config = Config.from_mapping(settings, source=config_file or "flags")
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    configure(config)
    for spec in modules:
        load_module(spec)
    loops, problems = _check(config, entries, config_file or "configuration")
    if problems:
        for problem in problems:
            click.echo(problem, err=True)
        click.echo(f"{tables.plural(len(problems), 'problem')} in periodic loops", err=True)
        ctx.exit(EXIT_BAD)
    now = time.time()
    for loop in loops:
        upcoming = loop.schedule.local(loop.schedule.next_after(now)).isoformat()
        click.echo(f"ok  {loop.lid}  {loop.describe()}  next {upcoming}")
    click.echo(f"{tables.plural(len(loops), 'loop')} checked")


def _check(config: Config, entries: Any, source: str) -> tuple[list[Loop], list[str]]:
    """The loops that pass, and one line per entry or loop that does not."""
    if not isinstance(entries, list):
        return [], [f"{source}: periodic must be a list of entries"]
    loops: list[Loop] = list(config.periodic)
    problems: list[str] = []
    for index, entry in enumerate(entries, start=1):
        where = f"{source}: periodic entry {index} ({describe_entry(entry)})"
        try:
            cron, job, tz, args, options = entry_arguments(entry)
            loop = make_loop(cron, job, tz=config.periodic.tz if tz is None else tz,
                             args=args, options=options,
                             seconds=config.periodic_seconds_field)
        except ConfigError as exc:
            problems.append(f"{where}: {exc}")
            continue
        if loop.job not in registry:
            problems.append(f"{where}: no job named {loop.job!r} is registered (load its "
                            "module with -r, or check the name)")
            continue
        loops.append(loop)
    for loop in config.periodic:
        if loop.job not in registry:
            problems.append(f"periodic loop {loop.describe()} registered in code: no job "
                            f"named {loop.job!r} is registered")
    return loops, problems


@periodic.command("list")
@json_option
@friendly
def list_command(as_json: bool) -> None:
    """The loops in Redis: next run (in each loop's zone), last run, paused."""
    records = PeriodicSet(default_config()).loops()
    if as_json:
        emit_json({"loops": [record.to_dict() for record in records]})
        return
    if not records:
        click.echo("no periodic loops: the leader registers them when a worker with "
                   "loops starts")
        return
    rows = [[r.lid, r.schedule, r.tz or "UTC", r.klass, r.next_run_local or "-",
             tables.age(r.last_run) if r.last_run else "never",
             "paused" if r.paused else ""] for r in records]
    click.echo(tables.table(["LOOP", "CRON", "ZONE", "JOB", "NEXT RUN", "LAST RUN", ""], rows))
    for record in records:
        for problem in record.problems:
            click.echo(printable(f"note: loop {record.lid}: {problem}"))

