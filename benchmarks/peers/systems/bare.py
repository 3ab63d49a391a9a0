"""The yardstick rows: ``benchmarks/bare_worker.py`` — threads shaped as wurk's (held to one
CPU under SCHED_BATCH, a Lua fetch of eight into a private list, an ACK per job written
without waiting, a buffered ``done`` line per job) and nothing else: no middleware,
retries, metrics, heartbeat or shutdown handling. Run from wurk's interpreter
(``Tools.wurk_bin``), on jobs pushed by wurk. "bare" runs each job's Redis command on the
thread's own connection (as "wurk" runs it through ``wurk.redis()``), "bare_redispy"
through a shared redis-py client (as "wurk_redispy"): what any Python worker of this shape
needs at the least, on this machine and in this run, beside what wurk and Sidekiq take."""

from __future__ import annotations

import os

from ..shared import COUNTER
from . import Argv, System, Tools, python_enqueue


def system(tools: Tools) -> System:
    return _system(tools, "bare", redis_py=False)


def redis_py_jobs(tools: Tools) -> System:
    return _system(tools, "bare_redispy", redis_py=True)


def async_jobs(tools: Tools) -> System:
    """The async row's yardstick: ``benchmarks/bare_async.py``, one thread and one event loop
    fetching eight jobs a round trip, a task a job (sleep 50 ms, INCR through redis-py's
    asyncio client), ACKs carried by the next fetch; nothing else."""
    return _async(tools, "bare_async", from_memory=False,
                  note="the least an asyncio worker does a job (one thread, uvloop, a task "
                       "a job, eight fetched a round trip)")


def async_body(tools: Tools) -> System:
    """The floor beneath it: ``bare_async.py --from-memory``, the queue taken whole at start,
    then the same tasks with no fetch and no ACK: the row's job body alone."""
    return _async(tools, "body_async", from_memory=True,
                  note="--from-memory, the job body alone (the queue taken whole in one "
                       "round trip, then a task a job with no fetch or ACK)")


def _async(tools: Tools, name: str, *, from_memory: bool, note: str) -> System:
    python = tools.wurk_bin("python")
    memory = ["--from-memory"] if from_memory else []

    def workers(processes: int, concurrency: int) -> list[Argv]:
        return [[str(python), "-m", "benchmarks.bare_async", "--concurrency", str(concurrency),
                 "--counter", COUNTER, *memory] for _ in range(processes)]

    return System(
        name=name, enqueue=python_enqueue(python, "wurk"), workers=workers, has_bulk=True,
        unavailable=None if python.exists() else f"{python} missing: run ./scripts/test",
        notes=[f"{name}: benchmarks/bare_async.py, {note}"])


def _system(tools: Tools, name: str, *, redis_py: bool) -> System:
    python = tools.wurk_bin("python")
    cpu = str(max(os.sched_getaffinity(0)))

    def workers(processes: int, concurrency: int) -> list[Argv]:
        # The server comes from REDIS_URL, as every system's does.
        return [[str(python), "-m", "benchmarks.bare_worker", "--concurrency", str(concurrency),
                 "--cpu", cpu, "--counter", COUNTER, *(["--redis-py"] if redis_py else [])]
                for _ in range(processes)]

    body = "a shared redis-py client" if redis_py else "the thread's own connection"
    return System(
        name=name, enqueue=python_enqueue(python, "wurk"), workers=workers, has_bulk=True,
        unavailable=None if python.exists() else f"{python} missing: run ./scripts/test",
        notes=[f"{name}: benchmarks/bare_worker.py, the least a worker of wurk's shape does "
               f"(threads on CPU {cpu}); jobs INCR through {body}"])
