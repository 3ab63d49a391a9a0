"""Every Redis key name wurk reads or writes — the only place they are spelled.

1. Sidekiq's keys, so a Ruby process sharing the Redis sees the
   same data.
2. wurk's own keys, kept out of the ``queue:`` namespace unless they hold jobs.
3. An optional prefix for joining a Sidekiq 6 deployment that used redis-namespace;
   it applies to every key, including those built inside Lua from the prefixes below.
4. The limits features' keys: rate limiters (every key of one limiter carries its name in
   ``{}``, a Redis Cluster hash tag, so one script touches one slot), unique-job locks and
   the count of expired jobs.
5. Batches' keys (the ``b-<bid>`` family, the ``batches`` index, ``batch-died`` and the
   ``tags:<tag>`` reverse index), laid out as Ruby wurk lays them so both share batches.
6. Job profiles as Sidekiq 8 stores them: the ``profiles`` sorted set and one hash per
   profiled run, named by its member ``<token>-<jid>`` (under the prefix, as redis-namespace
   puts it).
7. Job results (``wurk.results``), wurk's own: ``wurk:result:<jid>``, the channel that
   announces one, and a batch's index of the jids that stored one.
8. Partitioned queues (``wurk.partitions``), wurk's own layout: a list per partition
   ``wurk:part:<queue>:<partition>``, and ``wurk:part:<queue>|ring`` (partitions with work,
   scored by turn), ``|running`` (in-flight count per partition), ``|rate`` (jobs fetched
   this second per partition, for a queue with a rate), ``|holders`` (the
   in-flight lists that took jobs of the queue). A partition name holds neither ``:`` nor
   ``|``, a queue name no ``|``, so no two of these names meet.
9. Workflows (``wurk.workflow``), wurk's own: ``wurk:workflow:<wid>`` and its parts (the Lua
   in scripts/workflow_lib.lua spells the same names), and the ``wurk:workflows`` index.
"""

from __future__ import annotations

import datetime as _dt

__all__ = ["Keys", "glob_escape", "keyspace_prefix"]

# Separator of the fields of a private in-flight list name; a public queue name may not
# contain it, or the list could not be parsed back into (queue, owner).
PRIVATE_SEPARATOR = "|"
# The sets beside a batch's record, ``b-<bid>-<part>`` (the Lua in scripts/batch_lib.lua
# lists the same parts to refresh their expiry).
BATCH_PARTS = ("jids", "failed", "died", "kids", "pkids", "notify", "cbsucc", "tags")
# The hashes beside a workflow's record, ``wurk:workflow:<wid>:<part>`` (listed with their
# contents in scripts/workflow_lib.lua).
WORKFLOW_PARTS = ("steps", "then", "state", "waiting", "jids", "values", "kids", "subs",
                  "left")


def keyspace_prefix(key_prefix: str, keyspace: str) -> str:
    """The prefix of one queue's keyspace on Redis Cluster: its name as the hash tag, after
    ``key_prefix`` (``app:{mail}``), so the first ``{…}`` of every key is the queue's."""
    tag = f"{{{keyspace}}}"
    return f"{key_prefix}:{tag}" if key_prefix else tag


