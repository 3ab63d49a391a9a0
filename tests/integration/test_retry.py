"""Retries booked exactly as Sidekiq books them, read back raw."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import wurk
from wurk import payload as P
from wurk.config import Config
from wurk.errors import InvalidPayload
from wurk.morgue import Morgue
from wurk.retry import JobRetry, backtrace_lines, default_delay

Job = dict[str, Any]


class FlakyJob(wurk.Job, name="Retry::Flaky", retry=3):
    def perform(self) -> None: ...


class HookedJob(wurk.Job, name="Retry::Hooked"):
    answer: Any = None
    exhausted: Any = None
    exhausted_calls: list[tuple[Job, BaseException]] = []  # noqa: RUF012

    def perform(self) -> None: ...

    def retry_in(self, count: int, exc: BaseException) -> Any:
        answer = type(self).answer
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def retries_exhausted(self, payload: Job, exc: BaseException) -> Any:
        type(self).exhausted_calls.append((dict(payload), exc))
        if isinstance(type(self).exhausted, BaseException):
            raise type(self).exhausted
        return type(self).exhausted


class NoRetryJob(wurk.Job, name="Retry::Never", retry=False):
    def perform(self) -> None: ...


@wurk.job(name="Retry::fn", retry_in=lambda count, exc: 300,
          retries_exhausted=lambda payload, exc: "discard")
def fn_job() -> None: ...


@pytest.fixture(autouse=True)
def _reset_hooks() -> None:
    HookedJob.answer = None
    HookedJob.exhausted = None
    HookedJob.exhausted_calls = []


class Book:
    """A JobRetry on its own config, plus what its handlers saw."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.deaths: list[tuple[Job, BaseException]] = []
        self.errors: list[tuple[BaseException, dict[str, Any]]] = []
        config.death_handlers.append(lambda job, exc: self.deaths.append((job, exc)))
        config.error_handlers.append(lambda exc, ctx, cfg: self.errors.append((exc, ctx)))
        self.retry = JobRetry(config, Morgue(config))

    def fail(self, job: Job, exc: BaseException | None = None, *,
             definition: Any = None, instance: Any = None) -> BaseException:
        error = exc if exc is not None else raised(ValueError("it broke"))
        self.retry.handle(job, error, definition=definition, instance=instance)
        return error


@pytest.fixture
def make_book() -> Iterator[Callable[..., Book]]:
    made: list[Config] = []

    def make(**settings: Any) -> Book:
        config = Config(**settings)
        made.append(config)
        return Book(config)

    yield make
    for config in made:
        config.close()


@pytest.fixture
def book(make_book: Callable[..., Book]) -> Book:
    return make_book()


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def new_job(**fields: Any) -> Job:
    job: Job = {"retry": True, "queue": "default", "class": "Retry::Plain", "args": [1, "x"],
                "jid": P.new_jid(), "created_at": 1700000000123, "enqueued_at": 1700000000125,
                "custom": {"kept": [1, 2]}}
    job.update(fields)
    return job


def retries(r: redis.Redis) -> list[tuple[Job, float]]:
    return [(json.loads(m), s) for m, s in r.zrange("retry", 0, -1, withscores=True)]


def only_retry(r: redis.Redis) -> tuple[Job, float]:
    entries = retries(r)
    assert len(entries) == 1, entries
    return entries[0]


def dead(r: redis.Redis) -> list[Job]:
    return [json.loads(m) for m in r.zrange("dead", 0, -1)]


# -- the retry fields ---------------------------------------------------------------------------
def test_first_failure_writes_sidekiq8_fields(book: Book, r: redis.Redis) -> None:
    before = time.time()
    job = new_job()
    book.fail(job)
    after = time.time()
    stored, score = only_retry(r)
    assert stored["error_message"] == "it broke" and stored["error_class"] == "ValueError"
    assert stored["retry_count"] == 0 and "retried_at" not in stored
    assert type(stored["failed_at"]) is int
    assert int(before * 1000) <= stored["failed_at"] <= int(after * 1000)
    assert stored["custom"] == {"kept": [1, 2]} and stored["queue"] == "default"
    assert {k: stored[k] for k in ("class", "args", "jid", "created_at", "enqueued_at")} == {
        k: job[k] for k in ("class", "args", "jid", "created_at", "enqueued_at")}
    assert before + 15 <= score < after + 15 + 10
    assert "error_backtrace" not in stored and "discarded_at" not in stored


