"""Templates: the Jinja2 environment, the filters pages use, and ``render``.

1. ``build_templates``: the package's templates, then each extension's under its own name
   (``"<extension>/page.html"``); autoescaping on for every template, undefined names are
   errors, so a typo fails a test instead of rendering blank. Every environment it builds
   has the same settings, so they share one process-wide cache of compiled templates
   (``CompiledTemplates``): a second dashboard in a process (another mount, another shard,
   each test's own app) does not compile a page again, which costs far more than
   rendering it.
2. Filters for times (relative and UTC), durations, numbers, sizes and JSON. Each takes a
   checked value (``wurk.api.values``) as it comes: an ``Invalid`` renders as ``invalid
   (<raw text>)`` — escaped like any text — and the rest of the page renders as usual. The
   ``invalid`` test (``{% if x is invalid %}``) is there for what is not a filter's job.
3. ``render``: a page with what every page needs (the prefix, the CSRF token, the tabs,
   read-only mode, the Live Poll's interval, the viewer's language) beside its own context.
4. Languages (``wurk.web.i18n``): Jinja's ``i18n`` extension with gettext callables that
   read the page's translations from its context, so one environment serves every locale;
   ``translate(text)`` is a fixed text made elsewhere (a tab's label, an error's message)
   in the page's language, or as it is when no catalog has it. Times, durations and
   numbers are written in the page's locale by Babel.
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
from babel.dates import format_timedelta
from babel.numbers import format_decimal
from babel.support import NullTranslations
from babel.units import format_unit
from jinja2.bccache import Bucket
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from .._version import __version__
from ..stored import Invalid
from .context import dashboard
from .guard import SCOPE_CSRF, SCOPE_ROOT, route_path
from .i18n import DEFAULT, N_, language, languages, request_locale, translations

if TYPE_CHECKING:
    from .extensions import Extension

__all__ = ["BUILTIN_TABS", "build_templates", "render"]

# (label, path) of the built-in tabs, in Sidekiq's order.
BUILTIN_TABS = ((N_("Dashboard"), "/"), (N_("Busy"), "/busy"), (N_("Queues"), "/queues"),
                (N_("Retries"), "/retries"), (N_("Scheduled"), "/scheduled"),
                (N_("Dead"), "/morgue"))
# What a form did, by the code its redirect carries: fixed text, never the request's own
# (translated when shown; ``{n}`` is the count).
NOTICES = {
    "retry": N_("{n} queued to run now."), "add_to_queue": N_("{n} added to their queues."),
    "delete": N_("{n} deleted."), "kill": N_("{n} moved to the dead set."),
    "pause": N_("Queue paused."), "unpause": N_("Queue unpaused."),
    "clear": N_("Queue cleared: {n} jobs deleted."),
    "quiet": N_("{n} processes told to go quiet."), "stop": N_("{n} processes told to stop."),
    "gone": N_("That job was already gone: it has run, moved or been deleted."),
    "cancel": N_("{n} cancelled: a waiting job is removed, a running one stops within a "
                 "second (an iterable job at its next flush); none is retried."),
}
# Arguments longer than this are cut in lists; the job's own page shows them whole.
ARGS_PREVIEW_CHARS = 160


class CompiledTemplates(jinja2.BytecodeCache):
    """Compiled templates kept in memory for every environment ``build_templates`` makes,
    each under its name and file (Jinja's key); Jinja compiles again a file whose text
    changed since (the entry holds a checksum of the source). One entry a template file:
    bounded by the package's templates and the extensions'."""

    def __init__(self) -> None:
        self._compiled: dict[str, bytes] = {}

    def load_bytecode(self, bucket: Bucket) -> None:
        found = self._compiled.get(bucket.key)
        if found is not None:
            bucket.bytecode_from_string(found)

    def dump_bytecode(self, bucket: Bucket) -> None:
        self._compiled[bucket.key] = bucket.bytecode_to_string()

    def clear(self) -> None:
        self._compiled.clear()


# Shared by the environments of ``build_templates`` only: the compiled code depends on
# their settings (autoescape, whitespace trimming, finalize, the i18n extension), the same
# for each.
COMPILED = CompiledTemplates()


def build_templates(extensions: tuple[Extension, ...]) -> Jinja2Templates:
    prefixed = {ext.name: jinja2.FileSystemLoader(str(ext.templates))
                for ext in extensions if ext.templates is not None}
    loader = jinja2.ChoiceLoader([jinja2.PackageLoader("wurk.web", "templates"),
                                  jinja2.PrefixLoader(prefixed)])
    env = jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, finalize=bounded,
                             extensions=["jinja2.ext.i18n"], bytecode_cache=COMPILED)
    env.install_gettext_callables(  # type: ignore[attr-defined]  # added by the extension
        gettext=page_gettext, ngettext=page_ngettext, newstyle=True)
    env.globals["translate"] = translate
    env.filters.update(ago=in_locale(ago), utc=utc, duration=in_locale(duration),
                       number=in_locale(number), kilobytes=in_locale(kilobytes),
                       milliseconds=in_locale(milliseconds), pretty_json=pretty_json,
                       short_json=short_json, segment=segment,
                       queue_path=queue_path, named=named, form_name=form_name)
    env.tests["invalid"] = lambda value: isinstance(value, Invalid)
    env.tests["cut"] = cut
    return Jinja2Templates(env=env)


# -- languages --------------------------------------------------------------------------------
# The context variable holding a page's translations (``render`` sets it).
TRANSLATIONS = "wurk_translations"


def page_translations(context: jinja2.runtime.Context) -> NullTranslations:
    """The translations ``render`` chose for this page; none (English) for a template
    rendered some other way."""
    found = context.get(TRANSLATIONS)
    return found if isinstance(found, NullTranslations) else translations(DEFAULT)


@jinja2.pass_context
def page_gettext(context: jinja2.runtime.Context, message: str) -> str:
    return str(page_translations(context).gettext(message))


@jinja2.pass_context
def page_ngettext(context: jinja2.runtime.Context, singular: str, plural: str, n: int) -> str:
    return str(page_translations(context).ngettext(singular, plural, n))


@jinja2.pass_context
def translate(context: jinja2.runtime.Context, text: Any) -> str:
    """``{{ translate(label) }}``: a text made in Python, in the page's language when a
    catalog has it, else as it is. Unlike ``_()`` it formats nothing, so any text is safe
    here, a ``%`` in an error message included."""
    return str(page_translations(context).gettext(str(text)))


def in_locale(fn: Any) -> Any:
    """``fn`` as a filter given the page's locale (``render`` sets ``locale``)."""

    @jinja2.pass_context
    def localized(context: jinja2.runtime.Context, value: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(value, *args, locale=context.get("locale", DEFAULT), **kwargs)

    return localized


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
    locale = request_locale(request)
    words = dash.words(locale)
    here = route_path(request.scope) + (f"?{request.url.query}" if request.url.query else "")
    common = {
        "root": root, "csrf": request.scope.get(SCOPE_CSRF, ""), "read_only": dash.read_only,
        "version": __version__, "path": route_path(request.scope),
        "environment": environment_label(dash.config.environment),
        "notice": notice(request, words, locale),
        "locale": locale, "language": language(locale), "languages": languages(),
        TRANSLATIONS: words, "here": here,
        # The Live Poll's interval (``web_poll_interval``), read by wurk.js from the page.
        "poll_interval": repr(float(dash.poll_interval)),
        # An extension's label too: its catalog may have it (else it shows as given).
        "tabs": tuple((words.gettext(label), target) for label, target in BUILTIN_TABS
                      + tuple((ext.tab, f"/{ext.name}") for ext in dash.extensions
                              if ext.tab is not None)),
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


def notice(request: Request, words: NullTranslations | None = None,
           locale: str = DEFAULT) -> str | None:
    """What the redirect's ``notice`` code says, in ``words`` (``locale``'s translations,
    which ``render`` already chose)."""
    template = NOTICES.get(request.query_params.get("notice", ""))
    if template is None:
        return None
    count = request.query_params.get("count", "0")
    text = words.gettext(template) if words is not None else template
    n = number(int(count), locale=locale) if NOTICE_COUNT.fullmatch(count) else "0"
    # A catalog entry naming another placeholder than ``{n}`` is refused by the catalog's
    # test; were one shipped anyway, the English text is shown, not an error.
    try:
        return text.format(n=n)
    except (KeyError, IndexError, ValueError):
        return template.format(n=n)


def url(root: str, path: str, **query: Any) -> str:
    """``root + path`` with the query parameters that have a value."""
    kept = {name: value for name, value in query.items() if value not in (None, "")}
    joint = "&" if "?" in path else "?"
    return f"{root}{path}" + (f"{joint}{urlencode(kept)}" if kept else "")


# -- filters ----------------------------------------------------------------------------------
# Each shows an ``Invalid`` as its text, ``invalid (<raw>)``: it stays one escaped cell, and
# writes the rest in ``locale`` (Babel's CLDR data: "3 minutes ago", "vor 3 Minuten").
def ago(when: float | Invalid | None, now: float | None = None, *, locale: str = DEFAULT) -> str:
    """"3 minutes ago" / "in 2 hours" / "just now"."""
    if when is None:
        return "—"
    if isinstance(when, Invalid):
        return str(when)
    delta = (time.time() if now is None else now) - when
    if not math.isfinite(delta):
        return str(when)
    if abs(delta) < 1:
        return str(translations(locale).gettext("just now"))
    span = timedelta(-delta)
    if span is None:
        return str(when)
    return format_timedelta(span, add_direction=True, threshold=1, locale=locale)


def duration(seconds: float | Invalid | None, *, precise: bool = True,
             locale: str = DEFAULT) -> str:
    """"2.35 sec" under ten seconds, else "3 min", "2 hr", "4 days" (rounded)."""
    if seconds is None:
        return "—"
    if isinstance(seconds, Invalid) or not math.isfinite(seconds):
        return str(seconds)
    if precise and abs(seconds) < 10:
        return format_unit(round(seconds, 2), "duration-second", length="short",
                           format="0.00", locale=locale)
    span = timedelta(seconds)
    if span is None:  # past ``datetime.timedelta``'s range: the number itself
        return str(seconds)
    return format_timedelta(span, threshold=1, format="short", locale=locale)


def timedelta(seconds: float) -> dt.timedelta | None:
    try:
        return dt.timedelta(seconds=seconds)
    except OverflowError:
        return None


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


def number(value: int | float | Invalid | None, *, locale: str = DEFAULT) -> str:
    if value is None:
        return "—"
    if isinstance(value, Invalid) or (isinstance(value, float) and not math.isfinite(value)):
        return str(value)
    return decimal(value, locale)


def decimal(value: float, locale: str, pattern: str | None = None) -> str:
    """``value`` the locale's way ("1.234.567" in German); a number past what Babel's decimal
    arithmetic takes (``1e308``, a 400-digit integer a hand-written key held) as Python
    writes it, never an error."""
    if locale == DEFAULT:  # Babel's English, written directly: 40 times faster
        return plain(value, pattern)
    try:
        return format_decimal(value, format=pattern, locale=locale)
    except (ArithmeticError, ValueError):
        return plain(value, pattern)


def plain(value: float, pattern: str | None) -> str:
    return f"{value:,.1f}" if pattern else f"{value:,}"


def kilobytes(value: int | Invalid | None, *, locale: str = DEFAULT) -> str:
    if isinstance(value, Invalid):
        return str(value)
    if not value:
        return "—"
    for size, unit in ((1 << 20, "GB"), (1 << 10, "MB")):
        if value >= size:
            return f"{decimal(value / size, locale, '#,##0.0')} {unit}"
    return f"{decimal(value, locale)} kB"


def milliseconds(microseconds: int | Invalid | None, *, locale: str = DEFAULT) -> str:
    """A round trip in µs as "1.2 ms"; "—" when none was measured."""
    if isinstance(microseconds, Invalid):
        return str(microseconds)
    if not microseconds:
        return "—"
    return f"{decimal(microseconds / 1000, locale, '#,##0.0')} ms"


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
