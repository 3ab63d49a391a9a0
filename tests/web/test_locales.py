"""The dashboard's languages: complete catalogs, every page in every locale, the choice
(cookie, POST /change_locale, Accept-Language) and its limits."""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

import wurk
from tests.web.catalogs import messages
from tests.web.conftest import browse, job, seed_pages, token
from wurk.web import Extension, create_app, guard, i18n, render

SHIPPED = [code for code in i18n.AVAILABLE if code != i18n.DEFAULT]
# Both kinds of placeholder the texts use: gettext's ``%(name)s`` and ``str.format``'s
# ``{n}`` (the notices).
PLACEHOLDER = re.compile(r"%\([a-z_]+\)s|\{[a-z]+\}")
PAGES = ["/", "/busy", "/queues", "/queues/default", "/retries", "/scheduled", "/morgue",
         "/metrics/", "/profiles/", "/periodic/", "/history/", "/results/", "/batches/",
         "/dead-batches/", "/workflows/", "/limits/", "/api", "/locale", "/nowhere"]
HERE = Path(__file__).parent


@functools.cache
def shipped(code: str) -> Catalog:
    with i18n.catalog_path(code).open("rb") as handle:
        return read_po(handle, locale=code, domain=i18n.DOMAIN)


def translated(code: str, text: str) -> str:
    """What ``code``'s catalog says for ``text`` (which it must have)."""
    entry = shipped(code).get(text)
    assert entry is not None and entry.string, f"{code} has no translation of {text!r}"
    assert i18n.translations(code).gettext(text) == entry.string
    return str(entry.string)


def untranslated(catalog: Catalog, message_id: str | tuple[str, ...]) -> bool:
    entry = catalog.get(message_id)
    if entry is None:
        return True
    forms = entry.string if isinstance(entry.string, (tuple, list)) else (entry.string,)
    return not all(forms)


# -- the catalogs ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def wanted() -> Catalog:
    return messages()


def test_the_extraction_finds_the_texts_of_templates_and_python(wanted: Catalog) -> None:
    ids = {message.id for message in wanted}
    assert "Live Poll: Start" in ids  # a template's (given to wurk.js)
    assert "Queues" in ids and "Next retry" in ids  # Python's N_()
    assert ("%(n)s limiter", "%(n)s limiters") in ids  # ngettext
    assert len(ids) > 300


@pytest.mark.parametrize("code", SHIPPED)
def test_every_catalog_translates_every_text(code: str, wanted: Catalog) -> None:
    catalog = shipped(code)
    missing = [message.id for message in wanted if message.id
               and untranslated(catalog, message.id)]
    assert missing == [], f"{code} lacks {len(missing)}: {missing[:5]}"
    assert not [message.id for message in catalog if message.id and message.fuzzy]


@pytest.mark.parametrize("code", SHIPPED)
def test_every_translation_has_its_texts_placeholders(code: str) -> None:
    """A translation naming a placeholder its English text lacks would fail the page; one
    dropping a placeholder would hide a number. Plural forms may leave the count out
    (Japanese has one form, a singular may say "one")."""
    wrong = []
    for message in shipped(code):
        if not message.id:
            continue
        if isinstance(message.id, tuple):
            allowed = set(PLACEHOLDER.findall(message.id[1]))
            if any(not set(PLACEHOLDER.findall(form)) <= allowed for form in message.string):
                wrong.append(message.id)
        elif set(PLACEHOLDER.findall(message.id)) != set(PLACEHOLDER.findall(message.string)):
            wrong.append(message.id)
    assert wrong == []
    assert list(shipped(code).check()) == []  # Babel's own checks agree