def test_float_timestamps_for_sidekiq_6_and_7(make_book: Callable[..., Book],
                                              r: redis.Redis) -> None:
    book = make_book(timestamp_format="float")
    book.fail(new_job())
    raw = r.zrange("retry", 0, -1)[0]
    assert type(json.loads(raw)["failed_at"]) is float
    assert re.search(r'"failed_at":\d{10}\.\d+', raw)
    stored = json.loads(raw)
    r.delete("retry")
    book.fail(stored)
    again = json.loads(r.zrange("retry", 0, -1)[0])
    assert type(again["retried_at"]) is float and again["failed_at"] == stored["failed_at"]


def test_retry_count_progression_and_backoff_bounds(book: Book, r: redis.Redis) -> None:
    job = new_job()
    first_failed_at = None
    for count in range(4):
        before = time.time()
        book.fail(job)
        after = time.time()
        stored, score = only_retry(r)
        r.delete("retry")
        assert stored["retry_count"] == count
        if count == 0:
            first_failed_at = stored["failed_at"]
            assert "retried_at" not in stored
        else:
            assert stored["failed_at"] == first_failed_at
            assert int(before * 1000) <= stored["retried_at"] <= int(after * 1000)
        delay = count**4 + 15
        assert before + delay <= score < after + delay + 10 * (count + 1)
        job = stored
    assert [default_delay(c) for c in range(5)] == [15, 16, 31, 96, 271]


def test_jitter_covers_its_whole_range(book: Book, r: redis.Redis) -> None:
    # count 0: jitter is a whole number in [0, 10); 60 draws hit both ends of it
    offsets = set()
    for _ in range(60):
        before = time.time()
        book.fail(new_job())
        _, score = only_retry(r)
        r.delete("retry")
        offsets.add(int(score - before - 15 + 0.5))
    assert offsets <= set(range(10)) and len(offsets) >= 5


CENTURY = 100 * 365 * 24 * 60 * 60


@pytest.mark.parametrize("count", [10**6, 10**30, 10**400, -(10**30)],
                         ids=["1e6", "1e30", "1e400", "-1e30"])
def test_no_retry_is_scheduled_more_than_a_century_ahead(book: Book, r: redis.Redis,
                                                         count: int) -> None:
    """guarantees.md: "absurd values of the right type (a retry count of 10⁴⁰⁰): booked like
    any failure; no retry is scheduled more than a century ahead" — the jitter included."""
    book.fail(new_job(retry=10**500, retry_count=count))
    _, score = only_retry(r)
    assert score <= time.time() + CENTURY


@pytest.mark.parametrize("answer", [1e300, 10**400, CENTURY], ids=["1e300", "1e400", "century"])
def test_a_retry_in_answer_beyond_a_century_is_held_to_one(book: Book, r: redis.Redis,
                                                           answer: Any) -> None:
    HookedJob.answer = answer
    before = time.time()
    fail_hooked(book, hooked(retry=10**500, retry_count=10**6))  # a jitter of up to 10⁷ s on top
    _, score = only_retry(r)
    assert before + CENTURY - 1 <= score <= time.time() + CENTURY


def test_retry_queue_rewrites_the_queue(book: Book, r: redis.Redis) -> None:
    book.fail(new_job(queue="critical", retry_queue="slow"))
    stored, _ = only_retry(r)
    assert stored["queue"] == "slow" and stored["retry_queue"] == "slow"


def test_error_message_is_truncated_and_scrubbed(book: Book, r: redis.Redis) -> None:
    book.fail(new_job(), raised(RuntimeError("é" * 20_000)))
    stored, _ = only_retry(r)
    assert stored["error_message"] == "é" * 10_000
    r.delete("retry")
    book.fail(new_job(), raised(RuntimeError("bad \udcff byte")))
    assert only_retry(r)[0]["error_message"] == "bad ? byte"


