"""Hostile values in what a worker's own threads read from Redis — not job payloads
(``test_bad_input``) but the keys beside them: remote signals, the paused set, the names of
in-flight lists, poison counters. Each is written by anyone (Ruby, an older version, a hand
or an attacker): a bad one is named in a warning, the good values beside it still work, and
no thread or process stops for it.
"""

from __future__ import annotations

import logging

import pytest
import redis

import wurk
from wurk.heartbeat import Heartbeat
from wurk.metrics.counters import Counters
from wurk.runtime.busy import Busy
from wurk.runtime.identity import Identity
from wurk.runtime.signals import SignalPipe


# -- remote signals (<identity>-signals) ------------------------------------------------------
@pytest.mark.parametrize("hostile", ["_DFL", "_BLOCK", "_SETMASK", "_IGN", "NOPE", b"\xff\xfe",
                                     "X" * 10_000])
def test_a_remote_signal_that_is_no_signal_is_ignored_with_a_warning(
        config: wurk.Config, r: redis.Redis, hostile: str | bytes,
        caplog: pytest.LogCaptureFixture) -> None:
    """The signal module's other SIG names are no signals: SIG_DFL and SIG_BLOCK are 0, which
    the worker's main loop then failed to name (ValueError: the process exited), and
    SIG_SETMASK is 2, which stopped the worker as an INT. Bytes that are no UTF-8 failed the
    beat. Each is now ignored with a warning; a TSTP sent after it is obeyed."""
    pipe = SignalPipe()
    identity = Identity.current()
    heartbeat = Heartbeat(config, identity, busy=Busy(), counters=Counters(),
                          info={"concurrency": 1}, on_signal=pipe.push)
    try:
        r.lpush(config.keys.signals(str(identity)), hostile, "TSTP")  # popped from the right
        with caplog.at_level(logging.WARNING, logger="wurk"):
            assert heartbeat.beat()
            assert pipe.wait(0.05) == []
            assert heartbeat.beat()
            assert pipe.wait(0.05) == ["TSTP"]
        shown = (hostile.decode("utf-8", "replace") if isinstance(hostile, bytes)
                 else hostile)[:100]
        assert f"ignoring unknown remote signal {shown!r}" in caplog.text
        assert len(caplog.text) < 2_000  # the name is cut, not logged whole
    finally:
        pipe.close()
        heartbeat.clear()
