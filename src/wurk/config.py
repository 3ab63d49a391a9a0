"""The configuration object: every setting, validated, passed down explicitly.

1. ``Config`` holds every setting with Sidekiq's defaults; each interval and timeout is a
   setting so tests can run them fast.
2. The environment (``REDIS_URL``, or the variable ``REDIS_PROVIDER`` names;
   ``WURK_TIMESTAMP_FORMAT``, ``WURK_HOME``, ``WURK_LEADER``, ``WURK_ENV``/``APP_ENV``,
   ``WURK_CONCURRENCY``) is read when a ``Config`` is built, never at import.
3. ``freeze()`` makes it read-only before threads start.
4. One process-wide default, made on first use: ``configure(...)`` replaces it,
   ``default_config()`` returns it.
5. ``Capsule``: a named set of queues with weights and its own concurrency (Sidekiq 7), and
   server middleware of its own for its jobs (``capsule.server_middleware``, code only;
   ``config.capsule(name)`` alone is the capsule of that name, to edit).
6. ``periodic`` (the registered cron loops, ``wurk.periodic.loops``) and ``is_leader()`` /
   ``leader_token()``: what the running worker's leader election says (``wurk.periodic.leader``).
7. Shards (``docs/scaling.md``): ``shards`` names other Redis servers; ``shard(name)`` is
   this configuration seen through one of them (the same settings, its own pools), and
   ``with via(name):`` makes it the process-wide configuration for a block of code, as
   Sidekiq's ``Client.via`` does. A capsule may be bound to a shard (``Capsule.shard``).
8. Redis Cluster (``docs/scaling.md``): a ``redis+cluster://`` ``redis_url`` makes every
   queue a shard of its own, a *keyspace* whose keys all carry the queue's name as their
   hash tag (``{mail}:queue:mail``, ``{mail}:retry``…), so each keyspace lives in one slot
   on one primary. The configuration itself is the keyspace of the queue ``default``;
   ``shard(queue)`` is any other queue's; a push goes to its queue's keyspace. What cannot
   work there (batches and workflows, a periodic loop whose queue cannot be a keyspace,
   capsules bound to shards, ``shards``) is refused with the reason.
"""

from __future__ import annotations

import contextvars
import copy
import importlib.util
import logging
import math
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

import redis

from . import payload as P
from .connections import cluster, sentinel
from .connections.hostlist import CUT_SHORT, cut_short
from .connections.pool import AsyncRedisPool, RedisPool
from .connections.pools import Connections
from .connections.unreached import Unreached
from .errors import ConfigError, WurkError
from .hosts import check_host_pattern
from .keys import Keys, keyspace_prefix
from .log import log_error
from .middleware import Chain
from .options import parse_queue, queue_entry
from .partitions import check_partition_rates, check_partitions
from .payload import TimestampFormat
from .periodic.cron import Schedule
from .periodic.loops import Periodic
from .runtime import affinity

log = logging.getLogger("wurk")

__all__ = ["DEFAULT_SHARD", "Capsule", "Config", "check_redis_url", "chosen_shard", "configure",
           "default_config", "did_you_mean", "environment_variable", "parse_queue",
           "statsd_address", "via"]

ErrorHandler = Callable[[BaseException, dict[str, Any], "Config"], None]
DeathHandler = Callable[[dict[str, Any], BaseException], None]
LIFECYCLE_EVENTS: tuple[str, ...] = (
    "startup", "quiet", "shutdown", "exit", "heartbeat", "beat", "leader", "follower", "fork",
)

DAY = 24 * 60 * 60

# Settings with no rule of their own above: their type is checked so that a bad value in a
# file is an error naming it at load time, not a crash in a thread later.
_TEXT_SETTINGS = ("redis_url", "key_prefix", "home", "tag", "environment", "cpu_affinity",
                  "health_host", "metrics_host", "statsd", "statsd_prefix", "reliable_push_dir",
                  "web_profiler_store_url", "web_profiler_view_url")
_OPTIONAL = ("redis_url", "environment", "cpu_affinity", "statsd", "reliable_push_dir")
_FLAG_SETTINGS = ("leader", "skip_default_job_logging", "start_embedded",
                  "periodic_seconds_field", "metrics", "metrics_compat_v7",
                  "statsd_datadog_extensions", "web_read_only", "web_profiler_upload")
_TEXT_LIST_SETTINGS = ("labels", "logged_job_attributes", "statsd_tags")
_PORT_SETTINGS = ("health_port", "metrics_port")
# The health check's port when it is turned on without one (``wurk worker --health``): the
# dashboard's is 7433 (``wurk web``), so the two can run side by side on one machine.
DEFAULT_HEALTH_PORT = 7434
# Every setting in seconds. None may be longer than the longest wait a thread can make
# (``threading.TIMEOUT_MAX``, about 292 years): a longer one raised OverflowError in the
# thread that waited (``heartbeat_interval: 10000000000`` killed the heartbeat), or Redis
# refused the expiry (``heartbeat_ttl: 100000000000000000000``: no beat was ever written).
_SECONDS_SETTINGS = ("timeout", "shutdown_grace", "fetch_timeout", "paused_cache_ttl",
                     "average_scheduled_poll_interval", "heartbeat_interval", "dead_timeout",
                     "socket_timeout", "scheduler_initial_wait", "reaper_interval",
                     "loop_lag_warning", "periodic_catch_up", "poll_interval_average",
                     "control_interval", "log_slow_jobs_after", "leader_renew_interval",
                     "leader_check_interval", "periodic_poll_interval",
                     "outbox_poll_interval", "outbox_claim_timeout", "push_replica_timeout",
                     "web_stream_interval", "web_poll_interval", "history_interval",
                     "retain_history",
                     "job_timeout", "heartbeat_ttl", "super_fetch_orphan_check",
                     "max_iteration_runtime", "redis_idle_timeout", "web_profiler_timeout")
MAX_SECONDS = threading.TIMEOUT_MAX
# The largest gc_threshold ``gc.set_threshold`` takes (a C int).
GC_MAX = 2**31 - 1
_LOOP_INTERVALS = ("heartbeat_interval", "average_scheduled_poll_interval",
                   "poll_interval_average", "reaper_interval", "fetch_timeout", "socket_timeout",
                   "control_interval",
                   "log_slow_jobs_after", "leader_renew_interval", "leader_check_interval",
                   "periodic_poll_interval", "outbox_poll_interval", "outbox_claim_timeout",
                   "super_fetch_orphan_check", "max_iteration_runtime", "redis_idle_timeout")


# The shortest periodic_catch_up: every tick is pushed a little after it comes (the leader
# wakes just past it, then asks Redis), so a shorter one finds each tick already too old.
MIN_CATCH_UP = 1

# Settings that hold Python objects (handlers, middleware, hooks): never in a file.
CODE_SETTINGS = ("client_middleware", "server_middleware", "error_handlers", "death_handlers",
                 "lifecycle", "on_recover", "statsd_job_options", "history_extra",
                 "limiter_errors",
                 "encryption_keys",
                 "limiter_backoff", "shard_router")

# The shard of the configuration's own Redis (``redis_url``); ``shards`` names the others.
DEFAULT_SHARD = "default"
# What a shard's name may be: it is written in job options, URLs of the dashboard and logs.
SHARD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# (job name, queue, args) -> the shard a push goes to, or None for the default one.
ShardRouter = Callable[[str, str, list[Any]], "str | None"]