def test_error_class_names_module_and_class(book: Book, r: redis.Redis) -> None:
    book.fail(new_job(), raised(InvalidPayload("x")))
    stored, _ = only_retry(r)
    assert stored["error_class"] == "wurk.InvalidPayload"


# -- limits ---------------------------------------------------------------------------------------
def test_retry_zero_goes_to_the_dead_set_after_the_first_failure(book: Book,
                                                                 r: redis.Redis) -> None:
    job = new_job(retry=0)
    exc = book.fail(job)
    assert retries(r) == []
    [stored] = dead(r)
    assert stored["retry_count"] == 0 and stored["error_message"] == "it broke"
    assert book.deaths == [(job, exc)]


def test_retry_n_allows_n_plus_one_executions(book: Book, r: redis.Redis) -> None:
    job = new_job(retry=2)
    for _ in range(2):
        book.fail(job)
        job, _ = only_retry(r)
        r.delete("retry")
    assert book.deaths == []
    book.fail(job)
    assert retries(r) == [] and dead(r)[0]["retry_count"] == 2
    assert len(book.deaths) == 1


def test_retry_true_uses_max_retries(make_book: Callable[..., Book], r: redis.Redis) -> None:
    book = make_book(max_retries=1)
    book.fail(new_job(retry_count=0))
    assert retries(r) == [] and len(dead(r)) == 1


def test_default_max_is_25(book: Book, r: redis.Redis) -> None:
    book.fail(new_job(retry_count=23))
    assert only_retry(r)[0]["retry_count"] == 24
    r.delete("retry")
    book.fail(new_job(retry_count=24))
    assert retries(r) == [] and dead(r)[0]["retry_count"] == 25


def test_retry_false_runs_death_handlers_only(book: Book, r: redis.Redis) -> None:
    job = new_job(retry=False)
    exc = book.fail(job)
    assert retries(r) == [] and dead(r) == []
    assert book.deaths == [(job, exc)]


def test_retry_null_is_read_as_no_retry_key(book: Book, r: redis.Redis) -> None:
    # Sidekiq's client keeps `set(retry: nil)` as "retry":null and its worker then takes the
    # class's option (`msg["retry"].nil?`): the job is retried, never silently dropped.
    flaky = new_job(**{"class": "Retry::Flaky"}, retry=None, retry_count=2)
    book.fail(flaky, definition=FlakyJob.definition, instance=FlakyJob())
    assert retries(r) == [] and dead(r)[0]["retry_count"] == 3  # the class's retry=3
    assert dead(r)[0]["retry"] == 3  # written into the payload, as Sidekiq does
    never = new_job(**{"class": "Retry::Never"}, retry=None)
    book.fail(never, definition=NoRetryJob.definition, instance=NoRetryJob())
    assert len(dead(r)) == 1 and len(book.deaths) == 2  # the class's retry=False
    unknown = new_job(**{"class": "Nobody::Knows"}, retry=None)
    book.fail(unknown)  # an unknown job: the default, as without the key
    stored, _ = only_retry(r)
    assert stored["jid"] == unknown["jid"] and stored["retry_count"] == 0
    assert stored["retry"] is None  # kept as it was: no class option to write there


def test_retry_for_null_leaves_the_count_limit(book: Book, r: redis.Redis) -> None:
    book.fail(new_job(retry=2, retry_for=None, retry_count=0))
    assert only_retry(r)[0]["retry_count"] == 1 and dead(r) == []
    r.delete("retry")
    book.fail(new_job(retry=2, retry_for=None, retry_count=1))
    assert retries(r) == [] and dead(r)[0]["retry_count"] == 2


def test_retry_taken_from_the_definition_when_the_payload_has_none(book: Book,
                                                                   r: redis.Redis) -> None:
    job = new_job(**{"class": "Retry::Never"})
    del job["retry"]
    book.fail(job, definition=NoRetryJob.definition, instance=NoRetryJob())
    assert retries(r) == [] and dead(r) == [] and len(book.deaths) == 1
    flaky = new_job(**{"class": "Retry::Flaky"}, retry_count=2)
    del flaky["retry"]
    book.fail(flaky, definition=FlakyJob.definition, instance=FlakyJob())
    assert dead(r)[0]["retry_count"] == 3  # the class's retry=3 was the limit
    assert dead(r)[0]["retry"] == 3  # and is written into the payload, as Sidekiq does


