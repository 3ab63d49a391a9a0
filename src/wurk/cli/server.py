"""``wurk server start | stop | status``: the embedded server from the command line.

1. ``start`` starts the server of the home every wurk process here finds (the nearest
   ``.wurk`` from the current directory up to the project root, ``wurk.connections.locate``; or
   ``WURK_HOME``), or reports the one already running there; any wurk process that pushes
   or works jobs would start it on first use anyway.
2. ``stop`` stops it; its data stays. Stopping a server that is not running is not an error.
3. ``status`` prints where it is, its port, pid, memory and how many jobs wait. Its exit code
   follows the LSB convention for ``status``: 0 running, 1 dead but its pid file left (or
   not answering), 3 not running.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import click

from .. import stored
from ..api.queues import QUEUE_CAP
from ..config import Config
from ..connections.home import find_home
from ..connections.locate import describe_url
from ..connections.pool import RedisPool
from ..connections.server import EmbeddedServer, ServerStatus, shown_home
from ..errors import EmbeddedServerError
from ..keys import Keys
from ..stored import Invalid

__all__ = ["server"]

EXIT_NOT_RUNNING = 3

home_option = click.option(
    "--home", type=click.Path(file_okay=False), default=None,
    help="Directory of the server's data (default: WURK_HOME, else the nearest .wurk from "
         "here up to the project root).",
)


def _server(home: str | None, *, port: int | None = None) -> tuple[EmbeddedServer, str]:
    """The server of ``home`` (default: the one every wurk process here finds) and how to
    show its home."""
    if home is not None:
        return EmbeddedServer(home, port=port), shown_home(home)
    found = find_home(Config().home)
    return EmbeddedServer(found, port=port), str(found)


@click.group("server")
def server() -> None:
    """Start, stop or inspect the embedded server (a private Valkey under .wurk)."""


@server.command()
@home_option
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="Listen on this loopback port (default: the recorded one, else a free one).")
def start(home: str | None, port: int | None) -> None:
    """Start the embedded server, or report the one already running."""
    embedded, shown = _server(home, port=port)
    status = embedded.start()
    if status.replaced:
        click.echo(f"replaced a stale pid file ({status.replaced})")
    verb = "started" if status.started else "already running:"
    click.echo(f"{verb} the embedded server at {shown}, port {status.port} (pid {status.pid}), "
               f"{status.url}")
    if port is not None and status.port != port:
        click.echo(f"it keeps port {status.port}: `wurk server stop` first to move it to {port}")


@server.command()
@home_option
def stop(home: str | None) -> None:
    """Stop the embedded server; its data stays for the next start."""
    embedded, shown = _server(home)
    found = embedded.stop()
    if found.state in ("running", "unresponsive"):
        click.echo(f"stopped the embedded server at {shown} (pid {found.pid}); its data stays")
    elif found.state == "stale":
        click.echo(f"the embedded server at {shown} was not running; removed its stale pid "
                   f"file ({found.reason})")
    else:
        click.echo(f"no embedded server is running at {shown}")


@server.command()
@home_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
def status(ctx: click.Context, home: str | None, as_json: bool) -> None:
    """Where the embedded server is, its port, pid, memory and queued jobs."""
    embedded, shown = _server(home)
    found = embedded.status()
    if found.state in ("stale", "unresponsive"):
        raise EmbeddedServerError(_trouble(found, shown))
    if found.state == "stopped":
        _print_stopped(found, shown, as_json)
        ctx.exit(EXIT_NOT_RUNNING)
    report = _report(found, Config())
    click.echo(json.dumps(stored.to_json(report)) if as_json else _human(report, shown))


def _trouble(found: ServerStatus, shown: str) -> str:
    if found.state == "stale":
        return (f"the embedded server at {shown} is not running ({found.reason}); "
                "`wurk server start` starts it again with its data")
    return (f"the embedded server at {shown} is not answering ({found.reason}); "
            "`wurk server stop` ends it (killing it if need be), then `wurk server start`")


def _print_stopped(found: ServerStatus, shown: str, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"home": str(found.home), "state": "stopped"}))
    else:
        click.echo(f"no embedded server is running at {shown}; `wurk server start` starts "
                   "one (any wurk command starts it on first use)")


# -- what the running server holds -------------------------------------------------------------
@dataclass(frozen=True)
class _Backlog:
    """What ``status`` reads; a key of another type (or a count that is none) is an
    ``Invalid`` in its place, and ``queues`` holds at most ``QUEUE_CAP`` names."""

    memory: str
    queues: dict[str, int | Invalid] | Invalid
    scheduled: int | Invalid
    retries: int | Invalid
    dead: int | Invalid


def _backlog(pool: RedisPool, keys: Keys) -> _Backlog:
    """Memory and job counts, read in a few round trips; a key of another type is shown as
    invalid, never a traceback, and a ``queues`` set of a million names costs what a
    thousand do.

    Moves to the inspection model (``wurk.api``) when that lands.
    """

    def read(client: Any) -> _Backlog:
        found = stored.members(client, keys.queues, cap=QUEUE_CAP)
        names = [] if isinstance(found, Invalid) else sorted(
            {stored.text(name) for name in found.items})
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.llen(keys.queue(name))
        pipe.zcard(keys.schedule).zcard(keys.retry).zcard(keys.dead).info("memory")
        *sizes, scheduled, retries, dead, memory = stored.replies(pipe)
        queues: dict[str, int | Invalid] | Invalid = found if isinstance(found, Invalid) \
            else {name: stored.count(size) for name, size in zip(names, sizes, strict=True)}
        used = memory.get("used_memory_human", "?") if isinstance(memory, dict) else "?"
        return _Backlog(str(used), queues, stored.count(scheduled), stored.count(retries),
                        stored.count(dead))

    return pool.run(read, idempotent=True)


def _report(found: ServerStatus, config: Config) -> dict[str, Any]:
    pool = RedisPool(found.url, size=1, name="wurk-cli", socket_timeout=config.socket_timeout)
    try:
        backlog = _backlog(pool, config.keys)
    finally:
        pool.close()
    queues = backlog.queues
    return {
        "home": str(found.home), "state": found.state, "url": found.url, "port": found.port,
        "pid": found.pid, "memory": backlog.memory,
        "queued": 0 if isinstance(queues, Invalid) else stored.valid_total(queues.values()),
        "queues": queues, "scheduled": backlog.scheduled, "retries": backlog.retries,
        "dead": backlog.dead,
        "redis_url": describe_url(config.redis_url) if config.redis_url else None,
    }


def _human(report: dict[str, Any], shown: str) -> str:
    found = report["queues"]
    if isinstance(found, Invalid):
        queues = f"the queues set is {found}"
    else:
        queues = ", ".join(f"{stored.printable(name)} {size}" for name, size in found.items())
    lines = [
        f"embedded server at {shown}: running",
        f"  home:      {report['home']}",
        f"  url:       {report['url']}",
        f"  port:      {report['port']}",
        f"  pid:       {report['pid']}",
        f"  memory:    {stored.printable(report['memory'])}",
        f"  queued:    {report['queued']} jobs" + (f" ({queues})" if queues else ""),
        f"  scheduled: {report['scheduled']} · retries: {report['retries']} · "
        f"dead: {report['dead']}",
    ]
    if report["redis_url"]:
        lines.append(f"note: REDIS_URL is set ({report['redis_url']}), so wurk processes "
                     "started here use that Redis, not this server")
    return "\n".join(lines)
