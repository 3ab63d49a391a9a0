"""``manage.py wurk``: a worker with the project's settings and jobs.

1. Configuration: ``settings.WURK``, then the flags (``-q``, ``-c``, ``-t``).
2. Jobs: every installed app's ``jobs.py`` and ``tasks.py`` (``django.tasks`` tasks), and
   the modules ``WURK["IMPORTS"]`` names.
3. With ``AUTORELOAD`` (default: ``DEBUG``) the worker restarts when a loaded file changes,
   as ``runserver`` does: a parent process starts the worker as a child and starts it
   again when it exits with code 3. The child stops gracefully first (running jobs finish
   or go back to their queue). The parent relays TERM and INT to the child.
4. A worker that cannot start (no Redis to use, a bad setting) is one ``CommandError`` line,
   as ``wurk`` prints it, never a traceback.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import threading
from typing import Any

import click
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import autoreload
from django.utils.module_loading import autodiscover_modules

from wurk import log as wurk_log
from wurk.cli.worker import run_worker
from wurk.config import configure
from wurk.contrib.django.settings import app_settings, build_config
from wurk.errors import WurkError
from wurk.runtime.signals import SignalPipe

__all__ = ["Command", "discover"]

# The exit code that asks the reloading parent for a fresh child (Django's convention).
RELOAD_EXIT_CODE = 3


def discover(imports: tuple[str, ...]) -> None:
    autodiscover_modules("jobs", "tasks")
    for module in imports:
        importlib.import_module(module)


class Command(BaseCommand):
    help = "Run a wurk worker with this project's settings and jobs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("-q", "--queue", action="append", dest="queues", default=None,
                            metavar="QUEUE[,WEIGHT]", help="Queue to process (repeatable).")
        parser.add_argument("-c", "--concurrency", type=int, default=None,
                            help="Processor threads.")
        parser.add_argument("-t", "--timeout", type=float, default=None,
                            help="Shutdown timeout in seconds.")
        parser.add_argument("--noreload", action="store_true",
                            help="Do not restart the worker when code changes.")

    def handle(self, *args: Any, **options: Any) -> None:
        overrides = {name: options[name] for name in ("queues", "concurrency", "timeout")
                     if options.get(name) is not None}
        if app_settings().autoreload and not options["noreload"]:
            self._reloading(overrides)
        else:
            self._serve(overrides, None)

    def _serve(self, overrides: dict[str, Any], pipe: SignalPipe | None) -> None:
        try:
            config = build_config(**overrides)
            configure(config)
            wurk_log.setup(fmt=config.log_format, level=config.log_level)
            discover(app_settings().imports)
            run_worker(config, pipe)
        except click.ClickException as exc:  # what the wurk command prints as one line
            raise CommandError(exc.format_message()) from None
        except WurkError as exc:
            raise CommandError(str(exc)) from None

    def _reloading(self, overrides: dict[str, Any]) -> None:
        if os.environ.get(autoreload.DJANGO_AUTORELOAD_ENV) != "true":
            sys.exit(_supervise_reloads())
        pipe = SignalPipe()
        changed = threading.Event()

        def on_change(sender: Any, file_path: Any, **kwargs: Any) -> bool:
            self.stdout.write(f"wurk: {file_path} changed, restarting the worker")
            changed.set()
            pipe.push("TERM")
            return True  # handled: Django's reloader must not exit from its own thread

        autoreload.file_changed.connect(on_change)
        reloader = autoreload.get_reloader()
        watcher = threading.Thread(target=reloader.run, args=(threading.main_thread(),),
                                   name="wurk-autoreload", daemon=True)
        watcher.start()
        try:
            self._serve(overrides, pipe)
        finally:
            reloader.stop()
            autoreload.file_changed.disconnect(on_change)
        if changed.is_set():
            sys.exit(RELOAD_EXIT_CODE)


def _supervise_reloads() -> int:
    """Run the worker as a child, again each time it exits asking for a reload."""
    environ = {**os.environ, autoreload.DJANGO_AUTORELOAD_ENV: "true"}
    while True:
        child = subprocess.Popen(autoreload.get_child_arguments(), env=environ)

        def relay(number: int, frame: Any, child: subprocess.Popen[bytes] = child) -> None:
            child.send_signal(number)

        previous = {sig: signal.signal(sig, relay) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            code = child.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if code != RELOAD_EXIT_CODE:
            return code
