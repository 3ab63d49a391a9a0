"""Logging: the ``wurk`` logger, its formats, and the per-job context on every line.

1. ``setup`` installs one handler on the ``wurk`` logger (stdout), in the pretty, plain or
   JSON format (``ts``, ``pid``, ``tid``, ``lvl``, ``msg``, ``ctx``), as Sidekiq's formatters.
   Only the CLI and embedded mode call it: a library must not configure logging on import.
2. ``job_context`` puts jid, class, queue and the configured payload attributes (``bid``,
   ``tags``) into a context variable that the formatters add to each line logged while the
   job runs — by wurk or by the job itself through any logger.
3. ``reopen`` reopens file handlers (USR2), for log rotation.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = ["job_context", "logger", "reopen", "setup", "tid"]

logger = logging.getLogger("wurk")
_context: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "wurk_job_context", default=None
)
_HANDLER_MARK = "_wurk_handler"


def tid() -> str:
    """A short, stable id for the current thread, as Sidekiq shows it (base 36)."""
    return _base36(threading.get_ident() ^ os.getpid())


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    number = abs(number)
    text = ""
    while True:
        number, rest = divmod(number, 36)
        text = digits[rest] + text
        if not number:
            return text


@contextmanager
def job_context(fields: Mapping[str, Any]) -> Iterator[None]:
    token = _context.set(fields)
    try:
        yield
    finally:
        _context.reset(token)


def current_context() -> Mapping[str, Any] | None:
    return _context.get()


class _ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.wurk_ctx = _context.get() or {}
        record.wurk_tid = tid()
        return True


class PrettyFormatter(logging.Formatter):
    """``2024-01-01T00:00:00.000Z pid=1 tid=ab class=X jid=… INFO: msg``."""

    def format(self, record: logging.LogRecord) -> str:
        ctx = getattr(record, "wurk_ctx", {}) or {}
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        millis = int(record.msecs)
        fields = " ".join(f"{key}={_plain(value)}" for key, value in ctx.items())
        head = f"{stamp}.{millis:03d}Z pid={record.process} tid={getattr(record, 'wurk_tid', '')}"
        line = f"{head}{' ' + fields if fields else ''} {record.levelname}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class PlainFormatter(PrettyFormatter):
    """Like pretty, without the timestamp (for systemd/journald, which adds its own)."""

    def format(self, record: logging.LogRecord) -> str:
        return super().format(record).split(" ", 1)[1]


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "pid": record.process,
            "tid": getattr(record, "wurk_tid", ""),
            "lvl": record.levelname,
            "msg": record.getMessage(),
        }
        ctx = getattr(record, "wurk_ctx", None)
        if ctx:
            entry["ctx"] = dict(ctx)
        if record.exc_info:
            entry["ex"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def _plain(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


FORMATTERS: dict[str, type[logging.Formatter]] = {
    "pretty": PrettyFormatter, "plain": PlainFormatter, "json": JsonFormatter,
}


def setup(*, fmt: str = "pretty", level: str | int = "INFO", stream: TextIO | None = None,
          logfile: str | None = None) -> logging.Handler:
    """Give the ``wurk`` logger one handler in the chosen format (replacing ours, if any)."""
    for existing in list(logger.handlers):
        if getattr(existing, _HANDLER_MARK, False):
            logger.removeHandler(existing)
            existing.close()
    handler: logging.Handler = (
        logging.FileHandler(logfile) if logfile else logging.StreamHandler(stream or sys.stdout)
    )
    setattr(handler, _HANDLER_MARK, True)
    handler.setFormatter(FORMATTERS[fmt]())
    handler.addFilter(_ContextFilter())
    logger.addHandler(handler)
    logger.setLevel(level if isinstance(level, int) else level.upper())
    logger.propagate = False
    return handler


def reopen() -> None:
    """Close and reopen every file handler of the ``wurk`` logger (after log rotation)."""
    for handler in logger.handlers:
        if isinstance(handler, logging.FileHandler):
            handler.acquire()
            try:
                handler.close()
                handler.stream = handler._open()
            finally:
                handler.release()
