"""The dashboard as a Django view: Django decides who may look, the dashboard does the rest.

1. ``dashboard_view(authorize)`` makes the view: an anonymous visitor is sent to log in —
   to ``LOGIN_URL`` when the project set it or routes Django's default
   (``/accounts/login/``), else to the admin's login page, as Django's
   ``staff_member_required`` does (a fresh ``startproject`` routes only the admin); a
   signed-in user whom ``authorize(request)`` refuses gets 403. The default lets active
   staff users in.
2. The request goes on to the dashboard (``wurk.contrib.wsgi_mount``) under the prefix it
   was routed at; the answer comes back streamed, cookies included.
3. Django's CSRF check is skipped for it: the dashboard checks its own token and the
   request's origin on every POST.
4. The ``Host`` is Django's to check (``ALLOWED_HOSTS``, through ``request.get_host()``):
   the dashboard answers to every host Django answers to, with no setting of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from http.cookies import SimpleCookie
from typing import Any

from django.conf import global_settings, settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.urls import NoReverseMatch, Resolver404, resolve, reverse
from django.views.decorators.csrf import csrf_exempt

from ..wsgi_mount import WsgiDashboard, environ_for

__all__ = ["dashboard_view", "login_url", "staff_only"]

log = logging.getLogger("wurk.web")
Authorize = Callable[[HttpRequest], bool]


def staff_only(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_active and user.is_staff)


def dashboard_view(authorize: Authorize = staff_only, *, live: bool = False
                   ) -> Callable[..., HttpResponseBase]:
    dashboard = WsgiDashboard(live=live, hosts_checked=True)

    @csrf_exempt
    def view(request: HttpRequest, subpath: str = "") -> HttpResponseBase:
        request.get_host()  # Django's ALLOWED_HOSTS check (DisallowedHost: Django's 400)
        refusal = _refusal(request, authorize)
        if refusal is not None:
            return refusal
        prefix = request.path[: len(request.path) - len(subpath)]
        environ = environ_for(request.META, script_name=prefix, path_info=subpath,
                              body=request.body, scheme=request.scheme or "http")
        status, headers, body = dashboard.respond(environ)
        return _response(status, headers, body)

    return view


def _refusal(request: HttpRequest, authorize: Authorize) -> HttpResponseBase | None:
    user = getattr(request, "user", None)
    if user is None:
        log.warning("the wurk dashboard needs django.contrib.auth's AuthenticationMiddleware "
                    "to know who is asking; refusing")
        return HttpResponse("Forbidden", status=403, content_type="text/plain")
    if not user.is_authenticated:
        return redirect_to_login(request.get_full_path(), login_url=login_url())
    if authorize(request) is not True:
        return HttpResponse("Forbidden", status=403, content_type="text/plain")
    return None


def login_url() -> str:
    """``LOGIN_URL``, unless it is Django's default and the project does not route it; then
    the admin's login page when the admin is routed."""
    configured = settings.LOGIN_URL
    if configured != global_settings.LOGIN_URL:
        return str(configured)
    try:
        resolve(str(configured))
        return str(configured)
    except Resolver404:
        pass
    try:
        return reverse("admin:login")
    except NoReverseMatch:
        return str(configured)


def _response(status: int, headers: list[tuple[str, str]], body: Any) -> HttpResponseBase:
    response: HttpResponseBase = HttpResponse(body[0], status=status) \
        if isinstance(body, list) else StreamingHttpResponse(body, status=status)
    for name, value in headers:
        if name.lower() == "set-cookie":
            response.cookies.load(SimpleCookie(value))
        elif name.lower() != "content-length":
            response[name] = value
    return response
