"""JobRecord without Redis: display unwrapping, times in every wire form, errors, bad entries."""

from __future__ import annotations

import json
from typing import Any

import pytest

from wurk import payload as P
from wurk.api import Invalid, JobRecord
from wurk.keys import glob_escape


def record(**fields: Any) -> JobRecord:
    base: dict[str, Any] = {"class": "HardJob", "args": [1, "x"], "jid": "a" * 24,
                            "queue": "default"}
    return JobRecord(json.dumps({**base, **fields}))


def active_job(wrapped: str, arguments: list[Any], wrapper: str = "Sidekiq::ActiveJob::Wrapper",
               **extra: Any) -> JobRecord:
    envelope = {"job_class": wrapped, "job_id": "x", "arguments": arguments, "executions": 0}
    return record(**{"class": wrapper, "wrapped": wrapped, "args": [envelope], **extra})


def test_plain_job_shows_its_class_and_args() -> None:
    job = record()
    assert (job.klass, job.display_class, job.display_args) == ("HardJob", "HardJob", [1, "x"])
    assert (job.jid, job.queue, job.parse_error) == ("a" * 24, "default", None)


def test_display_class_field_wins() -> None:
    assert record(display_class="Shown").display_class == "Shown"


@pytest.mark.parametrize("wrapper", ["Sidekiq::ActiveJob::Wrapper",
                                     "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"])
def test_active_job_is_unwrapped_in_both_wrapper_names(wrapper: str) -> None:
    job = active_job("UserSync", [{"_aj_globalid": "gid://app/User/1"},
                                  {"name": "x", "_aj_symbol_keys": ["name"]}, [1, {"a": 2}]],
                     wrapper=wrapper)
    assert job.display_class == "UserSync"
    assert job.display_args == ["gid://app/User/1", {"name": "x"}, [1, {"a": 2}]]
    assert job.klass == wrapper  # the wire name is untouched


def test_active_job_without_wrapped_uses_the_envelope_class_and_hides_args() -> None:
    envelope = {"job_class": "Orphan", "arguments": [1]}
    job = record(**{"class": "Sidekiq::ActiveJob::Wrapper", "args": [envelope]})
    assert job.display_class == "Orphan"
    assert job.display_args == []


def test_legacy_mailer_job_shows_mailer_method_and_drops_delivery_args() -> None:
    job = active_job("ActionMailer::DeliveryJob",
                     ["UserMailer", "welcome", "deliver_now", {"_aj_globalid": "gid://a/U/5"}])
    assert job.display_class == "UserMailer#welcome"
    assert job.display_args == ["gid://a/U/5"]


def test_mail_delivery_job_shows_params_and_args() -> None:
    kwargs = {"params": {"user": {"_aj_globalid": "gid://a/U/5"}}, "args": [7],
              "_aj_ruby2_keywords": ["params", "args"]}
    job = active_job("ActionMailer::MailDeliveryJob",
                     ["UserMailer", "welcome", "deliver_now", kwargs])
    assert job.display_class == "UserMailer#welcome"
    assert job.display_args == [{"user": "gid://a/U/5"}, [7]]


def test_mail_delivery_job_without_kwargs_shows_the_rest() -> None:
    job = active_job("ActionMailer::MailDeliveryJob", ["M", "m", "deliver_now"])
    assert job.display_args == []


def test_encrypted_last_argument_is_masked_without_touching_the_payload() -> None:
    job = record(encrypt=True, args=[1, {"__wurk_enc__": True, "ct": "zz"}])
    assert job.display_args == [1, "[encrypted data]"]
    assert job.args[1] == {"__wurk_enc__": True, "ct": "zz"}


@pytest.mark.parametrize(("value", "expected"), [
    (1700000000123, 1700000000.123),           # Sidekiq 8: integer ms
    (1700000000.25, 1700000000.25),            # Sidekiq 6/7: float seconds
    ("2023-11-14T22:13:20Z", 1700000000.0),    # ISO-8601 text (ActiveJob, Oj)
    ("2023-11-14 22:13:20 UTC", 1700000000.0), # Ruby Time#to_s
    ("1700000000.5", 1700000000.5),            # numeric text
    (None, None),
])
def test_times_read_in_every_wire_form(value: Any, expected: float | None) -> None:
    job = record(created_at=value, enqueued_at=value, failed_at=value, retried_at=value,
                 discarded_at=value)
    for got in (job.created_at, job.enqueued_at, job.failed_at, job.retried_at,
                job.discarded_at):
        assert got == pytest.approx(expected) if expected is not None else got is None


@pytest.mark.parametrize("value", ["soon", 10**400, -10**400, 1e300, "1e300", -1.0, True,
                                   [1], "9" * 5000])
def test_unreadable_times_are_invalid_with_their_text(value: Any) -> None:
    job = record(enqueued_at=value, failed_at=value)
    for got in (job.enqueued_at, job.failed_at):
        assert isinstance(got, Invalid) and got.expected == "a time"
        assert 0 < len(got.raw) <= 120
    assert isinstance(job.latency(now=1.0), Invalid)


def test_latency_prefers_enqueued_then_created_then_zero() -> None:
    assert record(enqueued_at=1000.0, created_at=500.0).latency(now=1010.0) == 10.0
    assert record(created_at=500.0).latency(now=1010.0) == 510.0
    assert record().latency(now=1010.0) == 0.0


def test_error_fields_and_every_backtrace_form() -> None:
    lines = ["app.rb:1:in `x'", "app.rb:2:in `y'"]
    strict = P.encode_backtrace(lines)
    mime = "\n".join(strict[i:i + 60] for i in range(0, len(strict), 60)) + "\n"
    for stored in (strict, mime, lines):
        job = record(error_class="NoMethodError", error_message="boom", retry_count=3,
                     error_backtrace=stored)
        assert job.error_backtrace == lines
    assert (job.error_class, job.error_message, job.retry_count) == ("NoMethodError", "boom", 3)
    unreadable = record(error_backtrace="not base64 !").error_backtrace
    assert isinstance(unreadable, Invalid) and "Marshal" in unreadable.expected


def test_wrongly_typed_fields_read_as_absent_or_invalid() -> None:
    job = record(retry_count=True, tags="x", bid=5, error_class=3, args="nope", jid=7)
    assert (job.tags, job.bid, job.error_class) == ([], None, None)
    assert job.retry_count == Invalid(raw="True", expected="a whole number")
    assert job.args == [] and job.jid == ""


def test_unparseable_entry_is_a_record_with_its_error() -> None:
    for raw in (b"{not json", b"[1,2]", b"\xff\xfe"):
        job = JobRecord(raw, queue="default")
        assert job.parse_error is not None
        assert job.item == {} and job.raw == raw
        assert job.display_class == "[unparseable entry]"
        summary = job.to_dict()
        assert summary["payload"] is None and summary["raw"] == raw.decode("utf-8", "replace")


def test_raw_bytes_are_kept_exactly() -> None:
    raw = '{"class":"X","args":[1.50,"é"],"jid":"j"}'
    job = JobRecord(raw)
    assert job.raw == raw.encode("utf-8") and job.text == raw
    assert job.to_dict()["payload"] == json.loads(raw)


def test_glob_characters_are_escaped() -> None:
    assert glob_escape("a*b?[c]\\d") == "a\\*b\\?\\[c\\]\\\\d"
