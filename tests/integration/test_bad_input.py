"""Bad input, fuzzed: random bytes, truncated and deeply nested JSON, huge arguments, wrong
field types, unknown classes and non-UTF-8 — pushed raw into a queue, the retry set and the
schedule, then worked off by a real fetcher, runner and scheduler in this process.

Every example must end in the dead set (with the error recorded, or reported when the entry
is not even JSON), in the retry set with an error message that names the problem, or with
its death handlers told (``retry: false``); the runner keeps going, the next good job runs,
and nothing else in Redis changes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wurk
from tests.chaos import jobs
from tests.helpers.faults import use_ledger
from tests.helpers.server import Server
from tests.system.conftest import ROOT
from wurk import payload as P
from wurk.config import Capsule
from wurk.fetch.reliable import ReliableFetch
from wurk.metrics.counters import Counters
from wurk.processor import JobRunner
from wurk.runtime.busy import Busy
from wurk.runtime.identity import Identity
from wurk.scheduled import Scheduler

QUEUE = "fuzz"
PLACES = ("queue", "retry", "schedule")
BOUNDED = settings(max_examples=50, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture,
                                          HealthCheck.too_slow])
# A bystander: must be exactly as it was after every example.
BYSTANDER_KEY, BYSTANDER = "queue:bystander", b'{"class":"Elsewhere","args":[1]}'


@dataclass
class Outcome:
    dead: list[bytes]
    retry: list[bytes]
    reported: list[BaseException]
    deaths: list[tuple[dict[str, Any], BaseException]]
    leftovers: dict[str, int] = field(default_factory=dict)

    def parsed(self, entries: list[bytes]) -> list[dict[str, Any]]:
        return [json.loads(e) for e in entries]


class Rig:
    """A fetcher, a runner and a scheduler on the test server, reset for every example."""

    def __init__(self, config: wurk.Config, r: redis.Redis) -> None:
        self.config = config
        self.r = r
        self.reported: list[BaseException] = []
        self.deaths: list[tuple[dict[str, Any], BaseException]] = []
        config.error_handlers.append(lambda exc, context: self.reported.append(exc))
        config.death_handlers.append(lambda job, exc: self.deaths.append((job, exc)))
        self.runner = JobRunner(config, counters=Counters(), busy=Busy())
        capsule = Capsule(queues=[(QUEUE, 0), ("default", 0)])
        self.fetcher = ReliableFetch(config, capsule, config.pool("fuzz", size=4),
                                     identity=Identity.current(), capsule_index=0, slot=0)
        self.scheduler = Scheduler(config)

    def reset(self) -> None:
        self.r.flushdb()
        self.r.rpush(BYSTANDER_KEY, BYSTANDER)
        self.reported.clear()
        self.deaths.clear()

    def place(self, where: str, raw: bytes) -> None:
        if where == "queue":
            self.r.lpush(f"queue:{QUEUE}", raw)
        else:
            self.r.zadd(where, {raw: time.time() - 1})

    def drain(self) -> int:
        """Due jobs to their queues, then run every queued job; returns how many ran."""
        self.scheduler.enqueue_due()
        ran = 0
        # Fetch only while something is queued: an empty blocking fetch costs Redis's
        # timeout resolution (100 ms), and hundreds of examples run.
        while self.r.llen(f"queue:{QUEUE}") or self.r.llen("queue:default"):
            unit = self.fetcher.fetch(0.01)
            assert unit is not None
            self.runner.run(unit)  # must never raise
            ran += 1
        self.fetcher.flush_acks()
        return ran

    def outcome(self) -> Outcome:
        leftovers = {key.decode(): self.r.llen(key) for key in self.r.scan_iter("queue:*")
                     if key != BYSTANDER_KEY.encode() and self.r.type(key) == b"list"}
        return Outcome(self.r.zrange("dead", 0, -1), self.r.zrange("retry", 0, -1),
                       list(self.reported), list(self.deaths),
                       {k: n for k, n in leftovers.items() if n})


@pytest.fixture
def rig(config: wurk.Config, r: redis.Redis, redis_server: Server,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    use_ledger(monkeypatch, redis_server.url)
    raw = redis.Redis.from_url(redis_server.url)
    yield Rig(config, raw)
    raw.close()


def run_one(rig: Rig, where: str, raw: bytes) -> Outcome:
    """Place ``raw``, work everything off, and check the runner still runs good jobs and the
    bystander is untouched."""
    rig.reset()
    rig.place(where, raw)
    rig.drain()
    outcome = rig.outcome()
    good = wurk.Client(rig.config).push({"class": "Chaos::Mark", "args": [0],
                                        "queue": QUEUE})
    assert rig.drain() == 1, "the next good job did not run"
    assert jobs.ledger().lrange(jobs.RAN, -1, -1) == [str(good).encode()]
    assert rig.r.lrange(BYSTANDER_KEY, 0, -1) == [BYSTANDER]
    assert not outcome.leftovers, f"left in queues or in flight: {outcome.leftovers}"
    assert not rig.r.zcard("schedule") and not rig.r.exists(*_private(rig))
    return outcome


def _private(rig: Rig) -> list[str]:
    return list(rig.fetcher.private_lists.values())


# -- what each kind of input must end as ------------------------------------------------------
def assert_buried_raw(outcome: Outcome, raw: bytes) -> None:
    """Not JSON, or not an object: stored as it came (as Sidekiq does), the error reported.

    As it came to the worker, that is: one the scheduler could read well enough to move
    (its bytes are not UTF-8, or its arguments nest too deep for Python) carries the
    ``enqueued_at`` the move spliced in."""
    assert len(outcome.dead) == 1, outcome.dead
    assert outcome.dead[0] == raw or re.fullmatch(
        re.escape(raw[:-1]) + rb',"enqueued_at":\d+}', outcome.dead[0], re.DOTALL)
    assert not outcome.retry
    says = ("not valid JSON", "not an object", "nested deeper than", "lone surrogate")
    assert any(isinstance(e, wurk.UnparseablePayload) and any(s in str(e) for s in says)
               for e in outcome.reported), outcome.reported


def assert_killed_naming(outcome: Outcome, field_name: str) -> None:
    """An uninterpretable field: dead with wurk.InvalidPayload naming it (no retry can fix it)."""
    dead = outcome.parsed(outcome.dead)
    assert len(dead) == 1 and not outcome.retry, (dead, outcome.retry)
    assert dead[0]["error_class"] == "wurk.InvalidPayload"
    assert f"'{field_name}'" in dead[0]["error_message"], dead[0]["error_message"]


def assert_failed_with(outcome: Outcome, error_class: str, *words: str) -> None:
    """A job that ran (or was looked up) and failed: in retry — or dead when its retries
    were none — with an error message that says what was wrong; or discarded with its death
    handlers told when the payload says ``retry: false``."""
    entries = outcome.parsed(outcome.retry + outcome.dead)
    if not entries:
        assert outcome.deaths, "neither retried, buried nor handed to death handlers"
        job, exc = outcome.deaths[-1]
        assert job.get("retry") is False and any(w in str(exc) for w in words)
        return
    assert len(entries) == 1
    assert entries[0]["error_class"] == error_class
    assert any(w in entries[0]["error_message"] for w in words), entries[0]["error_message"]


# -- payload builders -------------------------------------------------------------------------
def good_payload(**fields: Any) -> dict[str, Any]:
    return {"class": "Chaos::Mark", "args": [0], "queue": QUEUE, "jid": P.new_jid(),
            "retry": 3, **fields}


def encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
                                                           allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
# For each field a worker relies on: values of every wrong type.
WRONG = {
    "class": json_values.filter(lambda v: not isinstance(v, str)) | st.just(""),
    "args": json_values.filter(lambda v: not isinstance(v, list)),
    "queue": json_values.filter(lambda v: not isinstance(v, str)) | st.just(""),
    "jid": json_values.filter(lambda v: not isinstance(v, str) and v is not None),
    "retry": json_values.filter(lambda v: v is not None and not isinstance(v, bool) and not (
        isinstance(v, int) and v >= 0)),
    "retry_count": json_values.filter(lambda v: v is not None and (
        isinstance(v, bool) or not isinstance(v, int))),
    # null is Ruby's nil: an option not set, as Sidekiq reads it (docs/wire-format.md)
    "tags": json_values.filter(lambda v: v is not None and not isinstance(v, list)),
    "dead": json_values.filter(lambda v: v is not None and not isinstance(v, bool)),
}


# -- the fuzzed cases -------------------------------------------------------------------------
@BOUNDED
@given(raw=st.binary(max_size=300), where=st.sampled_from(PLACES))
def test_random_bytes(rig: Rig, raw: bytes, where: str) -> None:
    outcome = run_one(rig, where, raw)
    try:
        P.validate(P.loads(raw))
    except wurk.UnparseablePayload:
        assert_buried_raw(outcome, raw)
    except wurk.InvalidPayload as exc:
        assert_killed_naming(outcome, str(exc.field))
    else:  # pragma: no cover - random bytes are never a valid payload
        pytest.fail(f"random bytes made a valid payload: {raw!r}")


@BOUNDED
@given(data=st.data(), where=st.sampled_from(PLACES))
def test_truncated_json(rig: Rig, data: st.DataObject, where: str) -> None:
    whole = encode(good_payload(args=[data.draw(json_values)]))
    raw = whole[:data.draw(st.integers(1, len(whole) - 1))]
    assert_buried_raw(run_one(rig, where, raw), raw)


@BOUNDED
@given(depth=st.integers(50, 5000), where=st.sampled_from(PLACES),
       container=st.sampled_from(["[]", '{"a":}']))
def test_deeply_nested_json(rig: Rig, depth: int, where: str, container: str) -> None:
    opening, closing = (container[:-1], container[-1]) if container == "[]" else ('{"a":', "}")
    inner = "[]" if container == "[]" else "1"
    raw = ('{"class":"Chaos::Mark","queue":"fuzz","retry":1,"args":['
           + opening * depth + inner + closing * depth + "]}").encode()
    outcome = run_one(rig, where, raw)
    try:
        P.loads(raw)
    except wurk.UnparseablePayload:
        assert_buried_raw(outcome, raw)
    else:  # parseable: Chaos::Mark was given a list or a dict to sleep for
        assert_failed_with(outcome, "TypeError", "must be real number",
                           "cannot be interpreted as")


@BOUNDED
@given(data=st.data(), where=st.sampled_from(PLACES))
def test_wrong_field_types(rig: Rig, data: st.DataObject, where: str) -> None:
    name = data.draw(st.sampled_from(sorted(WRONG)))
    value = data.draw(WRONG[name])
    outcome = run_one(rig, where, encode(good_payload(**{name: value})))
    assert_killed_naming(outcome, name)


@pytest.mark.parametrize("where", PLACES)
@pytest.mark.parametrize(("name", "value"), [("retry", "yes"), ("args", {}), ("queue", 7)])
def test_the_wrong_types_the_issue_names(rig: Rig, where: str, name: str, value: Any) -> None:
    assert_killed_naming(run_one(rig, where, encode(good_payload(**{name: value}))), name)


@BOUNDED
@given(name=st.text(min_size=1, max_size=40), where=st.sampled_from(PLACES),
       retry=st.sampled_from([True, False, 0, 2]))
def test_unknown_classes(rig: Rig, name: str, where: str, retry: Any) -> None:
    outcome = run_one(rig, where, encode(good_payload(**{"class": name, "retry": retry})))
    assert_failed_with(outcome, "wurk.JobNotRegistered", repr(name)[1:-1][:30])


huge_ints = st.integers() | st.sampled_from([10**30, -(10**30), 10**400, -(10**400)])


@BOUNDED
@given(fields=st.fixed_dictionaries({}, optional={
    "retry_count": huge_ints, "retry": st.booleans() | huge_ints.map(abs),
    "retry_for": huge_ints | st.floats(allow_nan=False, allow_infinity=False),
    "backtrace": st.booleans() | huge_ints, "failed_at": json_values,
    "created_at": json_values, "enqueued_at": json_values}),
    where=st.sampled_from(PLACES))
def test_absurd_values_of_the_right_type(rig: Rig, fields: dict[str, Any], where: str) -> None:
    """Well-typed but absurd (a retry count of 10⁴⁰⁰, a window of -10³⁰ s): the failure of an
    unknown job is still booked — in retry, dead, or handed to death handlers."""
    outcome = run_one(rig, where, encode(good_payload(**{"class": "No::Such", **fields})))
    assert_failed_with(outcome, "wurk.JobNotRegistered", "No::Such")


@BOUNDED
@given(prefix=st.binary(max_size=20), bad=st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80",
                                                            b"\xf8\x88\x80\x80\x80"]),
       where=st.sampled_from(PLACES))
def test_non_utf8(rig: Rig, prefix: bytes, bad: bytes, where: str) -> None:
    raw = b'{"class":"Chaos::Mark","queue":"fuzz","args":["' + prefix.replace(b'"', b"") \
        .replace(b"\\", b"") + bad + b'"]}'
    assert_buried_raw(run_one(rig, where, raw), raw)


@pytest.mark.parametrize("where", PLACES)
@pytest.mark.parametrize("raw", [
    b'{"class":"","args":[],"queue":"fuzz","x":1e400}',
    b'{"class":"No::Such","args":[],"queue":"fuzz","retry_count":1e400}',
    b'{"class":"No::Such","args":[],"queue":"fuzz","failed_at":-1e400}',
    b'{"class":"No::Such","args":[],"x":1e400}',
    b'{"class":"","args":[],"queue":"fuzz","x":"\\ud800"}',
    b'{"class":"No::Such","args":[],"queue":"fuzz","x":"\\udc80"}',
    b'{"class":"No::Such","args":[],"queue":"a|b","x":"\\ud800"}',
], ids=["1e400-invalid", "1e400-retry_count", "1e400-failed_at", "1e400-no_queue",
        "surrogate-invalid", "surrogate-unknown", "surrogate-bad_queue"])
def test_json_no_writer_writes_back(rig: Rig, where: str, raw: bytes) -> None:
    """A number no float holds (``1e400``) or an escaped lone surrogate (``"\\ud800"``, no
    character: UTF-8 cannot carry it) is JSON, but read as infinity or as such a character
    the job could be written back nowhere — not buried with its error, not retried, not
    pushed: the thread's runner raised, it stayed in flight, or every scheduler pass raised.
    It is buried as the bytes it was."""
    assert_buried_raw(run_one(rig, where, raw), raw)


@pytest.mark.parametrize("where", PLACES)
def test_huge_arguments(rig: Rig, where: str) -> None:
    """10 MB of arguments: carried intact to the job, whose error goes to retry."""
    huge = "x" * 10_000_000
    outcome = run_one(rig, where, encode(good_payload(args=[huge])))
    assert_failed_with(outcome, "TypeError", "must be real number, not str",
                       "cannot be interpreted as")
    assert json.loads(outcome.retry[0])["args"] == [huge]


def bad_inputs(tag: bytes) -> list[bytes]:
    """One of each kind; ``tag`` makes them differ from another call's."""
    return [b"\x00\xff garbage " + tag, b'{"class":"Chaos::Mark","args":["' + tag,
            b"[" * 5000 + tag, encode(good_payload(retry="yes")),
            encode(good_payload(args={})), encode(good_payload(queue=7)),
            encode(good_payload(**{"class": "No::Such"})),
            b'{"class":"Chaos::Mark","queue":"fuzz","args":["\xff' + tag + b'"]}',
            encode(good_payload(args=["x" * 10_000_000]))]


