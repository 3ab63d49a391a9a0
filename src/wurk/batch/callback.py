"""The jobs a batch pushes for itself: its callbacks, and the no-op job of an empty block.

1. ``Callback`` (``wurk.batch.Callback``; Ruby wurk's ``Wurk::Batch::CallbackJob`` is the
   same job) runs one registered callback with ``(status, options)``: a job class's
   ``on_<event>`` method, a ``"Name#method"`` method, or an ``@wurk.job`` function. The target
   is looked up in the job registry, never imported, and a method must be a callback: its
   name starts with ``on_``, or the class lists it in ``batch_callbacks``. Whoever writes
   to Redis cannot make a worker call arbitrary code, nor any other method of a job class
   (``"MyJob#delete_everything"`` is refused). It retries like any job, so a callback must
   be idempotent.
2. Once it returned, its completion is recorded (``accounting.callback_done``): a parent
   batch's success waits until its children's success callbacks have all run.
3. ``Empty`` (``Sidekiq::Batch::Empty``) does nothing; counting it fires the callbacks of a
   batch whose block pushed no job.
"""

from __future__ import annotations

from typing import Any

from ..config import default_config
from ..connections.lending import redis as lent_redis
from ..errors import BatchError
from ..job import Job, registry
from . import accounting
from .block import ReadsWorkerConfig, worker_config
from .model import CALLBACK_CLASS, EMPTY_CLASS
from .status import BatchStatus

__all__ = ["BUILTIN_JOBS", "RUBY_CALLBACK_CLASS", "Callback", "Empty", "resolve"]

RUBY_CALLBACK_CLASS = "Wurk::Batch::CallbackJob"
# Registered in every process that builds a Config: they are no application's jobs.
BUILTIN_JOBS = (CALLBACK_CLASS, RUBY_CALLBACK_CLASS, EMPTY_CLASS)


def resolve(target: str, event: str) -> Any:
    """The callable a stored callback target names, from the job registry."""
    name, _, method = target.partition("#")
    if name not in registry:
        raise BatchError(f"batch callback target {name!r} is not a job registered in this "
                         "process (import the module that defines it in the worker)")
    definition = registry.lookup(name)
    if not definition.is_class:
        if method:
            raise BatchError(f"batch callback {target!r}: {name} is a function job, which "
                             "has no methods; name it without '#'")
        return definition.target
    chosen = method or f"on_{event}"
    declared = getattr(definition.target, "batch_callbacks", ())
    if not chosen.startswith("on_") and chosen not in (declared if isinstance(
            declared, (tuple, list, set, frozenset)) else ()):
        raise BatchError(f"batch callback {target!r}: {chosen} is not a callback of {name} "
                         "(name it on_<something>, or list it in the class's "
                         "batch_callbacks)")
    instance = definition.target()
    found = getattr(instance, chosen, None)
    if not callable(found):
        raise BatchError(f"batch callback {target!r}: {name} has no method "
                         f"{method or f'on_{event}'}(status, options)")
    return found


class Callback(Job, ReadsWorkerConfig, name=CALLBACK_CLASS):
    """Runs one batch callback."""

    def perform(self, event: str, bid: str, target: str, options: dict[str, Any]) -> None:
        config = worker_config() or default_config()
        status = BatchStatus(bid, config=config)
        resolve(target, event)(status, options if isinstance(options, dict) else {})
        with lent_redis(config) as conn:
            accounting.callback_done(conn, config, bid, event, self.jid)


class RubyCallback(Callback, name=RUBY_CALLBACK_CLASS):
    """Ruby wurk's name for the same job, for batches whose callbacks Ruby wurk pushed."""


class Empty(Job, name=EMPTY_CLASS):
    """The job an empty jobs block pushes so the batch's callbacks still fire."""

    def perform(self) -> None:
        return None
