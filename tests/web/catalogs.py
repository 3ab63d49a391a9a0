"""The dashboard's messages as Babel extracts them, and the tool that keeps the catalogs.

``messages()`` is every text the templates (``_()``, ``{% trans %}``) and the web package's
Python (``N_()``, ``gettext()``) give to translation; test_locales.py checks each shipped
catalog against it. Run ``python -m tests.web.catalogs`` (from the repository, with the
``web`` extra) after changing a text: it writes ``locales/wurk.pot`` and adds the new
texts, untranslated, to every ``.po`` file (the test then names what is missing).
"""

from __future__ import annotations

from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po, write_po

from wurk.web import i18n

WEB = Path(i18n.__file__).parent
METHODS = [("templates/**.html", "jinja2.ext:babel_extract"), ("**.py", "python")]
OPTIONS = {"templates/**.html": {"extensions": "jinja2.ext.i18n", "trimmed": "false",
                                 "silent": "false"}}
KEYWORDS = {"_": None, "gettext": None, "ngettext": (1, 2), "N_": None}


def messages() -> Catalog:
    """Every translatable text of the dashboard, with where it is used."""
    catalog = Catalog(domain=i18n.DOMAIN, project="wurk", charset="utf-8")
    for filename, lineno, message, comments, context in extract_from_dir(
            str(WEB), METHODS, OPTIONS, KEYWORDS, strip_comment_tags=True):
        catalog.add(message, None, [(filename, lineno)], auto_comments=comments,
                    context=context)
    return catalog


def update() -> None:
    template = messages()
    with (i18n.LOCALES_DIR / f"{i18n.DOMAIN}.pot").open("wb") as handle:
        write_po(handle, template, width=100, omit_header=False)
    for code in i18n.AVAILABLE:
        path = i18n.catalog_path(code)
        if not path.exists():
            continue
        with path.open("rb") as handle:
            catalog = read_po(handle, locale=code, domain=i18n.DOMAIN)
        catalog.update(template, no_fuzzy_matching=True)
        with path.open("wb") as handle:
            write_po(handle, catalog, width=100, ignore_obsolete=True)


if __name__ == "__main__":
    update()
