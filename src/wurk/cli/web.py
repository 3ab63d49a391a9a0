"""``wurk web``: serve the dashboard alone with uvicorn.

1. Settings as ``wurk worker`` reads them (``-C`` file, ``-e`` section); ``-r`` imports
   modules first (error handlers, configuration hooks); ``--extension MODULE:NAME`` adds a
   tab; ``--read-only`` switches actions off.
2. A port already in use, or a missing ``web`` extra, is one line and exit 1.
3. Ctrl-C stops it; open live streams are cut after ``SHUTDOWN_GRACE`` seconds.
"""

from __future__ import annotations

import importlib
import socket
from typing import Any

import click

from ..errors import ConfigError
from .worker import prepare

__all__ = ["web_command"]

# Live streams end at their next tick once the server stops (web_stream_interval, 2 s by
# default); uvicorn waits this long for them and anything else in flight, then cuts them.
SHUTDOWN_GRACE = 5


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
@click.option("--log-format", type=click.Choice(["pretty", "plain", "json"]), default=None,
              help="Log line format.")
def web_command(host: str, port: int, extensions: tuple[str, ...], read_only: bool,
                **options: Any) -> None:
    """Serve the dashboard (default http://127.0.0.1:7433/)."""
    try:
        import uvicorn

        from ..web import create_app
        from ..web.context import STATE_ATTRIBUTE
    except ImportError as exc:
        raise click.ClickException(f"wurk web needs the web extra ({exc.name} is missing): "
                                   "pip install 'wurk[web]'") from None
    config = prepare(options)
    app = create_app(config, read_only=True if read_only else None,
                     extensions=[load_extension(spec) for spec in extensions])
    check_port(host, port)
    click.echo(f"wurk web: the dashboard is at http://{host}:{port}/", err=True)
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
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise click.BadParameter(f"{spec!r}: no module named {exc.name!r}",
                                 param_hint="'--extension'") from None
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
