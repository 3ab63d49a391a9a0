"""``wurk.configure(client_middleware=[...], server_middleware=[...])`` takes lists, and the
chains they become run on a real push and a real execution."""

from __future__ import annotations

import json
from typing import Any

import redis

import wurk
from tests.helpers.server import Server

RAN: list[str] = []


def stamp(job: Any, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
    payload["stamped"] = True
    return call_next()


class Around:
    def __call__(self, job: Any, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        RAN.append("before")
        result = call_next()
        RAN.append("after")
        return result


@wurk.job(name="Lists::Noted")
def noted() -> None:
    RAN.append("job")


def test_lists_become_chains_that_run(redis_server: Server, r: redis.Redis) -> None:
    config = wurk.configure(redis_url=redis_server.url, client_middleware=[stamp],
                            server_middleware=[Around])
    config.freeze()  # was an AttributeError on a list
    noted.perform_async()
    (stored,) = r.lrange("queue:default", 0, -1)
    assert json.loads(stored)["stamped"] is True
    RAN.clear()
    noted.perform_inline()
    assert RAN == ["before", "job", "after"]
