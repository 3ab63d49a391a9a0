"""A logging handler of the application's that raises on every record: the job's own lines
(``start``, ``done``, ``fail``) must not take the job with them. A failure is still booked
in the retry set, a success still counted and acknowledged, and the runner goes on."""

from __future__ import annotations

import logging

import pytest
import redis

import wurk
from tests.helpers.runner import Drain
from tests.helpers.server import Server
from wurk import log as wurk_log


@wurk.job(name="RaisingLog::Ok")
def ok() -> None:
    pass


@wurk.job(name="RaisingLog::Fails", retry=3)
def fails() -> None:
    raise RuntimeError("fails on purpose")


class Raising(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        raise RuntimeError("the log collector is down")


def test_a_raising_handler_loses_no_job(redis_server: Server, r: redis.Redis,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    config = wurk.configure(redis_url=redis_server.url)
    r.flushdb()
    drain = Drain(config)
    assert drain.fetcher.fetch(0.01) is None  # its connection made (its line logged) first
    fails.perform_async()
    ok.perform_async()
    handler = Raising()
    level = wurk_log.logger.level
    wurk_log.logger.addHandler(handler)
    wurk_log.logger.setLevel(logging.DEBUG)
    try:
        assert drain() == 2
    finally:
        wurk_log.logger.removeHandler(handler)
        wurk_log.logger.setLevel(level)
        drain.close()
    assert r.zcard("retry") == 1  # the failure booked, not dropped with its log line
    assert drain.counters.total_processed == 2
    assert "the log collector is down" in capsys.readouterr().err  # said, as logging says
