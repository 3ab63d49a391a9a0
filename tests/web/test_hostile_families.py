"""Every key family ``wurk.keys`` names, made hostile, read by every page, API route and CLI
listing: each answers 200 or 404 (a listing exits 0 with escaped output), in bounded time
and memory.

The families are listed here by the ``Keys`` member that names them, and a test compares
that list with ``Keys`` itself: a key added to ``keys.py`` fails the suite until it is
either covered here or listed as read by no page, with the reason. Each hostile kind is
written into every family at once — a value of the wrong Redis type, JSON nested past any
limit, numbers no float holds, NaN and infinities, 10 MB strings, control characters and
markup, and collections of more entries than any read takes — over a world that has one of
everything (a queue, the job sets, a process, a batch, a periodic loop, a limiter, metrics,
history, a unique lock) so every page has something to read.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import gzip
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import psutil
import pytest
import redis
from starlette.testclient import TestClient

import wurk
from tests.web.conftest import browse
from tests.web.hostile import MARK, check, next_event, strict_json
from wurk.keys import BATCH_PARTS, WORKFLOW_PARTS, Keys
from wurk.web import create_app

BID = "hostilebid0001"
LID = "0123456789abcdef"
IDENTITY = "host:1:abababababab"
LIMITER = "hostile-limiter"
JOB = "Hostile::Job"
TAG = "t1"
DONE = "9" * 24  # a job that succeeded and kept its result: only the Results tab shows it
WID = "wf-hostile0001"
PARTED = "parted"  # a partitioned queue (wurk.partitions) and one of its partitions
PART = "p1"
PROFILE = f"tok-{'f' * 24}"  # a profile's member, and (under the prefix) its hash
# Entries in each collection of the "many" kind: twice the read cap (wurk.stored.FIELD_CAP),
# so every capped read is exercised; a longer hunt: WURK_HOSTILE_MANY=1000000.
MANY = int(os.environ.get("WURK_HOSTILE_MANY", "20000"))
BIG = "x" * (10 * 1024 * 1024)
CONTROL = "\x1b[2J\x00\r\n\u202e" + MARK
DEEP = "[" * 100_000
# What one request may cost, however hostile the data: a loaded 2-core machine never misses
# these (a page took 5.8 s once in a run at load 10; alone under 2), and an unbounded read
# of the data below misses them by far. (Growth alone: 66 MB
# for the 10 MB family; 301 MB once in a test worker of a loaded full run, its heap
# fragmented by the tests before: the bound is 500, a reading of every 10 MB value costs GBs.)
REQUEST_SECONDS = 10.0
GROWTH_MB = 500


@dataclass(frozen=True)
class Family:
    member: str  # the ``Keys`` member that names it
    key: Callable[[Keys, dt.datetime], str]
    kind: str  # its Redis type: string, hash, list, set, zset


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


FAMILIES = [
    Family("queues", lambda k, t: k.queues, "set"),
    Family("queue", lambda k, t: k.queue("default"), "list"),
    Family("schedule", lambda k, t: k.schedule, "zset"),
    Family("retry", lambda k, t: k.retry, "zset"),
    Family("dead", lambda k, t: k.dead, "zset"),
    Family("processes", lambda k, t: k.processes, "set"),
    Family("process", lambda k, t: k.process(IDENTITY), "hash"),
    Family("work", lambda k, t: k.work(IDENTITY), "hash"),
    Family("workers", lambda k, t: k.workers(IDENTITY), "hash"),
    Family("stat_processed", lambda k, t: k.stat_processed, "string"),
    Family("stat_failed", lambda k, t: k.stat_failed, "string"),
    Family("stat_processed_day", lambda k, t: k.stat_processed_day(t.date()), "string"),
    Family("stat_failed_day", lambda k, t: k.stat_failed_day(t.date()), "string"),
    Family("expired", lambda k, t: k.expired, "string"),
    Family("stat_recovered", lambda k, t: k.stat_recovered, "string"),
    Family("stat_poisoned", lambda k, t: k.stat_poisoned, "string"),
    Family("paused", lambda k, t: k.paused, "set"),
    Family("leader", lambda k, t: k.leader, "string"),
    Family("leader_token", lambda k, t: k.leader_token, "string"),
    Family("periodic", lambda k, t: k.periodic, "set"),
    Family("loop", lambda k, t: k.loop(LID), "hash"),
    Family("loop_history", lambda k, t: k.loop_history(LID), "list"),
    Family("history", lambda k, t: k.history, "zset"),
    Family("metrics_minute", lambda k, t: k.metrics_minute(t), "hash"),
    Family("metrics_ten_minutes", lambda k, t: k.metrics_ten_minutes(t), "hash"),
    Family("histogram", lambda k, t: k.histogram(JOB, t), "string"),
    Family("deploy_marks", lambda k, t: k.deploy_marks(t.date()), "hash"),
    Family("limiter_list", lambda k, t: k.limiter_list, "set"),
    Family("limiter", lambda k, t: k.limiter(LIMITER), "hash"),
    Family("limiter_stats", lambda k, t: k.limiter_stats(LIMITER), "hash"),
    Family("limiter_concurrent", lambda k, t: k.limiter_concurrent(LIMITER), "zset"),
    Family("limiter_window", lambda k, t: k.limiter_window(LIMITER), "zset"),
    Family("limiter_leaky", lambda k, t: k.limiter_leaky(LIMITER), "hash"),
    Family("limiter_points", lambda k, t: k.limiter_points(LIMITER), "hash"),
    Family("batches", lambda k, t: k.batches, "zset"),
    Family("batch_died", lambda k, t: k.batch_died, "set"),
    Family("batch", lambda k, t: k.batch(BID), "hash"),
    *(Family(f"batch:{part}", lambda k, t, part=part: k.batch(BID, part), "set")
      for part in BATCH_PARTS),
    Family("batch_tag", lambda k, t: k.batch_tag(TAG), "set"),
    # The running job's (Busy) and the retry's (Retries): both pages read their state.
    Family("iteration", lambda k, t: k.iteration("e" * 24), "hash"),
    Family("iteration:retry", lambda k, t: k.iteration("c" * 24), "hash"),
    # The results of the retrying and the dead job: each entry's own page reads its jid's.
    Family("result", lambda k, t: k.result("c" * 24), "string"),
    Family("result:dead", lambda k, t: k.result("d" * 24), "string"),
    # A finished job's, read by the Results tab by its jid only.
    Family("result:done", lambda k, t: k.result(DONE), "string"),
    Family("profiles", lambda k, t: k.profiles, "zset"),
    Family("profile", lambda k, t: k.profile(PROFILE), "hash"),
    Family("push_buffers", lambda k, t: k.push_buffers, "zset"),
    Family("push_buffer", lambda k, t: k.push_buffer(IDENTITY), "string"),
    Family("stat_recovered_push", lambda k, t: k.stat_recovered_push, "string"),
    # The Workflows tab: the index, and one workflow's record and every part of it.
    Family("workflows", lambda k, t: k.workflows, "zset"),
    Family("workflow", lambda k, t: k.workflow(WID), "hash"),
    *(Family(f"workflow:{part}", lambda k, t, part=part: k.workflow(WID, part), "hash")
      for part in WORKFLOW_PARTS),
    Family("partition", lambda k, t: k.partition(PARTED, PART), "list"),
    Family("partition_ring", lambda k, t: k.partition_ring(PARTED), "zset"),
    Family("partition_running", lambda k, t: k.partition_running(PARTED), "hash"),
]

# Members of ``Keys`` that name no key a page, API route or CLI listing reads, and why.
NOT_READ = {
    "prefix": "a prefix, not a key",
    "queue_prefix": "a prefix, not a key", "queue_name": "parses a name, names no key",
    "private": "in-flight lists: the worker and the reaper read them, never a page",
    "private_pro": "as private", "private_pattern": "a SCAN pattern of private lists",
    "super_queues": "Sidekiq Pro's bookkeeping, written for Pro processes only",
    "super_processes": "as super_queues",
    "claims_of": "the scheduler's own claims", "schedule_claims": "the scheduler's own",
    "retry_claims": "the scheduler's own", "reaper_lock": "the reaper's own lock",
    "process_cleanup": "a lock the API writes, never reads back",
    "clearing": "a clear's own key: written and read by the one call that made it",
    "signals": "written by actions, read by the worker", "history_lock": "the sampler's own",
    "metrics_minute_v7": "written for Sidekiq 7 dashboards, read by none of ours",
    "histogram_v7": "as metrics_minute_v7", "deploy_lock": "a lock, never read back",
    "task_result": "read by django.tasks, no page", "loop_prefix": "a prefix",
    "loop_history_prefix": "a prefix", "poison_prefix": "a prefix",
    "poison_counter": "the reaper's own counters",
    "limiter_wakeups": "tokens the limiter's waiters pop, no page reads them",
    "limiter_bucket_prefix": "a prefix; the bucket's counters are read as limiter state",
    "limiter_bucket": "as limiter_bucket_prefix: one interval's counter of a bucket limiter",
    "private_prefix": "as private: a prefix of one queue's in-flight lists",
    "private_pro_prefix": "as private_pro: a prefix", "result_channel_prefix": "a prefix",
    "unique": "a lock whose value no page reads (only released by actions)",
    "batch_keys": "lists batch keys (covered one by one above)",
    "batch_tag_prefix": "a prefix",
    "push_sent": "the recording pushes' own record of jids sent, read by their script only",
    "cancels": "jids wurk.cancel leaves for a process: its CancelPoller pops them, no page",
    "stat_cancelled": "read by the Prometheus exposition only (wurk_jobs_cancelled_total)",
    "workflow_keys": "the list of a workflow's keys (for its cancel), not a key of its own",
    "result_channel": "a pub/sub channel, not a key: waiters subscribe to it",
    "batch_results": "a batch's index of jids with a result: BatchStatus.results(), no page",
    "partition_prefix": "a prefix",
    "partition_holders": "in-flight lists of a partitioned queue: the recount reads them",
    "partition_rates": "per-second counts: the fetch script reads them, no page",
    "cluster_queues": "read on a Redis Cluster only (the Shards tab's keyspaces); its hostile "
                      "forms: tests/integration/test_cluster.py",
    "loop_pending": "read on a Redis Cluster only, by the leader's periodic poller (no page); "
                    "its hostile forms: tests/integration/test_cluster_periodic.py",
    "periodic_run": "a run's NX mark on a Redis Cluster, read by the push script only",
}


def test_every_key_family_is_covered_or_said_not_to_be_read() -> None:
    members = {name for name in dir(Keys) if not name.startswith("_")}
    covered = {family.member.split(":")[0] for family in FAMILIES}
    assert members == covered | set(NOT_READ), (
        f"not covered: {sorted(members - covered - set(NOT_READ))}; "
        f"gone from keys.py: {sorted((covered | set(NOT_READ)) - members)}")


# -- one of everything ---------------------------------------------------------------------------
def payload(jid: str, **fields: Any) -> str:
    return json.dumps({"class": JOB, "args": [1, MARK], "queue": "default", "jid": jid,
                       "created_at": 1_700_000_000_000, "retry": True, **fields})


def build_world(r: redis.Redis, at: dt.datetime) -> None:
    """Sensible data in every family, so every page has something to read."""
    k = Keys()
    r.flushdb()
    r.sadd(k.queues, "default")
    r.lpush(k.queue("default"), payload("a" * 24, bid=BID))
    stamp = time.time()
    r.zadd(k.schedule, {payload("b" * 24): stamp + 60})
    r.zadd(k.retry, {payload("c" * 24, error_class="E", error_message="m", bid=BID,
                              failed_at=1_700_000_000_000, retry_count=1): stamp + 60})
    r.zadd(k.dead, {payload("d" * 24, error_class="E", error_message="m", bid=BID): stamp})
    r.sadd(k.processes, IDENTITY)
    info = {"hostname": "host", "pid": 1, "tag": "t", "started_at": stamp, "concurrency": 5,
            "queues": ["default"], "labels": [], "identity": IDENTITY, "version": "8"}
    r.hset(k.process(IDENTITY), mapping={"info": json.dumps(info), "busy": 1, "beat": stamp,
                                         "quiet": "false", "rss": 100, "rtt_us": 5})
    work = json.dumps({"queue": "default", "payload": payload("e" * 24), "run_at": int(stamp)})
    r.hset(k.work(IDENTITY), "t1", work)
    r.hset(k.workers(IDENTITY), "t1", work)
    for key in (k.stat_processed, k.stat_failed, k.stat_processed_day(at.date()),
                k.stat_failed_day(at.date()), k.expired, k.stat_recovered, k.stat_poisoned):
        r.set(key, 5)
    r.set(k.leader, IDENTITY)
    r.set(k.leader_token, 3)
    r.sadd(k.periodic, LID)
    r.hset(k.loop(LID), mapping={"schedule": "* * * * *", "klass": JOB, "options": "{}",
                                 "tz": "", "paused": "0", "lf": int(stamp), "nf": int(stamp)})
    r.lpush(k.loop_history(LID), json.dumps([int(stamp), "f" * 24]))
    sample = {"t": stamp, "processed": 5, "failed": 1, "enqueued": 1, "busy": 0}
    r.zadd(k.history, {json.dumps(sample): stamp})
    for key in (k.metrics_minute(at), k.metrics_ten_minutes(at)):
        r.hset(key, mapping={f"{JOB}|ms": 10, f"{JOB}|p": 2, f"{JOB}|f": 1, f"{JOB}|s": 1})
    r.execute_command("BITFIELD", k.histogram(JOB, at), "INCRBY", "u16", "#3", 1)
    r.hset(k.deploy_marks(at.date()), at.strftime("%H:%M"), "v1")
    r.sadd(k.limiter_list, LIMITER)
    r.hset(k.limiter(LIMITER), mapping={"type": "concurrent",
                                        "options": json.dumps({"size": 5})})
    r.hset(k.limiter_stats(LIMITER), mapping={"held": 1, "overrated": 0})
    r.zadd(k.limiter_concurrent(LIMITER), {"token": int(stamp * 1000) + 60_000})
    r.zadd(k.limiter_window(LIMITER), {"w": int(stamp * 1000)})
    r.hset(k.limiter_leaky(LIMITER), mapping={"level": 1, "ts": int(stamp * 1000)})
    r.hset(k.limiter_points(LIMITER), mapping={"points": 1, "ts": int(stamp * 1000)})
    r.zadd(k.batches, {BID: stamp})
    r.sadd(k.batch_died, BID)
    r.hset(k.batch(BID), mapping={"total": 3, "pending": 2, "failures": 1,
                                  "created_at": stamp, "description": MARK,
                                  "callbacks": "[]", "tags": json.dumps([TAG])})
    r.sadd(k.batch(BID, "jids"), "a" * 24, "c" * 24)
    r.sadd(k.batch(BID, "failed"), "c" * 24)
    r.sadd(k.batch(BID, "died"), "d" * 24)
    for part in ("kids", "pkids", "notify", "cbsucc"):
        r.sadd(k.batch(BID, part), "x")
    r.sadd(k.batch(BID, "tags"), TAG)
    r.sadd(k.batch_tag(TAG), BID)
    data = gzip.compress(json.dumps({  # a profile whose only frame is markup
        "shared": {"frames": [{"name": MARK, "file": MARK, "line": 1}]},
        "profiles": [{"type": "evented", "unit": "seconds", "events": [
            {"type": "O", "at": 0, "frame": 0}, {"type": "C", "at": 0.5, "frame": 0}]}]}).encode())
    r.zadd(k.profiles, {PROFILE: stamp + 86_400})
    r.hset(k.profile(PROFILE), mapping={
        "started_at": int(stamp), "token": MARK, "type": JOB, "jid": "f" * 24,
        "filename": MARK, "elapsed": 0.5, "data": data, "size": len(data)})
    for jid in ("e" * 24, "c" * 24):  # an iterable job running, and one retrying
        r.hset(k.iteration(jid), mapping={"ex": 2, "c": json.dumps([MARK, 7]), "rt": 1.5,
                                          "cancelled": int(stamp)})

    for jid in ("c" * 24, "d" * 24):  # the retrying job's last run, the dead one's final
        r.set(k.result(jid), json.dumps({
            "status": "failed", "error_class": MARK, "error_message": MARK,
            "retries_remain": jid == "c" * 24, "class": JOB, "finished_at": stamp}), ex=60)
    r.set(k.result(DONE), json.dumps({"status": "succeeded", "value": {MARK: [MARK]},
                                      "class": MARK, "started_at": stamp - 1,
                                      "finished_at": stamp}), ex=60)
    r.zadd(k.push_buffers, {IDENTITY: stamp})
    r.set(k.push_buffer(IDENTITY), json.dumps({
        "identity": IDENTITY, "hostname": "host", "pid": 1, "kind": "disk", "where": MARK,
        "buffered": 2, "oldest": stamp - 5, "sent": 3, "at": stamp}))
    r.set(k.stat_recovered_push, 3)
    r.zadd(k.workflows, {WID: stamp})  # a workflow: a step, its fan-out, a nested workflow
    r.hset(k.workflow(WID), mapping={"state": "running", "policy": "stop", "name": MARK,
                                     "total": 4, "pending": 2, "dead": 0, "created_at": stamp})
    r.hset(k.workflow(WID, "state"), mapping={"a": "succeeded", "a[0]": "queued", "b": "waiting",
                                              "s": "running", "s/c": "queued"})
    r.hset(k.workflow(WID, "then"), mapping={"a[*]": "b", "s": "b"})
    r.hset(k.workflow(WID, "subs"), "s", "stop s/c")
    r.hset(k.workflow(WID, "left"), "s", 1)
    for part in ("steps", "waiting", "jids", "values", "kids"):
        r.hset(k.workflow(WID, part), "a", MARK)
    r.sadd(k.queues, PARTED)
    r.lpush(k.partition(PARTED, PART), payload("g" * 24, queue=PARTED, partition=PART))
    r.zadd(k.partition_ring(PARTED), {PART: 0})
    r.hset(k.partition_running(PARTED), PART, 1)

# -- hostile kinds ---------------------------------------------------------------------------------
def write(r: redis.Redis, kind: str, key: str, values: list[str]) -> None:
    """``values`` stored in ``key`` as a ``kind``, replacing it; a hash's own fields (those
    the world gave it) each get one of the values too."""
    own = [field.decode() for field in r.hkeys(key)] if r.type(key) == b"hash" else []
    r.delete(key)
    if own and kind == "hash":
        r.hset(key, mapping={field: values[n % len(values)] for n, field in enumerate(own)})
    pipe = r.pipeline(transaction=False)
    for start in range(0, len(values), 10_000):
        chunk = values[start:start + 10_000]
        if kind == "string":
            pipe.set(key, chunk[-1])
        elif kind == "hash":
            pipe.hset(key, mapping={f"{n}|{v[:40]}": v for n, v in enumerate(chunk, start)})
        elif kind == "list":
            pipe.rpush(key, *chunk)
        elif kind == "set":
            pipe.sadd(key, *(f"{n}:{v}" if len(values) > 1 else v
                             for n, v in enumerate(chunk, start)))
        else:
            pipe.zadd(key, {f"{n}:{v}" if len(values) > 1 else v: 1e308
                            for n, v in enumerate(chunk, start)})
    pipe.execute()


def wrong_type(r: redis.Redis, family: Family, key: str) -> None:
    r.delete(key)
    if family.kind == "string":
        r.hset(key, "wrong", "type")
    else:
        r.set(key, "a string where a " + family.kind + " should be")


def values_of(texts: list[str]) -> Callable[[redis.Redis, Family, str], None]:
    def apply(r: redis.Redis, family: Family, key: str) -> None:
        write(r, family.kind, key, texts)
    return apply


# ``write`` of one 10 MB value, done by Redis itself from a copy sent once: the same keys as
# ``values_of([BIG])`` writes, without sending 10 MB over the socket per field of every family.
COPY_BIG = """
local v = redis.call('GET', KEYS[2])
local own = {}
if redis.call('TYPE', KEYS[1]).ok == 'hash' then own = redis.call('HKEYS', KEYS[1]) end
redis.call('DEL', KEYS[1])
local kind = ARGV[1]
if kind == 'string' then redis.call('SET', KEYS[1], v)
elseif kind == 'hash' then
  for _, field in ipairs(own) do redis.call('HSET', KEYS[1], field, v) end
  redis.call('HSET', KEYS[1], '0|' .. string.sub(v, 1, 40), v)
