"""wurk in a Django project: ``INSTALLED_APPS += ["wurk.contrib.django"]``.

1. Settings: ``WURK = {...}`` in settings.py feeds ``wurk.Config`` (keys are its setting
   names, any case), plus three of this app's own: ``DATABASE`` (the alias whose
   transactions pushes wait for, default ``"default"``), ``IMPORTS`` (modules the worker
   loads besides each app's ``jobs.py`` and ``tasks.py``) and ``AUTORELOAD`` (restart the
   worker when code changes; default ``DEBUG``). Built when the app is ready
   (``apps.py``), made the process default.
2. Pushes inside ``transaction.atomic()`` are rows of the outbox table (``models.py``, its
   migration), written in the same transaction and relayed to Redis after the commit
   (``client`` defaults to ``"outbox"`` here; ``"transactional"`` waits for ``on_commit``
   without a table; ``"default"`` pushes at once; ``set(transactional=False)`` skips it for
   one push).
3. Each job runs between ``close_old_connections()`` calls, as a request does.
4. ``manage.py wurk``: the worker (``management/commands/wurk.py``).
5. The dashboard: ``path("wurk/", include("wurk.contrib.django.urls"))``, staff only
   (``urls.py``, ``dashboard.py``).
6. ``django.tasks``: ``TASKS = {"default": {"BACKEND": "wurk.contrib.django.tasks.WurkBackend"}}``.
7. An embedded worker in the web process: ``start_worker()`` in ``wsgi.py`` / ``asgi.py``,
   ``stop_worker()`` from the server's graceful-exit hook (``embedded.py``).

Needs the ``django`` extra: ``pip install 'wurk[django]'``.
"""

from __future__ import annotations

from .embedded import start_worker, stop_worker

__all__ = ["start_worker", "stop_worker"]
