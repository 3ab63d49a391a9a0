"""Jobs that log through the application's own loggers (loaded with ``-r`` next to
``worker_jobs``); the worker configures nothing of logging for them but wurk's handler."""

from __future__ import annotations

import logging

import wurk
from tests.system.worker_jobs import r

log = logging.getLogger("myapp.jobs")


@wurk.job(name="Sys::AppLog")
def app_log(key: str) -> None:
    log.info("hello from myapp")
    log.warning("careful from myapp")
    r().rpush(key, wurk.current_jid() or "?")