def test_payload_retry_wins_over_the_definition(book: Book, r: redis.Redis) -> None:
    book.fail(new_job(retry=True), definition=NoRetryJob.definition, instance=NoRetryJob())
    assert len(retries(r)) == 1


def test_unknown_job_without_retry_key_retries_with_the_default(book: Book,
                                                                r: redis.Redis) -> None:
    job = new_job(**{"class": "Nobody::Knows"})
    del job["retry"]
    book.fail(job, definition=None, instance=None)
    stored, _ = only_retry(r)
    assert stored["retry_count"] == 0 and "retry" not in stored
    assert book.deaths == []


def test_unknown_job_with_retry_false_is_not_stored(book: Book, r: redis.Redis) -> None:
    book.fail(new_job(**{"class": "Nobody::Knows"}, retry=False))
    assert retries(r) == [] and dead(r) == [] and len(book.deaths) == 1


def test_retry_for_window_elapsed_means_dead(book: Book, r: redis.Redis) -> None:
    two_hours_ago = int((time.time() - 7200) * 1000)
    book.fail(new_job(retry_for=3600, retry_count=1, failed_at=two_hours_ago))
    assert retries(r) == []
    assert dead(r)[0]["failed_at"] == two_hours_ago


def test_retry_for_replaces_the_count_limit(book: Book, r: redis.Redis) -> None:
    recent = (time.time() - 10)  # float seconds, Sidekiq 7's form, read as any timestamp form
    book.fail(new_job(retry_for=3600, retry=2, retry_count=40, failed_at=recent))
    assert only_retry(r)[0]["retry_count"] == 41


def test_retry_for_on_a_first_failure_retries(book: Book, r: redis.Redis) -> None:
    book.fail(new_job(retry_for=1))
    assert len(retries(r)) == 1


@pytest.mark.parametrize("failed_at", [None, "not a time", [1]], ids=["missing", "text", "list"])
def test_retry_for_without_a_readable_failed_at_starts_the_window_now(
        book: Book, r: redis.Redis, failed_at: Any) -> None:
    # A later failure (retry_count set) never writes failed_at: without a readable one the
    # window had no start, so it never closed and the job was retried for ever.
    fields: dict[str, Any] = {"retry_for": 3600, "retry_count": 30}
    if failed_at is not None:
        fields["failed_at"] = failed_at
    before = int(time.time() * 1000)
    book.fail(new_job(**fields))
    stored, _ = only_retry(r)
    assert stored["retry_count"] == 31 and type(stored["failed_at"]) is int
    assert before <= stored["failed_at"] <= int(time.time() * 1000)
    # Two hours on, the window (opened at that failure) has closed: the job dies.
    stored["failed_at"] -= 7200 * 1000
    r.delete("retry")
    book.fail(stored)
    assert retries(r) == [] and [job["jid"] for job in dead(r)] == [stored["jid"]]


# -- hooks ----------------------------------------------------------------------------------------
def hooked(**fields: Any) -> Job:
    return new_job(**{"class": "Retry::Hooked"}, **fields)


def fail_hooked(book: Book, job: Job) -> BaseException:
    return book.fail(job, definition=HookedJob.definition, instance=HookedJob())


@pytest.mark.parametrize("answer", [120, 120.0])
def test_retry_in_number_sets_the_delay(book: Book, r: redis.Redis, answer: Any) -> None:
    HookedJob.answer = answer
    before = time.time()
    fail_hooked(book, hooked(retry_count=1))
    _, score = only_retry(r)
    assert before + 120 <= score < time.time() + 120 + 30  # count 2: jitter < 30


@pytest.mark.parametrize("answer", [None, 0, -5, True, "default", "later", float("nan"),
                                    -(10**400)])
