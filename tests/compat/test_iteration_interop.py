"""Iterable-job state shared with Sidekiq 8 (tests/fixtures/sidekiq-8/iteration.json, its
commands as Sidekiq 8's Ruby sends them): what Ruby writes reads right through ``wurk.api``
and resumes a wurk job; a Ruby cancel stops it; what wurk writes reads the way Ruby reads it;
the TTL is set only when the key has none (Sidekiq 8's ``EXPIRE … NX``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.runner import Drain
from wurk import api

FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "sidekiq-8" /
                      "iteration.json").read_text())
JID = FIXTURE["jid"]
RAN: list[int] = []
FROM_RUBYS_CURSOR = list(range(1520, 1530))


class Resumed(wurk.IterableJob, name="test_interop.resumed"):
    def build_enumerator(self, *, cursor: int | None) -> Any:
        return wurk.iteration.ids(1500, 1530, cursor=cursor)

    def each_iteration(self, item: int) -> None:
        RAN.append(item)


def replay(r: redis.Redis, commands: list[list[str]]) -> list[Any]:
    pipe = r.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    return list(pipe.execute())


@pytest.fixture(autouse=True)
def _ran() -> None:
    RAN.clear()


def test_state_ruby_wrote_reads_through_the_api(config: wurk.Config, r: redis.Redis) -> None:
    replay(r, FIXTURE["flush"])
    state = api.IterableJobQuery(config).find(JID)
    assert state is not None
    assert (state.executions, state.cursor, state.runtime, state.cancelled) == \
        (3, 1520, 42.125, False)
    replay(r, FIXTURE["cancel"])
    state = api.IterableJobQuery(config).find(JID)
    assert state is not None and state.cancelled and state.cancelled_at == 1764931200.0
    assert 0 < r.ttl(f"it-{JID}") <= 2592000


def test_an_object_cursor_reads_as_json(config: wurk.Config, r: redis.Redis) -> None:
    r.hset(f"it-{JID}", mapping=FIXTURE["object_cursor"])
    state = api.IterableJobQuery(config).find(JID)
    assert state is not None and state.cursor == {"id": 99, "page": "b"}


def test_a_wurk_job_resumes_where_ruby_left_it(config: wurk.Config, r: redis.Redis) -> None:
    replay(r, FIXTURE["flush"])
    wurk.push({"class": "test_interop.resumed", "args": [], "jid": JID})
    drain = Drain(config)
    try:
        drain()
    finally:
        drain.close()
    assert RAN == FROM_RUBYS_CURSOR  # not from 1500
    assert not r.exists(f"it-{JID}")  # completed: Sidekiq's cleanup


def test_a_job_ruby_cancelled_while_queued_runs_none_of_its_items(config: wurk.Config,
                                                                  r: redis.Redis) -> None:
    replay(r, FIXTURE["cancel"])
    wurk.push({"class": "test_interop.resumed", "args": [], "jid": JID})
    drain = Drain(config)
    try:
        assert drain() == 1
    finally:
        drain.close()
    assert RAN == []


def test_state_wurk_writes_reads_the_way_ruby_reads_it(config: wurk.Config, r: redis.Redis
                                                       ) -> None:
    """Ruby: ``ex.to_i``, ``load_json(c)``, ``rt.to_f`` — so ``ex`` is decimal digits, ``c``
    JSON and ``rt`` a plain decimal, never ``1e-05`` or ``inf``."""
    from wurk.iteration import state as S

    commands = S.flush_commands(f"it-{JID}", 4, S.encode_cursor(JID, {"id": 7}), 0.00001)
    replay(r, [[str(part) for part in command] for command in commands])
    stored = r.hgetall(f"it-{JID}")
    assert stored["ex"] == "4" and json.loads(stored["c"]) == {"id": 7}
    assert re.fullmatch(r"[0-9]+\.[0-9]+", stored["rt"]), stored["rt"]
    assert float(stored["rt"]) == pytest.approx(0.00001)


def test_the_ttl_is_set_only_when_the_key_has_none(config: wurk.Config, r: redis.Redis
                                                   ) -> None:
    from wurk.iteration import state as S

    key = f"it-{JID}"
    r.hset(key, "ex", 1)
    r.expire(key, 100)
    replay(r, [[str(p) for p in c] for c in S.flush_commands(key, 2, "5", 1.0)])
    assert r.ttl(key) <= 100  # Sidekiq 8: NX, a flush does not push the expiry out
    wurk.cancel(JID)
    assert r.ttl(key) <= 100
