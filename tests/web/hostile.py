"""Hostile data for the dashboard: what a person at redis-cli, an old version or an attacker
can leave in Redis, and a walk over every page and API route that reads it.

``visit_everything`` requests every GET route of the dashboard — each queue and each entry
it lists included — and the live stream's next event, and checks what every answer must be:
200 or 404, JSON that any parser reads (no ``Infinity``/``NaN``), markup never unescaped.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any
from urllib.parse import quote

import anyio
from starlette.testclient import TestClient

from wurk.web.context import STATE_ATTRIBUTE, Dashboard
from wurk.web.data import SET_KINDS
from wurk.web.sse import EventStream, LiveStats

MARK = "<b>mark</b>"  # in hostile text; pages must show it escaped, never as markup

READ_ROUTES = ["/", "/?days=180", "/busy", "/busy?only=jobs", "/queues", "/retries",
               "/scheduled", "/morgue", "/api", "/stats", "/stats/queues", "/api/dashboard",
               "/api/busy", "/api/queues", "/api/retries", "/api/scheduled", "/api/morgue",
               "/api/openapi.json", "/retries?substr=a", "/api/morgue?substr=1",
               "/api/metrics", "/api/metrics?period=72h"]


def refuse_constant(name: str) -> Any:
    raise AssertionError(f"the API sent {name}, which is not JSON")


def strict_json(text: str) -> Any:
    """Parse as a strict JSON reader would: ``Infinity`` and ``NaN`` fail the test."""
    return json.loads(text, parse_constant=refuse_constant)


def check(path: str, response: Any) -> None:
    assert response.status_code in (200, 404), (path, response.status_code,
                                                response.text[:300])
    kind = response.headers.get("content-type", "")
    if kind.startswith("application/json"):
        strict_json(response.text)
    elif kind.startswith("text/html"):
        assert MARK not in response.text, f"unescaped markup on {path}"


def visit_everything(client: TestClient) -> dict[str, Any]:
    """Every GET route, the stream's event and the entries' own pages; returns the
    answers by path for a test to look into."""
    answers: dict[str, Any] = {}

    def get(path: str) -> Any:
        response = client.get(path)
        check(path, response)
        answers[path] = response
        return response

    for path in READ_ROUTES:
        get(path)
    for queue in get("/api/queues").json()["queues"]:
        name = quote(queue["name"] or "-", safe="")
        get(f"/queues/{name}")
        get(f"/api/queues/{name}?direction=asc")
    for kind in SET_KINDS:
        for entry in get(f"/api/{kind}").json()["entries"]:
            key = quote(entry["key"], safe="")
            get(f"/{kind}/{key}")
            get(f"/api/{kind}/{key}")
    answers["stream"] = strict_json(next_event(client))
    return answers


def next_event(client: TestClient) -> str:
    """The data of the next ``stats`` event the live stream would send (read in an event
    loop of its own, so through a dashboard of its own: a limiter belongs to one loop)."""
    served: Dashboard = getattr(client.app.state, STATE_ATTRIBUTE)  # type: ignore[attr-defined]
    dash = Dashboard(config=served.config, read_only=True, stream_interval=1.0,
                     templates=served.templates)

    async def one() -> str:
        text = await EventStream(LiveStats())._event(dash)
        assert text.startswith("event: stats\ndata: "), text
        return text.split("data: ", 1)[1]

    return anyio.run(one)


def today_keys() -> tuple[str, str]:
    day = dt.datetime.now(dt.timezone.utc).date().isoformat()
    return f"stat:processed:{day}", f"stat:failed:{day}"
