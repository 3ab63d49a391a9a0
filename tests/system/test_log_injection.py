"""A payload cannot forge a line in a real worker's log, in any log format."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import redis

import wurk
from tests.system.conftest import Worker, wait_for

FORGED = "FORGED wurk line"


@pytest.mark.parametrize("fmt", ["pretty", "plain", "json"])
def test_a_class_name_with_a_newline_or_nul_stays_on_its_line(
        config: wurk.Config, r: redis.Redis, start_worker: Callable[..., Worker],
        fmt: str) -> None:
    evil = f"Evil\n{FORGED}\x00\x1b[2J"
    wurk.push({"class": evil, "args": [f"\n{FORGED}"], "retry": 0, "queue": "default",
               "tags": [f"t\n{FORGED}"]})
    worker = start_worker("--log-format", fmt, settings="log_level: DEBUG\n")
    wait_for(lambda: r.zcard("dead") == 1, message="the unknown job went to the dead set")
    worker.signal("TERM")
    assert worker.wait(15) == 0
    output = worker.output()
    assert "Evil" in output and "\x00" not in output and "\x1b" not in output
    for line in output.splitlines():
        assert not line.startswith(FORGED), line
        if fmt == "json" and line.startswith("{"):
            json.loads(line)
