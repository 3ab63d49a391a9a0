"""Logging: the ``wurk`` logger, its formats, and the per-job context on every line.

1. ``setup`` installs one handler on the ``wurk`` logger (stdout), in the pretty, plain or
   JSON format (``ts``, ``pid``, ``tid``, ``lvl``, ``msg``, ``ctx``), as Sidekiq's formatters.
   Only the CLI and the in-process worker call it: a library must not configure logging on import.
   ``route_application_logs`` (the worker, once the job modules are loaded) gives the root
   logger the same handler, so a job's own ``logging.getLogger("myapp")`` lines come out
   in wurk's format with the job's context — unless the application configured logging
   itself (a handler of its own anywhere), which is then left exactly as it is.
2. ``job_context`` puts jid, class, queue and the configured payload attributes (``bid``,
   ``tags``) into a context variable that the formatters add to each line logged while the
   job runs — by wurk or by the job itself through any logger.
3. ``reopen`` reopens file handlers (USR2), for log rotation.
4. A job's own ``log_level`` (Sidekiq's per-job ``logger.level``) holds while it runs: its
   lines below that level are dropped, and a job asking for ``debug`` gets its debug lines
   even when the worker logs at ``info`` — the logger is lowered the first time such a job
   runs, and every other line is still held to the configured level (``admit``).
5. Every format keeps one record on one line whatever a payload holds: a job class with a
   newline, a NUL or a terminal escape cannot forge a line or repaint a terminal. Pretty
   and plain escape control characters (``wurk.stored``) in the message and in each
   context field, and quote a field holding a space, ``=`` or ``"``; JSON escapes them as
   JSON does, line and paragraph separators and bidi controls included. Tracebacks, and a
   record logged with ``extra={VERBATIM: True}`` (the thread dump), keep their lines.
6. A handler or filter of the application's that raises (a log shipper whose collector is
   down) costs the line, never the job: the job's own lines (``start``, ``done``, ``fail``)
   and the errors reported without an error handler are written through a guard that says
   on stderr what failed, as ``logging`` does for a handler that fails to write, and the
   job's bookkeeping (its acknowledgement, its retry) goes on.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import functools
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any, TextIO

from . import payload as P
from .stored import UNPRINTABLE_CHARS, printable

__all__ = ["JOB_FIELDS", "JOB_LEVEL", "VERBATIM", "admit", "job_context", "job_level",
           "level_number", "log_error", "logger", "reopen", "route_application_logs", "setup",
           "short_id", "tid", "unwritten", "user_configured"]

logger = logging.getLogger("wurk")
_context: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "wurk_job_context", default=None
)
# The variable itself, for the processor to set and reset around every job without the
# calls of a ``job_context`` block.
JOB_FIELDS = _context
_HANDLER_MARK = "_wurk_handler"
# ``extra={VERBATIM: True}``: the message is several lines on purpose (a thread dump).
VERBATIM = "wurk_verbatim"
# The running job's own level (its ``log_level`` option), set around it by the processor.
JOB_LEVEL: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "wurk_job_level", default=None)
# The configured level (``setup``): what every line outside a job with a level of its own
# is held to, even after a job lowered the logger itself.
_threshold = logging.INFO
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
           "warning": logging.WARNING, "error": logging.ERROR, "fatal": logging.CRITICAL,
           "critical": logging.CRITICAL}


def level_number(name: Any) -> int | None:
    """A level name as Sidekiq and Python spell them (``debug`` … ``fatal``/``critical``, any
    case) as its number; None for anything else."""
    return _LEVELS.get(name.lower()) if isinstance(name, str) else None


def job_level(name: Any) -> contextvars.Token[int | None]:
    """Hold the running job's lines to its ``log_level`` (None: the configured level); reset
    with the token. A level below the logger's lowers the logger, once."""
    number = level_number(name)
    if number is not None and number < logger.getEffectiveLevel():
        logger.setLevel(number)
        root = logging.getLogger()
        if any(getattr(h, _HANDLER_MARK, False) for h in root.handlers) \
                and number < root.getEffectiveLevel():
            root.setLevel(number)  # the job's own loggers, routed to wurk's handler
    return JOB_LEVEL.set(number)


