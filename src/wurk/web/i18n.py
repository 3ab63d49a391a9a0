"""The dashboard's languages: catalogs, the viewer's choice, and ``/change_locale``.

1. Catalogs: one gettext ``.po`` file a locale (``locales/<locale>/LC_MESSAGES/wurk.po``,
   written for wurk), read with Babel and compiled in memory the first time a page needs
   that locale, then kept. An entry whose placeholders are not its English text's is left
   out when the catalog is read (that text shows in English, and a warning is logged):
   a translation can never make a page fail. A text no catalog has shows in English.
   An extension's catalogs (``Extension.locales``) are read the same way and lie under
   wurk's: they add its own texts, and a text both have keeps wurk's words
   (``with_extensions``).
2. The locale of a request: the ``wurk_locale`` cookie when it names an available locale,
   else the best of ``Accept-Language`` (Babel's ``negotiate_locale``), else English.
   Anything else the cookie or header holds, of any size, is ignored.
3. The choice (``views``: ``GET /locale`` lists the locales by their own names, ``POST
   /change_locale`` takes one): ``chosen`` checks the form's ``locale``, ``remember`` sets
   the cookie, ``safe_next`` keeps the way back inside the dashboard. It is a preference,
   not an action on jobs: the guard lets it through in read-only mode, with the
   same-origin and CSRF checks every POST has.
"""

from __future__ import annotations

import functools
import io
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from babel import Locale, negotiate_locale
from babel.messages.catalog import Catalog, Message
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.support import NullTranslations, Translations
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

__all__ = [
    "AVAILABLE",
    "COOKIE",
    "DEFAULT",
    "N_",
    "Language",
    "chosen",
    "languages",
    "locale_of",
    "remember",
    "request_locale",
    "safe_next",
    "translations",
    "with_extensions",
]

log = logging.getLogger("wurk.web")

LOCALES_DIR = Path(__file__).parent / "locales"
DOMAIN = "wurk"
DEFAULT = "en"
# English is the text of the templates themselves; each other locale has a catalog.
AVAILABLE: tuple[str, ...] = ("en", "ar", "de", "es", "fr", "it", "ja", "nl", "pl", "pt_BR",
                              "ru", "zh_CN")
# A bare language picks this locale of it (``pt`` is Brazil's, ``zh`` simplified Chinese).
ALIASES = {"pt": "pt_BR", "zh": "zh_CN"}
LOWERED = {code.lower(): code for code in AVAILABLE}  # what negotiation compares
COOKIE = "wurk_locale"
# The form that sets it: the one POST read-only mode lets through (``guard``).
CHANGE_PATH = "/change_locale"
FIELD = "locale"
NEXT_FIELD = "next"
# A year: a language is not chosen again every visit.
COOKIE_AGE = 365 * 24 * 3600
# What of an Accept-Language header is read: browsers send a few hundred bytes at most.
HEADER_LIMIT = 2_000
TAGS_LIMIT = 30
LANGUAGE_TAG = re.compile(r"[A-Za-z]{1,8}(?:-[A-Za-z0-9]{1,8}){0,4}")
QUALITY = re.compile(r"q=(0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?)")
NEXT_LIMIT = 2_000
# What formatting reads in a text: ``%(name)s``, ``%%`` or any other ``%`` and the
# character after it, ``{name}``.
PLACEHOLDERS = re.compile(r"%\([^)]*\)[a-zA-Z]|%.?|\{[^{}]*\}", re.S)


def N_(message: str) -> str:
    """Marks ``message`` for the catalogs; it is translated where it is shown."""
    return message


@dataclass(frozen=True)
class Language:
    """An available locale as the picker shows it."""

    code: str  # ``pt_BR``: the cookie's and the form's value
    tag: str  # ``pt-BR``: the page's ``lang``
    name: str  # in the language itself: ``português (Brasil)``
    direction: str  # ``ltr`` or ``rtl``


@functools.cache
def language(code: str) -> Language:
    locale = Locale.parse(code)
    name = locale.get_display_name(code) or code
    return Language(code=code, tag=code.replace("_", "-"), name=name[:1].upper() + name[1:],
                    direction=locale.text_direction)