def test_retry_in_anything_else_uses_the_default(book: Book, r: redis.Redis,
                                                 answer: Any) -> None:
    HookedJob.answer = answer
    before = time.time()
    fail_hooked(book, hooked(retry_count=2))  # count 3: 96 s
    _, score = only_retry(r)
    assert before + 96 <= score < time.time() + 96 + 40
    assert book.errors == []


def test_retry_in_raising_is_reported_and_the_default_applies(book: Book,
                                                              r: redis.Redis) -> None:
    HookedJob.answer = KeyError("hook broke")
    before = time.time()
    fail_hooked(book, hooked())
    _, score = only_retry(r)
    assert before + 15 <= score < time.time() + 25
    [(error, context)] = book.errors
    assert isinstance(error, KeyError) and "retry_in" in context["context"]
    assert context["job"]["jid"]


def test_retry_in_kill_means_exhausted_now(book: Book, r: redis.Redis) -> None:
    HookedJob.answer = "kill"
    job = hooked()
    exc = fail_hooked(book, job)
    assert retries(r) == [] and len(dead(r)) == 1
    assert book.deaths == [(job, exc)]
    assert len(HookedJob.exhausted_calls) == 1


def test_retry_in_discard_stamps_and_notifies_without_storing(book: Book,
                                                              r: redis.Redis) -> None:
    HookedJob.answer = "discard"
    job = hooked()
    before = time.time()
    exc = fail_hooked(book, job)
    assert retries(r) == [] and dead(r) == []
    assert book.deaths == [(job, exc)]
    assert type(job["discarded_at"]) is int and job["discarded_at"] >= int(before * 1000)
    assert HookedJob.exhausted_calls == []


def test_retries_exhausted_gets_the_job_with_error_fields(book: Book, r: redis.Redis) -> None:
    exc = fail_hooked(book, hooked(retry=0))
    [(payload, given)] = HookedJob.exhausted_calls
    assert given is exc and payload["error_message"] == "it broke"
    assert payload["retry_count"] == 0
    assert len(dead(r)) == 1 and len(book.deaths) == 1


def test_retries_exhausted_discard_skips_the_dead_set(book: Book, r: redis.Redis) -> None:
    HookedJob.exhausted = "discard"
    job = hooked(retry=0)
    fail_hooked(book, job)
    assert dead(r) == [] and "discarded_at" in job and len(book.deaths) == 1


def test_retries_exhausted_raising_is_reported_and_the_job_still_dies(
        book: Book, r: redis.Redis) -> None:
    HookedJob.exhausted = RuntimeError("exhausted hook broke")
    fail_hooked(book, hooked(retry=0))
    assert len(dead(r)) == 1 and len(book.deaths) == 1
    [(error, context)] = book.errors
    assert str(error) == "exhausted hook broke"
    assert context["context"] == "Error calling retries_exhausted"


def test_class_hooks_need_an_instance(book: Book, r: redis.Redis) -> None:
    HookedJob.answer = "kill"  # would kill, but the job failed before it was instantiated
    fail_hooked_without_instance = book.fail(hooked(), definition=HookedJob.definition)
    assert fail_hooked_without_instance is not None
    assert len(retries(r)) == 1


def test_function_job_hooks(book: Book, r: redis.Redis) -> None:
    before = time.time()
    book.fail(new_job(**{"class": "Retry::fn"}), definition=fn_job.definition)
    _, score = only_retry(r)
    assert before + 300 <= score < time.time() + 310
    r.delete("retry")
    job = new_job(**{"class": "Retry::fn"}, retry=0)
    book.fail(job, definition=fn_job.definition)
    assert dead(r) == [] and "discarded_at" in job and len(book.deaths) == 1


def test_hook_options_are_checked_at_registration() -> None:
    with pytest.raises(wurk.RegistrationError, match="retry_in=5 must be a function"):
        wurk.job(name="Retry::bad", retry_in=5)(lambda: None)
    with pytest.raises(wurk.RegistrationError, match="define it as a method"):
        class Bad(wurk.Job, name="Retry::BadClass", retries_exhausted=print):
            pass


