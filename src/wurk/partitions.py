"""Fair, partitioned queues: round-robin across a queue's partitions, a per-partition limit
of jobs in flight enforced when jobs are fetched (docs/partitions.md).

1. Declared in the configuration: ``Config(partitions={"imports": 5})`` makes the queue
   ``imports`` partitioned, at most 5 jobs of any one partition in flight at once, every
   process of the cluster together. A job names its partition with the ``partition`` job
   option (``job.set(partition=account_id)``), or its definition's ``partition_by`` (a
   function of the arguments, ``wurk.job``), which the payload carries, so a retry or a
   scheduled job comes back to its partition; a job without one is in ``default``.
   ``Config(partition_rates={"imports": 10})`` also caps the jobs of one partition fetched
   in one second of Redis's clock.
2. Layout (``wurk.keys``): one list per partition, a ring of the partitions with work
   (scored by turn), the in-flight count per partition and the in-flight lists that took
   jobs of the queue. Partitions appear with their first job and leave the ring when found
   empty: nothing registers them.
3. Push (``scripts/partition_push.lua``, chosen by the push writer when the job's queue is
   declared partitioned), fetch (``partition_fetch.lua``, by ``wurk.fetch.partitioned``), ACK
   (``partition_ack.lua``) and requeue (``partition_requeue.lua``) keep the counts in the same
   script as the move; the reaper's return of a dead worker's jobs counts them out
   (``recover.lua``), and recounts every partitioned queue it serves from the in-flight
   lists each sweep (``partition_recount.lua``), repairing a count a killed worker or a hand
   edit left wrong. A count that is not a whole number ≥ 0 is recounted at once by the fetch.
4. Jobs that reach the queue's plain list (the reaper's returns, the scheduler's moves, a push
   from a process that does not declare the queue partitioned, a Ruby client) are routed to
   their partitions by the next fetch.
5. wurk's own layout: a Ruby Sidekiq process cannot fetch a partitioned queue.
6. Inspection (``wurk.api.Queue``) covers the plain list and every partition; its clear
   empties a partition a page per script (``scripts/partition_clear.lua``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import payload as P
from .errors import ConfigError, InvalidPayload
from .keys import Keys, glob_escape
from .options import check_queue_name
from .scripts import Script
from .stored import count_or_zero, shown, text

log = logging.getLogger("wurk")

__all__ = [
    "DEFAULT_PARTITION",
    "PARTITION_MAX",
    "Partition",
    "Partitions",
    "apush",
    "check_partition_rates",
    "check_partitions",
    "is_partition_name",
    "partition_name",
    "partition_of",
    "partitions_of",
    "push",
    "rebuild_ring",
    "recount",
    "warn_dropped",
    "warn_restarted",
]

# The partition of a job that names none (the Lua in scripts/partition_lib.lua agrees).
DEFAULT_PARTITION = "default"
PARTITION_MAX = 200
_BAD = re.compile(r"[:|\x00-\x1f\x7f]")
# The dashboard shows at most this many partitions of one queue, the largest first.
SHOWN = 200
# ... out of at most this many ring members and counts read.
READ = 1000

_LIB = ("partition_lib.lua",)
PUSH = Script("partition_push.lua", prelude=_LIB)
FETCH = Script("partition_fetch.lua", prelude=_LIB)
ACK = Script("partition_ack.lua", prelude=_LIB)
REQUEUE = Script("partition_requeue.lua", prelude=_LIB)
RECOUNT = Script("partition_recount.lua", prelude=_LIB)
CLEAR = Script("partition_clear.lua")
FORGET = Script("partition_forget.lua")


# A stored number is a partition only below this: cjson (the scripts' JSON) reads numbers as
# doubles, which hold every whole number below it and not all above.
EXACT_NUMBERS = 2 ** 53


def partition_name(value: Any, where: str = "push") -> str:
    """A job's ``partition`` as stored: a string (a whole number becomes its digits) of 1 to
    200 bytes of UTF-8 without ``:``, ``|`` or control characters."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value or _BAD.search(value) \
            or len(value.encode("utf-8", "surrogatepass")) > PARTITION_MAX \
            or not _utf8(value):
        raise InvalidPayload(
            f"{where}: partition={value!r} is invalid; expected a string (or a whole number) "
            f"of 1 to {PARTITION_MAX} bytes of UTF-8 without ':', '|' or control characters",
            field=P.PARTITION)
    return value


