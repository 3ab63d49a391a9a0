"""wurk.api over hostile stored values: what was found raising, looping or losing a job."""

from __future__ import annotations

import json
import time

import redis

import wurk
from wurk.api import PeriodicSet


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
