"""One job as it is stored: what the dashboard, the CLI and tests show of it.

1. ``JobRecord`` keeps the exact bytes read from Redis beside the parsed payload: removing an
   entry matches those bytes, never a re-serialised copy. An entry
   that is not a JSON object (the dead set keeps such entries) is still a record, with
   ``parse_error`` saying what is wrong.
2. Display: the class and arguments a person recognises — ActiveJob-wrapped jobs unwrapped,
   mailer jobs shown as ``Mailer#method``, ActiveJob's ``_aj_*`` bookkeeping hidden,
   an encrypted last argument masked — as Sidekiq's dashboard shows them.
3. Times as epoch seconds, whichever form (float s, integer ms, text) wrote them;
   a time, count or backtrace that cannot be read is an ``Invalid`` (``values.py``).
4. ``digest``: the SHA-1 of the stored bytes, which names an entry however large it is
   (a page posts it back instead of the entry's text).

Nothing here does I/O except ``delete``, which removes a queue entry by its stored bytes.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from .. import partitions
from .. import payload as P
from .. import stored as values
from ..config import Config, default_config
from ..errors import UnparseablePayload
from ..stored import Invalid

__all__ = ["JobRecord"]

# The class names under which Rails' ActiveJob adapter enqueues (8.x name first, then the
# ≤ 7.x name that 8.x still accepts).
ACTIVE_JOB_WRAPPERS = frozenset({
    "Sidekiq::ActiveJob::Wrapper",
    "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper",
})
# Mailer jobs: their first three arguments are mailer class, method and delivery method.
LEGACY_MAILER_JOB = "ActionMailer::DeliveryJob"
MAILER_JOB = "ActionMailer::MailDeliveryJob"
MAILER_PREFIX_ARGS = 3
# ActiveJob marks its own serialisation keys with this prefix; a GlobalID is shown as its URI.
ACTIVE_JOB_KEY_PREFIX = "_aj_"
GLOBALID_KEY = "_aj_globalid"
ENCRYPTED_PLACEHOLDER = "[encrypted data]"
UNPARSEABLE_CLASS = "[unparseable entry]"


class JobRecord:
    """A stored job: its raw bytes, its payload, and the fields a person looks at."""

    __slots__ = ("_config", "item", "parse_error", "queue", "raw")

    def __init__(self, raw: bytes | str, *, queue: str | None = None,
                 config: Config | None = None) -> None:
        # Text holding a lone surrogate (a JSON ``"\\ud800"`` escape read by an outer JSON,
        # as a running job's payload string is) has no UTF-8 form: its bytes are kept as
        # given, which do not decode, so the record says it is no payload instead of raising.
        self.raw = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
        self._config = config
        try:
            self.item: P.Payload = P.loads(self.raw)
            self.parse_error: str | None = None
        except UnparseablePayload as exc:
            self.item = {}
            self.parse_error = str(exc)
        self.queue = queue if queue is not None else _str_or_empty(self.item.get(P.QUEUE))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.display_class} jid={self.jid!r}>"

    # -- identity ---------------------------------------------------------------------------
    @property
    def text(self) -> str:
        """The stored entry as text (invalid UTF-8 replaced), for showing it raw."""
        return self.raw.decode("utf-8", "replace")

    @property
    def digest(self) -> str:
        """SHA-1 of the stored bytes, as hex (what Redis's ``redis.sha1hex`` gives)."""
        return hashlib.sha1(self.raw, usedforsecurity=False).hexdigest()

    @property
    def jid(self) -> str:
        return _str_or_empty(self.item.get(P.JID))

    @property
    def klass(self) -> str:
        """The payload's ``class`` (the wire name a worker looks up)."""
        return _str_or_empty(self.item.get(P.CLASS))

    @property
    def args(self) -> list[Any]:
        value = self.item.get(P.ARGS)
        return value if isinstance(value, list) else []

    @property
    def bid(self) -> str | None:
        return self.item.get(P.BID) if isinstance(self.item.get(P.BID), str) else None

    @property
    def tags(self) -> list[str]:
        value = self.item.get(P.TAGS)
        return [str(tag) for tag in value] if isinstance(value, list) else []

    # -- display ----------------------------------------------------------------------------
    @property
    def display_class(self) -> str:
        """``display_class`` if set; the wrapped job for ActiveJob; ``Mailer#method`` for mail."""
        if self.parse_error is not None:
            return UNPARSEABLE_CLASS
        shown = self.item.get(P.DISPLAY_CLASS)
        if isinstance(shown, str) and shown:
            return shown
        if self.klass not in ACTIVE_JOB_WRAPPERS:
            return self.klass
        job_class = self._active_job_class()
        if job_class in (LEGACY_MAILER_JOB, MAILER_JOB):
            mailer = self._active_job_arguments()[:2]
            if len(mailer) == 2:
                return f"{mailer[0]}#{mailer[1]}"
        return job_class

    @property
    def display_args(self) -> list[Any]:
        """The arguments as the job itself sees them, ActiveJob's envelope removed."""
        if self.klass in ACTIVE_JOB_WRAPPERS:
            return self._active_job_display_args()
        args = list(self.args)
        if self.item.get(P.ENCRYPT) and args:
            args[-1] = ENCRYPTED_PLACEHOLDER  # ciphertext tells a person nothing
        return args

    def _active_job_class(self) -> str:
        wrapped = self.item.get(P.WRAPPED)
        if isinstance(wrapped, str) and wrapped:
            return wrapped
        envelope = self.args[0] if self.args else None
        if isinstance(envelope, dict) and isinstance(envelope.get("job_class"), str):
            return str(envelope["job_class"])
        return self.klass

    def _active_job_arguments(self) -> list[Any]:
        envelope = self.args[0] if self.args else None
        arguments = envelope.get("arguments") if isinstance(envelope, dict) else None
        return arguments if isinstance(arguments, list) else []

    def _active_job_display_args(self) -> list[Any]:
        if not self.item.get(P.WRAPPED):
            return []
        job_args = [_unwrap_active_job(arg) for arg in self._active_job_arguments()]
        wrapped = self.item[P.WRAPPED]
        if wrapped == LEGACY_MAILER_JOB:
            return job_args[MAILER_PREFIX_ARGS:]
        if wrapped == MAILER_JOB:
            rest = job_args[MAILER_PREFIX_ARGS:]
            first = rest[0] if rest else None
            if isinstance(first, dict):  # deliver_later's keyword hash
                return [first.get("params"), first.get("args")]
            return rest
        return job_args

    # -- times (epoch seconds) --------------------------------------------------------------
    @property
    def created_at(self) -> float | Invalid | None:
        return values.epoch(self.item.get(P.CREATED_AT))

    @property
    def enqueued_at(self) -> float | Invalid | None:
        return values.epoch(self.item.get(P.ENQUEUED_AT))

    @property
    def failed_at(self) -> float | Invalid | None:
        return values.epoch(self.item.get(P.FAILED_AT))

    @property
    def retried_at(self) -> float | Invalid | None:
        return values.epoch(self.item.get(P.RETRIED_AT))

    @property
    def discarded_at(self) -> float | Invalid | None:
        return values.epoch(self.item.get(P.DISCARDED_AT))

    def latency(self, now: float | None = None) -> float | Invalid:
        """Seconds since it was enqueued (else created); 0 when neither time is known."""
        since = self.enqueued_at
        if since is None:
            since = self.created_at
        return values.latency(since, time.time() if now is None else now)

    # -- errors -----------------------------------------------------------------------------
    @property
    def error_class(self) -> str | None:
        return _optional_text(self.item.get(P.ERROR_CLASS))

    @property
    def error_message(self) -> str | None:
        return _optional_text(self.item.get(P.ERROR_MESSAGE))

    @property
    def error_backtrace(self) -> list[str] | Invalid | None:
        """The stored backtrace lines, decoded from every form Sidekiq wrote."""
        return values.backtrace(self.item.get(P.ERROR_BACKTRACE))

    @property
    def retry_count(self) -> int | Invalid | None:
        return values.integer(self.item.get(P.RETRY_COUNT))

    # -- output -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (times in epoch seconds) with the full payload beside it."""
        summary: dict[str, Any] = {
            "jid": self.jid, "class": self.klass, "args": self.args,
            "display_class": self.display_class, "display_args": self.display_args,
            "queue": self.queue,
            "created_at": self.created_at, "enqueued_at": self.enqueued_at,
            "failed_at": self.failed_at, "retried_at": self.retried_at,
            "retry_count": self.retry_count, "error_class": self.error_class,
            "error_message": self.error_message, "tags": self.tags, "bid": self.bid,
            "payload": self.item if self.parse_error is None else None,
        }
        if self.parse_error is not None:
            summary["raw"] = self.text
            summary["parse_error"] = self.parse_error
        return summary

    # -- actions ----------------------------------------------------------------------------
    def delete(self) -> bool:
        """Remove this entry from its queue (``LREM`` of the stored bytes); False if gone.
        A partitioned queue's job (``wurk.partitions``) is looked for in its plain list, then
        in the partition it names (``Queue.delete`` also looks in the others)."""
        config = self._config if self._config is not None else default_config()
        keys = [config.keys.queue(self.queue)]
        if self.queue in config.partitions:
            keys.append(config.keys.partition(self.queue, partitions.partition_of(self.raw)))
        raw = self.raw

        def remove(r: Any) -> int:
            for key in keys:
                if r.type(key) in (b"list", "list") and int(r.lrem(key, 1, raw)):
                    return 1
            return 0

        return bool(config.pool("api").run(remove))


def _unwrap_active_job(value: Any) -> Any:
    """ActiveJob's serialised argument as the job sees it: GlobalIDs as URIs, no ``_aj_`` keys."""
    if isinstance(value, list):
        return [_unwrap_active_job(item) for item in value]
    if isinstance(value, dict):
        if GLOBALID_KEY in value:
            return value[GLOBALID_KEY]
        return {key: _unwrap_active_job(item) for key, item in value.items()
                if not str(key).startswith(ACTIVE_JOB_KEY_PREFIX)}
    return value


def _str_or_empty(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _optional_text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
