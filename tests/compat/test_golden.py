"""Golden payloads: entries real Sidekiq 6.4 wrote (tests/fixtures/sidekiq-6.4) and the
Sidekiq 7/8 payload forms, loaded and round-tripped field for field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from wurk import payload as P
from wurk.errors import UnparseablePayload

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sidekiq-6.4"
PUSHED = json.loads((FIXTURES / "pushed.json").read_text())
WORKER = json.loads((FIXTURES / "worker.json").read_text())


def sidekiq64_jobs() -> list[str]:
    jobs = [*PUSHED["queue:default"], *PUSHED["queue:critical"]]
    jobs += [member for member, _ in PUSHED["schedule"]]
    jobs += [member for member, _ in WORKER["retry"]]
    jobs += [member for member, _ in WORKER["dead"] if parses(member)]
    return jobs


def parses(raw: str) -> bool:
    try:
        json.loads(raw)
    except ValueError:
        return False
    return True


# Payload fields and backtraces: what Sidekiq 7 and 8 write.
SIDEKIQ8 = [
    '{"retry":true,"queue":"default","class":"HardJob","args":[1,"x"],'
    '"jid":"4f2c9e0a7b1d3c5e6f708192","created_at":1700000000123,"enqueued_at":1700000000125}',
    '{"retry":5,"queue":"low","class":"HardJob","args":[{"a":[1,2.5,null]}],'
    '"jid":"0123456789abcdef01234567","created_at":1700000000123,"enqueued_at":1700000000125,'
    '"error_message":"boom","error_class":"RuntimeError","failed_at":1700000001000,'
    '"retry_count":2,"retried_at":1700000100000,"backtrace":true,'
    '"error_backtrace":"eJyLVkosKNDPyk8q1s9ILEqJB7L0ipKsTK0y8xQSClKL0vKLctWVYgET9w2n","tags":["a"],"retry_for":3600}',
    '{"retry":true,"queue":"default","class":"Sidekiq::ActiveJob::Wrapper",'
    '"wrapped":"UserMailer","args":[{"job_class":"UserMailer","job_id":"x","arguments":'
    '[{"_aj_globalid":"gid://app/User/1"}],"executions":0,"locale":"en"}],'
    '"jid":"aaaaaaaaaaaaaaaaaaaaaaaa","created_at":1700000000123,"enqueued_at":1700000000125,'
    '"cattr":{"tenant":"acme"},"locale":"en","bid":"b-77ttk4VvK6xDUg","dead":false,'
    '"discarded_at":1700000200000}',
]
SIDEKIQ7 = [
    '{"retry":true,"queue":"default","class":"HardJob","args":[1,"x"],'
    '"jid":"4f2c9e0a7b1d3c5e6f708192","created_at":1700000000.123,"enqueued_at":1700000000.125}',
    '{"retry":0,"queue":"default","class":"Deep","args":[[[[1]]]],"jid":"bbbbbbbbbbbbbbbbbbbbbbbb",'
    '"created_at":1700000000.0,"enqueued_at":1700000000.5,"failed_at":1700000001.25,'
    '"retry_count":0,"error_class":"NoMethodError","error_message":"undefined method ✓",'
    '"display_class":"Shown","log_level":"debug","profile":"tok"}',
]


@pytest.mark.parametrize("raw", sidekiq64_jobs() + SIDEKIQ8 + SIDEKIQ7)
def test_every_payload_loads_validates_and_round_trips_byte_for_byte(raw: str) -> None:
    job = P.validate(P.loads(raw))
    assert P.dumps(job) == raw  # same keys, same order, same number formatting
    assert P.loads(P.dumps(job)) == json.loads(raw)


@pytest.mark.parametrize("raw", sidekiq64_jobs() + SIDEKIQ7)
def test_float_second_timestamps_read_as_seconds(raw: str) -> None:
    job = P.loads(raw)
    for field in ("created_at", "enqueued_at", "failed_at", "retried_at"):
        if field in job:
            value = P.read_time(job[field])
            assert value is not None and 1.6e9 < value < 1.9e9, (field, job[field])


@pytest.mark.parametrize("raw", SIDEKIQ8)
def test_integer_ms_timestamps_read_as_milliseconds(raw: str) -> None:
    job = P.loads(raw)
    assert P.read_time(job["created_at"]) == pytest.approx(1700000000.123)
    assert type(job["created_at"]) is int


def test_sidekiq64_scores_are_float_seconds() -> None:
    for _, score in PUSHED["schedule"] + WORKER["retry"] + WORKER["dead"]:
        assert isinstance(score, float)
        assert float(P.score(score)) == score


def test_sidekiq64_mime_backtrace_decodes() -> None:
    job = next(P.loads(m) for m, _ in WORKER["retry"] if "error_backtrace" in m)
    assert "\n" in job["error_backtrace"]  # 6.4 wrote MIME base64
    lines = P.decode_backtrace(job["error_backtrace"])
    assert lines and all(isinstance(line, str) for line in lines)
    assert any("jobs.rb" in line for line in lines)


def test_sidekiq8_strict_backtrace_decodes() -> None:
    job = P.loads(SIDEKIQ8[1])
    assert P.decode_backtrace(job["error_backtrace"]) == ["app/jobs/hard_job.rb:5:in `perform'"]


def test_unparseable_dead_entry_is_recognised() -> None:
    raw = next(m for m, _ in WORKER["dead"] if not parses(m))
    with pytest.raises(UnparseablePayload):
        P.loads(raw)


def test_retry_fields_match_what_sidekiq_wrote() -> None:
    entries = [P.loads(m) for m, _ in WORKER["retry"]] + [P.loads(m) for m, _ in WORKER["dead"]
                                                          if parses(m)]
    for job in entries:
        assert isinstance(job["error_class"], str) and isinstance(job["error_message"], str)
        assert job["retry_count"] == 0 and isinstance(job["failed_at"], float)


def test_process_hash_info_has_the_fields_readers_need() -> None:
    identity = WORKER["processes"][0]
    record: dict[str, Any] = WORKER[identity]
    info = json.loads(record["info"])
    assert {"hostname", "started_at", "pid", "tag", "concurrency", "queues", "labels",
            "identity"} <= set(info)
    assert record["quiet"] in ("true", "false") and float(record["beat"]) > 1.6e9
    assert identity.count(":") == 2
