"""The reaper: in-flight lists whose owner died go back to their queues, so a
``kill -9``, an OOM kill or a lost machine loses no job.

1. At boot and every ``reaper_interval`` (60 s) it sweeps the private lists of the queues
   this process serves, in both layouts (one SCAN of every private list, filtered by queue:
   ``queue:<q>|*`` alone misses Pro's ``queue:sq|<identity>|<q>``); at most once per
   ``super_fetch_orphan_check`` (an hour) cluster-wide (``wurk:reaper:full-scan``) it
   recovers every private list, for queues nobody serves any more.
2. Liveness: an owner is dead when its heartbeat hash is gone. An owner that sees the same
   pids as this process — the same hostname, and its heartbeat records the same boot id and
   pid namespace — is dead at once when its pid is gone, or belongs to a process started at
   another time (pid reuse): no need to wait for its record to expire. Containers that share
   one hostname have pid namespaces of their own, so a pid there proves nothing and only the
   heartbeat counts. Membership of ``processes`` proves nothing (it is pruned lazily). A live
   process's list is never touched — not even a quiet one's. An owner judged dead by its
   missing record is judged again in the recovery script, with the move: one whose record
   came back since (an outage over) keeps its list. A record of another type than a hash
   (written by something else) is a heartbeat while it expires (Ruby's beat keeps its
   EXPIRE; a live wurk deletes such a record at its next beat) and none when it never does.
3. Recovery and the poison-pill count happen in one script per list (``scripts/recover.lua``);
   jobs recovered three times are killed as poison pills (``wurk.fetch.poison``).
4. Both layouts are recognised: wurk's (and Ruby wurk's, with or without the nonce) and
   Sidekiq Pro's ``queue:sq|<identity>|<queue>``.
5. Strays: an entry of this process's own lists that none of its processors holds
   (``wurk.fetch.reliable.Claims``) for longer than a move's reply can take (the socket timeout
   plus a margin) goes back to its queue (``scripts/return_stray.lua``). It is a move whose
   reply a cut connection lost, or the job of a processor that died or could not book the
   job's failure; without this it would wait for the process to exit.
6. Sweeps that fail are reported once per outage and retried with a capped backoff; the
   outage's length is logged at its end.
7. Each recovered job is told to the ``on_recover`` hook (its stored text) and counted:
   cluster-wide in ``wurk:stat:recovered`` (inside the script, with the move) and for the
   observers (``observers``: Prometheus, StatsD) as ``(queue, count)``.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import psutil
import redis

from .. import partitions
from .. import payload as P
from ..config import Config
from ..connections.pool import RedisPool
from ..keys import glob_escape
from ..morgue import Morgue
from ..reporting import report_error
from ..runtime.clock import SYSTEM, Clock
from ..runtime.duty import Duty
from ..runtime.identity import Identity
from ..runtime.timer import Timers
from ..scripts import Script
from .poison import POISON_THRESHOLD, POISON_TTL, kill_poisoned
from .reliable import Claims

__all__ = ["Owner", "Reaper", "parse_private"]

log = logging.getLogger("wurk")

_RECOVER = Script("recover.lua", prelude=("poison_counter.lua", "partition_lib.lua"))
_RETURN_STRAY = Script("return_stray.lua", prelude=("poison_counter.lua", "partition_lib.lua"))
# A pid whose process started this much apart from the owner's recorded start is reused.
PID_REUSE_TOLERANCE = 1.0
# SCAN page size: large enough to cross a big keyspace in few round trips.
SCAN_COUNT = 1000
_NONCE = re.compile(r"^[0-9a-f]{12}$")
# More digits than any system's pid has: a list name with a longer one is no private list.
PID_DIGITS = 20
# A stray must stay unheld this much longer than the socket timeout (the longest a move's
# reply can be on its way before its processor holds the entry): thread scheduling slack.
STRAY_MARGIN = 1.0
_STRAY_GONE, _STRAY_MOVED, _STRAY_POISONED, _STRAY_REFUSED = 0, 1, 2, 3
# The heartbeat records a dead owner was judged by: the recovery script checks them again.
Records = tuple[str, ...]


@dataclass(frozen=True)
class Owner:
    """Who a private list belongs to."""

    hostname: str
    pid: int
    nonce: str | None  # None: Ruby wurk's older layout, without the nonce

    @property
    def identity(self) -> str | None:
        return f"{self.hostname}:{self.pid}:{self.nonce}" if self.nonce else None


def parse_private(config: Config, key: str) -> tuple[str, Owner] | None:
    """``(queue, owner)`` of a private list key, or None when it is not one (the name was
    read from Redis: anything may be in it)."""
    keys = config.keys
    if not key.startswith(keys.queue_prefix):
        return None
    rest = key[len(keys.queue_prefix):]
    if key.startswith(keys.private_pro_prefix):
        parts = rest.split("|", 2)
        if len(parts) < 3:
            return None
        host, _, tail = parts[1].partition(":")
        pid, _, nonce = tail.partition(":")
        number = _pid(pid)
        return (parts[2], Owner(host, number, nonce)) if number is not None and parts[2] \
            else None
    parts = rest.rsplit("|", 4)
    if len(parts) == 5 and _NONCE.match(parts[3]) and (number := _pid(parts[2])) is not None:
        return parts[0], Owner(parts[1], number, parts[3])
    parts = rest.rsplit("|", 3)
    if len(parts) == 4 and (number := _pid(parts[2])) is not None:
        return parts[0], Owner(parts[1], number, None)
    return None


def _pid(text: str) -> int | None:
    """A pid as a list's name writes it: ASCII digits (``str.isdigit`` takes '²' too, which
    ``int`` refuses), no more than any system's pid has (``int`` refuses 4,300 digits)."""
    if text.isascii() and text.isdigit() and len(text) <= PID_DIGITS:
        return int(text)
    return None


