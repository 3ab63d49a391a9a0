"""Where errors and deaths are announced: error handlers and death handlers, contained.

1. ``report_error`` hands an exception and its context to every ``config.error_handlers``
   entry, accepting Sidekiq 8's ``(exc, context, config)`` and the older ``(exc, context)``
   form (Sidekiq's change of arity broke third-party handlers; both keep working). The list
   starts with ``log_error``, as Sidekiq's starts with its logging handler: a handler
   appended (Sentry) adds to the log line, it does not replace it. With the list emptied it
   logs the error all the same. While a worker waits for a Redis that has not
   answered since boot, a ``RedisUnavailable`` is not reported: the wait says it once
   (``wurk.connections.unreached``).
2. ``run_death_handlers`` calls every ``config.death_handlers`` entry with ``(job, exc)``
   (the API's kill skips the one that stores a result: it stored it itself).
3. ``fire``: a lifecycle event's hooks (``config.on``), each contained.
4. ``Callbacks``: a list of callbacks for an event other code listens to (a poison pill
   killed, a job expired). ``add(fn)`` registers ``fn`` once (the same callable twice is one
   entry) and returns a ``Registration`` whose ``remove()`` may be called any number of
   times; ``notify(config, value, context)`` calls each with ``value``.
5. A handler or callback that raises is logged (death handlers: reported; callbacks: handed
   to the error handlers) and never propagates, and the others still run: reporting must
   not turn one failure into two.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from . import payload as P
from .log import log_error

if TYPE_CHECKING:
    from .config import Config

__all__ = ["Callbacks", "Registration", "fire", "log_error", "report_error",
           "run_death_handlers"]

log = logging.getLogger("wurk")

# Handler → takes the config as a third argument. The handler object is kept with its flag
# so its id cannot be reused by another object while the entry exists.
_arity: dict[int, tuple[object, bool]] = {}
_arity_lock = threading.Lock()


def report_error(config: Config, exc: BaseException, context: dict[str, Any]) -> None:
    """Give ``exc`` to every error handler; log it when there is none."""
    if config.unreached.absorbs(exc):
        log.debug("%s: %s (Redis has not answered since boot)", context.get("context"), exc)
        return
    handlers = list(config.error_handlers)
    if not handlers:
        log_error(exc, context)
        return
    for handler in handlers:
        try:
            if _takes_config(handler):
                handler(exc, context, config)
            else:
                handler(exc, context)  # type: ignore[call-arg]
        except Exception as failure:
            log.error("error handler %s raised %s: %s (while reporting %s)",
                      _name(handler), P.error_class_name(failure), P.error_message(failure),
                      P.error_class_name(exc), exc_info=log.isEnabledFor(logging.DEBUG))


def run_death_handlers(config: Config, job: dict[str, Any], exc: BaseException, *,
                       skip: type | tuple[type, ...] = ()) -> None:
    """Call every death handler with ``(job, exc)`` (but those that are instances of
    ``skip``: their work is done already); a raising one is reported, not raised."""
    for handler in list(config.death_handlers):
        if skip and isinstance(handler, skip):
            continue
        try:
            handler(job, exc)
        except Exception as failure:
            report_error(config, failure, {"context": "Error calling death handler", "job": job})


def _takes_config(handler: Callable[..., Any]) -> bool:
    cached = _arity.get(id(handler))
    if cached is not None and cached[0] is handler:
        return cached[1]
    takes = _accepts_three(handler)
    with _arity_lock:
        _arity[id(handler)] = (handler, takes)
    return takes


def _accepts_three(handler: Callable[..., Any]) -> bool:
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):  # some builtins have none: assume today's form
        return True
    try:
        signature.bind(None, None, None)
    except TypeError:
        return False
    return True


def _name(handler: Callable[..., Any]) -> str:
    return getattr(handler, "__qualname__", None) or repr(handler)


# -- lifecycle events ------------------------------------------------------------------------------
def fire(config: Config, event: str, *, reverse: bool | None = None,
         raise_errors: bool = False) -> None:
    """Run the hooks registered for lifecycle ``event`` (``config.on``); quiet, shutdown and
    exit run in reverse registration order. A hook that raises is reported and the others
    still run — unless ``raise_errors`` (``startup``: a failing hook aborts the boot)."""
    hooks = list(config.lifecycle.get(event, []))
    if reverse if reverse is not None else event in ("quiet", "shutdown", "exit"):
        hooks.reverse()
    for hook in hooks:
        try:
            hook()
        except Exception as exc:
            if raise_errors:
                raise
            report_error(config, exc, {"context": f"lifecycle event {event}"})


# -- callback lists ------------------------------------------------------------------------------
T = TypeVar("T")


class Registration:
    """Handle returned by ``Callbacks.add``; ``remove()`` may be called any number of times."""

    def __init__(self, owner: Callbacks[Any], callback: Callable[[Any], None]) -> None:
        self._owner = owner
        self.callback = callback

    def remove(self) -> None:
        self._owner.remove(self.callback)


class Callbacks(Generic[T]):
    """A thread-safe list of callbacks taking one value."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[T], None]] = []
        self._lock = threading.Lock()

    def add(self, callback: Callable[[T], None]) -> Registration:
        with self._lock:
            if callback not in self._callbacks:
                self._callbacks.append(callback)
        return Registration(self, callback)

    def remove(self, callback: Callable[[T], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    def notify(self, config: Config, value: T, context: dict[str, Any]) -> None:
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            try:
                callback(value)
            except Exception as exc:
                report_error(config, exc, context)
