"""Callback lists for events other code listens to (a poison pill killed, a job expired).

1. ``Callbacks.add(fn)`` registers ``fn`` once (the same callable twice is one entry) and
   returns a ``Registration`` whose ``remove()`` may be called any number of times.
2. ``Callbacks.notify(config, value, context)`` calls each with ``value``; one that raises is
   reported to the error handlers and the others still run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .reporting import report_error

if TYPE_CHECKING:
    from .config import Config

__all__ = ["Callbacks", "Registration"]

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
