"""wurk in a Flask app: ``Wurk(app)`` or ``wurk_ext.init_app(app)``.

1. Settings: every ``WURK_<SETTING>`` key of ``app.config`` is a ``wurk.Config`` setting
   (``WURK_REDIS_URL``, ``WURK_CONCURRENCY``…; an unknown one is an error naming it), and
   ``WURK_IMPORTS`` lists modules the worker loads besides what the app imports. The
   configuration is made the process default.
2. Each job runs inside ``app.app_context()`` (server middleware), so jobs use
   ``current_app``, extensions and their database sessions as views do.
3. ``dashboard="/wurk"`` mounts the dashboard as routes of the app, behind
   ``authorize()``, called inside the request (``flask.session``, ``g``, a login
   extension's ``current_user`` are there); it is required, as the dashboard shows and
   changes every job. Not mounted by default.
4. ``flask wurk worker`` runs a worker with this app's configuration; ``flask wurk stats``,
   ``queues``, ``retries``, ``dead``, ``processes``, ``retry``, ``kill`` are wurk's own.
5. ``worker=True`` (``Wurk(app, worker=True)`` or ``init_app(app, worker=True)``) runs an
   embedded worker (threads in this process, ``wurk.InProcessWorker``) with the app's
   configuration, so its jobs run in the app context. It starts with the first request
   the process serves, not at ``init_app``: a ``flask`` command (``flask wurk worker``,
   ``flask db upgrade``), a test that never requests, gunicorn's ``--preload`` master and
   ``flask run``'s reloading parent import the app factory too, and serve no request. One
   try per process: a worker that cannot boot (a ``startup`` hook raising, a port in use, a
   ``WURK_IMPORTS`` module missing) is logged with its traceback and the app serves
   without it (``embedded`` stays None). ``start()`` registered its drain for the
   interpreter's exit; ``stop()`` drains now (gunicorn's ``worker_exit``). An extension on
   several apps runs a worker for each: ``embedded`` is the app in context's,
   ``worker_of(app)`` any app's.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

try:
    import click
    from flask import Flask, Response, current_app, has_app_context, request
    from flask.cli import AppGroup
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError("wurk.contrib.flask needs Flask: pip install 'wurk[flask]'") from exc

from ..config import Config, configure
from ..crypto import check_active_key
from ..errors import ConfigError
from ..inprocess import InProcessWorker
from . import require_authorize
from .wsgi_mount import WsgiDashboard, environ_for

__all__ = ["Wurk"]

PREFIX = "WURK_"
OWN_KEYS = ("imports",)
EXTENSION = "wurk"
Authorize = Callable[[], bool]

log = logging.getLogger("wurk")


class AppContext:
    """Server middleware: each job inside the app's context."""

    def __init__(self, app: Flask) -> None:
        self.app = app

    def __call__(self, job: Any, payload: dict[str, Any], queue: str,
                 call_next: Callable[[], Any]) -> Any:
        if has_app_context() and current_app._get_current_object() is self.app:  # type: ignore[attr-defined]
            return call_next()  # inline in a test or a request: already inside it
        with self.app.app_context():
            return call_next()


def settings_of(app: Flask) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``WURK_*`` keys as (wurk settings, modules to import)."""
    values = {key[len(PREFIX):].lower(): value for key, value in app.config.items()
              if key.startswith(PREFIX)}
    imports = values.pop("imports", ())
    if isinstance(imports, str) or not all(isinstance(m, str) for m in imports):
        raise ConfigError(f"WURK_IMPORTS must be a list of module paths, not {imports!r}")
    return values, tuple(imports)


class EmbeddedStart:
    """An app's embedded worker, started by the first request of each process (point 5)."""

    def __init__(self, app: Flask, config: Config) -> None:
        self.app = app
        self.config = config
        self.worker: InProcessWorker | None = None
        self.pid: int | None = None  # the process that tried to start it
        self._lock = threading.Lock()

    def before_request(self) -> None:
        if self.pid != os.getpid():  # once per process; the parent's worker stayed there
            with self._lock:
                if self.pid != os.getpid():
                    self.pid = os.getpid()
                    self.worker = self._boot()

    def _boot(self) -> InProcessWorker | None:
        try:
            for module in settings_of(self.app)[1]:
                importlib.import_module(module)
            return InProcessWorker(self.config).start()
        except Exception:  # the start stopped what it had started
            log.exception("wurk: the embedded worker of the Flask app %r did not start; the "
                          "app serves requests without it (no job runs in this process)",
                          self.app.name)
            return None

    def stop(self, timeout: float | None = None) -> None:
        with self._lock:  # no request starts one after this, in this process
            worker, owned = self.worker, self.pid == os.getpid()
            self.worker, self.pid = None, os.getpid()
        if worker is not None and owned:
            worker.stop(timeout)


