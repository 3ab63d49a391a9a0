"""``ResultHandle``: what a push returns — the jid, still a ``str``, that can wait for the result.

1. A handle *is* its jid: equal to it, hashed as it, written by JSON as it, accepted as a job
   argument (``payload.Jid``). Code that kept the jid a push returned keeps working.
2. ``handle.result(timeout=...)`` waits (sync) for the job's stored outcome and returns its
   value; ``await handle`` / ``await handle.aresult(timeout=...)`` is the same for async
   code. A failed job raises ``wurk.JobFailed`` (the remote class and message, whether a
   retry is due), a cancelled one ``wurk.JobCancelled``; no outcome in time,
   ``TimeoutError``; a record that cannot be read, ``wurk.UnreadableResult``. The wait is
   woken by Redis (``wurk.results.waiting``); the job must keep its result (``result_ttl``).
3. ``outcome()`` / ``aoutcome()`` look once, without waiting: the ``Outcome`` or None.
4. It is generic in the job's return type: ``add.perform_async(1, 2)`` of a job annotated
   ``-> int`` is a ``ResultHandle[int]``, and mypy knows ``handle.result()`` is an ``int``.
5. ``ResultHandle(jid)`` makes one for a jid kept as text (``config=`` names the Redis; the
   process's configuration by default). A handle pickled and loaded again uses the default.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Generic, TypeVar

from .. import payload as P
from ..config import Config, default_config
from ..stored import Invalid
from .store import Outcome, afind, find, raise_unreadable
from .waiting import await_outcome, wait

__all__ = ["ResultHandle"]

R_co = TypeVar("R_co", covariant=True)


class ResultHandle(P.Jid, Generic[R_co]):
    """A jid that can wait for its job's result: ``handle.result(timeout=5)``, ``await
    handle``."""

    _config: Config | None

    def __new__(cls, jid: str, config: Config | None = None) -> ResultHandle[R_co]:
        if not isinstance(jid, str) or not jid:
            raise ValueError(f"a result handle needs a jid (a non-empty string), not {jid!r}")
        handle = super().__new__(cls, jid)
        handle._config = config
        return handle

    @property
    def jid(self) -> str:
        """The jid as a plain ``str``."""
        return str.__str__(self)

    @property
    def config(self) -> Config:
        """The configuration whose Redis the result is read from."""
        return self._config if self._config is not None else default_config()

    # -- waiting ----------------------------------------------------------------------------
    def result(self, *, timeout: float | None = None) -> R_co:
        """The job's return value once its outcome is stored (waiting up to ``timeout``
        seconds; None waits as long as it takes). ``wurk.JobFailed``,
        ``wurk.JobCancelled``, ``TimeoutError`` or ``wurk.UnreadableResult`` otherwise."""
        return self._value(wait(self.config, self.jid, timeout))

    async def aresult(self, *, timeout: float | None = None) -> R_co:
        """``result`` for async code: every waiter of a loop shares one connection."""
        return self._value(await await_outcome(self.config, self.jid, timeout))

    def __await__(self) -> Generator[Any, None, R_co]:
        """``await handle``: ``aresult()`` without a time limit."""
        return self.aresult().__await__()

    def outcome(self) -> Outcome | None:
        """The stored outcome now (None: none yet, none kept, or expired); never waits."""
        return self._checked(find(self.config, self.jid))

    async def aoutcome(self) -> Outcome | None:
        """``outcome`` for async code, on the loop's own connections."""
        return self._checked(await afind(self.config, self.jid))

    def _checked(self, found: Outcome | Invalid | None) -> Outcome | None:
        if isinstance(found, Invalid):
            raise_unreadable(self.jid, found)
        return found

    def _value(self, found: Outcome | Invalid) -> R_co:
        if isinstance(found, Invalid):
            raise_unreadable(self.jid, found)
        value: R_co = found.unwrap()
        return value

    # -- a handle is its jid ----------------------------------------------------------------
    def __reduce__(self) -> tuple[Any, ...]:
        return (ResultHandle, (self.jid,))

    def __copy__(self) -> ResultHandle[R_co]:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> ResultHandle[R_co]:
        return self
