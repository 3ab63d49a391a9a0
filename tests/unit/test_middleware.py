from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from wurk.config import Config
from wurk.control.deadlines import Deadlines
from wurk.control.running import Running
from wurk.control.stopper import Stopper
from wurk.launcher import BUILT_IN
from wurk.metrics.tracking import ExecutionMetrics
from wurk.middleware import AWAIT, Chain, Later, _planner, async_form, settle


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


def test_an_insert_that_cannot_be_done_leaves_the_chain_as_it_was() -> None:
    """``insert_before``/``insert_after`` next to a link not in the chain (or to the link
    itself) raise without touching the chain: they removed the link being inserted first,
    so a link already in the chain was lost, and ``insert_before(a, a)`` said ``a`` was
    not in the chain."""
    chain = Chain()
    chain.add(Record, [], "a")
    chain.add(Other, [], "b")
    with pytest.raises(ValueError, match="not in this middleware chain"):
        chain.insert_after(Third, Other)
    with pytest.raises(ValueError, match="not in this middleware chain"):
        chain.insert_before(Third, Record)
    with pytest.raises(ValueError, match="before or after itself"):
        chain.insert_before(Record, Record)
    with pytest.raises(ValueError, match="before or after itself"):
        chain.insert_after(Other, Other)
    assert list(chain) == [Record, Other]


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


class Planned:
    """An async link with a ``wurk_plan``: what it does before the job happens in the plan,
    what it does after in the leave; ``acall`` (the same, as a frame) must not run."""

    def __init__(self, log: list[str], label: str, answer: str = "leave") -> None:
        self.log = log
        self.label = label
        self.answer = answer

    async def acall(self, job: Any, payload: dict[str, Any], queue: str,
                    call_next: Callable[[], Any]) -> Any:
        self.log.append(f"{self.label} acall>")
        result = await call_next()
        self.log.append(f"<{self.label} acall")
        return result

    def wurk_plan(self, job: Any, payload: dict[str, Any], queue: str) -> Any:
        self.log.append(f"{self.label} plan")
        if self.answer == "skip":
            return None
        if self.answer == "await":
            return AWAIT
        if self.answer == "raise":
            raise LookupError(self.label)
        return functools.partial(self.leave)

    def leave(self, result: Any, error: BaseException | None) -> Any:
        self.log.append(f"{self.label} leave {result!r} {type(error).__name__}")
        if error is not None:
            raise error
        return result


def test_planned_links_are_no_frames_and_their_leaves_run_innermost_first() -> None:
    log: list[str] = []
    chain = Chain()
    chain.add(Planned(log, "a"))
    chain.add(Planned(log, "skipped", "skip"))
    chain.add(Planned(log, "awaited", "await"))
    chain.add(Planned(log, "b"))
    frames: list[str] = []

    async def done() -> str:
        task = asyncio.current_task()
        assert task is not None

        async def look() -> None:  # the job's await chain while it waits, outermost first
            awaited: Any = task.get_coro()
            while getattr(awaited, "cr_code", None) is not None:
                frames.append(awaited.cr_code.co_name)
                awaited = awaited.cr_await

        looking = asyncio.ensure_future(look())
        await asyncio.sleep(0)
        await looking
        log.append("job")
        return "done"

    for _ in range(2):  # the second walk uses what the first found
        log.clear()
        assert asyncio.run(chain.ainvoke("J", {}, "q", done)) == "done"
        assert log == ["a plan", "skipped plan", "awaited plan", "awaited acall>", "b plan",
                       "job", "b leave 'done' NoneType", "<awaited acall",
                       "a leave 'done' NoneType"]
    # Only the link that had work is a frame of its own on the job's await chain.
    assert frames == ["_step", "acall", "_step", "done", "sleep"] * 2


