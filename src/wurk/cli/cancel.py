"""``wurk cancel JID``: stop a job wherever it is (``wurk.cancel``), and say what was done."""

from __future__ import annotations

import click

from ..control.cancelling import cancel
from ..iteration.control import check_jid
from ..stored import printable
from .inspect import default_config, emit_json, friendly, json_option

__all__ = ["cancel_command"]


@click.command("cancel")
@click.argument("jid")
@json_option
@friendly
def cancel_command(jid: str, as_json: bool) -> None:
    """Cancel job JID: removed if it waits (queue, scheduled, retries), stopped if it runs
    (an iterable job at its next flush, within 5 s). Exits 1 when it is found nowhere."""
    try:
        check_jid(jid)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="JID") from None
    done = cancel(jid, config=default_config())
    if as_json:
        emit_json({"jid": jid, "found": done.found, "removed_from": done.removed_from,
                   "running_on": done.running_on, "told": done.told,
                   "cancelled_at": done.cancelled_at})
    else:
        click.echo(printable(str(done)))
    if not done.found:
        raise click.exceptions.Exit(1)
