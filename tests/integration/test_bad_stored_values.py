"""Hostile values in what a worker's own threads read from Redis — not job payloads
(``test_bad_input``) but the keys beside them: remote signals, the paused set, the names of
in-flight lists, poison counters. Each is written by anyone (Ruby, an older version, a hand
or an attacker): a bad one is named in a warning, the good values beside it still work, and
no thread or process stops for it.
"""

from __future__ import annotations

import json
import logging

import pytest
import redis

import wurk
from tests.helpers.server import Server
from wurk import payload as P
from wurk.config import Capsule
from wurk.fetch import basic
from wurk.fetch.basic import BasicFetch
from wurk.fetch.pause import PausedCache
from wurk.fetch.reaper import Reaper
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


def test_a_remote_signal_no_worker_obeys_is_named_in_a_warning(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """A real signal's name that the worker traps no handler for (KILL, HUP, STOP) was
    written to the signal pipe and dropped there without a word: whoever sent it saw nothing
    happen and nothing said why. It is named in a warning now. ``SIGTSTP``, which Ruby's
    ``Process.kill`` (what Sidekiq does with the entry) takes as TSTP, was ignored as unknown;
    it quiets now, as on Sidekiq."""
    pipe = SignalPipe()
    identity = Identity.current()
    heartbeat = Heartbeat(config, identity, busy=Busy(), counters=Counters(),
                          info={"concurrency": 1}, on_signal=pipe.push)
    key = config.keys.signals(str(identity))
    try:
        with caplog.at_level(logging.WARNING, logger="wurk"):
            for name in ("KILL", "HUP", "STOP"):
                r.lpush(key, name)
                assert heartbeat.beat()
                assert pipe.wait(0.05) == []
                assert f"ignoring remote signal {name!r}: a worker obeys only TERM" \
                    in caplog.text
            r.lpush(key, "SIGTSTP")
            assert heartbeat.beat()
            assert pipe.wait(0.05) == ["TSTP"]
    finally:
        pipe.close()
        heartbeat.clear()


def test_an_in_process_workers_remote_signal_is_logged_cut_and_escaped(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """An in-process worker refuses remote quiet and stop, logging the entry it popped — whole
    and as it was: ten megabytes pushed by hand made a ten-megabyte log line, and a newline
    in it forged a line of its own. The entry is now cut and escaped, as a worker's is."""
    worker = wurk.InProcessWorker(config)
    identity = Identity.current()
    heartbeat = Heartbeat(config, identity, busy=Busy(), counters=Counters(),
                          info={"concurrency": 1}, on_signal=worker._remote_signal)
    hostile = "NOPE\nwurk: forged line" + "X" * 10_000_000
    r.lpush(config.keys.signals(str(identity)), hostile)
    try:
        with caplog.at_level(logging.WARNING, logger="wurk"):
            assert heartbeat.beat()
        assert f"ignoring unknown remote signal {hostile[:100]!r}" in caplog.text
        assert len(caplog.text) < 2_000
        assert "\nwurk: forged line" not in caplog.text
    finally:
        heartbeat.clear()


# -- stats counters (stat:processed, stat:failed) ---------------------------------------------
@pytest.mark.parametrize("hostile", ["not a number", "list"])
def test_a_stats_counter_that_holds_no_count_stops_no_heartbeat(
        config: wurk.Config, r: redis.Redis, hostile: str) -> None:
    """Each beat flushes the stats first. A ``stat:processed`` holding no count (a string, or
    another type) failed that flush, and the whole beat with it, at every beat: the process
    record expired while the worker ran, so another worker's reaper took the jobs it was
    running (and ran them again), and its own processors stopped fetching for good. The
    flush's failure is reported now, the counts are kept for a later flush, the record is
    written all the same."""
    reported: list[tuple[BaseException, dict[str, object]]] = []
    config.error_handlers.append(lambda exc, context: reported.append((exc, context)))
    identity = Identity.current()
    counters = Counters()
    heartbeat = Heartbeat(config, identity, busy=Busy(), counters=counters,
                          info={"concurrency": 1})
    key = config.keys.stat_processed
    if hostile == "list":
        r.rpush(key, "x")
    else:
        r.set(key, hostile)
    try:
        counters.record(failed=False)
        assert heartbeat.beat(), "the beat failed for the stats"
        assert r.exists(config.keys.process(str(identity)))
        assert heartbeat.wait_visible(0)
        assert reported and reported[0][1]["context"] == "stats flush"
        assert heartbeat.beat() and len(reported) == 1  # once, not at every beat
        r.delete(key)
        assert heartbeat.beat()
        assert r.get(key) == "1", "the count was lost"
    finally:
        heartbeat.clear()


def test_a_stats_counter_that_holds_no_count_leaves_the_others_counted_once(
        config: wurk.Config, r: redis.Redis) -> None:
    """The flush's other keys (the daily counters, ``stat:failed``) took their counts when
    ``stat:processed`` refused its own, yet all the counts were kept for the next flush: each
    beat added them again, so three failures read 3, 6, 9 … in every other stats key for as
    long as the key stayed bad. Only the refusing key's counts are kept now."""
    import datetime as dt

    identity = Identity.current()
    counters = Counters()
    heartbeat = Heartbeat(config, identity, busy=Busy(), counters=counters,
                          info={"concurrency": 1})
    key, keys = config.keys.stat_processed, config.keys
    r.set(key, "not a number")
    try:
        for _ in range(3):
            counters.record(failed=True)
        today = dt.datetime.now(dt.timezone.utc).date()
        for _ in range(3):
            assert heartbeat.beat()
        assert r.mget(keys.stat_failed, keys.stat_processed_day(today),
                      keys.stat_failed_day(today)) == ["3", "3", "3"]
        r.delete(key)
        assert heartbeat.beat()
        assert r.mget(key, keys.stat_failed, keys.stat_processed_day(today)) == \
            ["3", "3", "3"]
    finally:
        heartbeat.clear()


# -- the registry a beat writes (processes, the record, the signals list) ----------------------
@pytest.mark.parametrize("which", ["processes", "record", "signals"])
def test_a_registry_key_of_another_type_is_deleted_and_the_beat_goes_on(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture,
        which: str) -> None:
    """A beat's MULTI wrote the record, listed the process and popped a remote signal in
    one; any of those keys holding another Redis type failed its command at every beat —
    the beat raised, so the processors (waiting to be vouched for) never fetched, and a
    signal popped beside it was lost. Such a key is deleted with a warning naming it; the
    beat writes what it writes and reads the signal."""
    identity = Identity.current()
    signals: list[str] = []
    heartbeat = Heartbeat(config, identity, busy=Busy(), counters=Counters(),
                          info={"concurrency": 1}, on_signal=signals.append)
    key = {"processes": config.keys.processes, "record": config.keys.process(str(identity)),
           "signals": config.keys.signals(str(identity))}[which]
    r.set(key, "a string, as a hand left it")
    if which != "signals":
        r.lpush(config.keys.signals(str(identity)), "TSTP")
    try:
        with caplog.at_level(logging.WARNING, logger="wurk"):
            assert heartbeat.beat(), "the beat failed"
        assert f"heartbeat: {key} held a string" in caplog.text
        assert r.sismember(config.keys.processes, str(identity))
        assert r.hget(config.keys.process(str(identity)), "concurrency") == "1"
        assert heartbeat.wait_visible(0)
        # The signal the failed command's MULTI popped is obeyed, not lost nor popped twice.
        assert signals == ([] if which == "signals" else ["TSTP"])
    finally:
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


def test_a_paused_key_of_another_type_pauses_nothing_and_is_named_once(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """A `paused` key written as a string was reported as an outage of "paused queues" naming
    no key, at every read; it is read as no queue paused (as the dashboard reads a key of
    another type), with one warning naming it, and no outage."""
    r.set(config.keys.paused, "a")
    cache = PausedCache(config)
    with caplog.at_level(logging.WARNING, logger="wurk"):
        assert cache.get() == frozenset()
        cache.invalidate()
        assert cache.get() == frozenset()
    warnings = [rec.getMessage() for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "paused" in warnings[0] and "another" in warnings[0]
    assert not cache._outage.active
    r.delete(config.keys.paused)
    r.sadd(config.keys.paused, "a")
    cache.invalidate()
    assert cache.get() == frozenset({"a"})


# -- the names of in-flight lists (queue:<q>|…) -------------------------------------------------
def test_a_list_named_like_an_in_flight_list_that_names_no_owner_stops_no_sweep(
        config: wurk.Config, redis_server: Server, caplog: pytest.LogCaptureFixture) -> None:
    """The reaper read an owner out of every list name matching ``queue:*|*``: a name with
    one '|' after ``sq``, a pid written '²' (``str.isdigit`` says yes, ``int`` no) or in 5,000
    digits, a name that is no UTF-8, a member of ``processes`` that is no UTF-8, a pid too big
    for the system's call — each raised, the whole sweep failed at every interval, and the
    jobs of every dead worker after it stayed in flight for good. Such lists are now left
    alone with one warning each; the dead worker's jobs beside them go back."""
    raw = redis.Redis.from_url(redis_server.url)
    me = Identity.current()
    huge = "9" * 20  # a pid as a name may write it; no system has it
    hostile: list[bytes] = [b"queue:sq|x", b"queue:default|h|\xc2\xb2|2",
                            f"queue:default|h|{'9' * 5000}|2".encode(),
                            b"queue:default|\xff|1|aaaaaaaaaaaa|0"]
    try:
        for key in hostile:
            raw.lpush(key, job(9))
        # A heartbeat on this host, its pid more than the system's calls take: cannot tell,
        # so its record is believed (as for any owner whose pid says nothing).
        alive = config.keys.private("default", me.hostname, int(huge), "dddddddddddd", 0)
        raw.lpush(alive, job(8))
        raw.hset(f"{me.hostname}:{huge}:dddddddddddd",
                 mapping={"info": json.dumps({"boot_id": me.boot_id,
                                              "pid_namespace": me.pid_namespace})})
        # An owner of the older layout (no nonce) whose only match in processes is no UTF-8.
        raw.sadd(config.keys.processes, b"oldhost:5:\xff")
        raw.lpush("queue:default|oldhost|5|2", job(2))
        dead = config.keys.private("default", "gone", 7, "eeeeeeeeeeee", 0)
        raw.lpush(dead, job(1))
        reaper = Reaper(config, me, ["default"])
        with caplog.at_level(logging.WARNING, logger="wurk"):
            assert reaper.sweep() == 2
            assert reaper.reap_all() == 0  # a second look warns no more
        assert sorted(raw.lrange(config.keys.queue("default"), 0, -1)) == [job(1).encode(),
                                                                           job(2).encode()]
        assert [raw.lrange(key, 0, -1) for key in hostile] == [[job(9).encode()]] * 4
        assert raw.lrange(alive, 0, -1) == [job(8).encode()]
        warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
        assert sorted(warned) == sorted(
            f"reaper: the list {key[:200]!r} is named like an in-flight list but its name "
            "does not say whose (host, pid, queue); left alone" for key in hostile)
    finally:
        raw.close()


# -- poison counters (super_fetch:recovered:<jid>) ----------------------------------------------
def test_a_poison_counter_that_holds_no_count_starts_again_and_stops_no_recovery(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """The recovery script INCRed each job's counter: one that held text, a number past
    2^63 or another type failed the script, so the dead worker's list was never given back
    (the sweep failed at every interval, and the lists after it with it). Such a counter now
    starts again from this recovery, with a warning naming it; a good counter counts on."""
    jids = {"text": "a" * 24, "big": "b" * 24, "hash": "c" * 24, "good": "d" * 24}
    counters = {name: config.keys.poison_counter(jid) for name, jid in jids.items()}
    r.set(counters["text"], "not a count")
    r.set(counters["big"], str(2**63 - 1))  # one more is past what INCR holds
    r.hset(counters["hash"], "n", "1")
    r.set(counters["good"], 1)
    dead = config.keys.private("default", "gone", 7, "eeeeeeeeeeee", 0)
    r.lpush(dead, *(P.dumps({"class": "X", "args": [], "queue": "default", "jid": jid})
                    for jid in jids.values()))
    second = config.keys.private("default", "gone", 8, "ffffffffffff", 0)
    r.lpush(second, job(1))
    with caplog.at_level(logging.WARNING, logger="wurk"):
        assert Reaper(config, Identity.current(), ["default"]).sweep() == 5
    assert not r.exists(dead, second) and r.llen(config.keys.queue("default")) == 5
    assert [r.get(counters[name]) for name in ("text", "big", "hash", "good")] == \
        ["1", "1", "1", "2"]
    assert all(0 < r.ttl(key) <= 72 * 3600 for key in counters.values())
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert sorted(warned) == sorted(
        f"reaper: the poison counter {counters[name]} held no count (written by something "
        "else); it starts again from this recovery" for name in ("text", "big", "hash"))


def test_a_dead_set_of_another_type_stops_no_sweep_and_loses_no_poison_pill(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """A poison pill's kill wrote to a dead set that held another type (WRONGTYPE): the error
    ended the sweep there, so every dead owner's list after it stayed unrecovered, at every
    interval. The pill now stays where it was, with a warning naming the dead set, and the
    sweep goes on."""
    r.set(config.keys.dead, "not a sorted set")
    pill = P.dumps({"class": "X", "args": [], "queue": "default", "jid": "p" * 24})
    r.set(config.keys.poison_counter("p" * 24), 2)
    first = config.keys.private("default", "gone", 7, "eeeeeeeeeeee", 0)
    r.lpush(first, pill)
    after = config.keys.private("other", "gone", 8, "ffffffffffff", 0)
    r.lpush(after, job(1))
    with caplog.at_level(logging.WARNING, logger="wurk"):
        assert Reaper(config, Identity.current(), ["default", "other"]).sweep() == 1
    assert r.lrange(first, 0, -1) == [pill]  # not lost: tried again at the next sweep
    assert not r.exists(after) and r.lrange(config.keys.queue("other"), 0, -1) == [job(1)]
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert any(config.keys.dead in message and first in message and "WRONGTYPE" in message
               for message in warned), warned


def test_a_queues_set_or_recovered_count_of_another_type_stops_no_recovery(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """The recovery script moved a dead owner's jobs, then failed on `queues` or the
    recovered count holding another type: the script errored half-way, its jobs moved but
    neither counted nor told to the on_recover hook, and the sweep ended there, leaving every
    list after it unrecovered. The bookkeeping such a key refuses is skipped now, with a
    warning naming it; the recovery goes on."""
    told: list[str] = []
    config.on_recover = lambda text, pill: told.append(text)
    r.set(config.keys.queues, "not a set")
    r.lpush(config.keys.stat_recovered, "not a count")
    first = config.keys.private("default", "gone", 7, "eeeeeeeeeeee", 0)
    r.lpush(first, job(1))
    after = config.keys.private("other", "gone", 8, "ffffffffffff", 0)
    r.lpush(after, job(2))
    with caplog.at_level(logging.WARNING, logger="wurk"):
        assert Reaper(config, Identity.current(), ["default", "other"]).sweep() == 2
    assert not r.exists(first, after)
    assert r.lrange(config.keys.queue("default"), 0, -1) == [job(1)]
    assert r.lrange(config.keys.queue("other"), 0, -1) == [job(2)]
    assert told == [job(1), job(2)]
    warned = {rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING}
    assert warned == {
        f"reaper: {key} holds another Redis type (written by something else); the recovery "
        "went on without updating it" for key in (config.keys.queues, config.keys.stat_recovered)}


def test_a_queue_of_another_type_stops_no_fetch_of_the_queues_beside_it(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """The fetch script moved from each queue in turn with a plain call: a queue key holding
    another type (written by hand) failed every fetch that reached it, so in strict order no
    queue after it was ever served (the processors backed off as in an outage that never
    ended). Such a queue is now passed over, with one warning naming it, and never waited on."""
    r.set(config.keys.queue("a"), "not a list")
    r.lpush(config.keys.queue("b"), job(1))
    fetch = ReliableFetch(config, Capsule(queues=[("a", 0), ("b", 0)]), config.pool("t"),
                          identity=Identity.current(), capsule_index=0, slot=0)
    with caplog.at_level(logging.WARNING, logger="wurk"):
        unit = fetch.fetch(0.1)
        assert unit is not None and unit.queue == "b" and unit.raw == job(1).encode()
        unit.acknowledge()
        assert fetch.fetch(0.1) is None  # every queue empty or refused: waits, no error
        assert fetch.fetch(0.1) is None
        r.lpush(config.keys.queue("b"), job(2))
        unit = fetch.fetch(0.1)
        assert unit is not None and unit.raw == job(2).encode()
        unit.acknowledge()
    assert r.get(config.keys.queue("a")) == "not a list"
    warnings = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert warnings == [f"fetch: {config.keys.queue('a')} or its in-flight list holds another "
                        "Redis type than a list (written by something else); the queue is "
                        "passed over"]
    fetch.flush()


def test_a_lone_queue_of_another_type_is_passed_over_with_prefetch_one(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """One queue and ``prefetch: 1``: the fetch is the ``BLMOVE`` itself, and a queue key
    holding another type (written by hand) failed it with a bare ``WRONGTYPE`` naming no
    key, at every fetch — reported as a Redis outage that never ended. It is passed over
    with one warning naming it, not waited on, and fetched from once it is a list again."""
    one = wurk.Config(redis_url=config.redis_url, prefetch=1)
    r.set(one.keys.queue("a"), "not a list")
    fetch = ReliableFetch(one, Capsule(queues=[("a", 0)]), one.pool("t"),
                          identity=Identity.current(), capsule_index=0, slot=0)
    with caplog.at_level(logging.WARNING, logger="wurk"):
        assert fetch.fetch(0.1) is None  # no error: the queue is passed over
        assert fetch.fetch(0.1) is None
        r.delete(one.keys.queue("a"))
        r.lpush(one.keys.queue("a"), job(1), job(2))
        taken: list[bytes | None] = []
        for _ in range(3):
            unit = fetch.fetch(0.1)
            taken.append(unit.raw if unit else None)
            if unit:
                unit.acknowledge()
        assert taken == [job(1).encode(), job(2).encode(), None]
        r.lpush(one.keys.queue("a"), job(3))
        unit = fetch.fetch(0.1)  # the BLMOVE again, the queue a list
        assert unit is not None and unit.raw == job(3).encode()
        unit.acknowledge()
    warnings = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert warnings == [f"fetch: {one.keys.queue('a')} or its in-flight list holds another "
                        "Redis type than a list (written by something else); the queue is "
                        "passed over"]
    fetch.flush()
    one.close()


def test_a_queue_of_another_type_stops_no_basic_fetch_of_the_queues_beside_it(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Basic fetch's one ``BRPOP`` over every queue failed with ``WRONGTYPE`` when any of
    them held another type (written by hand): no queue of the capsule was ever served. Such
    a queue is now passed over with one warning, looked at again when a fetch finds nothing
    (or every ``RECHECK_FETCHES`` fetches), and fetched from once it is a list again."""
    monkeypatch.setattr(basic, "RECHECK_FETCHES", 3)
    r.set(config.keys.queue("a"), "not a list")
    r.lpush(config.keys.queue("b"), job(1), job(2), job(3), job(4))
    fetch = BasicFetch(config, Capsule(queues=[("a", 0), ("b", 0)]), config.pool("t"))
    with caplog.at_level(logging.INFO, logger="wurk"):
        assert fetch.fetch(0.1) is None  # the refusal: the keys are looked at
        taken = [fetch.fetch(0.1) for _ in range(2)]
        assert [unit.raw if unit else None for unit in taken] == [
            job(1).encode(), job(2).encode()]
        r.delete(config.keys.queue("a"))
        # a list again: looked at on the third fetch since the refusal, and first (strict)
        r.lpush(config.keys.queue("a"), job(9))
        taken = [fetch.fetch(0.1) for _ in range(3)]
        assert [unit.raw if unit else None for unit in taken] == [
            job(9).encode(), job(3).encode(), job(4).encode()]
        assert fetch.fetch(0.1) is None  # every queue empty: waits, no error
    messages = [(rec.levelno, rec.getMessage()) for rec in caplog.records]
    assert messages == [
        (logging.WARNING, f"fetch: {config.keys.queue('a')} holds another Redis type than a "
                          "list (written by something else); the queue is passed over"),
        (logging.INFO, f"fetch: {config.keys.queue('a')} is a list again; the queue is "
                       "fetched from")]
    fetch.flush()


def test_a_processes_set_of_another_type_stops_no_sweep(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """An in-flight list of the older layout (no nonce) is judged by the `processes` set; one
    holding another type failed that read, and the error ended the sweep, leaving every dead
    owner's list after it unrecovered. Such a list is now left for the next sweep (its owner
    cannot be told dead; the heartbeat puts `processes` right), with a warning naming the
    set, and the sweep goes on."""
    r.set(config.keys.processes, "not a set")
    older = config.keys.queue("default") + "|oldhost|11|0"
    r.lpush(older, job(1))
    after = config.keys.private("other", "gone", 8, "ffffffffffff", 0)
    r.lpush(after, job(2))
    with caplog.at_level(logging.WARNING, logger="wurk"):
        assert Reaper(config, Identity.current(), ["default", "other"]).sweep() == 1
    assert r.lrange(older, 0, -1) == [job(1)]
    assert not r.exists(after) and r.lrange(config.keys.queue("other"), 0, -1) == [job(2)]
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert any(config.keys.processes in message and "another" in message
               for message in warned), warned


@pytest.mark.parametrize("layout", ["nonce", "older"])
def test_a_process_record_of_another_type_stops_no_sweep_and_strands_no_job(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture,
        layout: str) -> None:
    """The reaper read an owner's heartbeat record with HGET: a record holding another type
    (written by hand or by something else) failed with WRONGTYPE and ended the sweep there,
    so every dead owner's list after it stayed unrecovered, at every interval (the older
    layout's read took it for a `processes` of another type: its list stayed for good). A
    record of another type with no expiry is no heartbeat (a live wurk owner deletes it at
    its next beat, Ruby's EXPIRE gives it one): its owner's jobs go back, and the sweep goes
    on; one that expires is left until it does."""
    identity = "gone:7:eeeeeeeeeeee"
    if layout == "nonce":
        first = config.keys.private("default", "gone", 7, "eeeeeeeeeeee", 0)
    else:
        first = config.keys.queue("default") + "|gone|7|0"
        r.sadd(config.keys.processes, identity)
    r.set(config.keys.process(identity), "not a hash")
    r.lpush(first, job(1))
    after = config.keys.private("other", "gone", 8, "ffffffffffff", 0)
    r.lpush(after, job(2))
    r.expire(config.keys.process(identity), 60)  # a Ruby heartbeat's EXPIRE: alive
    with caplog.at_level(logging.WARNING, logger="wurk"):
        assert Reaper(config, Identity.current(), ["default", "other"]).sweep() == 1
    assert r.lrange(first, 0, -1) == [job(1)]
    assert not r.exists(after) and r.lrange(config.keys.queue("other"), 0, -1) == [job(2)]
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert [message for message in warned if config.keys.process(identity) in message] == [
        f"reaper: the heartbeat record {config.keys.process(identity)} holds another Redis "
        "type than a hash (written by something else; WRONGTYPE Operation against a key "
        "holding the wrong kind of value): its owner is taken for alive while it expires, for "
        "dead if it never does"], warned
    r.persist(config.keys.process(identity))  # nothing keeps it: no heartbeat
    assert Reaper(config, Identity.current(), ["default", "other"]).sweep() == 1
    assert not r.exists(first) and r.lrange(config.keys.queue("default"), 0, -1) == [job(1)]


def test_a_queue_of_another_type_makes_no_poison_pill_of_a_dead_owners_jobs(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """The recovery script counted a job's recovery (its poison counter), then failed moving
    it to a queue key written by hand as another type: the error ended the sweep, the count
    stayed, and after three sweeps each job read as a poison pill and was killed into the
    dead set though none had ever run. The queue key is now looked at first: the list stays,
    nothing counted, with a warning naming the key, and the sweep goes on."""
    r.set(config.keys.queue("default"), "not a list")
    first = config.keys.private("default", "gone", 7, "eeeeeeeeeeee", 0)
    r.lpush(first, job(1), job(2))
    after = config.keys.private("other", "gone", 8, "ffffffffffff", 0)
    r.lpush(after, job(3))
    reaper = Reaper(config, Identity.current(), ["default", "other"])
    with caplog.at_level(logging.WARNING, logger="wurk"):
        assert sum(reaper.sweep() for _ in range(5)) == 1
    assert sorted(r.lrange(first, 0, -1)) == sorted([job(1), job(2)])
    assert r.zcard(config.keys.dead) == 0
    assert not r.exists(config.keys.poison_counter("jid" + "1".zfill(21)),
                        config.keys.poison_counter("jid" + "2".zfill(21)))
    assert not r.exists(after) and r.lrange(config.keys.queue("other"), 0, -1) == [job(3)]
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert any(config.keys.queue("default") in message and first in message
               for message in warned), warned
    r.delete(config.keys.queue("default"))
    assert reaper.sweep() == 2 and not r.exists(first)