class Keys:
    """Key names under one optional prefix."""

    __slots__ = (
        "batch_died",
        "batches",
        "cluster_queues",
        "dead",
        "expired",
        "history",
        "history_lock",
        "leader",
        "leader_token",
        "limiter_list",
        "paused",
        "periodic",
        "prefix",
        "process_cleanup",
        "processes",
        "profiles",
        "push_buffers",
        "push_sent",
        "queues",
        "reaper_lock",
        "retry",
        "retry_claims",
        "schedule",
        "schedule_claims",
        "stat_cancelled",
        "stat_failed",
        "stat_poisoned",
        "stat_processed",
        "stat_recovered",
        "stat_recovered_push",
        "super_processes",
        "workflows",
    )

    def __init__(self, prefix: str = "") -> None:
        self.prefix = f"{prefix}:" if prefix else ""
        p = self.prefix
        self.queues = f"{p}queues"
        self.schedule = f"{p}schedule"
        self.retry = f"{p}retry"
        self.dead = f"{p}dead"
        self.processes = f"{p}processes"
        self.process_cleanup = f"{p}process_cleanup"
        self.stat_processed = f"{p}stat:processed"
        self.stat_failed = f"{p}stat:failed"
        self.paused = f"{p}paused"
        self.leader = f"{p}dear-leader"
        self.leader_token = f"{p}leader-token"
        self.periodic = f"{p}periodic"
        self.reaper_lock = f"{p}wurk:reaper:full-scan"
        self.schedule_claims = f"{p}wurk:claimed:schedule"
        self.retry_claims = f"{p}wurk:claimed:retry"
        self.super_processes = f"{p}super_processes"
        self.batches = f"{p}batches"
        self.batch_died = f"{p}batch-died"
        self.workflows = f"{p}wurk:workflows"
        self.limiter_list = f"{p}lmtr-list"
        self.expired = f"{p}stat:expired"
        # wurk's own: cluster-wide counts of reaper recoveries and poison-pill kills, and the
        # sampled history of the cluster's numbers with the lock that elects its sampler.
        self.stat_recovered = f"{p}wurk:stat:recovered"
        self.stat_poisoned = f"{p}wurk:stat:poisoned"
        # Jobs ``wurk.cancel`` stopped or removed, every process together.
        self.stat_cancelled = f"{p}wurk:stat:cancelled"
        self.history = f"{p}wurk:history"
        self.history_lock = f"{p}wurk:history:lock"
        # Pushes that record their jid (reliable push, the outbox relay): jid -> when Redis
        # took it (ZSET, Redis's clock), so a replay of that jid is not pushed again; the
        # jids are forgotten once their pusher knows they landed (wurk.client.idempotent).
        self.push_sent = f"{p}wurk:push-sent"
        # Reliable push's reports: identity -> last report (ZSET), each report a JSON key
        # with a TTL (``push_buffer``); and the cluster-wide count of pushes sent from a
        # buffer after Redis came back.
        self.push_buffers = f"{p}wurk:push-buffers"
        self.stat_recovered_push = f"{p}wurk:stat:recovered-push"
        # Job profiles (Sidekiq 8's layout): ``<token>-<jid>`` members scored by expiry.
        self.profiles = f"{p}profiles"
        # Redis Cluster: the queues wurk processes have pushed to (SET), in the keyspace of
        # the queue ``default``, so the dashboard and ``wurk stats`` find every keyspace.
        self.cluster_queues = f"{p}wurk:cluster-queues"

    # -- queues -----------------------------------------------------------------------------
    def queue(self, name: str) -> str:
        return f"{self.prefix}queue:{name}"

    @property
    def queue_prefix(self) -> str:
        """What precedes a queue name in its list key (passed to Lua, which builds queue keys
        from payloads, so names are still spelled here only)."""
        return f"{self.prefix}queue:"

    def clearing(self, nonce: str) -> str:
        """The entries of a queue or sorted set being cleared (``wurk.api``'s ``clear``):
        moved out in one step, read a page at a time to release unique locks, then deleted;
        an hour's TTL in case the clear is cut short."""
        return f"{self.prefix}wurk:clearing:{nonce}"

    def queue_name(self, key: str) -> str:
        """The queue name of a ``queue:<name>`` key."""
        return key[len(self.queue_prefix) :]

    def private(self, queue: str, hostname: str, pid: int, nonce: str, index: int) -> str:
        """A processor's in-flight list, Ruby wurk's layout."""
        sep = PRIVATE_SEPARATOR
        return f"{self.queue_prefix}{queue}{sep}{hostname}{sep}{pid}{sep}{nonce}{sep}{index}"

    def private_prefix(self, queue: str) -> str:
        """What every in-flight list of ``queue`` in wurk's layout begins with."""
        return f"{self.queue(queue)}{PRIVATE_SEPARATOR}"

    def private_pro(self, identity: str, queue: str) -> str:
        """Sidekiq Pro's super_fetch private list, for ``private_list_layout="pro"``."""
        return f"{self.private_pro_prefix}{identity}{PRIVATE_SEPARATOR}{queue}"

    @property
    def private_pro_prefix(self) -> str:
        """What every private list of Sidekiq Pro's layout begins with."""
        return f"{self.queue_prefix}sq{PRIVATE_SEPARATOR}"

    def super_queues(self, identity: str) -> str:
        return f"{self.prefix}{identity}:super_queues"

    @property
    def private_pattern(self) -> str:
        """SCAN pattern matching every private list of either layout (the prefix matched as
        written, whatever glob characters ``key_prefix`` holds)."""
        return f"{glob_escape(self.queue_prefix)}*|*"

    def claims_of(self, scheduled_set: str) -> str:
        """The scheduler's claims on due members of ``schedule`` or ``retry``: members taken
        out for a push through the client, not yet pushed (ZSET, scored by claim time)."""
        claims = {self.schedule: self.schedule_claims, self.retry: self.retry_claims}
        if scheduled_set not in claims:
            raise ValueError(f"{scheduled_set!r} is neither the schedule nor the retry set")
        return claims[scheduled_set]

    # -- partitioned queues (wurk's own layout) ---------------------------------------------
    def partition_prefix(self, queue: str) -> str:
        """What precedes a partition's name in its job list's key (passed to Lua, which
        completes it from a job's ``partition`` field)."""
        return f"{self.prefix}wurk:part:{queue}:"

    def partition(self, queue: str, name: str) -> str:
        """One partition's jobs (LIST: pushed at the head, taken from the tail)."""
        if not name:
            raise ValueError("a partition key needs a non-empty partition name")
        return f"{self.partition_prefix(queue)}{name}"

    def partition_ring(self, queue: str) -> str:
        """The partitions with work, scored by turn: the lowest is served next (ZSET)."""
        return f"{self.prefix}wurk:part:{queue}|ring"

    def partition_running(self, queue: str) -> str:
        """Jobs of each partition in flight: partition → count (HASH)."""
        return f"{self.prefix}wurk:part:{queue}|running"

    def partition_rates(self, queue: str) -> str:
        """Jobs of each partition fetched in the current second (``partition_rates``):
        partition → ``"<epoch s> <count>"``, Redis's clock (HASH)."""
        return f"{self.prefix}wurk:part:{queue}|rate"

    def partition_holders(self, queue: str) -> str:
        """The in-flight lists that took jobs of the queue (SET), read to recount."""
        return f"{self.prefix}wurk:part:{queue}|holders"

    # -- processes --------------------------------------------------------------------------
    def process(self, identity: str) -> str:
        return f"{self.prefix}{identity}"

    def work(self, identity: str) -> str:
        return f"{self.prefix}{identity}:work"

    def workers(self, identity: str) -> str:
        """Sidekiq 6.4's name for the work hash (its Busy page reads only this one)."""
        return f"{self.prefix}{identity}:workers"

    def signals(self, identity: str) -> str:
        return f"{self.prefix}{identity}-signals"

    def cancels(self, identity: str) -> str:
        """jids ``wurk.cancel`` asks this process to stop if it runs them (LIST, a TTL)."""
        return f"{self.prefix}wurk:cancel:{identity}"

    # -- job profiles -----------------------------------------------------------------------
    def profile(self, member: str) -> str:
        """A profile's hash, named by its ``profiles`` member ``<token>-<jid>``."""
        if not member:
            raise ValueError("a profile key needs a non-empty member")
        return f"{self.prefix}{member}"

    def push_buffer(self, identity: str) -> str:
        """One process's reliable-push report (JSON, with a TTL): buffered, oldest, sent."""
        return f"{self.prefix}wurk:push-buffer:{identity}"

    # -- stats ------------------------------------------------------------------------------
    def stat_processed_day(self, day: _dt.date) -> str:
        return f"{self.stat_processed}:{day.isoformat()}"

    def stat_failed_day(self, day: _dt.date) -> str:
        return f"{self.stat_failed}:{day.isoformat()}"

    # -- execution metrics (Sidekiq 8's layout, and 7's for mixed fleets) -------------------
    def metrics_minute(self, when: _dt.datetime) -> str:
        """``j|250214|8:03``: one minute's counts (UTC; hour unpadded, minute two digits)."""
        return f"{self.prefix}j|{when:%y%m%d}|{when.hour}:{when.minute:02d}"

    def metrics_ten_minutes(self, when: _dt.datetime) -> str:
        """``j|250214|8:0``: the minute key minus its last digit, ten minutes' counts."""
        return self.metrics_minute(when)[:-1]

    def histogram(self, job: str, when: _dt.datetime) -> str:
        """``h|HardJob-14-8:3``: one minute's latency histogram (nothing zero-padded)."""
        return f"{self.prefix}h|{job}-{when.day}-{when.hour}:{when.minute}"

    def metrics_minute_v7(self, when: _dt.datetime) -> str:
        """Sidekiq 7's minute key ``j|20250214|8:3`` (hour and minute unpadded)."""
        return f"{self.prefix}j|{when:%Y%m%d}|{when.hour}:{when.minute}"

    def histogram_v7(self, job: str, when: _dt.datetime) -> str:
        """Sidekiq 7's histogram key ``HardJob-14-08:3`` (no ``h|``; day and hour padded)."""
        return f"{self.prefix}{job}-{when:%d-%H}:{when.minute}"

    def deploy_marks(self, day: _dt.date) -> str:
        return f"{self.prefix}{day:%Y%m%d}-marks"

    def deploy_lock(self, label: str) -> str:
        return f"{self.prefix}deploylock-{label}"

    # -- iterable jobs (Sidekiq 7.3+/8's layout) --------------------------------------------
    def iteration(self, jid: str) -> str:
        """An iterable job's state ``it-<jid>``: ex, c (JSON cursor), rt, cancelled."""
        return f"{self.prefix}it-{jid}"

    # -- job results (wurk's own: Sidekiq keeps none) ---------------------------------------
    def result(self, jid: str) -> str:
        """A job's last outcome, JSON with the job's ``result_ttl`` (``wurk.results``)."""
        if not jid:
            raise ValueError("a result key needs a non-empty jid")
        return f"{self.prefix}wurk:result:{jid}"

    def result_channel(self, jid: str) -> str:
        """The pub/sub channel a stored outcome is published on (its JSON), for waiters."""
        if not jid:
            raise ValueError("a result channel needs a non-empty jid")
        return f"{self.result_channel_prefix}{jid}"

    @property
    def result_channel_prefix(self) -> str:
        """What precedes the jid in a ``result_channel``: a waiter reads the jid back."""
        return f"{self.prefix}wurk:result-ready:"

    def batch_results(self, bid: str) -> str:
        """The jids of a batch's jobs that stored an outcome, scored by when (ZSET)."""
        if not bid:
            raise ValueError("a batch's result index needs a non-empty bid")
        return f"{self.prefix}wurk:batch-results:{bid}"

    # -- framework integrations -------------------------------------------------------------
    def task_result(self, result_id: str) -> str:
        """A ``django.tasks`` result (``wurk.contrib.django.tasks``): JSON, with a TTL."""
        return f"{self.prefix}wurk:task-result:{result_id}"

    # -- periodic jobs (Ruby wurk's layout) -------------------------------------------------
    @property
    def loop_prefix(self) -> str:
        return f"{self.prefix}loops:"

    def loop(self, lid: str) -> str:
        """A loop's hash: schedule, klass, options, tz, paused, lf, nf."""
        return f"{self.loop_prefix}{lid}"

    @property
    def loop_history_prefix(self) -> str:
        return f"{self.prefix}loop-history:"

    def loop_history(self, lid: str) -> str:
        """A loop's recent pushes, newest first: JSON ``[fired_at_epoch_s, jid]``."""
        return f"{self.loop_history_prefix}{lid}"

    def loop_pending(self, lid: str) -> str:
        """Redis Cluster only, wurk's own: a loop's run marked but not yet confirmed pushed
        into its queue's keyspace (``wurk.periodic.cluster``): a hash of tick, jid, queue,
        payload, with an expiry."""
        return f"{self.prefix}wurk:loop-pending:{lid}"

    def periodic_run(self, jid: str) -> str:
        """Redis Cluster only, wurk's own, in the pushed job's queue's keyspace: set (NX)
        by the push of one periodic run, so a second push of that run is refused."""
        if not jid:
            raise ValueError("a periodic run's key needs a non-empty jid")
        return f"{self.prefix}wurk:periodic-run:{jid}"

    # -- reliability ------------------------------------------------------------------------
    @property
    def poison_prefix(self) -> str:
        return f"{self.prefix}super_fetch:recovered:"

    def poison_counter(self, jid: str) -> str:
        if not jid:
            # The bare prefix is a key shared by nobody; deleting or bumping it is a bug.
            raise ValueError("poison counter needs a non-empty jid")
        return f"{self.poison_prefix}{jid}"

    # -- rate limiters ----------------------------------------------------------------------
    def limiter(self, name: str) -> str:
        """A limiter's metadata hash: its type, options and their fingerprint."""
        return f"{self.prefix}lmtr:{name}"

    def limiter_concurrent(self, name: str) -> str:
        """Held slots of a concurrent limiter: token → lock expiry."""
        return f"{self.prefix}lmtr-c:{{{name}}}"

    def limiter_wakeups(self, name: str) -> str:
        """Wake-up tokens a release pushes for the waiters of a concurrent limiter."""
        return f"{self.prefix}lmtr-cw:{{{name}}}"

    def limiter_bucket_prefix(self, name: str) -> str:
        """What precedes the interval's start (epoch s) in a bucket limiter's counter key:
        the start comes from Redis's clock, so the script completes the name."""
        return f"{self.prefix}lmtr-b:{{{name}}}:"

    def limiter_bucket(self, name: str, start: int) -> str:
        """A bucket limiter's counter for the interval starting at ``start`` (epoch s): the
        name ``limiter_bucket.lua`` completes from ``limiter_bucket_prefix``."""
        return f"{self.limiter_bucket_prefix(name)}{start:d}"

    def limiter_window(self, name: str) -> str:
        return f"{self.prefix}lmtr-w:{{{name}}}"

    def limiter_leaky(self, name: str) -> str:
        return f"{self.prefix}lmtr-l:{{{name}}}"

    def limiter_points(self, name: str) -> str:
        return f"{self.prefix}lmtr-p:{{{name}}}"

    def limiter_stats(self, name: str) -> str:
        return f"{self.prefix}lmtr-s:{{{name}}}"

    # -- unique jobs ------------------------------------------------------------------------
    def unique(self, digest: str) -> str:
        """The lock of one unique job's (class, queue, args): its value is the holder's jid."""
        if not digest:
            raise ValueError("a unique lock needs a non-empty digest")
        return f"{self.prefix}unique:{digest}"

    # -- workflows (wurk's own) -------------------------------------------------------------
    def workflow(self, wid: str, part: str = "") -> str:
        """A workflow's record (hash), or one of its ``WORKFLOW_PARTS`` (hashes)."""
        if not wid:
            raise ValueError("a workflow key needs a non-empty workflow id")
        if part and part not in WORKFLOW_PARTS:
            raise ValueError(f"unknown workflow key part {part!r}; expected one of "
                             f"{WORKFLOW_PARTS}")
        return f"{self.prefix}wurk:workflow:{wid}{':' + part if part else ''}"

    def workflow_keys(self, wid: str) -> list[str]:
        """Every key of one workflow (its batch's are ``batch_keys``)."""
        return [self.workflow(wid), *(self.workflow(wid, part) for part in WORKFLOW_PARTS)]

    # -- batches ----------------------------------------------------------------------------
    def batch(self, bid: str, part: str = "") -> str:
        """``b-<bid>`` (the record) or one of its sets: ``part`` is ``jids``, ``failed``,
        ``died``, ``kids``, ``pkids``, ``notify``, ``cbsucc`` or ``tags``."""
        if not bid:
            raise ValueError("a batch key needs a non-empty bid")
        if part and part not in BATCH_PARTS:
            raise ValueError(f"unknown batch key part {part!r}; expected one of {BATCH_PARTS}")
        return f"{self.prefix}b-{bid}-{part}" if part else f"{self.prefix}b-{bid}"

    def batch_keys(self, bid: str) -> list[str]:
        """Every key of one batch."""
        return [self.batch(bid), *(self.batch(bid, part) for part in BATCH_PARTS)]

    def batch_tag(self, tag: str) -> str:
        """The bids carrying ``tag``."""
        return f"{self.prefix}tags:{tag}"

    @property
    def batch_tag_prefix(self) -> str:
        return f"{self.prefix}tags:"


def glob_escape(text: str) -> str:
    """``text`` matched literally in a ``SCAN``/``KEYS`` pattern (``*``, ``?``, ``[``, ``]``
    and ``\\`` escaped)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
