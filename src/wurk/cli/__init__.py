"""The ``wurk`` command: one click group, one module per family of subcommands.

``wurk -r app.jobs …`` without a subcommand means ``wurk worker -r app.jobs …``, as
``sidekiq -r …`` does. Bad flags exit 2 with one line naming the flag (click's usage errors).

Exit codes: 0 done; 1 a runtime error (a ``WurkError``: Redis unreachable, the embedded
server cannot start…), printed as one ``Error:`` line, never a traceback; 2 bad usage, a bad
flag or a bad configuration (``ConfigError``). A command may end with ``ctx.exit(code)`` to
report another code (``wurk server status`` answers 3 for "not running").
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

import click

from .._version import __version__
from ..errors import ConfigError, WurkError

__all__ = ["main"]

# name → (module, attribute) of each subcommand, in the order ``--help`` lists them. A
# subcommand's module is imported only when that subcommand runs (or help lists it): a
# worker process keeps none of the others' code (the server commands alone import the
# embedded server's, about 1 MB of a worker's memory).
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "worker": ("worker", "worker"),
    "swarm": ("swarm", "swarm"),
    "server": ("server", "server"),
    "demo": ("demo", "demo"),
    "stats": ("inspect", "stats_command"),
    "queues": ("inspect", "queues_command"),
    "retries": ("inspect", "retries_command"),
    "scheduled": ("inspect", "scheduled_command"),
    "dead": ("inspect", "dead_command"),
    "processes": ("inspect", "processes_command"),
    "retry": ("inspect", "retry_command"),
    "kill": ("inspect", "kill_command"),
    "cancel": ("cancel", "cancel_command"),
    "enqueue": ("enqueue", "enqueue_command"),
    "web": ("web", "web_command"),
    "top": ("top", "top_command"),
    "batches": ("batches", "batches_command"),
    "periodic": ("periodic", "periodic"),
    "push-buffer": ("pushbuffer", "push_buffer"),
}

EXIT_ERROR = 1
EXIT_USAGE = 2

DEFAULT_COMMAND = "worker"


class WurkGroup(click.Group):
    """A group whose default subcommand is ``worker`` and whose subcommands are imported
    when asked for (``SUBCOMMANDS``)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0].startswith("-") and args[0] not in ("--help", "-h", "--version"):
            args = [DEFAULT_COMMAND, *args]
        return super().parse_args(ctx, args)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*SUBCOMMANDS, *(name for name in super().list_commands(ctx)
                                if name not in SUBCOMMANDS)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in SUBCOMMANDS and cmd_name not in self.commands:
            module_name, attribute = SUBCOMMANDS[cmd_name]
            module = importlib.import_module(f"wurk.cli.{module_name}")
            self.add_command(getattr(module, attribute), cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=WurkGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="wurk")
def main() -> None:
    """Background jobs for Python on Redis, data-compatible with Sidekiq."""


def run(argv: Sequence[str] | None = None) -> int:
    """Entry point used by tests: returns the exit code instead of exiting."""
    try:
        # Outside standalone mode click returns ``ctx.exit(code)``'s code (and --help's 0)
        # instead of raising it, so the code is read from the return value.
        code = main.main(args=list(argv) if argv is not None else None, prog_name="wurk",
                         standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("Aborted!", err=True)
        return EXIT_ERROR
    except WurkError as exc:
        click.echo(f"Error: {exc}", err=True)
        return EXIT_USAGE if isinstance(exc, ConfigError) else EXIT_ERROR
    return code if isinstance(code, int) and not isinstance(code, bool) else 0


def entry() -> None:
    sys.exit(run())