class Reaper:
    """Owned by the launcher: one sweep at boot, then one per ``reaper_interval``."""

    def __init__(self, config: Config, identity: Identity, queues: list[str], *,
                 pool: RedisPool | None = None, morgue: Morgue | None = None,
                 claims: Claims | None = None,
                 own_lists: Sequence[tuple[str, str]] = (),
                 timers: Timers | None = None, clock: Clock = SYSTEM) -> None:
        self.config = config
        self._clock = clock
        self.identity = identity
        self.queues = queues
        self.pool = pool or config.pool("internal")
        self.morgue = morgue or Morgue(config, self.pool)
        self.claims = claims
        self.own_lists = list(dict.fromkeys(own_lists))  # (private list, queue)
        self._strays: dict[tuple[str, bytes], float] = {}  # → when first seen unheld
        self._unowned: set[bytes | str] = set()  # list names already warned about
        self._foreign_records: set[str] = set()  # records of another type warned about
        self.observers: list[Callable[[str, int], None]] = []  # (queue, jobs recovered)
        # A failed sweep waits its turn: never sooner than the reaper interval.
        self._duty = Duty(config, "wurk-reaper", self.sweep, lambda: config.reaper_interval,
                          component="reaper", retry_early=False, host=timers, clock=clock)

    def start(self) -> None:
        self._duty.start()

    def stop(self, timeout: float) -> None:
        self._duty.stop(timeout)

    def is_alive(self) -> bool:
        return self._duty.is_alive()

    # -- sweeps -----------------------------------------------------------------------------

    def sweep(self) -> int:
        """Scoped sweep, plus the full scan when this process wins the hourly lock, plus
        this process's strays."""
        verdicts: dict[Owner, Records | None] = {}
        # Pro's layout names the queue last, so no pattern per queue finds both layouts'
        # lists: one SCAN of every private list, kept to the served queues' unless the full
        # scan is due (one SCAN, not one per queue).
        full = self._full_scan_due()
        served = None if full else frozenset(self.queues)
        recovered = self._reap_matching(self.config.keys.private_pattern, verdicts, served)
        recovered += self.return_strays()
        self.recount_partitions()
        if full:
            self.find_stranded_partitions()
        if recovered:
            log.info("reaper: %d job(s) back on their queues", recovered)
        return recovered

    def recount_partitions(self) -> None:
        """Recount the in-flight jobs of each partitioned queue served here from the
        in-flight lists (``wurk.partitions``): after the lists of dead owners went back,
        whatever count a killed worker or a hand edit left wrong is right again."""
        keys = self.config.keys
        for queue in self.queues:
            if queue in self.config.partitions:
                self.pool.run(partial(partitions.recount, keys=keys, queue=queue))

    def find_stranded_partitions(self) -> None:
        """Put back in its ring each partition of a partitioned queue served here whose
        list holds jobs the ring does not name (``partitions.rebuild_ring``: a SCAN, so at
        the hourly full sweep only): nothing else would ever fetch them."""
        keys = self.config.keys
        for queue in self.queues:
            if queue in self.config.partitions:
                self.pool.run(partial(partitions.rebuild_ring, keys=keys, queue=queue),
                              idempotent=True)

    def reap_all(self) -> int:
        """Every private list of the keyspace, whoever serves its queue (no lock)."""
        return self._reap_matching(self.config.keys.private_pattern, {}, None)

    def _full_scan_due(self) -> bool:
        """Whether this process won the full scan's lock, which lives
        ``super_fetch_orphan_check`` seconds of Redis's clock (an hour by default: the scan is
        costly on a big keyspace)."""
        lock = self.config.keys.reaper_lock
        life = max(1, round(self.config.super_fetch_orphan_check * 1000))
        return bool(self.pool.run(lambda r: r.set(lock, str(self.identity), nx=True, px=life)))

    def _reap_matching(self, pattern: str, verdicts: dict[Owner, Records | None],
                       served: frozenset[str] | None) -> int:
        """Recover the lists matching ``pattern`` whose owner is dead, of the ``served``
        queues only (None: of every queue)."""
        recovered = 0
        keys = self.pool.run(lambda r: list(r.scan_iter(match=pattern, count=SCAN_COUNT,
                                                        _type="list")), idempotent=True)
        for raw_key in keys:
            try:
                key = raw_key.decode() if isinstance(raw_key, bytes) else raw_key
            except UnicodeDecodeError:
                parsed = None
            else:
                parsed = parse_private(self.config, key)
            if parsed is None:
                self._warn_unowned(raw_key)
                continue
            queue, owner = parsed
            if served is not None and queue not in served:
                continue
            if owner not in verdicts:
                verdicts[owner] = self.verdict(owner)
            records = verdicts[owner]
            if records is not None:
                recovered += self.recover(key, queue, records)
        return recovered

    def _warn_unowned(self, key: bytes | str) -> None:
        """A list named like an in-flight list whose name says no owner (written by hand or
        by something else): left alone, said once per reaper."""
        if key in self._unowned:
            return
        self._unowned.add(key)
        shown = key if isinstance(key, bytes) else key.encode("utf-8", "replace")
        log.warning("reaper: the list %r is named like an in-flight list but its name does not "
                    "say whose (host, pid, queue); left alone", shown[:200])

    # -- liveness ---------------------------------------------------------------------------
    def is_dead(self, owner: Owner) -> bool:
        return self.verdict(owner) is not None

    def verdict(self, owner: Owner) -> Records | None:
        """None when ``owner`` is alive; else the heartbeat records its death rests on (their
        absence), for the recovery script to check again with the move: the reaper's look and
        the recovery are round trips apart, and a record may come back between them (an
        outage over). Empty when its pid proved it dead (a dead pid does not come back)."""
        me = self.identity
        if (owner.hostname, owner.pid, owner.nonce) == (me.hostname, me.pid, me.nonce):
            return None
        if owner.nonce is None:
            return self._no_live_identity(owner)
        record = self.config.keys.process(owner.identity or "")
        try:
            info = self.pool.run(lambda r: r.hget(record, "info"), idempotent=True)
        except redis.ResponseError as exc:  # a record of another type: the script judges it
            self._warn_foreign_record(record, exc)
            return (record,)
        if info is None:
            return (record,)
        return () if self._pid_proves_dead(owner, info) else None

    def _warn_foreign_record(self, record: str, exc: Exception) -> None:
        if record in self._foreign_records:
            return
        self._foreign_records.add(record)
        log.warning("reaper: the heartbeat record %s holds another Redis type than a hash "
                    "(written by something else; %s): its owner is taken for alive while it "
                    "expires, for dead if it never does", record[:300], exc)

    def _pid_proves_dead(self, owner: Owner, info: bytes | str | None) -> bool:
        """An owner whose heartbeat is still there is dead only when it sees the same pids
        as this process (its record says so) and its pid is gone or reused."""
        if owner.hostname != self.identity.hostname:
            return False
        record = _read_info(info)
        if record is None or not self.identity.shares_pids_with(record):
            return False  # another pid namespace, or a record that does not say: the heartbeat
        try:
            exists = psutil.pid_exists(owner.pid)
        except (OverflowError, ValueError):  # a pid no process can have here: cannot tell
            return False
        if not exists:
            return True
        return self._pid_reused(owner.pid, record)

    def _pid_reused(self, pid: int, record: dict[str, Any]) -> bool:
        try:
            started_at = float(record.get("started_at", 0))
            created = psutil.Process(pid).create_time()
        except (ValueError, TypeError, psutil.Error):
            return False  # cannot tell: the heartbeat says alive, believe it
        return abs(created - started_at) > PID_REUSE_TOLERANCE

    def _no_live_identity(self, owner: Owner) -> Records | None:
        """The older layout names no nonce: alive while any ``host:pid:*`` record is; else
        the records found gone (a ``processes`` member's), for the recovery to check again."""
        keys = self.config.keys
        pattern = glob_escape(f"{owner.hostname}:{owner.pid}:") + "*"

        def records(r: Any) -> list[tuple[str, bool, Any]]:
            # A member that is no UTF-8 is no identity wurk wrote: read as one with no record.
            members = [m.decode("utf-8", "replace") if isinstance(m, bytes) else m
                       for m in r.sscan_iter(keys.processes, match=pattern)]
            pipe = r.pipeline(transaction=False)
            for member in members:
                pipe.exists(keys.process(member))
                pipe.hget(keys.process(member), "info")
            # A record of another type answers an error: the recovery script judges it.
            replies = pipe.execute(raise_on_error=False) if members else []
            return list(zip(members, replies[0::2], replies[1::2], strict=True))

        try:
            found = self.pool.run(records, idempotent=True)
        except redis.ResponseError as exc:  # `processes` of another type: cannot tell
            log.warning("reaper: %s holds another Redis type than a set (written by something "
                        "else; the heartbeat replaces it): the list of %s:%s is left for the "
                        "next sweep (%s)", keys.processes, owner.hostname, owner.pid, exc)
            return None
        foreign = [(keys.process(member), info) for member, _, info in found
                   if isinstance(info, redis.ResponseError)]
        for record, refusal in foreign:
            self._warn_foreign_record(record, refusal)
        if any(exists and not isinstance(info, redis.ResponseError)
               and not self._pid_proves_dead(owner, info) for _, exists, info in found):
            return None
        return tuple(keys.process(member) for member, exists, info in found
                     if not exists or isinstance(info, redis.ResponseError))

    # -- recovery ---------------------------------------------------------------------------
    def recover(self, key: str, queue: str, records: Records = ()) -> int:
        """Move a dead owner's list back; kill its poison pills. Returns jobs moved. Nothing
        moves when one of ``records`` (the heartbeat records the owner was judged dead by)
        is there again when the script runs: the owner is back."""
        # Not replayed: a replay would count a recovery twice.
        keep = self.config.on_recover is not None
        reply = self.pool.run(lambda r: _recover(r, self.config, key, queue, POISON_THRESHOLD,
                                                 keep=keep, records=records))
        if int(reply[5]):
            log.info("reaper: the owner of %s has a heartbeat record again; left alone", key)
            return 0
        if _refused_queue(reply, key):
            return 0
        moved, poisoned = int(reply[0]), list(reply[1])
        _warn_restarted(reply[3])
        _warn_refused(reply[4])
        if moved:
            self._recovered(queue, moved, list(reply[2]))
        for index in range(0, len(poisoned), 2):
            self._kill(key, queue, poisoned[index], int(poisoned[index + 1]))
        if moved:
            log.info("reaper: recovered %d job(s) of %s", moved, key)
        return moved

    def _recovered(self, queue: str, moved: int, jobs: list[bytes]) -> None:
        """Tell the hook each job and the observers the count; their errors stay theirs."""
        hook = self.config.on_recover
        for raw in jobs:
            try:
                if hook is not None:
                    hook(raw.decode("utf-8", "replace"), None)
            except Exception as exc:
                report_error(self.config, exc, {"context": "on_recover hook", "queue": queue})
        for observer in self.observers:
            try:
                observer(queue, moved)
            except Exception as exc:
                report_error(self.config, exc, {"context": "recovery metrics"})

    def _kill(self, key: str, queue: str, raw: bytes, count: int) -> None:
        """A poison pill out of ``key`` and into the dead set, in one script: a reaper racing
        this one finds it gone. A dead set Redis refuses to write (another type: written by
        something else) leaves the pill in ``key``, with a warning naming both, for the next
        sweep: the sweep goes on with the other lists."""
        try:
            kill_poisoned(self.config, self.morgue, raw, queue, count, source=key)
        except redis.ResponseError as exc:
            log.warning("reaper: a poison pill of %s could not go to the dead set %s (%s); "
                        "it stays in %s until the next sweep", queue, self.config.keys.dead,
                        exc, key)

    # -- strays -----------------------------------------------------------------------------
    def return_strays(self) -> int:
        """Own entries unheld since at least the grace go back to their queues."""
        if self.claims is None:
            return 0
        now = self._clock.monotonic()
        grace = self.config.socket_timeout + STRAY_MARGIN
        still: dict[tuple[str, bytes], float] = {}
        moved = 0
        for key, queue in self.own_lists:
            for raw in self._unheld(key, self.claims):
                first = self._strays.get((key, raw), now)
                if now - first >= grace:
                    moved += self._return_stray(key, queue, raw, self.claims)
                else:
                    still[key, raw] = first
        self._strays = still
        return moved

    def _unheld(self, key: str, claims: Claims) -> list[bytes]:
        """Entries of ``key`` no processor holds (each as many times as it is unheld)."""
        held = claims.held(key)
        if self.pool.run(lambda r: r.llen(key), idempotent=True) <= held.total():
            return []  # the usual case: every entry is held; nothing to read

        def read(r: Any) -> list[bytes]:
            return list(r.lrange(key, 0, -1))

        entries = Counter(self.pool.run(read, idempotent=True))
        return list((entries - held).elements())

    def _return_stray(self, key: str, queue: str, raw: bytes, claims: Claims) -> int:
        abandoned = claims.abandoned(key, raw)
        threshold = POISON_THRESHOLD if abandoned else 0
        # Not replayed: a replay could count a return twice.
        status, count, *lists = self.pool.run(
            lambda r: _give_back(r, self.config, key, queue, raw, threshold))
        if lists:
            _warn_restarted(lists[0])
        if len(lists) > 1:
            _warn_refused(lists[1])
        if abandoned and status in (_STRAY_MOVED, _STRAY_POISONED):
            claims.forget_abandoned(key, raw)  # a refused one is still abandoned: counted later
        if status == _STRAY_REFUSED:
            log.warning("reaper: %s holds another Redis type than a list (written by something "
                        "else); a job in flight that no processor held stays in %s until it is "
                        "mended", self.config.keys.queue(queue), key)
        elif status == _STRAY_POISONED:
            self._kill(key, queue, raw, int(count))
        elif status == _STRAY_MOVED:
            log.warning("reaper: a job in flight that no processor held went back to %s "
                        "(a lost fetch reply, or a processor that let go of it)", queue)
        return 1 if status == _STRAY_MOVED else 0



