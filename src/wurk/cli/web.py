"""``wurk web``: serve the dashboard alone with uvicorn.

1. Settings as ``wurk worker`` reads them (``-C`` file, ``-e`` section), without the
   worker's boot warnings (no job registered, queues never pushed to: the dashboard runs no
   job); ``-r`` imports modules first (error handlers, configuration hooks);
   ``--extension MODULE:NAME`` adds a tab; ``--read-only`` switches actions off;
   ``--allowed-host NAME`` adds a host name the dashboard answers to (beside the loopback
   names, the address it listens on and ``web_allowed_hosts``).
2. A port already in use, or a missing ``web`` extra, is one line and exit 1.
3. Ctrl-C stops it; open live streams are cut after ``SHUTDOWN_GRACE`` seconds.
"""

from __future__ import annotations

import socket
from typing import Any

import click

from ..errors import ConfigError
from .worker import load_module, prepare

__all__ = ["web_command"]

# Live streams end at their next tick once the server stops (web_stream_interval, 2 s by
# default); uvicorn waits this long for them and anything else in flight, then cuts them.
SHUTDOWN_GRACE = 5
# Listening on every address: no one name a browser uses follows from it.
WILDCARD_ADDRESSES = frozenset({"0.0.0.0", "::", ""})


@click.command("web")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=7433, show_default=True,
              help="Port to listen on.")
@click.option("-C", "--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="YAML configuration file (the worker's).")
@click.option("-e", "--environment", default=None, help="Section of the config file.")
@click.option("-r", "--require", "modules", multiple=True, metavar="MODULE",
              help="Module to import first (repeatable).")
@click.option("--extension", "extensions", multiple=True, metavar="MODULE:NAME",
              help="A dashboard extension to add (repeatable).")
@click.option("--read-only", is_flag=True, help="Show everything, change nothing.")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="A host name the dashboard answers to, e.g. jobs.example.com behind a "
                   "proxy; '*' for any (repeatable).")
@click.option("--log-format", type=click.Choice(["pretty", "plain", "json"]), default=None,
              help="Log line format.")
def web_command(host: str, port: int, extensions: tuple[str, ...], read_only: bool,
                allowed_hosts: tuple[str, ...], **options: Any) -> None:
    """Serve the dashboard (default http://127.0.0.1:7433/)."""
    try:
        import uvicorn

        from ..web import create_app
        from ..web.context import STATE_ATTRIBUTE
    except ImportError as exc:
        raise click.ClickException(f"wurk web needs the web extra ({exc.name} is missing): "
                                   "pip install 'wurk[web]'") from None
    config = prepare(options, worker=False)  # no worker's warnings: it runs no job
    names = host_names(host, allowed_hosts)
    app = create_app(config, read_only=True if read_only else None,
                     extensions=[load_extension(spec) for spec in extensions],
                     allowed_hosts=names)
    check_port(host, port)
    click.echo(f"wurk web: the dashboard is at http://{url_host(host)}:{port}/", err=True)
    if host in WILDCARD_ADDRESSES and not {*names, *config.web_allowed_hosts} & {"*"}:
        click.echo("wurk web: it answers only to localhost and the names given with "
                   "--allowed-host (or web_allowed_hosts); add the name people reach it by",
                   err=True)
    server = closing_server(uvicorn.Config(app, host=host, port=port, log_level="info",
                                           timeout_graceful_shutdown=SHUTDOWN_GRACE),
                            dashboard=getattr(app.state, STATE_ATTRIBUTE))
    try:
        server.run()
    except KeyboardInterrupt:
        pass  # uvicorn re-raises the Ctrl-C it handled; the server has stopped cleanly
    except SystemExit as exc:  # uvicorn exits when it cannot start; it logged why
        raise click.ClickException(
            f"the web server stopped (exit {exc.code}); see above") from None
    finally:
        config.close()


def host_names(host: str, allowed: tuple[str, ...]) -> list[str]:
    """The names to allow: the ``--allowed-host`` ones, and the address listened on when it
    is one address (a browser can be pointed at it), not every one (``0.0.0.0``)."""
    from ..hosts import check_host_pattern

    for name in allowed:
        try:
            check_host_pattern(name)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--allowed-host'") from None
    if host in WILDCARD_ADDRESSES:
        return list(allowed)
    try:
        return [check_host_pattern(url_host(host)), *allowed]
    except ValueError:  # a scoped IPv6 address (fe80::1%eth0): no Host header carries it
        return list(allowed)


def url_host(host: str) -> str:
    """An address as a URL (and a ``Host`` header) writes it: IPv6 in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def closing_server(config: Any, *, dashboard: Any) -> Any:
    """A uvicorn server that tells the dashboard's live streams to end when it stops."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            dashboard.closing.set()
            super().handle_exit(sig, frame)

    return Server(config)


def load_extension(spec: str) -> Any:
    """``package.module:name`` → the ``Extension`` object it names."""
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise click.BadParameter(f"{spec!r}: write MODULE:NAME, e.g. mypkg.web:extension",
                                 param_hint="'--extension'")
    # As -r loads: from the current directory too, a module that raises shown as such.
    module = load_module(module_name, flag="--extension")
    from ..web import Extension

    found = getattr(module, attribute, None)
    if not isinstance(found, Extension):
        raise ConfigError(f"--extension {spec}: {attribute!r} in {module_name} is not a "
                          "wurk.web.Extension")
    return found


def check_port(host: str, port: int) -> None:
    """Fail with one clear line, before uvicorn logs a traceback-like error, when taken."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {host}:{port} ({exc.strerror}); "
                                       "choose another with --port") from None
