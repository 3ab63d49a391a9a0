"""Worker processes and what they are running.

1. ``ProcessSet`` — the live processes: their heartbeat records, total concurrency and
   memory, the leader (``dear-leader``), and pruning of identities whose heartbeat expired
   (at most once a minute cluster-wide, under ``process_cleanup``).
2. ``Process`` — one heartbeat record (the ``info`` JSON merged with the hash fields, read
   the way every Sidekiq version wrote them) and remote quiet / stop / thread dump.
3. ``WorkSet`` — running jobs, from ``<identity>:work`` (Sidekiq 6.5+, wurk) or, for a
   process that writes only the 6.4 name, ``<identity>:workers``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import redis

from .. import stored as values
from ..config import Config, default_config
from ..connections.pool import RedisPool
from ..connections.replies import raise_refusal, reply_code
from ..errors import InspectionError
from ..stored import Invalid
from .queues import sscan_page
from .record import JobRecord

__all__ = ["Process", "ProcessSet", "Work", "WorkSet"]

log = logging.getLogger("wurk")

# Hash fields of the heartbeat record, in the order they are read.
HASH_FIELDS = ("info", "busy", "beat", "quiet", "rss", "rtt_us", "concurrency", "loop_lag_us")
# Sidekiq's prune lock lasts a minute: one process prunes per minute, cluster-wide.
CLEANUP_LOCK_SECONDS = 60
# A signal not popped within a minute is stale: its target stopped beating.
SIGNAL_TTL_SECONDS = 60
# Identities whose records are fetched per pipelined round trip.
PROCESS_PAGE = 100
SIGNALS = {"quiet": "TSTP", "stop": "TERM", "dump_threads": "TTIN"}


def process_identities(config: Config) -> list[str]:
    """Every identity in ``processes`` (SSCAN), sorted; stale ones included."""
    pool = config.pool("api")
    found: set[str] = set()
    cursor = 0
    while True:
        cursor, names = pool.run(partial(sscan_page, config.keys.processes, cursor),
                                 idempotent=True)
        found.update(names)
        if cursor == 0:
            return sorted(found)


@dataclass
class Process:
    """One worker process as its last heartbeat described it.

    ``Process(identity)`` names a process without reading it: its ``quiet``, ``stop`` and
    ``dump_threads`` work at once (they read whether it is embedded first);
    ``Process.find(identity)`` reads its record. Fields read from Redis are checked values
    (``values.py``): a number that cannot be read is an ``Invalid``.
    """

    identity: str
    info: dict[str, Any] | Invalid = field(default_factory=dict)
    busy: int | Invalid = 0
    beat: float | Invalid | None = None
    stopping: bool = False  # quiet: finishing its jobs, fetching no more
    rss_kb: int | Invalid = 0
    rtt_us: int | Invalid = 0
    concurrency: int | Invalid = 0
    leader: bool = False
    # wurk's event loop, at its worst since the previous beat (0: none, or not wurk).
    loop_lag_us: int | Invalid = 0
    config: Config = field(default_factory=default_config, repr=False, compare=False)

    @classmethod
    def find(cls, identity: str, config: Config | None = None) -> Process | None:
        """The process's last heartbeat record, or None when it has none (gone, or never)."""
        cfg = config if config is not None else default_config()
        key = cfg.keys.process(identity)
        fields: list[Any] = cfg.pool("api").run(lambda r: r.hmget(key, list(HASH_FIELDS)),
                                                idempotent=True)
        return parse_process(identity, list(fields), cfg)

    def _field(self, name: str) -> Any:
        return self.info if isinstance(self.info, Invalid) else self.info.get(name)

    @property
    def hostname(self) -> str | Invalid:
        return _text_field(self._field("hostname"))

    @property
    def pid(self) -> int | Invalid | None:
        return values.integer(self._field("pid"))

    @property
    def tag(self) -> str | Invalid:
        return _text_field(self._field("tag"))

    @property
    def started_at(self) -> float | Invalid | None:
        return values.epoch(self._field("started_at"))

    @property
    def labels(self) -> list[str]:
        labels = self._field("labels")
        return [str(x) for x in labels if not isinstance(x, (list, dict))] \
            if isinstance(labels, list) else []

    @property
    def version(self) -> str | None:
        version = self._field("version")
        return version if isinstance(version, str) else None

    @property
    def embedded(self) -> bool:
        return self._field("embedded") is True

    @property
    def queues(self) -> list[str]:
        """Queue names: from ``capsules`` when present (8.0.9+), else ``queues``."""
        capsules = self._field("capsules")
        if isinstance(capsules, dict) and capsules:
            names: dict[str, None] = {}
            for capsule in capsules.values():
                weights = capsule.get("weights") if isinstance(capsule, dict) else None
                names.update(dict.fromkeys(_weight_names(weights)))
            return list(names)
        queues = self._field("queues")
        return [str(q) for q in queues if isinstance(q, str)] if isinstance(queues, list) \
            else []

    def to_dict(self) -> dict[str, Any]:
        return {
            "identity": self.identity, "hostname": self.hostname, "pid": self.pid,
            "tag": self.tag, "started_at": self.started_at, "concurrency": self.concurrency,
            "busy": self.busy, "beat": self.beat, "quiet": self.stopping, "rss_kb": self.rss_kb,
            "rtt_us": self.rtt_us, "loop_lag_us": self.loop_lag_us, "queues": self.queues,
            "labels": self.labels,
            "version": self.version, "embedded": self.embedded, "leader": self.leader,
        }

    # -- remote signals: delivered at the target's next beat -------------------------
    def quiet(self) -> None:
        """Ask it to stop fetching and finish its running jobs (TSTP)."""
        self._signal("quiet")

    def stop(self) -> None:
        """Ask it to shut down within its timeout (TERM)."""
        self._signal("stop")

    def dump_threads(self) -> None:
        """Ask it to log every thread's backtrace (TTIN)."""
        self._signal("dump_threads")

    def _signal(self, action: str) -> None:
        if self._is_embedded():
            raise InspectionError(
                f"process {self.identity} is embedded in another program; it cannot be told "
                f"to {action.replace('_', ' ')} from outside — do it in its host"
            )
        key = self.config.keys.signals(self.identity)

        def send(r: Any, replace: bool = False) -> list[Any]:
            pipe = r.pipeline(transaction=True)
            if replace:
                pipe.delete(key)
            pipe.lpush(key, SIGNALS[action])
            pipe.expire(key, SIGNAL_TTL_SECONDS)
            return pipe.execute(raise_on_error=False)  # type: ignore[no-any-return]

        pool = self.config.pool("api")
        pushed = pool.run(send)[0]  # a replay would deliver the signal twice
        if isinstance(pushed, redis.ResponseError) and reply_code(pushed) == "WRONGTYPE":
            # Written by anyone: it failed the push with a WRONGTYPE naming no key, and the
            # dashboard's "Quiet All" with it, leaving the processes after this one running.
            # Its owner deletes such a key at its next beat; so does this, to say it.
            log.warning("%s held no list of remote signals (written by something else); "
                        "deleted, and the %s signal sent", key, SIGNALS[action])
            pushed = pool.run(partial(send, replace=True))[1]
        if isinstance(pushed, redis.ResponseError):
            raise_refusal(pushed, pool.url)

    def _is_embedded(self) -> bool:
        """Whether it is embedded; a ``Process(identity)`` not read yet reads its record."""
        if self.info:
            return self.embedded
        found = Process.find(self.identity, self.config)
        return found is not None and found.embedded


