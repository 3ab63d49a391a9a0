"""Templates: the Jinja2 environment, the filters pages use, and ``render``.

1. ``build_templates``: the package's templates, then each extension's under its own name
   (``"<extension>/page.html"``); autoescaping on for every template, undefined names are
   errors, so a typo fails a test instead of rendering blank.
2. Filters for times (relative and UTC), durations, numbers, sizes and JSON. Each takes a
   checked value (``wurk.api.values``) as it comes: an ``Invalid`` renders as ``invalid
   (<raw text>)`` — escaped like any text — and the rest of the page renders as usual. The
   ``invalid`` test (``{% if x is invalid %}``) is there for what is not a filter's job.
3. ``render``: a page with what every page needs (the prefix, the CSRF token, the tabs,
   read-only mode, the Live Poll's interval) beside its own context.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import jinja2
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from .._version import __version__
from ..stored import Invalid
from .context import dashboard
from .guard import SCOPE_CSRF, SCOPE_ROOT, route_path

if TYPE_CHECKING:
    from .extensions import Extension

__all__ = ["BUILTIN_TABS", "build_templates", "render"]

# (label, path) of the built-in tabs, in Sidekiq's order.
BUILTIN_TABS = (("Dashboard", "/"), ("Busy", "/busy"), ("Queues", "/queues"),
                ("Retries", "/retries"), ("Scheduled", "/scheduled"), ("Dead", "/morgue"))
# What a form did, by the code its redirect carries: fixed text, never the request's own.
NOTICES = {
    "retry": "{n} queued to run now.", "add_to_queue": "{n} added to their queues.",
    "delete": "{n} deleted.", "kill": "{n} moved to the dead set.", "pause": "Queue paused.",
    "unpause": "Queue unpaused.", "clear": "Queue cleared: {n} jobs deleted.",
    "quiet": "{n} processes told to go quiet.", "stop": "{n} processes told to stop.",
    "gone": "That job was already gone: it has run, moved or been deleted.",
    "cancel": "{n} cancelled: a waiting job is removed, a running one stops within a second "
              "(an iterable job at its next flush); none is retried.",
}
# Arguments longer than this are cut in lists; the job's own page shows them whole.
ARGS_PREVIEW_CHARS = 160


def build_templates(extensions: tuple[Extension, ...]) -> Jinja2Templates:
    prefixed = {ext.name: jinja2.FileSystemLoader(str(ext.templates))
                for ext in extensions if ext.templates is not None}
    loader = jinja2.ChoiceLoader([jinja2.PackageLoader("wurk.web", "templates"),
                                  jinja2.PrefixLoader(prefixed)])
    env = jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, finalize=bounded)
    env.filters.update(ago=ago, utc=utc, duration=duration, number=number, kilobytes=kilobytes,
                       milliseconds=milliseconds, pretty_json=pretty_json,
                       short_json=short_json, segment=segment,
                       queue_path=queue_path, named=named, form_name=form_name)
    env.tests["invalid"] = lambda value: isinstance(value, Invalid)
    env.tests["cut"] = cut
    return Jinja2Templates(env=env)


# Any text a page shows is cut past this: a 10 MB job name, tag or loop option costs a page
# a few kilobytes each time it appears, not megabytes.
DISPLAY_LIMIT = 2_000


def cut(value: Any) -> bool:
    """Whether ``bounded`` cuts ``value``: such text must never stand in a form as if whole
    (``{% if value is cut %}``)."""
    return isinstance(value, str) and not isinstance(value, Markup) \
        and len(value) > DISPLAY_LIMIT


def bounded(value: Any) -> Any:
    """Every ``{{ ... }}`` of every page passes here (Jinja's ``finalize``): text over
    ``DISPLAY_LIMIT`` characters is cut, saying how long it was. Markup a template built
    itself is left whole."""
    if cut(value):
        return f"{value[:DISPLAY_LIMIT]}… ({len(value):,} characters)"
    return value


def render(request: Request, template: str, context: Mapping[str, Any] | None = None, *,
           status: int = 200) -> Response:
    """The page ``template`` with the dashboard's common context (for extensions too)."""
    dash = dashboard(request)
    root = request.scope.get(SCOPE_ROOT, "")
    common = {
        "root": root, "csrf": request.scope.get(SCOPE_CSRF, ""), "read_only": dash.read_only,
        "version": __version__, "path": route_path(request.scope),
        "environment": environment_label(dash.config.environment),
        "notice": notice(request),
        # The Live Poll's interval (``web_poll_interval``), read by wurk.js from the page.
        "poll_interval": repr(float(dash.poll_interval)),
        "tabs": BUILTIN_TABS + tuple((ext.tab, f"/{ext.name}") for ext in dash.extensions
                                     if ext.tab is not None),
        # A link is not text shown: never cut (``bounded``), ``named_path`` keeps it short.
        "url": lambda path, **query: escape(url(root, path, **query)),
        "static": lambda name: f"{root}/static/{name}?v={__version__}",
    }
    return dash.templates.TemplateResponse(request, template, {**common, **(context or {})},
                                           status_code=status)


def environment_label(environment: str | None) -> str:
    """``[STAGING]`` before every page title outside production, as Sidekiq's dashboard
    marks it, so a person never mistakes a staging dashboard for production's."""
    if not environment or environment.lower() == "production":
        return ""
    return f"[{environment.upper()[:40]}] "


# A count in a notice: what an action can have done (any more digits are not ours).
NOTICE_COUNT = re.compile(r"[0-9]{1,18}")


def notice(request: Request) -> str | None:
    template = NOTICES.get(request.query_params.get("notice", ""))
    if template is None:
        return None
    count = request.query_params.get("count", "0")
    return template.format(n=f"{int(count):,}" if NOTICE_COUNT.fullmatch(count) else "0")


def url(root: str, path: str, **query: Any) -> str:
    """``root + path`` with the query parameters that have a value."""
    kept = {name: value for name, value in query.items() if value not in (None, "")}
    joint = "&" if "?" in path else "?"
    return f"{root}{path}" + (f"{joint}{urlencode(kept)}" if kept else "")


# -- filters ----------------------------------------------------------------------------------
# Each shows an ``Invalid`` as its text, ``invalid (<raw>)``: it stays one escaped cell.
def ago(when: float | Invalid | None, now: float | None = None) -> str:
    """"3 min ago" / "in 2 h" / "just now"."""
    if when is None:
        return "—"
    if isinstance(when, Invalid):
        return str(when)
    delta = (time.time() if now is None else now) - when
    if abs(delta) < 1:
        return "just now"
    text = duration(abs(delta), precise=False)
    return f"{text} ago" if delta > 0 else f"in {text}"


def duration(seconds: float | Invalid | None, *, precise: bool = True) -> str:
    if seconds is None:
        return "—"
    if isinstance(seconds, Invalid) or not math.isfinite(seconds):
        return str(seconds)
    if seconds < 60:
        return f"{seconds:.2f} s" if precise and seconds < 10 else f"{seconds:.0f} s"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"  # pragma: no cover - the loop always returns


def utc(when: float | Invalid | None) -> str:
    if when is None:
        return "—"
    if isinstance(when, Invalid):
        return str(when)
    try:
        moment = dt.datetime.fromtimestamp(when, dt.timezone.utc)
    except (OverflowError, ValueError, OSError):  # not a checked time: shown, not raised
        return str(when)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def number(value: int | float | Invalid | None) -> str:
    if value is None:
        return "—"
    return str(value) if isinstance(value, Invalid) else f"{value:,}"


def kilobytes(value: int | Invalid | None) -> str:
    if isinstance(value, Invalid):
        return str(value)
    if not value:
        return "—"
    for size, unit in ((1 << 20, "GB"), (1 << 10, "MB")):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value} kB"