class Wurk:
    """The Flask extension; one per app, or one for several through ``init_app``."""

    def __init__(self, app: Flask | None = None, *, dashboard: str | None = None,
                 authorize: Authorize | None = None, live: bool = False,
                 worker: bool = False) -> None:
        require_authorize(dashboard, authorize, "lambda: session.get('admin') is True, "
                          "called inside the request")
        self.dashboard_path = dashboard
        self.authorize = authorize
        self.live = live
        self.worker = worker
        self._starts: list[EmbeddedStart] = []
        if app is not None:
            self.init_app(app)

    @property
    def embedded(self) -> InProcessWorker | None:
        """The embedded worker this process runs for the app in context (``current_app``:
        in a request, a job, ``app.app_context()``); outside any, the latest app's, for an
        extension serving several. None with ``worker=False``, before the first request,
        after a failed boot and after ``stop()``."""
        if has_app_context():
            return self.worker_of(current_app._get_current_object())  # type: ignore[attr-defined]
        for start in reversed(self._starts):
            if start.worker is not None and start.pid == os.getpid():
                return start.worker
        return None

    def worker_of(self, app: Flask) -> InProcessWorker | None:
        """The embedded worker this process runs for ``app`` (None as for ``embedded``, and
        for an app this extension was not set up on)."""
        for start in self._starts:
            if start.app is app and start.worker is not None and start.pid == os.getpid():
                return start.worker
        return None

    def stop(self, timeout: float | None = None) -> None:
        """Drain the embedded workers this process runs: running jobs get ``timeout``
        (default: the configuration's) seconds, then go back to their queue. For gunicorn's
        ``worker_exit``; the exit of the interpreter drains them too. None starts again."""
        for start in self._starts:
            start.stop(timeout)

    def init_app(self, app: Flask, *, worker: bool | None = None) -> None:
        """Set wurk up on ``app``; ``worker`` (default: the constructor's) runs an embedded
        worker from the first request on (point 5)."""
        if EXTENSION in app.extensions:
            # A second init_app failed half-way (Flask's AssertionError about an endpoint,
            # after the new configuration had replaced the process default).
            raise ConfigError(f"wurk is already set up on the Flask app {app.name!r}: "
                              "call Wurk(app) or init_app(app) once per app")
        config = self.build_config(app)
        configure(config)
        app.extensions[EXTENSION] = self
        app.cli.add_command(cli_group())
        if self.dashboard_path is not None and self.authorize is not None:
            self._mount_dashboard(app, config)
        if self.worker if worker is None else worker:
            start = EmbeddedStart(app, config)
            self._starts.append(start)
            app.before_request(start.before_request)

    @staticmethod
    def build_config(app: Flask, **overrides: Any) -> Config:
        values, _ = settings_of(app)
        config = Config.from_mapping({**values, **overrides}, source="app.config WURK_*")
        config.server_middleware.add(AppContext(app))
        return config

    def _mount_dashboard(self, app: Flask, config: Config) -> None:
        dashboard = WsgiDashboard(config, live=self.live)
        authorize = self.authorize
        prefix = (self.dashboard_path or "").rstrip("/")

        def view(subpath: str = "") -> Response:
            if authorize is None or authorize() is not True:  # refused unless exactly True
                return Response("Forbidden", status=403, mimetype="text/plain")
            script_name = request.script_root + prefix
            environ = environ_for(request.environ, script_name=script_name,
                                  path_info=subpath, body=request.get_data(),
                                  scheme=request.scheme)
            status, headers, body = dashboard.respond(environ)
            return Response(body, status=status, headers=headers)

        methods = ["GET", "POST", "HEAD"]
        app.add_url_rule(f"{prefix}/", "wurk_dashboard", view, methods=methods)
        app.add_url_rule(f"{prefix}/<path:subpath>", "wurk_dashboard_path", view,
                         methods=methods)


def cli_group() -> AppGroup:
    """``flask wurk …``: a worker for the app, and wurk's inspection commands."""
    from ..cli import inspect

    group = AppGroup("wurk", help="Background jobs: run a worker, look at queues.")
    group.add_command(worker_command)
    for command in (inspect.stats_command, inspect.queues_command, inspect.retries_command,
                    inspect.dead_command, inspect.processes_command, inspect.retry_command,
                    inspect.kill_command):
        group.add_command(command)
    return group


@click.command("worker")
@click.option("-q", "--queue", "queues", multiple=True, metavar="QUEUE[,WEIGHT]",
              help="Queue to process (repeatable).")
@click.option("-c", "--concurrency", type=click.IntRange(min=1), default=None,
              help="Processor threads.")
@click.option("-t", "--timeout", type=click.FloatRange(min=0), default=None,
              help="Shutdown timeout in seconds.")
def worker_command(queues: tuple[str, ...], concurrency: int | None,
                   timeout: float | None) -> None:
    """Run a worker with this app's configuration."""
    from .. import log as wurk_log
    from ..cli.worker import run_worker

    app: Flask = current_app._get_current_object()  # type: ignore[attr-defined]
    overrides: dict[str, Any] = {"queues": list(queues)} if queues else {}
    if concurrency is not None:
        overrides["concurrency"] = concurrency
    if timeout is not None:
        overrides["timeout"] = timeout
    try:
        config = Wurk.build_config(app, **overrides)
        config.check_worker()  # the encryption key once the modules had their say
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    configure(config)
    wurk_log.setup(fmt=config.log_format, level=config.log_level)
    for module in settings_of(app)[1]:
        importlib.import_module(module)
    try:
        check_active_key(config)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    run_worker(config)
