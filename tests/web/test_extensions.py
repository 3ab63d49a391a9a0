"""A tab added by another package: its routes, template, assets, guard and errors."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jinja2
import pytest
import redis
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import wurk
from tests.web.conftest import XSS, browse, token
from wurk.api import values
from wurk.errors import ConfigError
from wurk.web import Document, Endpoint, Extension, create_app, dashboard, render
from wurk.web.templating import COMPILED, build_templates

HERE = Path(__file__).parent


async def limits_page(request: Request) -> Response:
    size = await dashboard(request).run(lambda config: config.pool("api").run(
        lambda r: r.dbsize()), dashboard(request).config)
    return render(request, "limits/limits.html", {"limit": size, "who": XSS})


async def reset(request: Request) -> Response:
    return JSONResponse({"reset": True})


async def broken(request: Request) -> Response:
    raise RuntimeError("secret at /srv/app/.env")


def extension() -> Extension:
    return Extension(name="limits", tab="Limits",
                     routes=[Route("/", limits_page), Route("/reset", reset, methods=["POST"]),
                             Route("/broken", broken)],
                     templates=HERE / "ext_templates", static=HERE / "ext_static")


def test_extension_adds_a_tab_with_its_pages(config: wurk.Config, r: redis.Redis) -> None:
    with browse(create_app(config, extensions=[extension()])) as client:
        assert 'href="/limits">Limits</a>' in client.get("/").text
        page = client.get("/limits/")
        assert page.status_code == 200
        assert 'aria-current="page">Limits' in page.text
        assert "&lt;script&gt;" in page.text and "<script>alert" not in page.text
        asset = client.get("/limits/static/limits.css")
        assert asset.status_code == 200
        assert asset.headers["cache-control"].startswith("private")
        assert client.get("/limits/nowhere").status_code == 404


def test_an_extension_endpoint_is_served_and_listed_in_the_openapi_schema(
        config: wurk.Config) -> None:
    """``Endpoint`` is public (``wurk.web``): the docs' ``api=[Endpoint(...)]`` works as
    written, mounted under ``/api/<name>`` and documented in the schema."""
    async def quota(request: Request) -> Response:
        return JSONResponse({"left": 3})

    ext = Extension(name="quota", tab="Quota", routes=[],
                    api=[Endpoint("GET", "/left", quota, "What is left of the quota")])
    with browse(create_app(config, extensions=[ext])) as client:
        assert client.get("/api/quota/left").json() == {"left": 3}
        schema = client.get("/api/openapi.json").json()
        assert schema["paths"]["/api/quota/left"]["get"]["summary"] \
            == "What is left of the quota"


def test_extension_posts_pass_the_guard(config: wurk.Config) -> None:
    with browse(create_app(config, extensions=[extension()])) as client:
        assert client.post("/limits/reset").status_code == 403
        done = client.post("/limits/reset", data={"csrf_token": token(client)})
        assert done.json() == {"reset": True}
    with browse(create_app(config, extensions=[extension()], read_only=True)) as client:
        assert client.post("/limits/reset", data={"csrf_token": token(client)}
                           ).status_code == 403


def test_extension_error_is_reported_not_shown(config: wurk.Config) -> None:
    reported: list[tuple[str, dict[str, object]]] = []
    config.error_handlers.append(lambda exc, context, cfg: reported.append((str(exc), context)))
    with browse(create_app(config, extensions=[extension()])) as client:
        response = client.get("/limits/broken")
    assert response.status_code == 500
    assert response.text == "Extension render error (see server logs)"
    assert reported == [("secret at /srv/app/.env",
                         {"context": "web-extension-render", "extension": "limits"})]


@pytest.mark.parametrize("name", ["Limits", "api", "static", "retries", "a b", ""])
def test_bad_extension_names(name: str) -> None:
    with pytest.raises(ConfigError, match="extension name"):
        Extension(name=name, tab="x", routes=[])


def test_missing_template_directory_and_doubled_names(config: wurk.Config) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        Extension(name="x", tab="x", routes=[], templates=HERE / "nowhere")
    one = Extension(name="x", tab="x", routes=[])
    with pytest.raises(ConfigError, match="named 'x'"):
        create_app(config, extensions=[one, one])


def test_what_is_no_extension_is_named_not_crashed_on(config: wurk.Config) -> None:
    """``extensions=[wurk.web.batches]`` (a module, as a Sidekiq Pro user adds its tabs)
    failed with ``AttributeError: module has no attribute 'name'``; anything that is no
    ``Extension`` is refused, naming it and saying the built-in tabs need nothing."""
    import wurk.web.batches

    given: Any
    with pytest.raises(ConfigError, match=r"extensions: <module 'wurk\.web\.batches'.*> "
                                          r"is no wurk\.web\.Extension; the built-in tabs "
                                          r"\(.*Batches, Dead Batches.*\) are always there "
                                          r"and need nothing here"):
        given = [wurk.web.batches]
        create_app(config, extensions=given)
    for given in (["limits"], [extension], [None]):
        with pytest.raises(ConfigError, match=rf"extensions: {re.escape(repr(given[0]))} "
                                              r"is no wurk\.web\.Extension; the built-in"):
            create_app(config, extensions=given)
    with pytest.raises(ConfigError, match=r"extensions must be a list of wurk\.web\.Extension, "
                                          r"not <module 'wurk\.web\.batches'.*; the built-in"):
        given = wurk.web.batches
        create_app(config, extensions=given)
    with pytest.raises(ConfigError, match=r"extensions must be a list of wurk\.web\."
                                          r"Extension, not one: give \[it\] \(the tab "
                                          r"'limits'\)"):
        given = extension()
        create_app(config, extensions=given)


def read_limits(config: wurk.Config) -> dict[str, object]:
    raw = config.pool("api").run(lambda r: r.hgetall("limits:erp"), idempotent=True)
    return {"limit": values.count(raw.get(b"used")), "who": values.epoch(raw.get(b"at"))}


async def checked_page(request: Request) -> Response:
    dash = dashboard(request)
    return render(request, "checked/limits.html", await dash.run(read_limits, dash.config))


async def checked_json(request: Request) -> Response:
    dash = dashboard(request)
    return Document(await dash.run(read_limits, dash.config))


def test_an_extension_reads_stored_values_through_the_checked_layer(
        config: wurk.Config, r: redis.Redis) -> None:
    r.hset("limits:erp", mapping={"used": "9" * 400, "at": "1e300"})
    checked = Extension(name="checked", tab="Checked", templates=HERE / "ext_templates",
                        routes=[Route("/", checked_page), Route("/json", checked_json)])
    with browse(create_app(config, extensions=[checked])) as client:
        page = client.get("/checked/")
        assert page.status_code == 200 and "invalid (9999" in page.text
        answer = client.get("/checked/json").json()
        assert answer["limit"] is None and answer["invalid"]["/limit"].startswith("9999")
        assert answer["invalid"]["/who"] == "1e300"


def test_a_second_dashboard_in_the_process_compiles_no_page_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every dashboard's environment shares the compiled templates: the second one built
    renders without compiling, and an extension's page edited on disk since is compiled
    afresh, so it shows its new text."""
    COMPILED.clear()
    folder = tmp_path / "templates"
    folder.mkdir()
    page = folder / "page.html"
    page.write_text("<p>{{ n }} first</p>")
    ext = Extension(name="cached", tab="Cached", templates=folder)
    first = build_templates((ext,)).env
    assert first.get_template("cached/page.html").render(n=1) == "<p>1 first</p>"
    first.get_template("dashboard.html")

    compiled: list[str | None] = []
    real = jinja2.Environment.compile

    def counted(env: jinja2.Environment, source: str, name: str | None = None,
                *args: Any, **kwargs: Any) -> Any:
        compiled.append(name)
        return real(env, source, name, *args, **kwargs)

    monkeypatch.setattr(jinja2.Environment, "compile", counted)
    second = build_templates((ext,)).env
    assert second is not first
    assert second.get_template("dashboard.html").name == "dashboard.html"
    assert second.get_template("cached/page.html").render(n=2) == "<p>2 first</p>"
    assert compiled == []

    page.write_text("<p>{{ n }} edited</p>")
    third = build_templates((ext,)).env
    assert third.get_template("cached/page.html").render(n=3) == "<p>3 edited</p>"
    assert compiled == ["page.html"]  # (the extension's loader's own name for it)
