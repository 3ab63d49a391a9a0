from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

import wurk
from wurk.errors import ConfigError, InvalidArguments, JobNotRegistered, RegistrationError


@wurk.job
def plain(a: int, b: str = "x") -> str:
    return f"{a}{b}"


@wurk.job(queue="critical", retry=3, name="ImageResizer", tags=["img"])
def named(image_id: int) -> None: ...


class HardJob(wurk.Job, queue="hard", retry=5):
    def perform(self, a: int, b: str) -> str:
        return f"{self.jid}:{a}{b}"


class Base(wurk.Job, abstract=True, queue="base", retry=False):
    pass


class Child(Base, retry=2):
    def perform(self) -> None: ...


def test_wire_names_and_options() -> None:
    assert plain.name == "tests.unit.test_job.plain"
    assert plain.definition.options == {}
    assert named.name == "ImageResizer"
    assert named.definition.options == {"queue": "critical", "retry": 3, "tags": ["img"]}
    assert HardJob.definition.name == "tests.unit.test_job.HardJob"
    assert HardJob.definition.options == {"queue": "hard", "retry": 5}
    assert Child.definition.options == {"queue": "base", "retry": 2}
    assert wurk.registry.lookup("ImageResizer") is named.definition
    assert "tests.unit.test_job.Base" not in wurk.registry


def test_decorated_function_is_still_callable() -> None:
    assert plain(1, "y") == "1y"


def test_keyword_arguments_are_bound_to_positions() -> None:
    assert plain.definition.positional((1,), {"b": "z"}) == [1, "z"]
    assert HardJob.definition.positional((), {"a": 1, "b": "q"}) == [1, "q"]
    with pytest.raises(InvalidArguments, match="unexpected keyword argument 'c'"):
        plain.definition.positional((1,), {"c": 2})


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((1,), {}, "add_job(a, b): missing a required argument: 'b'"),
        ((1, 2, 3), {}, "add_job(a, b): too many positional arguments: it takes 2, "
                        "got 3 (extra: 3)"),
        ((1,), {"c": 2}, "add_job(a, b): unexpected keyword argument 'c'"),
        ((1, 2), {"c": 2}, "add_job(a, b): unexpected keyword argument 'c'"),
        ((), {"a": 1}, "add_job(a, b): missing a required argument: 'b'"),
    ],
)
def test_wrong_arguments_are_refused_at_push_naming_the_argument(
        args: tuple[int, ...], kwargs: dict[str, int], message: str) -> None:
    """Refused before anything is sent: the push raises, no job is written (no Redis is
    even reached here), instead of a job that fails every retry for weeks."""
    @wurk.job(name="add_job")
    def add(a, b) -> int:
        return a + b

    try:
        with pytest.raises(InvalidArguments) as caught:
            add.perform_async(*args, **kwargs)
        assert str(caught.value) == message
        with pytest.raises(InvalidArguments, match="missing a required argument: 'b'"):
            add.perform_in(30, 1)
        with pytest.raises(InvalidArguments, match="too many positional arguments"):
            add.perform_bulk([[1, 2], [1, 2, 3]])
    finally:
        wurk.registry.unregister("add_job")


def test_class_jobs_are_checked_without_self() -> None:
    with pytest.raises(InvalidArguments) as caught:
        HardJob.perform_async(1)
    assert str(caught.value) == ("tests.unit.test_job.HardJob(a, b): missing a "
                                 "required argument: 'b'")
    assert HardJob.definition.positional((1, "b"), {}) == [1, "b"]


def test_defaults_and_star_args_are_honoured() -> None:
    @wurk.job(name="varargs_job")
    def many(first: int, *rest: int) -> None: ...

    try:
        assert many.definition.positional((1, 2, 3, 4), {}) == [1, 2, 3, 4]
        assert plain.definition.positional((1,), {}) == [1]
        assert plain.definition.positional((1, "y"), {}) == [1, "y"]
        with pytest.raises(InvalidArguments, match="missing a required argument: 'first'"):
            many.definition.positional((), {})
    finally:
        wurk.registry.unregister("varargs_job")


def test_keyword_only_parameters_cannot_travel() -> None:
    @wurk.job(name="kwonly-job")
    def kwonly(a: int, *, flag: bool) -> None: ...

    with pytest.raises(InvalidArguments, match="keyword-only"):
        kwonly.definition.positional((1,), {"flag": True})


def test_unknown_name_lookup_says_how_to_fix() -> None:
    with pytest.raises(JobNotRegistered, match="load the module that defines it with -r"):
        wurk.registry.lookup("Nope::Missing")