def test_a_translation_with_other_placeholders_is_left_out_not_shown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Were a broken entry shipped anyway, its text shows in English; the page renders."""
    folder = tmp_path / "de" / "LC_MESSAGES"
    folder.mkdir(parents=True)
    (folder / "wurk.po").write_text(
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
        '#, python-format\nmsgid "Page %(page)s of %(pages)s"\n'
        'msgstr "Seite %(seite)s von %(pages)s"\n\n'
        'msgid "Queues"\nmsgstr "Warteschlangen"\n', encoding="utf-8")
    monkeypatch.setattr(i18n, "LOCALES_DIR", tmp_path)
    i18n.translations.cache_clear()
    try:
        words = i18n.translations("de")
        assert words.gettext("Queues") == "Warteschlangen"
        assert words.gettext("Page %(page)s of %(pages)s") == "Page %(page)s of %(pages)s"
    finally:
        i18n.translations.cache_clear()


def test_a_notice_whose_translation_names_another_placeholder_shows_in_english() -> None:
    from wurk.web import templating

    class Broken(i18n.NullTranslations):
        def gettext(self, message: str) -> str:
            return "{count} gelöscht."

    scope = {"type": "http", "query_string": b"notice=delete&count=3", "headers": []}
    assert templating.notice(Request(scope), Broken()) == "3 deleted."


def test_every_locale_has_its_own_name_and_direction() -> None:
    names = {language.code: language for language in i18n.languages()}
    assert names["de"].name == "Deutsch" and names["ja"].name == "日本語"
    assert names["ar"].direction == "rtl" and names["de"].direction == "ltr"
    assert names["pt_BR"].tag == "pt-BR"


# -- every page in every locale -------------------------------------------------------------
@pytest.fixture
def seeded(config: wurk.Config, r: redis.Redis) -> wurk.Config:
    seed_pages(config, r)
    return config


@pytest.fixture
def site(seeded: wurk.Config) -> Iterator[TestClient]:
    with browse(create_app(seeded), follow_redirects=False) as client:
        yield client


@pytest.mark.parametrize("code", i18n.AVAILABLE)
def test_every_page_renders_in_every_locale(site: TestClient, code: str) -> None:
    site.cookies.set(i18n.COOKIE, code)
    entry = re.search(r'href="(/retries/[^"]+)"', site.get("/retries").text)
    assert entry is not None
    for path in [*PAGES, entry.group(1)]:
        response = site.get(path)
        assert response.status_code == (404 if path == "/nowhere" else 200), (code, path)
        tag = i18n.language(code).tag
        assert f'<html lang="{tag}" dir="{i18n.language(code).direction}">' in response.text
        if code != i18n.DEFAULT:
            assert translated(code, "Back to the dashboard" if path == "/nowhere"
                              else "Dashboard") in response.text, (code, path)


@pytest.mark.parametrize("code", SHIPPED)
def test_the_tabs_and_the_live_poll_text_are_translated(site: TestClient, code: str) -> None:
    site.cookies.set(i18n.COOKIE, code)
    page = site.get("/queues").text
    assert f'aria-current="page">{translated(code, "Queues")}</a>' in page
    for tab in ("Retries", "Metrics", "Periodic", "Workflows"):
        assert f">{translated(code, tab)}</a>" in page
    # wurk.js holds no text of its own: the button's words come from the page.
    start = translated(code, "Live Poll: Start")
    assert f'data-text-poll-start="{start}"' in page.replace("&#39;", "'")
    script = (Path(i18n.__file__).parent / "static" / "wurk.js").read_text()
    assert not re.search(r"\"(Live Poll|live · |reconnecting…|Redis unreachable|invalid \()",
                         script)


def test_job_data_is_never_translated(site: TestClient, r: redis.Redis) -> None:
    """A queue named as a word the catalog has is shown by its name."""
    r.lpush("queue:Queues", wurk.payload.dumps(job(1, queue="Queues")))
    r.sadd("queues", "Queues")
    site.cookies.set(i18n.COOKIE, "de")
    page = site.get("/queues").text
    assert 'href="/queues/Queues">Queues</a>' in page


def test_times_and_numbers_are_written_in_the_locale(site: TestClient, r: redis.Redis) -> None:
    r.set("stat:processed", 1234567)
    site.cookies.set(i18n.COOKIE, "de")
    page = site.get("/").text
    assert 'data-stat="processed">1.234.567<' in page
    assert "vor " in site.get("/retries").text or "in " in site.get("/retries").text
    site.cookies.set(i18n.COOKIE, "en")
    assert 'data-stat="processed">1,234,567<' in site.get("/").text


# -- choosing -------------------------------------------------------------------------------
@pytest.fixture
def client(config: wurk.Config) -> Iterator[TestClient]:
    with browse(create_app(config), follow_redirects=False) as test_client:
        yield test_client


def change(client: TestClient, **form: str) -> Response:
    return client.post("/change_locale", data={"csrf_token": token(client), **form})


def test_the_locale_page_lists_every_locale_by_its_own_name(client: TestClient) -> None:
    page = client.get("/locale").text
    for language in i18n.languages():
        assert f'value="{language.code}" lang="{language.tag}"' in page
        assert language.name in page
    assert 'lang="ar" dir="rtl"' in page


def test_change_locale_sets_the_cookie_and_goes_back(client: TestClient) -> None:
    response = change(client, locale="de", next="/queues?page=2")
    assert response.status_code == 303
    assert response.headers["location"] == "/queues?page=2"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith("wurk_locale=de;")
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Path=/" in cookie
    page = client.get("/queues").text
    assert '<html lang="de" dir="ltr">' in page
    assert translated("de", "Queues") in page


def test_the_cookie_is_the_dashboards_own_where_it_is_mounted(config: wurk.Config) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    host = Starlette(routes=[Mount("/jobs", app=create_app(config))])
    with browse(host, follow_redirects=False) as client:
        token_ = client.get("/jobs/api/csrf").json()["token"]
        response = client.post("/jobs/change_locale", data={
            "csrf_token": token_, "locale": "fr", "next": "/busy"})
        assert response.status_code == 303 and response.headers["location"] == "/jobs/busy"
        assert "Path=/jobs" in response.headers["set-cookie"]


@pytest.mark.parametrize("target", [
    "//evil.example/x", "https://evil.example/", "/\\evil.example", "\\\\evil.example",
    "http:/evil.example", "evil.example", "/ok\r\nSet-Cookie: x=1", "", "/" + "a" * 5000,
    "javascript:alert(1)"])
def test_the_way_back_never_leaves_the_dashboard(client: TestClient, target: str) -> None:
    response = change(client, locale="fr", next=target)
    assert response.status_code == 303
    assert response.headers["location"] == "/"


@pytest.mark.parametrize("value", ["xx", "de_DE", "EN", "", "../../etc/passwd",
                                   "d" * 100_000, "de\x00"])
def test_a_locale_not_on_offer_is_a_400_naming_the_choices(client: TestClient,
                                                           value: str) -> None:
    response = change(client, locale=value)
    assert response.status_code == 400
    assert "set-cookie" not in response.headers or i18n.COOKIE not in \
        response.headers["set-cookie"]
    assert "Choose one of: en, ar, de" in response.text and "pt_BR" in response.text


def test_a_locale_sent_twice_or_missing_is_a_400(client: TestClient) -> None:
    response = client.post("/change_locale", data={"csrf_token": token(client),
                                                   "locale": ["de", "fr"]})
    assert response.status_code == 400
    assert change(client).status_code == 400


def test_change_locale_is_refused_cross_site_and_without_the_token(client: TestClient) -> None:
    response = client.post("/change_locale", data={"csrf_token": token(client),
                                                    "locale": "de"},
                           headers={"Sec-Fetch-Site": "cross-site"})
    assert response.status_code == 403 and i18n.COOKIE not in response.headers.get(
        "set-cookie", "")
    assert client.post("/change_locale", data={"locale": "de"}).status_code == 403


def test_read_only_mode_still_lets_a_viewer_choose_a_language(config: wurk.Config) -> None:
    with browse(create_app(config, read_only=True), follow_redirects=False) as client:
        assert change(client, locale="ja").status_code == 303
        assert '<html lang="ja"' in client.get("/").text
        # ... and still refuses every action
        refused = client.post("/queues/default", data={"csrf_token": token(client),
                                                       "queue": "default",
                                                       "action": "pause"})
        assert refused.status_code == 403


@pytest.mark.parametrize(("header", "expected"), [
    ("de-DE,de;q=0.9,en;q=0.8", "de"), ("fr-CA", "fr"), ("pt", "pt_BR"), ("pt-PT", "pt_BR"),
    ("zh-Hans-CN,zh;q=0.9", "zh_CN"), ("sv,nl;q=0.5", "nl"), ("en;q=0.1,ja;q=0.9", "ja"),
    ("ar", "ar"), ("sv", "en"), ("", "en"), ("de;q=0", "en"), ("*", "en"),
    ("de;q=abc,fr", "fr"), (";;;,,,", "en"), ("x" * 100_000, "en"),
    (",".join(["sv"] * 5000) + ",de", "en")])
def test_without_a_choice_accept_language_decides(client: TestClient, header: str,
                                                  expected: str) -> None:
    page = client.get("/", headers={"Accept-Language": header})
    assert page.status_code == 200
    assert f'<html lang="{i18n.language(expected).tag}"' in page.text


@pytest.mark.parametrize("cookie", ["xx", "../de", "de" * 2000, "", "%C3%A9", "de,fr"])
def test_a_cookie_not_on_offer_is_ignored(client: TestClient, cookie: str) -> None:
    page = client.get("/", headers={"Cookie": f"{i18n.COOKIE}={cookie}",
                                    "Accept-Language": "it"})
    assert page.status_code == 200
    assert '<html lang="it"' in page.text


def test_the_cookie_wins_over_accept_language(client: TestClient) -> None:
    client.cookies.set(i18n.COOKIE, "pl")
    assert '<html lang="pl"' in client.get("/", headers={"Accept-Language": "de"}).text


def test_right_to_left_pages_say_so(client: TestClient) -> None:
    client.cookies.set(i18n.COOKIE, "ar")
    page = client.get("/busy").text
    assert '<html lang="ar" dir="rtl">' in page
    css = client.get("/static/wurk.css").text
    assert not re.search(r"(margin|padding|border)-(left|right)\b|text-align:\s*(left|right)",
                         css)


def test_error_pages_are_translated(client: TestClient) -> None:
    client.cookies.set(i18n.COOKIE, "de")
    page = client.get("/periodic/nothing-here")
    assert page.status_code == 404
    assert translated("de", "No such periodic loop: the leader may have pruned it.") \
        in page.text


def test_the_guards_refusals_are_in_the_viewers_language(config: wurk.Config) -> None:
    """A read-only refusal, a cross-site POST and a host not allowed: a page in the
    viewer's language (Arabic right to left); the JSON API's stay English."""
    read_only = "The dashboard is read-only: actions are switched off."
    with browse(create_app(config, read_only=True), follow_redirects=False) as client:
        client.cookies.set(i18n.COOKIE, "de")
        refused = client.post("/queues/default", data={"csrf_token": token(client),
                                                       "queue": "default", "action": "pause"})
        assert refused.status_code == 403 and '<html lang="de" dir="ltr">' in refused.text
        assert translated("de", read_only) in refused.text
        assert translated("de", "Back to the dashboard") in refused.text
        client.cookies.set(i18n.COOKIE, "ar")
        cross = client.post("/change_locale", data={"locale": "de"},
                            headers={"Sec-Fetch-Site": "cross-site"})
        assert cross.status_code == 403 and '<html lang="ar" dir="rtl">' in cross.text
        origin = "Refused: the request did not come from the dashboard's own pages."
        assert html.escape(translated("ar", origin), quote=False) in cross.text
        api = client.post("/api/queues/default/pause", json={},
                          headers={"X-CSRF-Token": token(client)})
        assert api.status_code == 403 and api.json() == {"error": read_only}
    with TestClient(create_app(config), base_url="http://elsewhere.example") as client:
        page = client.get("/", headers={"Accept-Language": "ja"})
        assert page.status_code == 400 and '<html lang="ja"' in page.text
        assert html.escape(translated("ja", guard.HOST_REFUSED), quote=False) in page.text


# -- extensions -----------------------------------------------------------------------------
def test_an_extensions_template_can_use_the_catalog(config: wurk.Config) -> None:
    """``_()`` in an extension's template: wurk's texts translated, its own as written."""
    async def page(request: Request) -> Response:
        return render(request, "words/page.html")

    words = Extension(name="words", tab="Words", routes=[Route("/", page)],
                      templates=HERE / "ext_words")
    with browse(create_app(config, extensions=[words])) as client:
        client.cookies.set(i18n.COOKIE, "fr")
        text = client.get("/words/").text
        assert f"<p>{translated('fr', 'Queues')}</p>" in text
        assert "<p>Only mine</p>" in text
        assert '<html lang="fr"' in text


def write_po(root: Path, code: str, domain: str, entries: dict[str, str]) -> None:
    """``root/<code>/LC_MESSAGES/<domain>.po`` holding ``entries`` (English → translation)."""
    folder = root / code / "LC_MESSAGES"
    folder.mkdir(parents=True)
    body = "".join(f'\nmsgid "{source}"\nmsgstr "{text}"\n' for source, text in entries.items())
    (folder / f"{domain}.po").write_text(
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n' + body,
        encoding="utf-8")


def test_an_extensions_catalog_translates_its_texts_and_tab_under_wurks_words(
        config: wurk.Config, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``Extension.locales``: its own texts and its tab's label in the page's language; a
    text wurk's catalog has keeps wurk's words; a broken entry is left out with a warning;
    a language it has no file for, and a file that cannot be parsed, show its texts as
    written."""
    async def page(request: Request) -> Response:
        return render(request, "words/page.html")

    locales = tmp_path / "locales"
    write_po(locales, "fr", "words", {"Only mine": "Rien qu’à moi", "Words": "Mots",
                                      "Queues": "Pas les files de wurk"})
    write_po(locales, "de", "words", {"Only mine": "Nur %(meins)s"})  # a broken entry
    write_po(locales, "it", "words", {})
    (locales / "it" / "LC_MESSAGES" / "words.po").write_bytes(b'msgid "\xff\nmsgstr 1 2 3')
    words = Extension(name="words", tab="Words", routes=[Route("/", page)],
                      templates=HERE / "ext_words", locales=locales)
    with browse(create_app(config, extensions=[words])) as client:
        client.cookies.set(i18n.COOKIE, "fr")
        french = client.get("/words/")
        assert french.status_code == 200
        assert "<p>Rien qu’à moi</p>" in french.text
        assert f"<p>{translated('fr', 'Queues')}</p>" in french.text  # wurk's words win
        assert "Pas les files" not in french.text
        assert re.search(r'<a[^>]*href="/words"[^>]*>\s*Mots\s*</a>', french.text)
        for code in ("de", "ja", "it"):  # broken entry, no file, unparsable file
            client.cookies.set(i18n.COOKIE, code)
            other = client.get("/words/")
            assert other.status_code == 200, code
            assert "<p>Only mine</p>" in other.text, code
            assert f"<p>{translated(code, 'Queues')}</p>" in other.text, code
    assert any("'words'" in r.getMessage() and "left out" in r.getMessage()
               for r in caplog.records)
    # Plurals by the locale's rule: Russian's third form for 5, not a default rule's second.
    write_po(locales, "ru", "words", {})
    (locales / "ru" / "LC_MESSAGES" / "words.po").write_text(
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
        '"Plural-Forms: nplurals=3; plural=(n%10==1 && n%100!=11 ? 0 : n%10>=2 && '
        'n%10<=4 && (n%100<10 || n%100>=20) ? 1 : 2);\\n"\n\n'
        'msgid "%(count)s widget"\nmsgid_plural "%(count)s widgets"\n'
        'msgstr[0] "%(count)s штука"\nmsgstr[1] "%(count)s штуки"\nmsgstr[2] "%(count)s штук"\n',
        encoding="utf-8")
    with browse(create_app(config, extensions=[words])) as client:
        client.cookies.set(i18n.COOKIE, "ru")
        assert "<p>5 штук</p>" in client.get("/words/").text
    # Of two extensions translating one text, the later one's words.
    later = tmp_path / "later"
    write_po(later, "fr", "later", {"Only mine": "À l’autre", "Words": "Vocables"})
    other = Extension(name="later", tab=None, locales=later)
    with browse(create_app(config, extensions=[words, other])) as client:
        client.cookies.set(i18n.COOKIE, "fr")
        both = client.get("/words/").text
        assert "<p>À l’autre</p>" in both and re.search(r">\s*Vocables\s*</a>", both)


def test_an_extensions_locales_directory_must_exist(tmp_path: Path) -> None:
    with pytest.raises(wurk.ConfigError, match=r"locales directory .*missing.* does not exist"):
        Extension(name="words", tab="Words", locales=tmp_path / "missing")


@pytest.mark.parametrize(("source", "translation", "unknown"), [
    ("Only mine", "Nur %(meins)s", {"%(meins)s"}),            # a name the page never gives
    ("Words", "100 % Wörter", {"% "}),                        # a lone %: % fails on it
    ("{n} deleted.", "{anzahl} gelöscht.", {"{anzahl}"}),     # str.format's, in a notice
    ("Page %(page)s of %(pages)s", "Seite %(page)s", set()),  # one left out: nothing fails
    ("50%% done", "50 %% fertig", set()),
])
def test_a_translations_unknown_placeholders_are_found(source: str, translation: str,
                                                        unknown: set[str]) -> None:
    catalog = Catalog(locale="de")
    catalog.add(source, translation)
    assert i18n.unknown_placeholders(catalog[source]) == unknown