def test_dead_false_discards_but_notifies(book: Book, r: redis.Redis) -> None:
    job = new_job(retry=0, dead=False)
    exc = book.fail(job)
    assert dead(r) == [] and retries(r) == []
    assert book.deaths == [(job, exc)] and "discarded_at" in job


def test_dead_false_still_retries_until_exhausted(book: Book, r: redis.Redis) -> None:
    book.fail(new_job(retry=1, dead=False))
    assert len(retries(r)) == 1


# -- backtraces -----------------------------------------------------------------------------------
def deep(level: int) -> None:
    if level == 0:
        raise ValueError("deep")
    deep(level - 1)


def deep_error() -> BaseException:
    try:
        deep(3)
    except ValueError as exc:
        return exc
    raise AssertionError("unreachable")


def test_backtrace_true_stores_every_line_innermost_first(book: Book, r: redis.Redis) -> None:
    exc = deep_error()
    book.fail(new_job(backtrace=True), exc)
    stored, _ = only_retry(r)
    assert re.fullmatch(r"[A-Za-z0-9+/]+=*", stored["error_backtrace"])  # strict base64
    lines = P.decode_backtrace(stored["error_backtrace"])
    assert lines == backtrace_lines(exc)
    assert lines is not None and len(lines) == 5
    assert lines[0].endswith(":in 'deep'") and lines[-1].endswith(":in 'deep_error'")
    assert re.match(r".*test_retry\.py:\d+:in 'deep'$", lines[0])


def test_backtrace_n_stores_the_first_n_lines(book: Book, r: redis.Redis) -> None:
    exc = deep_error()
    book.fail(new_job(backtrace=2), exc)
    stored, _ = only_retry(r)
    assert P.decode_backtrace(stored["error_backtrace"]) == backtrace_lines(exc)[:2]


def test_a_frame_whose_file_name_is_no_utf8_still_books_the_retry(book: Book,
                                                                  r: redis.Redis) -> None:
    """A module loaded from a directory named in another encoding (Latin-1 ``café``) has a
    file name holding a surrogate escape, which UTF-8 cannot carry: the backtrace keeps the
    line with the byte replaced, and the retry is booked."""
    scope: dict[str, Any] = {}
    exec(compile("def boom():\n    raise ValueError('x')\n", "/srv/caf\udce9/jobs.py", "exec"),
         scope)
    exc = raised_by(scope["boom"])
    book.fail(new_job(backtrace=True), exc)
    stored, _ = only_retry(r)
    lines = P.decode_backtrace(stored["error_backtrace"])
    assert lines is not None and lines[0] == "/srv/caf?/jobs.py:2:in 'boom'"
    assert lines == backtrace_lines(exc)


def raised_by(fn: Callable[[], object]) -> BaseException:
    try:
        fn()
    except Exception as exc:
        return exc
    raise AssertionError("did not raise")


def test_backtrace_false_stores_none(book: Book, r: redis.Redis) -> None:
    book.fail(new_job(backtrace=False), deep_error())
    assert "error_backtrace" not in only_retry(r)[0]


# -- death handlers and bad input -----------------------------------------------------------------
def test_death_handlers_run_once_and_a_raising_one_is_contained(book: Book,
                                                                r: redis.Redis) -> None:
    calls: list[str] = []

    def broken(job: Job, exc: BaseException) -> None:
        calls.append("broken")
        raise RuntimeError("handler broke")

    book.config.death_handlers.insert(0, broken)
    book.fail(new_job(retry=0))
    assert calls == ["broken"] and len(book.deaths) == 1
    assert len(dead(r)) == 1
    assert [str(e) for e, _ in book.errors] == ["handler broke"]


def test_kill_invalid_sends_straight_to_the_dead_set(book: Book, r: redis.Redis) -> None:
    job = new_job(retry=5, args="not a list")
    try:
        P.validate(job)
    except InvalidPayload as exc:
        error = exc
    before = time.time()
    book.retry.kill_invalid(job, error)
    assert retries(r) == []
    [stored] = dead(r)
    assert stored["error_class"] == "wurk.InvalidPayload"
    assert "'args'" in stored["error_message"] and "an array" in stored["error_message"]
    assert stored["retry_count"] == 0 and stored["failed_at"] >= int(before * 1000)
    assert stored["args"] == "not a list"  # kept as it was
    assert book.deaths == [(job, error)]


