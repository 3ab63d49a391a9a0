"""``wurk cancel JID``: ask an iterable job to stop (``wurk.cancel``), and say what it does."""

from __future__ import annotations

import time

import click

from ..api import IterableJobQuery
from ..iteration.control import check_jid
from ..iteration.job import FLUSH_INTERVAL
from ..stored import printable
from .inspect import default_config, emit_json, friendly, json_option

__all__ = ["cancel_command"]


@click.command("cancel")
@click.argument("jid")
@json_option
@friendly
def cancel_command(jid: str, as_json: bool) -> None:
    """Cancel the iterable job JID: a running one stops within 5 s and one item, a queued,
    scheduled or retrying one runs none of its items when it starts."""
    try:
        check_jid(jid)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="JID") from None
    query = IterableJobQuery(default_config())
    before = query.find(jid)
    stood = query.cancel(jid)
    if as_json:
        emit_json({"jid": jid, "cancelled_at": stood,
                   "already": bool(before and before.cancelled),
                   "executions": before.executions if before else 0,
                   "cursor": before.cursor if before else None})
        return
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stood))
    if before is not None and before.cancelled:
        click.echo(f"Job {printable(jid)} was already cancelled, at {when}.")
        return
    progress = (f" It has run {before.executions} time(s); its cursor is "
                f"{printable(repr(before.cursor))[:200]}." if before is not None else "")
    click.echo(f"Cancelled job {printable(jid)} at {when}.{progress} If it is an iterable job, "
               f"a running one stops within {FLUSH_INTERVAL:g} s and one item, and a waiting "
               "one runs none of its items; other jobs ignore it.")
