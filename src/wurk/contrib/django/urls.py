"""``path("wurk/", include("wurk.contrib.django.urls"))``: the dashboard, staff only.

For another rule: ``path("wurk/", include(dashboard_urls(authorize=lambda r: ...)))``.
"""

from __future__ import annotations

from typing import Any

from django.urls import URLPattern, re_path

from .dashboard import Authorize, dashboard_view, staff_only

__all__ = ["app_name", "dashboard_urls", "urlpatterns"]


def dashboard_urls(authorize: Authorize = staff_only, *, live: bool = False
                   ) -> tuple[list[URLPattern], str]:
    """URL patterns for ``include()``; ``live=True`` keeps the live stream on (a thread per
    open tab: for threaded or async servers)."""
    view: Any = dashboard_view(authorize, live=live)
    return [re_path(r"^(?P<subpath>.*)$", view, name="dashboard")], "wurk"


urlpatterns, app_name = dashboard_urls()