def test_duplicate_wire_name_is_refused() -> None:
    with pytest.raises(RegistrationError, match="already registered"):
        @wurk.job(name="ImageResizer")
        def other(x: int) -> None: ...


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"retry": "yes"}, "retry='yes'"),
        ({"retry": -2}, "retry=-2"),
        ({"queue": ""}, "queue name is empty"),
        ({"queue": 3}, "queue=3"),
        ({"queue": "imports,3"}, "queue='imports,3'"),
        ({"retry_queue": "low,1"}, "retry_queue='low,1'"),
        ({"queue": " imports"}, "queue=' imports'"),
        ({"dead": "no"}, "dead='no'"),
        ({"tags": "a"}, "tags='a'"),
        ({"retry_for": 0}, "retry_for=0"),
        ({"retry_for": float("nan")}, "retry_for=nan"),
        ({"retry_for": float("inf")}, "retry_for=inf"),
        ({"retry_for": timedelta(0)}, "retry_for=datetime.timedelta(0)"),
        ({"retry_for": 10**10}, "at most 1000000000"),
        ({"custom": {1, 2}}, "option 'custom' 0 is set"),
    ],
)
def test_bad_options_are_refused_at_definition(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        wurk.job(name=f"bad-{message}", **options)(lambda: None)
    assert message in str(info.value)


def test_retry_for_takes_a_timedelta_and_rounds_up_to_whole_seconds(
        config: wurk.Config) -> None:
    """retry_for=timedelta(hours=2) passed the option's check, then defining the job raised
    a bare TypeError from int(); a fraction of a second was cut to a window of 0."""
    @wurk.job(name="RetryForTimedelta", retry_for=timedelta(hours=2))
    def hours() -> None: ...

    assert hours.definition.options["retry_for"] == 7200
    assert hours.set(retry_for=timedelta(seconds=1.5)).options["retry_for"] == 2
    assert hours.set(retry_for=0.25).options["retry_for"] == 1


def test_main_module_jobs_need_a_name(tmp_path: Path) -> None:
    script = tmp_path / "main_job.py"
    script.write_text(textwrap.dedent("""
        import wurk
        try:
            @wurk.job
            def f(): ...
        except wurk.RegistrationError as exc:
            print("refused:", exc)
        @wurk.job(name="Named")
        def g(): ...
        print("named ok")
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         check=True).stdout
    assert "refused: job 'f' is defined in __main__" in out
    assert 'name="f"' in out and "named ok" in out


def test_perform_inline_runs_through_middleware_and_round_trips(config: wurk.Config) -> None:
    seen: list[object] = []

    def server_mw(job: object, payload: dict[str, object], queue: str, call_next: object) -> object:
        seen.append((payload["class"], queue))
        return call_next()  # type: ignore[operator]

    config.server_middleware.add(server_mw)
    assert HardJob.perform_inline(1, "b").endswith(":1b")
    assert plain.perform_inline(2) == "2x"
    assert seen == [("tests.unit.test_job.HardJob", "hard"), ("tests.unit.test_job.plain",
                                                              "default")]


def test_perform_sync_is_perform_inline(config: wurk.Config) -> None:
    # Sidekiq 7's alias: code written against it (``HardJob.perform_sync(...)``) ran into an
    # AttributeError.
    assert HardJob.perform_sync(1, "b").endswith(":1b")
    assert plain.perform_sync(2) == "2x"
    assert plain.set(queue="low").perform_sync(3) == "3x"


@pytest.mark.parametrize(("queue", "says"), [("imports|2", "contains '|'"),
                                             ("imports,b", "'imports,b'"),
                                             ("big imports", "has a space in it"),
                                             ("big\timports", "has a space in it")])
def test_a_queue_option_no_worker_could_be_given_is_refused_by_definition_and_set(
    queue: str, says: str
) -> None:
    """docs/jobs-and-pushing.md, Options: `queue` — "no `|`, no `,` and no space in the name:
    no worker could be given it" — refused where the job is defined and where a push sets
    it, before anything could be sent."""
    with pytest.raises(ConfigError, match=re.escape(says)):
        wurk.job(name="JobOptionQueueName::Refused", queue=queue)(lambda: None)
    assert "JobOptionQueueName::Refused" not in wurk.registry.names()
    allowed = wurk.job(name="JobOptionQueueName::Allowed")(lambda: None)
    try:
        with pytest.raises(ConfigError, match=re.escape(says)):
            allowed.set(queue=queue)
    finally:
        wurk.registry.unregister("JobOptionQueueName::Allowed")