def _not_seconds(value: Any, *, zero: bool = False) -> bool:
    """Whether ``value`` is no number of seconds: not an int or float (a bool is neither),
    NaN, infinite or an integer no float holds (``.nan``, ``-t inf``, 400 digits: no
    comparison refuses them), or below zero (at zero too, unless ``zero``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    try:
        seconds = float(value)
    except OverflowError:
        return True
    if not math.isfinite(seconds):
        return True
    return seconds < 0 if zero else seconds <= 0


# A URL's host and port as a Content-Security-Policy source may name them.
_URL_HOST = re.compile(r"[A-Za-z0-9._-]+(:[0-9]+)?|\[[0-9A-Fa-f:.]+\](:[0-9]+)?")


def _profiler_url_problem(url: Any, *, view: bool = False) -> str | None:
    """Why ``url`` is no store URL (``view``: no view URL template) of the Firefox Profiler's
    upload, or None: an absolute http(s) URL with a host; a view URL holds ``{token}``, in
    its path, query or fragment (the browser is sent to the view's origin, which the profile
    page's Content-Security-Policy names)."""
    if not isinstance(url, str):
        return f"must be an http(s) URL, not {url!r}"
    token = "{token}"
    try:
        parts = urlsplit(url.replace(token, "TOKEN"))
        _ = parts.port  # a port that is no number, or past 65535, raises
    except ValueError:
        return f"{url!r} is no URL"
    if parts.username is not None or parts.password is not None:
        return "must not hold a user name or password (the URL is not shown here)"
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname \
            or not _URL_HOST.fullmatch(parts.netloc) \
            or any(c.isspace() or ord(c) < 32 for c in url):
        return f"must be an absolute http:// or https:// URL with a host, not {url!r}"
    if view:
        if token not in url:
            return (f"{url!r} has no {token} placeholder, where the store's token goes "
                    "(the public instance's: https://profiler.firefox.com/public/{token}/)")
        if token in urlsplit(url).netloc:
            return f"the {token} placeholder must be in the path or query, not the host: {url!r}"
    return None


def check_redis_url(url: str) -> None:
    """A ``ConfigError`` when ``url`` is no URL a pool can be made from (``ftp://``, a port
    that is no number): said when the configuration is built, not as redis-py's traceback
    when the first command connects. Sentinel and Cluster URLs are checked by their own
    rules (a cluster's layout rules where it is used)."""
    if cluster.is_cluster(url):
        cluster.parse(url)
        return
    if sentinel.is_sentinel(url):
        sentinel.parse(url)
        return
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # a '[' without its ']'
        raise ConfigError(f"not a Redis URL: {exc}") from None
    # Where a '@' has no place: the query's option names, the fragment, and the path of a
    # TCP URL (a Unix socket's path may hold one).
    names = "".join(field.partition("=")[0] for field in parts.query.split("&"))
    placed = parts.fragment + names + (parts.path if parts.scheme in ("redis", "rediss") else "")
    if cut_short(parts.netloc, placed):
        raise ConfigError(f"not a Redis URL: {CUT_SHORT}")
    try:
        redis.connection.parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        # redis-py quotes the port it could not read: a piece of the password, if it was cut.
        if cut_short(parts.netloc, f"{parts.path}{parts.query}{parts.fragment}"):
            raise ConfigError(f"not a Redis URL: {CUT_SHORT}") from None
        raise ConfigError(f"not a Redis URL: {exc}") from None


# Sidekiq settings wurk has no setting for, and what it does instead: a Sidekiq user's
# configuration hears why, not only that the setting is unknown.
SIDEKIQ_ONLY_SETTINGS = {
    "strict_args": "; wurk always refuses arguments that are not JSON-native at push, "
                   "naming the argument (there is no 'warn' or 'off' mode: nothing is ever "
                   "stringified); remove the setting (docs/jobs-and-pushing.md, Arguments)",
}


# Other names a setting is given by (the spec's ``wurk.configure(reliable_push=True,
# reliable_push_buffer=1000)``): taken as the setting they name, by ``Config.from_mapping``
# (``wurk.configure``, YAML files, Django's and Flask's settings).
SETTING_ALIASES = {
    "reliable_push_buffer": "reliable_push_size",
}


def _unaliased(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    """``values`` with each other name of a setting replaced by the setting's own."""
    settings = dict(values)
    for alias, name in SETTING_ALIASES.items():
        if alias in settings:
            if name in settings:
                raise ConfigError(f"{source}: {alias} is another name for {name}: give one "
                                  "of them")
            settings[name] = settings.pop(alias)
    return settings


def did_you_mean(key: str) -> str:
    """``"; did you mean 'max_retries'?"`` for the setting closest to the unknown ``key``, or
    what wurk does instead of a Sidekiq setting it has not (``SIDEKIQ_ONLY_SETTINGS``)."""
    if key in SIDEKIQ_ONLY_SETTINGS:
        return SIDEKIQ_ONLY_SETTINGS[key]
    import difflib  # here: only a mistyped setting needs it, and a worker keeps what it imports

    known = sorted({f.name for f in fields(Config) if f.init} - set(CODE_SETTINGS))
    close = difflib.get_close_matches(key, known, n=1)
    if not close:  # the name without its prefix: ``retries`` for ``max_retries``
        close = [name for name in known if name.endswith(f"_{key}")][:1]
    return f"; did you mean {close[0]!r}?" if close else ""


def reliable_push_mode(value: Any) -> Any:
    """``reliable_push`` given as a switch: True is ``"memory"`` (Sidekiq Pro's buffer, in
    the process), False ``"off"`` (YAML reads ``off`` so); anything else as given."""
    if value is True:
        return "memory"
    if value is False:
        return "off"
    return value


def statsd_text(value: Any) -> Any:
    """``statsd`` given as a ``(host, port)`` pair (a list, from YAML) → ``"host:port"``
    (an IPv6 host in brackets); anything else as given, for the checks to name."""
    if not isinstance(value, (tuple, list)):
        return value
    if len(value) != 2 or not isinstance(value[0], str) or not value[0] \
            or isinstance(value[1], bool) or not isinstance(value[1], int):
        raise ConfigError(f"statsd must be HOST:PORT or a (host, port) pair of a StatsD "
                          f"agent, e.g. ('127.0.0.1', 8125), not {value!r}")
    host, port = value
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def statsd_address(value: str | tuple[str, int]) -> tuple[str, int]:
    """``"127.0.0.1:8125"`` (or a pair, as the setting takes it) → ``("127.0.0.1", 8125)``;
    the message names the fix."""
    text = statsd_text(value)
    host, colon, port_text = text.rpartition(":")
    if not colon or not host or not port_text.isdigit() or not 0 < int(port_text) <= 65535:
        raise ConfigError(f"statsd must be HOST:PORT of a StatsD agent, e.g. "
                          f"'127.0.0.1:8125', not {text!r}")
    return host.strip("[]"), int(port_text)



class LeaderState(Protocol):
    """What a running worker's leader election answers (``wurk.periodic.leader.Leadership``)."""

    def is_leader(self) -> bool: ...

    @property
    def token(self) -> int | None: ...


# The ``event_loop`` setting's choices (``wurk.asyncjobs.loop_factory`` makes each), and what
# asking for uvloop where it is not installed says.
EVENT_LOOPS = ("auto", "uvloop", "asyncio")
UVLOOP_MISSING = ("event_loop is 'uvloop' but uvloop is not installed (pip install uvloop; "
                  "it has no Windows build), or use 'auto'")


# Processor threads of one capsule at most: each is a thread with a Redis connection (two
# in its pool), and a process of ten thousand threads spends its time switching between them
# (a huge value hung the worker while it filled its pool, deaf to TERM).
MAX_CONCURRENCY = 1_000


@dataclass(kw_only=True)
class Capsule:
    """A set of queues served by ``concurrency`` processors with their own Redis pool."""

    name: str = "default"
    queues: list[tuple[str, int]] = field(default_factory=lambda: [("default", 0)])
    concurrency: int = 5
    # ``async def`` jobs running at once on the worker's event loop (they hold no thread).
    async_concurrency: int = 100
    # The shard whose queues it serves (a name in ``Config.shards``); None: the default one.
    shard: str | None = None
    # Its own server middleware, for its jobs only: after the application's links (the
    # configuration's ``server_middleware``), inside them, outside the worker's time limits
    # and cancels (``wurk.launcher.server_chain``); a list in order, or a ``Chain``.
    server_middleware: Chain = field(default_factory=Chain, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.server_middleware = _as_chain("server_middleware", self.server_middleware,
                                           owner=f"capsule {self.name!r}: ")
        self.queues = [queue_entry(q) for q in self.queues]
        if not self.queues:
            raise ConfigError(f"capsule {self.name!r} has no queues")
        value = self.concurrency
        if isinstance(value, bool) or not isinstance(value, int) or not \
                1 <= value <= MAX_CONCURRENCY:
            raise ConfigError(
                f"capsule {self.name!r}: concurrency must be a whole number from 1 to "
                f"{MAX_CONCURRENCY:,} (a thread each; for more at once run more processes, "
                f"or async def jobs), not {value!r}"
            )
        value = self.async_concurrency
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(
                f"capsule {self.name!r}: async_concurrency must be a whole number of at least "
                f"1, not {value!r} (it caps the async def jobs running at once)"
            )
        if self.shard is not None and not isinstance(self.shard, str):
            raise ConfigError(f"capsule {self.name!r}: shard must be a shard's name (a key "
                              f"of shards), not {self.shard!r}")

    @property
    def queue_names(self) -> list[str]:
        """Unique names in declaration order."""
        return list(dict.fromkeys(name for name, _ in self.queues))

    @property
    def weights(self) -> dict[str, int]:
        return {name: weight for name, weight in self.queues}

    @property
    def mode(self) -> Literal["strict", "random", "weighted"]:
        weights = [weight for _, weight in self.queues]
        if all(w == 0 for w in weights):
            return "strict"
        if all(w == 1 for w in weights):
            return "random"
        return "weighted"


def _env(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value else None


def default_tag(directory: str | None = None) -> str:
    """``tag``'s default: the app directory's name (the current one's), or for a
    Capistrano-style release directory (``<app>/releases/<number>``) the app's name, as
    Sidekiq's ``default_tag`` — not each deploy's timestamp."""
    path = os.path.normpath(directory if directory is not None else os.getcwd())
    name = os.path.basename(path)
    parent = os.path.dirname(path)
    leading = re.match(r"\d+", name)
    if leading and int(leading.group()) != 0 and os.path.basename(parent) == "releases":
        return os.path.basename(os.path.dirname(parent)) or name
    return name


def environment_variable() -> str | None:
    """The deployment ``WURK_ENV`` (else ``APP_ENV``) names, read now: ``environment``'s
    default, and the config file's section when no ``-e`` names one (``wurk.configfile``)."""
    return _env("WURK_ENV") or _env("APP_ENV")


def _env_redis_url() -> str | None:
    """The URL in the variable ``REDIS_PROVIDER`` names (Sidekiq's rule: a deploy's add-on
    keeps its own variable, ``REDIS_PROVIDER=REDISCLOUD_URL``), else ``REDIS_URL``. A
    provider that is a URL, or names a variable unset with no ``REDIS_URL`` either (a typo),
    is a ``ConfigError``: running on no Redis, or the embedded one, would lose the jobs."""
    provider = _env("REDIS_PROVIDER")
    if provider is None:
        return _env("REDIS_URL")
    if ":" in provider:  # never quoted: it may hold a password
        raise ConfigError("REDIS_PROVIDER should be the name of the variable holding the "
                          "Redis URL (e.g. REDISCLOUD_URL), not a URL; put a URL in "
                          "REDIS_URL")
    url = _env(provider) or _env("REDIS_URL")
    if url is None:
        raise ConfigError(f"REDIS_PROVIDER names {provider}, which is not set (nor is "
                          "REDIS_URL): set it to the Redis URL, or unset REDIS_PROVIDER")
    return url


def _env_bool(name: str, default: bool) -> bool:
    """``true``/``false`` (or ``1``/``0``, ``yes``/``no``, ``on``/``off``); anything else is
    a ``ConfigError`` naming the variable: a typo (``fasle``) must not read as true."""
    value = _env(name)
    if value is None:
        return default
    word = value.strip().lower()
    if word in {"0", "false", "no", "off"}:
        return False
    if word in {"1", "true", "yes", "on"}:
        return True
    raise ConfigError(f"environment variable {name}={value!r} is neither true nor false "
                      "(true/false, 1/0, yes/no, on/off)")


def _env_timestamp_format() -> TimestampFormat:
    value = _env("WURK_TIMESTAMP_FORMAT") or "ms"
    if value not in ("ms", "float"):
        raise ConfigError(f"WURK_TIMESTAMP_FORMAT={value!r}: use 'ms' (Sidekiq 8) or 'float' "
                          "(Sidekiq 6/7)")
    return value  # type: ignore[return-value]


def _env_count(name: str, default: int) -> int:
    """A whole number ≥ 1 from the environment, ``default`` when unset; a ``ConfigError``
    naming the variable otherwise (``0`` is not taken for unset)."""
    value = _env(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ConfigError(f"environment variable {name}={value!r} is not a whole number ≥ 1")
    return number


@dataclass(kw_only=True, eq=False)
class Config:
    """Every setting of a wurk process. Keyword-only; validated on build and on freeze."""

    # -- Redis ------------------------------------------------------------------------------
    redis_url: str | None = None
    key_prefix: str = ""
    socket_timeout: float = 3.0
    # Pooled connections idle longer than this many seconds are closed (a proxy or a firewall
    # that cuts idle connections, a Redis short of ``maxclients``); None: kept open.
    redis_idle_timeout: float | None = None
    # The embedded server's directory: a bare name is looked for in the current directory
    # and its parents up to the project root, as git finds .git; a path is used as given.
    home: str = field(default_factory=lambda: _env("WURK_HOME") or ".wurk")
    # Whether finding Redis may start the embedded server when none runs for ``home``; the
    # read-only commands say no, so a command run in the wrong folder refuses instead of
    # reporting an empty new server.
    start_embedded: bool = True
    # A push returns only once this many replicas confirmed it (Redis's WAIT, on the push's
    # own connection), else it raises RedisUnavailable: an acknowledged push then survives a
    # failover (docs/sentinel.md). 0 (Redis's default): the primary's word is enough.
    push_replicas: int = 0
    # How long a push waits for those replicas; shorter than socket_timeout.
    push_replica_timeout: float = 1.0
    # Other Redis servers jobs can be pushed to and served from: name -> URL (any form
    # redis_url takes). ``redis_url`` is the shard named "default" (docs/scaling.md).
    shards: dict[str, str] = field(default_factory=dict)
    # (job name, queue, args) -> a shard's name, or None for the default shard: where a push
    # goes when neither ``via`` nor the job's ``shard`` option says.
    shard_router: ShardRouter | None = None
    # -- wire format ------------------------------------------------------------------------
    timestamp_format: TimestampFormat = field(default_factory=lambda: _env_timestamp_format())
    # -- client -----------------------------------------------------------------------------
    # "transactional": a push inside a database transaction waits for its commit and is
    # dropped on rollback (``wurk.client.transactional``); "outbox": it is written into the
    # database's outbox table in that transaction and relayed to Redis after the commit
    # (``wurk.client.outbox``). ``transaction`` is the adapter that knows the transaction
    # (SQLAlchemy's, or Django's, which its app sets).
    client: Literal["default", "transactional", "outbox"] = "default"
    transaction: Any = None
    # The outbox relay (``wurk.client.outbox``): rows moved to Redis per round trip; the
    # worker's poll (a commit in this process wakes its relay at once); how long a claimed
    # row is held where the database cannot lock rows (SQLite) before another relay may
    # take it.
    outbox_batch_size: int = 100
    outbox_poll_interval: float = 1.0
    outbox_claim_timeout: float = 60.0
    # Reliable push (``wurk.client.reliable``): "off" raises RedisUnavailable when a push
    # cannot reach Redis; "memory" keeps the push in this process until Redis answers (lost
    # if the process ends first, as Sidekiq Pro's); "disk" keeps it in a file fsync'd before
    # the push returns, which a successor sends. At most ``reliable_push_size`` jobs wait; a
    # push that finds the buffer full raises. ``reliable_push_dir``: the disk buffer's
    # directory (default: ``push-buffer`` in the embedded server's home, ``.wurk``).
    # True is "memory" (Sidekiq Pro's buffer), False "off": stored as the mode's name.
    # ``reliable_push_buffer`` is another name for ``reliable_push_size`` (``SETTING_ALIASES``).
    reliable_push: Literal["off", "memory", "disk"] | bool = "off"
    reliable_push_size: int = 1000
    reliable_push_dir: str | None = None
    bulk_batch_size: int = 1000
    # ZADD is dearer than LPUSH, so scheduled bulk pushes go in smaller slices (Sidekiq 8.1.2).
    scheduled_bulk_batch_size: int = 100
    # -- worker -----------------------------------------------------------------------------
    concurrency: int = field(default_factory=lambda: _env_count("WURK_CONCURRENCY", 5))
    # -- async jobs (``wurk.asyncjobs``) ----------------------------------------------------
    # ``async def`` jobs of the default capsule running at once as tasks on the event loop.
    async_concurrency: int = 100
    # An async job holding the event loop longer than this is named by the loop's watch
    # (``wurk.runtime.loopwatch``); 0 turns the watch off.
    loop_lag_warning: float = 0.1
    # The event loop async jobs run on: "auto" (uvloop where installed, else asyncio's),
    # "uvloop" or "asyncio" (``wurk.asyncjobs.loop_factory``).
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"
    # The garbage collector's first threshold in a process the worker owns, which also
    # freezes what exists at its start (``wurk.runtime.collector``); None: Python's own.
    gc_threshold: int | None = 10_000
    queues: list[str] = field(default_factory=lambda: ["default"])
    capsules: list[Capsule] = field(default_factory=list)
    timeout: float = 25.0
    shutdown_grace: float = 3.0
    # The time limit of a job without a ``timeout`` option of its own, seconds; None (the
    # default, as Sidekiq's users expect): no limit (``wurk.control``).
    job_timeout: float | None = None
    # Seconds one execution of an iterable job may iterate before it stops and is pushed
    # again, for a job class that sets no ``max_iteration_runtime`` of its own; None: none.
    max_iteration_runtime: float | None = None
    # How often a worker looks for cancels of jobs it may be running (``wurk.cancel``).
    control_interval: float = 1.0
    fetch: Literal["reliable", "basic"] = "reliable"
    fetch_timeout: float = 1.0
    # Reliable fetch: most jobs a processor takes in one round trip out of a backlog (its
    # share of the queue at most); 1 fetches one job at a time.
    prefetch: int = 8
    # Fair, partitioned queues (``wurk.partitions``, docs/partitions.md): queue name → most
    # jobs of one partition in flight at once, cluster-wide; fetched round-robin across the
    # partitions. Needs reliable fetch.
    partitions: dict[str, int] = field(default_factory=dict)
    # ... and optionally a rate: partitioned queue → most jobs of one partition fetched in
    # one second of Redis's clock.
    partition_rates: dict[str, int] = field(default_factory=dict)
    # Pin processor threads: "auto" (one CPU while busy and not computing in parallel),
    # None/"none" (the OS decides) or CPUs "0,2-3" (``wurk.runtime.affinity``).
    cpu_affinity: str | None = "auto"
    private_list_layout: Literal["wurk", "pro"] = "wurk"
    paused_cache_ttl: float = 5.0
    tag: str = field(default_factory=default_tag)
    labels: list[str] = field(default_factory=list)
    # The deployment this process belongs to ("production", "staging"…): ``-e`` (else this
    # default) picks the YAML file's section of that name; the process record (``env``), the
    # boot line and the dashboard's title show it. Default: WURK_ENV, else APP_ENV, else none.
    environment: str | None = field(default_factory=environment_variable)
    # False (WURK_LEADER / SIDEKIQ_LEADER=false) keeps this process out of leader election,
    # so it never runs periodic jobs.
    leader: bool = field(default_factory=lambda: _env_bool("WURK_LEADER", True)
                         and _env_bool("SIDEKIQ_LEADER", True))
    # -- retries and the dead set -----------------------------------------------------------
    max_retries: int = 25
    dead_max_jobs: int = 10_000
    dead_timeout: float = 180 * DAY
    # -- scheduler and heartbeat ------------------------------------------------------------
    scheduler: Literal["atomic", "client"] = "atomic"
    average_scheduled_poll_interval: float = 5.0
    poll_interval_average: float | None = None
    scheduler_initial_wait: float = 10.0
    heartbeat_interval: float = 10.0
    heartbeat_ttl: int = 60
    reaper_interval: float = 60.0
    # The reaper's full sweep of every in-flight list (for queues nobody serves any more)
    # runs at most once per this many seconds, cluster-wide (Sidekiq Pro's option and name).
    super_fetch_orphan_check: float = 3600.0
    # -- leader election and periodic jobs (``wurk.periodic``) -------------------------------
    # The leader renews every 15 s and holds ``dear-leader`` for twice that; a follower tries
    # every 60 s, or as soon as the key's time runs out, whichever comes first.
    leader_renew_interval: float = 15.0
    leader_check_interval: float = 60.0
    periodic: Periodic = field(default_factory=Periodic)
    # A tick missed (no leader, a slow poll) fires late if it is at most this old; older
    # ones are warned about, never pushed.
    periodic_catch_up: float = 300.0
    # Longest wait between two looks of the leader at its loops (it wakes at the next tick).
    periodic_poll_interval: float = 5.0
    # Accept a leading seconds field (6-field cron): Sidekiq Enterprise and Ruby wurk read 5.
    periodic_seconds_field: bool = False
    # The zone of every loop registered without a ``tz`` (Sidekiq Enterprise's ``mgr.tz``);
    # None: UTC.
    periodic_tz: str | None = None
    # -- logging ----------------------------------------------------------------------------
    log_format: Literal["pretty", "plain", "json"] = "pretty"
    log_level: str = "INFO"
    logged_job_attributes: list[str] = field(default_factory=lambda: [P.BID, P.TAGS])
    skip_default_job_logging: bool = False
    # A job's start line is at DEBUG; one still running after this many seconds gets it at
    # INFO then (``wurk.metrics.slow``). None: never.
    log_slow_jobs_after: float | None = 10.0
    # -- dashboard (``wurk.web``) -----------------------------------------------------------
    web_username: str | None = None  # with web_password: HTTP basic auth on every request
    web_password: str | None = None
    web_read_only: bool = False  # pages only: every action refused
    # The dashboard's own connections: few, so a burst of page views or
    # long-held live streams cannot take the connections a co-located worker needs.
    web_pool_size: int = 4
    web_stream_interval: float = 2.0  # seconds between two live-stream updates
    # Seconds between two refreshes of a page's content when its "Live Poll" is on.
    web_poll_interval: float = 5.0
    # "Open in Firefox Profiler" on a profile's page (``wurk.web.firefox``): a click uploads
    # that one profile to the store and opens the view, ``{token}`` being the store's
    # profile token; nothing is sent before a click. Off: no button, and no endpoint.
    web_profiler_upload: bool = True
    web_profiler_store_url: str = "https://api.profiler.firefox.com/compressed-store"
    web_profiler_view_url: str = "https://profiler.firefox.com/public/{token}/"
    web_profiler_timeout: float = 30.0  # seconds the store may keep the upload unanswered
    # -- rate limiters (``wurk.limiter``) ---------------------------------------------------
    # A job over a limit is rescheduled at most this many times (a limiter's own
    # ``reschedule`` wins), then its error takes the ordinary retry path; 0: never.
    limiter_reschedule: int = 20
    # Exceptions that mean "over a limit" besides wurk.limiter.OverLimit (an HTTP client's
    # 429 error, say): a job raising one is rescheduled in the same way.
    limiter_errors: list[type[BaseException]] = field(default_factory=list)
    # (limiter or None, job, exc) -> seconds before the rescheduled run; None: the default.
    limiter_backoff: Callable[[Any, dict[str, Any], BaseException], float] | None = None
    # Host names the dashboard answers to beside the loopback ones (DNS rebinding):
    # "jobs.example.com", ".example.com" (and subdomains), "10.0.0.5", or "*" for any.
    web_allowed_hosts: list[str] = field(default_factory=list)
    # -- encrypted jobs (``wurk.crypto``) -----------------------------------------------------
    # The key version new pushes of encrypt=True jobs seal with; None: encryption is off, and
    # such a push is refused. Keys: encryption_keys(version) -> 32 bytes, else the
    # environment's WURK_ENCRYPTION_KEY_<version> (base64), read when a key is needed.
    encryption_version: int | None = None
    encryption_keys: Callable[[int], bytes] | None = None
    # -- observability (``docs/metrics.md``) -------------------------------------------------
    metrics: bool = True  # execution metrics in Sidekiq 8's keys, written every heartbeat
    metrics_compat_v7: bool = False  # also Sidekiq 7's keys, for a 7.x dashboard
    # The cluster's numbers sampled by one process every history_interval seconds and kept
    # retain_history seconds for the dashboard's History tab (and StatsD); 0 keeps none.
    history_interval: float = 30.0
    retain_history: float = float(DAY)
    health_port: int | None = None  # GET / answers 200 while beating and fetching, else 503
    # Where the health and metrics listeners bind: loopback unless told otherwise (a pod's
    # probes and scrapers need "0.0.0.0": --health-host / --metrics-host). Either refuses a
    # Host that is a name other than a loopback or web_allowed_hosts one; an IP passes.
    health_host: str = "127.0.0.1"
    metrics_port: int | None = None  # a Prometheus endpoint on the worker (wurk[prometheus])
    metrics_host: str = "127.0.0.1"
    # "host:port" (or a (host, port) pair, stored as "host:port") of a StatsD / DogStatsD
    # agent (wurk[statsd]); ``statsd_address`` reads it as a pair.
    statsd: str | tuple[str, int] | None = None
    statsd_prefix: str = "wurk"  # "sidekiq" keeps dashboards built for Sidekiq Pro working
    statsd_tags: list[str] = field(default_factory=list)  # added to every metric, "env:prod"
    statsd_datadog_extensions: bool = True  # jobs.perform_dist (a Datadog distribution)
    # (job name, payload, queue) → {"tags": [...], "sample_rate": 0.5}: per-job StatsD options
    statsd_job_options: Callable[[str, dict[str, Any], str], Mapping[str, Any]] | None = None
    # Sidekiq Enterprise's ``retain_history(30, extra=...)``: called with ``gauge(name, value,
    # tags=())`` each history tick this process samples; its gauges join the tick's StatsD batch
    history_extra: Callable[[Callable[..., None]], object] | None = None
    # -- extension points -------------------------------------------------------------------
    # Told each job the reaper returns from a dead process: (its stored text, None); and each
    # poison kill: (its text, {jid, klass, count, queue}).
    on_recover: Callable[[str, dict[str, Any] | None], None] | None = None
    client_middleware: Chain = field(default_factory=Chain)
    server_middleware: Chain = field(default_factory=Chain)
    # Starts with the handler that logs, as Sidekiq's list does: one appended adds to it.
    error_handlers: list[ErrorHandler] = field(default_factory=lambda: [log_error])
    death_handlers: list[DeathHandler] = field(default_factory=list)
    lifecycle: dict[str, list[Callable[[], None]]] = field(
        default_factory=lambda: {event: [] for event in LIFECYCLE_EVENTS}
    )

    def __post_init__(self) -> None:
        env_url = _env_redis_url()
        if env_url:  # the environment wins, so a deploy can point any app at its Redis
            self.redis_url = env_url
        self._frozen = False
        # What this configuration opens at run time lives there, not here.
        self._connections = Connections(self)
        self.keys = Keys(self._prefix_of(self.redis_url))
        self.client_middleware = _as_chain("client_middleware", self.client_middleware)
        self.server_middleware = _as_chain("server_middleware", self.server_middleware)
        # A box, not the election itself: a view made by ``routed`` (the dashboard's) shares
        # it, so it sees the election a worker started after the view was made.
        self._leadership: list[LeaderState] = []
        # Which shard this is: a view made by ``shard`` says another, and knows its root.
        self._shard = DEFAULT_SHARD
        self._root = self
        self._take_periodic()
        self.validate()

    def _take_spellings(self) -> None:
        """The settings taken in more than one form, kept in one (``reliable_push=True`` as
        ``"memory"``, a ``statsd`` pair as ``"host:port"``): also when set on the object
        after it was made, checked at ``freeze``."""
        for name, take in (("reliable_push", reliable_push_mode), ("statsd", statsd_text)):
            value = getattr(self, name)
            kept = take(value)
            if kept is not value:
                setattr(self, name, kept)

    def _take_periodic(self) -> None:
        """``periodic`` may be given as the YAML section's list of entries."""
        given: Any = self.periodic
        zone = self.periodic_tz
        if zone is not None:  # a bad one fails here, naming the setting
            try:
                Schedule.parse("* * * * *", zone)
            except ConfigError as exc:
                raise ConfigError(f"periodic_tz: {exc}") from None
        if isinstance(given, Periodic):
            given.seconds_field = self.periodic_seconds_field is True
            given.tz = zone
            return
        loops = Periodic(seconds_field=self.periodic_seconds_field is True, tz=zone)
        loops.load(given, source="periodic")
        self.periodic = loops

    # -- building ---------------------------------------------------------------------------
    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], *, source: str = "configuration") -> Config:
        """Build from a dict (a YAML file's contents); unknown keys are named in the error."""
        known = {f.name for f in fields(cls) if f.init}
        unknown = sorted(set(values) - known - set(SETTING_ALIASES))
        if unknown:
            hint = did_you_mean(unknown[0])
            raise ConfigError(
                f"{source}: unknown setting {unknown[0]!r}"
                + (hint or "; known settings: " + ", ".join(sorted(known)))
            )
        settings = _unaliased(values, source)
        entries = settings.pop("periodic", None)
        config = cls(**settings)
        if entries is not None:  # loaded here so an error names the file
            config.periodic.load(entries, source=source)
        return config

    def capsule(self, name: str, *, queues: Sequence[str] | None = None,
                concurrency: int | None = None, async_concurrency: int = 100,
                server_middleware: Chain | Sequence[Callable[..., Any]] = ()) -> Capsule:
        """Add a capsule (Sidekiq 7's ``config.capsule``), or with its name alone the one of
        that name (one of the YAML file's, say), to edit: its ``server_middleware`` runs
        around its jobs only (``config.capsule("single").server_middleware.add(Lock)``)."""
        found = next((c for c in self.capsules if c.name == name), None)
        if queues is None and concurrency is None and not server_middleware:
            if found is not None:
                return found
            if name == "default":
                raise ConfigError("capsule 'default' is the worker's own: its middleware is "
                                  "config.server_middleware, its queues and threads the "
                                  "top-level queues and concurrency")
            raise ConfigError(f"there is no capsule named {name!r}: to add one give its queues "
                              "and concurrency")
        self._edit()
        if name == "default" or found is not None:
            raise ConfigError(f"a capsule named {name!r} already exists")
        if queues is None or concurrency is None:
            raise ConfigError(f"capsule {name!r}: give its queues and concurrency")
        chain = _as_chain("server_middleware", server_middleware if isinstance(
            server_middleware, Chain) else list(server_middleware), owner=f"capsule {name!r}: ")
        capsule = Capsule(name=name, queues=[parse_queue(q) for q in queues],
                          concurrency=concurrency, async_concurrency=async_concurrency,
                          server_middleware=chain)
        self.capsules.append(capsule)
        return capsule

    def all_capsules(self) -> list[Capsule]:
        """The default capsule (from ``queues``/``concurrency``) then the named ones."""
        default = Capsule(name="default", queues=[parse_queue(q) for q in self.queues],
                          concurrency=self.concurrency,
                          async_concurrency=self.async_concurrency)
        return [default, *self.capsules]

    def on(self, event: str, fn: Callable[[], None] | None = None) -> Any:
        """Register a lifecycle hook; usable as ``@config.on("startup")``."""
        if event not in self.lifecycle:
            raise ConfigError(
                f"unknown lifecycle event {event!r}; known: {', '.join(LIFECYCLE_EVENTS)}"
            )

        def register(hook: Callable[[], None]) -> Callable[[], None]:
            self._edit()
            self.lifecycle[event].append(hook)
            return hook

        return register(fn) if fn is not None else register

    # -- validation -------------------------------------------------------------------------
    def validate(self) -> None:
        self._take_spellings()
        for name in _SECONDS_SETTINGS:
            value = getattr(self, name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) \
                    and value > MAX_SECONDS:
                raise ConfigError(f"{name} must be a number of seconds up to "
                                  f"{MAX_SECONDS:,.0f} (about 292 years: the longest wait "
                                  f"a thread can make), not {value!r}")
        if self.timestamp_format not in ("ms", "float"):
            raise ConfigError(
                f"timestamp_format must be 'ms' (Sidekiq 8) or 'float' (Sidekiq 6/7), "
                f"not {self.timestamp_format!r}"
            )
        for name in ("concurrency", "async_concurrency", "max_retries", "dead_max_jobs",
                     "bulk_batch_size", "scheduled_bulk_batch_size", "heartbeat_ttl",
                     "prefetch", "limiter_reschedule", "outbox_batch_size",
                     "reliable_push_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (
                0 if name in ("max_retries", "limiter_reschedule") else 1
            ):
                raise ConfigError(f"{name} must be a positive whole number, not {value!r}")
        for name in ("timeout", "shutdown_grace", "fetch_timeout", "paused_cache_ttl",
                     "average_scheduled_poll_interval", "heartbeat_interval", "dead_timeout",
                     "socket_timeout", "scheduler_initial_wait", "reaper_interval",
                     "loop_lag_warning", "periodic_catch_up", "super_fetch_orphan_check"):
            value = getattr(self, name)
            if _not_seconds(value, zero=True):
                raise ConfigError(f"{name} must be a number of seconds ≥ 0, not {value!r}")
        if self.heartbeat_interval * 2 > self.heartbeat_ttl:
            # The record must outlive a beat, with room for one more: else it expires between
            # beats (other processes' reapers take the live process's jobs, which then run
            # twice), and its processors stop fetching for a part of every interval, once the
            # last beat no longer vouches for the record (``Heartbeat.wait_visible``).
            raise ConfigError(
                f"heartbeat_interval ({self.heartbeat_interval!r} s) must be at most half of "
                f"heartbeat_ttl ({self.heartbeat_ttl!r} s): the process record would expire "
                "between beats, and other processes would take this live one's running jobs "
                "and run them again; raise heartbeat_ttl with it")
        if self.periodic_catch_up < MIN_CATCH_UP:
            raise ConfigError(f"periodic_catch_up must be at least {MIN_CATCH_UP} s, not "
                              f"{self.periodic_catch_up!r}: the leader pushes a tick a moment "
                              "after it comes, so with less no tick would ever be pushed")
        self._check_choice("fetch", ("reliable", "basic"))
        self._check_choice("event_loop", EVENT_LOOPS)
        if self.event_loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
            raise ConfigError(UVLOOP_MISSING)
        self._check_choice("client", ("default", "transactional", "outbox"))
        self._check_choice("reliable_push", ("off", "memory", "disk"),
                           " (or True: 'memory', False: 'off')")
        self._validate_transaction()
        self._check_choice("scheduler", ("atomic", "client"))
        self._check_choice("private_list_layout", ("wurk", "pro"))
        self._check_choice("log_format", ("pretty", "plain", "json"))
        self._check_types()
        affinity.parse(self.cpu_affinity)
        if not isinstance(self.queues, list) or not all(isinstance(q, str)
                                                        for q in self.queues):
            raise ConfigError(f"queues must be a list of queue names, not {self.queues!r}")
        self.all_capsules()  # validates queue names and concurrency
        self._check_capsule_names()
        self.periodic.check_seconds()
        self._validate_web()
        self._validate_observability()
        self._validate_limiter()
        self._validate_encryption()
        self._validate_job_timeout()
        if self.gc_threshold is not None and (isinstance(self.gc_threshold, bool) or not
                                              isinstance(self.gc_threshold, int)
                                              or not 1 <= self.gc_threshold <= GC_MAX):
            raise ConfigError(f"gc_threshold must be a whole number from 1 to {GC_MAX:,} (a C "
                              "int, what gc.set_threshold takes) or null (Python's own "
                              f"threshold), not {self.gc_threshold!r}")
        self._validate_redis()
        self._validate_shards()
        self._validate_partitions()
        self._validate_cluster()

    def _check_capsule_names(self) -> None:
        """One capsule a name: a capsule's pool and its entry of the process record are
        found by it, so a second one of a name shared the first's, and ``default`` is the
        top level's capsule (``queues``, ``concurrency``)."""
        seen: set[str] = set()
        for capsule in self.capsules:
            if capsule.name == "default":
                raise ConfigError(
                    "capsule 'default' is the worker's own: set its threads and queues with "
                    "the top-level concurrency and queues settings (or -c and -q), and give "
                    "another capsule a name of its own")
            if capsule.name in seen:
                raise ConfigError(f"two capsules are named {capsule.name!r}: give each a name "
                                  "of its own")
            seen.add(capsule.name)

    def _validate_partitions(self) -> None:
        self.partitions = check_partitions(self.partitions)
        self.partition_rates = check_partition_rates(self.partition_rates, self.partitions)
        if self.partitions and self.fetch != "reliable":
            raise ConfigError("partitions need fetch='reliable': a partitioned queue is "
                              "fetched by a script that takes its jobs into in-flight lists "
                              "(docs/partitions.md)")

    def _validate_redis(self) -> None:
        if isinstance(self.redis_url, str):
            try:
                check_redis_url(self.redis_url)
            except ConfigError as exc:
                raise ConfigError(f"redis_url: {exc}") from None
        count = self.push_replicas
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ConfigError(f"push_replicas must be a whole number ≥ 0 (replicas that "
                              f"confirm each push; 0: off), not {count!r}")
        wait = self.push_replica_timeout
        if _not_seconds(wait):
            raise ConfigError(f"push_replica_timeout must be a number of seconds > 0, "
                              f"not {wait!r}")
        if count and 0 < self.socket_timeout <= wait:
            raise ConfigError(f"push_replica_timeout ({wait} s) must be shorter than "
                              f"socket_timeout ({self.socket_timeout} s): a push waits that "
                              "long for its replicas, and its connection would time out first")

    def _prefix_of(self, url: Any) -> str:
        """The keys' prefix: ``key_prefix``, and on a cluster the keyspace's hash tag."""
        if isinstance(url, str) and cluster.is_cluster(url) and isinstance(self.key_prefix, str):
            try:
                return keyspace_prefix(self.key_prefix, cluster.parse(url).keyspace)
            except ConfigError:
                return self.key_prefix  # validate() names what is wrong with the URL
        return self.key_prefix

    @property
    def is_cluster(self) -> bool:
        """Whether this configuration's Redis is a Redis Cluster (a ``redis+cluster://`` URL):
        its keys then follow the cluster layout, a keyspace per queue (``docs/scaling.md``)."""
        return cluster.is_cluster(self.redis_url)

    def _validate_cluster(self) -> None:
        if not self.is_cluster:
            return
        try:
            target = cluster.parse(str(self.redis_url))
        except ConfigError as exc:
            raise ConfigError(f"redis_url: {exc}") from None
        why = ("on Redis Cluster, wurk keeps each queue's keys in one hash slot "
               "(docs/scaling.md)")
        if "{" in self.key_prefix or "}" in self.key_prefix:
            raise ConfigError(f"key_prefix {self.key_prefix!r} holds a brace: {why}, and a "
                              "brace in the prefix would be the keys' hash tag instead")
        if self._root is self and target.keyspace != cluster.DEFAULT_KEYSPACE:
            raise ConfigError(f"redis_url: a worker's or pusher's cluster URL names no "
                              f"keyspace ({target.keyspace!r} given): {why}, and a push "
                              "finds its queue's keyspace by itself")
        if self.shard_router is not None:
            raise ConfigError(f"shard_router cannot be set with a Redis Cluster redis_url: "
                              f"{why}; a push goes to its queue's keyspace")
        if self.shards:
            raise ConfigError(f"shards cannot be combined with a Redis Cluster redis_url: {why}; "
                              "the cluster's primaries are the shards")
        for capsule in self.capsules:
            if capsule.shard is not None:
                raise ConfigError(f"capsule {capsule.name!r}: shard cannot be set on Redis "
                                  f"Cluster: {why}, and each queue is served from its own")
        for capsule in self.all_capsules():
            for queue in capsule.queue_names:
                cluster.keyspace_name(queue, f"capsule {capsule.name!r}")
        if self.reliable_push != "off":
            raise ConfigError(
                f"reliable_push={self.reliable_push!r} is not supported on Redis Cluster yet: "
                f"{why}, and the buffer sends what it kept through the configuration's own "
                "keyspace (default's), where a job of another queue would land under a key "
                "no worker of that queue reads; use reliable_push='off' (a push Redis cannot "
                "take raises wurk.RedisUnavailable)")
        if self.client == "outbox":
            raise ConfigError(
                f"client='outbox' is not supported on Redis Cluster yet: {why}, and the "
                "outbox relay pushes every row into the configuration's own keyspace "
                "(default's), where a job of another queue would land under a key no worker "
                "of that queue reads; use client='transactional' (pushed at commit, "
                "docs/transactional-push.md)")
        self.check_periodic_on_cluster()

    def check_periodic_on_cluster(self) -> None:
        """``ConfigError`` for a periodic loop that cannot run on a cluster configuration:
        its queue must be a keyspace, and its retries stay in that queue's keyspace
        (``wurk.periodic.cluster`` pushes each run into its queue's keyspace)."""
        if not self.is_cluster:
            return
        for loop in self.periodic.loops():
            queue = loop.options.get(P.QUEUE)
            if queue is not None:
                cluster.keyspace_name(str(queue), f"periodic loop {loop.describe()}")
            retry_queue = loop.options.get(P.RETRY_QUEUE)
            if retry_queue not in (None, "", queue or P.DEFAULT_QUEUE):
                raise ConfigError(
                    f"periodic loop {loop.describe()}: retry_queue {retry_queue!r} is not "
                    "supported on Redis Cluster: a job's retries stay in its queue's "
                    "keyspace (docs/scaling.md)")

    def _validate_shards(self) -> None:
        shards = self.shards
        if not isinstance(shards, dict):
            raise ConfigError(f"shards must map a shard's name to its Redis URL, not "
                              f"{shards!r}")
        for name, url in shards.items():
            if not isinstance(name, str) or not SHARD_NAME.fullmatch(name) \
                    or name == DEFAULT_SHARD:
                raise ConfigError(f"shards: {name!r} is not a shard name: letters, digits, "
                                  f"'_', '.' or '-' (64 at most), and not {DEFAULT_SHARD!r}, "
                                  "which is redis_url's own")
            if not isinstance(url, str) or not url:
                raise ConfigError(f"shards: {name!r} must be a Redis URL, not {url!r}")
            try:
                check_redis_url(url)
            except ConfigError as exc:
                raise ConfigError(f"shards: {name!r}: {exc}") from None
        if self.shard_router is not None and not callable(self.shard_router):
            raise ConfigError(f"shard_router must be a function (job name, queue, args) -> "
                              f"a shard's name or None, not {self.shard_router!r}")
        for capsule in self.capsules:
            if capsule.shard is not None:
                self.check_shard(capsule.shard, f"capsule {capsule.name!r}")

    def check_shard(self, name: Any, where: str) -> None:
        """``ConfigError`` unless ``name`` is a shard of this configuration (on a cluster:
        any queue's name)."""
        if self._root.is_cluster:
            if name != DEFAULT_SHARD:
                cluster.keyspace_name(name, where)
            return
        if name != DEFAULT_SHARD and name not in self._root.shards:
            known = ", ".join(repr(n) for n in self._root.shard_names())
            raise ConfigError(f"{where}: no shard named {name!r}; the shards are {known} "
                              "(add it to shards: name -> Redis URL)")

    def _validate_job_timeout(self) -> None:
        value = self.job_timeout
        if value is not None and _not_seconds(value):
            raise ConfigError(f"job_timeout must be a number of seconds > 0, or none for no "
                              f"limit, not {value!r}")

    def _validate_encryption(self) -> None:
        check_encryption(self.encryption_version, self.encryption_keys)

    def _validate_limiter(self) -> None:
        errors = self.limiter_errors
        if not isinstance(errors, list) or not all(
                isinstance(e, type) and issubclass(e, BaseException) for e in errors):
            raise ConfigError(f"limiter_errors must be a list of exception classes (e.g. "
                              f"[httpx.HTTPStatusError]), not {errors!r}")
        if self.limiter_backoff is not None and not callable(self.limiter_backoff):
            raise ConfigError(f"limiter_backoff must be a function (limiter, job, exc) -> "
                              f"seconds, not {self.limiter_backoff!r}")

    def _validate_transaction(self) -> None:
        adapter = self.transaction
        if adapter is not None and not callable(getattr(adapter, "after_commit", None)):
            raise ConfigError(f"transaction={adapter!r} has no after_commit(callback) method; "
                              "give wurk.contrib.sqlalchemy.SQLAlchemyAdapter(Session) or "
                              "an object of your own with one")
        if self.client in ("transactional", "outbox") and adapter is None:
            raise ConfigError(
                f"client={self.client!r} needs to know your transactions: add "
                "transaction=wurk.contrib.sqlalchemy.SQLAlchemyAdapter(Session"
                + (", outbox=outbox_table(metadata))" if self.client == "outbox" else ")")
                + ", or with Django put 'wurk.contrib.django' in INSTALLED_APPS (it sets "
                "this itself)")
        if self.client == "outbox" and (getattr(adapter, "outbox", True) is None or not all(
                callable(getattr(adapter, name, None))
                for name in ("in_transaction", "write_outbox", "outbox_store"))):
            raise ConfigError(
                f"client='outbox' needs an adapter with an outbox table, and {adapter!r} has "
                "none; give "
                "wurk.contrib.sqlalchemy.SQLAlchemyAdapter(Session, outbox=outbox_table("
                "metadata)), or use Django's app (its model is the outbox)")

    def _validate_web(self) -> None:
        if (self.web_username is None) != (self.web_password is None):
            raise ConfigError("web_username and web_password go together: set both for basic "
                              "auth on the dashboard, or neither")
        size = self.web_pool_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(f"web_pool_size must be a whole number of at least 1, not {size!r}")
        interval = self.web_stream_interval
        if _not_seconds(interval):
            raise ConfigError(f"web_stream_interval must be a number of seconds > 0, "
                              f"not {interval!r}")
        poll = self.web_poll_interval
        if _not_seconds(poll):
            raise ConfigError(f"web_poll_interval must be a number of seconds > 0 (the "
                              f"dashboard's Live Poll refreshes a page that often), "
                              f"not {poll!r}")
        timeout = self.web_profiler_timeout
        if _not_seconds(timeout):
            raise ConfigError(f"web_profiler_timeout must be a number of seconds > 0, "
                              f"not {timeout!r}")
        for name in ("web_profiler_store_url", "web_profiler_view_url"):
            problem = _profiler_url_problem(getattr(self, name),
                                           view=name == "web_profiler_view_url")
            if problem:
                raise ConfigError(f"{name}: {problem}")
        hosts = self.web_allowed_hosts
        if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
            raise ConfigError(f"web_allowed_hosts must be a list of host names, not {hosts!r}")
        for pattern in hosts:
            try:
                check_host_pattern(pattern)
            except ValueError as exc:
                raise ConfigError(f"web_allowed_hosts: {exc}") from None

    def _validate_observability(self) -> None:
        for name in _PORT_SETTINGS:
            port = getattr(self, name)
            if port is not None and (isinstance(port, bool) or not isinstance(port, int)
                                     or not 0 <= port <= 65535):
                raise ConfigError(f"{name} must be a TCP port (0-65535; 0 picks a free one), "
                                  f"not {port!r}")
        interval = self.history_interval
        if _not_seconds(interval):
            raise ConfigError(f"history_interval must be a number of seconds > 0, "
                              f"not {interval!r}")
        keep = self.retain_history
        if _not_seconds(keep, zero=True):
            raise ConfigError(f"retain_history must be a number of seconds ≥ 0 (0 keeps no "
                              f"history), not {keep!r}")
        if self.statsd is not None:
            statsd_address(self.statsd)
        if self.statsd_job_options is not None and not callable(self.statsd_job_options):
            raise ConfigError("statsd_job_options must be a function (job name, payload, "
                              f"queue) → options, not {self.statsd_job_options!r}")
        self._validate_history_extra()

    def _validate_history_extra(self) -> None:
        extra = self.history_extra
        if extra is None:
            return
        if not callable(extra):
            raise ConfigError("history_extra must be a function given gauge(name, value, "
                              f"tags=()) each history tick, not {extra!r}")
        if self.statsd is None:
            raise ConfigError("history_extra sends gauges to StatsD with the history's: "
                              "set statsd too")
        if not self.retain_history:
            raise ConfigError("history_extra is called by the history sampler, which "
                              "retain_history 0 turns off: keep some history")

    def _check_types(self) -> None:
        """The settings a file can give any value: caught here, not as a crash later."""
        for name in _TEXT_SETTINGS:
            value = getattr(self, name)
            if not isinstance(value, str) and not (value is None and name in _OPTIONAL):
                raise ConfigError(f"{name} must be text, not {value!r}")
        for name in _FLAG_SETTINGS:
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, not {getattr(self, name)!r}")
        for name in _TEXT_LIST_SETTINGS:
            value = getattr(self, name)
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{name} must be a list of text, not {value!r}")
        for name in _LOOP_INTERVALS:  # a loop that waits 0 s between turns would spin
            value = getattr(self, name)
            if value is not None and _not_seconds(value):
                raise ConfigError(f"{name} must be a number of seconds > 0, not {value!r}")
        if not isinstance(self.log_level, str) or \
                not isinstance(logging.getLevelName(self.log_level.upper()), int):
            raise ConfigError(f"log_level must be one of DEBUG, INFO, WARNING, ERROR, "
                              f"CRITICAL, not {self.log_level!r}")
        if not isinstance(self.capsules, list) or not all(isinstance(c, Capsule)
                                                          for c in self.capsules):
            raise ConfigError(f"capsules must map a name to its settings, not "
                              f"{self.capsules!r}")

    def _check_choice(self, name: str, choices: Iterable[str], more: str = "") -> None:
        value = getattr(self, name)
        options = tuple(choices)
        if value not in options:
            raise ConfigError(f"{name} must be one of {', '.join(map(repr, options))}{more}, "
                              f"not {value!r}")

    # -- freezing ---------------------------------------------------------------------------
    def freeze(self) -> Config:
        """Validate and make read-only; done before any worker thread starts. Once is
        enough: a configuration frozen by one worker serves the next one as it is."""
        if self._frozen:
            return self
        self.validate()
        self.client_middleware.freeze()
        self.server_middleware.freeze()
        for capsule in self.capsules:  # one set as a list after it was made: taken now
            capsule.server_middleware = _as_chain("server_middleware", capsule.server_middleware,
                                                  owner=f"capsule {capsule.name!r}: ")
            capsule.server_middleware.freeze()
        self.periodic.freeze()
        self._frozen = True
        return self

    @property
    def frozen(self) -> bool:
        return self._frozen

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_frozen", False) and not name.startswith("_"):
            raise ConfigError(f"the configuration is frozen; {name} cannot change after start")
        super().__setattr__(name, value)
        if name == "periodic_tz" and hasattr(self, "_root"):  # set after the build
            self._take_periodic()  # checked, and the zone of loops registered from now on

    def _edit(self) -> None:
        if self._frozen:
            raise ConfigError("the configuration is frozen once the worker starts")

    def check_worker(self) -> None:
        """What only a worker needs of the settings (a dashboard may well use a socket
        timeout shorter than any fetch): raises ``ConfigError`` naming the clash. The active
        encryption key is checked beside it (``wurk.crypto.check_active_key``), once the job
        modules, which may give ``key_for``, are imported."""
        if 0 < self.socket_timeout <= self.fetch_timeout:
            raise ConfigError(
                f"fetch_timeout ({self.fetch_timeout} s) must be shorter than socket_timeout "
                f"({self.socket_timeout} s): a fetch waits that long for a reply, and its "
                "connection would time out first"
            )

    # -- leadership -------------------------------------------------------------------------
    def is_leader(self) -> bool:
        """True while this process's running worker holds ``dear-leader`` (Sidekiq Ent's
        ``leader?``); False with no worker running, or with ``leader`` off."""
        return any(leadership.is_leader() for leadership in self._leadership)

    def leader_token(self) -> int | None:
        """The fencing token of this process's current term as leader, else None. It only
        grows: a write guarded by "my token is still the newest" cannot come from a leader
        whose term another has since taken."""
        return next((leadership.token for leadership in self._leadership
                     if leadership.token is not None), None)

    # -- shards (``docs/scaling.md``) --------------------------------------------------------
    @property
    def shard_name(self) -> str:
        """The shard this configuration reaches: ``"default"``, or a name of ``shards``."""
        return self._shard

    def shard_names(self) -> list[str]:
        """``"default"`` then the names of ``shards``, as configured; on a cluster, the
        keyspaces: the queues this configuration serves and those the cluster's index
        records (every queue a wurk process has pushed to)."""
        root = self._root
        if not root.is_cluster:
            return [DEFAULT_SHARD, *root.shards]
        served = [queue for capsule in root.all_capsules() for queue in capsule.queue_names]
        return list(dict.fromkeys([DEFAULT_SHARD, *served, *root.cluster_index()]))

    def cluster_index(self) -> list[str]:
        """The queues the cluster's index records (sorted); empty when it cannot be read."""
        root = self._root
        try:
            members = root.pool("internal").run(
                lambda r: r.smembers(root.keys.cluster_queues), idempotent=True)
        except (WurkError, redis.RedisError) as exc:  # the index only adds to what is served
            log.warning("could not read the Redis Cluster's queue index: %s", exc)
            return []
        # Anyone may have added a member: one that is no UTF-8 reads with a replacement
        # character, which no keyspace's name has, so the check below leaves it out.
        names = sorted(m.decode("utf-8", "replace") if isinstance(m, bytes) else str(m)
                       for m in members)
        return [name for name in names if cluster.KEYSPACE.fullmatch(name)]

    def shard(self, name: str) -> Config:
        """This configuration seen through shard ``name``: every setting, handler and hook
        the same, its own pools to that shard's Redis (made on first use, closed with this
        configuration). ``"default"`` is the configuration itself; views are made once."""
        root = self._root
        if name == DEFAULT_SHARD:
            return root
        root.check_shard(name, "shard")
        found: Config = root._connections.view(name, lambda: root._shard_view(name))
        return found

    def _shard_view(self, name: str) -> Config:
        view = copy.copy(self)
        if self.is_cluster:  # a queue's keyspace: its keys carry its name as hash tag
            url = cluster.with_keyspace(str(self.redis_url), name)
            object.__setattr__(view, "redis_url", url)
            object.__setattr__(view, "keys", Keys(self._prefix_of(url)))
        else:
            object.__setattr__(view, "redis_url", self.shards[name])
        view._shard = name
        view._root = self
        view._connections = Connections(view)
        return view

    # -- connections (``wurk.connections.pools``) --------------------------------------------
    def pool(self, role: str = "client", *, size: int | None = None) -> RedisPool:
        """The Redis pool for ``role`` (client, internal, a capsule's name, web), made once."""
        return self._connections.pool(role, size=size)

    @property
    def unreached(self) -> Unreached:
        """Whether this configuration's worker waits, since boot, for a Redis that never
        answered (``wurk.connections.unreached``): the components' reports stay quiet."""
        return self._connections.unreached

    def routed(self, role: str, to: str, *, size: int) -> Config:
        """A view of this configuration whose ``pool(role)`` is ``pool(to, size=size)``.

        The view shares every setting, handler and pool with this configuration (closing
        this one closes the pools of both). The dashboard reads ``wurk.api`` through a view
        routing ``"api"`` to its own small ``"web"`` pool.
        """
        view = copy.copy(self)
        view._connections = self._connections.routed(role, to, size=size)
        return view

    def async_pool(self) -> AsyncRedisPool:
        """The running event loop's asyncio pool (the async client's, and async
        ``wurk.redis()``'s), made on first use."""
        return self._connections.async_pool()

    def close_idle_connections(self) -> int:
        """Close the pooled connections idle longer than ``redis_idle_timeout`` (none when
        it is None); how many. The worker's heartbeat calls it every beat."""
        return self._connections.close_idle()

    def reset_pools(self) -> None:
        """Drop every pool without closing its sockets: for a child right after ``fork``."""
        self._connections.reset_after_fork()

    def close(self) -> None:
        """Close every pool's connections, sync and async; a pool used again afterwards is
        made anew."""
        self._connections.close()

    async def aclose(self) -> None:
        """``close`` for async code (a FastAPI lifespan's end): the running loop's
        connections are closed and awaited on it, the rest as ``close`` does."""
        await self._connections.aclose_async_pool()
        self.close()

    async def aclose_async_pool(self) -> None:
        """Close the running loop's asyncio pool only (an app's loop ending, while the
        configuration serves on): awaited on its loop; made anew if used again."""
        await self._connections.aclose_async_pool()


def _as_chain(name: str, value: Any, *, owner: str = "") -> Chain:
    """A chain given as a list of middleware (``configure(server_middleware=[Timing])``)
    becomes a ``Chain`` in that order; anything else is refused now, naming the item (and
    ``owner``, a capsule's, before the setting's name)."""
    if isinstance(value, Chain):
        return value
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{owner}{name} must be a list of middleware (classes or "
                          f"callables), not {value!r}")
    edit = "capsule" if owner else "config"
    chain = Chain()
    for index, item in enumerate(value):
        if not callable(item):
            raise ConfigError(
                f"{owner}{name}[{index}] is {item!r}, which is not middleware: give the class "
                f"or callable itself (a file cannot name code: add it in a module loaded with "
                f"-r, {edit}.{name}.add(TheClass))"
            )
        chain.add(item)
    return chain


_default: Config | None = None
_default_lock = threading.Lock()
# The shard a ``via`` block chose, for this thread and the tasks it starts.
_via: contextvars.ContextVar[Config | None] = contextvars.ContextVar("wurk_via", default=None)


def default_config() -> Config:
    """The process-wide configuration, built on first use (reading the environment then);
    inside ``with via(shard):``, that shard's view of it."""
    chosen = _via.get()
    if chosen is not None:
        return chosen
    global _default
    current = _default
    if current is not None:  # the hot path of every push: no lock once built
        return current
    with _default_lock:
        if _default is None:
            _default = Config()
        return _default


def chosen_shard() -> Config | None:
    """The configuration a ``via`` block chose here, if any."""
    return _via.get()


@contextmanager
def via(shard: str | Config) -> Iterator[Config]:
    """``with wurk.via("eu"):`` — inside the block (this thread, and the asyncio tasks it
    starts) the process-wide configuration is shard ``eu``'s view of it, as Sidekiq's
    ``Client.via(pool)``: every push goes there (the job's own ``shard`` option and the
    router give way), and so do ``wurk.redis()``, ``wurk.api`` and batches made inside.
    ``shard`` is a name of ``shards`` (or ``"default"``), or a ``Config`` of its own."""
    if isinstance(shard, Config):
        target = shard
    elif isinstance(shard, str):
        target = default_config().shard(shard)
    else:
        raise TypeError(f"wurk.via takes a shard's name or a wurk.Config, not {shard!r}")
    token = _via.set(target)
    try:
        yield target
    finally:
        _via.reset(token)


def check_encryption(version: Any, keys: Any) -> None:
    """``ConfigError`` unless ``version`` is a key version an envelope carries (a whole
    number ≥ 0; None: off) and ``keys`` a function or None: the settings, and
    ``wurk.crypto.enable``'s arguments, checked alike."""
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)
                                or version < 0):
        raise ConfigError(f"encryption_version must be a key version (a whole number ≥ 0) "
                          f"or None (off), not {version!r:.80}")
    if keys is not None and not callable(keys):
        raise ConfigError(f"encryption_keys must be a function (version) -> 32-byte key, "
                          f"not {keys!r:.80}")


def configure(config: Config | None = None, /, **settings: Any) -> Config:
    """Replace the process-wide configuration with ``config`` or one built from ``settings``."""
    global _default
    new = config if config is not None else Config.from_mapping(settings)
    with _default_lock:
        old, _default = _default, new
    if old is not None and old is not new:
        old.close()
    return new