def test_kill_invalid_keeps_an_existing_failure_history(book: Book, r: redis.Redis) -> None:
    job = new_job(retry_count=4, failed_at=1700000000000)
    book.retry.kill_invalid(job, InvalidPayload("bad", field="x"))
    [stored] = dead(r)
    assert stored["retry_count"] == 4 and stored["failed_at"] == 1700000000000


def test_handle_routes_an_invalid_payload_to_kill_invalid(book: Book, r: redis.Redis) -> None:
    book.fail(new_job(retry="sometimes"))
    assert retries(r) == []
    [stored] = dead(r)
    assert stored["error_class"] == "wurk.InvalidPayload" and "'retry'" in stored[
        "error_message"]
    assert len(book.deaths) == 1


def test_redis_outage_while_booking_raises_redis_unavailable(redis_server: Any) -> None:
    from tests.helpers.server import free_port
    from wurk.connections.pool import RedisPool

    config = Config()
    pool = RedisPool(f"redis://127.0.0.1:{free_port()}/0", socket_timeout=0.5)
    retry = JobRetry(config, Morgue(config, pool), pool)
    with pytest.raises(wurk.RedisUnavailable):
        retry.handle(new_job(), raised(ValueError("x")), definition=None, instance=None)
    pool.close()
    config.close()


@pytest.mark.parametrize("named", [None, "elsewhere"])
def test_a_failing_job_retries_to_the_queue_it_came_from(
        config: Config, r: redis.Redis, named: str | None) -> None:
    # Sidekiq writes the queue a failing job was fetched from (``msg["queue"] =
    # msg["retry_queue"] || queue``): without one the retry came due to "default", where no
    # worker of "critical" looks; with another (a job moved by hand, by another tool) wurk
    # sent the retry there while Sidekiq sends it back where it was found.
    from tests.helpers.runner import Drain

    job = {"class": "Retry::Plain", "args": [], "jid": P.new_jid(), "retry": 3}
    if named is not None:
        job["queue"] = named
    r.sadd("queues", "critical")
    r.lpush("queue:critical", json.dumps(job))
    drain = Drain(config, "critical")
    try:
        assert drain() == 1
    finally:
        drain.close()
    stored, _ = only_retry(r)
    assert stored["queue"] == "critical" and stored["retry_count"] == 0


@wurk.job(name="Retry::Mutated", retry=3)
def mutated_job(record_id: int) -> None:
    raise ValueError("it broke")


@wurk.job(name="Retry::MutatedAsync", retry=3)
async def mutated_async_job(record_id: int) -> None:
    raise ValueError("it broke")


def loads_record(job: Any, payload: Job, queue: str, call_next: Any) -> Any:
    # What a server middleware commonly does: hand the job a loaded object for an id, and
    # keep something of its own in the payload for the links inside it.
    payload["args"] = [{"loaded": payload["args"][0]}]
    payload["started"] = object()  # not JSON: a retry written from this could not be stored
    return call_next()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_server_middleware_changes_do_not_leak_into_the_retry(
        config: Config, r: redis.Redis, kind: str) -> None:
    # Sidekiq books a failure from the payload as it was fetched (the retry path re-reads
    # the job's string): what a server middleware did to the payload for its run is not
    # written into the retry. wurk wrote the changed payload — here one holding an object
    # JSON cannot carry, so the booking failed and the job went to the dead set instead.
    from tests.helpers.runner import AsyncDrain, Drain

    config.server_middleware.add(loads_record)
    job = mutated_job if kind == "sync" else mutated_async_job
    jid = job.perform_async(7)
    drain = (Drain if kind == "sync" else AsyncDrain)(config)
    try:
        assert drain() == 1
    finally:
        drain.close()
    assert dead(r) == []
    stored, _ = only_retry(r)
    assert stored["jid"] == jid and stored["args"] == [7] and "started" not in stored
    assert stored["retry_count"] == 0 and stored["error_message"] == "it broke"
