"""``Queue.delete_job`` and ``Queue.delete_by_class``: Sidekiq Pro's deletes, inside Redis, a
page per script call, hostile entries skipped, unique locks released."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

import wurk
from wurk import scripts
from wurk.api import Queue
from wurk.api.queues import DELETE_PAGE
from wurk.unique import MARK


def job(n: int, klass: str = "Keep", **extra: Any) -> str:
    return json.dumps({"class": klass, "args": [n], "jid": f"{n:024d}", "queue": "default",
                       **extra}, separators=(",", ":"))


def fill(r: redis.Redis, entries: list[str]) -> None:
    """Push ``entries`` oldest first, as producers do (the newest ends at the head)."""
    for start in range(0, len(entries), 1000):
        r.lpush("queue:default", *entries[start:start + 1000])
    r.sadd("queues", "default")


@wurk.job(name="Deletes::Unique", unique_for=600)
def unique_job(account: int) -> None:
    """Pushed only: its lock is what the tests look at."""


def lock_keys(r: redis.Redis) -> list[str]:
    return sorted(r.scan_iter("unique:*"))


def test_delete_job_removes_exactly_that_job(config: wurk.Config, r: redis.Redis) -> None:
    entries = [job(n) for n in range(1200)]
    fill(r, entries)
    queue = Queue("default", config)
    assert queue.delete_job(f"{7:024d}")  # near the tail: found on the third page
    assert queue.delete_job(f"{1150:024d}")  # near the head
    assert not queue.delete_job(f"{7:024d}")  # gone already
    assert not queue.delete_job("no-such-jid") and not queue.delete_job("")
    kept = [e for n, e in enumerate(entries) if n not in (7, 1150)]
    assert r.lrange("queue:default", 0, -1) == kept[::-1]  # the rest, in order


def test_delete_by_class_pages_through_a_long_queue(config: wurk.Config,
                                                   r: redis.Redis) -> None:
    entries = [job(n, "Doomed" if n % 3 == 0 else "Keep") for n in range(2 * DELETE_PAGE + 301)]
    fill(r, entries)
    queue = Queue("default", config)
    assert queue.delete_by_class("Doomed") == len(entries[::3])
    kept = [e for n, e in enumerate(entries) if n % 3]
    assert r.lrange("queue:default", 0, -1) == kept[::-1]
    assert queue.delete_by_class("Doomed") == 0
    assert queue.delete_by_class(unique_job) == 0  # a registered job names itself
    with pytest.raises(ValueError, match="job name"):
        queue.delete_by_class("")
    assert Queue("empty", config).delete_by_class("Keep") == 0


def test_hostile_entries_are_skipped_never_fatal(config: wurk.Config, r: redis.Redis) -> None:
    jid = f"{5:024d}"
    hostile = ["{not json", "[1, 2]", '"Doomed"', "42", json.dumps({"class": "Doomed"})[:-1],
               json.dumps({"args": [jid], "class": ["Doomed"]}),  # the jid, not as its jid
               json.dumps({"jid": 5, "class": {"name": "Doomed"}}),
               "\x00\xff" + jid, json.dumps({"jid": jid + "x", "class": "Doomedx"})]
    fill(r, [*hostile, job(5, "Doomed"), job(6, "Doomed")])
    queue = Queue("default", config)
    assert queue.delete_job(jid)
    assert queue.delete_by_class("Doomed") == 1
    assert sorted(r.lrange("queue:default", 0, -1)) == sorted(hostile)


def test_names_json_may_escape_are_matched_after_decoding(config: wurk.Config,
                                                         r: redis.Redis) -> None:
    escaped = '{"class":"Billing\\/Invoice \\"v2\\"","args":[],"jid":"aaaaaaaaaaaaaaaaaaaaaaaa"}'
    raw_utf8 = '{"class":"Ünicode","args":[],"jid":"bbbbbbbbbbbbbbbbbbbbbbbb"}'
    fill(r, [escaped, job(1, "Billing/Invoice"), raw_utf8, job(2, "Ünicode")])
    queue = Queue("default", config)
    assert queue.delete_by_class('Billing/Invoice "v2"') == 1
    assert queue.delete_by_class("Billing/Invoice") == 1
    assert queue.delete_by_class("Ünicode") == 2  # written raw, and as a \\u escape
    assert r.llen("queue:default") == 0


def test_deleting_a_unique_job_releases_its_lock(config: wurk.Config, r: redis.Redis) -> None:
    jids = [unique_job.perform_async(n) for n in range(3)]
    wurk.push({"class": "Plain", "args": []})
    assert len(lock_keys(r)) == 3
    queue = Queue("default", config)
    assert queue.delete_job(str(jids[0]))
    assert len(lock_keys(r)) == 2
    assert unique_job.perform_async(0) is not None  # its lock is free again
    assert queue.delete_by_class("Deletes::Unique") == 3
    assert lock_keys(r) == [] and queue.size() == 1


def test_one_call_looks_at_one_page_and_pushes_meanwhile_skip_nothing(
        config: wurk.Config, r: redis.Redis) -> None:
    """The script's own paging: each call reads its page only (a match beyond it waits for
    the next call), and entries pushed at the head between calls shift the list without any
    old entry being passed over."""
    entries = [job(n, "Doomed" if n < 10 else "Keep") for n in range(1000)]
    fill(r, entries)  # the ten Doomed jobs are the oldest: at the tail, indexes 990-999
    script = scripts.Script("api_delete_matching.lua")
    client = config.pool("api")

    def page(start: int) -> list[Any]:
        args: list[object] = ["class", "Doomed", start, 500, "1", MARK]
        reply: list[Any] = client.run(lambda c: script.call_many(c, [(["queue:default"],
                                                                       args)])[0])
        return reply

    assert page(0) == [0, 500]  # nothing of its class on the first page
    fill(r, [job(2000 + n, "Doomed") for n in range(50)])  # pushed between two calls
    assert page(500) == [0, 1000]  # shifted by 50: the page re-reads 50 it had seen
    assert page(1000) == [10, -1]  # the old ten: none passed over; the end
    assert r.llen("queue:default") == 1040
    assert Queue("default", config).delete_by_class("Doomed") == 50


def test_the_dashboards_delete_by_listing_releases_a_lock_too(config: wurk.Config,
                                                              r: redis.Redis) -> None:
    unique_job.perform_async(1)
    queue = Queue("default", config)
    (record,) = queue.page(0, 1)
    assert lock_keys(r) != []
    assert queue.delete_listed(0, record.digest)
    assert lock_keys(r) == [] and queue.size() == 0
    assert not queue.delete_listed(0, record.digest)


def test_a_queue_key_of_another_type_has_nothing_to_delete(config: wurk.Config,
                                                           r: redis.Redis) -> None:
    """A queue key written by hand as a hash: its size and pages read as empty, but
    delete_job and delete_by_class raised a bare WRONGTYPE script error naming no key."""
    r.hset("queue:default", "jid", "x")
    r.sadd("queues", "default")
    queue = Queue("default", config)
    assert queue.size() == 0
    assert queue.delete_job(f"{1:024d}") is False
    assert queue.delete_by_class("Keep") == 0
    assert r.type("queue:default") == "hash"  # not ours to touch