def _warn_restarted(keys: list[bytes | str]) -> None:
    """Poison counters the scripts found holding no count, and started again from 1."""
    for key in keys:
        name = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
        log.warning("reaper: the poison counter %s held no count (written by something else); "
                    "it starts again from this recovery", name[:300])


def _warn_refused(keys: list[bytes | str]) -> None:
    """Keys the scripts found holding another type than their bookkeeping writes there."""
    for key in keys:
        name = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
        log.warning("reaper: %s holds another Redis type (written by something else); the "
                    "recovery went on without updating it", name[:300])


def _read_info(info: bytes | str | None) -> dict[str, Any] | None:
    """A heartbeat's ``info`` JSON as a mapping, or None when it is missing or not one (it
    may have been written by anyone)."""
    if info is None:
        return None
    try:
        record = P.loads(info)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _recover(r: Any, config: Config, key: str, queue: str, threshold: int, *,
             keep: bool = False, records: Records = ()) -> Any:
    keys = config.keys
    script = r.register_script(_RECOVER.text)  # EVALSHA, loading the script on NOSCRIPT
    # A partitioned queue's jobs are counted out of flight as they go back (wurk.partitions).
    counts = [keys.partition_running(queue)] if queue in config.partitions else []
    return script(keys=[key, keys.queue(queue), keys.queues, keys.stat_recovered, *records,
                        *counts],
                  args=[keys.poison_prefix, threshold, POISON_TTL, queue, "1" if keep else "0",
                        len(records)])


