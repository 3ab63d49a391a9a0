"""Fake mode's queues: pushes kept in memory, per queue and per job, until a test runs them.

1. ``FakeWriter`` stores each push after a JSON round trip (a non-JSON argument already
   failed, as in production; a tuple comes back a list). A scheduled job keeps its ``at``.
2. ``FakeStore`` answers what was pushed (``jobs``), runs it (``drain``, ``perform_one``,
   ``drain_all``: jobs pushed while draining are run too) and forgets it (``clear``,
   ``clear_all``). One store per process, shared by every thread, behind a lock.
3. ``InlineWriter`` runs each push at once, in the pushing thread (``wurk.testing.run``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from .. import payload as P
from ..client.writers import Entries, KeepingWriter
from ..config import Config
from ..errors import WurkError
from ..middleware import Chain
from ..results.store import forget_kept
from .run import perform

__all__ = ["EmptyQueue", "FakeStore", "FakeWriter", "InlineWriter", "store"]


class EmptyQueue(WurkError):
    """``perform_one()`` found no job to run."""

    __module__ = "wurk.testing"


@dataclass
class _Pushed:
    payload: P.Payload
    config: Config  # the pushing client's: its server middleware runs the job
    chain: Chain | None  # the mode's own chain, if it was given one


class FakeStore:
    """Every job pushed in fake mode, in push order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pushed: list[_Pushed] = []

    def add(self, payload: P.Payload, config: Config, chain: Chain | None) -> None:
        with self._lock:
            self._pushed.append(_Pushed(payload, config, chain))

    # -- what was pushed ----------------------------------------------------------------------
    def jobs(self, *, queue: str | None = None, name: str | None = None) -> list[P.Payload]:
        """Payloads pushed (of one queue, of one job name, or all), oldest first."""
        with self._lock:
            return [item.payload for item in self._pushed if _matches(item, queue, name)]

    def queues(self) -> dict[str, list[P.Payload]]:
        """Queue name → its payloads, oldest first."""
        result: dict[str, list[P.Payload]] = {}
        for payload in self.jobs():
            result.setdefault(payload[P.QUEUE], []).append(payload)
        return result

    # -- running ------------------------------------------------------------------------------
    def perform_one(self, name: str | None = None) -> Any:
        """Run the oldest job (of ``name``); ``EmptyQueue`` when there is none."""
        item = self._take(name)
        if item is None:
            what = f"{name} jobs" if name else "jobs"
            raise EmptyQueue(f"no {what} to perform: nothing was pushed in fake mode, or it "
                             "was run or cleared already")
        return perform(item.payload, item.config, item.chain)

    def drain(self, name: str | None = None) -> int:
        """Run jobs (of ``name``) until none is left, those they push included; returns how
        many ran. A job that raises stops the drain: the exception reaches the test."""
        count = 0
        while (item := self._take(name)) is not None:
            perform(item.payload, item.config, item.chain)
            count += 1
        return count

    def drain_all(self) -> int:
        return self.drain(None)

    # -- forgetting ---------------------------------------------------------------------------
    def clear(self, name: str | None = None, *, queue: str | None = None) -> None:
        with self._lock:
            self._pushed = [item for item in self._pushed if not _matches(item, queue, name)]

    def clear_all(self) -> None:
        """Forget every kept job, and the results jobs run by the testing modes kept."""
        self.clear()
        forget_kept()

    def _take(self, name: str | None) -> _Pushed | None:
        with self._lock:
            for index, item in enumerate(self._pushed):
                if _matches(item, None, name):
                    return self._pushed.pop(index)
        return None


def _matches(item: _Pushed, queue: str | None, name: str | None) -> bool:
    return ((queue is None or item.payload.get(P.QUEUE) == queue)
            and (name is None or item.payload.get(P.CLASS) == name))


store = FakeStore()


def _round_trip(job: P.Payload, at: float | None) -> P.Payload:
    copy = P.loads(P.dumps(job))
    if at is not None:
        copy[P.AT] = at
    return copy


class FakeWriter(KeepingWriter):
    """Keeps pushes in ``store``; ``chain`` replaces the server middleware when they run."""

    def __init__(self, chain: Chain | None = None) -> None:
        self.chain = chain

    def keep(self, config: Config, entries: Entries) -> None:
        for job, at in entries:
            store.add(_round_trip(job, at), config, self.chain)


class InlineWriter(KeepingWriter):
    """Runs each push at once in the pushing thread; ``at`` is not waited for."""

    def __init__(self, chain: Chain | None = None) -> None:
        self.chain = chain

    def keep(self, config: Config, entries: Entries) -> None:
        for job, _at in entries:
            perform(job, config, self.chain)