def admit(levelno: int) -> bool:
    """Whether a line of ``levelno`` is written now: the job's level while one with a level
    of its own runs, else the configured one."""
    level = JOB_LEVEL.get()
    return levelno >= (_threshold if level is None else level)


_thread_ids = threading.local()


def tid() -> str:
    """A short, stable id for the current thread, as Sidekiq shows it (base 36)."""
    value: str | None = getattr(_thread_ids, "tid", None)
    if value is None:
        value = _thread_ids.tid = _base36(threading.get_ident() ^ os.getpid())
    return value


def short_id(number: int) -> str:
    """A short id in the style of ``tid`` for something that is not a thread (an async
    job's task): the heartbeat's work map keys each running job by one."""
    return _base36_of(number ^ os.getpid())


def line(level: int, message: str, *args: Any) -> None:
    """``logger.log`` without the caller lookup: the job log lines are on every job's path,
    and finding the calling frame costs more than formatting the line.

    While the ``wurk`` logger is configured as ``setup`` left it (its one handler, that
    handler's one filter and one of our formats, the standard logger and record classes),
    an informational line goes straight to the handler: what it writes is what the full
    path would write, at about half the CPU (a ``done`` line per job is the largest cost
    of a no-op job after its round trips). Any other handler, filter, format or record
    factory, and every warning, takes the full path.
    """
    if not logger.isEnabledFor(level) or not admit(level):
        return
    handler = _sole_handler(level)
    if handler is not None:
        handler.write_line(level, message, args)
    else:
        record = logger.makeRecord(logger.name, level, "", 0, message, args, None)
        try:
            logger.handle(record)
        except RecursionError:
            raise
        except Exception:  # a handler or filter of the user's that raises (point 6)
            unwritten(record)


# Reports a line a handler raised on, as a handler reports its own failure to write one.
_REPORTER = logging.Handler()


def unwritten(record: logging.LogRecord) -> None:
    """Say on stderr (as ``logging.Handler.handleError`` does, when ``logging
    .raiseExceptions``) that ``record`` could not be logged: called with the exception a
    handler of the user's raised being handled, instead of letting it through the job's
    bookkeeping (point 6)."""
    _REPORTER.handleError(record)


def _sole_handler(level: int) -> BufferedStreamHandler | None:
    """The handler ``setup`` installed, when nothing else could see or change the record."""
    handlers = logger.handlers
    if level >= logging.WARNING or len(handlers) != 1 or logger.filters \
            or type(logger) is not logging.Logger \
            or logging.getLogRecordFactory() is not logging.LogRecord:
        return None
    handler = handlers[0]
    if not isinstance(handler, BufferedStreamHandler) or level < handler.level:
        return None
    filters = handler.filters
    if len(filters) != 1 or type(filters[0]) is not _ContextFilter \
            or type(handler.formatter) not in _RENDERERS:
        return None
    return handler


def info(message: str, *args: Any) -> None:
    line(logging.INFO, message, *args)


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    number = abs(number)
    text = ""
    while True:
        number, rest = divmod(number, 36)
        text = digits[rest] + text
        if not number:
            return text


# Two per async job (its busy entry, its stop target), of addresses the allocator hands out
# again and again: remembered rather than divided out digit by digit each time.
_base36_of = functools.lru_cache(maxsize=4096)(_base36)


class job_context:
    """The job's fields on every log line within the block. A class, not a generator: it
    wraps every job, and this is the cheaper of the two. The mapping must not change once
    given: a kept line reads it when written (``BufferedStreamHandler.write_line``)."""

    __slots__ = ("_fields", "_token")

    def __init__(self, fields: Mapping[str, Any]) -> None:
        self._fields = fields

    def __enter__(self) -> None:
        self._token = _context.set(self._fields)

    def __exit__(self, *exc_info: object) -> None:
        _context.reset(self._token)


def current_context() -> Mapping[str, Any] | None:
    return _context.get()


class _ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not admit(record.levelno):
            return False
        record.wurk_ctx = _context.get() or {}
        record.wurk_tid = tid()
        return True


class _Stamp:
    """ISO-8601 UTC seconds, formatted once per second rather than once per line."""

    __slots__ = ("second", "text")

    def __init__(self) -> None:
        self.second = -1
        self.text = ""

    def __call__(self, created: float) -> str:
        second = int(created)
        if second != self.second:
            self.text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self.second = second
        return self.text


