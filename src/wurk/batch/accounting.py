"""Every change to a batch's state, as one Lua script call each (``scripts/batch_*.lua``).

1. ``create`` / ``reopen`` / ``close``: a jobs block's start and end. A new batch holds a
   pending placeholder until its first block closes, so nothing fires while it still pushes.
2. ``push``: jobs of the open block and their registration, in one script (with a unique
   job's lock when it has one: a job refused as a duplicate is not registered).
3. ``record``: one attempt of a batch job ended — success, failure (a retry booked) or death.
   Counted once per jid, whatever is replayed: an ACK sent twice, a job recovered by the
   reaper and run again, a failure reported after the success.
4. ``callback_done`` (a callback job completed; a parent waits for its children's success
   callbacks), ``invalidate`` (a batch and its descendants) and ``remove`` (jobs taken out
   of the batch's counts, which may complete it).
5. ``on_transition``: a batch was created, completed, succeeded or had a job die — told to
   every registered callback by the process whose script call did it, once per batch and
   event (StatsD's batch metrics listen here).
6. ``BlockWriter``: the writer of an open jobs block; with ``autoflush`` it holds the
   block's jobs and writes them every N jobs, and at the block's end.

A connection is anything with ``call(*command)``: ``wurk.redis()``'s lent connection, or a
redis-py client wrapped in ``Calls``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import redis

from .. import payload as P
from ..client import writers
from ..client.locks import lock_for
from ..client.writers import Entries
from ..connections.pool import RedisPool
from ..errors import BatchError, RedisUnavailable
from ..reporting import Callbacks, Registration
from ..scripts import Script
from ..stored import epoch, shown, text
from . import block as blocks
from .block import Block, Entry

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["BlockWriter", "Calls", "Outcome", "Transition", "awrite", "callback_done", "close",
           "create", "fired", "invalidate", "locks", "on_transition", "push", "push_call",
           "pushed", "record", "remove", "reopen", "write"]

log = logging.getLogger("wurk")

Outcome = Literal["success", "failure", "death"]

_LIB = ("batch_lib.lua",)
_OPEN = Script("batch_open.lua", prelude=_LIB)
_CLOSE = Script("batch_close.lua", prelude=_LIB)
_PUSH = Script("batch_push.lua", prelude=(*_LIB, "owned.lua"))
_JOB = Script("batch_job.lua", prelude=_LIB)
_CALLBACK_DONE = Script("batch_callback_done.lua", prelude=_LIB)
_INVALIDATE = Script("batch_invalidate.lua", prelude=_LIB)
_REMOVE = Script("batch_remove.lua", prelude=_LIB)
# Error replies of the scripts that mean "this batch cannot take that", not "Redis failed"
# (BATCHBROKEN: one of its keys holds another Redis type; nothing was written).
_REFUSALS = ("NOBATCH", "BATCHDONE", "BATCHEXISTS", "BATCHBROKEN")


class Calls:
    """A redis-py client seen as a connection with ``call``."""

    __slots__ = ("_redis",)

    def __init__(self, client: redis.Redis) -> None:
        self._redis = client

    def call(self, *args: Any) -> Any:
        return self._redis.execute_command(*args)  # type: ignore[no-untyped-call]


def _common(config: Config) -> list[object]:
    """What every batch script takes first; with a testing mode's sink selected, the
    scripts hand jobs back instead of pushing them, and the sink writes them."""
    return [config.keys.prefix, config.timestamp_format, int(config.dead_timeout),
            "1" if writers.beneath() is not None else ""]


def _run(script: Script, conn: Any, keys: list[str], args: list[object]) -> Any:
    try:
        return script.call(conn, keys, args)
    except redis.ResponseError as exc:
        message = str(exc)
        if message.startswith(_REFUSALS):
            raise BatchError(message.split(" ", 1)[1]) from None
        raise


class Transition(NamedTuple):
    """A batch changed: ``event`` is ``created``, ``complete``, ``success`` or ``death``;
    ``duration_ms`` is the time from creation to success (None for the other events, or
    when a stored time cannot be read)."""

    config: Config
    bid: str
    event: str
    duration_ms: float | None = None


_transitions: Callbacks[Transition] = Callbacks()


def on_transition(callback: Callable[[Transition], None]) -> Registration:
    """Call ``callback(transition)`` for each batch change a script call of this process
    makes; the returned handle's ``remove()`` unregisters it. A callback that raises is
    reported, never raised: the change is made already."""
    return _transitions.add(callback)


def _announce(config: Config, bid: str, event: str, created: Any = None,
              at: Any = None) -> None:
    duration = None
    if event == "success":
        start, end = epoch(text(created) or None), epoch(text(at) or None)
        if isinstance(start, float) and isinstance(end, float):
            duration = max(0.0, (end - start) * 1000)
    transition = Transition(config, bid, event, duration)
    _transitions.notify(config, transition, {"context": "batch transition callback",
                                             "bid": bid, "event": event})


def _warn(bid: str, problems: Sequence[Any]) -> None:
    """What a batch script found stored that wurk never writes, and what it did about it
    (batch_lib.lua's problems: a key of another Redis type, and what was not done for it;
    a count rebuilt from the batch's sets)."""
    for found in problems:
        log.warning("batch %s: %s", shown(bid, 200), shown(found, 1000))


def fired(config: Config, bid: str, reply: Any) -> int:
    """``_fired`` for a script of another feature that changes a batch (a workflow's
    cancel takes its queued steps out of its batch)."""
    return _fired(config, bid, reply)


def _fired(config: Config, bid: str, reply: Any) -> int:
    """The result of a script that may fire (batch_lib.lua's ``reply``): callback jobs it
    handed back (a testing mode) go to the selected sink through the client, what it found
    stored that wurk never writes is warned about, and the events it fired are announced."""
    count = int(reply[1])
    handed = reply[2:2 + count]
    found = int(reply[2 + count])
    _warn(bid, reply[3 + count:3 + count + found])
    fired = reply[3 + count + found:]
    keeping = writers.beneath()
    if handed and keeping is not None:
        keeping.write(config, config.pool("client"), [(P.loads(raw), None) for raw in handed])
    for index in range(0, len(fired) - 3, 4):
        bid, event, created, at = fired[index:index + 4]
        _announce(config, text(bid), text(event), created, at)
    return int(reply[0])


def create(conn: Any, config: Config, *, bid: str, description: str, callback_queue: str,
           callback_class: str, parent_bid: str | None, tags: Sequence[str],
           linger: float | None, callbacks: Sequence[tuple[str, str, dict[str, Any]]],
           context: Mapping[str, Any] | None = None) -> None:
    """``context``: the ``wurk_ctx`` the callback jobs carry (``wurk.context.current``)."""
    _run(_OPEN, conn, [], [*_common(config), bid, "create", description, callback_queue,
                           callback_class, parent_bid or "", P.dumps(list(tags)),
                           "" if linger is None else repr(linger),
                           P.dumps([list(cb) for cb in callbacks]),
                           P.dumps(dict(context)) if context else "", *tags])
    _announce(config, bid, "created")


def reopen(conn: Any, config: Config, bid: str) -> None:
    _run(_OPEN, conn, [], [*_common(config), bid, "reopen"])


def close(conn: Any, config: Config, bid: str) -> bool:
    return bool(_fired(config, bid, _run(_CLOSE, conn, [], [*_common(config), bid])))


def record(conn: Any, config: Config, bid: str, jid: str, outcome: Outcome) -> bool:
    """Count one attempt's end; True when it changed the batch (False: counted already,
    or one of the batch's keys holds another Redis type — a warning names it, and the
    attempt is not counted: the job is not failed for it, so it does not run again)."""
    return bool(_fired(config, bid, _run(_JOB, conn, [],
                                         [*_common(config), bid, jid, outcome])))


def callback_done(conn: Any, config: Config, bid: str, event: str, jid: str) -> bool:
    return bool(_fired(config, bid, _run(_CALLBACK_DONE, conn, [],
                                          [*_common(config), bid, event, jid])))


def invalidate(conn: Any, config: Config, bid: str) -> int:
    reply = _run(_INVALIDATE, conn, [], [*_common(config), bid])
    _warn(bid, reply[1:])
    return int(reply[0])


def remove(conn: Any, config: Config, bid: str, jids: Sequence[str]) -> int:
    """Take ``jids`` out of the batch's counts; returns how many it held unfinished."""
    return _fired(config, bid, _run(_REMOVE, conn, [], [*_common(config), bid, *jids]))


def push(conn: Any, config: Config, bid: str, entries: Sequence[Entry],
         locks: Sequence[tuple[str, int]] | None = None) -> tuple[int, set[str]]:
    """Write ``entries`` (payload, time or None) and register them with batch ``bid``;
    ``locks`` gives each job's unique lock and its lifetime in ms (``("", 0)``: none).
    Returns (jobs newly registered, jids refused as duplicates of a unique job)."""
    reply = _run(_PUSH, conn, *push_call(config, bid, entries, locks))
    return pushed(entries, reply, bid)


def push_call(config: Config, bid: str, entries: Sequence[Entry],
              locks: Sequence[tuple[str, int]] | None = None) -> tuple[list[str], list[object]]:
    """The push script's keys and arguments (for a sync or an async connection)."""
    keys = config.keys
    args: list[object] = [*_common(config), bid]
    for index, (job, at) in enumerate(entries):
        lock, ttl = locks[index] if locks is not None else ("", 0)
        args += [job[P.JID], job[P.QUEUE], "" if at is None else P.score(at), P.dumps(job),
                 lock, ttl]
    return [keys.batch(bid), keys.batch(bid, "jids"), keys.queues, keys.schedule], args


def pushed(entries: Sequence[Entry], reply: Any, bid: str) -> tuple[int, set[str]]:
    """(jobs newly registered, jids refused as duplicates) from the push script's reply;
    a count it rebuilt is warned about."""
    refused = int(reply[1])
    _warn(bid, reply[2 + refused:])
    return int(reply[0]), {str(entries[int(i) - 1][0][P.JID]) for i in reply[2:2 + refused]}


def write(client: redis.Redis, config: Config, block: Block, entries: Sequence[Entry]
          ) -> set[str]:
    """Push the jobs of an open block and register them with its batch, and count them
    towards the block. Returns the jids refused as duplicates of a unique job. With a testing
    mode's writer beneath they are only registered: that writer keeps or runs them."""
    _, refused = push(Calls(client), config, block.bid, entries, locks(config, entries))
    return _counted(block, entries, refused)


async def awrite(client: Any, config: Config, block: Block, entries: Sequence[Entry]
                 ) -> set[str]:
    """``write`` on redis-py's asyncio client (the async push): the same script and
    arguments, one round trip (two more on a server that lacks the script)."""
    keys, args = push_call(config, block.bid, entries, locks(config, entries))
    try:
        try:
            reply = await client.execute_command(*_PUSH.evalsha(keys, args))
        except redis.exceptions.NoScriptError:  # nothing ran: safe to send again
            await client.execute_command(*_PUSH.load())
            reply = await client.execute_command(*_PUSH.evalsha(keys, args))
    except redis.ResponseError as exc:
        if str(exc).startswith(_REFUSALS):
            raise BatchError(str(exc).split(" ", 1)[1]) from None
        raise
    _, refused = pushed(entries, reply, block.bid)
    return _counted(block, entries, refused)


def _counted(block: Block, entries: Sequence[Entry], refused: set[str]) -> set[str]:
    block.pushed += len(entries) - len(refused)
    if refused:
        log.info("%d duplicate(s) of unique jobs not pushed nor added to batch %s",
                 len(refused), block.bid)
    return refused


def locks(config: Config, entries: Sequence[Entry]) -> list[tuple[str, int]] | None:
    """Each job's unique lock and its ``unique_for`` in ms (the script adds a scheduled
    job's wait, on Redis's clock), ``("", 0)`` for a job without one; None when no job has
    one."""
    if not any(job.get(P.UNIQUE_FOR) is not None for job, _ in entries):
        return None
    now = time.time()
    return [lock_for(config.keys, job, None, now)
            if job.get(P.UNIQUE_FOR) is not None else ("", 0)
            for job, _ in entries]


class BlockWriter:
    """The overlay of an open jobs block (``wurk.client.writers``): the block's jobs are
    pushed and registered by the batch's script, in one round trip; any other job goes to
    the client's Redis writer. Under a testing mode the block's jobs are only registered,
    and that mode's writer keeps or runs every job.

    With ``autoflush=N`` the block's jobs are held in this process instead and written N at
    a time, one round trip for N pushes; ``flush()`` writes the rest (the block's end calls
    it). Held jobs are not in Redis yet, so nothing counts them: the batch's total and
    pending only ever hold jobs that exist. A unique job is never held (its push must learn
    whether it was a duplicate): it goes out at once, with the jobs held before it. Under a
    testing mode nothing is held (inline runs each job at its push).
    """

    def __init__(self, block: Block, autoflush: int | None = None) -> None:
        self.block = block
        self.autoflush = autoflush
        self._lock = threading.Lock()
        self._held: list[Entry] = []
        self._held_config: Config | None = None

    @property
    def held(self) -> int:
        """Jobs pushed in this block and not written yet."""
        return len(self._held)

    def write(self, config: Config, pool: RedisPool, entries: Entries) -> set[str]:
        plain, mine = blocks.split(self.block, entries)
        keeping = writers.beneath()
        refused: set[str] = set()
        for target, due in self._due(config, mine, keeping is None):
            refused |= self._send(target, pool if target is config else
                                  target.pool("client"), due)
        if keeping is not None:
            keeping.write(config, pool, entries)
            return set()
        return refused | (writers.RedisWriter().write(config, pool, plain) if plain else set())

    async def awrite(self, config: Config, entries: Entries) -> set[str]:
        plain, mine = blocks.split(self.block, entries)
        keeping = writers.beneath()
        refused: set[str] = set()
        for target, due in self._due(config, mine, keeping is None):
            refused |= await self._asend(target, due)
        if keeping is not None:
            await keeping.awrite(config, entries)
            return set()
        if plain:
            refused |= await writers.RedisWriter().awrite(config, plain)
        return refused

    def flush(self) -> int:
        """Write the jobs held so far (sync, on the configuration's client pool); returns
        how many. A failure raises ``RedisUnavailable`` naming them: they were not pushed."""
        with self._lock:
            config, due = self._held_config, self._held
            self._held, self._held_config = [], None
        if config is None or not due:
            return 0
        self._send(config, config.pool("client"), due)
        return len(due)

    def _due(self, config: Config, mine: list[Entry], holding: bool
             ) -> list[tuple[Config, list[Entry]]]:
        """What to write now, by configuration: ``mine`` at once, or the held jobs once
        there are ``autoflush`` of them (or a unique job among them, or jobs of another
        configuration arrive)."""
        if not mine:
            return []
        due: list[tuple[Config, list[Entry]]] = []
        with self._lock:
            held_config = self._held_config
            if self._held and held_config is not None and held_config is not config:
                due.append((held_config, self._held))
                self._held, self._held_config = [], None
            if not holding or not self.autoflush or self.autoflush <= 1:
                due.append((config, [*self._held, *mine]))
                self._held, self._held_config = [], None
                return due
            self._held += mine
            self._held_config = config
            if len(self._held) >= self.autoflush or any(job.get(P.UNIQUE_FOR) is not None
                                                         for job, _ in mine):
                due.append((config, self._held))
                self._held, self._held_config = [], None
        return due

    def _send(self, config: Config, pool: RedisPool, entries: list[Entry]) -> set[str]:
        try:
            # With push_replicas, on one connection followed by WAIT (``writers.replicated``).
            found: set[str] = pool.run(lambda _: writers.replicated(
                config, pool, lambda client: write(client, config, self.block, entries)))
        except RedisUnavailable as exc:
            raise RedisUnavailable(writers.push_failed(entries, exc)) from exc
        return found

    async def _asend(self, config: Config, entries: list[Entry]) -> set[str]:
        try:
            pool = config.async_pool()
            found: set[str] = await pool.run(lambda _: writers.areplicated(
                config, pool, lambda client: awrite(client, config, self.block, entries)))
        except RedisUnavailable as exc:
            raise RedisUnavailable(writers.push_failed(entries, exc)) from exc
        return found


def decode_callbacks(raw: str | bytes | None) -> list[tuple[str, str, dict[str, Any]]]:
    """The stored ``callbacks`` field as (event, target, options); bad entries skipped."""
    if not raw:
        return []
    try:
        items = P.loads_json(raw)  # at most 100 levels deep: "[" * 100000 is refused
    except ValueError:
        return []
    found: list[tuple[str, str, dict[str, Any]]] = []
    for item in items if isinstance(items, list) else []:
        if (isinstance(item, list) and len(item) >= 2 and isinstance(item[0], str)
                and isinstance(item[1], str)):
            options = item[2] if len(item) > 2 and isinstance(item[2], dict) else {}
            found.append((item[0], item[1], options))
    return found
