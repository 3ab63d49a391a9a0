"""wurk.api over hostile stored values: what was found raising, looping or losing a job."""

from __future__ import annotations

import json
import time

import redis

import wurk
from wurk.api import PeriodicSet, WorkSet


def test_a_loop_history_entry_nested_past_pythons_parser_is_skipped(
        config: wurk.Config, r: redis.Redis) -> None:
    """A history entry nested thousands of levels deep raised RecursionError out of
    ``loops(history=…)`` and ``loop(lid)`` (the dashboard's Periodic tab failed on it)."""
    keys = config.keys
    r.sadd(keys.periodic, "L1")
    r.hset(keys.loop("L1"), mapping={"schedule": "* * * * *", "klass": "X", "options": "{}",
                                     "tz": "UTC", "nf": str(int(time.time()) + 60)})
    now = int(time.time())
    r.lpush(keys.loop_history("L1"), "[" * 100_000 + "]" * 100_000,
            json.dumps([now, "ok"]))
    assert PeriodicSet(config).loops(history=10)[0].history == [(now, "ok")]
    found = PeriodicSet(config).loop("L1")
    assert found is not None and found.history == [(now, "ok")]


def test_a_running_jobs_payload_text_with_a_lone_surrogate_is_shown_unparseable(
        config: wurk.Config, r: redis.Redis) -> None:
    """A work entry whose ``payload`` string held a lone surrogate escape (``\\ud800``, which
    the outer JSON decodes to text UTF-8 cannot carry) made iterating ``WorkSet`` raise
    UnicodeEncodeError: the Busy page and ``find_work`` failed for every running job."""
    r.sadd("processes", "p1")
    r.hset("p1", mapping={"info": "{}", "busy": "2"})
    good = json.dumps({"class": "X", "args": [], "jid": "a" * 24, "queue": "q"})
    r.hset("p1:work", mapping={
        "t1": '{"queue": "q", "run_at": 1, "payload": "{\\"jid\\": \\"\\ud800\\"}"}',
        "t2": json.dumps({"queue": "q", "run_at": 2, "payload": good}),
    })
    works = {work.thread: work for work in WorkSet(config)}
    assert works["t2"].job.jid == "a" * 24
    assert works["t1"].job.parse_error is not None and works["t1"].job.jid == ""
    assert WorkSet(config).find_work("a" * 24) is not None
