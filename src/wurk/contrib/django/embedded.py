"""An embedded worker for the project's web process: ``start_worker()`` in ``wsgi.py`` or
``asgi.py``, after ``get_wsgi_application()`` / ``get_asgi_application()``.

1. Those modules run in the serving process only (``runserver``'s serving child too, never its
   file-watching parent), never for ``migrate``, ``shell`` or ``manage.py wurk``: the worker
   starts where requests are served and nowhere else.
2. The configuration is the one the app built from ``settings.WURK`` when Django was ready
   (``apps.py``); each installed app's ``jobs.py`` and ``tasks.py`` and the modules of
   ``WURK["IMPORTS"]`` are imported first, as ``manage.py wurk`` does.
3. One worker per process: a second call returns the same one. A worker that cannot boot (a
   ``startup`` hook raising, a port in use, a module of ``IMPORTS`` missing) is logged with
   its traceback and ``None`` is returned: the site serves without it; a later call tries
   again. A child forked after the start (gunicorn ``--preload``, where ``wsgi.py`` runs in
   the master) does not have the parent's threads: such servers call it from ``post_fork``.
4. ``start()`` registered the drain for the interpreter's exit; ``stop_worker()`` drains now
   (gunicorn's ``worker_exit``).
"""

from __future__ import annotations

import logging
import os
import threading

from django.apps import apps
from django.core.exceptions import AppRegistryNotReady, ImproperlyConfigured

from ...inprocess import InProcessWorker
from .apps import WurkAppConfig

__all__ = ["start_worker", "stop_worker"]

log = logging.getLogger("wurk")

_lock = threading.Lock()
_started: dict[int, InProcessWorker] = {}  # by the pid that started it


def start_worker() -> InProcessWorker | None:
    """This process's embedded worker, started at the first call; None when it could not boot
    (logged). Raises ``ImproperlyConfigured`` when the ``wurk.contrib.django`` app is not
    installed or Django is not set up yet."""
    not_ready = ImproperlyConfigured("start_worker() runs once Django is set up: call it "
                                     "after get_wsgi_application() / get_asgi_application()")
    try:
        app = apps.get_app_config(WurkAppConfig.label)
    except AppRegistryNotReady:
        raise not_ready from None
    except LookupError:
        raise ImproperlyConfigured("start_worker() needs 'wurk.contrib.django' in "
                                   "INSTALLED_APPS") from None
    config = app.config if isinstance(app, WurkAppConfig) else None
    if config is None:
        raise not_ready
    with _lock:
        worker = _started.get(os.getpid())
        if worker is not None:
            return worker
        try:
            from .management.commands.wurk import discover
            from .settings import app_settings

            discover(app_settings().imports)
            worker = InProcessWorker(config).start()
        except Exception:  # the start stopped what it had started
            log.exception("wurk: the embedded worker did not start; the site serves requests "
                          "without it (no job runs in this process)")
            return None
        _started[os.getpid()] = worker
        return worker


def stop_worker(timeout: float | None = None) -> None:
    """Drain this process's embedded worker, if it runs one: running jobs get ``timeout``
    (default: the configuration's) seconds, then go back to their queue."""
    with _lock:
        worker = _started.pop(os.getpid(), None)
    if worker is not None:
        worker.stop(timeout)
