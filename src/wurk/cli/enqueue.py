"""``wurk enqueue NAME [ARG_JSON…] [-r MODULE] [--queue Q] [--in SECONDS]``: push one job
from a shell.

1. ``NAME`` is the payload's ``class``, any name (a Ruby job's too). Without ``-r`` nothing
   is imported, so nothing about the job is known: it goes to ``--queue`` (else
   ``default``) with the arguments as given, and a line on stderr says that nothing was
   checked.
2. With ``-r MODULE`` (repeatable, as the worker's) the modules are imported and ``NAME``
   must be a job they registered: its own options apply (its queue, retry…; ``--queue``
   still wins) and the arguments are checked against its signature, as ``perform_async``
   checks them; a wrong one is a usage error naming it (exit 2), and nothing is pushed.
3. Each ``ARG_JSON`` is one argument written as JSON (``42``, ``'"text"'``, ``'{"a": 1}'``);
   one that is not JSON is a usage error naming it (exit 2).
4. ``--in SECONDS`` schedules it that far ahead instead of queueing it now.
5. The jid goes to stdout (for scripts: ``jid=$(wurk enqueue …)``), a sentence to stderr.
"""

from __future__ import annotations

import difflib
import math
import time
from typing import Any

import click

from .. import default_config
from .. import payload as P
from ..client.default import push
from ..config import parse_queue
from ..errors import ConfigError, InvalidArguments
from ..job import JobDefinition, JobSetter, registry
from ..stored import EPOCH_MAX
from .inspect import friendly
from .worker import load_module

__all__ = ["enqueue_command", "parse_args"]


def parse_args(texts: tuple[str, ...]) -> list[Any]:
    """The arguments, each read as JSON; ``click.BadParameter`` naming a bad one."""
    values: list[Any] = []
    for position, text in enumerate(texts, start=1):
        try:
            values.append(P.loads_json(text))
        except ValueError as exc:
            raise click.BadParameter(
                f"argument {position} ({text!r}) is not JSON ({exc}); write text in quotes, "
                f"e.g. '\"{text}\"'", param_hint="ARG_JSON") from None
    return values


def registered(name: str, modules: tuple[str, ...]) -> JobDefinition:
    """The job ``name`` the ``-r`` modules registered; a usage error naming the close one."""
    for spec in modules:
        load_module(spec)
    definition = registry.get(name)
    if definition is not None:
        return definition
    names = sorted(registry.names())
    close = difflib.get_close_matches(name, names, n=1)
    hint = (f"; did you mean {close[0]!r}?" if close
            else f"; it registered {', '.join(map(repr, names))}" if names
            else "; it registered none")
    raise click.BadParameter(f"{', '.join(modules)} registered no job named {name!r}{hint}",
                             param_hint="NAME")


def finite_delay(ctx: click.Context, param: click.Parameter,
                 value: float | None) -> float | None:
    """``--in``: ``nan``, ``inf`` and ``1e400`` (read as inf) are no number of seconds, and
    a time after the year 9999 (``1e300``) no time a listing can show."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value!r} is not a finite number of seconds")
    if value is not None and time.time() + value > EPOCH_MAX:
        raise click.BadParameter(f"{value:g} seconds from now is after the year 9999")
    return value


@click.command("enqueue")
@click.argument("name")
@click.argument("args", nargs=-1, metavar="[ARG_JSON]...")
@click.option("-r", "--require", "modules", multiple=True, metavar="MODULE",
              help="Module defining the job (repeatable): its options and signature apply.")
@click.option("--queue", "-q", default=None,
              help="The queue to push to (default: the job's own with -r, else default).")
@click.option("--in", "delay", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              callback=finite_delay, help="Run it this many seconds from now instead of now.")
@friendly
def enqueue_command(name: str, args: tuple[str, ...], modules: tuple[str, ...],
                    queue: str | None, delay: float | None) -> None:
    """Push job NAME with the given JSON arguments; prints its jid."""
    if queue is not None:
        try:
            parse_queue(queue)
        except ConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="'--queue'") from None
    values = parse_args(args)
    if modules:
        definition = registered(name, modules)
        setter: JobSetter[..., Any] = JobSetter(
            definition, {} if queue is None else {P.QUEUE: queue}, config=default_config())
        jid: str | None
        try:
            jid = setter.perform_async(*values) if delay is None \
                else setter.perform_in(delay, *values)
        except InvalidArguments as exc:
            raise click.UsageError(f"nothing pushed: {exc}") from None
        queue = str(setter.options.get(P.QUEUE, definition.options.get(P.QUEUE,
                                                                         P.DEFAULT_QUEUE)))
    else:
        queue = queue or P.DEFAULT_QUEUE
        item: dict[str, Any] = {P.CLASS: name, P.ARGS: values, P.QUEUE: queue}
        if delay is not None:
            item[P.AT] = time.time() + delay
        jid = push(item, config=default_config())
    if jid is None:
        raise click.ClickException("a client middleware stopped the push; nothing was queued")
    when = f"to run in {delay:g} s" if delay is not None else "now"
    click.echo(f"Enqueued {name} on queue {queue!r} {when}.", err=True)
    if not modules:
        click.echo(f"Nothing was checked: without -r MODULE, wurk enqueue does not know "
                   f"{name}, so neither its own options (its queue, retry…) nor its "
                   "arguments were checked; pass the module that defines it to have both.",
                   err=True)
    click.echo(jid)