class _Renderer(logging.Formatter):
    """A format of ours: ``render`` makes the line from its parts, for ``format`` (a record)
    and for ``line``'s direct path alike, so both write the same text."""

    def render(self, created: float, levelname: str, message: str,
               ctx: Mapping[str, Any] | None, thread: str, pid: int | None,
               verbatim: bool = False) -> str:
        raise NotImplementedError

    def format(self, record: logging.LogRecord) -> str:
        text = self.render(record.created, record.levelname, record.getMessage(),
                           getattr(record, "wurk_ctx", None), getattr(record, "wurk_tid", ""),
                           record.process, getattr(record, VERBATIM, False))
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class PrettyFormatter(_Renderer):
    """``2024-01-01T00:00:00.000Z pid=1 tid=ab class=X jid=… INFO: msg``."""

    def __init__(self) -> None:
        super().__init__()
        self._stamp = _Stamp()

    def render(self, created: float, levelname: str, message: str,
               ctx: Mapping[str, Any] | None, thread: str, pid: int | None,
               verbatim: bool = False) -> str:
        # Every job's done line comes through here: the common case is kept to built-in
        # calls (the stamp's cache looked at in place, the text checked by isprintable).
        stamp = self._stamp
        second = int(created)
        day = stamp.text if second == stamp.second else stamp(created)
        fields = _fields(ctx) if ctx else ""
        text = message if verbatim or message.isprintable() else printable(message)
        return f"{day}.{int((created - second) * 1000):03d}Z pid={pid} tid={thread}" \
            f"{' ' + fields if fields else ''} {levelname}: {text}"


class PlainFormatter(PrettyFormatter):
    """Like pretty, without the timestamp (for systemd/journald, which adds its own)."""

    def render(self, created: float, levelname: str, message: str,
               ctx: Mapping[str, Any] | None, thread: str, pid: int | None,
               verbatim: bool = False) -> str:
        return super().render(created, levelname, message, ctx, thread, pid,
                              verbatim).split(" ", 1)[1]


class JsonFormatter(_Renderer):
    def format(self, record: logging.LogRecord) -> str:
        entry = self._entry(record.created, record.levelname, record.getMessage(),
                            getattr(record, "wurk_ctx", None), getattr(record, "wurk_tid", ""),
                            record.process)
        if record.exc_info:
            entry["ex"] = self.formatException(record.exc_info)
        return _json(entry)

    def render(self, created: float, levelname: str, message: str,
               ctx: Mapping[str, Any] | None, thread: str, pid: int | None,
               verbatim: bool = False) -> str:
        # JSON escapes every character that needs it: the message goes in as logged.
        return _json(self._entry(created, levelname, message, ctx, thread, pid))

    @staticmethod
    def _entry(created: float, levelname: str, message: str, ctx: Mapping[str, Any] | None,
               thread: str, pid: int | None) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
            + f".{int((created - int(created)) * 1000):03d}Z",
            "pid": pid, "tid": thread, "lvl": levelname, "msg": message,
        }
        if ctx:
            entry["ctx"] = dict(ctx)
        return entry


_RENDERERS = (PrettyFormatter, PlainFormatter, JsonFormatter)


def _json(entry: dict[str, Any]) -> str:
    return _SEPARATORS.sub(_json_escape, json.dumps(entry, default=str, ensure_ascii=False))