elseif kind == 'list' then redis.call('RPUSH', KEYS[1], v)
elseif kind == 'set' then redis.call('SADD', KEYS[1], v)
else redis.call('ZADD', KEYS[1], '1e308', v) end
"""
BIG_SOURCE = "hostile-test:big"  # deleted once every family holds its copy


def big(r: redis.Redis, family: Family, key: str) -> None:
    if not r.exists(BIG_SOURCE):
        r.set(BIG_SOURCE, BIG)
    r.eval(COPY_BIG, 2, key, BIG_SOURCE, family.kind)


def many(r: redis.Redis, family: Family, key: str) -> None:
    if family.kind == "string":
        r.set(key, "9" * 4300)
        return
    write(r, family.kind, key, [f"{MARK}{n}" for n in range(MANY)])


HOSTILE: dict[str, Callable[[redis.Redis, Family, str], None]] = {
    "wrong type": wrong_type,
    "deep JSON": values_of([DEEP, '{"a":' * 5000 + "1" + "}" * 5000]),
    "huge numbers": values_of(["9" * 4300, "1e400", "-1e400", "1" + "0" * 400]),
    "non-finite": values_of(["nan", "inf", "-inf", "NaN"]),
    "10 MB": big,
    "control characters": values_of([CONTROL, json.dumps(CONTROL)]),
    # str.isdigit() says yes, int() says no: a check by isdigit alone let them through.
    "unicode digits": values_of(["\u00b2", "\u00b9\u00b2\u00b3", "\u2460", "\u0663"]),
    "many entries": many,
}


# -- reading everything -------------------------------------------------------------------------
ROUTES = ["/", "/locale", "/busy", "/queues", "/queues/default", "/queue?name=default",
          f"/queues/{PARTED}", f"/api/queues/{PARTED}", "/retries", "/scheduled", "/morgue",
          "/stats", "/stats/queues", "/api", "/api/dashboard", "/api/busy",
          "/api/queues", "/api/queues/default", "/api/retries", "/api/scheduled",
          "/api/morgue", "/api/openapi.json", "/api/limits", "/limits/", "/limits/?page=9",
          "/metrics/", "/metrics/?period=72h", "/metrics/?sort=name",
          f"/metrics/{quote(JOB)}", "/api/metrics", "/api/metrics?period=72h",
          f"/api/metrics/{quote(JOB)}", "/history/", "/history/?period=72h",
          "/periodic/", f"/periodic/{LID}", f"/periodic/-/loop?lid={LID}", "/api/periodic/",
          f"/api/periodic/{LID}",
          "/batches/", f"/batches/{BID}", f"/batches/{BID}.json", "/batches/?page=99",
          f"/batches/?tag={TAG}", "/batches/?page=10000000000000000000", "/dead-batches/",
          "/api/batches/", f"/api/batches/{BID}", "/profiles/", "/profiles/?page=99",
          "/profiles/?page=10000000000000000000", f"/profiles/view?key={quote(PROFILE)}",
          f"/profiles/data?key={quote(PROFILE)}", "/profiles/view?key=nope",
          "/results/", f"/results/{DONE}", f"/results/{'c' * 24}", f"/results/{'d' * 24}",
          "/results/nope", f"/api/results/{DONE}", "/workflows/", f"/workflows/{WID}",
          "/workflows/?page=10000000000000000000", "/workflows/wf-nothing",
          "/workflows/?page=%C2%B2", "/batches/?page=%C2%B2", "/dead-batches/?page=%C2%B2",
          "/api/workflows/?page=%C2%B2",
          "/api/workflows/", f"/api/workflows/{WID}",
          f"/api/results/{'c' * 24}", "/api/results/nope"]
# Each entry's own pages: read_everything visits them for the entries the lists give.
ENTRY_ROUTES = [f"{prefix}/{kind}/KEY" for prefix in ("", "/api")
                for kind in ("retries", "scheduled", "morgue", "dead")]
CLI = [["stats"], ["push-buffer", "status"], ["queues"], ["retries"], ["scheduled"],
       ["dead"], ["processes"], ["batches"], ["batches", "show", BID], ["batches", "dead"],
       ["periodic", "list"]]
UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f\u202e]")


def _trim() -> None:
    """Hand freed memory back to the system (glibc keeps it in per-thread arenas, by how many
    threads a long test process has seen): what is left is what the reads kept."""
    # Not glibc: the figure then includes the allocator's cache.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def read_everything(client: TestClient, capsys: pytest.CaptureFixture[str]) -> None:
    from wurk.cli import run

    process = psutil.Process()
    _trim()
    before = process.memory_info().rss
    for path in ROUTES:
        started = time.monotonic()
        response = client.get(path)
        check(path, response)
        assert time.monotonic() - started < REQUEST_SECONDS, path
    for kind in ("retries", "scheduled", "morgue"):
        listed = client.get(f"/api/{kind}")
        if listed.status_code == 200:
            for entry in listed.json()["entries"][:3]:
                key = quote(entry["key"], safe="")
                for page in (f"/{kind}/{key}", f"/api/{kind}/{key}"):
                    check(page, client.get(page))
                if kind == "morgue":
                    check("/dead", client.get(f"/dead/{key}", follow_redirects=True))
    strict_json(next_event(client))
    for command in CLI:
        for form in ([], ["--json"]):
            code = run([*command, *form])
            out = capsys.readouterr()
            gone = command[:2] == ["batches", "show"] and "no batch" in out.err  # its 404
            assert code == 0 or gone, (command, form, out.err[-500:])
            assert not UNPRINTABLE.search(out.out), (command, form)
            if form and not gone:
                strict_json(out.out)
    _trim()
    grown = (process.memory_info().rss - before) / 1e6
    assert grown < GROWTH_MB, f"the process grew {grown:.0f} MB"


@pytest.fixture
def config(redis_server: Any) -> Iterator[wurk.Config]:
    yield wurk.configure(redis_url=redis_server.url, partitions={PARTED: 2})


@pytest.fixture
def client(config: wurk.Config) -> Iterator[TestClient]:
    with browse(create_app(config), follow_redirects=False) as found:
        yield found


@pytest.mark.timeout(360)  # real time, 25-60 s here: more on a slower machine
@pytest.mark.parametrize("hostile", sorted(HOSTILE))
def test_every_family_made_hostile_is_read_without_an_error(
        hostile: str, client: TestClient, r: redis.Redis,
        capsys: pytest.CaptureFixture[str]) -> None:
    at = now()
    raw = redis.Redis.from_url(os.environ["REDIS_URL"])
    build_world(raw, at)
    keys = Keys()
    for family in FAMILIES:
        HOSTILE[hostile](raw, family, family.key(keys, at))
    raw.delete(BIG_SOURCE)
    read_everything(client, capsys)


def test_a_million_metric_fields_cost_the_metrics_pages_little(
        client: TestClient, r: redis.Redis) -> None:
    at = now()
    key = Keys().metrics_minute(at)
    pipe = r.pipeline(transaction=False)
    for start in range(0, 1_000_000, 20_000):
        pipe.hset(key, mapping={f"Job{n}|ms": n for n in range(start, start + 20_000)})
        if len(pipe) >= 5:
            pipe.execute()
    pipe.execute()
    assert r.hlen(key) == 1_000_000
    process = psutil.Process()
    for path in ("/metrics/", "/metrics/?period=72h", "/api/metrics"):
        before = process.memory_info().rss
        started = time.process_time()  # CPU, which a loaded machine does not swell
        response = client.get(path)
        took = time.process_time() - started
        grown = (process.memory_info().rss - before) / 1e6
        assert response.status_code == 200, path
        assert took < 2.0 and grown < 100, (path, took, grown)


def test_the_test_reaches_what_it_claims() -> None:
    """The hostile kinds are what the issue names, each kind reaches every family."""
    assert set(HOSTILE) == {"wrong type", "deep JSON", "huge numbers", "non-finite", "10 MB",
                            "control characters", "many entries", "unicode digits"}
    assert MANY > wurk.stored.FIELD_CAP
    kinds = {family.kind for family in FAMILIES}
    assert kinds == {"string", "hash", "list", "set", "zset"}
    assert os.environ.get("REDIS_URL")


def test_every_get_route_of_the_dashboard_is_read_above() -> None:
    """A page added later fails this until ``ROUTES`` reads it."""
    app = create_app(wurk.Config(redis_url="redis://127.0.0.1:1/0"))
    patterns: list[str] = []

    def walk(routes: Any, prefix: str) -> None:
        for route in routes:
            path = prefix + getattr(route, "path", "")
            inner = getattr(route, "routes", None) or getattr(
                getattr(route, "app", None), "routes", None)
            if inner:
                walk(inner, path)
            elif "GET" in (getattr(route, "methods", None) or ()):
                patterns.append(path)

    walk(app.routes, "")
    # a token, the stream (read by next_event), and Sidekiq's name of the Dead tab (a redirect)
    skipped = {"/api/csrf", "/stats/stream", "/dead"}
    missing = []
    for pattern in patterns:
        if pattern in skipped or pattern.startswith("/static"):
            continue
        regex = re.sub(r"\{[^}]+\}", "[^?]+", re.escape(pattern).replace(r"\{", "{")
                       .replace(r"\}", "}")) + r"/?(\?.*)?"
        if not any(re.fullmatch(regex, route) for route in ROUTES + ENTRY_ROUTES):
            missing.append(pattern)
    assert missing == []
