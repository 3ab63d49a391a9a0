"""Every exception wurk raises, in one tree.

::

    BaseException
    └── Shutdown                 raised inside job threads at the hard-shutdown deadline
    Exception
    └── WurkError
        ├── ConfigError          (also ValueError)  a bad setting, flag or config file
        ├── RegistrationError    (also ValueError)  a job that cannot be registered
        ├── InvalidArguments     (also TypeError)   job arguments that are not JSON-native
        ├── PartlyPushed                            a bulk push in parts: some went, one failed
        ├── InvalidPayload       (also ValueError)  a payload whose fields cannot be interpreted
        │   ├── UnparseablePayload                  not JSON, or not a JSON object
        │   └── PayloadTooLarge                     a job larger than Redis takes in one value
        ├── JobNotRegistered     (also LookupError) a payload names a job this process lacks
        ├── RedisUnavailable     (also ConnectionError) Redis cannot be reached, or refuses
        │                                           commands for now (loading, busy, OOM…)
        ├── UnsupportedServer                       a Redis too old for wurk (< 7.0)
        ├── EmbeddedServerError                     the embedded server cannot be used
        ├── SwarmError                              a swarm stopped: a child cannot boot
        ├── Poisoned                                a job that kept killing its worker
        ├── JobKilled                               handed to death handlers on an API kill
        ├── InspectionError                         an admin action the data does not allow
        ├── OverLimit                               a rate limiter refused a call
        ├── BatchError                              a batch that cannot take the request
        ├── WorkflowError                           a workflow that cannot be built or found
        ├── Interrupted                             a job stopped between steps: pushed again
        ├── JobCancelled                            raised in a job that wurk.cancel stopped
        ├── JobTimeout                              raised in a job past its time limit
        ├── JobFailed                               a job whose result was awaited failed
        ├── UnstorableResult    (also TypeError)    a job kept no result JSON can carry
        ├── UnreadableResult    (also ValueError)   a stored result that cannot be read
        └── Unretryable                             a failure no retry can fix: to the dead set
            ├── DecryptionError                     an encrypted argument that cannot be opened
            └── IterationStateError                 an it-<jid> hash that cannot be read

The classes say ``__module__ = "wurk"`` so a failed job records ``error_class`` as
``wurk.InvalidPayload`` — one name Ruby and Python dashboards show — whatever file defines it;
``OverLimit`` says ``wurk.limiter``, the module users catch it from.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BatchError",
    "ConfigError",
    "DecryptionError",
    "EmbeddedServerError",
    "InspectionError",
    "Interrupted",
    "InvalidArguments",
    "InvalidPayload",
    "IterationStateError",
    "JobCancelled",
    "JobFailed",
    "JobKilled",
    "JobNotRegistered",
    "JobTimeout",
    "OverLimit",
    "PartlyPushed",
    "PayloadTooLarge",
    "Poisoned",
    "RedisUnavailable",
    "RegistrationError",
    "Shutdown",
    "SwarmError",
    "UnparseablePayload",
    "UnreadableResult",
    "Unretryable",
    "UnstorableResult",
    "UnsupportedServer",
    "WorkflowError",
    "WurkError",
    "is_shutdown",
]


class Shutdown(BaseException):
    """Interrupts a job at the shutdown deadline.

    A ``BaseException`` so that a job's ``except Exception`` cannot swallow it; a job that
    ends with this is not a failure: its payload is already back on its queue.
    """

    __module__ = "wurk"


def is_shutdown(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was caused by, the shutdown's interrupt (a job that wrapped the
    ``Shutdown`` in an error of its own was interrupted all the same)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, Shutdown):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


class WurkError(Exception):
    """Base class of every error wurk raises on purpose."""

    __module__ = "wurk"


class ConfigError(WurkError, ValueError):
    """A setting, CLI flag or configuration file is wrong; the message names it."""

    __module__ = "wurk"


class RegistrationError(WurkError, ValueError):
    """A job cannot be registered (duplicate name, defined in ``__main__`` without a name)."""

    __module__ = "wurk"


class InvalidArguments(WurkError, TypeError):
    """Job arguments that JSON cannot carry unchanged; the message names the argument."""

    __module__ = "wurk"


class InvalidPayload(WurkError, ValueError):
    """A payload field has a value wurk cannot interpret.

    Such a job goes straight to the dead set: no retry can make it interpretable.
    """

    __module__ = "wurk"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class UnparseablePayload(InvalidPayload):
    """The raw entry is not JSON, or not a JSON object; it is stored raw in the dead set."""

    __module__ = "wurk"


class PayloadTooLarge(InvalidPayload):
    """A job whose JSON is larger than the Redis server takes in one value (its
    ``proto-max-bulk-len``, 512 MB unless lowered): refused at push, before anything of its
    round trip is written — Redis would refuse it, or drop the connection, every time, so no
    buffer or outbox keeps it. ``jid``, ``job_class``, ``size`` (bytes) and ``limit`` say
    which job and by how much."""

    __module__ = "wurk"

    def __init__(self, message: str, *, jid: str, job_class: str, size: int,
                 limit: int) -> None:
        super().__init__(message, field=None)
        self.jid = jid
        self.job_class = job_class
        self.size = size
        self.limit = limit


class PartlyPushed(WurkError):
    """A bulk push sent in parts — by shard (a ``shard_router``), by partition
    (``partition_by``) — some of which were pushed before a later one failed. Raised only
    then: when no part went, the failed part's own error is raised as it was.

    Its own type, not the failed part's (code that retries a whole push on
    ``RedisUnavailable`` must not catch it: that retry would run the pushed jobs twice);
    ``error`` is the part's error (also ``__cause__``). ``jids`` has, for each job of the
    push, its jid when its part was pushed (None: not pushed, or stopped by a client
    middleware); ``pushed`` and ``unpushed`` are the places (in the push's ``args``) of the
    jobs whose part was pushed and of those whose part was not (the failed part's and the
    parts after it), so pushing only ``unpushed`` again completes the push without running
    a job twice; ``shards_pushed`` and ``shards_unpushed`` name the shards of those parts (a
    shard is in both when its jobs went in several parts, one per partition). A failed part
    larger than one round trip (``batch_size``) may have gone in part: its own error says
    how many of its jobs went."""

    __module__ = "wurk"

    def __init__(self, message: str, *, error: Exception, jids: list[str | None],
                 pushed: list[int], unpushed: list[int], shards_pushed: list[str],
                 shards_unpushed: list[str]) -> None:
        super().__init__(message)
        self.error = error
        self.jids = jids
        self.pushed = pushed
        self.unpushed = unpushed
        self.shards_pushed = shards_pushed
        self.shards_unpushed = shards_unpushed

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unpickled, (self.args, dict(self.__dict__)))


def _unpickled(args: tuple[Any, ...], state: dict[str, Any]) -> PartlyPushed:
    made = PartlyPushed.__new__(PartlyPushed, *args)
    Exception.__init__(made, *args)
    made.__dict__.update(state)
    return made


class JobNotRegistered(WurkError, LookupError):
    """A payload names a job no module loaded by this process registered."""

    __module__ = "wurk"


class RedisUnavailable(WurkError, ConnectionError):
    """Redis could not be reached, the connection broke mid-command, or Redis refused the
    command for now (``LOADING``, ``BUSY``, ``READONLY``, ``OOM``…)."""

    __module__ = "wurk"


class UnsupportedServer(WurkError):
    """The Redis server is too old for wurk; the message names its version and the minimum."""

    __module__ = "wurk"


class EmbeddedServerError(WurkError):
    """The embedded server cannot be started, found or stopped; the message says the way out."""

    __module__ = "wurk"


class SwarmError(WurkError):
    """A swarm stopped because a child could not boot; the message carries its error."""

    __module__ = "wurk"


class Poisoned(WurkError):
    """Handed to death handlers for a job recovered too often without completing."""

    __module__ = "wurk"


class JobKilled(WurkError):
    """Handed to death handlers when a job is killed through ``wurk.api`` (not raised)."""

    __module__ = "wurk"


class InspectionError(WurkError):
    """An admin action the stored data does not allow: retrying an entry that is not JSON,
    signalling an embedded process."""

    __module__ = "wurk"


class OverLimit(WurkError):
    """A rate limiter refused a call: it stayed over its limit for the whole wait.

    ``limiter`` is the limiter that refused. ``retry_after`` is how many seconds until it
    would allow a call (None when nobody can know: a concurrent limiter frees a slot when a
    holder finishes), e.g. for an HTTP ``Retry-After``; ``next_drip`` is the same number,
    under the name leaky-bucket users know it by. Inside a job, wurk reschedules the job
    instead of failing it (``wurk.limiter``).
    """

    __module__ = "wurk.limiter"

    def __init__(self, limiter: Any, *, retry_after: float | None = None,
                 message: str | None = None) -> None:
        name = getattr(limiter, "name", "?")
        kind = getattr(limiter, "kind", "limiter")
        text = message or f"{kind} limiter {name!r} is over its limit"
        if retry_after is not None:
            text += f"; capacity frees up in {retry_after:.3f} s"
        super().__init__(text)
        self.limiter = limiter
        self.retry_after = retry_after

    @property
    def next_drip(self) -> float | None:
        return self.retry_after


class BatchError(WurkError):
    """A batch that does not exist (expired, deleted), already succeeded, or is misused."""

    __module__ = "wurk"


class WorkflowError(WurkError):
    """A workflow that cannot be built (a cycle, an unknown step, a bad name) or found."""

    __module__ = "wurk"


class Interrupted(WurkError):
    """A job stopped between two steps and asks to run again from where it stopped: the worker
    pushes the same payload (same jid) to the back of its queue, and this execution counts as
    neither a success nor a failure — no retry, no batch count. An iterable job raises it
    when its worker quiets or stops, or after its ``max_iteration_runtime``
    (``wurk.iteration``), and may raise it itself; in any other job it is an ordinary
    failure (the interrupt link is an iterable job's only)."""

    __module__ = "wurk"


class JobCancelled(WurkError):
    """Raised inside a running job that ``wurk.cancel(jid)`` stopped (in a sync job's own
    frame, as the shutdown interrupt is; an async job's task is cancelled and this takes the
    ``CancelledError``'s place). The job ends as cancelled: not a failure, not retried, its
    result (when it keeps one) says so. ``jid`` names the job cancelled (None: the job that
    raises it): one naming another job — what a result handle raises for a cancelled job it
    waited for — ends the job that let it escape as a failure, never as cancelled."""

    __module__ = "wurk"

    def __init__(self, message: str, *, jid: str | None = None) -> None:
        super().__init__(message)
        self.jid = jid


class JobDeleted(JobCancelled):
    """What a result handle raises for a job deleted before it ran (``wurk.api``: from its
    queue, the scheduled set or the retry set, one job or a whole ``clear()``): no result
    will come. ``deleted_from`` says where from (``queue default``, ``scheduled set``,
    ``retry set``). A ``JobCancelled``: the job was removed unrun, as a cancel removes it."""

    __module__ = "wurk"

    def __init__(self, message: str, *, jid: str | None = None,
                 deleted_from: str | None = None) -> None:
        super().__init__(message, jid=jid)
        self.deleted_from = deleted_from


class JobTimeout(WurkError):
    """Raised inside a job that ran past its time limit (``timeout=`` seconds): a normal
    failure, so its retry policy applies."""

    __module__ = "wurk"

    def __init__(self, message: str, *, seconds: float | None = None) -> None:
        super().__init__(message)
        self.seconds = seconds


class JobFailed(WurkError):
    """What a result handle raises for a job whose last run failed (``wurk.results``):
    ``error_class`` and ``message`` are the remote error's (``ValueError``,
    ``billing.CardDeclined``…), ``retries_remain`` whether a retry is due — the job may still
    succeed, and a later wait sees that — and ``backtrace`` its lines, innermost first, when
    the job keeps backtraces (its ``backtrace`` option), else None."""

    __module__ = "wurk"

    def __init__(self, jid: str, error_class: str, message: str, *, retries_remain: bool,
                 backtrace: list[str] | None = None) -> None:
        due = "; a retry is due" if retries_remain else ""
        super().__init__(f"job {jid} failed: {error_class}: {message}{due}")
        self.jid = jid
        self.error_class = error_class
        self.message = message
        self.retries_remain = retries_remain
        self.backtrace = backtrace


class UnstorableResult(WurkError, TypeError):
    """A job that keeps its result (``result_ttl``) returned a value JSON would not carry
    back unchanged (a tuple, a ``datetime``, an object): the run is a failure naming the
    value's type, never a silent ``str()``."""

    __module__ = "wurk"


class UnreadableResult(WurkError, ValueError):
    """The result stored for a jid is not what wurk writes (not JSON, an unknown status, a
    field of the wrong type, a key of another Redis type): the message names the problem
    and shows the start of what is stored."""

    __module__ = "wurk"


class Unretryable(WurkError):
    """A job failure that running the job again cannot fix: the job goes straight to the dead
    set (its death handlers run), whatever its ``retry`` option says."""

    __module__ = "wurk"


class DecryptionError(Unretryable):
    """An encrypted job's last argument could not be opened: an unknown key version, tampered
    or truncated bytes, or no envelope at all. The message names the jid and the key version,
    never the value (``wurk.crypto``), after the prefix ``encryption_error:`` the Ruby wurk's
    dead jobs carry, so a search of the dead set finds them alike."""

    __module__ = "wurk"

    def __init__(self, message: str) -> None:
        prefixed = message.startswith(_DECRYPTION_PREFIX)
        super().__init__(message if prefixed else _DECRYPTION_PREFIX + message)


# The start of every DecryptionError's message (and so of a dead job's error_message).
_DECRYPTION_PREFIX = "encryption_error: "


class IterationStateError(Unretryable):
    """An iterable job's ``it-<jid>`` hash whose fields are not what Sidekiq writes (a count
    that is not a number, a cursor that is not JSON, a key of another type): the job stops
    rather than guess where to go on from. Delete the key to start the job over, or repair
    the field, then retry the job from the dead set (``wurk.iteration``)."""

    __module__ = "wurk"
