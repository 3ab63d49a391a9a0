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
from wurk import payload as P
from wurk.config import Capsule
from wurk.fetch.pause import PausedCache
from wurk.fetch.reliable import ReliableFetch
from wurk.heartbeat import Heartbeat
from wurk.metrics.counters import Counters
from wurk.runtime.busy import Busy
from wurk.runtime.identity import Identity
from wurk.runtime.signals import SignalPipe


def job(n: int) -> str:
    return P.dumps({"class": "X", "args": [n], "queue": "default", "jid": f"jid{n:021d}"})


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


# -- the paused set (paused) --------------------------------------------------------------------
def test_a_paused_member_that_is_no_utf8_pauses_nothing_and_stops_no_fetch(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """Every fetch read the set through one decode: a member that is no UTF-8 made every
    fetch of every processor fail (an outage that never ended: no job ran anywhere). It names
    no queue, so it is left out with one warning; the queue paused beside it stays paused."""
    r.sadd(config.keys.paused, b"\xff\xfe", "a")
    r.lpush(config.keys.queue("a"), job(1))
    r.lpush(config.keys.queue("b"), job(2))
    cache = PausedCache(config)
    fetch = ReliableFetch(config, Capsule(queues=[("a", 0), ("b", 0)]), config.pool("t"),
                          identity=Identity.current(), capsule_index=0, slot=0, paused=cache.get)
    with caplog.at_level(logging.WARNING, logger="wurk"):
        unit = fetch.fetch(0.1)
        assert unit is not None and unit.queue == "b"
        unit.acknowledge()
        cache.invalidate()
        assert fetch.fetch(0.1) is None  # "a" is still paused
    assert cache.get() == frozenset({"a"})
    warnings = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert warnings == ["paused queues: ignoring a member of paused that is no queue's name "
                        "(not UTF-8): b'\\xff\\xfe'"]
    fetch.flush()