def _utf8(text: str) -> bool:
    """Whether ``text`` is UTF-8 (a lone surrogate is not: no JSON writer can store it)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def partition_of(raw: bytes | str) -> str:
    """The partition a stored job is in, as the Lua reads it (``part_of`` in
    ``scripts/partition_lib.lua``): its ``partition`` field when that is a valid name (a
    whole number as its digits), else ``DEFAULT_PARTITION`` — never raised."""
    try:
        name = P.loads(raw).get(P.PARTITION)
    except (InvalidPayload, ValueError):  # not a JSON object: the default partition
        return DEFAULT_PARTITION
    if isinstance(name, float) and name.is_integer():
        name = int(name)
    if isinstance(name, int) and not isinstance(name, bool):
        # Past 2**53 the Lua's JSON holds a number only roughly: none, on both sides.
        name = str(name) if abs(name) < EXACT_NUMBERS else None
    return name if isinstance(name, str) and _valid(name) else DEFAULT_PARTITION


def check_partitions(value: Any) -> dict[str, int]:
    """The ``partitions`` setting: queue name → in-flight limit per partition (≥ 1)."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"partitions must map queue names to a limit per partition, e.g. "
                          f"{{'imports': 5}}, not {value!r}")
    checked: dict[str, int] = {}
    for queue, limit in value.items():
        if not isinstance(queue, str):
            raise ConfigError(f"partitions: {queue!r} is not a queue name")
        check_queue_name(queue)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"partitions: the limit of {queue!r} must be a whole number of "
                              f"jobs in flight per partition, at least 1, not {limit!r}")
        checked[queue] = limit
    return checked


def check_partition_rates(value: Any, partitioned: Mapping[str, int]) -> dict[str, int]:
    """The ``partition_rates`` setting: partitioned queue → most jobs of one partition
    fetched in one second (≥ 1)."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"partition_rates must map partitioned queues to jobs per second "
                          f"per partition, e.g. {{'imports': 10}}, not {value!r}")
    checked: dict[str, int] = {}
    for queue, rate in value.items():
        if queue not in partitioned:
            raise ConfigError(f"partition_rates: {queue!r} is not a partitioned queue; "
                              f"declare it in partitions first")
        if isinstance(rate, bool) or not isinstance(rate, int) or rate < 1:
            raise ConfigError(f"partition_rates: the rate of {queue!r} must be a whole number "
                              f"of jobs per second per partition, at least 1, not {rate!r}")
        checked[queue] = rate
    return checked


def stamp(job: dict[str, Any]) -> None:
    """A job pushed to a partitioned queue: its partition checked and stored as a string; a
    null one is one not set (the default partition, as the scripts read it)."""
    if job.get(P.PARTITION) is not None:
        job[P.PARTITION] = partition_name(job[P.PARTITION])


def _push_call(keys: Keys, queue: str, jsons: Sequence[str]) -> tuple[list[str], list[object]]:
    return ([keys.partition_ring(queue), keys.queues],
            [keys.partition_prefix(queue), queue, *jsons])


def push(r: Any, keys: Keys, by_queue: Mapping[str, Sequence[str]]) -> None:
    """Push each queue's jobs (JSON) to their partitions, one script per queue, one round
    trip."""
    replies = PUSH.call_many(r, [_push_call(keys, q, jsons) for q, jsons in by_queue.items()])
    _raise_first(list(by_queue), replies)


async def apush(r: Any, keys: Keys, by_queue: Mapping[str, Sequence[str]]) -> None:
    """``push`` on redis-py's asyncio client."""
    replies = await PUSH.acall_many(r, [_push_call(keys, q, jsons)
                                        for q, jsons in by_queue.items()])
    _raise_first(list(by_queue), replies)


def _raise_first(queues: list[str], replies: list[Any]) -> None:
    """The first queue's error, naming the queues whose jobs were pushed all the same: each
    queue's script is all or nothing, and pushes whatever another's did."""
    failed = [reply for reply in replies if isinstance(reply, Exception)]
    if not failed:
        return
    went = [queue for queue, reply in zip(queues, replies, strict=True)
            if not isinstance(reply, Exception)]
    if not went:
        raise failed[0]
    raise type(failed[0])(f"{failed[0]}; the jobs of this push to queue(s) "
                          f"{', '.join(went)} were pushed")


def recount(r: Any, keys: Keys, queue: str) -> int:
    """Recount the queue's in-flight jobs per partition from the in-flight lists (exact, in
    one script); returns how many partitions have jobs in flight."""
    reply = RECOUNT.call(_Conn(r), [keys.partition_running(queue),
                                    keys.partition_holders(queue),
                                    keys.partition_rates(queue)], [keys.queue_prefix, queue])
    warn_restarted(queue, reply[1])
    warn_dropped(keys, queue, reply[2])
    return int(reply[0])


