"""``wurk batches``: live batches, one batch, dead batches, and their actions.

1. ``wurk batches`` lists live batches newest first (``--tag TEXT`` those with a tag
   containing it); ``wurk batches show BID`` one batch with its failed and dead jobs;
   ``wurk batches dead`` the batches with a dead job. ``--json`` prints one document.
2. ``wurk batches retry BID`` sends a batch's dead jobs back to their queues;
   ``wurk batches delete BID`` (asks first unless ``--yes``).
Like the other inspection commands it never starts the embedded server.
"""

from __future__ import annotations

import click

from ..batch import BatchSet, BatchStatus, DeadBatches, scan_tags
from ..stored import printable
from . import tables
from .inspect import DEFAULT_LIMIT, confirm, default_config, emit_json, friendly, json_option

__all__ = ["batches_command"]

HEADERS = ("BID", "Description", "Total", "Pending", "Failures", "State", "Created")


def _state(status: BatchStatus) -> str:
    found = ["succeeded" if status.succeeded else "complete" if status.complete else "running"]
    if status.dead:
        found.append("dead jobs")
    if status.invalidated:
        found.append("invalidated")
    return ", ".join(found)


def _row(status: BatchStatus) -> list[str]:
    return [status.bid, status.description or "—", tables.count(status.total),
            tables.count(status.pending), tables.count(status.failures), _state(status),
            tables.age(status.created_at)]


def _print(statuses: list[BatchStatus], as_json: bool, empty: str) -> None:
    if as_json:
        emit_json([status.data() for status in statuses])
    elif not statuses:
        click.echo(empty)
    else:
        click.echo(tables.table(HEADERS, [_row(s) for s in statuses], right=(2, 3, 4)))


def _existing(bid: str) -> BatchStatus:
    status = BatchStatus(bid, config=default_config())
    if not status.exists:
        raise click.ClickException(f"no batch {bid}: it expired, was deleted, or never was")
    return status


@click.group("batches", invoke_without_command=True)
@click.option("--tag", metavar="TEXT", help="Only batches with a tag containing TEXT.")
@click.option("--limit", "-n", type=click.IntRange(min=1), default=DEFAULT_LIMIT,
              show_default=True, help="How many batches to list.")
@json_option
@click.pass_context
@friendly
def batches_command(ctx: click.Context, tag: str | None, limit: int, as_json: bool) -> None:
    """Batches: progress, failures, callbacks' state."""
    if ctx.invoked_subcommand is not None:
        return
    config = default_config()
    if tag:
        statuses = [BatchStatus(bid, config=config) for bid in scan_tags(tag, config=config)]
    else:
        statuses = BatchSet(config=config).page(0, limit)
    _print(statuses[:limit], as_json, "No batches." if not tag else "No batch has that tag.")


class BidCommand(click.Command):
    """A command taking a batch id: one that begins with ``-`` (Sidekiq Pro's bids may)
    reads as an option, so the error says to write it after ``--``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            raise click.UsageError(
                f"{exc.format_message()}. A batch id that begins with '-' goes after '--': "
                f"wurk batches {self.name} -- {exc.option_name}…", ctx) from exc


@batches_command.command("show", cls=BidCommand)
@click.argument("bid")
@json_option
@friendly
def show_command(bid: str, as_json: bool) -> None:
    """One batch, with its failed and dead jobs and its children."""
    status = _existing(bid)
    document = {**status.data(), "failed_jids": status.failed_jids,
                "dead_jids": status.dead_jids, "child_bids": status.child_bids,
                "callbacks": [list(cb) for cb in status.callbacks]}
    if as_json:
        emit_json(document)
        return
    click.echo(tables.table(HEADERS, [_row(status)], right=(2, 3, 4)))
    for label, key in (("Failed jobs", "failed_jids"), ("Dead jobs", "dead_jids"),
                       ("Child batches", "child_bids")):
        found = document[key]
        click.echo(printable(f"{label}: {', '.join(found) if found else 'none'}"))
    for event, target, _ in status.callbacks:
        click.echo(printable(f"Callback on {event}: {target}"))
    for problem in status.problems:
        click.echo(printable(f"Problem: {problem}"), err=True)


@batches_command.command("dead")
@json_option
@friendly
def dead_command(as_json: bool) -> None:
    """Batches with a job in the dead set."""
    _print(list(DeadBatches(config=default_config())), as_json, "No dead batches.")


@batches_command.command("retry", cls=BidCommand)
@click.argument("bid")
@friendly
def retry_command(bid: str) -> None:
    """Send a batch's dead jobs back to their queues."""
    _existing(bid)
    moved = DeadBatches(config=default_config()).retry(bid)
    click.echo(f"{tables.plural(moved, 'dead job')} of batch {bid} sent back to their queues.")


@batches_command.command("delete", cls=BidCommand)
@click.argument("bid")
@click.option("--yes", "-y", is_flag=True, help="Do it without asking.")
@friendly
def delete_command(bid: str, yes: bool) -> None:
    """Delete a batch (its jobs stay queued; its callbacks will not fire)."""
    status = _existing(bid)
    confirm(printable(f"Delete batch {bid} ({status.description or 'no description'})?"),
            yes=yes, action="deleting")
    status.delete()
    click.echo(f"Batch {bid} deleted.")
