"""A job reporting the garbage collector's settings of the worker process running it
(``tests/integration/test_worker_collector.py``)."""

from __future__ import annotations

import gc
import json

import wurk


@wurk.job(name="CollectorProbe")
def collector_probe(key: str) -> None:
    with wurk.redis() as conn:
        conn.call("SET", key, json.dumps({"threshold": gc.get_threshold(),
                                          "frozen": gc.get_freeze_count()}))
