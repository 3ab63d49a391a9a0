"""Context propagation: chosen ``contextvars`` travel with a job and are set around it.

1. ``persist(var, …)`` adds a client and a server middleware to the configuration (once)
   and the variables to the set they carry, keyed by each variable's name.
2. The client middleware writes the values set where the push happens into the payload's
   ``wurk_ctx`` object; a variable with no value is left out. A payload that already has a
   ``wurk_ctx`` keeps it: a retry, a job re-pushed by the scheduler or a caller's own value
   is never overwritten by whatever context the re-pushing thread has.
3. The server middleware runs the job in a copy of the thread's context with each saved
   value set, so the next job on that thread starts clean — of the saved values and of any
   persisted variable the job set itself. Names it does not know are ignored; a
   ``wurk_ctx`` that is not an object fails the job (through retries, so it is not lost)
   rather than run it in the wrong context.
4. A value must be JSON-native; one that is not refuses the push, naming the variable.
5. No other payload key is touched: Ruby's context keys (``cattr``, ``locale``) pass through.
6. ``current(config)``: the values a push would save here now. A batch keeps them when it is
   created, and its callback jobs (pushed later, by Redis) carry them (``wurk.batch``).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

from . import payload as P
from .config import Config, default_config
from .errors import InvalidPayload

__all__ = ["current", "persist", "persisted"]

_MISSING = object()
CallNext = Callable[[], Any]


class _Variables:
    """The variables one configuration propagates, by name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_name: dict[str, contextvars.ContextVar[Any]] = {}

    def add(self, var: contextvars.ContextVar[Any]) -> None:
        with self._lock:
            known = self.by_name.get(var.name)
            if known is not None and known is not var:
                raise ValueError(f"another context variable named {var.name!r} is persisted "
                                 "already; the payload keys them by name, so give it another")
            self.by_name[var.name] = var


class SaveContext:
    """Client middleware: the persisted variables' values into ``wurk_ctx``."""

    def __init__(self, variables: _Variables) -> None:
        self.variables = variables

    def __call__(self, job: str, payload: P.Payload, queue: str, call_next: CallNext) -> Any:
        if P.CONTEXT not in payload:
            saved = self.values()
            if saved:
                payload[P.CONTEXT] = saved
        return call_next()

    def values(self) -> dict[str, Any]:
        """The persisted variables set here, by name; a value that is not JSON-native
        raises ``InvalidArguments`` naming its variable."""
        saved = {name: value for name, var in self.variables.by_name.items()
                 if (value := var.get(_MISSING)) is not _MISSING}
        for name, value in saved.items():
            P.check_args([value], what=f"context variable {name!r}")
        return saved


class RestoreContext:
    """Server middleware: the saved values set for the job's duration."""

    def __init__(self, variables: _Variables) -> None:
        self.variables = variables

    def __call__(self, job: Any, payload: P.Payload, queue: str, call_next: CallNext) -> Any:
        saved = payload.get(P.CONTEXT)
        if saved is not None and not isinstance(saved, dict):
            raise InvalidPayload(f"payload field {P.CONTEXT!r} is {P.dumps(saved)[:80]}; "
                                 "expected an object of context variable values",
                                 field=P.CONTEXT)
        # The job runs in a copy of the thread's context: what it sets itself — a persisted
        # variable among them — is gone when it returns, so the next job on the thread
        # starts clean and pushes nothing it did not set or carry itself.
        return contextvars.copy_context().run(self._run, saved or {}, call_next)

    def _run(self, saved: dict[str, Any], call_next: CallNext) -> Any:
        for name, var in self.variables.by_name.items():
            if name in saved:
                var.set(saved[name])
        return call_next()


def _installed(config: Config) -> _Variables:
    for link in config.client_middleware:
        if isinstance(link, SaveContext):
            return link.variables
    variables = _Variables()
    config.client_middleware.add(SaveContext(variables))
    config.server_middleware.add(RestoreContext(variables))
    return variables


def persist(*variables: contextvars.ContextVar[Any], config: Config | None = None) -> None:
    """Carry these variables from the pushing code into the job (``wurk_ctx``).

    Call it where the configuration is built (before a worker starts), for the default
    configuration or the ``config`` given.
    """
    target = config if config is not None else default_config()
    installed = _installed(target)
    for var in variables:
        if not isinstance(var, contextvars.ContextVar):
            raise TypeError(f"wurk.context.persist takes contextvars.ContextVar objects, "
                            f"not {var!r}")
        installed.add(var)


def current(config: Config) -> dict[str, Any]:
    """What a push made here now would save in ``wurk_ctx`` (empty when nothing is
    persisted or set): a batch keeps it for its callbacks, which Redis pushes later."""
    for link in config.client_middleware:
        if isinstance(link, SaveContext):
            return link.values()
    return {}


def persisted(config: Config | None = None) -> list[str]:
    """Names of the variables the configuration carries."""
    target = config if config is not None else default_config()
    for link in target.client_middleware:
        if isinstance(link, SaveContext):
            return sorted(link.variables.by_name)
    return []