def test_a_leave_sees_the_error_and_may_end_it_or_await_first() -> None:
    log: list[str] = []

    class Handles(Planned):
        def leave(self, result: Any, error: BaseException | None) -> Any:
            log.append(f"handles {type(error).__name__}")
            return Later(self.later())

        async def later(self) -> str:
            await asyncio.sleep(0)
            return "handled"

    chain = Chain()
    chain.add(Planned(log, "outer"))
    chain.add(Handles(log, "handles"))
    chain.add(Planned(log, "inner"))

    async def fails() -> str:
        raise ValueError("job")

    assert asyncio.run(chain.ainvoke("J", {}, "q", fails)) == "handled"
    assert log == ["outer plan", "handles plan", "inner plan", "inner leave None ValueError",
                   "handles ValueError", "outer leave 'handled' NoneType"]


def test_a_plan_that_raises_is_the_link_raising_before_the_rest() -> None:
    log: list[str] = []
    chain = Chain()
    chain.add(Planned(log, "outer"))
    chain.add(Planned(log, "broken", "raise"))
    chain.add(Planned(log, "never"))

    async def done() -> str:
        log.append("job")
        return "done"

    with pytest.raises(LookupError, match="broken"):
        asyncio.run(chain.ainvoke("J", {}, "q", done))
    assert log == ["outer plan", "broken plan", "outer leave None LookupError"]


def test_a_subclass_with_its_own_acall_is_awaited_not_planned() -> None:
    log: list[str] = []

    class Own(Planned):
        async def acall(self, job: Any, payload: dict[str, Any], queue: str,
                        call_next: Callable[[], Any]) -> Any:
            log.append("own acall")
            return await call_next()

    async def done() -> str:
        return "done"

    chain = Chain()
    chain.add(Own(log, "own"))
    assert asyncio.run(chain.ainvoke("J", {}, "q", done)) == "done"
    assert log == ["own acall"]


def test_every_built_in_server_link_plans_around_async_jobs() -> None:
    """What async-jobs.md says: the built-in links all plan (none is a frame on the await
    chain of a job it has nothing to do for)."""
    config = Config()
    links = [kind(None) if kind is ExecutionMetrics else kind(config) for kind in BUILT_IN]
    links.append(Stopper(config, Running(), Deadlines()))
    for link in links:
        assert _planner(link, async_form(link)) is not None, link


class _Keyed:
    """A link for jobs whose payload has ``"mine"`` only; another for ``Special`` jobs."""

    wurk_keys = frozenset({"mine"})

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    def __call__(self, job: Any, payload: dict[str, Any], queue: str,
                 call_next: Callable[[], Any]) -> Any:
        self.seen.append(f"keyed {payload['jid']}")
        return call_next()

    async def acall(self, job: Any, payload: dict[str, Any], queue: str,
                    call_next: Callable[[], Any]) -> Any:
        self.seen.append(f"keyed {payload['jid']}")
        return await call_next()


class _Special:
    pass


class _Typed(_Keyed):
    wurk_keys = None  # type: ignore[assignment]
    wurk_job_types = (_Special,)

    def __call__(self, job: Any, payload: dict[str, Any], queue: str,
                 call_next: Callable[[], Any]) -> Any:
        self.seen.append(f"typed {payload['jid']}")
        return call_next()

    async def acall(self, job: Any, payload: dict[str, Any], queue: str,
                    call_next: Callable[[], Any]) -> Any:
        self.seen.append(f"typed {payload['jid']}")
        return await call_next()