def languages() -> tuple[Language, ...]:
    return tuple(language(code) for code in AVAILABLE)


# -- catalogs ---------------------------------------------------------------------------------
def catalog_path(code: str, root: Path | None = None, domain: str = DOMAIN) -> Path:
    """``<root>/<code>/LC_MESSAGES/<domain>.po``: gettext's layout, wurk's (``root``
    ``LOCALES_DIR``) and an extension's (its domain is its name)."""
    return (LOCALES_DIR if root is None else root) / code / "LC_MESSAGES" / f"{domain}.po"


def read_catalog(code: str, root: Path | None = None, domain: str = DOMAIN) -> Catalog:
    """The ``.po`` file of ``code`` as Babel reads it, broken entries left out."""
    with catalog_path(code, root, domain).open("rb") as handle:
        catalog = read_po(handle, locale=code, domain=domain)
    whose = "" if domain == DOMAIN else f" of extension {domain!r}"
    broken = [(message, "; ".join(str(error) for error in errors))
              for message, errors in catalog.check()]
    broken += [(message, f"placeholders {', '.join(sorted(extra))} are not its text's")
               for message in catalog if (extra := unknown_placeholders(message))]
    for message, problem in broken:
        # Both checks may name one entry; looked up with its context (``in`` ignores it).
        if catalog.get(message.id, context=message.context) is not None:
            log.warning("the %s catalog%s: entry %r is left out (shown in English): %s",
                        code, whose, message.id, problem)
            catalog.delete(message.id, context=message.context)
    return catalog


def unknown_placeholders(message: Message) -> set[str]:
    """The placeholders of ``message``'s translation that its English text lacks: a
    ``%(name)s`` or ``{name}`` the page gives no value for, a lone ``%``. Pages format
    every translated text (Jinja's ``_()`` with ``%``, the notices with ``str.format``),
    so one such entry would fail the page; Babel's own check sees only entries flagged
    python-format."""
    if not message.id:
        return set()
    sources = message.id if isinstance(message.id, (tuple, list)) else (message.id,)
    forms = message.string if isinstance(message.string, (tuple, list)) else (message.string,)
    allowed = {token for source in sources for token in PLACEHOLDERS.findall(source)}
    return {token for form in forms if form for token in PLACEHOLDERS.findall(form)
            if token not in allowed}


def compiled(catalog: Catalog) -> Translations:
    machine = io.BytesIO()
    write_mo(machine, catalog)
    machine.seek(0)
    return Translations(fp=machine, domain=catalog.domain)


@functools.cache
def translations(code: str) -> NullTranslations:
    """The translations of an available locale, read once; English's translate nothing."""
    if code not in AVAILABLE or code == DEFAULT:
        return NullTranslations()
    try:
        catalog = read_catalog(code)
    except OSError as exc:  # a package installed without its data: English, said once
        log.warning("the %s catalog cannot be read (%s): its pages are in English", code, exc)
        return NullTranslations()
    return compiled(catalog)


@functools.cache
def with_extensions(code: str, catalogs: tuple[tuple[str, str], ...]) -> NullTranslations:
    """wurk's translations of ``code`` over the extensions' catalogs (``catalogs``: each
    extension's name and ``locales`` directory, in the dashboard's order), read once.
    An extension's texts are translated where its catalog has them; a text wurk's catalog
    has keeps wurk's words whatever an extension's says (its pages stay consistent with the
    dashboard's); of two extensions, the later one's. The entries are joined into one
    catalog of the locale, so plurals follow the locale's rule (Arabic's six forms), not a
    default one. An extension without this locale's file adds nothing, and one whose file
    cannot be read or parsed adds nothing but a warning: a page never fails for it."""
    if code == DEFAULT or not catalogs or code not in AVAILABLE:
        return translations(code)
    try:
        joined = read_catalog(code)
    except OSError:  # said by ``translations``: wurk's pages in English, the rest still read
        translations(code)
        joined = Catalog(locale=code, domain=DOMAIN)
    wurks = {(message.id, message.context) for message in joined if message.id}
    for name, root in catalogs:
        path = catalog_path(code, Path(root), name)
        if not path.is_file():
            continue
        try:
            theirs = read_catalog(code, Path(root), name)
        except Exception as exc:  # any fault of a file we did not write: its texts as written
            log.warning("extension %r: its %s catalog %s cannot be read (%s: %s): its texts "
                        "are shown as written", name, code, path, type(exc).__name__, exc)
            continue
        for message in theirs:
            if message.id and (message.id, message.context) not in wurks:
                # An earlier extension's entry is replaced, not updated: Babel's update
                # keeps the first translation.
                joined.delete(message.id, context=message.context)
                joined[message.id] = message
    return compiled(joined)