def milliseconds(microseconds: int | Invalid | None) -> str:
    """A round trip in µs as "1.2 ms"; "—" when none was measured."""
    if isinstance(microseconds, Invalid):
        return str(microseconds)
    if not microseconds:
        return "—"
    return f"{microseconds / 1000:.1f} ms"


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def segment(value: str | Invalid) -> str:
    """``value`` quoted to stand as one path segment."""
    return quote(str(value), safe="")


def dot_segment(quoted: str) -> bool:
    """A segment a browser resolves away (WHATWG URL parsing): ``.``, ``..``, ``%2e``, ``.%2E``…
    A name quoted to one of these cannot stand in a path."""
    return quoted.lower().replace("%2e", ".") in (".", "..")


# The built-in pages named by a stored name: kind -> (the path a name is a segment of, the
# path taking it in the query instead, that query parameter).
NAMED: dict[str, tuple[str, str, str]] = {
    "queue": ("/queues", "/queue", "name"),
    "loop": ("/periodic", "/periodic/-/loop", "lid"),
    "batch": ("/batches", "/batches/-/batch", "bid"),
    "dead-batch": ("/dead-batches", "/dead-batches/-/batch", "bid"),
    "workflow": ("/workflows", "/workflows/-/workflow", "wid"),
    "metrics": ("/metrics", "/metrics/-/job", "name"),
    "result": ("/results", "/results/-/result", "jid"),
}