def test_a_link_that_says_what_it_needs_is_left_out_of_other_jobs_walks() -> None:
    """``wurk_keys`` / ``wurk_job_types``: a job with none of the keys and of none of the
    types passes only the other links, sync and async; a job with either passes all, in
    order."""
    seen: list[str] = []

    def plain(job: Any, payload: dict[str, Any], queue: str,
              call_next: Callable[[], Any]) -> Any:
        seen.append(f"plain {payload['jid']}")
        return call_next()

    chain = Chain()
    chain.add(_Keyed(seen))
    chain.add(plain)
    chain.add(_Typed(seen))

    def walk(job: Any, jid: str, **extra: Any) -> Any:
        return chain.invoke(job, {"jid": jid, **extra}, "q", lambda: jid)

    async def awalk(job: Any, jid: str, **extra: Any) -> Any:
        return await chain.ainvoke(job, {"jid": jid, **extra}, "q", lambda: jid)

    for run in (walk, lambda *a, **k: asyncio.run(awalk(*a, **k))):
        seen.clear()
        assert run("J", "a") == "a"
        assert run("J", "b", mine=None) == "b"  # the key present, whatever its value
        assert run(_Special(), "c") == "c"
        assert seen == ["plain a",
                        "keyed b", "plain b", "typed b",
                        "keyed c", "plain c", "typed c"]


class _KeyedMadeFresh(_Keyed):
    """``_Keyed`` added as a class: an instance made per call, its declaration the class's."""

    log: ClassVar[list[str]] = []

    def __init__(self) -> None:
        super().__init__(_KeyedMadeFresh.log)


def _sync_walk(chain: Chain, jid: str, **extra: Any) -> Any:
    return chain.invoke("J", {"jid": jid, **extra}, "q", lambda: jid)


def _async_walk(chain: Chain, jid: str, **extra: Any) -> Any:
    return asyncio.run(chain.ainvoke("J", {"jid": jid, **extra}, "q", lambda: jid))


def test_links_are_left_out_alike_when_a_link_of_the_chain_is_made_fresh_per_call() -> None:
    """A class added to a chain (an instance made per call, the usual ``add(Timing)``) must
    not bring back, in the sync walk, the links a job has nothing for: the async walk left
    them out and the sync walk called them all. A wrong declaration is refused by both."""
    seen: list[str] = []
    made: list[str] = []

    class Fresh:
        def __init__(self) -> None:
            made.append("fresh")

        def __call__(self, job: Any, payload: dict[str, Any], queue: str,
                     call_next: Callable[[], Any]) -> Any:
            seen.append(f"fresh {payload['jid']}")
            return call_next()

    def keyed_factory(label: str) -> _Keyed:
        return _Keyed(seen)

    for extra in ((), (keyed_factory, "x"), (_KeyedMadeFresh,)):
        chain = Chain()
        chain.add(_Keyed(seen))
        chain.add(Fresh)
        if extra:
            chain.add(*extra)
        _KeyedMadeFresh.log = seen
        for run in (_sync_walk, _async_walk):
            seen.clear()
            assert run(chain, "a") == "a"
            assert run(chain, "b", mine=1) == "b"
            assert seen == ["fresh a", "keyed b", "fresh b"] + (["keyed b"] if extra else [])

    chain = Chain()
    chain.add(_Keyed(seen))
    chain.add(Fresh)
    chain.add(type("Wrong", (_KeyedMadeFresh,), {"wurk_keys": "mine"}))
    with pytest.raises(TypeError, match="wurk_keys"):
        chain.invoke("J", {"jid": "a"}, "q", lambda: None)
    with pytest.raises(TypeError, match="wurk_keys"):
        asyncio.run(chain.ainvoke("J", {"jid": "a"}, "q", lambda: None))


def test_what_a_walk_leaves_out_is_decided_from_the_payload_as_it_begins() -> None:
    """A key an outer link adds on the way does not bring in an inner link that declared
    it (docs/async-jobs.md): set such keys when pushing."""
    seen: list[str] = []

    def adder(job: Any, payload: dict[str, Any], queue: str,
              call_next: Callable[[], Any]) -> Any:
        payload["mine"] = True
        return call_next()

    chain = Chain()
    chain.add(adder)
    chain.add(_Keyed(seen))
    assert chain.invoke("J", {"jid": "a"}, "q", lambda: "a") == "a"
    assert asyncio.run(chain.ainvoke("J", {"jid": "b"}, "q", lambda: "b")) == "b"
    assert seen == []
    chain.invoke("J", {"jid": "c", "mine": False}, "q", lambda: None)
    assert seen == ["keyed c"]


