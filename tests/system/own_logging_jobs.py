"""A job module that configures logging itself, as an application does: the worker must
leave that configuration exactly as it is."""

from __future__ import annotations

import logging
import sys

import wurk
from tests.system.worker_jobs import r

logging.basicConfig(stream=sys.stdout, level=logging.INFO,
                    format="OWN|%(levelname)s|%(name)s|%(message)s")
log = logging.getLogger("myapp.own")


@wurk.job(name="Sys::OwnLog")
def own_log(key: str) -> None:
    log.info("hello in my own format")
    r().rpush(key, "1")
