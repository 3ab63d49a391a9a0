"""Testing modes: run your test suite without a worker, or against a real server.

1. Three modes. **fake**: pushes are kept in memory (``resize.jobs``, ``wurk.testing.jobs()``)
   until the test runs them (``resize.drain()``, ``perform_one()``, ``drain_all()``).
   **inline**: a push runs the job at once, in the pushing thread. **disable**: pushes go
   to Redis, as in production. Client middleware runs in every mode: only the Redis write
   is replaced (through ``wurk.client.writers``, never by patching the client).
2. Switched explicitly, never at import: ``set_mode("fake")`` for the whole process, or
   ``with wurk.testing.fake():`` (also a decorator, of a function or an ``async def``
   one) for this thread and the asyncio tasks it starts. A block wins over the process
   mode; blocks do not nest (a clear error says which mode is already on).
3. The pytest plugin (``wurk.testing.plugin``, registered on install) gives the fixtures
   ``wurk_fake``, ``wurk_inline`` and ``wurk_redis``.
4. ``relay_outbox()``: with ``client="outbox"``, move the committed rows of the outbox table
   to Redis now, in the test's thread, rather than wait for the relay's own thread.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextlib import ContextDecorator
from types import TracebackType
from typing import Any, Literal, TypeVar

from .. import payload as P
from ..client import writers
from ..client.outbox import relay_for
from ..config import Config, default_config
from ..middleware import Chain
from .store import EmptyQueue, FakeStore, FakeWriter, InlineWriter, store

__all__ = [
    "EmptyQueue",
    "FakeStore",
    "Mode",
    "clear_all",
    "disable",
    "drain_all",
    "fake",
    "inline",
    "jobs",
    "mode",
    "perform_one",
    "relay_outbox",
    "set_mode",
    "store",
]

Mode = Literal["fake", "inline", "disable"]
F = TypeVar("F", bound=Callable[..., Any])
MODES: tuple[Mode, ...] = ("fake", "inline", "disable")


def _writer_for(mode: str, chain: Chain | None) -> FakeWriter | InlineWriter | None:
    if mode == "fake":
        writers.keep_in(store)
        return FakeWriter(chain)
    if mode == "inline":
        return InlineWriter(chain)
    if mode == "disable":
        return None
    raise ValueError(f"unknown testing mode {mode!r}; use one of {', '.join(MODES)}")


def _mode_of(writer: object) -> Mode:
    if isinstance(writer, FakeWriter):
        return "fake"
    if isinstance(writer, InlineWriter):
        return "inline"
    return "disable"


def set_mode(mode: Mode, *, server_middleware: Chain | None = None) -> Mode:
    """Switch the whole process (threads without a block of their own); returns the mode
    it replaces, to switch back to. ``server_middleware`` replaces the configuration's
    chain when jobs run (inline, drain)."""
    previous = writers.set_process(_writer_for(mode, server_middleware))
    return _mode_of(previous)


def mode() -> Mode:
    """The mode a push made here now would use."""
    return _mode_of(writers.selected())


class _Block(ContextDecorator):
    """One mode for this thread (and tasks it starts) inside ``with``; refuses to nest."""

    def __init__(self, mode: Mode, server_middleware: Chain | None) -> None:
        self._mode = mode
        self._chain = server_middleware
        self._writer = _writer_for(mode, server_middleware)
        self._token: Any = None

    def _recreate_cm(self) -> _Block:  # a decorated function gets a fresh block per call
        return _Block(self._mode, self._chain)

    def __call__(self, func: F) -> F:
        """Decorate ``func``; an ``async def`` one gets the block around the whole of its
        body (``ContextDecorator`` would end it as the coroutine is made, before it runs)."""
        if not inspect.iscoroutinefunction(func):
            return super().__call__(func)

        @functools.wraps(func)
        async def inner(*args: Any, **kwargs: Any) -> Any:
            with self._recreate_cm():
                return await func(*args, **kwargs)

        return inner  # type: ignore[return-value]

    def __enter__(self) -> _Block:
        current = writers.block_value()
        if current is not writers.UNSET:
            raise RuntimeError(
                f"wurk.testing.{self._mode}() inside a {_mode_of(current)}() block: testing "
                "modes do not nest; leave the outer block first, or switch the whole "
                "process with wurk.testing.set_mode()"
            )
        self._token = writers.set_block(self._writer)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        writers.reset_block(self._token)


def fake(*, server_middleware: Chain | None = None) -> _Block:
    """Keep pushes in memory inside the block: ``with wurk.testing.fake(): ...``."""
    return _Block("fake", server_middleware)


def inline(*, server_middleware: Chain | None = None) -> _Block:
    """Run each push at once inside the block."""
    return _Block("inline", server_middleware)


def disable() -> _Block:
    """Push to Redis inside the block, whatever the process mode is."""
    return _Block("disable", None)


def jobs(queue: str | None = None) -> list[P.Payload]:
    """Every job pushed in fake mode (or those of one queue), oldest first."""
    return store.jobs(queue=queue)


def perform_one() -> Any:
    """Run the oldest job pushed in fake mode; ``EmptyQueue`` if none is left."""
    return store.perform_one()


def drain_all() -> int:
    """Run every fake-mode job, and those they push, until none is left; returns the count."""
    return store.drain_all()


def clear_all() -> None:
    """Forget every fake-mode job."""
    store.clear_all()


def relay_outbox(config: Config | None = None) -> int:
    """``client="outbox"``: push the outbox table's committed rows to Redis now, in this
    thread, and delete them; returns how many this call moved. It waits for a pass of this
    process's relay thread in progress, so once it returns every row committed before the
    call is in Redis: a test that committed (Django's ``TransactionTestCase``) reads Redis
    right after, without waiting for the relay."""
    return relay_for(config if config is not None else default_config()).run_once()