def _weight_names(weights: Any) -> list[str]:
    """Queue names of a capsule's ``weights``: a ``{name: weight}`` object as Sidekiq writes
    it, or a list of names or ``[name, weight]`` pairs; anything else names none."""
    if isinstance(weights, dict):
        return [str(name) for name in weights]
    if isinstance(weights, list):
        pairs = (item[0] if isinstance(item, list) and item else item for item in weights)
        return [name for name in pairs if isinstance(name, str)]
    return []


def _text_field(value: Any) -> str | Invalid:
    if value is None:
        return ""
    if isinstance(value, (str, Invalid)):
        return value
    return values.invalid(value, "text")


def parse_process(identity: str, fields: list[bytes | None], config: Config) -> Process | None:
    """A ``Process`` from the hash fields (``HASH_FIELDS`` order); None if ``info`` is gone."""
    raw = dict(zip(HASH_FIELDS, fields, strict=True))
    info = values.json_object(raw["info"])
    if info is None:
        return None  # expired between SSCAN and HMGET, or not a heartbeat record
    concurrency = raw["concurrency"]  # 8.1.2+ writes it here; older ones only in info
    if concurrency is None and isinstance(info, dict):
        concurrency = info.get("concurrency")
    return Process(
        identity=identity, info=info, busy=values.count(raw["busy"]),
        beat=values.epoch(_number_text_field(raw["beat"])), stopping=raw["quiet"] == b"true",
        rss_kb=values.count(raw["rss"]), rtt_us=values.count(raw["rtt_us"]),
        concurrency=values.count(concurrency), loop_lag_us=values.count(raw["loop_lag_us"]),
        config=config,
    )


