"""A job's own log lines, as a worker writes them: ``start`` / ``done`` / ``fail`` carry the
job's context (jid, class — the wrapped one when there is one — queue, the payload fields of
``logged_job_attributes``) and, on ``done`` and ``fail``, ``elapsed``, as Sidekiq's job
logger puts it in the context."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

import wurk
from tests.helpers.runner import AsyncDrain, Drain
from wurk import log as wurk_log


@wurk.job(name="loglines.ok")
def ok(n: int) -> None:
    logging.getLogger("wurk").info("working on %s", n)


@wurk.job(name="loglines.boom", retry=0, dead=False)
def boom(n: int) -> None:
    raise RuntimeError(f"boom {n}")


@wurk.job(name="loglines.aok")
async def aok(n: int) -> None:
    return None


@pytest.fixture
def config(redis_server: Any) -> wurk.Config:
    return wurk.configure(redis_url=redis_server.url)


@pytest.fixture
def out() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = wurk_log.setup(fmt="json", level="INFO", stream=stream)
    try:
        yield stream
    finally:
        wurk_log.logger.removeHandler(handler)
        wurk_log.logger.setLevel(logging.NOTSET)


def written(stream: io.StringIO) -> list[dict[str, Any]]:
    wurk_log.flush()
    return [json.loads(text) for text in stream.getvalue().splitlines()]


def _by_msg(found: list[dict[str, Any]], msg: str) -> list[dict[str, Any]]:
    return [entry for entry in found if entry["msg"] == msg]


def test_done_and_fail_lines_carry_elapsed_in_the_context(config: wurk.Config,
                                                          out: io.StringIO) -> None:
    done_jid = ok.set(tags=["vip"]).perform_async(1).jid
    fail_jid = boom.perform_async(2).jid
    drain = Drain(config)
    drain()
    drain.close()
    found = written(out)
    done = _by_msg(found, "done")
    fail = _by_msg(found, "fail")
    assert len(done) == 1 and len(fail) == 1, [entry["msg"] for entry in found]
    assert done[0]["ctx"]["jid"] == done_jid and done[0]["ctx"]["class"] == "loglines.ok"
    assert done[0]["ctx"]["tags"] == ["vip"]
    assert isinstance(done[0]["ctx"]["elapsed"], float) and done[0]["ctx"]["elapsed"] >= 0
    assert fail[0]["ctx"]["jid"] == fail_jid and isinstance(fail[0]["ctx"]["elapsed"], float)
    # the job's own lines, before it ended, carry no elapsed
    working = _by_msg(found, "working on 1")
    assert working and "elapsed" not in working[0]["ctx"]


def test_an_async_jobs_done_line_carries_elapsed(config: wurk.Config,
                                                 out: io.StringIO) -> None:
    jid = aok.perform_async(1).jid
    drain = AsyncDrain(config)
    drain()
    drain.close()
    done = _by_msg(written(out), "done")
    assert len(done) == 1 and done[0]["ctx"]["jid"] == jid
    assert isinstance(done[0]["ctx"]["elapsed"], float)


def test_pretty_lines_show_elapsed_as_a_field(config: wurk.Config) -> None:
    out = io.StringIO()
    handler = wurk_log.setup(fmt="plain", level="INFO", stream=out)
    try:
        jid = ok.perform_async(3).jid
        drain = Drain(config)
        drain()
        drain.close()
        wurk_log.flush()
    finally:
        wurk_log.logger.removeHandler(handler)
        wurk_log.logger.setLevel(logging.NOTSET)
    done = [line for line in out.getvalue().splitlines() if line.endswith("INFO: done")]
    assert len(done) == 1 and f"jid={jid}" in done[0] and " elapsed=" in done[0]
