"""Jobs for the fault tests and the chaos run (loaded in-process, or with ``-r`` by a worker).

Every job records each completed run in a *ledger*: a Redis that no fault touches
(``WURK_LEDGER_URL``), so a job's own bookkeeping never fails or repeats because of the
faults under test, and every repeat in the ledger is a repeat by wurk.
"""

from __future__ import annotations

import json
import os
import threading
import time

import redis

import wurk

LEDGER_ENV = "WURK_LEDGER_URL"
RAN = "ledger:ran"  # every completed run's jid, in completion order

_ledger: redis.Redis | None = None
_lock = threading.Lock()


def ledger() -> redis.Redis:
    global _ledger
    with _lock:
        if _ledger is None:
            _ledger = redis.Redis.from_url(os.environ[LEDGER_ENV], socket_timeout=10)
        return _ledger


WHO = "ledger:who"  # [jid, pid, time] of each run, for explaining a repeat


def record() -> None:
    jid = wurk.current_jid() or "?"
    pipe = ledger().pipeline(transaction=False)
    pipe.rpush(RAN, jid)
    pipe.rpush(WHO, f"{jid} {os.getpid()} {time.time():.3f}")
    pipe.execute()


@wurk.job(name="Chaos::Mark")
def mark(pause: float) -> None:
    """A short job: ``pause`` seconds of work, then its run is recorded."""
    time.sleep(pause)
    record()


def _soon(count: int, exc: BaseException) -> float:
    return 0.2


@wurk.job(name="Chaos::Flaky", retry=5, retry_in=_soon)
def flaky(pause: float) -> None:
    """Fails its first run, so it travels through the retry set and the scheduler."""
    time.sleep(pause)
    job = wurk.current_job() or {}
    if job.get("retry_count") is None:
        raise RuntimeError("the first run of a flaky job fails on purpose")
    record()


# A time limit a loaded 2-core machine never reaches with a short job's second run.
TIMED_LIMIT = 2.0


TIMED_STARTED = "ledger:timed:"  # + jid: "pid time" of a timed job's first start


@wurk.job(name="Chaos::Timed", retry=5, retry_in=_soon, timeout=TIMED_LIMIT)
def timed(pause: float) -> None:
    """Runs past its time limit the first time it starts (a Python loop that only the
    limit's ``JobTimeout`` stops), so it travels through the retry set; then it passes.
    Only the first start, as the ledger knows it: a run a kill cut short and the reaper
    returned must not spin again, or three kills within its runs make it a poison pill."""
    job = wurk.current_job() or {}
    first = ledger().set(f"{TIMED_STARTED}{wurk.current_jid()}",
                         f"{os.getpid()} {time.time():.3f}", nx=True)
    if job.get("retry_count") is None and first:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            pass
    time.sleep(pause)
    record()


UNIQUE_RUNS = "ledger:unique"  # JSON [key, jid, pid, started, ended] of each completed run
UNIQUE_FOR = 60  # longer than the chaos run: no lock expires on its own while it lasts


@wurk.job(name="Chaos::Unique", unique_for=UNIQUE_FOR)
def unique_run(key: int, pause: float) -> None:
    """A unique job per ``key``: its run is recorded with when it started and ended."""
    started = time.time()
    time.sleep(pause)
    ledger().rpush(UNIQUE_RUNS, json.dumps([key, wurk.current_jid(), os.getpid(), started,
                                            time.time()]))


CALLBACKS = "ledger:callbacks"  # event:bid:jid of each batch callback run


@wurk.job(name="Chaos::BatchCallback")
def batch_callback(status: wurk.BatchStatus, options: dict[str, str]) -> None:
    """Records the run of a batch callback: one jid twice is a rerun after a fault; two
    jids for one event of one batch would be the callback fired twice."""
    ledger().rpush(CALLBACKS, f"{options['event']}:{status.bid}:{wurk.current_jid()}")