# -- which locale -----------------------------------------------------------------------------
def locale_of(headers: Headers | Mapping[str, str], cookies: Mapping[str, str]) -> str:
    """The cookie's locale when it is one of ``AVAILABLE``, else ``Accept-Language``'s best,
    else English."""
    chosen = cookies.get(COOKIE)
    if chosen in AVAILABLE:
        return str(chosen)
    return negotiated(headers.get("accept-language")) or DEFAULT


def request_locale(request: Request) -> str:
    return locale_of(request.headers, request.cookies)


def negotiated(header: str | None) -> str | None:
    """The best available locale for ``Accept-Language`` (Babel's ``negotiate_locale``:
    ``de_AT`` falls back to ``de``; a language we have one locale of — ``pt``, ``zh`` —
    is that locale), or None."""
    preferred: list[str] = []
    for tag in accepted(header):
        preferred.append(tag)
        alias = ALIASES.get(tag.split("_")[0].lower())
        if alias is not None:
            preferred.append(alias)
    found = negotiate_locale(preferred, LOWERED, sep="_")
    return LOWERED[found.lower()] if found else None


def accepted(header: str | None) -> list[str]:
    """``Accept-Language``'s tags, best first, as Babel writes locales (``de_AT``); tags that
    are not well-formed language tags are skipped."""
    if not header:
        return []
    ranked: list[tuple[float, int, str]] = []
    for index, part in enumerate(header[:HEADER_LIMIT].split(",")[:TAGS_LIMIT]):
        tag, _, parameters = part.strip().partition(";")
        quality = QUALITY.fullmatch(parameters.strip().replace(" ", "")) if parameters else None
        weight = float(quality.group(1)) if quality else (0.0 if parameters else 1.0)
        if weight > 0 and LANGUAGE_TAG.fullmatch(tag.strip()):
            ranked.append((-weight, index, tag.strip().replace("-", "_")))
    return [tag for _, _, tag in sorted(ranked)]


# -- the choice -------------------------------------------------------------------------------
def chosen(form: Mapping[str, Any]) -> str:
    """The locale a ``/change_locale`` form names; a 400 naming the choices for anything
    else (unknown, malformed, sent twice)."""
    code = form.get(FIELD)
    if not isinstance(code, str) or code not in AVAILABLE:
        raise HTTPException(400, unknown_locale())
    return code


def remember(response: Response, code: str, *, root: str, secure: bool) -> None:
    """The cookie that keeps ``code`` for the dashboard at ``root`` (its pages only)."""
    response.set_cookie(COOKIE, code, max_age=COOKIE_AGE, path=root or "/", httponly=True,
                        samesite="lax", secure=secure)


def unknown_locale() -> str:
    return ("That is not a language of this dashboard. Choose one of: "
            + ", ".join(AVAILABLE) + ".")


def safe_next(value: Any) -> str:
    """The path (below the dashboard's prefix) to go back to: a path of this site only —
    ``/queues?page=2`` — never another site's address (``//evil.example``, ``https:…``,
    ``/\\evil``); anything else is the dashboard's home, ``/``."""
    if not isinstance(value, str) or not value.startswith("/") or len(value) > NEXT_LIMIT:
        return "/"
    if value.startswith(("//", "/\\")) or "\\" in value:
        return "/"
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        return "/"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return "/"
    return value
