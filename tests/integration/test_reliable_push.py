"""Reliable push against a real server that is stopped and started: a push Redis cannot take
returns its jid and is sent later, oldest first, by the next push or by the background flush;
only connection errors are kept; a full buffer raises; a forked child never sends its
parent's jobs; nothing is sent twice because of the buffer."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import wurk
from tests.helpers.faults import Restartable, config_for
from tests.helpers.wait import wait_until
from wurk.client import idempotent, reliable
from wurk.client.buffer import DiskBuffer, Entry, MemoryBuffer, Orphan
from wurk.client.default import default_client


@pytest.fixture(autouse=True)
def _close_writers() -> Iterator[None]:
    yield
    for writer in list(reliable._writers):
        writer.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Restartable]:
    made = Restartable(tmp_path / "redis")
    yield made
    made.stop()


def client_for(server: Restartable, **settings: Any) -> wurk.Client:
    config = config_for(server.url, **{"reliable_push": "memory", **settings})
    return default_client(config)


def queued(server: Restartable, queue: str = "default") -> list[dict[str, Any]]:
    """Oldest first (LPUSH puts the newest at the head)."""
    raw = server.client().lrange(f"queue:{queue}", 0, -1)
    return [json.loads(entry) for entry in reversed(raw)]


def writer(client: wurk.Client) -> reliable.ReliableWriter:
    assert isinstance(client.writer, reliable.ReliableWriter)
    return client.writer


def test_a_push_redis_cannot_reach_returns_its_jid_and_goes_once_redis_is_back(
        server: Restartable, caplog: pytest.LogCaptureFixture) -> None:
    """memory: flushed after Redis returns with no further push (the background flush)."""
    client = client_for(server)
    server.stop()
    with caplog.at_level(logging.INFO, logger="wurk"):
        jids = [client.push({"class": "Report", "args": [n]}) for n in range(3)]
        assert all(jids) and len(writer(client).buffer) == 3
        wait_until(lambda: writer(client).flusher.failing, what="the flush to find Redis down")
        server.start()
        wait_until(lambda: len(queued(server)) == 3, timeout=15, what="the background flush")
        # its line comes once the sent jobs are counted, a moment after they land
        wait_until(lambda: any("Redis is back after" in r.getMessage() for r in caplog.records),
                   what="the line saying Redis is back")
    assert [job["jid"] for job in queued(server)] == jids  # oldest first
    assert len(writer(client).buffer) == 0
    # reliable-push.md: "one WARNING when a process starts keeping pushes, one line when
    # Redis is back" — three pushes kept, and the flush's failed tries, say it once each.
    said = [r.getMessage() for r in caplog.records]
    keeping = [m for m in said if "keeping pushes in memory until it answers" in m]
    back = [m for m in said if "Redis is back after" in m]
    assert len(keeping) == 1 and len(back) == 1, said
    assert [r.levelno for r in caplog.records if r.getMessage() in keeping] == [logging.WARNING]


def test_the_next_push_sends_the_buffered_ones_first(server: Restartable) -> None:
    client = client_for(server)
    writer(client).flusher.stop()  # only the next push may send them here
    server.stop()
    kept = [client.push({"class": "Report", "args": [n]}) for n in range(3)]
    server.start()
    writer(client)._down_until.clear()  # the backoff's wait is over: the next push tries
    last = client.push({"class": "Report", "args": [3]})
    assert [job["jid"] for job in queued(server)] == [*kept, last]


def test_scheduled_jobs_keep_their_at_and_unique_jobs_their_lock(server: Restartable) -> None:
    client = client_for(server)
    server.stop()
    at = time.time() + 3600
    later = client.push({"class": "Report", "args": [1], "at": at})
    first = client.push({"class": "Once", "args": [1], "unique_for": 60})
    second = client.push({"class": "Once", "args": [1], "unique_for": 60})
    assert later and first and second  # a duplicate is found only when sent
    server.start()
    r = server.client(decode_responses=True)
    wait_until(lambda: not len(writer(client).buffer), timeout=15, what="the flush")
    ((raw, score),) = r.zrange("schedule", 0, -1, withscores=True)
    assert json.loads(raw)["jid"] == later and abs(score - at) < 0.01
    assert [job["jid"] for job in queued(server)] == [first]
    assert len(r.keys("unique:*")) == 1


def test_an_error_reply_still_raises_and_keeps_nothing(server: Restartable) -> None:
    client = client_for(server)
    server.client().set("queue:broken", "not a list")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        client.push({"class": "Report", "args": [1], "queue": "broken"})
    assert len(writer(client).buffer) == 0


def test_a_full_buffer_raises_and_drops_nothing(server: Restartable) -> None:
    client = client_for(server, reliable_push_size=3)
    server.stop()
    kept = [client.push({"class": "Report", "args": [n]}) for n in range(3)]
    with pytest.raises(wurk.RedisUnavailable, match=r"the reliable push buffer is full: 3 jobs "
                       r"wait already, at most 3 \(reliable_push_size\)"):
        client.push({"class": "Report", "args": [3]})
    with pytest.raises(wurk.RedisUnavailable, match="buffer is full"):
        client.push_bulk({"class": "Report", "args": [[4], [5]]})
    server.start()
    wait_until(lambda: len(queued(server)) == 3, timeout=15, what="the kept three")
    assert [job["jid"] for job in queued(server)] == kept


def test_a_memory_buffer_ending_with_its_process_says_how_many_jobs_it_loses(
        server: Restartable, caplog: pytest.LogCaptureFixture) -> None:
    client = client_for(server)
    server.stop()
    for n in range(2):
        client.push({"class": "Report", "args": [n]})
    with caplog.at_level(logging.ERROR, logger="wurk"):
        writer(client).close()  # what the process's exit runs
    assert "2 buffered job(s) are lost with this process (reliable_push='memory'" \
        in caplog.text


def test_off_raises_as_before(server: Restartable) -> None:
    client = default_client(config_for(server.url))
    assert not isinstance(client.writer, reliable.ReliableWriter)
    server.stop()
    with pytest.raises(wurk.RedisUnavailable, match="Nothing was kept to retry later"):
        client.push({"class": "Report", "args": [1]})


def test_async_pushes_are_kept_the_same_way(server: Restartable) -> None:
    client = client_for(server)

    async def pushes() -> list[str | None]:
        first = await client.apush({"class": "Report", "args": [0]})
        server.stop()
        kept = [await client.apush({"class": "Report", "args": [n]}) for n in (1, 2)]
        return [first, *kept]

    jids = asyncio.run(pushes())
    assert len(writer(client).buffer) == 2
    server.start()
    wait_until(lambda: len(queued(server)) == 3, timeout=15, what="the background flush")
    assert [job["jid"] for job in queued(server)] == jids


def test_a_job_recorded_as_sent_is_not_sent_again(server: Restartable) -> None:
    """A push whose reply was lost (applied, then the connection broke) is kept and replayed:
    its jid's record, written with the job in one script, keeps the replay from pushing it
    twice. Here the first push landed, its reply unread; then the replay."""
    client = client_for(server)
    config = client.config
    job = idempotent.sendable(config.keys, client.normalize({"class": "Report", "args": [1]}),
                              None)
    assert idempotent.send(config, config.pool("client"), [job]).pushed == [job.jid]
    again = idempotent.send(config, config.pool("client"), [job])
    assert again.pushed == [] and again.already == [job.jid]
    assert [q["jid"] for q in queued(server)] == [job.jid]
    # The same through the buffer: a kept copy of a job Redis already has is dropped.
    writer(client)._keep("default", [job])
    wait_until(lambda: not len(writer(client).buffer), timeout=15, what="the flush")
    assert [q["jid"] for q in queued(server)] == [job.jid]
    assert server.client().get("wurk:stat:recovered-push") is None  # nothing was recovered


def test_a_duplicate_refused_is_not_pushed_by_a_replay_once_the_lock_is_gone(
        server: Restartable) -> None:
    """A unique job's duplicate refused, then sent again (a relay died between the refusal
    and deleting its row; a reply lost): its refusal was recorded with it, so the replay
    pushes nothing even after the holder ran and its lock went."""
    client = client_for(server)
    config = client.config
    holder, duplicate = (idempotent.sendable(config.keys, client.normalize(
        {"class": "Once", "args": [1], "unique_for": 60}), None) for _ in range(2))
    assert holder.lock == duplicate.lock is not None
    assert idempotent.send(config, config.pool("client"), [holder]).pushed == [holder.jid]
    refused = idempotent.send(config, config.pool("client"), [duplicate])
    assert refused.refused == {duplicate.jid: holder.jid} and refused.pushed == []
    server.client().delete(holder.lock)  # the holder ran: its lock is gone
    again = idempotent.send(config, config.pool("client"), [duplicate])
    assert again.pushed == [] and again.already == [duplicate.jid]
    assert [q["jid"] for q in queued(server)] == [holder.jid]
    assert not server.client().exists(holder.lock)  # no lock taken for the replay


def test_a_sent_record_is_kept_7_days_then_dropped(server: Restartable) -> None:
    """docs: a record in `wurk:push-sent` is dropped after 7 days (Redis's clock): a job
    kept longer than that after a lost reply could be pushed twice; a younger record still
    stops the replay."""
    client = client_for(server)
    config = client.config
    r = server.client(decode_responses=True)
    old, young = (idempotent.sendable(config.keys, client.normalize(
        {"class": "Report", "args": [n]}), None) for n in (1, 2))
    now = int(r.time()[0])
    r.zadd("wurk:push-sent", {old.jid: now - 7 * 86400 - 5, young.jid: now - 7 * 86400 + 120})
    sent = idempotent.send(config, config.pool("client"), [old, young])
    assert sent.pushed == [old.jid] and sent.already == [young.jid]
    assert [q["jid"] for q in queued(server)] == [old.jid]


def test_the_buffer_keeps_1000_jobs_by_default() -> None:
    assert wurk.Config().reliable_push_size == 1000
    assert wurk.Config().reliable_push == "off"


def test_recovered_pushes_are_counted_and_reported(server: Restartable) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    listener.settimeout(0.2)
    try:
        client = client_for(server, statsd=f"127.0.0.1:{listener.getsockname()[1]}")
        server.stop()
        for n in range(4):
            client.push({"class": "Report", "args": [n]})
        server.start()
        r = server.client(decode_responses=True)
        wait_until(lambda: r.get("wurk:stat:recovered-push") == "4", timeout=15,
                   what="the count")
        lines: list[str] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any("recovered.push" in x for x in lines):
            try:
                lines += listener.recv(65536).decode().splitlines()
            except TimeoutError:
                continue
        assert "wurk.jobs.recovered.push:4|c" in lines
        (identity,) = r.zrange("wurk:push-buffers", 0, -1)
        report = json.loads(r.get(f"wurk:push-buffer:{identity}") or "{}")
        assert report["pid"] == os.getpid() and report["kind"] == "memory"
        assert report["sent"] == 4 and report["buffered"] == 0 and report["oldest"] is None
        assert 0 < r.ttl(f"wurk:push-buffer:{identity}") <= reliable.REPORT_TTL
    finally:
        listener.close()


def test_a_forked_child_never_sends_its_parents_buffer(server: Restartable,
                                                       tmp_path: Path) -> None:
    client = client_for(server)
    server.stop()
    kept = [client.push({"class": "Report", "args": [n]}) for n in range(3)]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its buffer is empty, and its pushes are its own
        status = 1
        try:
            os.close(read)
            mine = writer(client)
            report = {"buffered": len(mine.buffer), "thread": mine.flusher._thread is None}
            os.write(write, json.dumps(report).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert status == 0
    assert json.loads(os.read(read, 1000)) == {"buffered": 0, "thread": True}
    os.close(read)
    server.start()
    wait_until(lambda: len(queued(server)) == 3, timeout=15, what="the parent's flush")
    assert [job["jid"] for job in queued(server)] == kept


def test_a_child_forked_while_another_thread_makes_the_writer_can_make_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The process's writer is made under a module lock on the first push. A fork while
    another thread is making it (a web process forking its swarm as a request pushes for
    the first time) must not leave the child that lock held by a thread it does not have:
    every push of the child would wait on it forever."""
    parent = os.getpid()
    inside, release = threading.Event(), threading.Event()

    class Slow(MemoryBuffer):
        def __init__(self, size: int) -> None:
            if os.getpid() == parent:  # the parent's writer is being made: held here
                inside.set()
                release.wait(30)
            super().__init__(size)

    monkeypatch.setattr(reliable, "MemoryBuffer", Slow)
    config = wurk.Config(redis_url="redis://127.0.0.1:1/0", reliable_push="memory")
    maker = threading.Thread(target=reliable.writer_for, args=(config,))
    maker.start()
    try:
        assert inside.wait(10), "the writer was never made"
        pid = os.fork()
        if pid == 0:  # the child: its first push makes its writer
            status = 1
            try:
                made = threading.Event()

                def make() -> None:
                    if isinstance(reliable.writer_for(config), reliable.ReliableWriter):
                        made.set()

                threading.Thread(target=make, daemon=True).start()
                status = 0 if made.wait(5) else 2  # at once unless held by the lock
            finally:
                os._exit(status)
        deadline = time.monotonic() + 25
        done, status = os.waitpid(pid, os.WNOHANG)
        while not done and time.monotonic() < deadline:
            threading.Event().wait(0.05)
            done, status = os.waitpid(pid, os.WNOHANG)
        if not done:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    finally:
        release.set()
        maker.join(10)
    assert done and os.waitstatus_to_exitcode(status) == 0, \
        "the child's writer waited on a lock its parent's thread held at the fork"


def test_a_disk_buffer_is_a_locked_file_that_a_forked_child_leaves_alone(
        server: Restartable, tmp_path: Path) -> None:
    client = client_for(server, reliable_push="disk", reliable_push_dir=str(tmp_path / "buf"))
    server.stop()
    jid = client.push({"class": "Report", "args": [1]})
    buffer = writer(client).buffer
    assert isinstance(buffer, DiskBuffer) and buffer.path is not None
    path = buffer.path
    lines = path.read_text().splitlines()
    assert json.loads(lines[-1])["+"] == jid  # on disk before the push returned
    assert Orphan.claim(path) is None  # its owner holds it
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            child = writer(client).buffer
            # The child forgot the parent's file, and cannot claim it: the parent lives.
            ok = len(child) == 0 and isinstance(child, DiskBuffer) and child.path is None \
                and Orphan.claim(path) is None
            status = 0 if ok else 2
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert Orphan.claim(path) is None  # the child's exit left the parent's lock in place
    server.start()
    wait_until(lambda: len(queued(server)) == 1, timeout=15, what="the flush")
    wait_until(lambda: path.read_text().splitlines() == lines[:1], what="the file emptied")
    writer(client).close()
    assert not path.exists()  # a clean exit with nothing left deletes it


@pytest.mark.parametrize("foreign", ["string", "hash"])
def test_a_push_sent_key_of_another_type_is_replaced_and_loses_no_job(
        server: Restartable, caplog: pytest.LogCaptureFixture, foreign: str) -> None:
    """``wurk:push-sent`` holding another type (no TTL) failed every recording push with a
    WRONGTYPE naming no key: a first try raised it to the caller, and a buffered job was
    dropped as refused for good. It is replaced, and the warning names it."""
    client = client_for(server)
    writer(client).flusher.stop()
    r = server.client(decode_responses=True)
    writes = {"string": lambda: r.set("wurk:push-sent", "hand-written"),
              "hash": lambda: r.hset("wurk:push-sent", "a", "1")}

    def write_foreign() -> None:
        r.delete("wurk:push-sent")
        writes[foreign]()

    write_foreign()
    with caplog.at_level(logging.WARNING, logger="wurk"):
        first = client.push({"class": "Report", "args": [1]})
    assert r.type("wurk:push-sent") == "zset" and r.zscore("wurk:push-sent", str(first))
    assert f"wurk:push-sent held a {foreign}" in caplog.text
    write_foreign()  # and a buffered job, sent by the flush
    job = idempotent.sendable(client.config.keys,
                              client.normalize({"class": "Report", "args": [2]}), None)
    writer(client)._keep("default", [job])
    writer(client).drain()
    assert [q["jid"] for q in queued(server)] == [first, job.jid]
    assert len(writer(client).buffer) == 0


def test_a_kept_job_redis_refuses_for_good_goes_to_the_dead_set(
        server: Restartable, caplog: pytest.LogCaptureFixture) -> None:
    """A kept job whose queue's key holds another type is refused at every try: it was
    dropped (its payload only in a log line). It goes to the dead set, the others on."""
    client = client_for(server)
    writer(client).flusher.stop()
    r = server.client(decode_responses=True)
    r.set("queue:blocked", "not a list")
    jobs = [idempotent.sendable(client.config.keys, client.normalize(
        {"class": "Report", "args": [n], "queue": queue}), None)
        for n, queue in enumerate(("blocked", "default"))]
    writer(client)._keep("default", jobs)
    with caplog.at_level(logging.ERROR, logger="wurk"):
        writer(client).drain()
    assert [q["jid"] for q in queued(server)] == [jobs[1].jid]
    assert [json.loads(raw)["jid"] for raw in r.zrange("dead", 0, -1)] == [jobs[0].jid]
    assert len(writer(client).buffer) == 0
    assert f"refused buffered job {jobs[0].jid} for good" in caplog.text
    assert "moved to the dead set" in caplog.text


def test_a_kept_job_refused_for_good_stays_while_the_dead_set_is_refused_for_now(
        server: Restartable) -> None:
    """A kept job Redis refuses for good, while Redis refuses the dead set's write for now
    (OOM: over maxmemory), was logged and dropped, as if the dead set had refused it for
    good. It now stays in the buffer, and goes to the dead set once Redis takes writes."""
    client = client_for(server)
    writer(client).flusher.stop()
    r = server.client(decode_responses=True)
    r.set("queue:blocked", "not a list")
    job = idempotent.sendable(client.config.keys, client.normalize(
        {"class": "Report", "args": [1], "queue": "blocked"}), None)
    writer(client)._keep("default", [job])
    r.config_set("maxmemory", "1")
    try:
        with pytest.raises(wurk.RedisUnavailable, match="OOM"):
            writer(client).drain()
        assert len(writer(client).buffer) == 1
    finally:
        r.config_set("maxmemory", "0")
    writer(client).drain()
    assert len(writer(client).buffer) == 0
    assert [json.loads(raw)["jid"] for raw in r.zrange("dead", 0, -1)] == [job.jid]


@pytest.mark.parametrize(("write", "named"), [
    (lambda r, lock: r.rpush(lock, "not a lock"), "held a list"),
    # no push writes a lock without an expiry: one written by hand refused the job for good
    (lambda r, lock: r.set(lock, "someone-else"), "held a string without an expiry")])
def test_a_unique_lock_no_push_writes_is_replaced_by_the_reliable_push(
        server: Restartable, caplog: pytest.LogCaptureFixture,
        write: Callable[[redis.Redis, str], object], named: str) -> None:
    client = client_for(server)
    r = server.client(decode_responses=True)
    job = client.normalize({"class": "Once", "args": [1], "unique_for": 60})
    lock = idempotent.sendable(client.config.keys, dict(job), None).lock
    assert lock is not None
    write(r, lock)
    with caplog.at_level(logging.WARNING, logger="wurk"):
        jid = client.push(job)
    assert jid and [q["jid"] for q in queued(server)] == [jid]
    assert r.get(lock) == jid and r.pttl(lock) > 0
    assert f"{lock} {named}" in caplog.text


def test_a_kept_unique_job_redis_refuses_for_good_leaves_no_lock(server: Restartable) -> None:
    """The script took the lock, then failed at the queue key of another type: the job went
    to the dead set and its lock refused every other push of it until it expired."""
    client = client_for(server)
    writer(client).flusher.stop()
    r = server.client(decode_responses=True)
    r.set("queue:blocked", "not a list")
    job = idempotent.sendable(client.config.keys, client.normalize(
        {"class": "Once", "args": [1], "unique_for": 600, "queue": "blocked"}), None)
    assert job.lock is not None
    writer(client)._keep("default", [job])
    writer(client).drain()
    assert [json.loads(raw)["jid"] for raw in r.zrange("dead", 0, -1)] == [job.jid]
    assert not r.exists(job.lock)


def test_a_lock_holder_that_is_no_utf8_refuses_the_duplicate_without_raising(
        server: Restartable) -> None:
    client = client_for(server)
    first = client.push({"class": "Once", "args": [1], "unique_for": 60})
    raw = server.client()
    (lock,) = raw.keys("unique:*")
    raw.set(lock, b"\xff\xfe holder", keepttl=True)
    assert client.push({"class": "Once", "args": [1], "unique_for": 60}) is None
    assert [q["jid"] for q in queued(server)] == [first]


def test_a_dead_processes_file_with_lines_no_push_can_send_holds_up_no_job(
        server: Restartable, tmp_path: Path) -> None:
    """A buffer file is untrusted (a crash, a hand, another version wrote it): a kept line
    whose job is not JSON or has no jid, whose time is an int no float holds, or a line
    nested deeper than Python parses, raised out
    of every flush — the dead file's other jobs, and every file after it, never went. A job
    that cannot be sent goes to the dead set as the text it was; the others are pushed."""
    directory = tmp_path / "buf"
    directory.mkdir()

    def job(n: int) -> str:
        return json.dumps({"class": "Report", "args": [n], "queue": "default",
                           "jid": f"{n:024d}"})

    header = {"wurk-push-buffer": 1, "host": "elsewhere", "pid": 1, "created": 1.0}
    bad = [{"+": "a" * 24, "t": 1.0, "at": None, "job": "{not json"},
           {"+": "b" * 24, "t": 1.0, "at": None, "job": json.dumps({"class": "R", "args": []})},
           {"+": "c" * 24, "t": 1.0, "at": 10**400, "job": job(9)}]
    first = [header, *bad, {"+": f"{1:024d}", "t": 10**400, "at": None, "job": job(1)},
             {"+": f"{2:024d}", "t": 1.0, "at": None, "job": job(2)}]
    second = [header, {"+": f"{3:024d}", "t": 1.0, "at": None, "job": job(3)}]
    for name, lines in (("push-a.jobs", first), ("push-b.jobs", second)):
        (directory / name).write_text("".join(json.dumps(line) + "\n" for line in lines))
    with (directory / "push-a.jobs").open("a") as torn:
        torn.write("[" * 100_000 + "\n")  # deeper than Python's parser goes
    client_for(server, reliable_push="disk", reliable_push_dir=str(directory))  # a successor
    wait_until(lambda: not list(directory.glob("*.jobs")), timeout=15,
               what="the dead process's files sent and deleted")
    assert sorted(q["jid"] for q in queued(server)) == [f"{n:024d}" for n in (1, 2, 3)]
    dead = server.client(decode_responses=True).zrange("dead", 0, -1)
    assert sorted(dead) == sorted(line["job"] for line in bad)


# The header of a buffer file left by a dead process on another host.
_DEAD_HEADER = {"wurk-push-buffer": 1, "host": "elsewhere", "pid": 1, "created": 1.0}


def _report(jid: str) -> str:
    return json.dumps({"class": "Report", "args": [], "queue": "default", "jid": jid})


def _write_dead_file(path: Path, *lines: dict[str, Any],
                     header: dict[str, Any] | None = None) -> None:
    """A dead process's buffer file: its header, then ``lines`` as written."""
    path.write_text("".join(json.dumps(line) + "\n"
                            for line in (header or _DEAD_HEADER, *lines)))


def _dead_file(path: Path, jids: list[str], header: dict[str, Any] | None = None) -> None:
    _write_dead_file(path, *({"+": jid, "t": 1.0, "at": None, "job": _report(jid)}
                             for jid in jids), header=header)


def test_a_buffer_file_that_cannot_be_opened_holds_up_no_other_file(
        server: Restartable, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An entry of the buffer directory named like a buffer file that cannot be read (a
    directory, made by hand or by another tool) raised IsADirectoryError out of every flush
    and every survey: the files after it were never sent, a successor's background flush
    failed for ever, ``wurk push-buffer flush`` and ``status`` crashed."""
    from wurk.client.buffer import survey

    directory = tmp_path / "buf"
    (directory / "push-a.jobs").mkdir(parents=True)
    _dead_file(directory / "push-b.jobs", ["b" * 24])
    config = config_for(server.url, reliable_push="disk", reliable_push_dir=str(directory))
    with caplog.at_level(logging.ERROR, logger="wurk"):
        pushed, left, _ = reliable.flush_directory(config, directory)
    assert (pushed, left) == (1, 0)
    assert [job["jid"] for job in queued(server)] == ["b" * 24]
    assert "push-a.jobs" in caplog.text
    assert [report.path.name for report in survey(directory)] == []
    _dead_file(directory / "push-c.jobs", ["c" * 24])
    client_for(server, reliable_push="disk", reliable_push_dir=str(directory))  # a successor
    wait_until(lambda: not (directory / "push-c.jobs").exists(), timeout=10,
               what="the file after the unreadable one sent")
    assert [job["jid"] for job in queued(server)] == ["b" * 24, "c" * 24]


def test_a_flush_sweeps_a_file_a_killed_process_left_half_made(
        server: Restartable, tmp_path: Path) -> None:
    """``wurk push-buffer flush`` (and a successor's background look for orphans) deletes a
    ``.making`` file no process holds past ``UNFINISHED_AFTER``: one a process killed between
    making its buffer file and naming it left behind, no job in it."""
    from wurk.client.buffer import UNFINISHED_AFTER

    directory = tmp_path / "buf"
    directory.mkdir()
    left = directory / "push-h-1-aa.making"
    left.write_text("")
    old = time.time() - UNFINISHED_AFTER - 5
    os.utime(left, (old, old))
    _dead_file(directory / "push-b.jobs", ["b" * 24])
    config = config_for(server.url, reliable_push="disk", reliable_push_dir=str(directory))
    assert reliable.flush_directory(config, directory)[0] == 1
    assert list(directory.iterdir()) == []
    left.write_text("")
    os.utime(left, (old, old))
    client_for(server, reliable_push="disk", reliable_push_dir=str(directory))  # a successor
    wait_until(lambda: not left.exists(), timeout=10, what="the successor's sweep")


def test_a_buffer_file_of_another_version_is_left_whole_with_an_error(
        server: Restartable, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A file whose header names a format this wurk does not write (a newer wurk's, kept
    across a downgrade) was read as this version's: the lines it did not know were skipped
    with a warning and the file deleted once what it did know was sent — the rest of its
    jobs lost. It is now left as it is, with an error naming the file and the version, and
    the other files are sent."""
    directory = tmp_path / "buf"
    directory.mkdir()
    newer = directory / "push-a.jobs"
    newer.write_text(json.dumps({"wurk-push-buffer": 2, "pid": 1}) + "\n" +
                     json.dumps({"keep": "a" * 24, "payload": "{}"}) + "\n")
    before = newer.read_bytes()
    _dead_file(directory / "push-b.jobs", ["b" * 24])
    config = config_for(server.url, reliable_push="disk", reliable_push_dir=str(directory))
    with caplog.at_level(logging.ERROR, logger="wurk"):
        pushed, _, held = reliable.flush_directory(config, directory)
    assert (pushed, held) == (1, 0)
    assert newer.read_bytes() == before
    assert "push-a.jobs" in caplog.text and "version 2" in caplog.text
    assert [job["jid"] for job in queued(server)] == ["b" * 24]
    # `wurk push-buffer status` says what it is, and counts none of its lines as jobs (read
    # as this version's, it said "0 jobs": a file to delete, to whoever believed it)
    from click.testing import CliRunner

    from wurk.cli import main
    from wurk.client.buffer import survey

    (report,) = survey(directory)
    assert report.foreign == "push buffer format version '2'" and report.pending == 0
    said = CliRunner().invoke(main, ["push-buffer", "status", str(directory)])
    assert said.exit_code == 0, said.output
    assert "format version '2', not read by this wurk: left as it is" in said.output
    row = next(line for line in said.output.splitlines() if line.startswith("push-a.jobs "))
    assert " ? " in row


def test_a_sent_record_appended_after_a_torn_last_line_is_not_lost(
        server: Restartable, tmp_path: Path) -> None:
    """A process killed mid-write leaves its file's last line torn (no newline). The
    claimer's "sent" record was appended right after that fragment, so the two read back as
    one unreadable line: once the claimer dropped the jid's record in Redis (the push
    landed), the next claimer of the still-unfinished file (Redis lost after the first
    batch) pushed the job a second time."""
    directory = tmp_path / "buf"
    directory.mkdir()
    path = directory / "push-a.jobs"
    first, second = "a" * 24, "b" * 24
    _dead_file(path, [first, second])
    with path.open("a") as torn:
        torn.write('{"+": "cccccccccccc')  # killed mid-write: before its fsync and its jid
    config = config_for(server.url, reliable_push="disk", reliable_push_dir=str(directory))
    pool = config.pool("client")
    # A claimer sends the first job, records it in the file, then loses Redis: it lets the
    # file go with the second job still in it, and drops the first's record once Redis is
    # back (its next push carries the ZREM).
    orphan = Orphan.claim(path)
    assert orphan is not None and list(orphan.pending) == [first, second]
    (_, text, _, at, _), = orphan.take(1)
    assert idempotent.send(config, pool, [idempotent.from_text(config.keys, text, at)]
                           ).pushed == [first]
    orphan.done([first])
    orphan.release()
    server.client().zrem("wurk:push-sent", first)
    pushed, left, _ = reliable.flush_directory(config, directory)  # the next claimer
    assert (pushed, left) == (1, 0)
    assert [job["jid"] for job in queued(server)] == [first, second]  # each once
    assert not path.exists()


def test_a_line_no_push_can_send_holds_up_no_file_while_the_dead_set_is_of_another_type(
        server: Restartable, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A dead process's line that is no job goes to the dead set; a dead set key of another
    type (written by hand, the key shared) raised WRONGTYPE out of the flush: the file's
    other jobs and every file after it never went, at every try, for good. As with a kept
    job Redis refuses for good, the line is logged with its text and dropped."""
    directory = tmp_path / "buf"
    directory.mkdir()
    _write_dead_file(directory / "push-a.jobs",
                     {"+": "a" * 24, "t": 1.0, "at": None, "job": "{not json"},
                     {"+": "g" * 24, "t": 1.0, "at": None, "job": _report("g" * 24)})
    _dead_file(directory / "push-b.jobs", ["b" * 24])
    server.client().set("dead", "not a sorted set")
    config = config_for(server.url, reliable_push="disk", reliable_push_dir=str(directory))
    with caplog.at_level(logging.ERROR, logger="wurk"):
        pushed, left, _ = reliable.flush_directory(config, directory)
    assert (pushed, left) == (2, 0)
    assert sorted(job["jid"] for job in queued(server)) == ["b" * 24, "g" * 24]
    assert list(directory.iterdir()) == []
    assert "{not json" in caplog.text  # its text, logged: the only place it is kept


def test_a_dead_files_line_whose_jid_is_not_its_jobs_is_sent_once_and_the_file_deleted(
        server: Restartable, tmp_path: Path) -> None:
    """A kept line names its job's jid (``"+"``); a file written by hand or by another
    version may name another. What was sent was recorded in the file under the payload's
    jid, which matched no line: the job stayed pending, so the flush took it again at once,
    for ever — a successor's flush thread and ``wurk push-buffer flush`` spun on it, no
    file after it was sent, and a flush once its record was dropped pushed it again."""
    directory = tmp_path / "buf"
    directory.mkdir()
    _write_dead_file(directory / "push-a.jobs",
                     {"+": "k" * 24, "t": 1.0, "at": None, "job": _report("j" * 24)})
    config = config_for(server.url, reliable_push="disk", reliable_push_dir=str(directory))
    said: list[tuple[int, int, int]] = []
    flush = threading.Thread(target=lambda: said.append(
        reliable.flush_directory(config, directory)), daemon=True)
    flush.start()
    flush.join(10)
    assert not flush.is_alive(), "the flush never ended"
    assert said[0][:2] == (1, 0)
    assert list(directory.iterdir()) == []
    assert reliable.flush_directory(config, directory)[:2] == (0, 0)
    assert [q["jid"] for q in queued(server)] == ["j" * 24]


@pytest.mark.parametrize("at", ["tomorrow", [1], {"t": 1}, True])
def test_a_dead_files_line_whose_at_is_no_number_goes_to_the_dead_set_not_the_queue(
        server: Restartable, tmp_path: Path, at: Any) -> None:
    """A kept line's ``at`` is an epoch time or null (run now); anything else, written by
    hand or by another version, is no time the job was scheduled for: it dies as a job no
    push can send does, rather than being pushed to run at once."""
    directory = tmp_path / "buf"
    directory.mkdir()
    _write_dead_file(directory / "push-a.jobs",
                     {"+": "j" * 24, "t": 1.0, "at": at, "job": _report("j" * 24)})
    config = config_for(server.url, reliable_push="disk", reliable_push_dir=str(directory))
    reliable.flush_directory(config, directory)
    client = server.client()
    assert queued(server) == [] and client.zcard("schedule") == 0
    assert [json.loads(entry)["jid"] for entry in client.zrange("dead", 0, -1)] == ["j" * 24]
    assert list(directory.iterdir()) == []



def test_a_job_kept_for_another_shard_is_sent_to_that_shard(
        server: Restartable, tmp_path: Path) -> None:
    """With ``shards`` a push routed to shard ``eu`` is written by the process's one reliable
    writer. Kept while ``eu`` could not be reached, it was sent by the buffer's flush into the
    configuration's own Redis (the default shard), where no worker of ``eu`` reads it — and a
    push to ``eu`` sent the default shard's kept jobs into ``eu``. Each kept job goes to the
    shard it was pushed to, from memory and from a dead process's file alike."""
    eu = Restartable(tmp_path / "eu")
    try:
        for kind in ("memory", "disk"):
            directory = tmp_path / f"buf-{kind}"
            config = config_for(server.url, reliable_push=kind,
                                reliable_push_dir=str(directory), shards={"eu": eu.url})
            client = default_client(config)
            kept = writer(client)
            eu.stop()
            to_eu = client.push({"class": "Report", "args": [1], "shard": "eu"})
            assert len(kept.buffer) == 1
            # A push to the default shard: eu's kept job is not sent there, and does not
            # hold it up while eu is down.
            here = client.push({"class": "Report", "args": [2]})
            wait_until(lambda: [job["jid"] for job in queued(server)] == [here],  # noqa: B023
                       timeout=10, what="the default shard's push, eu down")
            if kind == "disk":  # the process dies: its file, and the job, are left
                kept.flusher.stop()
                kept.buffer.close()
                eu.start()
                assert reliable.flush_directory(config, directory)[:2] == (1, 0)
            else:
                eu.start()
                wait_until(lambda: len(kept.buffer) == 0, timeout=15,  # noqa: B023
                           what="the background flush")
            assert [job["jid"] for job in queued(server)] == [here]
            assert [json.loads(raw)["jid"] for raw in eu.client().lrange("queue:default", 0, -1)
                    ] == [to_eu]
            server.client().flushall()
            eu.client().flushall()
            kept.close()
    finally:
        eu.stop()


def test_a_dead_processes_file_of_a_shard_this_configuration_lacks_is_left_with_an_error(
        server: Restartable, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A line kept for a shard the flushing process's configuration does not name stays in
    the file (sent by a process that names it), with an error; the file's other jobs go."""
    directory = tmp_path / "buf"
    directory.mkdir()
    mine, theirs = "1" * 24, "2" * 24
    left = directory / "push-dead.jobs"
    _write_dead_file(left, {"+": mine, "t": 1.0, "at": None, "job": _report(mine)},
                     {"+": theirs, "t": 1.0, "at": None, "job": _report(theirs), "s": "asia"})
    config = config_for(server.url, reliable_push="disk", reliable_push_dir=str(directory))
    with caplog.at_level(logging.ERROR, logger="wurk"):
        reliable.flush_directory(config, directory)
    assert [job["jid"] for job in queued(server)] == [mine]
    assert "1 job(s) kept for shard 'asia', which this configuration does not name" \
        in caplog.text
    (orphan,) = [Orphan.claim(left)]
    assert orphan is not None and list(orphan.pending) == [theirs]
    orphan.release()


def test_a_swarm_child_ending_sends_what_its_memory_buffer_keeps(
        server: Restartable, monkeypatch: pytest.MonkeyPatch) -> None:
    """A swarm child ends with ``os._exit``, which skips ``atexit``: the writer's last try
    to send its kept jobs never ran, and a memory buffer's jobs were lost without a word at
    every stop, recycle or rolling restart, though Redis answered. The child runs wurk's
    own exit hooks before it exits."""
    from wurk.swarm import child as swarm_child
    from wurk.swarm.child import ChildSpec, NoticePipe

    client = client_for(server)
    job = idempotent.sendable(client.config.keys,
                              client.normalize({"class": "Report", "args": [1]}), None)
    notices = NoticePipe()
    pid = os.fork()
    if pid == 0:  # the child: one job kept (Redis was down), then its life ends
        try:
            monkeypatch.setattr(swarm_child._Child, "run", lambda self: 0)
            kept = writer(client)  # the child's own, after the fork
            kept.buffer.keep([Entry(job, time.time())])  # the flush not woken yet
            swarm_child.run_child(client.config, ChildSpec(0, os.getppid(), notices))
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    notices.close()
    assert os.waitstatus_to_exitcode(status) == 0
    assert [q["jid"] for q in queued(server)] == [job.jid]


def _died(kept: reliable.ReliableWriter) -> None:
    """The writer's process dies: its file, and the jobs in it, are left unlocked."""
    kept.flusher.stop()
    kept.buffer.close()
    kept._closed = True
    reliable._writers.discard(kept)


def _queue_of(config: wurk.Config) -> list[str]:
    """The jids in ``config``'s queue ``default``, oldest first."""
    raw = config.pool("client").run(lambda r: r.lrange(config.keys.queue("default"), 0, -1))
    return [json.loads(entry)["jid"] for entry in reversed(raw)]


@pytest.mark.parametrize("other", ["server", "db", "key_prefix"])
def test_a_buffer_directory_shared_by_two_applications_sends_each_its_own_jobs(
        server: Restartable, tmp_path: Path, other: str) -> None:
    """Two applications (another Redis server, another db of the same one, or another
    key_prefix) using one ``reliable_push_dir``: a dead process's file of one was adopted
    by the other, which pushed its jobs into its own Redis, where no worker of the first
    reads them. A file records the Redis (and key prefix) it pushes to; only a process
    pushing there sends its jobs."""
    directory = tmp_path / "shared"
    elsewhere = Restartable(tmp_path / "elsewhere")
    try:
        mine = config_for(server.url, reliable_push="disk", reliable_push_dir=str(directory))
        theirs = {
            "server": lambda: config_for(elsewhere.url, reliable_push="disk",
                                         reliable_push_dir=str(directory)),
            "db": lambda: config_for(server.url.rsplit("/", 1)[0] + "/1", reliable_push="disk",
                                     reliable_push_dir=str(directory)),
            "key_prefix": lambda: config_for(server.url, reliable_push="disk",
                                             reliable_push_dir=str(directory),
                                             key_prefix="other"),
        }[other]()
        client = default_client(mine)
        server.stop()
        jids = [client.push({"class": "Report", "args": [n]}) for n in range(2)]
        _died(writer(client))
        server.start()
        (left,) = directory.glob("*.jobs")
        # The other application's `wurk push-buffer flush`, and its process's own look.
        assert reliable.flush_directory(theirs, directory)[:2] == (0, 0)
        other_writer = writer(default_client(theirs))
        other_writer.flusher.tick()
        assert _queue_of(theirs) == [] and _queue_of(mine) == []
        assert left.exists()
        assert not other_writer.flusher.orphans_left  # nothing of its own: no busy loop
        # A process of the first application sends them, to its own Redis.
        successor = writer(default_client(config_for(
            server.url, reliable_push="disk", reliable_push_dir=str(directory))))
        # counted once the file is let go
        wait_until(lambda: successor.sent == 2, timeout=15, what="the successor's adoption")
        assert not left.exists()
        assert _queue_of(mine) == jids
        assert _queue_of(theirs) == []
    finally:
        elsewhere.stop()


def test_a_dead_processes_jobs_go_to_the_redis_they_were_pushed_to_whatever_its_shard_name(
        server: Restartable, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Two processes of one application on different Redis URLs: one pushes to ``server``
    with a shard ``eu``, the other has ``eu``'s Redis as its own. The second adopting the
    first's file pushed the first's default-shard jobs into ``eu``'s Redis (its own
    default). Each job goes to the Redis it was pushed to: the second sends the ``eu`` job
    (its own Redis) and leaves the other for a process pushing to ``server``."""
    eu = Restartable(tmp_path / "eu")
    directory = tmp_path / "shared"
    try:
        first = config_for(server.url, reliable_push="disk", reliable_push_dir=str(directory),
                           shards={"eu": eu.url})
        client = default_client(first)
        server.stop()
        eu.stop()
        here = client.push({"class": "Report", "args": [1]})
        to_eu = client.push({"class": "Report", "args": [2], "shard": "eu"})
        _died(writer(client))
        server.start()
        eu.start()
        (left,) = directory.glob("*.jobs")
        second = config_for(eu.url, reliable_push="disk", reliable_push_dir=str(directory))
        with caplog.at_level(logging.INFO, logger="wurk"):
            assert reliable.flush_directory(second, directory)[:2] == (1, 0)
        assert _queue_of(second) == [to_eu]
        assert queued(server) == []
        assert left.exists() and left.name in caplog.text
        third = config_for(server.url, reliable_push="disk", reliable_push_dir=str(directory))
        assert reliable.flush_directory(third, directory)[:2] == (1, 0)
        assert [job["jid"] for job in queued(server)] == [here]
        assert _queue_of(second) == [to_eu]
        assert not left.exists()
    finally:
        eu.stop()


def test_a_buffer_file_of_before_files_named_their_redis_is_sent_as_before_with_a_warning(
        server: Restartable, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A file an older wurk left names no Redis: it is sent by whoever finds it, each job to
    the shard of its name, as before — with a warning naming the file."""
    directory = tmp_path / "buf"
    directory.mkdir()
    _dead_file(directory / "push-old.jobs", ["o" * 24])
    config = config_for(server.url, reliable_push="disk", reliable_push_dir=str(directory))
    with caplog.at_level(logging.WARNING, logger="wurk"):
        assert reliable.flush_directory(config, directory)[:2] == (1, 0)
    assert [job["jid"] for job in queued(server)] == ["o" * 24]
    assert "push-old.jobs" in caplog.text and "names no Redis" in caplog.text


@pytest.mark.parametrize("content", ["no header", "bad lines", "bad targets"])
def test_a_malformed_buffer_file_is_moved_aside_with_a_warning_and_holds_up_no_other(
        server: Restartable, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        content: str) -> None:
    """A file no wurk wrote as it is (no header, lines that cannot be read, a header whose
    record of its Redis is no such record) is not sent blindly into this Redis, nor deleted
    with what could not be read: it is moved aside (``.bad``) with a warning naming it, and
    the other files are sent."""
    directory = tmp_path / "buf"
    directory.mkdir()
    bad = directory / "push-bad.jobs"
    if content == "no header":
        bad.write_text(json.dumps({"+": "x" * 24, "t": 1.0, "at": None,
                                   "job": _report("x" * 24)}) + "\n")
    elif content == "bad lines":
        _write_dead_file(bad, {"+": "y" * 24, "t": 1.0, "at": None, "job": _report("y" * 24)})
        with bad.open("a") as garbage:
            garbage.write("not a line of ours\n")
    else:
        _dead_file(bad, ["z" * 24], header={**_DEAD_HEADER, "targets": ["who", "knows"]})
    before = bad.read_bytes()
    _dead_file(directory / "push-good.jobs", ["g" * 24])
    config = config_for(server.url, reliable_push="disk", reliable_push_dir=str(directory))
    with caplog.at_level(logging.WARNING, logger="wurk"):
        pushed, left, _ = reliable.flush_directory(config, directory)
    sent = ["y" * 24] if content == "bad lines" else []  # its readable job is sent
    assert (pushed, left) == (1 + len(sent), 0)
    assert sorted(job["jid"] for job in queued(server)) == sorted(["g" * 24, *sent])
    aside = directory / "push-bad.jobs.bad"
    assert not bad.exists() and aside.exists()
    assert aside.read_bytes().startswith(before)
    assert "push-bad.jobs" in caplog.text and str(aside) in caplog.text
    assert sorted(p.name for p in directory.iterdir()) == ["push-bad.jobs.bad"]
