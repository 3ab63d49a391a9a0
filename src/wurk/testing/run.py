"""Running one job in the calling thread, as a worker would: ``wurk.testing``'s inline mode,
``drain()`` and ``perform_one()``.

1. The job gets a JSON round-tripped copy of its payload (what a worker would fetch).
2. It runs through a server middleware chain: the configuration's own unless the mode was
   given another, so middleware a framework adds (an app context, database connections,
   saved context variables) wraps it as in the worker. An async link runs as the worker
   runs one around a sync job: on an event loop of its own (``middleware.on_own_loop``),
   its ``await call_next()`` running the job back in this thread.
3. ``current_job()`` / ``current_jid()`` answer inside it; an ``async def`` job runs to
   completion on an event loop of its own (on a helper thread when this thread already
   runs one, as an async test or endpoint does).
4. An exception propagates to the caller: tests see the failure, nothing is retried.
5. A job that keeps its result (``result_ttl``) keeps its outcome in memory
   (``wurk.results.recorder.keeping_outcome``): ``handle.result()`` reads it back, and a
   value JSON cannot store fails the run with ``wurk.UnstorableResult`` as in a worker.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Coroutine
from typing import Any

from .. import payload as P
from ..batch import install as install_batches
from ..config import Config
from ..crypto import sealed_args
from ..job import registry, reset_running, set_running
from ..middleware import Chain, on_own_loop
from ..results.recorder import keeping_outcome

__all__ = ["perform"]

# A coroutine run on a helper thread is waited for this long at most: a test that hangs
# should fail, not stop the suite.
ASYNC_JOB_TIMEOUT = 300.0


def perform(payload: P.Payload, config: Config, chain: Chain | None = None) -> Any:
    """Run the job ``payload`` describes now; returns what it returned."""
    job = P.validate(P.loads(P.dumps(payload)))
    definition = registry.lookup(job[P.CLASS])
    instance = definition.instantiate(job)

    def run() -> Any:
        # An encrypted argument is opened here as a worker's built-in link opens it, whatever
        # middleware the test gave.
        opened = sealed_args(config, job)
        return _finish(definition.call(instance, job[P.ARGS] if opened is None else opened))

    install_batches(config)  # a worker's launcher would have: batch jobs are counted
    middleware = chain if chain is not None else config.server_middleware
    token = set_running(job)
    try:
        # An async link runs as the worker runs it around a sync job: on a loop of its own,
        # the rest of the chain back in this thread.
        # A job keeping its result (``result_ttl``) keeps it in memory, as a worker's
        # results link stores it in Redis around the rest of the chain.
        return keeping_outcome(instance, job, lambda: middleware.invoke(
            instance, job, job.get(P.QUEUE, P.DEFAULT_QUEUE), run, run_async=on_own_loop))
    finally:
        reset_running(token)


def _finish(result: Any) -> Any:
    if not inspect.iscoroutine(result):
        return result
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(result)
    return _run_elsewhere(result)


def _run_elsewhere(coro: Coroutine[Any, Any, Any]) -> Any:
    """``asyncio.run`` cannot nest: a loop on a helper thread, in this thread's context."""
    context = contextvars.copy_context()
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = context.run(asyncio.run, coro)
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="wurk-testing-async", daemon=True)
    thread.start()
    thread.join(ASYNC_JOB_TIMEOUT)
    if thread.is_alive():
        raise TimeoutError(f"an async job ran longer than {ASYNC_JOB_TIMEOUT} s in a test")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")
