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
from typing import Any

import click

from .. import __version__
from ..errors import ConfigError, WurkError

__all__ = ["main"]

# (module, attribute) of each subcommand; imported when the group is built, not at import.
SUBCOMMANDS: tuple[tuple[str, str], ...] = (
    ("worker", "worker"),
    ("swarm", "swarm"),
    ("server", "server"),
    ("demo", "demo"),
    ("inspect", "stats_command"),
    ("inspect", "queues_command"),
    ("inspect", "retries_command"),
    ("inspect", "scheduled_command"),
    ("inspect", "dead_command"),
    ("inspect", "processes_command"),
    ("inspect", "retry_command"),
    ("inspect", "kill_command"),
    ("enqueue", "enqueue_command"),
    ("web", "web_command"),
    ("batches", "batches_command"),
    ("periodic", "periodic"),
)

EXIT_ERROR = 1
EXIT_USAGE = 2

DEFAULT_COMMAND = "worker"


class WurkGroup(click.Group):
    """A group whose default subcommand is ``worker``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0].startswith("-") and args[0] not in ("--help", "-h", "--version") \
                and DEFAULT_COMMAND in self.commands:
            args = [DEFAULT_COMMAND, *args]
        return super().parse_args(ctx, args)


@click.group(cls=WurkGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="wurk")
def main() -> None:
    """Background jobs for Python on Redis, data-compatible with Sidekiq."""


def _register() -> None:
    for module_name, attribute in SUBCOMMANDS:
        module = importlib.import_module(f"wurk.cli.{module_name}")
        command: Any = getattr(module, attribute)
        if command.name not in main.commands:
            main.add_command(command)


def run(argv: Sequence[str] | None = None) -> int:
    """Entry point used by tests: returns the exit code instead of exiting."""
    _register()
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
