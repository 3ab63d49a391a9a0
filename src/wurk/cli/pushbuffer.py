"""``wurk push-buffer status | flush [DIR]``: reliable push's disk buffers on this host.

1. ``status`` reads the buffer files in DIR (default: the configuration's,
   ``reliable_push_dir`` or ``.wurk/push-buffer``) without Redis: per file, the jobs waiting,
   the oldest one's age, and whether a running process holds it (it sends its own) or a
   dead one left it. ``--json`` for scripts.
   The ``redis`` column: where a file's jobs go (its default shard's Redis, no password).
2. ``flush`` sends the jobs of every file no running process holds — what a process killed
   with jobs buffered left, when no successor runs on this host — each recorded as sent in
   its file, the file deleted once empty. Exit 1 when Redis cannot take them (they stay).
   Only jobs kept for the configuration's own Redis (db, key prefix) are sent: another
   application's files sharing the directory are left to it.
   Sending a job its owner had sent already pushes nothing (``wurk.client.idempotent``).
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from ..client.buffer import survey
from ..client.reliable import buffer_directory, flush_directory
from . import tables
from .inspect import default_config, emit_json, friendly, json_option, server_name

__all__ = ["push_buffer"]

directory_argument = click.argument("directory", required=False,
                                    type=click.Path(file_okay=False, path_type=Path))


@click.group("push-buffer")
def push_buffer() -> None:
    """Reliable push's disk buffers on this host (reliable_push: disk)."""


@push_buffer.command("status")
@directory_argument
@json_option
@friendly
def status_command(directory: Path | None, as_json: bool) -> None:
    """The jobs each buffer file in DIRECTORY holds, and whether its process runs."""
    place = directory or buffer_directory(default_config())
    reports = survey(place)
    if as_json:
        emit_json({"directory": str(place), "files": [r.to_dict() for r in reports]})
        return
    if not reports:
        click.echo(f"{place}: no buffer files")
        return
    now = time.time()
    rows = [(r.path.name, "running" if r.held else "left by a dead process",
             "?" if r.foreign else tables.count(r.pending), tables.age(r.oldest, now),
             _redis(r.redis)) for r in reports]
    click.echo(f"{place}:")
    click.echo(tables.table(("file", "process", "jobs", "oldest", "redis"), rows,
                            right=(2,)))
    for report in reports:
        if report.foreign:
            click.echo(f"{report.path.name}: {report.foreign}, not read by this wurk: left "
                       "as it is for the wurk that wrote it")
    if any(not r.held and r.pending for r in reports):
        click.echo(f"`wurk push-buffer flush {place}` sends what dead processes left")


def _redis(redis: dict[str, str] | None) -> str:
    """The Redis a file's jobs go to: its default shard's (``+N`` more shards)."""
    if redis is None:
        return "not recorded (an older wurk's file)"
    first = redis.get("default", next(iter(redis.values()), "?"))
    return first + (f" +{len(redis) - 1} shard(s)" if len(redis) > 1 else "")


@push_buffer.command("flush")
@directory_argument
@friendly
def flush_command(directory: Path | None) -> None:
    """Send the jobs that processes no longer running left in DIRECTORY."""
    config = default_config()
    place = directory or buffer_directory(config)
    pushed, left, held = flush_directory(config, place)
    line = f"sent {tables.plural(pushed, 'job')} from {place} to {server_name(config)}"
    if held:
        line += f"; {tables.plural(held, 'file')} held by a running process (it sends its own)"
    click.echo(line)
    if left:
        raise click.ClickException(f"{tables.plural(left, 'job')} could not be sent and "
                                   "stay in their files")
