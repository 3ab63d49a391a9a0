"""``wurk enqueue NAME [ARG_JSON…] [--queue Q] [--in SECONDS]``: push one job from a shell.

1. ``NAME`` is the payload's ``class``, any name (a Ruby job's too): nothing is imported.
2. Each ``ARG_JSON`` is one argument written as JSON (``42``, ``'"text"'``, ``'{"a": 1}'``);
   one that is not JSON is a usage error naming it (exit 2).
3. ``--in SECONDS`` schedules it that far ahead instead of queueing it now.
4. The jid goes to stdout (for scripts: ``jid=$(wurk enqueue …)``), a sentence to stderr.
"""

from __future__ import annotations

import time
from typing import Any

import click

from .. import default_config
from .. import payload as P
from ..client.default import push
from ..config import parse_queue
from ..errors import ConfigError
from .inspect import friendly

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


@click.command("enqueue")
@click.argument("name")
@click.argument("args", nargs=-1, metavar="[ARG_JSON]...")
@click.option("--queue", "-q", default=P.DEFAULT_QUEUE, show_default=True,
              help="The queue to push to.")
@click.option("--in", "delay", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Run it this many seconds from now instead of now.")
@friendly
def enqueue_command(name: str, args: tuple[str, ...], queue: str, delay: float | None) -> None:
    """Push job NAME with the given JSON arguments; prints its jid."""
    try:
        parse_queue(queue)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="'--queue'") from None
    item: dict[str, Any] = {P.CLASS: name, P.ARGS: parse_args(args), P.QUEUE: queue}
    if delay is not None:
        item[P.AT] = time.time() + delay
    jid = push(item, config=default_config())
    if jid is None:
        raise click.ClickException("a client middleware stopped the push; nothing was queued")
    when = f"to run in {delay:g} s" if delay is not None else "now"
    click.echo(f"Enqueued {name} on queue {queue!r} {when}.", err=True)
    click.echo(jid)
