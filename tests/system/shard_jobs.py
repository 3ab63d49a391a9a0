"""Jobs of ``tests/system/test_shards.py``, run by a real ``wurk worker`` serving two shards.

Each counts its run with ``wurk.redis()``: inside a job that is the processor's own
connection, so the count lands on the shard the job was fetched from."""

from __future__ import annotations

import wurk


@wurk.job(name="ShardsSys::Home")
def at_home(n: int) -> None:
    with wurk.redis() as conn:
        conn.call("INCR", "ran:home")


@wurk.job(name="ShardsSys::Euro", shard="eu")
def in_europe(n: int) -> None:
    with wurk.redis() as conn:
        conn.call("INCR", "ran:euro")
