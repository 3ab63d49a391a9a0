"""Database connections around each job, as Django's request cycle handles them: stale or
broken connections closed before and after (``CONN_MAX_AGE`` honoured), the query log
reset, so a long-running worker neither reuses a dead connection nor grows without end."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import db

__all__ = ["close_old_connections_around"]


def close_old_connections_around(job: Any, payload: dict[str, Any], queue: str,
                                 call_next: Callable[[], Any]) -> Any:
    db.reset_queries()
    db.close_old_connections()
    try:
        return call_next()
    finally:
        db.close_old_connections()