def _number_text_field(value: bytes | None) -> str | None:
    """A hash field holding a number as text (``beat``), for ``values.epoch``."""
    return None if value is None else value.decode("utf-8", "replace")


class ProcessSet:
    """The processes registered in ``processes`` whose heartbeat record still exists."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config if config is not None else default_config()

    @property
    def _pool(self) -> RedisPool:
        return self.config.pool("api")

    def size(self) -> int:
        """Members of ``processes`` (may count a few whose heartbeat just expired)."""
        return int(self._pool.run(lambda r: r.scard(self.config.keys.processes),
                                  idempotent=True))

    def iterate(self, *, clean: bool = True) -> Iterator[Process]:
        """Live processes sorted by identity; prunes stale members first when ``clean``."""
        if clean:
            self.cleanup()
        leader = self.leader()
        identities = process_identities(self.config)
        for start in range(0, len(identities), PROCESS_PAGE):
            page = identities[start : start + PROCESS_PAGE]
            for identity, fields in zip(page, self._records(page), strict=True):
                process = parse_process(identity, fields, self.config)
                if process is not None:
                    process.leader = identity == leader
                    yield process

    def __iter__(self) -> Iterator[Process]:
        return self.iterate()

    def _records(self, identities: list[str]) -> list[list[bytes | None]]:
        keys = self.config.keys

        def read(r: Any) -> list[list[bytes | None]]:
            pipe = r.pipeline(transaction=False)
            for identity in identities:
                pipe.hmget(keys.process(identity), list(HASH_FIELDS))
            return list(pipe.execute())

        return list(self._pool.run(read, idempotent=True))

    def total_concurrency(self) -> int:
        return values.valid_total(process.concurrency for process in self.iterate(clean=False))

    def total_rss_kb(self) -> int:
        return values.valid_total(process.rss_kb for process in self.iterate(clean=False))

    def leader(self) -> str | None:
        """The identity holding ``dear-leader``, if any."""
        def read(r: Any) -> bytes | None:
            value: bytes | None = r.get(self.config.keys.leader)
            return value

        value = self._pool.run(read, idempotent=True)
        return value.decode("utf-8", "replace") if value else None

    def cleanup(self) -> int:
        """Remove identities whose heartbeat record is gone; at most once a minute
        cluster-wide. Returns how many were removed (0 when another process holds the lock)."""
        keys = self.config.keys
        taken = self._pool.run(
            lambda r: r.set(keys.process_cleanup, 1, nx=True, ex=CLEANUP_LOCK_SECONDS))
        if not taken:
            return 0
        identities = process_identities(self.config)
        removed = 0
        for start in range(0, len(identities), PROCESS_PAGE):
            removed += self._prune(identities[start : start + PROCESS_PAGE])
        return removed

    def _prune(self, identities: list[str]) -> int:
        keys = self.config.keys

        def infos(r: Any) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for identity in identities:
                pipe.hget(keys.process(identity), "info")
            return list(pipe.execute())

        stale = [i for i, info in zip(identities, self._pool.run(infos, idempotent=True),
                                      strict=True) if info is None]
        if stale:
            # Removing an identity that is already gone changes nothing: replay is safe.
            self._pool.run(lambda r: r.srem(keys.processes, *stale), idempotent=True)
        return len(stale)


@dataclass
class Work:
    """One running job: which process and thread, since when, and the job itself."""

    process: str
    thread: str
    queue: str | Invalid
    run_at: float | Invalid | None
    job: JobRecord
    # Since when the job has ignored being told to stop (a time limit or a cancel): stuck
    # in C code, most likely (``wurk.control``); None for a job running as it should.
    stuck_at: float | Invalid | None = None

    @property
    def order(self) -> tuple[float, str, str]:
        """Oldest first; a start time that cannot be read sorts first."""
        start = self.run_at if isinstance(self.run_at, float) else 0.0
        return start, self.process, self.thread

    def to_dict(self) -> dict[str, Any]:
        return {"process": self.process, "thread": self.thread, "queue": self.queue,
                "run_at": self.run_at, "job": self.job.to_dict(), "stuck_at": self.stuck_at}


class WorkSet:
    """Jobs running now, as of each process's last heartbeat (≤ one beat old)."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config if config is not None else default_config()

    @property
    def _pool(self) -> RedisPool:
        return self.config.pool("api")

    def iterate(self) -> Iterator[Work]:
        """Running jobs of live processes, oldest ``run_at`` first."""
        found: list[Work] = []
        identities = process_identities(self.config)
        for start in range(0, len(identities), PROCESS_PAGE):
            found.extend(self._page(identities[start : start + PROCESS_PAGE]))
        # Bounded by the total concurrency of the cluster, so sorting in memory is fine.
        return iter(sorted(found, key=lambda work: work.order))

    def __iter__(self) -> Iterator[Work]:
        return self.iterate()

    def size(self) -> int:
        """The sum of the processes' ``busy`` counts."""
        return busy_total(self.config)

    def find_work(self, jid: str) -> Work | None:
        return next((work for work in self.iterate() if work.job.jid == jid), None)

    def _page(self, identities: list[str]) -> list[Work]:
        """The running jobs of these processes; each one's work hash read up to
        ``values.FIELD_CAP`` fields (a million written by hand cost a page ten thousand)."""
        keys = self.config.keys

        def sizes(r: Any) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for identity in identities:
                pipe.exists(keys.process(identity))
                pipe.hlen(keys.work(identity))
                pipe.hlen(keys.workers(identity))
            return list(pipe.execute())

        replies = self._pool.run(sizes, idempotent=True)
        chosen: list[tuple[str, str]] = []
        for index, identity in enumerate(identities):
            alive, work, workers = replies[3 * index : 3 * index + 3]
            if alive and (work or workers):
                chosen.append((identity, keys.work(identity) if work else
                               keys.workers(identity)))

        def read(r: Any) -> list[values.Capped | Invalid]:
            return [values.hash_fields(r, key) for _, key in chosen]

        works: list[Work] = []
        for (identity, key), found in zip(chosen, self._pool.run(read, idempotent=True),
                                          strict=True):
            if isinstance(found, Invalid):
                continue  # changed type since its length was read
            if found.cut:
                log.warning("%s holds %s running jobs, more than any process runs: read "
                            "only %s of them", key, f"{found.total:,}", f"{len(found.items):,}")
            works.extend(_parse_work(identity, found.items, self.config))
        return works


