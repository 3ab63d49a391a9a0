"""Error and death handlers: both arities, containment, and the log when nobody listens."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from wurk.config import Config
from wurk.reporting import log_error, report_error, run_death_handlers


def boom(message: str = "boom") -> ValueError:
    try:
        raise ValueError(message)
    except ValueError as exc:
        return exc


def test_three_argument_handler_gets_the_config() -> None:
    config = Config()
    seen: list[tuple[Any, ...]] = []
    config.error_handlers.append(lambda exc, ctx, cfg: seen.append((exc, ctx, cfg)))
    exc = boom()
    report_error(config, exc, {"context": "test"})
    assert seen == [(exc, {"context": "test"}, config)]


def test_legacy_two_argument_handlers_still_work() -> None:
    config = Config()
    seen: list[tuple[Any, ...]] = []

    class Legacy:
        def __call__(self, exc: BaseException, ctx: dict[str, Any]) -> None:
            seen.append(("method", exc, ctx))

    def legacy(exc: BaseException, ctx: dict[str, Any]) -> None:
        seen.append(("function", exc, ctx))

    def variadic(*args: Any) -> None:
        seen.append(("variadic", len(args)))

    config.error_handlers.extend([Legacy(), legacy, variadic])
    exc = boom()
    for _ in range(2):  # the second call uses the cached arity
        report_error(config, exc, {"context": "x"})
    assert seen.count(("method", exc, {"context": "x"})) == 2
    assert seen.count(("function", exc, {"context": "x"})) == 2
    assert seen.count(("variadic", 3)) == 2


def test_raising_handler_is_logged_and_the_others_still_run(
        caplog: pytest.LogCaptureFixture) -> None:
    config = Config()
    seen: list[str] = []

    def broken(exc: BaseException, ctx: dict[str, Any], cfg: Config) -> None:
        raise RuntimeError("handler broke")

    config.error_handlers.extend([broken, lambda exc, ctx, cfg: seen.append(str(exc))])
    with caplog.at_level(logging.ERROR, logger="wurk"):
        report_error(config, boom("original"), {"context": "x"})
    assert seen == ["original"]
    assert "handler broke" in caplog.text and "broken" in caplog.text


def test_without_handlers_the_error_is_logged_one_line_then_the_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    config = Config()
    with caplog.at_level(logging.DEBUG, logger="wurk"):
        report_error(config, boom("it failed"), {"context": "scheduler",
                                                 "job": {"class": "Hard", "jid": "j1"}})
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    line = errors[0].getMessage()
    assert "\n" not in line
    assert "scheduler" in line and "ValueError: it failed" in line and "jid=j1" in line
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert debug and debug[0].exc_info is not None


def test_an_appended_handler_keeps_the_default_log(caplog: pytest.LogCaptureFixture) -> None:
    """Sidekiq's error handlers start with one that logs, so appending a
    Sentry handler adds to the log line rather than replacing it; removing ``log_error``
    leaves only the application's handlers."""
    config = Config()
    assert config.error_handlers == [log_error]
    seen: list[str] = []
    config.error_handlers.append(lambda exc, ctx, cfg: seen.append(str(exc)))
    with caplog.at_level(logging.ERROR, logger="wurk"):
        report_error(config, boom("logged too"), {"context": "Job raised exception"})
    assert seen == ["logged too"]
    assert "Job raised exception" in caplog.text and "ValueError: logged too" in caplog.text
    caplog.clear()
    config.error_handlers.remove(log_error)
    with caplog.at_level(logging.ERROR, logger="wurk"):
        report_error(config, boom("handled elsewhere"), {"context": "x"})
    assert seen == ["logged too", "handled elsewhere"]
    assert "handled elsewhere" not in caplog.text
    config.error_handlers.clear()  # nobody listens: logged all the same, never lost
    with caplog.at_level(logging.ERROR, logger="wurk"):
        report_error(config, boom("nobody listens"), {"context": "x"})
    assert "nobody listens" in caplog.text


def test_death_handlers_get_job_and_exception_and_a_raising_one_is_reported() -> None:
    config = Config()
    calls: list[tuple[Any, ...]] = []
    reported: list[tuple[BaseException, dict[str, Any]]] = []

    def broken(job: dict[str, Any], exc: BaseException) -> None:
        raise KeyError("death handler broke")

    config.death_handlers.extend([broken, lambda job, exc: calls.append((job, exc))])
    config.error_handlers.append(lambda exc, ctx, cfg: reported.append((exc, ctx)))
    job = {"class": "X", "args": []}
    exc = boom()
    run_death_handlers(config, job, exc)
    assert calls == [(job, exc)]
    assert len(reported) == 1
    assert isinstance(reported[0][0], KeyError)
    assert reported[0][1] == {"context": "Error calling death handler", "job": job}
