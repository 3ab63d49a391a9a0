from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

import pytest

from wurk.middleware import Chain, settle


class Record:
    instances = 0

    def __init__(self, log: list[str], label: str) -> None:
        Record.instances += 1
        self.log = log
        self.label = label

    def __call__(self, job: Any, payload: dict[str, Any], queue: str,
                 call_next: Callable[[], Any]) -> Any:
        self.log.append(f"{self.label}>")
        result = call_next()
        self.log.append(f"<{self.label}")
        return result


class Other(Record):
    pass


class Third(Record):
    pass


def test_chain_order_and_fresh_instances() -> None:
    log: list[str] = []
    chain = Chain()
    chain.add(Record, log, "a")
    chain.prepend(Other, log, "b")
    chain.insert_after(Other, Third, log, "c")
    assert list(chain) == [Other, Third, Record]
    before = Record.instances
    assert chain.invoke("J", {}, "q", lambda: "done") == "done"
    chain.invoke("J", {}, "q", lambda: "done")
    assert Record.instances - before == 6  # a fresh instance per link per invocation
    assert log[:6] == ["b>", "c>", "a>", "<a", "<c", "<b"]


def test_chain_edit_operations() -> None:
    chain = Chain()
    chain.add(Record, [], "a")
    chain.insert_before(Record, Other, [], "b")
    assert list(chain) == [Other, Record]
    assert chain.exists(Other)
    chain.remove(Other)
    assert not chain.exists(Other) and len(chain) == 1
    chain.add(Record, [], "again")
    assert len(chain) == 1  # re-adding moves, never duplicates
    with pytest.raises(ValueError, match="not in this middleware chain"):
        chain.insert_after(Third, Other)
    chain.clear()
    assert not chain


def test_a_link_that_does_not_call_next_stops_the_chain() -> None:
    ran: list[str] = []
    chain = Chain()
    chain.add(lambda job, payload, queue, call_next: None)
    assert chain.invoke("J", {}, "q", lambda: ran.append("x")) is None
    assert ran == []


def test_empty_chain_calls_final_directly() -> None:
    assert Chain().invoke("J", {}, "q", lambda: 42) == 42


def test_an_edit_after_a_walk_is_seen_by_the_next_walk() -> None:
    """Plain sync links are looked at once per edit, not per job: an edit must still count."""
    log: list[str] = []

    def first(job: Any, payload: Any, queue: str, call_next: Callable[[], Any]) -> Any:
        log.append("first")
        return call_next()

    def second(job: Any, payload: Any, queue: str, call_next: Callable[[], Any]) -> Any:
        log.append("second")
        return call_next()

    chain = Chain()
    chain.add(first)
    assert chain.invoke("J", {}, "q", lambda: "done") == "done"
    chain.add(second)
    assert chain.invoke("J", {}, "q", lambda: "done") == "done"
    chain.remove(first)
    assert chain.invoke("J", {}, "q", lambda: "done") == "done"
    assert log == ["first", "first", "second", "second"]


def test_an_edit_after_an_async_walk_is_seen_by_the_next_async_walk() -> None:
    """The async walk is found once per edit too (not per job): an edit must still count,
    and a class made fresh per call still gets a fresh instance each walk."""
    log: list[str] = []

    async def first(job: Any, payload: Any, queue: str, call_next: Callable[[], Any]) -> Any:
        log.append("first")
        return await call_next()

    class Fresh:
        def __init__(self) -> None:
            log.append("made")

        async def acall(self, job: Any, payload: Any, queue: str,
                        call_next: Callable[[], Any]) -> Any:
            log.append("fresh")
            return await call_next()

    async def done() -> str:
        return "done"

    chain = Chain()
    chain.add(first)
    for _ in range(2):
        assert asyncio.run(chain.ainvoke("J", {}, "q", done)) == "done"
    chain.add(Fresh)
    for _ in range(2):
        assert asyncio.run(chain.ainvoke("J", {}, "q", done)) == "done"
    chain.remove(Fresh)
    chain.remove(first)
    assert asyncio.run(chain.ainvoke("J", {}, "q", done)) == "done"
    assert log == ["first", "first", "made", "first", "fresh", "made", "first", "fresh"]


def test_objects_partials_and_functions_as_links_each_run_once_in_order() -> None:
    """Link objects are called through their own ``__call__`` (a bound method, the cheaper
    call), the one their class's MRO picks; objects whose call is not a Python function (a
    ``partial``) are called as they are."""
    log: list[str] = []

    class Louder(Record):
        def __call__(self, job: Any, payload: dict[str, Any], queue: str,
                     call_next: Callable[[], Any]) -> Any:
            self.log.append(f"{self.label.upper()}!")
            return call_next()

    def tagged(label: str, job: Any, payload: Any, queue: str,
               call_next: Callable[[], Any]) -> Any:
        log.append(label)
        return call_next()

    def plain(job: Any, payload: Any, queue: str, call_next: Callable[[], Any]) -> Any:
        log.append(f"plain {job} {queue}")
        return call_next()

    chain = Chain()
    inherited = Other(log, "o")  # Record's __call__, by inheritance
    chain.add(inherited)
    chain.add(Louder(log, "l"))
    chain.add(functools.partial(tagged, "p"))
    chain.add(plain)
    for _ in range(2):
        assert chain.invoke("J", {}, "q", lambda: log.append("job") or "done") == "done"
    assert log == ["o>", "L!", "p", "plain J q", "job", "<o"] * 2


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_answering_an_async_link_cancels_its_await(
        interrupt: type[BaseException]) -> None:
    """Set into the link's await, the interrupt would escape the task and end the loop's
    thread with the link never told; it is cancelled instead, as asyncio.run does."""
    seen: list[str] = []

    async def link() -> None:
        waiter = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(settle, waiter, None, interrupt())
        try:
            await waiter
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(link())
    assert seen == ["cancelled"]
