"""Rows an extension adds to a job's info table (``Extension.job_rows``): on every page that
shows one job's facts, after the built-in rows, escaped, and contained when they fail."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pytest
import redis
from markupsafe import Markup
from starlette.testclient import TestClient

import wurk
from tests.web.conftest import XSS, browse, job, seed_process, seed_sets
from wurk.web import Extension, JobRows, create_app

CONTEXT = "web-extension-job-rows"


def rows_client(config: wurk.Config, *renderers: tuple[str, JobRows]) -> TestClient:
    extensions = [Extension(name, None, job_rows=renderer) for name, renderer in renderers]
    return browse(create_app(config, extensions=extensions))


def entry_path(client: TestClient, kind: str) -> str:
    key = client.get(f"/api/{kind}").json()["entries"][0]["key"]
    return f"/{kind}/{key}"


def account(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [("Account", f"acct-{record['jid'][-3:]}"), ("Shown args", str(record["args"]))]


def audit(record: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    yield "Audit", XSS


def failing_rows(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [rec for rec in caplog.records
            if rec.levelno >= logging.ERROR and CONTEXT in rec.getMessage()]


@pytest.mark.parametrize("kind", ["retries", "scheduled", "morgue"])
def test_rows_follow_the_built_in_ones_in_order_and_escaped(config: wurk.Config,
                                                            kind: str) -> None:
    seed_sets(config, 1)
    with rows_client(config, ("accounts", account), ("audit", audit)) as client:
        page = client.get(entry_path(client, kind))
    assert page.status_code == 200
    text = page.text
    positions = [text.index(f"<dt>{label}</dt>")
                 for label in ("Enqueued", "Account", "Shown args", "Audit")]
    assert positions == sorted(positions)
    assert "<dd>acct-" in text
    assert "<dd>&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;</dd>" in text
    assert XSS not in text
    assert "<dd>(" in text  # the arguments as the renderer saw them: a tuple


def test_busy_page_shows_the_rows_under_each_running_job(config: wurk.Config,
                                                         r: redis.Redis) -> None:
    identity = seed_process(r)
    work = {"queue": "default", "run_at": time.time() - 1,
            "payload": wurk.payload.dumps(job(8))}
    r.hset(f"{identity}:work", "tid-2", wurk.payload.dumps(work))
    with rows_client(config, ("accounts", account), ("audit", audit)) as client:
        page = client.get("/busy")
    assert page.status_code == 200
    text = page.text
    assert text.count('<span class="muted">Account:</span>') == 2
    assert "acct-007" in text and "acct-008" in text
    assert text.index("acct-007") < text.index("Shown args") < text.index("Audit:")
    assert "&lt;script&gt;alert" in text and XSS not in text


def test_markup_is_the_extensions_own_choice(config: wurk.Config) -> None:
    seed_sets(config, 1)

    def linked(record: Mapping[str, Any]) -> list[tuple[str, str]]:
        return [("Ticket", Markup('<a href="/t/{}">ticket</a>').format(record["jid"]))]

    with rows_client(config, ("tickets", linked)) as client:
        text = client.get(entry_path(client, "retries")).text
    assert '<a href="/t/000000000000000000000000">ticket</a>' in text


def test_a_raising_renderer_is_one_error_row_and_one_log_record(
        config: wurk.Config, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    seed_sets(config, 1)

    def broken(record: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
        yield "Half", "done"
        raise RuntimeError("secret at /srv/app/.env")

    caplog.set_level(logging.DEBUG, logger="wurk")  # its traceback is at DEBUG; an earlier
    # test may have left the wurk logger at INFO, which the root's level alone does not undo
    with rows_client(config, ("accounts", account), ("broken", broken)) as client:
        page = client.get(entry_path(client, "retries"))
    assert page.status_code == 200
    assert "<dt>Account</dt>" in page.text  # the others' rows stay
    assert ('<dt>broken</dt><dd class="invalid">Extension job rows failed: RuntimeError '
            "(see server logs)</dd>") in page.text
    assert "secret" not in page.text and "<dt>Half</dt>" not in page.text
    [logged] = failing_rows(caplog)
    assert "RuntimeError: secret at /srv/app/.env" in logged.getMessage()
    assert any(rec.exc_info and rec.exc_info[1] is not None
               and "secret" in str(rec.exc_info[1]) for rec in caplog.records)

    caplog.clear()  # the busy page: two jobs fail, one report
    identity = seed_process(r)
    work = {"queue": "default", "run_at": time.time(), "payload": wurk.payload.dumps(job(8))}
    r.hset(f"{identity}:work", "tid-2", wurk.payload.dumps(work))
    with rows_client(config, ("broken", broken)) as client:
        busy = client.get("/busy")
    assert busy.status_code == 200
    assert busy.text.count("Extension job rows failed: RuntimeError") == 2
    assert len(failing_rows(caplog)) == 1


@pytest.mark.parametrize(("answer", "said"), [
    (None, "answered NoneType"),
    ("Account: 7", "answered str"),
    ({"Account": "7"}, "answered dict"),
    ([("Account", "7", "extra")], "row 1 is (str, str, str)"),
    ([("Account", "7"), ("Count", 7)], "row 2 is (str, int)"),
    ([["Account", "7"]], "row 1 is a list"),
])
def test_a_wrong_shape_is_an_error_row_saying_what_came(
        config: wurk.Config, caplog: pytest.LogCaptureFixture, answer: Any, said: str) -> None:
    seed_sets(config, 1)

    def wrong(record: Mapping[str, Any]) -> Any:
        return answer

    with rows_client(config, ("wrong", wrong)) as client:
        page = client.get(entry_path(client, "morgue"))
    assert page.status_code == 200
    assert '<dt>wrong</dt><dd class="invalid">Extension job rows not shown: job_rows' in page.text
    assert said in page.text and "(label, text) pair" in page.text
    assert "<dt>Account</dt>" not in page.text
    [logged] = failing_rows(caplog)
    assert said in logged.getMessage()


def test_the_renderer_gets_a_read_only_copy_of_the_record(config: wurk.Config) -> None:
    seed_sets(config, 1)
    seen: list[Mapping[str, Any]] = []

    def meddling(record: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
        seen.append(record)
        record["payload"]["args"].append("more")  # a tuple: AttributeError
        return []

    with rows_client(config, ("meddling", meddling)) as client:
        path = entry_path(client, "retries")
        page = client.get(path)
        stored = client.get(f"/api{path}").json()
    assert "Extension job rows failed: AttributeError" in page.text
    [record] = seen
    assert record["jid"] == stored["jid"] and record["key"] == stored["key"]
    assert record["args"] == (0, "two") and stored["args"] == [0, "two"]
    assert record["error_message"] == "boom 0"
    with pytest.raises(TypeError):
        record["jid"] = "x"  # type: ignore[index]
    assert not hasattr(record, "delete")


def test_an_extension_with_rows_only_adds_no_tab(config: wurk.Config) -> None:
    seed_sets(config, 1)
    with rows_client(config, ("accounts", account)) as client:
        home = client.get("/").text
        assert 'href="/accounts"' not in home
        assert "<dt>Account</dt>" in client.get(entry_path(client, "scheduled")).text


def test_job_rows_must_be_a_function() -> None:
    with pytest.raises(wurk.ConfigError, match="job_rows must be a function"):
        Extension("accounts", None, job_rows=[account])  # type: ignore[arg-type]
