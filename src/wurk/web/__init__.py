"""The dashboard: a Starlette app with Jinja2 pages, a JSON API and a live stream.

1. ``create_app`` (``app.py``) builds the ASGI app, mountable under any path prefix; ``wurk
   web`` serves it alone.
2. ``Extension``, ``render``, ``Document`` and ``Endpoint`` (``extensions.py``,
   ``templating.py``, ``api.py``): how another package adds a tab — a page, a JSON
   endpoint listed in the OpenAPI schema, or a JSON answer in which stored
   values that cannot be read (``wurk.api.values.Invalid``) are ``null`` plus raw text — or
   rows to a job's info table (``JobRows``, ``Extension.job_rows``).
3. Everything else is private: pages (``views.py``), actions (``actions.py``), the JSON API
   (``api.py``, ``openapi.py``), the live stream (``sse.py``), what they read (``data.py``),
   and the guard every request passes (``guard.py``, ``security.py``).

Needs the ``web`` extra: ``pip install 'wurk[web]'``.
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError(f"wurk.web needs the web extra ({exc.name} is missing): "
                      "pip install 'wurk[web]'") from exc

from .api import Document, Endpoint
from .app import create_app
from .context import Dashboard, dashboard
from .extensions import Extension, JobRows
from .templating import render

__all__ = ["Dashboard", "Document", "Endpoint", "Extension", "JobRows", "create_app",
           "dashboard", "render"]