def busy_total(config: Config) -> int:
    """``busy`` summed over the processes in ``processes`` (missing records count 0)."""
    keys = config.keys
    identities = process_identities(config)
    total = 0
    for start in range(0, len(identities), PROCESS_PAGE):
        page = identities[start : start + PROCESS_PAGE]

        def read(r: Any, page: list[str] = page) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for identity in page:
                pipe.hget(keys.process(identity), "busy")
            return list(pipe.execute())

        replies = config.pool("api").run(read, idempotent=True)
        total += values.valid_total(values.count(v) for v in replies)
    return total


def _parse_work(identity: str, entries: dict[bytes, bytes], config: Config) -> list[Work]:
    works = []
    unreadable: list[bytes] = []
    for tid, value in entries.items():
        record = values.json_object(value)
        if not isinstance(record, dict):
            unreadable.append(value)
            continue
        payload = record.get("payload")
        # 6.0.2+ stores the job as a JSON string inside the JSON; 6.0.1 stored the object.
        raw = payload if isinstance(payload, str) else json.dumps(payload)
        works.append(Work(process=identity, thread=tid.decode("utf-8", "replace"),
                          queue=_text_field(record.get("queue")),
                          run_at=values.epoch(record.get("run_at")),
                          job=JobRecord(raw, config=config),
                          stuck_at=values.epoch(record.get("stuck_at"))))
    if unreadable:  # one line per process, however many there are
        log.warning("skipping %d unreadable work entries of %s, the first: %r",
                    len(unreadable), identity, unreadable[0][:200])
    return works