def test_a_mix_of_bad_input_never_stops_a_real_worker(
    config: wurk.Config, redis_server: Server, tmp_path: Path
) -> None:
    """Every kind, in every place, through a ``wurk worker`` process, around good jobs."""
    r = redis.Redis.from_url(redis_server.url)
    good = wurk.Client(config).push_bulk({"class": "Chaos::Mark", "args": [[0]] * 20,
                                          "queue": QUEUE})
    places = [f"queue:{QUEUE}", "retry", "schedule"]
    for place in places:  # distinct per place, so no two collapse into one set member
        for raw in bad_inputs(place.encode()):
            if place.startswith("queue:"):
                r.lpush(place, raw)
            else:
                r.zadd(place, {raw: time.time() - 1})
    expected = len(places) * len(bad_inputs(b""))
    settings_file = tmp_path / "wurk.yml"
    settings_file.write_text("scheduler_initial_wait: 0\npoll_interval_average: 0.2\n"
                             "fetch_timeout: 0.5\nheartbeat_interval: 0.5\n")
    log = tmp_path / "worker.log"
    worker = subprocess.Popen(
        [sys.executable, "-m", "wurk", "worker", "-r", "tests.chaos.jobs", "-q", QUEUE,
         "-q", "default", "-c", "3", "-C", str(settings_file)],
        cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT,
        env={**os.environ, jobs.LEDGER_ENV: redis_server.url})
    try:
        deadline = time.monotonic() + 30
        while not set(good) <= {j.decode() for j in r.lrange(jobs.RAN, 0, -1)}:
            assert worker.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        # Each bad entry ends in dead (raw, or with its error) or in retry.
        while r.zcard("dead") + r.zcard("retry") < expected:
            assert time.monotonic() < deadline, "bad input still on its way"
            time.sleep(0.1)
        assert worker.poll() is None, "the worker died"
        assert r.zcard("dead") + r.zcard("retry") == expected
        assert not r.llen(f"queue:{QUEUE}") and not r.zcard("schedule")
        for entry in r.zrange("retry", 0, -1):
            assert json.loads(entry)["error_message"]
        assert "Traceback" not in log.read_text()
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        r.close()
