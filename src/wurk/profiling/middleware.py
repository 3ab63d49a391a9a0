"""``JobProfiler``: the built-in server middleware that runs a job carrying ``profile`` under
pyinstrument, and stores the profile of a run that succeeded.

1. A job without ``profile`` costs one dict lookup. One with it runs under a pyinstrument
   profiler sampling every millisecond (``profiler_options={"interval": µs}`` changes that,
   as Vernier's option does in Ruby): a sync job in its own thread (``async_mode
   "disabled"``: the job's thread is all the job), an ``async def`` job in its own task
   (``"enabled"``: the time it awaits is shown as ``[await]``, other jobs' tasks on the loop
   are not in it; a task the job starts inherits its context, so is). The link is innermost
   of the built-ins (``wurk.launcher.BUILT_IN``), so the application's server middleware is
   in the profile with the job, as in Sidekiq.
2. A run that raised (a failure, a rate limit's reschedule, the shutdown) stores nothing; a
   run that returned is rendered and stored (``wurk.profiling.record``) before the job is
   acknowledged — off the event loop for an async job.
3. Without pyinstrument (``pip install 'wurk[profile]'``) the job runs unprofiled and the
   process logs one warning naming the extra; a ``profile`` that is no usable token (not a
   string, empty, too long) or ``profiler_options`` wurk cannot honour are said in a warning
   and the job runs unprofiled, or with the default interval. Profiling never fails a job.
4. pyinstrument is imported on the first profiled job, so a worker that never meets one
   never loads it.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from .. import payload as P
from ..asyncjobs import bookkeeping
from ..config import Config
from ..errors import ConfigError
from ..middleware import AWAIT
from ..options import PROFILE_TOKEN_MAX, check_profiler_options
from .record import Run, capped, store

__all__ = ["DEFAULT_INTERVAL", "EXTRA", "JobProfiler"]

log = logging.getLogger("wurk")

# pyinstrument's own default: a sample a millisecond (Vernier's is 0.5 ms).
DEFAULT_INTERVAL = 0.001
EXTRA = "pip install 'wurk[profile]'"
PROFILE = P.PROFILE  # bound once: looked up for every job


# Held while ``_pyinstrument`` is looked up: the cache keeps its answer, but two jobs asking
# first at once would each look (and each say that pyinstrument is missing).
_LOOKUP = threading.Lock()


def _profiler_tools() -> tuple[Any, Any] | None:
    with _LOOKUP:
        return _pyinstrument()


@functools.cache
def _pyinstrument() -> tuple[Any, Any] | None:
    """pyinstrument's ``Profiler`` and speedscope renderer, or None (said once a process)."""
    try:
        from pyinstrument import Profiler
        from pyinstrument.renderers.speedscope import SpeedscopeRenderer
    except ImportError:
        log.warning("a job asked to be profiled, but pyinstrument is not installed: jobs "
                    "with profile= run unprofiled until it is (%s)", EXTRA)
        return None
    return Profiler, SpeedscopeRenderer


def _interval(options: Any, jid: str) -> float:
    """Seconds between samples: ``profiler_options["interval"]`` (µs) when wurk can honour
    the options, else the default, with a warning."""
    if options is None:
        return DEFAULT_INTERVAL
    try:
        check_profiler_options(options, where=f"job {jid}")
    except ConfigError as exc:
        log.warning("%s: profiled with the default interval instead", exc)
        return DEFAULT_INTERVAL
    return int(options.get("interval", DEFAULT_INTERVAL * 1e6)) / 1e6


@dataclass
class Sampling:
    """One job's profiler, from its start to its end."""

    profiler: Any
    renderer: Any
    token: str
    payload: P.Payload
    started_at: float
    started: float  # perf_counter

    @classmethod
    def begin(cls, payload: P.Payload, mode: Literal["disabled", "enabled"]
              ) -> Sampling | None:
        token, jid = payload.get(PROFILE), str(payload.get(P.JID))
        if not isinstance(token, str) or not token or len(token) > PROFILE_TOKEN_MAX:
            log.warning("profile=%.120r is not a token wurk can store (a non-empty string of "
                        "at most %d characters): the job runs unprofiled", token,
                        PROFILE_TOKEN_MAX)
            return None
        tools = _profiler_tools()
        if tools is None:
            return None
        profiler_class, renderer = tools
        profiler = profiler_class(interval=_interval(payload.get(P.PROFILER_OPTIONS), jid),
                                  async_mode=mode)
        try:
            profiler.start(target_description=f"{job_type(payload)} {jid}")
        except (RuntimeError, ValueError) as exc:  # another profiler holds this thread/task
            log.warning("the job could not be profiled (%s): it runs unprofiled", exc)
            return None
        return cls(profiler, renderer, token, payload, time.time(), time.perf_counter())

    def discard(self) -> None:
        self.profiler.stop()

    def end(self) -> tuple[Run, Callable[[float], str]]:
        """Stop sampling: the run, and how to render it at a given threshold."""
        elapsed = time.perf_counter() - self.started
        session = self.profiler.stop()
        payload = self.payload
        run = Run(token=self.token, jid=str(payload.get(P.JID)), type=job_type(payload),
                  started_at=self.started_at, elapsed=elapsed)

        def render(threshold: float) -> str:
            options = {"filter_threshold": threshold}
            return str(self.renderer(processor_options=options).render(session))

        return run, render


def job_type(payload: P.Payload) -> str:
    """The class a profile is filed under: an ActiveJob wrapper's job, as Sidekiq files it."""
    wrapped = payload.get(P.WRAPPED)
    return wrapped if isinstance(wrapped, str) and wrapped else str(payload.get(P.CLASS))


class JobProfiler:
    """Server middleware: a job with ``profile`` runs under the profiler."""

    wurk_keys = frozenset({PROFILE})  # every other job's walk leaves it out

    def __init__(self, config: Config) -> None:
        self.config = config

    def __call__(self, job: Any, payload: P.Payload, queue: str,
                 call_next: Callable[[], Any]) -> Any:
        if PROFILE not in payload:
            return call_next()
        sampling = Sampling.begin(payload, "disabled")
        if sampling is None:
            return call_next()
        try:
            result = call_next()
        except BaseException:
            sampling.discard()
            raise
        self.keep(*sampling.end())
        return result

    async def acall(self, job: Any, payload: P.Payload, queue: str,
                    call_next: Callable[[], Any]) -> Any:
        if PROFILE not in payload:
            return await call_next()
        sampling = Sampling.begin(payload, "enabled")
        if sampling is None:
            return await call_next()
        try:
            result = await call_next()
        except BaseException:
            sampling.discard()
            raise
        await bookkeeping(self.keep, *sampling.end())
        return result

    def wurk_plan(self, job: Any, payload: P.Payload, queue: str) -> object | None:
        """A job to profile: ``acall``; any other: nothing (no frame on its await chain)."""
        return None if PROFILE not in payload else AWAIT

    def keep(self, run: Run, render: Callable[[float], str]) -> None:
        """Render within the cap and store; nothing here can fail the job."""
        store(self.config, run, capped(run, render))