# JSON leaves these raw with ensure_ascii=False; some viewers break lines at the first two and
# reorder text at the rest. Written as \uXXXX escapes, the decoded text is unchanged.
_SEPARATORS = re.compile("[\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _plain(value: Any) -> str:
    text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return printable(text)


# A context field is key=value: a value with a space, '=' or '"' would read as more fields.
_NEEDS_QUOTES = re.compile(r'[\s="]')
# Any character that makes a value need escaping or quoting: text without one is written as
# it is, which is what a job's jid, class and queue almost always are.
_NEEDS_CARE = re.compile(f'[\\s="{UNPRINTABLE_CHARS}]')
# Context keys come from the code and the configuration, a handful of names: made printable
# once each. Bounded, so a context built from data cannot grow it without end.
_KEY_TEXT: dict[str, str] = {}
_KEY_TEXT_LIMIT = 64
# The keys seen so far that are plain text themselves (the fast path of ``_fields`` writes
# them as they are); filled by ``_key`` within its limit.
_PLAIN_KEYS: set[str] = set()


def _fields(ctx: Mapping[str, Any]) -> str:
    """``key=value …`` for the line: the careful path (escape, quote) only for a context
    whose keys or values are not all plain non-empty text.

    Plain is checked with built-ins (no regular expression, no call per field): text that
    ``isprintable`` has none of the unprintable characters and no whitespace but the space,
    so with no space, ``=`` or ``"`` it needs neither escaping nor quotes."""
    values = list(ctx.values())
    try:
        joined = "".join(values)
    except TypeError:  # a value that is not text: a list of tags, a number, None
        joined = None
    if joined is not None and "" not in values and joined.isprintable() \
            and " " not in joined and "=" not in joined and '"' not in joined \
            and _PLAIN_KEYS.issuperset(ctx):
        return " ".join(map("=".join, ctx.items()))
    return " ".join(f"{_key(key)}={_field(value)}" for key, value in ctx.items())


def _key(key: Any) -> str:
    text = _KEY_TEXT.get(key) if type(key) is str else None
    if text is None:
        text = _plain(key)
        if type(key) is str and len(_KEY_TEXT) < _KEY_TEXT_LIMIT:
            _KEY_TEXT[key] = text
            if text == key and key and _NEEDS_CARE.search(key) is None:
                _PLAIN_KEYS.add(key)
    return text


def _field(value: Any) -> str:
    text = _plain(value)
    if text and not _NEEDS_QUOTES.search(text):
        return text
    return '"' + text.replace('"', '\\"') + '"'


# A write is a system call, dear on a busy worker (and, with threads, a hand-over of the GIL):
# the lines logged while a job runs (its ``done``, the job's own) are kept in the handler and
# written together at most this often, and by the launcher's flusher when the worker goes
# idle. The rest — boot, stop, a swarm replacing a child: rare, and read in order with other
# processes' lines on a shared stdout — and warnings, errors and terminals go out at once.
# The handler keeps them itself rather than trusting the stream's buffer, which
# ``PYTHONUNBUFFERED=1`` (common in container images) turns into one write per line.
FLUSH_INTERVAL = 0.25
# Kept lines are written once this many wait, whatever the clock says (about 55 KiB of
# ``done`` lines).
BUFFER_LINES = 500


class _Buffered:
    """Mixin for stream handlers: lines gathered in the handler, written and flushed by time
    and severity, not on every line.

    The lines wait in a deque, which threads append to without the handler's lock (its
    appends and pops are atomic): a job's ``done`` line (``write_line``) takes the lock only
    when it is the one to flush. Whoever holds the lock drains the deque in order
    (``write_kept``); a line appended meanwhile waits for the next flush. A waiting line is
    text (a record ``emit`` formatted) or the parts of one (``write_line``), rendered when
    written: several hundred lines rendered in one loop cost less CPU than the same lines
    each rendered between two jobs' steps (measured on a busy worker: 7-12 % less CPU a
    no-op job, docs/worker.md)."""

    _last_flush = 0.0
    _interactive: bool | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: collections.deque[str | _Parts] = collections.deque()

    def flush_due(self, levelno: int, in_job: bool) -> bool:
        if self._interactive is None:
            isatty = getattr(getattr(self, "stream", None), "isatty", None)
            self._interactive = bool(isatty and isatty())
        now = time.monotonic()
        if levelno >= logging.WARNING or self._interactive or not in_job \
                or now - self._last_flush >= FLUSH_INTERVAL \
                or len(self._pending) >= BUFFER_LINES:
            self._last_flush = now
            return True
        return False

    def keep(self, text: str) -> None:
        self._pending.append(text)

    def write_kept(self, stream: TextIO | None) -> None:
        """Write what waits, in order; the caller holds the lock (the only one to pop)."""
        pending, texts = self._pending, []
        while pending:
            item = pending.popleft()
            if type(item) is str:
                texts.append(item)
            else:
                text = self.render_parts(item)  # type: ignore[arg-type]
                if text is not None:
                    texts.append(text)
        if texts and stream is not None:
            stream.write("".join(texts))

    def render_parts(self, parts: _Parts) -> str | None:
        raise NotImplementedError


# What ``write_line`` keeps of a line: the formatter, the time, the level's name, the message
# and its arguments, the job's context, the thread and the process.
_Parts = tuple[Any, float, str, str, "tuple[Any, ...]", "Mapping[str, Any] | None", str,
               "int | None"]


class BufferedStreamHandler(_Buffered, logging.StreamHandler):  # type: ignore[type-arg]
    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.keep(self.format(record) + self.terminator)
            if self.flush_due(record.levelno, bool(getattr(record, "wurk_ctx", None))):
                self.flush()
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)

    def write_line(self, level: int, message: str, args: tuple[Any, ...] = ()) -> None:
        """What ``handle`` of a record of ``message % args`` would write, without the
        record: the caller (``line``) made sure no filter, format or other handler of the
        user's is there to see one. A failure is reported as ``emit`` reports one.

        Every job's ``done`` line comes through here: it keeps the line's parts, as they
        are now (the time, the thread, the job's context), to be rendered when written
        (``render_parts``). The context is a mapping nobody changes once set (the processor
        makes one a job), so the line reads as it would have read now; ``args`` are
        formatted into the message then too, as ``logging`` formats a record's."""
        ctx = _context.get()
        pending = self._pending
        pending.append((self.formatter, time.time(),
                        _LEVEL_NAMES.get(level) or logging.getLevelName(level), message, args,
                        ctx,
                        getattr(_thread_ids, "tid", None) or tid(),
                        (_pid if _pid is not None else os.getpid())
                        if logging.logProcesses else None))
        # ``flush_due`` decides, under the lock; most lines are plainly not due, told
        # without either.
        if level >= logging.WARNING or not ctx or self._interactive is not False \
                or time.monotonic() - self._last_flush >= FLUSH_INTERVAL \
                or len(pending) >= BUFFER_LINES:
            self.acquire()
            try:
                if self.flush_due(level, bool(ctx)):
                    self.flush()
            except RecursionError:
                raise
            except Exception:
                self.handleError(logger.makeRecord(logger.name, level, "", 0, message, args,
                                                   None))
            finally:
                self.release()

    def render_parts(self, parts: _Parts) -> str | None:
        """The text of a line ``write_line`` kept; None, reported as ``emit`` reports a
        failure, when it cannot be rendered (the other lines are written)."""
        formatter, created, levelname, message, args, ctx, thread, pid = parts
        try:
            return str(formatter.render(created, levelname, message % args if args else message,
                                        ctx, thread, pid)) + self.terminator
        except RecursionError:
            raise
        except Exception:
            record = logger.makeRecord(logger.name, logging.INFO, "", 0, message, args, None)
            record.created, record.levelname = created, levelname
            self.handleError(record)
            return None

    def flush(self) -> None:
        self.acquire()
        try:
            self.write_kept(self.stream)
        finally:
            self.release()
            super().flush()

    def close(self) -> None:
        # Lines still kept are written, not lost with the handler — unless its owner closed
        # the stream first: then there is nothing left to write to.
        with contextlib.suppress(OSError, ValueError):
            self.flush()
        super().close()