def test_a_chain_of_links_each_saying_what_it_needs_calls_a_plain_job_directly() -> None:
    seen: list[str] = []
    chain = Chain()
    chain.add(_Keyed(seen))
    assert chain.invoke("J", {"jid": "a"}, "q", lambda: "done") == "done"
    assert asyncio.run(chain.ainvoke("J", {"jid": "b"}, "q", lambda: "done")) == "done"
    assert seen == []
    assert chain.invoke("J", {"jid": "c", "mine": 1}, "q", lambda: "done") == "done"
    assert seen == ["keyed c"]


@pytest.mark.parametrize("keys, types, named", [
    ("mine", None, "wurk_keys"), ({1}, None, "wurk_keys"), (None, ("x",), "wurk_job_types")])
def test_a_wrong_declaration_of_what_a_link_needs_is_refused_naming_it(
    keys: Any, types: Any, named: str
) -> None:
    link = _Keyed([])
    link.wurk_keys = keys  # type: ignore[misc]
    link.wurk_job_types = types  # type: ignore[attr-defined]
    chain = Chain()
    chain.add(link)
    with pytest.raises(TypeError, match=named):
        chain.invoke("J", {"jid": "a"}, "q", lambda: None)
    with pytest.raises(TypeError, match=named):
        asyncio.run(chain.ainvoke("J", {"jid": "a"}, "q", lambda: None))


def test_the_built_in_links_for_features_a_plain_job_does_not_use_are_left_out() -> None:
    """Which built-in links a plain job (no batch, workflow, result, encryption, profile,
    not iterable) passes: the metrics, the cancel's count, the batch's configuration, the
    limits' handling of a limiter used inside it, and the innermost stop."""
    config = Config()
    chain = Chain()
    for kind in BUILT_IN:
        chain.add(kind(None) if kind is ExecutionMetrics else kind(config))
    chain.add(Stopper(config, Running(), Deadlines()))
    chain.invoke("J", {"jid": "a", "class": "J"}, "q", lambda: None)
    assert chain._skips is not None
    assert [type(getattr(link, "__self__", link)).__name__ for link, _ in chain._skips[1]] == [
        "ExecutionMetrics", "CancelHandler", "LimitsMiddleware", "Stopper"]


def test_a_batch_callback_and_a_batch_job_see_the_workers_configuration() -> None:
    """The batch link is left out of a plain job's walk, but still sets the worker's
    configuration (what a batch reopened inside the job is made with) for a job of a batch
    and for a batch callback, which reads it; sync and async alike."""
    from wurk.batch.block import worker_config
    from wurk.batch.callback import Callback

    config = Config()
    chain = Chain()
    for kind in BUILT_IN:
        chain.add(kind(None) if kind is ExecutionMetrics else kind(config))
    seen: list[object] = []

    def final() -> None:
        seen.append(worker_config())

    async def afinal() -> None:
        seen.append(worker_config())

    callback = Callback()
    for job, payload in ((callback, {"jid": "c", "class": "Wurk::Batch::Callback"}),
                         ("J", {"jid": "p", "class": "J"})):
        chain.invoke(job, payload, "q", final)
        asyncio.run(chain.ainvoke(job, payload, "q", afinal))
    assert seen == [config, config, None, None]


