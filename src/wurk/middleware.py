"""Middleware chains: code that wraps every push (client) or every execution (server).

1. A chain is an ordered list of entries; an entry is a factory plus its arguments, and a
   fresh instance is made per invocation so middleware may keep per-call state (Sidekiq's
   semantics). A plain function (or an instance) added without arguments is used as is.
2. A link calls ``call_next()`` to go on; not calling it, or returning ``None``/``False``
   from a client link, stops the push.
3. An empty chain costs nothing per job: ``invoke`` calls the final step directly.

Client middleware: ``__call__(self, job, payload, queue, call_next)`` where ``job`` is the
wire name. Server middleware: the same, with ``job`` the job instance or definition.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Chain", "Middleware"]

Middleware = Callable[..., Any]


@dataclass(frozen=True)
class _Entry:
    factory: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    # Decided once, not per job: whether each invocation makes a fresh instance.
    fresh: bool = field(init=False)

    def __post_init__(self) -> None:
        fresh = inspect.isclass(self.factory) or bool(self.args or self.kwargs)
        object.__setattr__(self, "fresh", fresh)

    def make(self) -> Middleware:
        if self.fresh:
            return self.factory(*self.args, **self.kwargs)  # type: ignore[no-any-return]
        return self.factory


class Chain:
    """An ordered, editable list of middleware; frozen with the configuration."""

    def __init__(self) -> None:
        self._entries: list[_Entry] = []
        self._frozen = False

    def __iter__(self) -> Iterator[Callable[..., Any]]:
        return (entry.factory for entry in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def exists(self, factory: Callable[..., Any]) -> bool:
        return any(entry.factory is factory for entry in self._entries)

    def add(self, factory: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Append (moving it to the end if already present)."""
        self._edit()
        self.remove(factory)
        self._entries.append(_Entry(factory, args, kwargs))

    def prepend(self, factory: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self._edit()
        self.remove(factory)
        self._entries.insert(0, _Entry(factory, args, kwargs))

    def insert_before(
        self, existing: Callable[..., Any], factory: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> None:
        self._edit()
        self.remove(factory)
        self._entries.insert(self._index(existing), _Entry(factory, args, kwargs))

    def insert_after(
        self, existing: Callable[..., Any], factory: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> None:
        self._edit()
        self.remove(factory)
        self._entries.insert(self._index(existing) + 1, _Entry(factory, args, kwargs))

    def remove(self, factory: Callable[..., Any]) -> None:
        self._edit()
        self._entries = [entry for entry in self._entries if entry.factory is not factory]

    def clear(self) -> None:
        self._edit()
        self._entries.clear()

    def copy(self) -> Chain:
        clone = Chain()
        clone._entries = list(self._entries)
        return clone

    def freeze(self) -> None:
        self._frozen = True

    def invoke(
        self, job: Any, payload: dict[str, Any], queue: str, final: Callable[[], Any]
    ) -> Any:
        """Run ``final`` inside every link, first added outermost."""
        if not self._entries:
            return final()
        if len(self._entries) == 1:  # the common case (the metrics link alone): no closures
            return self._entries[0].make()(job, payload, queue, final)
        links = [entry.make() for entry in self._entries]

        def step(position: int) -> Any:
            if position == len(links):
                return final()
            return links[position](job, payload, queue, lambda: step(position + 1))

        return step(0)

    def _index(self, existing: Callable[..., Any]) -> int:
        for index, entry in enumerate(self._entries):
            if entry.factory is existing:
                return index
        raise ValueError(f"{existing!r} is not in this middleware chain")

    def _edit(self) -> None:
        if self._frozen:
            raise RuntimeError(
                "middleware chains are frozen once the worker starts; add middleware "
                "before calling start()"
            )