class BufferedFileHandler(BufferedStreamHandler, logging.FileHandler):
    """A file handler (reopened on USR2) that writes as ``BufferedStreamHandler`` does."""

    def emit(self, record: logging.LogRecord) -> None:
        if self.stream is None:
            self.stream = self._open()
        BufferedStreamHandler.emit(self, record)

    def write_line(self, level: int, message: str, args: tuple[Any, ...] = ()) -> None:
        if self.stream is None:
            self.stream = self._open()
        BufferedStreamHandler.write_line(self, level, message, args)


# This process's id for the direct path: ``os.getpid`` is a system call, one per job line
# otherwise. Set by ``setup``, which also has a forked child set its own.
_pid: int | None = None
_fork_hook = False


def _process_id() -> int:
    return _pid if _pid is not None else os.getpid()


# The standard level names, looked up without a call (``logging.getLevelName`` for others).
_LEVEL_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARNING",
                logging.ERROR: "ERROR", logging.CRITICAL: "CRITICAL"}


def _remember_pid() -> None:
    global _pid
    _pid = os.getpid()


def flush() -> None:
    """Flush the ``wurk`` logger's handlers (the launcher calls this when idle and at exit).
    A stream its owner closed (a host that closed stdout, a test's captured output) loses
    the lines kept for it, as ``close`` does; it never stops the worker's stop."""
    for handler in logger.handlers:
        with contextlib.suppress(OSError, ValueError):
            handler.flush()