def _give_back(r: Any, config: Config, key: str, queue: str, raw: bytes,
               threshold: int) -> Any:
    keys = config.keys
    script = r.register_script(_RETURN_STRAY.text)  # EVALSHA, loading it on NOSCRIPT
    counts = [keys.partition_running(queue)] if queue in config.partitions else []
    return script(keys=[key, keys.queue(queue), keys.queues, *counts],
                  args=[raw, keys.poison_prefix, threshold, POISON_TTL, queue])


def return_own_lists(config: Config, private_lists: list[tuple[str, str]],
                     pool: RedisPool | None = None) -> int:
    """At clean shutdown: whatever is still in this process's lists goes back, uncounted."""
    target = pool or config.pool("internal")
    moved = 0
    for key, queue in private_lists:
        moved += _return_list(target, config, key, queue)
    return moved


def _return_list(pool: RedisPool, config: Config, key: str, queue: str) -> int:
    reply = pool.run(lambda r: _recover(r, config, key, queue, 0))
    _refused_queue(reply, key)
    return int(reply[0])


def _refused_queue(reply: Sequence[Any], key: str) -> bool:
    """Whether ``recover.lua`` moved nothing because the queue's key holds another Redis
    type (its seventh item names it); warned about, naming both keys."""
    if len(reply) < 7:
        return False
    queue = reply[6].decode("utf-8", "replace") if isinstance(reply[6], bytes) else reply[6]
    log.warning("reaper: %s holds another Redis type than a list (written by something else); "
                "the jobs of %s stay there, uncounted, until it is mended", queue[:300], key)
    return True