def named(name: str | Invalid, kind: str, suffix: str = "") -> str:
    """The ``named`` filter: ``{{ url(b.bid|named('batch')) }}``."""
    return named_path(kind, name, suffix)


# Kinds whose pages find a name by its digest (among the names they list): a name quoted
# longer than LINK_NAME_LIMIT characters is linked as ``?sha1=<hex>``, so its link stays short
# (any name Redis holds: a page cuts text over DISPLAY_LIMIT, a server refuses long URLs).
BY_DIGEST = frozenset({"queue", "loop"})
LINK_NAME_LIMIT = 1_000
DIGEST_FIELD = "sha1"


def digest(name: str) -> str:
    return hashlib.sha1(name.encode("utf-8", "replace"), usedforsecurity=False).hexdigest()


def long_name(kind: str, name: str | Invalid) -> bool:
    """Whether ``named_path`` links ``name`` by its digest."""
    return kind in BY_DIGEST and len(segment(name)) > LINK_NAME_LIMIT


def form_name(name: str | Invalid, kind: str) -> str:
    """What a row's form says it is for (``views.same_target``): the name, or for a name
    linked by digest ``sha1:<hex>`` — a page never carries a long name whole."""
    return f"{DIGEST_FIELD}:{digest(str(name))}" if long_name(kind, name) else str(name)


def named_path(kind: str, name: str | Invalid, suffix: str = "") -> str:
    """The path of the page (or, with ``suffix``, an action) of a queue, loop, batch,
    workflow, job class or result named ``name`` (a ``NAMED`` kind): ``/queues/<name>``, the
    name quoted as one segment. A name a browser would resolve away in a path (``.`` or
    ``..``: ``/queues/..`` is ``/``) goes in the query instead (``/queue?name=..``); a queue's
    or loop's name too long for a link, by its digest (``/queue?sha1=<hex>``); any other name
    that long, its kind's list page."""
    base, fallback, param = NAMED[kind]
    quoted = segment(name)
    if len(quoted) > LINK_NAME_LIMIT:
        if kind in BY_DIGEST:
            return f"{fallback}{suffix}?{urlencode({DIGEST_FIELD: digest(str(name))})}"
        # A batch, workflow, job class or jid this long is no id wurk makes (written by
        # hand): its kind's list, not a link as long as the name (a page of them grew by
        # the names' size, tens of MB), nor one cut short (another's page).
        return base
    if dot_segment(quoted):
        return f"{fallback}{suffix}?{urlencode({param: str(name)})}"
    return f"{base}/{quoted}{suffix}"


def queue_path(name: str | Invalid, suffix: str = "") -> str:
    """A queue's page (``suffix`` ``/delete``: its delete action), as ``named_path``."""
    return named_path("queue", name, suffix)


def short_json(value: Any, limit: int = ARGS_PREVIEW_CHARS) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