FORMATTERS: dict[str, type[logging.Formatter]] = {
    "pretty": PrettyFormatter, "plain": PlainFormatter, "json": JsonFormatter,
}


def setup(*, fmt: str = "pretty", level: str | int = "INFO", stream: TextIO | None = None,
          logfile: str | None = None) -> logging.Handler:
    """Give the ``wurk`` logger one handler in the chosen format (replacing ours, if any).
    A ``logfile`` that cannot be opened raises ``OSError`` before anything is replaced."""
    handler: logging.Handler = (
        BufferedFileHandler(logfile) if logfile
        else BufferedStreamHandler(stream or sys.stdout)
    )
    root = logging.getLogger()
    for owner in (logger, root):
        for existing in list(owner.handlers):
            if getattr(existing, _HANDLER_MARK, False):
                owner.removeHandler(existing)
                existing.close()
    global _fork_hook
    _remember_pid()
    if not _fork_hook and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_remember_pid)
        _fork_hook = True
    setattr(handler, _HANDLER_MARK, True)
    handler.setFormatter(FORMATTERS[fmt]())
    handler.addFilter(_ContextFilter())
    logger.addHandler(handler)
    logger.setLevel(level if isinstance(level, int) else level.upper())
    global _threshold
    _threshold = logger.level
    logger.propagate = False
    return handler


def user_configured() -> bool:
    """Whether the process set up logging of its own: a handler that is not wurk's on the
    root logger or any other (the ``NullHandler`` a library adds to stay quiet aside)."""
    loggers = [logging.getLogger(), *(item for item in logging.root.manager.loggerDict.values()
                                      if isinstance(item, logging.Logger))]
    return any(not getattr(handler, _HANDLER_MARK, False)
               and not isinstance(handler, logging.NullHandler)
               for each in loggers for handler in each.handlers)


def route_application_logs(handler: logging.Handler, level: str | int) -> bool:
    """Send every logger's records to ``handler`` (wurk's) at ``level``, unless the process
    configured logging itself; True when it did. Records of ``wurk`` itself still go to
    ``handler`` once (that logger does not propagate)."""
    if user_configured():
        return False
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level if isinstance(level, int) else level.upper())
    return True


def reopen() -> None:
    """Close and reopen every file handler of the ``wurk`` logger (after log rotation). A
    file that cannot be opened raises ``OSError`` and leaves its handler writing to the old
    one: closed first, every later line would try to open it again and raise."""
    for handler in logger.handlers:
        if isinstance(handler, logging.FileHandler):
            handler.acquire()
            try:
                stream = handler._open()
                handler.close()  # lines kept for the old file go to it first
                handler.stream = stream
            finally:
                handler.release()


def log_error(exc: BaseException, context: dict[str, Any], config: object = None) -> None:
    """The default error handler, first in every ``config.error_handlers``
    (``wurk.reporting``): one line at ERROR (``context (job Class jid=…): Class: message``),
    the traceback at DEBUG. A logging handler that raises is said on stderr (``unwritten``),
    never raised into the job's bookkeeping. Here, not in ``wurk.reporting``, so that the
    configuration's default list names it without importing what imports the configuration."""
    where = context.get("context", "error")
    job = context.get("job")
    about = ""
    if isinstance(job, dict):
        about = f" (job {job.get(P.CLASS)!s} jid={job.get(P.JID)!s})"
    args = (where, about, P.error_class_name(exc), P.error_message(exc))
    try:
        logger.error("%s%s: %s: %s", *args)
        logger.debug("traceback of the error above",
                     exc_info=(type(exc), exc, exc.__traceback__))
    except RecursionError:
        raise
    except Exception:
        unwritten(logger.makeRecord(logger.name, logging.ERROR, "", 0, "%s%s: %s: %s", args,
                                    None))