# In a fresh interpreter: threads other tests left running make garbage of their own.
WALKS_MAKE_NO_GARBAGE = textwrap.dedent("""
    import asyncio, gc
    from wurk.config import Config
    from wurk.control.deadlines import Deadlines
    from wurk.control.running import Running
    from wurk.control.stopper import Stopper
    from wurk.launcher import BUILT_IN
    from wurk.metrics.tracking import ExecutionMetrics
    from wurk.middleware import AWAIT, Chain

    class Awaited:  # one link a frame of its own: its rest is a partial of the walk
        def __call__(self, job, payload, queue, call_next):
            return call_next()

        async def acall(self, job, payload, queue, call_next):
            return await call_next()

    config = Config()
    chain = Chain()
    for kind in BUILT_IN:
        chain.add(kind(None) if kind is ExecutionMetrics else kind(config))
    chain.add(Stopper(config, Running(), Deadlines()))
    chain.add(Awaited())

    async def job():
        await asyncio.sleep(0)
        return "done"

    async def walks(count):
        for number in range(count):
            payload = {"class": "J", "jid": f"{number:024d}", "args": [], "queue": "q"}
            assert await asyncio.create_task(chain.ainvoke("J", payload, "q", job)) == "done"

    asyncio.run(walks(3))  # what the first walks make once (the walk found, caches)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    asyncio.run(walks(200))
    gc.collect()
    print(len(gc.garbage), sorted({type(o).__name__ for o in gc.garbage}))
""")


def test_an_async_walk_through_the_built_in_links_leaves_no_garbage_cycle() -> None:
    """What docs/design.md says: an async job's walk is freed by reference counting alone,
    so the collector has nothing of it to find (a closure calling itself was a cycle a job,
    and at 1,000 jobs at once the collections it caused were a fifth of the CPU)."""
    done = subprocess.run([sys.executable, "-c", WALKS_MAKE_NO_GARBAGE], capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.strip() == "0 []"


def test_a_link_that_names_its_jobs_sees_them_and_a_name_added_later() -> None:
    """``wurk_job_names``: a job whose payload's class is in the link's own set passes it
    (no key needed), sync and async; the set is read at each job, not copied, so a job
    registered after the chain was first walked counts too."""
    seen: list[str] = []

    class Named(_Keyed):
        wurk_keys = None  # type: ignore[assignment]
        wurk_job_names: ClassVar[set[str]] = {"sealed"}

    link = Named(seen)
    chain = Chain()
    chain.add(link)

    def walk(name: Any, jid: str) -> Any:
        return chain.invoke("J", {"jid": jid, "class": name}, "q", lambda: jid)

    async def awalk(name: Any, jid: str) -> Any:
        return await chain.ainvoke("J", {"jid": jid, "class": name}, "q", lambda: jid)

    assert walk("other", "a") == "a" and walk(["unhashable"], "b") == "b"
    assert walk("sealed", "c") == "c"
    assert asyncio.run(awalk("other", "d")) == "d"
    assert asyncio.run(awalk("sealed", "e")) == "e"
    Named.wurk_job_names.add("later")
    assert walk("later", "f") == "f"
    assert asyncio.run(awalk("later", "g")) == "g"
    assert seen == ["keyed c", "keyed e", "keyed f", "keyed g"]
    link.wurk_job_names = "sealed"  # type: ignore[assignment]
    text = Chain()
    text.add(link)
    with pytest.raises(TypeError, match="wurk_job_names"):
        text.invoke("J", {"jid": "h"}, "q", lambda: None)


def test_then_puts_the_inner_chains_links_after_its_own_and_outside_the_pinned_ones() -> None:
    """A capsule's chain: the configuration's links, then the capsule's, then the link
    pinned innermost (the worker's stop); a link in both is where the capsule has it; the
    chains joined are left as they were."""
    log: list[str] = []
    outer, inner = Chain(), Chain()
    outer.add(Record, log, "app")
    outer.add(Other, log, "shared")
    stop = Record(log, "stop")
    outer.pin_innermost(stop)
    inner.add(Other, log, "capsule")
    inner.add(Record(log, "own"))
    joined = outer.then(inner)
    joined.invoke(None, {}, "q", lambda: log.append("job"))
    assert log == ["app>", "capsule>", "own>", "stop>", "job", "<stop", "<own", "<capsule",
                   "<app"]
    assert len(outer) == 3 and len(inner) == 2
    joined.add(Record, log, "late")  # added after: still outside the pinned stop
    assert list(joined)[-1] is stop
