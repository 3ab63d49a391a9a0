"""ProcessSet, Process and WorkSet read from heartbeat records written as Sidekiq writes them."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.faults import config_for
from tests.helpers.proxy import FaultProxy
from tests.helpers.server import Server
from tests.helpers.sidekiq import heartbeat, work
from wurk.api import Invalid, Process, ProcessSet, WorkSet
from wurk.errors import InspectionError, RedisUnavailable
from wurk.stored import FIELD_CAP


def info(identity: str, **extra: Any) -> dict[str, Any]:
    host, pid, _ = identity.split(":")
    return {"hostname": host, "started_at": 1700000000.5, "pid": int(pid), "tag": "app",
            "concurrency": 5, "queues": ["default", "low"], "labels": ["blue"],
            "identity": identity, **extra}


WURK_8 = "web-1:101:aaaaaaaaaaaa"   # Sidekiq 8.1.2+ / wurk: concurrency as a hash field
SIDEKIQ_7 = "web-2:202:bbbbbbbbbbbb"  # Sidekiq 7: concurrency only in info


def test_processes_merge_hash_fields_over_info(config: wurk.Config, r: redis.Redis) -> None:
    capsules = {"default": {"concurrency": 7, "mode": "weighted",
                            "weights": {"critical": 2, "default": 1}},
                "mail": {"concurrency": 3, "mode": "strict", "weights": {"mail": 0}}}
    heartbeat(r, WURK_8, info=info(WURK_8, capsules=capsules, version="0.1.0",
                                   embedded=False), busy=4, rss=30496, concurrency=10,
              quiet=True)
    heartbeat(r, SIDEKIQ_7, info=info(SIDEKIQ_7), busy=1)
    r.set("dear-leader", SIDEKIQ_7)
    first, second = ProcessSet(config).iterate()
    assert (first.identity, first.concurrency, first.busy, first.stopping) == (WURK_8, 10, 4, True)
    assert first.queues == ["critical", "default", "mail"]  # from capsules (8.0.9+)
    assert (first.rss_kb, first.rtt_us, first.version, first.leader) == (30496, 250, "0.1.0",
                                                                         False)
    assert (second.concurrency, second.queues, second.leader) == (5, ["default", "low"], True)
    assert (second.hostname, second.pid, second.tag, second.labels) == ("web-2", 202, "app",
                                                                        ["blue"])
    assert second.beat == pytest.approx(time.time(), abs=5)
    assert second.started_at == 1700000000.5 and not second.stopping
    processes = ProcessSet(config)
    assert (processes.size(), processes.total_concurrency(), processes.total_rss_kb()) == (
        2, 15, 30496 + 1024)
    assert processes.leader() == SIDEKIQ_7
    assert first.to_dict()["quiet"] is True and second.to_dict()["leader"] is True


def test_stale_members_are_skipped_and_pruned_once_a_minute(config: wurk.Config,
                                                            r: redis.Redis) -> None:
    heartbeat(r, WURK_8, info=info(WURK_8))
    r.sadd("processes", "gone:1:cccccccccccc", "gone:2:dddddddddddd")
    r.hset("gone:2:dddddddddddd", "busy", "1")  # a record without info is not a heartbeat
    processes = ProcessSet(config)
    assert [p.identity for p in processes.iterate(clean=False)] == [WURK_8]
    assert processes.size() == 3
    assert processes.cleanup() == 2
    assert r.smembers("processes") == {WURK_8}
    assert r.ttl("process_cleanup") > 0
    r.sadd("processes", "gone:3:eeeeeeeeeeee")
    assert processes.cleanup() == 0  # another pruning ran within the minute
    list(processes.iterate())
    assert r.sismember("processes", "gone:3:eeeeeeeeeeee")
    r.delete("process_cleanup")
    assert [p.identity for p in processes] == [WURK_8]
    assert r.smembers("processes") == {WURK_8}


def test_unreadable_info_is_shown_invalid(config: wurk.Config, r: redis.Redis) -> None:
    heartbeat(r, WURK_8, info=info(WURK_8))
    r.sadd("processes", "bad:1:ffffffffffff")
    r.hset("bad:1:ffffffffffff", mapping={"info": "{oops", "busy": "x"})
    bad, good = ProcessSet(config).iterate(clean=False)
    assert good.identity == WURK_8 and good.hostname == "web-1"
    assert bad.identity == "bad:1:ffffffffffff" and not bad.embedded
    assert bad.hostname == Invalid(raw="{oops", expected="a JSON object")
    assert bad.busy == Invalid(raw="x", expected="a count") and bad.queues == []


@pytest.mark.parametrize(("action", "signal"), [("quiet", "TSTP"), ("stop", "TERM"),
                                                ("dump_threads", "TTIN")])
def test_remote_signals(config: wurk.Config, r: redis.Redis, action: str, signal: str) -> None:
    heartbeat(r, WURK_8, info=info(WURK_8))
    (process,) = ProcessSet(config).iterate()
    getattr(process, action)()
    assert r.lrange(f"{WURK_8}-signals", 0, -1) == [signal]
    assert 0 < r.ttl(f"{WURK_8}-signals") <= 60


def test_a_signals_key_of_another_type_stops_no_quiet_all(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """A process's ``<identity>-signals`` holding another type (written by hand) failed its
    quiet with a WRONGTYPE naming no key, and the dashboard's Quiet All with it: the processes
    after that one were never told. The key is deleted with a warning naming it, and the
    signal sent to every process."""
    from wurk.web.actions import process_action

    heartbeat(r, WURK_8, info=info(WURK_8))
    heartbeat(r, SIDEKIQ_7, info=info(SIDEKIQ_7))
    r.set(f"{WURK_8}-signals", "a string, as a hand left it")  # sorted first
    with caplog.at_level(logging.WARNING, logger="wurk"):
        assert process_action(config, "quiet", None) == 2
    assert f"{WURK_8}-signals held no list of remote signals" in caplog.text
    for identity in (WURK_8, SIDEKIQ_7):
        assert r.lrange(f"{identity}-signals", 0, -1) == ["TSTP"]
        assert 0 < r.ttl(f"{identity}-signals") <= 60


def test_embedded_processes_refuse_signals(config: wurk.Config, r: redis.Redis) -> None:
    heartbeat(r, WURK_8, info=info(WURK_8, embedded=True))
    (process,) = ProcessSet(config).iterate()
    with pytest.raises(InspectionError, match="embedded"):
        process.stop()
    assert r.exists(f"{WURK_8}-signals") == 0


def test_a_signal_whose_reply_a_broken_connection_lost_is_not_sent_twice(
        redis_server: Server, r: redis.Redis) -> None:
    """inspection.md: "writes are not [replayed]": the LPUSH of a quiet reached Redis, its
    reply was lost with the connection; the call raises rather than push TSTP again."""
    heartbeat(r, WURK_8, info=info(WURK_8))
    with FaultProxy(redis_server.port) as proxy:
        config = config_for(proxy.url)
        try:
            found = Process.find(WURK_8, config)  # its record read: the write comes first
            assert found is not None
            proxy.latency(0.3)  # each way: the reply waits 0.3 s in the proxy
            outcome: list[BaseException | None] = []

            def quiet() -> None:
                try:
                    found.quiet()
                    outcome.append(None)
                except Exception as exc:
                    outcome.append(exc)

            quieting = threading.Thread(target=quiet)
            quieting.start()
            deadline = time.monotonic() + 10
            while not r.exists(f"{WURK_8}-signals"):  # applied; its reply in the proxy
                assert time.monotonic() < deadline, "the signal never reached Redis"
                time.sleep(0.01)
            assert proxy.cut() >= 1
            quieting.join(10)
            # A replay is made inside the call, which has returned, raising: none was sent.
            assert [type(exc) for exc in outcome] == [RedisUnavailable]
            assert r.lrange(f"{WURK_8}-signals", 0, -1) == ["TSTP"]
        finally:
            config.close()


def test_a_process_by_its_identity(config: wurk.Config, r: redis.Redis) -> None:
    heartbeat(r, WURK_8, info=info(WURK_8), busy=3)
    Process(WURK_8, config=config).quiet()  # named, not read: the signal goes at once
    assert r.lrange(f"{WURK_8}-signals", 0, -1) == ["TSTP"]
    found = Process.find(WURK_8, config)
    assert found is not None and (found.hostname, found.busy, found.pid) == ("web-1", 3, 101)
    assert Process.find("gone:1:ffffffffffff", config) is None
    heartbeat(r, SIDEKIQ_7, info=info(SIDEKIQ_7, embedded=True))
    with pytest.raises(InspectionError, match="embedded"):
        Process(SIDEKIQ_7, config=config).stop()  # reads its record to know
    assert r.exists(f"{SIDEKIQ_7}-signals") == 0


def test_work_set_reads_work_and_the_64_workers_hash(config: wurk.Config,
                                                     r: redis.Redis) -> None:
    now = int(time.time())
    heartbeat(r, WURK_8, info=info(WURK_8), busy=2)
    heartbeat(r, SIDEKIQ_7, info=info(SIDEKIQ_7), busy=1)
    job = {"class": "Slow", "args": [1], "jid": "a" * 24, "queue": "default"}
    work(r, WURK_8, "t1", job, run_at=now - 5)
    work(r, WURK_8, "t1", job, run_at=now - 5, key="workers")  # wurk writes both: read once
    work(r, WURK_8, "t2", {**job, "jid": "b" * 24}, run_at=now - 1, as_object=True)  # 6.0.1
    work(r, SIDEKIQ_7, "t9", {**job, "jid": "c" * 24}, run_at=now - 9, key="workers")  # 6.4
    work(r, "dead:9:999999999999", "t0", job, run_at=now)  # no heartbeat: not shown
    r.sadd("processes", "dead:9:999999999999")
    r.hset(f"{SIDEKIQ_7}:workers", "junk", "{not json")
    works = list(WorkSet(config))
    assert [(w.process, w.thread, w.job.jid) for w in works] == [
        (SIDEKIQ_7, "t9", "c" * 24), (WURK_8, "t1", "a" * 24), (WURK_8, "t2", "b" * 24)]
    assert works[0].run_at == now - 9 and works[0].queue == "default"
    assert works[1].job.klass == "Slow" and works[1].to_dict()["job"]["args"] == [1]
    assert WorkSet(config).size() == 3
    found = WorkSet(config).find_work("b" * 24)
    assert found is not None and found.thread == "t2"
    assert WorkSet(config).find_work("z" * 24) is None



def test_a_work_hash_of_many_fields_is_read_only_up_to_a_cap(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """docs/design.md: "collections are read up to a cap". A ``:work`` hash of a million
    fields (an attacker, a bug) cost the busy page seconds and a gigabyte per load."""
    now = int(time.time())
    heartbeat(r, WURK_8, info=info(WURK_8), busy=1)
    heartbeat(r, SIDEKIQ_7, info=info(SIDEKIQ_7), busy=1)
    work(r, SIDEKIQ_7, "t1", {"class": "Real", "args": [], "jid": "a" * 24}, run_at=now)
    stored = FIELD_CAP + 5000
    pipe = r.pipeline(transaction=False)
    for start in range(0, stored, 1000):
        pipe.hset(f"{WURK_8}:work", mapping={f"t{n}": "{not json" if n % 2 else json.dumps(
            {"queue": "q", "run_at": now, "payload": '{"class":"Junk","jid":"j"}'})
            for n in range(start, min(stored, start + 1000))})
    pipe.execute()
    with caplog.at_level(logging.WARNING, logger="wurk"):
        works = list(WorkSet(config))
    assert [w.job.klass for w in works if w.process == SIDEKIQ_7] == ["Real"]
    junk = [w for w in works if w.process == WURK_8]
    assert 0 < len(junk) <= FIELD_CAP // 2 + 1000  # about half of what was read is JSON
    warnings = [rec.getMessage() for rec in caplog.records if WURK_8 in rec.getMessage()]
    assert len(warnings) <= 2, warnings[:3]  # one line per problem, not one per entry
    assert any(f"{stored:,}" in text for text in warnings), warnings


def test_empty_cluster(config: wurk.Config) -> None:
    assert list(ProcessSet(config)) == [] and list(WorkSet(config)) == []
    assert ProcessSet(config).leader() is None and WorkSet(config).size() == 0


def test_work_value_written_by_wurk_shape(config: wurk.Config, r: redis.Redis) -> None:
    heartbeat(r, WURK_8, info=info(WURK_8), busy=1)
    payload = json.dumps({"class": "X", "args": [], "jid": "d" * 24}, separators=(",", ":"))
    r.hset(f"{WURK_8}:work", "abc", json.dumps({"queue": "q", "payload": payload,
                                                 "run_at": 1700000000}))
    (one,) = WorkSet(config)
    assert one.job.raw == payload.encode() and one.queue == "q"