def rebuild_ring(r: Any, keys: Keys, queue: str) -> int:
    """Put back in the queue's ring every partition whose list exists and that it does not
    name (after a fetch deleted a ring of another type; and at the reaper's hourly full
    sweep, for a ring deleted or edited by hand): the jobs already waiting in them are
    fetched again, not only those of partitions pushed to later — and counted by
    ``wurk.api.Queue``, which lists the partitions from the ring. Rare, so a SCAN of the
    partitions' keys; returns how many partitions were put back (a warning names how
    many)."""
    pattern = glob_escape(keys.partition_prefix(queue)) + "*"
    prefix = len(keys.partition_prefix(queue))
    names = {text(key)[prefix:] for key in r.scan_iter(match=pattern, count=1000,
                                                       _type="list")}
    found = [name for name in names if _valid(name)]
    added = 0
    for start in range(0, len(found), READ):
        added += int(r.zadd(keys.partition_ring(queue),
                            dict.fromkeys(found[start:start + READ], 0), nx=True))
    if added:
        log.warning("partitioned queue %s: %d partition(s) with jobs waiting were not in its "
                    "ring (deleted or edited by something else), and were never fetched; put "
                    "back", queue, added)
    return added


def warn_dropped(keys: Keys, queue: str, dropped: Sequence[Any]) -> None:
    """Name the holders a recount dropped as no in-flight list of the queue (a script's
    ``{how many, the first 20...}``): written by something else, their jobs held partitions
    at their limit."""
    if not dropped or not int(dropped[0]):
        return
    names = ", ".join(shown(name, 300) for name in dropped[1:])
    more = int(dropped[0]) - len(dropped) + 1
    log.warning("partitioned queue %s: %s named %s%s, which %s no in-flight list of the queue "
                "(written by something else); dropped from it, %s jobs not counted in flight",
                queue, keys.partition_holders(queue), names,
                f" and {more} more" if more > 0 else "",
                "is" if int(dropped[0]) == 1 else "are",
                "its" if int(dropped[0]) == 1 else "their")


def warn_restarted(queue: str, restarted: Sequence[Any]) -> None:
    """Name each key of the queue a script found holding another Redis type than wurk
    writes there (written by something else) and deleted, to start again."""
    for key in restarted:
        log.warning("partitioned queue %s: %s held another Redis type than wurk writes "
                    "there (written by something else); deleted, it starts again",
                    queue, shown(key, 300))


class _Conn:
    """A redis-py client as a ``Script.call`` target."""

    def __init__(self, r: Any) -> None:
        self.r = r

    def call(self, *args: Any) -> Any:
        return self.r.execute_command(*args)


@dataclass(frozen=True, slots=True)
class Partition:
    """One partition as the dashboard shows it."""

    name: str
    size: int  # jobs waiting
    running: int  # jobs in flight, as counted


@dataclass(frozen=True, slots=True)
class Partitions:
    """A partitioned queue's partitions as the dashboard shows them."""

    shown: list[Partition]  # the largest first, at most ``SHOWN``
    total: int  # partitions with work or in flight (at least)
    waiting: int  # jobs waiting in the partitions read
    running: int  # jobs in flight in the partitions read


def partitions_of(r: Any, keys: Keys, queue: str) -> Partitions:
    """The queue's partitions with work or jobs in flight, the largest first (at most
    ``SHOWN``), how many there are (at least), and their jobs waiting and in flight. Read
    defensively and in bounded time: at most ``READ`` ring members and counts are looked
    at, a name no push could have written is left out, a count that is not a whole number
    shows as 0 — never raised."""
    ring = keys.partition_ring(queue)
    running_key = keys.partition_running(queue)
    types = r.pipeline(transaction=False)
    types.type(ring)
    types.type(running_key)
    ring_type, running_type = (text(t) for t in types.execute())
    names, in_ring = [], 0
    if ring_type == "zset":
        in_ring = int(r.zcard(ring))
        names = [text(m) for m in r.zrange(ring, 0, READ - 1)]
    counts: dict[str, int] = {}
    if running_type == "hash":
        for field, value in r.hscan_iter(running_key, count=READ):
            counts[text(field)] = count_or_zero(value)
            if len(counts) >= READ:
                break
    every = [name for name in dict.fromkeys([*names, *counts]) if _valid(name)]
    pipe = r.pipeline(transaction=False)
    for name in every:
        pipe.type(keys.partition(queue, name))
        pipe.llen(keys.partition(queue, name))
    replies = pipe.execute(raise_on_error=False) if every else []
    shown = []
    for index, name in enumerate(every):
        kind, size = replies[2 * index], replies[2 * index + 1]
        waiting = int(size) if text(kind) == "list" and isinstance(size, int) else 0
        shown.append(Partition(name, waiting, counts.get(name, 0)))
    shown.sort(key=lambda p: (-p.size, -p.running, p.name))
    return Partitions(shown[:SHOWN], max(len(shown), in_ring), sum(p.size for p in shown),
                      sum(p.running for p in shown))


def is_partition_name(name: str) -> bool:
    """Whether a push could have written ``name`` as a partition (``partition_name``)."""
    return _valid(name)


def _valid(name: str) -> bool:
    try:
        partition_name(name)
    except InvalidPayload:
        return False
    return True


