"""The API's documentation: an OpenAPI 3.1 schema and a page that reads it aloud.

Both are made from ``api.ENDPOINTS``, the extensions' endpoints (under ``/api/<name>``) and
the live stream's entry, so they list exactly the routes that exist. Served at
``/api/openapi.json`` and ``/api``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from .._version import __version__
from .api import ENDPOINTS, Endpoint, describe
from .context import dashboard
from .extensions import Extension
from .guard import SCOPE_ROOT
from .security import CSRF_HEADER
from .templating import render

__all__ = ["STREAM_PATH", "routes", "schema"]

STREAM_PATH = "/stats/stream"
STREAM_SUMMARY = ("Server-Sent Events: a 'stats' event with /stats's document every "
                  "web_stream_interval seconds")
ERROR_SCHEMA = {"type": "object", "properties": {"error": {"type": "string"}}}
INVALID_NOTE = ("A value stored in Redis that cannot be read (a time of 1e300, a counter of "
                "400 digits) is null; its raw text is in the answer's top-level 'invalid' "
                "object, keyed by the JSON Pointer of where it stood.")


def all_endpoints(extensions: Sequence[Extension] = ()) -> list[Endpoint]:
    """The dashboard's endpoints, then each extension's with its full path."""
    found = list(ENDPOINTS)
    for extension in extensions:
        found += [replace(e, path=f"/api/{extension.name}{e.path}") for e in extension.api
                  if isinstance(e, Endpoint)]
    return found


def schema(root: str = "", extensions: Sequence[Extension] = ()) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in all_endpoints(extensions):
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = operation(endpoint)
    paths[STREAM_PATH] = {"get": {
        "summary": STREAM_SUMMARY, "tags": ["stats"],
        "responses": {"200": {"description": "an endless event stream",
                              "content": {"text/event-stream": {}}}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "wurk dashboard API", "version": __version__,
                 "description": INVALID_NOTE},
        "servers": [{"url": root or "/"}],
        "paths": paths,
        "components": {"securitySchemes": {"csrf": {
            "type": "apiKey", "in": "header", "name": CSRF_HEADER}}},
    }


def operation(endpoint: Endpoint) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": endpoint.summary, "tags": [endpoint.tag],
        "parameters": path_parameters(endpoint.path) + [
            {"name": name, "in": "query", "required": False, "description": text,
             "schema": {"type": kind}} for name, kind, text in endpoint.query],
        "responses": {"200": {"description": "OK", "content": {"application/json": {}}},
                      "4XX": error_response("refused or not found")},
    }
    if endpoint.method == "POST":
        op["security"] = [{"csrf": []}]
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "properties": {
                name: {"type": kind, "description": text} for name, kind, text in endpoint.body
            }}}}}
    return op


def path_parameters(path: str) -> list[dict[str, Any]]:
    return [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in re.findall(r"{(\w+)}", path)]


def error_response(text: str) -> dict[str, Any]:
    return {"description": text, "content": {"application/json": {"schema": ERROR_SCHEMA}}}


async def openapi_json(request: Request) -> Response:
    return JSONResponse(schema(request.scope.get(SCOPE_ROOT, ""),
                               dashboard(request).extensions))


async def docs(request: Request) -> Response:
    endpoints = [describe(e) for e in all_endpoints(dashboard(request).extensions)]
    return render(request, "api.html", {"endpoints": endpoints, "stream_path": STREAM_PATH,
                                        "stream_summary": STREAM_SUMMARY,
                                        "csrf_header": CSRF_HEADER})


def routes() -> list[BaseRoute]:
    return [Route("/api/openapi.json", openapi_json, methods=["GET"]),
            Route("/api", docs, methods=["GET"])]
